"""A scaling plan as one pool sees it (``plan_pool``): whether a pool can follow a plan, its
hosts and requests in the plan's terms, the plan's decision for a real ``PoolState``; the
algorithm a phase places with (``PoolState.set_algorithm``); and how the plan's decision
merges into the pool's own scaling (``pool_scaling.decide`` with a plan)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hostpool_operator.api import HostPoolSpec
from hostpool_operator.api.base import LoadBalancerType
from hostpool_operator.api.plan import PlanPhase, PlanRules
from hostpool_operator.api.vocabulary import (
    MANAGED_LABEL,
    MANAGER,
    PLAN_DRAINED_ANNOTATION,
    POOL_LABEL,
)
from hostpool_operator.engine.demand import Demand
from hostpool_operator.engine.placement import Assign
from hostpool_operator.engine.records import RequestRecord
from hostpool_operator.engine.workloads import WorkloadRecord
from hostpool_operator.scaling import pool as pool_scaling
from hostpool_operator.scaling.plan_pool import (
    decide_for_pool,
    disconnected_on,
    plan_hosts,
    plan_requests,
    scaling_required,
    still_disconnected,
)
from hostpool_operator.scaling.plans import (
    LogoffOrder,
    PhaseInForce,
    PlanDecision,
    PlanHost,
    PlanRequest,
    phase_in_force,
)
from support.state_builders import (
    POOL,
    T0,
    Pool,
    assigned,
    at,
    host_obj,
    metadata,
    pool_obj,
    request_obj,
)

Obj = dict[str, Any]
MANAGED = {MANAGED_LABEL: MANAGER, POOL_LABEL: POOL}
T0_TEXT = "2026-01-01T12:00:00Z"  # T0, a Thursday


def managed(name: str, *, created: int = 0, **spec: Any) -> Obj:
    return host_obj(name, created=created, labels=MANAGED, **spec)


def drained_by_plan(obj: Obj, when: str = T0_TEXT) -> Obj:
    """The host as a plan leaves it after draining it: drainMode and the annotation."""
    obj["spec"]["drainMode"] = True
    obj["metadata"]["annotations"] = {PLAN_DRAINED_ANNOTATION: when}
    return obj


def pod(name: str, *, ready: bool) -> Obj:
    return {
        "metadata": metadata(name),
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def workload_ref(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "name": name}


def plan_spec(
    *,
    ramp_down: str = "11:00",
    down_minimum: int = 20,
    threshold: int = 90,
    force: bool = False,
    stop: str = "ZeroSessions",
) -> PlanRules:
    """A UTC plan for every day: at T0 (12:00 UTC) its RampDown is in force."""
    return PlanRules.model_validate(
        {
            "timeZone": "UTC",
            "schedules": [
                {
                    "name": "daily",
                    "daysOfWeek": [
                        "Monday",
                        "Tuesday",
                        "Wednesday",
                        "Thursday",
                        "Friday",
                        "Saturday",
                        "Sunday",
                    ],
                    "rampUp": {
                        "startTime": "07:00",
                        "loadBalancerType": "BreadthFirst",
                        "minimumHostsPercent": 50,
                        "capacityThresholdPercent": 60,
                    },
                    "peak": {"startTime": "09:00", "loadBalancerType": "BreadthFirst"},
                    "rampDown": {
                        "startTime": ramp_down,
                        "loadBalancerType": "DepthFirst",
                        "minimumHostsPercent": down_minimum,
                        "capacityThresholdPercent": threshold,
                        "forceLogoffUsers": force,
                        "waitTimeMinutes": 30,
                        "notificationMessage": "Bye.",
                        "stopHostsWhen": stop,
                    },
                    "offPeak": {"startTime": "20:00", "loadBalancerType": "DepthFirst"},
                }
            ],
        }
    )


def ramp_down(**kw: Any) -> PhaseInForce:
    found = phase_in_force(plan_spec(**kw), T0)
    assert found is not None
    assert found.phase is PlanPhase.RAMP_DOWN
    return found


def scaled_pool(hosts: list[Obj], *, limit: int = 10, **scaling: Any) -> Pool:
    return Pool(pool_obj(limit, scaling={"maxHosts": 10, **scaling}), hosts)


# ---------------------------------------------------------------------------- scaling_required


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 4}},
            "has no scaling (a plan needs scaling.maxHosts and a hostTemplate)",
            id="no-scaling",
        ),
        pytest.param(
            {"loadBalancer": {"type": "BreadthFirst"}, "scaling": {"maxHosts": 3}},
            "has no explicit loadBalancer.maxSessionLimit",
            id="no-explicit-maxSessionLimit",
        ),
        pytest.param(
            {"loadBalancer": {"type": "BreadthFirst"}},
            "has no scaling (a plan needs scaling.maxHosts and a hostTemplate)",
            id="neither-scaling-named-first",
        ),
        pytest.param(
            {
                "loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 4},
                "scaling": {"maxHosts": 3},
            },
            None,
            id="ok",
        ),
    ],
)
def test_scaling_required(spec: Obj, expected: str | None) -> None:
    assert scaling_required(HostPoolSpec.model_validate(spec)) == expected


# ---------------------------------------------------------------------------- plan_hosts


def test_plan_hosts_come_in_query_order() -> None:
    # Inserted a, b, c; created a at +5s, b and c at T0: query order is b, c, a.
    pool = scaled_pool(
        [host_obj("a", created=5), host_obj("c", created=0), host_obj("b", created=0)]
    )
    assert [h.name for h in plan_hosts(pool.state, T0)] == ["b", "c", "a"]


def test_plan_hosts_leave_out_hosts_being_removed_and_invalid_ones() -> None:
    pool = scaled_pool(
        [
            managed("gone"),
            host_obj("bad", created=1, features={"protocols": ["FTP"]}),
            host_obj("ok", created=2),
        ]
    )
    pool.state.begin_removal(["gone"])
    assert plan_hosts(pool.state, T0) == [PlanHost("ok")]


def test_plan_hosts_count_sessions_and_active_ones() -> None:
    pool = scaled_pool([host_obj("h1"), host_obj("h2", created=1)])
    pool.put(request_obj("r1", "u1", status=assigned("h1", state="Active")))
    pool.put(request_obj("r2", "u2", status=assigned("h1", state="Connecting")))
    pool.put(request_obj("r3", "u3", status=assigned("h1", state="Disconnected")))
    # Two requests of one user share a session: one Active holder keeps it active.
    pool.put(request_obj("r4", "u4", status=assigned("h2", state="Disconnected")))
    pool.put(request_obj("r5", "u4", status=assigned("h2", state="Active")))
    # Disconnected only: not active.
    pool.put(request_obj("r6", "u5", status=assigned("h2", state="Disconnected")))
    pool.put(request_obj("r7", "u6", status=assigned("h2", state="Disconnected")))
    assert [(h.name, h.sessions, h.active) for h in plan_hosts(pool.state, T0)] == [
        ("h1", 3, 2),
        ("h2", 3, 1),
    ]


def test_a_reserved_unwritten_slot_counts_as_active() -> None:
    pool = scaled_pool([host_obj("h1")])
    pool.arrive("r1", "alice")
    [intent] = pool.place()  # reserved, the write not seen yet
    assert isinstance(intent, Assign)
    assert intent.placement.host == "h1"
    [found] = plan_hosts(pool.state, T0)
    assert (found.sessions, found.active) == (1, 1)


@pytest.mark.parametrize(
    ("annotation", "drained_by", "drained_at"),
    [
        pytest.param(T0_TEXT, True, T0, id="annotated"),
        pytest.param("2026-01-01T11:30:00+00:00", True, T0 - timedelta(minutes=30), id="offset"),
        pytest.param("yesterday", False, None, id="malformed"),
        pytest.param(None, False, None, id="none"),
    ],
)
def test_plan_hosts_read_the_drained_by_plan_annotation(
    annotation: str | None, drained_by: bool, drained_at: datetime | None
) -> None:
    obj = managed("m1", drainMode=True)
    if annotation is not None:
        obj["metadata"]["annotations"] = {PLAN_DRAINED_ANNOTATION: annotation}
    pool = scaled_pool([obj])
    [found] = plan_hosts(pool.state, T0)
    assert (found.drained_by_plan, found.drained_at) == (drained_by, drained_at)
    assert (found.drain_mode, found.managed) == (True, True)
    assert found.plan_drained is drained_by


def test_plan_hosts_managed_only_with_the_operators_label() -> None:
    pool = scaled_pool(
        [
            managed("mine"),
            host_obj("user", created=1),
            host_obj("other", created=2, labels={MANAGED_LABEL: "someone-else"}),
        ]
    )
    assert [(h.name, h.managed) for h in plan_hosts(pool.state, T0)] == [
        ("mine", True),
        ("user", False),
        ("other", False),
    ]


def test_plan_hosts_ready_and_starting_follow_the_workload() -> None:
    pool = scaled_pool(
        [
            managed("starting", workloadRef=workload_ref("starting")),
            host_obj("users", created=1, workloadRef=workload_ref("users")),
            managed("up", created=2, workloadRef=workload_ref("up")),
            host_obj("plain", created=3),
        ],
        hostReadyTimeoutSeconds=60,
    )
    for name, ready in (("starting", False), ("users", False), ("up", True)):
        pool.state.observe_workload(
            name, WorkloadRecord.of(pod(name, ready=ready), "Pod"), known=True, now=T0
        )
    seen = [(h.name, h.ready, h.starting, h.taking) for h in plan_hosts(pool.state, at(10))]
    assert seen == [
        ("starting", False, True, False),  # the operator's, within its ready timeout
        ("users", False, False, False),  # a user's host is never "starting"
        ("up", True, False, True),
        ("plain", True, False, True),  # no workloadRef: ready
    ]
    later = [(h.name, h.ready, h.starting) for h in plan_hosts(pool.state, at(61))]
    assert later[0] == ("starting", False, False)  # past its timeout: not on its way


# ---------------------------------------------------------------------------- requests


def test_plan_requests_carry_the_logoff_flag_from_status_or_logoffs_sent() -> None:
    pool = scaled_pool([host_obj("h1"), host_obj("h2", created=1)])
    with_logoff = {**assigned("h1"), "logoff": {"message": "Bye.", "deadline": T0_TEXT}}
    pool.put(request_obj("stored", "u1", status=with_logoff))
    pool.put(request_obj("sent", "u2", status=assigned("h1")))
    pool.put(request_obj("plain", "u3", status=assigned("h2")))
    pool.arrive("waiting", "u4")  # holds no session: not a plan request
    found = sorted(plan_requests(pool.state, {"sent"}), key=lambda r: r.name)
    assert found == [
        PlanRequest("plain", "h2", False),
        PlanRequest("sent", "h1", True),
        PlanRequest("stored", "h1", True),
    ]
    without = {r.name: r.has_logoff for r in plan_requests(pool.state)}
    assert without == {"plain": False, "sent": False, "stored": True}


def test_disconnected_on_names_only_the_disconnected_requests_of_that_host() -> None:
    pool = scaled_pool([host_obj("h1"), host_obj("h2", created=1)])
    pool.put(request_obj("d2", "u1", status=assigned("h1", state="Disconnected")))
    pool.put(request_obj("d1", "u2", status=assigned("h1", state="Disconnected")))
    pool.put(request_obj("a1", "u3", status=assigned("h1", state="Active")))
    pool.put(request_obj("c1", "u4", status=assigned("h1", state="Connecting")))
    pool.put(request_obj("elsewhere", "u5", status=assigned("h2", state="Disconnected")))
    assert sorted(disconnected_on(pool.state, "h1")) == ["d1", "d2"]
    assert disconnected_on(pool.state, "h2") == ["elsewhere"]
    assert disconnected_on(pool.state, "nowhere") == []


# ---------------------------------------------------------------------------- decide_for_pool


@pytest.mark.parametrize(
    "pool",
    [
        pytest.param(pool_obj(4), id="no-scaling"),
        pytest.param(
            pool_obj(None, "BreadthFirst", scaling={"maxHosts": 5}), id="no-explicit-limit"
        ),
        pytest.param(pool_obj(0, scaling={"maxHosts": 5}), id="invalid-spec"),
        pytest.param(None, id="no-pool"),
    ],
)
def test_decide_for_pool_is_none_for_a_pool_that_cannot_follow_a_plan(pool: Obj | None) -> None:
    state = Pool(pool, [managed("m1"), managed("m2", created=1)]).state
    assert decide_for_pool(state, ramp_down(), T0) is None


def three_hosts(*, drained_m3: bool = False, **scaling: Any) -> Pool:
    """Limit 10, maxHosts 10, the operator's m1 (2 sessions), m2 (1), m3 (0)."""
    m3 = managed("m3", created=2)
    pool = scaled_pool(
        [managed("m1"), managed("m2", created=1), drained_by_plan(m3) if drained_m3 else m3],
        **scaling,
    )
    pool.session("r1", "u1", "m1")
    pool.session("r2", "u2", "m1")
    pool.session("r3", "u3", "m2")
    return pool


