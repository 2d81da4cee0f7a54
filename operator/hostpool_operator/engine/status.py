"""What the operator writes into status: every body, condition, reason and count.

Pure functions of observed state and ``now``: the request status of an assignment, a wait
or a failure; a host's status (Available with its reason, MetricsStale, load index, bucket,
sessions); a pool's status (Ready, Saturated, ScalingLimited, counts); and the rule that
decides when a changed pool status is worth a write during a storm.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..api import Phase, PowerState, Reason, SessionState
from ..api import conditions as cond
from ..api.request import ConnectOutcome, ConnectPhase
from ..api.timestamps import parse_time, rfc3339
from ..api.vocabulary import POOL_LABEL
from ..diagnostics import connects
from .balancer_view import BalancerHost, Placement
from .balancing import PoolBalancer
from .horizon import logon_storm_block
from .ledger import SessionLedger
from .records import HostRecord, PoolRecord, RequestRecord
from .workloads import Gate, WorkloadState

#: Session counts by state, per host and (under None) for the whole pool.
SessionCounts = dict[str | None, dict[str, int]]

#: HostPool status fields that only count: during a storm they change with every placement.
POOL_COUNT_FIELDS = frozenset({"hosts", "sessions", "capacity", "pendingRequests"})


def zero_counts() -> dict[str, int]:
    return {"total": 0, "connecting": 0, "active": 0, "disconnected": 0}


# ---------------------------------------------------------------------------- requests


def assigned_status(
    record: RequestRecord,
    placement: Placement,
    address: str | None,
    now: datetime,
    host_start: float | None = None,
) -> dict[str, Any]:
    """The request's status once it holds a session on ``placement.host``: the stored status
    with the decision on top (the write replaces the whole status), without empty fields.
    The connect under way gets its queue (and ``host_start``: seconds it waited for a host
    to start), riding this write."""
    reason = placement.reason.value
    if placement.reason is Reason.RECONNECTED:
        message = f"reconnected to the session on {placement.host}"
    elif placement.reason is Reason.PERSONAL:
        message = f"new session on the user's own host {placement.host}"
    else:
        message = f"new session on {placement.host}"
    decision = {
        "observedGeneration": record.meta.generation,
        "phase": Phase.ASSIGNED.value,
        "host": placement.host,
        "hostAddress": address,
        "reason": reason,
        "message": message,
        "sessionState": SessionState.CONNECTING.value,
        "assignedAt": rfc3339(now),
        # Written with sessionState, as whoever changes it does (the session limits time a
        # state from it).
        "stateChangedAt": rfc3339(now),
        "conditions": cond.merge(
            record.status.get("conditions"),
            [cond.Cond("Assigned", "True", reason, message)],
            now=now,
            generation=record.meta.generation,
        ),
    }
    stored = record.status
    decision["connects"] = (
        connects.assigned(
            connects.connects_of(stored),
            mark=connects.BrokerMark.parse(record.connect_mark),
            seed=record.meta.uid,
            created=parse_time(record.meta.created),
            now=now,
            host_start=host_start,
            reconnect=placement.reason is Reason.RECONNECTED,
        )
        or None
    )
    status = {**stored, **decision}
    return {key: value for key, value in status.items() if value is not None}


def pending_message(reason: Reason) -> str:
    if reason is Reason.POOL_SATURATED:
        return "every host that could take this session is at maxSessionLimit"
    if reason is Reason.HOSTS_STARTING:
        return "hosts added for this pool are starting; placed as soon as one is Ready"
    if reason is Reason.NO_HOST_ASSIGNED:
        return "no desktop is assigned to this user in the personal pool, and none is free"
    return "no host can take a new session now (drain mode, features or logon-storm limits)"


def _unassigned(
    record: RequestRecord, phase: Phase, reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """A merge patch: the phase, and condition Assigned False with the reason."""
    return {
        "observedGeneration": record.meta.generation,
        "phase": phase.value,
        "message": message,
        "conditions": cond.merge(
            record.status.get("conditions"),
            [cond.Cond("Assigned", "False", reason, message)],
            now=now,
            generation=record.meta.generation,
        ),
    }


def pending_status(
    record: RequestRecord, reason: Reason, message: str, now: datetime
) -> dict[str, Any]:
    """A merge patch: the request waits, with the reason (host and address cleared)."""
    status = _unassigned(record, Phase.PENDING, reason.value, message, now)
    return {**status, "reason": reason.value, "host": None, "hostAddress": None}


def failed_status(
    record: RequestRecord, reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """A merge patch: phase Failed, condition Assigned False with the reason, and no
    logoff. A logoff is an order to the host's agent, which acts only on Assigned requests:
    on a Failed one nobody would ever carry it out, and the request would read as a session
    still ending (the broker kept its user waiting for good). The session is over, which is
    all a logoff asks; cleared whether or not this copy shows one, as one may have landed
    just before."""
    body = {**_unassigned(record, Phase.FAILED, reason, message, now), "logoff": None}
    stored = connects.connects_of(record.status)
    if connects.under_way(stored) is not None:
        # The connect under way failed where the request was: waiting, or on its host
        # before the session ran.
        where = (
            ConnectPhase.SESSION_START
            if record.phase == Phase.ASSIGNED.value
            else ConnectPhase.QUEUE
        )
        ending = connects.Ending(ConnectOutcome.FAILED, where, reason, message)
        body["connects"] = connects.record(stored, {}, owner=frozenset(), ending=ending)
    return body


def says_pending(record: RequestRecord, reason: Reason) -> bool:
    """The stored status already says the request waits for this reason."""
    return record.phase == Phase.PENDING.value and record.reason == reason.value


# ---------------------------------------------------------------------------- sessions


def session_counts(ledger: SessionLedger, requests: Mapping[str, RequestRecord]) -> SessionCounts:
    """Sessions by state, per host and (under None) for the whole pool, in one pass.

    A session is connecting within connectingTimeoutSeconds of its assignment unless an
    agent reported otherwise; disconnected when every request holding it says so; active
    otherwise."""
    counts: SessionCounts = {}
    for session in ledger.sessions():
        if session.connecting:
            state = "connecting"
        else:
            states = {requests[h].session_state for h in session.holders if h in requests}
            disconnected = states == {SessionState.DISCONNECTED.value}
            state = "disconnected" if disconnected else "active"
        for key in (session.host, None):
            bucket = counts.setdefault(key, zero_counts())
            bucket["total"] += 1
            bucket[state] += 1
    return counts


# ---------------------------------------------------------------------------- hosts

AVAILABILITY_MESSAGES = {
    "Draining": "drain mode: no new sessions; reconnects still allowed",
    "LogonStormThreshold": "turning new logons away (logon-storm threshold)",
}


def logon_storm_message(balancer: PoolBalancer, view: BalancerHost) -> str:
    """Which logon-storm threshold turns new logons away from the host, and whose it is:
    the host's own (spec.logonStorm) or the pool's (horizon.logonStorm)."""
    load = balancer.load_index_of(view.name)
    block = logon_storm_block(balancer.horizon.logon_storm, view.logon_storm, view.connecting, load)
    if block is None:
        return AVAILABILITY_MESSAGES["LogonStormThreshold"]
    if block.threshold == "connectingSessionThreshold":
        figure = f"{block.value} sessions connecting"
    else:
        figure = f"load index {block.value}"
    field = (
        "this host's spec.logonStorm" if block.source == "host" else "the pool's horizon.logonStorm"
    )
    return (
        f"turning new logons away: {figure}, at or above {field}.{block.threshold} ({block.limit})"
    )


@dataclass(frozen=True, slots=True)
class PoolForHosts:
    """What every host's status reads of its pool, the same for all hosts of one pass."""

    pool_name: str
    pool_exists: bool
    #: The pool's engine (None: the pool's spec is invalid, or it does not exist).
    balancer: PoolBalancer | None
    counts: SessionCounts
    #: Each host's Horizon bucket (empty for the other algorithms).
    buckets: Mapping[str, int]
    metrics_stale_after: float
    now: datetime


