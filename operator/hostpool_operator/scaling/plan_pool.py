"""A scaling plan as one pool sees it: the pool's hosts and requests in the plan's terms,
the plan's decision for them, and the algorithm the pool places with.

Pure functions of a :class:`PoolState`, the phase in force and ``now`` (``plans`` holds the
rules themselves). ``controller.pool.plan_keeper`` (with ``plan_writer``) and
``host_scaler`` carry the decision out.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from ..api import HostPoolSpec, Phase, SessionState
from ..engine.pool_state import PoolState
from ..engine.records import RequestRecord, query_order
from ..engine.workloads import Gate
from .plans import PhaseInForce, PlanDecision, PlanHost, PlanRequest, decide_plan


def scaling_required(spec: HostPoolSpec) -> str | None:
    """Why a plan cannot manage this pool (None: it can). A plan's minimum and threshold
    are counted in hosts of ``maxHosts`` and slots of ``maxSessionLimit``, and it adds
    hosts from the pool's template: all three must be the pool's own choice."""
    if spec.scaling is None:
        return "has no scaling (a plan needs scaling.maxHosts and a hostTemplate)"
    if spec.load_balancer.max_session_limit is None:
        return "has no explicit loadBalancer.maxSessionLimit"
    return None


def plan_hosts(state: PoolState, now: datetime) -> list[PlanHost]:
    """The pool's hosts as the plan's rules see them, in query order; hosts being removed
    and hosts with an invalid spec are left out."""
    hosts = []
    for record in sorted(
        state.hosts.values(), key=lambda h: (query_order(h.meta.created), h.meta.name)
    ):
        name = record.meta.name
        if name in state.removing or record.spec is None:
            continue
        workload = state.workload_state(record, now)
        ready = workload is None or workload.gate is Gate.OPEN
        active = 0
        for user in state.ledger.users_on(name):
            session = state.ledger.session_of(user)
            if session is None:
                continue
            states = {
                request.session_state
                for holder in session.holders
                if (request := state.requests.get(holder)) is not None
            }
            if states != {SessionState.DISCONNECTED.value}:
                active += 1  # Connecting or Active (a reserved, unwritten slot counts too)
        hosts.append(
            PlanHost(
                name=name,
                sessions=state.ledger.count_on(name),
                active=active,
                drain_mode=record.spec.drain_mode,
                drained_by_plan=record.plan_drained_at is not None,
                drained_at=record.plan_drained_at,
                managed=record.managed,
                ready=ready,
                starting=record.managed and workload is not None and workload.starting,
            )
        )
    return hosts


def plan_requests(state: PoolState, logoffs_sent: Collection[str] = ()) -> list[PlanRequest]:
    """The requests holding sessions, with their host and whether they carry a logoff
    (stored, or written by this operator and not yet seen)."""
    requests = []
    for _, session in state.ledger.items():
        for holder in sorted(session.holders):
            record = state.requests.get(holder)
            if record is None:
                continue
            logoff = record.logoff or holder in logoffs_sent
            requests.append(PlanRequest(holder, session.host, logoff))
    return requests


def disconnected_on(state: PoolState, host: str) -> list[str]:
    """The requests on ``host`` whose sessions are Disconnected (ZeroActiveSessions ends
    them before the host goes)."""
    names = []
    for user in state.ledger.users_on(host):
        session = state.ledger.session_of(user)
        if session is None:
            continue
        for holder in sorted(session.holders):
            record = state.requests.get(holder)
            if record is not None and record.session_state == SessionState.DISCONNECTED.value:
                names.append(holder)
    return names


def still_disconnected(record: RequestRecord) -> bool:
    """Is this request's session still Disconnected (and its request still assigned)? Checked
    again right before ZeroActiveSessions ends it: the user may have reconnected since the
    decision."""
    return (
        record.phase == Phase.ASSIGNED.value
        and record.session_state == SessionState.DISCONNECTED.value
    )


def decide_for_pool(
    state: PoolState,
    phase: PhaseInForce,
    now: datetime,
    logoffs_sent: Collection[str] = (),
) -> PlanDecision | None:
    """The plan's decision for this pool now (None: the pool is missing, invalid or cannot
    follow a plan, see ``scaling_required``)."""
    spec = state.spec
    if spec is None or state.views.balancer is None or scaling_required(spec) is not None:
        return None
    assert spec.scaling is not None
    return decide_plan(
        phase,
        plan_hosts(state, now),
        state.views.balancer.limit,
        spec.scaling.max_hosts,
        now,
        plan_requests(state, logoffs_sent),
        waiting=len(state.waiting) + len(state.arrivals),
    )