def test_ramp_down_drains_the_emptiest_host_then_removes_it() -> None:
    pool = three_hosts()
    phase = ramp_down()  # minimum ceil(10 x 20%) = 2, threshold 90%
    decision = decide_for_pool(pool.state, phase, T0)
    assert decision == PlanDecision(minimum_hosts=2, used_capacity_percent=10.0, drain=("m3",))
    # No host is removed while it is only being drained.
    scaling = pool_scaling.decide(pool.state, T0, decision)
    assert scaling is not None
    assert (scaling.add, scaling.remove) == (0, [])

    # The next pass sees m3 drained by the plan and empty: it goes.
    drained = three_hosts(drained_m3=True)
    again = decide_for_pool(drained.state, phase, at(30))
    assert again == PlanDecision(minimum_hosts=2, used_capacity_percent=15.0, delete=("m3",))
    scaling = pool_scaling.decide(drained.state, at(30), again)
    assert scaling is not None
    assert (scaling.add, scaling.remove, scaling.limited) == (0, ["m3"], False)


def test_zero_active_sessions_clears_the_disconnected_before_the_host_goes() -> None:
    pool = scaled_pool([managed("m1"), drained_by_plan(managed("m2", created=1))])
    pool.put(request_obj("r1", "u1", status=assigned("m1")))
    pool.put(request_obj("gone", "u2", status=assigned("m2", state="Disconnected")))
    decision = decide_for_pool(
        pool.state, ramp_down(down_minimum=10, stop="ZeroActiveSessions"), T0
    )
    assert decision is not None
    assert (decision.delete, decision.clear_disconnected) == (("m2",), ("m2",))
    assert disconnected_on(pool.state, "m2") == ["gone"]
    # Its Disconnected request goes first: scaling does not remove it on this pass.
    scaling = pool_scaling.decide(pool.state, T0, decision)
    assert scaling is not None
    assert scaling.remove == []


