"""The placement pass: pending requests, in arrival order, become intents.

Pure. One pass takes the new arrivals (and, when capacity may have appeared, the requests
waiting for it) in the order the operator first saw them, asks the engine for a host, and
reserves each assignment in the pool's state before the next decision, so no host can go
over its limit however many requests arrive together. A request that cannot be placed waits
with a reason; a request whose shape (protocol, unauthenticated) already failed in the same
pass is not asked again, so a saturated pool costs O(1) engine calls per capacity change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..api import Reason
from .balancer_view import Placement
from .demand import Demand
from .personal import DataStep, PersonalHost, data_step, place_personal
from .pool_state import PoolState
from .records import RequestRecord, query_order
from .status import pending_message, says_pending
from .workloads import Gate


@dataclass(frozen=True, slots=True)
class Assign:
    """Write the assignment (the slot is reserved already)."""

    record: RequestRecord
    placement: Placement
    #: Personal pools: the host is newly the user's; spec.assignedUser is written first.
    claim: bool = False


@dataclass(frozen=True, slots=True)
class Wait:
    """Write that the request waits, and why."""

    record: RequestRecord
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Reject:
    """The request's spec is invalid: it fails."""

    record: RequestRecord


Intent = Assign | Wait | Reject


def place_pending(state: PoolState, now: datetime) -> list[Intent]:
    """One pass in arrival order: the waiting requests too when capacity may have appeared,
    else only the new arrivals (the waiting ones would fail again)."""
    names = set(state.arrivals)
    if state.capacity_changed:
        names.update(state.waiting)
        state.capacity_changed = False
    state.arrivals.clear()
    queue = sorted((n for n in names if n in state.requests), key=lambda n: state.requests[n].seq)
    failed_shapes: dict[tuple[Any, bool], Reason] = {}
    intents: list[Intent] = []
    for name in queue:
        record = state.requests.get(name)
        if record is None or name in state.inflight:
            state.waiting.pop(name, None)
            continue
        intent = decide(state, record, failed_shapes, now)
        if intent is not None:
            intents.append(intent)
    return intents


def decide(
    state: PoolState,
    record: RequestRecord,
    failed_shapes: dict[tuple[Any, bool], Reason],
    now: datetime,
) -> Intent | None:
    """Where one request goes, or why it waits (None: it waits, and says so already)."""
    name = record.meta.name
    if record.demand is None:
        state.waiting.pop(name, None)
        return Reject(record)
    if state.pool is None:
        return wait(state, record, Reason.POOL_NOT_FOUND, f"HostPool {state.name!r} does not exist")
    if state.views.balancer is None:
        message = f"HostPool {state.name!r} is invalid: {state.pool.spec_error}"
        return wait(state, record, Reason.NO_ELIGIBLE_HOST, message)
    demand = record.demand
    if state.pool.spec is not None and state.pool.spec.is_personal:
        return decide_personal(state, record, demand, now)
    shape = (demand.protocol, demand.unauthenticated)
    if demand.user not in state.ledger and shape in failed_shapes:
        reason = failed_shapes[shape]
        return wait(state, record, reason, pending_message(reason))
    placement = state.views.balancer.place(demand)
    if placement.host is None:
        reason = placement.reason
        if starting_host_for(state, demand, now):
            reason = Reason.HOSTS_STARTING  # capacity is on its way: not saturated
        elif reason is Reason.NO_ELIGIBLE_HOST and short_of_ready_hosts(state, demand, now):
            reason = Reason.POOL_SATURATED  # more hosts would help: scaling may add them
        failed_shapes[shape] = reason
        return wait(state, record, reason, pending_message(reason))
    state.waiting.pop(name, None)
    state.pending_said.pop(name, None)
    state.reserve(record, placement, now)
    return Assign(record, placement)


