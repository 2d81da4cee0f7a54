"""A pool's update, read from its state: the operator's hosts as the update sees them, what
the pool's status remembers of the update, and the step.

Pure functions of a :class:`PoolState` and ``now``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..api.base import SessionState
from ..api.timestamps import parse_time
from ..api.update import UpdatePhase, UpdateSpec, UpdateStrategy
from ..api.vocabulary import (
    REPLACED_BY_ANNOTATION,
    TEMPLATE_REVISION_LABEL,
    UPDATE_DRAINED_ANNOTATION,
)
from ..engine.personal import NO_WORKLOAD
from ..engine.pool_state import PoolState
from ..engine.records import HostRecord
from ..engine.workloads import Gate
from .step import RolloutHost, RolloutStep, UpdateHistory, decide


@dataclass(frozen=True, slots=True)
class UpdateLogoff:
    """ForceLogoff: ``status.logoff`` to write on a request of a host the update drained."""

    request: str
    host: str
    message: str
    deadline: datetime


def logoff_message(spec: UpdateSpec, deadline: datetime) -> str:
    """What the notice says: the pool's text, else one with the time of the logoff."""
    if spec.logoff_message:
        return spec.logoff_message
    return (
        "This desktop is being updated to a new image. Save your work: you will be logged "
        f"off at {deadline.strftime('%H:%M')} UTC and can connect again at once."
    )


def annotation(host: HostRecord, key: str) -> str | None:
    metadata = host.body.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    value = annotations.get(key) if isinstance(annotations, Mapping) else None
    return value if isinstance(value, str) and value else None


def ready_since(state: PoolState, host: HostRecord) -> datetime | None:
    """When the host's workload last became Ready (its Ready condition's transition), or
    when the host was made, for a host without a workload."""
    if host.spec is None or host.spec.workload_ref is None:
        return parse_time(host.meta.created)
    workload = state.workloads.get(host.meta.name)
    if workload is None or not workload.ready:
        return None
    conditions = workload.readable.get("status", {}).get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return parse_time(condition.get("lastTransitionTime")) or workload.created
    return workload.created


def agent_failure(
    state: PoolState, host: HostRecord, since: datetime, until: datetime, now: datetime
) -> str | None:
    """What the host's agent reported going wrong from ``since`` to ``until`` (the canary's
    watch), in words (None: nothing):
    a logon it refused (``status.agent.lastLogonRefusal``), or a session assigned to it that
    its agent never saw start within the pool's connecting timeout. (A host without an agent
    reports nothing, so nothing counts against it.)"""
    agent = host.status.get("agent")
    if not isinstance(agent, Mapping) or not agent.get("version"):
        return None
    refusal = agent.get("lastLogonRefusal")
    if isinstance(refusal, Mapping):
        at = parse_time(refusal.get("at"))
        if at is not None and since <= at <= until:
            reason = refusal.get("reason")
            return f"a logon refused ({reason}) at {at.strftime('%H:%M:%S')}, as its agent reports"
    timeout = state.connecting_timeout()
    for user in sorted(state.ledger.users_on(host.meta.name)):
        session = state.ledger.session_of(user)
        for holder in session.holders if session is not None else ():
            record = state.requests.get(holder)
            assigned = record.assigned_at if record is not None else None
            if (
                record is not None
                and assigned is not None
                and since <= assigned <= until
                and record.session_state == SessionState.CONNECTING.value
                and now >= assigned + timeout
            ):
                return (
                    f"the session of {user!r} did not start within {timeout.total_seconds():g} s "
                    "(its agent never saw it)"
                )
    return None