def test_forced_logoff_counts_from_the_drain_annotation_and_skips_logoffs_sent() -> None:
    drained_at = "2026-01-01T11:50:00Z"
    pool = scaled_pool([managed("m1"), drained_by_plan(managed("m2", created=1), drained_at)])
    pool.put(request_obj("r1", "u1", status=assigned("m1")))
    pool.put(request_obj("r2", "u2", status=assigned("m2")))
    pool.put(request_obj("r3", "u3", status=assigned("m2")))
    phase = ramp_down(down_minimum=10, force=True)  # minimum 1: m2 stays drained
    decision = decide_for_pool(pool.state, phase, T0)
    assert decision is not None
    deadline = datetime(2026, 1, 1, 12, 20, tzinfo=UTC)  # 11:50 + 30 minutes
    assert sorted(decision.logoff, key=lambda o: o.request) == [
        LogoffOrder("r2", "m2", "Bye.", deadline),
        LogoffOrder("r3", "m2", "Bye.", deadline),
    ]
    sent = decide_for_pool(pool.state, phase, T0, logoffs_sent={"r2"})
    assert sent is not None
    assert sent.logoff == (LogoffOrder("r3", "m2", "Bye.", deadline),)


# ---------------------------------------------------------------------------- the algorithm


def two_hosts(lb_type: str) -> Pool:
    """Limit 5: h1 holds one session, h2 none (DepthFirst fills h1, BreadthFirst picks h2)."""
    pool = Pool(pool_obj(5, lb_type), [host_obj("h1"), host_obj("h2", created=1)])
    pool.session("r1", "alice", "h1")
    return pool