def decide_personal(
    state: PoolState, record: RequestRecord, demand: Demand, now: datetime
) -> Intent | None:
    """A personal pool: the user's own host, a host claimed for them, or a wait."""
    assert state.pool is not None
    spec = state.pool.spec
    assert spec is not None
    scaling = spec.scaling
    can_add = scaling is not None and len(state.hosts) < scaling.max_hosts
    answer = place_personal(
        demand.user,
        personal_hosts(state, demand, now),
        spec.personal_settings.assignment,
        claims=state.personal.claims,
        reconnect=state.ledger.host_of(demand.user),
        can_add=can_add,
    )
    placement = answer.placement
    if placement.host is None:
        start = owned_host(state, demand.user) or kept_host(state, demand.user)
        host_spec = state.hosts[start].spec if start is not None else None
        if (
            start in state.power_off
            and host_spec is not None
            and not host_spec.drain_mode
            and state.personal.data_step(start) in _STARTS
        ):
            state.starts.add(start)  # Start on Connect: its workload is made again
        return wait(state, record, placement.reason, pending_message(placement.reason))
    state.waiting.pop(record.meta.name, None)
    state.pending_said.pop(record.meta.name, None)
    if answer.claim:
        state.personal.claims[placement.host] = demand.user
    state.reserve(record, placement, now)
    return Assign(record, placement, claim=answer.claim)


#: A stopped host starts on its user's connect only when its files are theirs (or are
#: being written down as theirs), or kept for them.
_STARTS = frozenset({DataStep.NONE, DataStep.RECORD, DataStep.KEEP})


def owned_host(state: PoolState, user: str) -> str | None:
    """The user's host in a personal pool (claimed for them, or assigned)."""
    return next((name for name, owner in state.personal.owners().items() if owner == user), None)


def kept_host(state: PoolState, user: str) -> str | None:
    """The host without a user keeping this user's files for them (Automatic pools give it
    back to them on connect)."""
    return next((name for name, former in state.personal.kept().items() if former == user), None)


def personal_hosts(state: PoolState, demand: Demand, now: datetime) -> list[PersonalHost]:
    """The pool's hosts in query order as personal placement sees them (a host that cannot
    serve this request's protocol or access counts as closed)."""
    found: list[tuple[int, str, PersonalHost]] = []
    for name, host in state.hosts.items():
        if host.spec is None or name in state.removing:
            continue
        view = state.views.view(host, now)
        workload = state.workload_state(host, now)
        data = state.personal.host_data(host)
        found.append(
            (
                query_order(host.meta.created),
                name,
                PersonalHost(
                    name=name,
                    user=host.spec.assigned_user,
                    open=view is not None and not view.drain_mode and view.supports(demand),
                    sessions=view.sessions if view is not None else 0,
                    # A stopped host starts when its user connects: on its way too.
                    starting=(workload is not None and workload.starting)
                    or name in state.power_off,
                    data=DataStep.NONE if data is None else data_step(data),
                    data_of=None if data is None else data.data_of,
                ),
            )
        )
    return [entry for _, _, entry in sorted(found, key=lambda item: (item[0], item[1]))]


def starting_host_for(state: PoolState, demand: Demand, now: datetime) -> bool:
    """Some host the operator added, still starting, could take this request."""
    for name in state.workloads:  # hosts with a listed workload: nothing to do for others
        host = state.hosts.get(name)
        if host is None or host.spec is None or host.spec.drain_mode or name in state.removing:
            continue
        workload = state.workload_state(host, now)
        if workload is not None and workload.starting:
            view = state.views.view(host, now)
            if view is not None and view.supports(demand):
                return True
    return False


def short_of_ready_hosts(state: PoolState, demand: Demand, now: datetime) -> bool:
    """Every host that could take this request (features, not in drain mode) is full or
    has no Ready workload, and at least one has none: the pool lacks machines, which adding
    hosts fixes (the engine alone would say NoEligibleHost, as for draining hosts)."""
    assert state.views.balancer is not None
    limit = state.views.balancer.limit
    closed = False
    for host in state.hosts.values():
        if host.spec is None or host.spec.drain_mode or host.meta.name in state.removing:
            continue
        view = state.views.view(host, now)
        if view is None or not view.supports(demand):
            continue
        workload = state.workload_state(host, now)
        if workload is not None and workload.gate is not Gate.OPEN:
            closed = True
        elif view.sessions < limit:
            return False  # a Ready host with room turned it away (logon-storm limits)
    return closed


def wait(state: PoolState, record: RequestRecord, reason: Reason, message: str) -> Wait | None:
    """The request waits; a write only when it does not say so already (or is being told)."""
    name = record.meta.name
    state.waiting[name] = None
    if state.pending_said.get(name) == reason:
        return None  # written, or being written, already
    state.pending_said[name] = reason
    if says_pending(record, reason):
        return None  # the stored status says so: no write
    return Wait(record, reason, message)