def host_status(
    host: HostRecord,
    pool: PoolForHosts,
    *,
    metrics_stale: bool,
    workload: WorkloadState | None = None,
    address: str | None = None,
    power: PowerState | None = None,
    data: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A host's status: Available (and why not), WorkloadReady, MetricsStale, load index,
    bucket, sessions, the address in force and (personal pools) its power. ``data``: why
    its former user's files keep it from being given (reason, message), which wins."""
    name = host.meta.name
    status: dict[str, Any] = {"observedGeneration": host.meta.generation}
    if data is not None:
        desired = [cond.Cond("Available", "False", *data)]
    elif power is PowerState.STOPPED:
        message = "stopped while unused (its volumes are kept); its user's next connect starts it"
        desired = [cond.Cond("Available", "False", "Stopped", message)]
    else:
        desired = [_host_available(host, pool, workload, status)]
    if power is not None:
        status["power"] = power.value
    status["sessions"] = pool.counts.get(name, zero_counts())
    status["address"] = address
    if workload is not None:
        ready = "True" if workload.gate is Gate.OPEN else "False"
        desired.append(cond.Cond("WorkloadReady", ready, workload.reason, workload.message))
    desired.append(_metrics_stale(host, metrics_stale, pool.metrics_stale_after))
    status["conditions"] = cond.merge(
        host.status.get("conditions"), desired, now=pool.now, generation=host.meta.generation
    )
    return status


def _host_available(
    host: HostRecord, pool: PoolForHosts, workload: WorkloadState | None, status: dict[str, Any]
) -> cond.Cond:
    """The host's Available condition; the load index and bucket go into ``status`` when the
    engine holds the host."""
    name = host.meta.name
    balancer = pool.balancer
    view = balancer.host(name) if balancer is not None else None
    if host.spec is None:
        return cond.Cond("Available", "False", "InvalidSpec", host.spec_error or "")
    if not pool.pool_exists:
        message = f"HostPool {pool.pool_name!r} does not exist"
        return cond.Cond("Available", "False", "PoolNotFound", message)
    if balancer is None or view is None:
        return cond.Cond("Available", "False", "PoolInvalid", "the pool's spec is invalid")
    status["loadIndex"] = balancer.load_index_of(name)
    if workload is not None and workload.gate is not Gate.OPEN:
        return cond.Cond("Available", "False", workload.gate.value, workload.message)
    if name in pool.buckets:
        status["bucket"] = pool.buckets[name]
    available, reason = balancer.availability(name)
    if reason == "SessionLimitReached":
        message = f"{view.sessions} sessions, limit {balancer.limit}"
    elif reason == "AcceptingSessions":
        message = f"{view.sessions} of {balancer.limit} sessions"
    elif reason == "LogonStormThreshold":
        message = logon_storm_message(balancer, view)
    else:
        message = AVAILABILITY_MESSAGES[reason]
    return cond.Cond("Available", "True" if available else "False", reason, message)


def _metrics_stale(host: HostRecord, stale: bool, stale_after: float) -> cond.Cond:
    if host.metrics_error:
        return cond.Cond("MetricsStale", "True", "InvalidMetrics", host.metrics_error)
    if stale:
        message = (
            f"metrics older than {stale_after:.0f}s are ignored: the load index "
            "treats them as never reported"
        )
        return cond.Cond("MetricsStale", "True", "SampleTooOld", message)
    return cond.Cond("MetricsStale", "False", "Fresh", "")


# ---------------------------------------------------------------------------- pools


@dataclass(frozen=True, slots=True)
class PoolFacts:
    """What a pool's status is made of, as observed in one pass."""

    host_count: int
    #: The pool's engine (None: its spec is invalid).
    balancer: PoolBalancer | None
    #: Requests neither assigned, failed nor being written.
    pending: int
    #: The reasons the waiting requests' stored statuses give.
    waiting_reasons: Collection[Any]
    #: (limited, message) of the pool's own scaling (None: no scaling, no condition).
    scaling_limited: tuple[bool, str] | None
    counts: SessionCounts
    #: The hosts whose workloads are missing or not Ready.
    not_ready: Collection[str] = ()
    #: (failing, reason, message) for a pool with a workload template: failing while its
    #: workloads cannot be created or watched (None: no template, no condition).
    workload_failure: tuple[bool, str, str] | None = None
    agent_silent: int = 0
    #: The plan the pool follows, with the phase and algorithm in force
    #: (``status.scalingPlan``; None: no plan, and a stored one is cleared).
    scaling_plan: Mapping[str, Any] | None = None
    #: ``status.update`` (None: the pool has no template; a stored one is left as it is).
    update: Mapping[str, Any] | None = None


#: The Updating and UpdateFailed conditions of each update phase: (Updating, its reason,
#: UpdateFailed).
UPDATE_CONDITIONS = {
    "Progressing": ("True", "Progressing", "False"),
    "Paused": ("True", "Paused", "False"),
    "Complete": ("False", "UpdateComplete", "False"),
    "Failed": ("False", "UpdateFailed", "True"),
}


def _update_conditions(update: Mapping[str, Any]) -> list[cond.Cond]:
    """Updating and UpdateFailed, once the pool's template has changed (a phase)."""
    phase = update.get("phase")
    if phase not in UPDATE_CONDITIONS:
        return []
    updating, reason, failed = UPDATE_CONDITIONS[phase]
    message = str(update.get("message") or "")
    failed_reason = "UpdateFailed" if failed == "True" else "NoFailure"
    return [
        cond.Cond("Updating", updating, reason, message),
        cond.Cond("UpdateFailed", failed, failed_reason, message if failed == "True" else ""),
    ]


def pool_status(pool: PoolRecord, facts: PoolFacts, *, now: datetime) -> dict[str, Any]:
    """A pool's status: Ready, Saturated, ScalingLimited, WorkloadFailure and the counts."""
    hosts, capacity = _pool_counts(facts)
    desired = _ready_and_saturated(pool, facts, hosts, capacity)
    if facts.workload_failure is not None:
        desired = _with_workload_failure(desired, *facts.workload_failure)
    if facts.scaling_limited is not None:
        limited, message = facts.scaling_limited
        reason = "MaxHostsReached" if limited else "WithinLimits"
        desired.append(cond.Cond("ScalingLimited", "True" if limited else "False", reason, message))
    if facts.update is not None:
        desired.extend(_update_conditions(facts.update))
    status: dict[str, Any] = {
        "observedGeneration": pool.meta.generation,
        "hosts": hosts,
        "sessions": facts.counts.get(None, zero_counts()),
        "capacity": capacity,
        "pendingRequests": facts.pending,
        # For /scale: the hosts the operator creates for the pool carry this label.
        "selector": f"{POOL_LABEL}={pool.meta.name}",
        "conditions": cond.merge(
            pool.status.get("conditions"), desired, now=now, generation=pool.meta.generation
        ),
    }
    if facts.scaling_plan is not None or pool.status.get("scalingPlan") is not None:
        plan = facts.scaling_plan
        status["scalingPlan"] = None if plan is None else dict(plan)
    if facts.update is not None:
        status["update"] = dict(facts.update)
    return status


def _pool_counts(facts: PoolFacts) -> tuple[dict[str, int], dict[str, int]]:
    """``status.hosts`` and ``status.capacity``: what the engine holds, by state."""
    hosts = {
        "total": facts.host_count,
        "available": 0,
        "draining": 0,
        "full": 0,
        "notReady": 0,
        "agentSilent": facts.agent_silent,
    }
    capacity = {"total": 0, "free": 0}
    balancer = facts.balancer
    if balancer is None:
        return hosts, capacity
    for view in balancer.hosts():
        if view.name in facts.not_ready:
            hosts["notReady"] += 1
        elif view.drain_mode:
            hosts["draining"] += 1
        else:
            capacity["total"] += balancer.limit
        if view.sessions >= balancer.limit:
            hosts["full"] += 1
        if balancer.availability(view.name)[0]:
            hosts["available"] += 1
    capacity["free"] = balancer.free_slots()
    return hosts, capacity


def _ready_and_saturated(
    pool: PoolRecord, facts: PoolFacts, hosts: Mapping[str, int], capacity: Mapping[str, int]
) -> list[cond.Cond]:
    if pool.spec is None:
        return [
            cond.Cond("Ready", "False", "InvalidSpec", pool.spec_error or ""),
            cond.Cond("Saturated", "Unknown", "InvalidSpec", "the spec is invalid"),
        ]
    if hosts["total"] == 0:
        ready = cond.Cond("Ready", "True", "NoHosts", "the pool has no SessionHost yet")
    else:
        message = f"{hosts['available']} of {hosts['total']} hosts take new sessions"
        ready = cond.Cond("Ready", "True", "Reconciled", message)
    reasons = set(facts.waiting_reasons)
    pending = facts.pending
    if Reason.POOL_SATURATED.value in reasons:
        message = f"{pending} request(s) wait for a free session slot"
        saturated = cond.Cond("Saturated", "True", "RequestsWaiting", message)
    elif Reason.HOSTS_STARTING.value in reasons:
        message = f"{pending} request(s) wait for the hosts being started"
        saturated = cond.Cond("Saturated", "True", "HostsStarting", message)
    elif hosts["total"] and capacity["free"] == 0:
        saturated = cond.Cond("Saturated", "True", "NoFreeSessions", "every slot is taken")
    else:
        message = f"{capacity['free']} free slots"
        saturated = cond.Cond("Saturated", "False", "CapacityAvailable", message)
    return [ready, saturated]


def _with_workload_failure(
    desired: list[cond.Cond], failing: bool, reason: str, message: str
) -> list[cond.Cond]:
    """WorkloadFailure; while failing, the pool is not Ready either."""
    if not failing:
        return [*desired, cond.Cond("WorkloadFailure", "False", reason, message)]
    return [
        *(
            cond.Cond("Ready", "False", "WorkloadFailure", message) if c.type == "Ready" else c
            for c in desired
        ),
        cond.Cond("WorkloadFailure", "True", reason, message),
    ]


def is_saturated(status: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether a pool status says Saturated=True, and its message."""
    saturated = cond.find(status.get("conditions"), "Saturated")
    if saturated is None:
        return False, ""
    return saturated.get("status") == "True", str(saturated.get("message", ""))


# ---------------------------------------------------------------------------- comparing


def _without_times(status: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(status)
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions") or []
    ]
    return out


def same_status(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal but for the conditions' lastTransitionTime."""
    return _without_times(a) == _without_times(b)


def ours(current: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``current`` that the operator writes (as ``template`` has them)."""
    return {k: current.get(k) for k in template}


def _pool_status_gist(status: Mapping[str, Any]) -> dict[str, Any]:
    """A pool status without its counts: every other field, and each condition's type, status
    and reason (condition messages quote counts)."""
    gist = {k: v for k, v in status.items() if k not in POOL_COUNT_FIELDS and k != "conditions"}
    gist["conditions"] = sorted(
        (str(c.get("type")), str(c.get("status")), str(c.get("reason")))
        for c in status.get("conditions") or []
    )
    return gist


def pool_status_due(
    previous: Mapping[str, Any] | None,
    status: Mapping[str, Any],
    *,
    busy: bool,
    since_written: float,
    max_delay: float,
) -> bool:
    """Whether a pool's new status is written now.

    A pool status of counts alone would otherwise be written every status interval for as
    long as a storm lasts, per pool: with many pools that is as many writes per second, taken
    from the API server the assignments need. So while placements go on (``busy``), a change
    of counts only waits for the pause, or ``max_delay`` since the last write; anything else
    (a condition's status or reason, observedGeneration) is written at once.
    """
    if previous is None:
        return True
    if same_status(previous, status):
        return False
    if not busy or since_written >= max_delay:
        return True
    return _pool_status_gist(previous) != _pool_status_gist(status)