def next_host(pool: Pool) -> str | None:
    assert pool.state.views.balancer is not None
    return pool.state.views.balancer.place(Demand("newcomer")).host


def test_set_algorithm_switches_where_the_next_request_goes() -> None:
    pool = two_hosts("DepthFirst")
    state = pool.state
    assert next_host(pool) == "h1"
    state.capacity_changed = False
    assert state.set_algorithm(LoadBalancerType.BREADTH_FIRST) is True
    assert state.capacity_changed
    assert next_host(pool) == "h2"
    spec = state.placement_spec()
    assert spec is not None
    assert (spec.load_balancer.type, spec.load_balancer.max_session_limit) == (
        LoadBalancerType.BREADTH_FIRST,
        5,  # maxSessionLimit stays
    )
    assert state.spec is not None
    assert state.spec.load_balancer.type is LoadBalancerType.DEPTH_FIRST  # the pool's own
    assert state.set_algorithm(None) is True  # back to the pool's own
    assert next_host(pool) == "h1"


def test_set_algorithm_breadth_first_pool_to_depth_first_and_back() -> None:
    pool = two_hosts("BreadthFirst")
    assert next_host(pool) == "h2"
    assert pool.state.set_algorithm(LoadBalancerType.DEPTH_FIRST) is True
    assert next_host(pool) == "h1"
    assert pool.state.set_algorithm(LoadBalancerType.BREADTH_FIRST) is True
    assert next_host(pool) == "h2"