def rollout_hosts(state: PoolState, now: datetime) -> list[RolloutHost]:
    """The hosts the operator made for the pool, except those being removed. While a canary
    is watched, the updated hosts carry what their agents reported going wrong."""
    update = state.spec.update_settings if state.spec is not None else None
    past = history(state)
    passed = past.canary_passed and past.revision == state.revision
    hosts = []
    for name, record in sorted(state.hosts.items()):
        if not record.managed or name in state.removing:
            continue
        view = state.views.view(record, now)
        workload = state.workload_state(record, now)
        not_ready = None
        stopped = name in state.power_off
        if workload is not None and workload.gate is not Gate.OPEN:
            not_ready = workload.message
        if state.personal.data_step(name) in NO_WORKLOAD:
            not_ready, stopped = "its files are being kept or deleted", False
        since = ready_since(state, record)
        revision = record.meta.labels.get(TEMPLATE_REVISION_LABEL)
        failure = None
        if (
            update is not None
            and update.canary is not None
            and not passed
            and since is not None
            and revision == state.revision
        ):
            until = since + timedelta(minutes=update.canary.observe_minutes)
            failure = agent_failure(state, record, since, until, now)
        hosts.append(
            RolloutHost(
                name=name,
                revision=revision,
                sessions=state.ledger.count_on(name),
                serving=view is not None and not view.drain_mode,
                created=parse_time(record.meta.created),
                not_ready=not_ready,
                ready_since=since,
                replaced_by=annotation(record, REPLACED_BY_ANNOTATION),
                drained_at=parse_time(annotation(record, UPDATE_DRAINED_ANNOTATION)),
                stopped=stopped,
                failure=failure,
            )
        )
    return hosts


def history(state: PoolState) -> UpdateHistory:
    """What the pool's status.update says (nothing, when it is missing or malformed)."""
    status = state.pool.status.get("update") if state.pool is not None else None
    if not isinstance(status, Mapping):
        return UpdateHistory()
    try:
        phase: UpdatePhase | None = UpdatePhase(str(status.get("phase")))
    except ValueError:
        phase = None
    revision = status.get("revision")
    message = status.get("message")
    return UpdateHistory(
        phase=phase,
        revision=revision if isinstance(revision, str) else None,
        message=message if isinstance(message, str) else None,
        canary_passed=status.get("canaryPassed") is True,
    )


def step(state: PoolState, now: datetime) -> RolloutStep | None:
    """The update's step now (None: the pool has no template, so no hosts of its own to
    update)."""
    spec = state.spec
    if spec is None or spec.scaling is None or state.revision is None:
        return None
    revision = state.revision
    made = [
        record
        for name, record in state.hosts.items()
        if record.managed and name not in state.removing
    ]
    if all(record.meta.labels.get(TEMPLATE_REVISION_LABEL) in (None, revision) for record in made):
        # Nothing outdated (the usual case, every pass): the decision reads no host's state.
        hosts = [
            RolloutHost(record.meta.name, record.meta.labels.get(TEMPLATE_REVISION_LABEL))
            for record in made
        ]
    else:
        hosts = rollout_hosts(state, now)
    return decide(
        spec.update_settings, revision, hosts, history(state), now, personal=spec.is_personal
    )


def update_logoffs(state: PoolState, sent: Collection[str] = ()) -> list[UpdateLogoff]:
    """ForceLogoff: the requests holding sessions on an outdated host the update drained that
    carry no logoff yet (stored, or ``sent`` and not seen stored): each gets the notice, and
    the logoff ``logoffDelayMinutes`` after the drain."""
    spec = state.spec
    if spec is None or state.revision is None:
        return []
    update = spec.update_settings
    if update.strategy is not UpdateStrategy.FORCE_LOGOFF:
        return []
    orders = []
    for name, host in sorted(state.hosts.items()):
        drained_at = parse_time(annotation(host, UPDATE_DRAINED_ANNOTATION))
        if drained_at is None or not state.is_outdated(host):
            continue
        deadline = drained_at + timedelta(minutes=update.logoff_delay_minutes)
        message = logoff_message(update, deadline)
        for user in sorted(state.ledger.users_on(name)):
            session = state.ledger.session_of(user)
            for holder in sorted(session.holders) if session is not None else ():
                record = state.requests.get(holder)
                if record is not None and not record.logoff and holder not in sent:
                    orders.append(UpdateLogoff(holder, name, message, deadline))
    return orders
