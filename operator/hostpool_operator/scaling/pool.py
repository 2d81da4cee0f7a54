"""A pool's scaling, read from its state: the hosts as scaling sees them, the demand that
waits for capacity, and the decision.

Pure functions of a :class:`PoolState` and ``now``. Hosts the operator added whose workloads
are still starting count as capacity on its way (so one burst never provisions twice); a
host whose workload is missing, not Ready past its timeout, or closed for sessions adds none.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..api import Reason
from ..engine.pool_state import PoolState
from ..engine.records import query_order
from .plans import PlanDecision
from .rules import ScaleHost, ScalingDecision, decide_scaling, hosts_to_add

#: Reasons of requests that wait for capacity (adding hosts helps them).
WAITING_FOR_CAPACITY = frozenset({Reason.POOL_SATURATED, Reason.HOSTS_STARTING})


def holders(state: PoolState) -> dict[str, str]:
    """Personal pools: host -> the user whose host it is, or whose files it keeps for them
    (removing it would delete them; nobody else may take it)."""
    if state.spec is None or not state.spec.is_personal:
        return {}
    return {**state.personal.kept(), **state.personal.owners()}


def waiting_for_capacity(state: PoolState) -> int:
    """Distinct users whose requests wait because every slot is taken (or still starting).
    In a personal pool only users without a host count: another host is no use to a user
    whose own one is starting."""
    owners = holders(state)
    users = set()
    for name, reason in state.pending_said.items():
        record = state.requests.get(name)
        if reason in WAITING_FOR_CAPACITY and record is not None and record.demand is not None:
            users.add(record.demand.user)
    return len(users - set(owners.values()))


def scale_hosts(state: PoolState, now: datetime) -> list[ScaleHost]:
    """The hosts as scaling sees them, in query order (those being removed left out),
    noting since when each operator-created host has been empty."""
    hosts = []
    # A personal pool scales as one slot per host, an assigned host's slot always its
    # user's: never spare capacity, never empty, so never removed.
    owners = holders(state)
    for record in sorted(
        state.hosts.values(), key=lambda h: (query_order(h.meta.created), h.meta.name)
    ):
        name = record.meta.name
        if name in state.removing:
            continue
        view = state.views.balancer.host(name) if state.views.balancer is not None else None
        sessions = state.ledger.count_on(name)
        if name in owners:
            sessions = max(sessions, 1)
        if record.managed and sessions == 0:
            state.empty_since.setdefault(name, now)
        else:
            state.empty_since.pop(name, None)
        workload = state.workload_state(record, now)
        if view is None or record.spec is None:
            closed = True  # a host the engine cannot use (invalid spec) adds no capacity
        elif workload is not None and workload.starting:
            closed = record.spec.drain_mode  # its slots are on their way
        else:
            closed = view.drain_mode
        hosts.append(
            ScaleHost(
                name=name,
                sessions=sessions,
                drain_mode=closed,
                managed=record.managed,
                empty_since=state.empty_since.get(name),
            )
        )
    return hosts


def decide(
    state: PoolState, now: datetime, plan: PlanDecision | None = None
) -> ScalingDecision | None:
    """What scaling does now (None: the pool has no valid scaling spec).

    With a scaling plan's decision (a phase in force): the plan's minimum takes the place of
    ``minHosts``, hosts are added for whichever wants more (the requests waiting or the
    plan's threshold), and only the plan removes hosts (its drained, emptied hosts)."""
    spec = state.spec
    if spec is None or spec.scaling is None or state.views.balancer is None:
        return None
    hosts = scale_hosts(state, now)
    limit = 1 if spec.is_personal else state.views.balancer.limit
    waiting = waiting_for_capacity(state)
    if plan is None:
        return decide_scaling(spec.scaling, limit, hosts, waiting, now)
    own = hosts_to_add(spec.scaling.model_copy(update={"min_hosts": 0}), limit, hosts, waiting)
    add = max(own.add, plan.add)
    limited = own.limited or plan.limited
    maximum = spec.scaling.max_hosts
    if limited:
        message = f"maxHosts {maximum} reached; the scaling plan or waiting requests want more"
    else:
        message = f"{len(hosts)} of at most {maximum} hosts"
    known = {host.name for host in hosts}
    owners = holders(state)
    remove = [
        name
        for name in plan.delete
        if name in known and name not in plan.clear_disconnected and name not in owners
    ]
    return ScalingDecision(add, [] if add else remove, limited, message)


def scale_down_due(state: PoolState, now: datetime) -> datetime | None:
    """When the next running scale-down delay ends. Only delays still running count: a
    host whose delay is over was kept for a reason (minHosts, bufferSessions, waiting
    requests) that only an event can change."""
    spec = state.spec
    if spec is None or spec.scaling is None or not state.empty_since:
        return None
    delay = timedelta(seconds=spec.scaling.scale_down_delay_seconds)
    ends = [since + delay for since in state.empty_since.values() if since + delay > now]
    return min(ends) if ends else None


def start_deadlines(state: PoolState, now: datetime) -> list[datetime]:
    """When each starting host's ready timeout ends (its status and scaling change then)."""
    deadlines = []
    for name in state.workloads:  # only hosts with a listed workload: cheap for other pools
        host = state.hosts.get(name)
        workload = state.workload_state(host, now) if host is not None else None
        if workload is not None and workload.ready_by is not None:
            deadlines.append(workload.ready_by)
    return deadlines