def test_set_algorithm_returns_false_when_nothing_changes() -> None:
    pool = two_hosts("DepthFirst")
    state = pool.state
    state.capacity_changed = False
    # The pool's own algorithm: the engine places as before.
    assert state.set_algorithm(LoadBalancerType.DEPTH_FIRST) is False
    assert not state.capacity_changed
    assert state.placement_spec() == state.spec
    assert state.set_algorithm(LoadBalancerType.BREADTH_FIRST) is True
    # The same algorithm again.
    state.capacity_changed = False
    assert state.set_algorithm(LoadBalancerType.BREADTH_FIRST) is False
    assert not state.capacity_changed
    assert next_host(pool) == "h2"


def test_the_algorithm_survives_a_rebuilt_engine() -> None:
    pool = two_hosts("DepthFirst")
    pool.state.set_algorithm(LoadBalancerType.BREADTH_FIRST)
    pool.state.rebuild_balancer(T0)
    assert next_host(pool) == "h2"


# ---------------------------------------------------------------------------- decide with a plan


def plan_decision(**kw: Any) -> PlanDecision:
    return PlanDecision(minimum_hosts=kw.pop("minimum_hosts", 1), used_capacity_percent=0.0, **kw)


def test_with_a_plan_min_hosts_is_ignored() -> None:
    pool = scaled_pool([host_obj("h1")], minHosts=5)
    own = pool_scaling.decide(pool.state, T0)
    assert own is not None
    assert own.add == 4  # without a plan, minHosts 5
    with_plan = pool_scaling.decide(pool.state, T0, plan_decision())
    assert with_plan is not None
    assert (with_plan.add, with_plan.remove, with_plan.limited) == (0, [], False)
    assert with_plan.message == "1 of at most 10 hosts"


def waiting_pool(users: int, max_hosts: int = 10) -> Pool:
    """Limit 1, one full host ``h1``, ``users`` requests waiting for capacity."""
    pool = Pool(pool_obj(1, scaling={"maxHosts": max_hosts}), [host_obj("h1")])
    pool.session("r0", "zed", "h1")
    for i in range(users):
        pool.arrive(f"w{i}", f"u{i}")
    pool.place()
    assert pool_scaling.waiting_for_capacity(pool.state) == users
    return pool


@pytest.mark.parametrize(
    ("waiting", "plan_add", "add"),
    [
        pytest.param(2, 1, 2, id="waiting-wants-more"),
        pytest.param(2, 3, 3, id="plan-wants-more"),
        pytest.param(0, 2, 2, id="plan-only"),
        pytest.param(3, 0, 3, id="waiting-only"),
    ],
)
def test_with_a_plan_hosts_are_added_for_whichever_wants_more(
    waiting: int, plan_add: int, add: int
) -> None:
    pool = waiting_pool(waiting)
    decision = pool_scaling.decide(pool.state, T0, plan_decision(add=plan_add))
    assert decision is not None
    assert (decision.add, decision.remove, decision.limited) == (add, [], False)


def test_with_a_plan_limited_when_either_is() -> None:
    pool = waiting_pool(3, max_hosts=3)
    decision = pool_scaling.decide(pool.state, T0, plan_decision(add=1))
    assert decision is not None
    assert (decision.add, decision.limited) == (2, True)
    assert decision.message == (
        "maxHosts 3 reached; the scaling plan or waiting requests want more"
    )
    by_plan = pool_scaling.decide(waiting_pool(0).state, T0, plan_decision(add=1, limited=True))
    assert by_plan is not None
    assert (by_plan.add, by_plan.limited) == (1, True)


def empty_managed_pool() -> Pool:
    """The operator's m1..m3, all empty far longer than scaleDownDelaySeconds (0 here)."""
    pool = scaled_pool(
        [managed("m1"), managed("m2", created=1), managed("m3", created=2)],
        scaleDownDelaySeconds=0,
    )
    own = pool_scaling.decide(pool.state, T0)
    assert own is not None
    assert sorted(own.remove) == ["m1", "m2", "m3"]  # the pool's own rule would remove them
    return pool


def test_with_a_plan_only_the_plans_delete_removes() -> None:
    pool = empty_managed_pool()
    nothing = pool_scaling.decide(pool.state, at(3600), plan_decision())
    assert nothing is not None
    assert nothing.remove == []
    decision = pool_scaling.decide(
        pool.state,
        at(3600),
        plan_decision(delete=("m2", "ghost", "m3"), clear_disconnected=("m3",)),
    )
    assert decision is not None
    # Not a host it does not know, not one whose Disconnected requests go first.
    assert (decision.add, decision.remove) == (0, ["m2"])


def test_with_a_plan_nothing_is_removed_while_adding() -> None:
    pool = empty_managed_pool()
    decision = pool_scaling.decide(pool.state, at(3600), plan_decision(add=1, delete=("m2",)))
    assert decision is not None
    assert (decision.add, decision.remove) == (1, [])


# --------------------------------------------------------------------------- ZeroActiveSessions


@pytest.mark.parametrize(
    ("status", "ends"),
    [
        pytest.param(assigned("rds-01", state="Disconnected"), True, id="still-disconnected"),
        pytest.param(assigned("rds-01", state="Active"), False, id="reconnected-meanwhile"),
        pytest.param(assigned("rds-01", state="Connecting"), False, id="connecting-again"),
        pytest.param({"phase": "Failed", "sessionState": "Disconnected"}, False, id="failed"),
        pytest.param(None, False, id="status-reset"),
    ],
)
def test_only_a_session_still_disconnected_is_ended(status: Any, ends: bool) -> None:
    """The plan decided to end a Disconnected session, then awaited other writes; the
    request as it is now decides (the user may have reconnected)."""
    record = RequestRecord.of(request_obj("alice", status=status))
    assert still_disconnected(record) is ends
