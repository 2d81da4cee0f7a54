"""One pool's state: how each observation (pool, host, request, time) changes its records,
sessions, queues and scaling bookkeeping, and what it hands back to the I/O side.

The state is built from API-shaped objects (``PoolRecord.of`` and friends); every time is
injected (``T0`` plus an offset), never read from a clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import pytest

from hostpool_operator.api import Phase, Reason
from hostpool_operator.api.vocabulary import MANAGED_LABEL, MANAGER
from hostpool_operator.engine.balancer_view import BalancerHost, Placement
from hostpool_operator.engine.placement import Assign, Intent, Wait, place_pending
from hostpool_operator.engine.pool_state import (
    PoolState,
    pending_count,
    reports_metrics,
    waiting_reasons,
)
from hostpool_operator.engine.records import HostRecord, PoolRecord, RequestRecord
from hostpool_operator.scaling import pool as pool_scaling
from support.state_builders import (
    NS,
    POOL,
    T0,
    Obj,
    Pool,
    assigned,
    at,
    host_obj,
    pool_obj,
    request_obj,
)

TICK = timedelta(microseconds=1)
MANAGED = {MANAGED_LABEL: MANAGER}


def view(state: PoolState, host: str) -> BalancerHost:
    """The host as the engine sees it now."""
    assert state.views.balancer is not None
    found = state.views.balancer.host(host)
    assert found is not None, f"{host} is not in the engine"
    return found


def in_engine(state: PoolState) -> list[str]:
    assert state.views.balancer is not None
    return [h.name for h in state.views.balancer.hosts()]


def assign_one(pool: Pool, name: str, user: str, now: datetime = T0) -> Assign:
    pool.arrive(name, user, now=now)
    intents = pool.place(now)
    assigns = [i for i in intents if isinstance(i, Assign) and i.record.meta.name == name]
    assert len(assigns) == 1, intents
    return assigns[0]


# ---------------------------------------------------------------------------- the pool


def test_a_pool_appearing_builds_the_engine_from_its_hosts_and_sessions() -> None:
    pool = Pool(None, [host_obj("h2", created=1), host_obj("h1", created=2)])
    state = pool.state
    assert state.views.balancer is None
    assert pool.put(request_obj("r1", "alice", status=assigned("h1"))) is None
    assert state.ledger.host_of("alice") == "h1"  # known without a pool
    state.set_pool(PoolRecord.of(pool_obj(limit=3)), T0)
    assert in_engine(state) == ["h2", "h1"]  # query order: creationTimestamp first
    assert (view(state, "h1").sessions, view(state, "h2").sessions) == (1, 0)
    assert state.capacity_changed


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(None, id="deleted"),
        pytest.param(pool_obj(limit=None), id="invalid"),
    ],
)
def test_a_pool_gone_or_invalid_has_no_engine_but_keeps_its_sessions(second: Obj | None) -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    pool.session("r1", "alice", "h1")
    state = pool.state
    state.set_pool(None if second is None else PoolRecord.of(second), at(1))
    assert state.views.balancer is None
    assert state.ledger.host_of("alice") == "h1"
    assert pool_scaling.decide(state, at(1)) is None
    state.set_pool(PoolRecord.of(pool_obj(limit=2)), at(2))  # back: rebuilt with the session
    assert view(state, "h1").sessions == 1


def test_forgotten_only_without_pool_hosts_and_requests() -> None:
    state = PoolState(NS, POOL)
    assert state.forgotten
    state.put_host(HostRecord.of(host_obj("h1")), T0)
    assert not state.forgotten
    state.drop_host("h1")
    assert state.forgotten


# ---------------------------------------------------------------------------- requests


@pytest.mark.parametrize(
    ("hosts", "lost"),
    [
        pytest.param(["h1"], False, id="host-exists"),
        pytest.param([], True, id="no-host-at-all"),
        pytest.param(["h2"], True, id="another-host"),
    ],
)
def test_an_assigned_request_on_a_host_that_does_not_exist_is_returned(
    hosts: list[str], lost: bool
) -> None:
    pool = Pool(pool_obj(), [host_obj(h) for h in hosts])
    state = pool.state
    returned = pool.put(request_obj("r1", "alice", status=assigned("h1")))
    assert "r1" not in state.arrivals
    assert "r1" not in state.waiting
    if lost:
        assert returned is not None
        assert (returned.meta.name, returned.host) == ("r1", "h1")
        assert "alice" not in state.ledger
        assert state.ledger.count_on("h1") == 0
    else:
        assert returned is None
        assert state.ledger.holds("alice", "r1")
        assert state.ledger.count_on("h1") == 1
        assert view(state, "h1").sessions == 1


def test_an_assigned_request_of_a_user_with_a_session_elsewhere_joins_that_session() -> None:
    pool = Pool(pool_obj(), [host_obj("h1"), host_obj("h2")])
    pool.session("r1", "alice", "h1")
    pool.session("r2", "alice", "h2")  # inconsistent: the first session is kept
    ledger = pool.state.ledger
    assert ledger.host_of("alice") == "h1"
    assert ledger.holds("alice", "r2")
    assert (ledger.count_on("h1"), ledger.count_on("h2")) == (1, 0)


def test_requests_get_the_arrival_sequence_once() -> None:
    pool = Pool(pool_obj(), [host_obj("h1")])
    pool.put(request_obj("r1", "alice"), seq=7)
    pool.put(request_obj("r1", "alice", rv=2, status={"phase": "Pending"}), seq=99)
    assert pool.state.requests["r1"].seq == 7
    assert list(pool.state.arrivals) == ["r1"]


def test_a_stale_version_of_a_request_is_ignored() -> None:
    pool = Pool(pool_obj(), [host_obj("h1")])
    pool.put(request_obj("r1", "alice", rv=5, status=assigned("h1")))
    pool.put(request_obj("r1", "alice", rv=4))  # older than what is known
    state = pool.state
    assert state.requests["r1"].phase == Phase.ASSIGNED.value
    assert state.ledger.holds("alice", "r1")
    assert not state.arrivals


def test_a_namesake_replaces_the_old_request_and_its_session() -> None:
    pool = Pool(pool_obj(), [host_obj("h1")])
    pool.session("r1", "alice", "h1")
    obj = request_obj("r1", "bob", rv=9)
    obj["metadata"]["uid"] = "another-uid"
    assert pool.put(obj) is None
    state = pool.state
    assert "alice" not in state.ledger  # the old r1 held it alone
    assert state.requests["r1"].meta.uid == "another-uid"
    assert list(state.arrivals) == ["r1"]


def test_a_failed_request_lets_go_of_its_session() -> None:
    pool = Pool(pool_obj(), [host_obj("h1")])
    pool.session("r1", "alice", "h1")
    pool.put(request_obj("r1", "alice", rv=2, status={"phase": "Failed"}))
    state = pool.state
    assert "alice" not in state.ledger
    assert view(state, "h1").sessions == 0
    assert not state.arrivals
    assert not state.waiting


def test_a_reset_status_releases_the_session_and_places_the_request_again() -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.written(assign_one(pool, "r1", "alice"))
    state = pool.state
    assert state.ledger.holds("alice", "r1")
    pool.put(request_obj("r1", "alice", rv=3))  # someone cleared the status
    assert "alice" not in state.ledger
    assert view(state, "h1").sessions == 0
    assert list(state.arrivals) == ["r1"]
    assert state.capacity_changed


def test_an_inflight_request_is_left_to_its_write() -> None:
    pool = Pool(pool_obj(), [host_obj("h1")])
    assign_one(pool, "r1", "alice")
    pool.put(request_obj("r1", "alice", rv=2))  # a version seen while the write is on its way
    state = pool.state
    assert state.ledger.holds("alice", "r1")
    assert not state.arrivals
    assert state.requests["r1"].meta.resource_version == "2"


def test_dropping_one_holder_keeps_the_session_and_the_last_ends_it() -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.session("r1", "alice", "h1")
    pool.session("r2", "alice", "h1")
    state = pool.state
    state.capacity_changed = False
    state.drop_request("r1")
    assert state.ledger.host_of("alice") == "h1"
    assert view(state, "h1").sessions == 1
    state.drop_request("r2")
    assert "alice" not in state.ledger
    assert view(state, "h1").sessions == 0
    assert state.capacity_changed
    state.drop_request("never-seen")  # harmless


# ---------------------------------------------------------------------------- hosts


def test_drop_host_returns_the_holders_of_its_sessions_and_frees_the_users() -> None:
    pool = Pool(pool_obj(limit=3), [host_obj("h1"), host_obj("h2")])
    pool.session("rb", "bob", "h1")
    pool.session("ra2", "alice", "h1")
    pool.session("ra1", "alice", "h1")
    pool.session("rc", "carol", "h2")
    state = pool.state
    state.ledger.hold("bob", "unknown")  # a holder the state has no record of: left out
    state.capacity_changed = False
    lost = state.drop_host("h1")
    assert [(r.meta.name, host) for r, host in lost] == [
        ("ra1", "h1"),
        ("ra2", "h1"),
        ("rb", "h1"),
    ]
    assert state.ledger.host_of("alice") is None
    assert state.ledger.host_of("bob") is None
    assert state.ledger.host_of("carol") == "h2"
    assert "h1" not in state.hosts
    assert in_engine(state) == ["h2"]
    assert state.capacity_changed
    # alice is free: her next request is a new session, on a host that exists.
    intent = assign_one(pool, "ra3", "alice")
    assert intent.placement == Placement("h2", Reason.NEW_SESSION)


def test_drop_host_forgets_its_scaling_and_metrics_bookkeeping() -> None:
    pool = Pool(pool_obj(scaling={"maxHosts": 3}), [host_obj("m1", labels=MANAGED)])
    state = pool.state
    pool_scaling.decide(state, T0)
    state.views.stale_hosts.add("m1")
    state.begin_removal(["m1"])
    state.empty_since["m1"] = T0
    assert state.drop_host("m1") == []
    assert (state.removing, state.empty_since, state.views.stale_hosts) == (set(), {}, set())


@pytest.mark.parametrize(
    ("change", "in_engine_after"),
    [
        pytest.param({"drainMode": True}, ["h1"], id="drain-stays-in-engine"),
        pytest.param({"features": {"protocols": ["FTP"]}}, [], id="invalid-spec-withdrawn"),
    ],
)
def test_a_changed_host_is_refreshed_in_the_engine(change: Obj, in_engine_after: list[str]) -> None:
    pool = Pool(pool_obj(), [host_obj("h1")])
    pool.session("r1", "alice", "h1")
    state = pool.state
    state.capacity_changed = False
    state.put_host(HostRecord.of(host_obj("h1", **change)), at(1))
    assert in_engine(state) == in_engine_after
    assert state.capacity_changed
    assert state.ledger.host_of("alice") == "h1"  # its sessions stay
    state.put_host(HostRecord.of(host_obj("h1")), at(2))  # valid again: counted from the ledger
    assert view(state, "h1").sessions == 1
    assert not view(state, "h1").drain_mode


def test_a_host_being_removed_takes_no_request_until_the_removal_is_aborted() -> None:
    pool = Pool(pool_obj(limit=1, scaling={"maxHosts": 1}), [host_obj("m1", labels=MANAGED)])
    state = pool.state
    state.begin_removal(["m1"])
    assert in_engine(state) == []
    assert [h.name for h in pool_scaling.scale_hosts(state, T0)] == []
    pool.arrive("r1", "alice")
    assert [(i.reason if isinstance(i, Wait) else i) for i in pool.place()] == [
        Reason.POOL_SATURATED
    ]
    state.put_host(HostRecord.of(host_obj("m1", labels=MANAGED)), at(1))  # an update meanwhile
    assert in_engine(state) == []
    state.abort_removal("m1", at(2))
    assert in_engine(state) == ["m1"]
    assert [h.name for h in pool_scaling.scale_hosts(state, at(2))] == ["m1"]


# ---------------------------------------------------------------------------- connecting


@pytest.mark.parametrize(
    ("status", "now", "deadline"),
    [
        pytest.param(assigned("h1", state="Connecting"), 10, at(30), id="connecting"),
        pytest.param(assigned("h1", state="Connecting", when=5), 34, at(35), id="from-assignedAt"),
        pytest.param(assigned("h1", state="Connecting"), 30, None, id="at-deadline"),
        pytest.param(assigned("h1", state="Connecting"), 31, None, id="past-deadline"),
        pytest.param(assigned("h1", state="Active"), 10, None, id="active"),
        pytest.param(assigned("h1", state="Disconnected"), 10, None, id="disconnected"),
        pytest.param(
            assigned("h1", state="Connecting", reason="Reconnected"), 10, None, id="reconnect"
        ),
        pytest.param(
            {**assigned("h1", state="Connecting"), "assignedAt": None}, 10, None, id="no-time"
        ),
        pytest.param(
            {**assigned("h1", state="Connecting"), "assignedAt": "yesterday"},
            10,
            None,
            id="bad-time",
        ),
    ],
)
def test_connecting_deadline_is_assigned_at_plus_the_pool_timeout(
    status: Obj, now: int, deadline: datetime | None
) -> None:
    pool = Pool(pool_obj(connectingTimeoutSeconds=30), [host_obj("h1")])
    record = RequestRecord.of(request_obj("r1", status=status))
    assert pool.state.connecting_deadline(record, at(now)) == deadline


def test_connecting_deadline_without_a_pool_uses_the_default_timeout() -> None:
    state = PoolState(NS, POOL)
    record = RequestRecord.of(request_obj("r1", status=assigned("h1", state="Connecting")))
    assert state.connecting_deadline(record, T0) == at(60)


def test_an_observed_connecting_session_settles_at_its_deadline() -> None:
    pool = Pool(pool_obj(connectingTimeoutSeconds=30), [host_obj("h1")])
    state = pool.state
    pool.put(request_obj("r1", "alice", status=assigned("h1", state="Connecting")), now=at(10))
    session = state.ledger.session_of("alice")
    assert session is not None
    assert (session.assigned_at, session.connecting_until) == (T0, at(30))
    assert state.ledger.next_deadline() == at(30)
    assert (view(state, "h1").sessions, view(state, "h1").connecting) == (1, 1)
    state.capacity_changed = False

    assert not state.expire_connecting(at(30) - TICK)
    assert view(state, "h1").connecting == 1
    assert not state.capacity_changed

    assert state.expire_connecting(at(30))
    assert not session.connecting
    assert (view(state, "h1").sessions, view(state, "h1").connecting) == (1, 0)
    assert state.capacity_changed
    assert not state.expire_connecting(at(31))


def test_a_placed_session_connects_until_its_timeout() -> None:
    pool = Pool(pool_obj(connectingTimeoutSeconds=45), [host_obj("h1")])
    assign_one(pool, "r1", "alice", now=at(5))
    state = pool.state
    assert state.ledger.next_deadline() == at(50)
    assert view(state, "h1").connecting == 1
    assert not state.expire_connecting(at(50) - TICK)
    assert state.expire_connecting(at(50))
    assert view(state, "h1").connecting == 0


@pytest.mark.parametrize("reported", ["Active", "Disconnected"])
def test_an_agent_report_settles_a_connecting_session(reported: str) -> None:
    pool = Pool(pool_obj(), [host_obj("h1")])
    pool.written(assign_one(pool, "r1", "alice"))
    state = pool.state
    assert view(state, "h1").connecting == 1
    state.capacity_changed = False
    pool.put(request_obj("r1", "alice", rv=3, status=assigned("h1", state=reported)), now=at(1))
    session = state.ledger.session_of("alice")
    assert session is not None
    assert not session.connecting
    assert (view(state, "h1").sessions, view(state, "h1").connecting) == (1, 0)
    assert state.capacity_changed
    assert not state.expire_connecting(at(3600))  # its deadline is stale now


def test_a_changed_connecting_timeout_retimes_the_sessions_still_connecting() -> None:
    pool = Pool(pool_obj(connectingTimeoutSeconds=60), [host_obj("h1")])
    state = pool.state
    assign_one(pool, "ra", "alice", now=T0)  # connecting until T0+60
    assign_one(pool, "rb", "bob", now=at(40))  # connecting until T0+100
    assert view(state, "h1").connecting == 2
    state.set_pool(PoolRecord.of(pool_obj(connectingTimeoutSeconds=30)), at(45))
    alice = state.ledger.session_of("alice")
    bob = state.ledger.session_of("bob")
    assert alice is not None
    assert bob is not None
    assert alice.connecting_until is None  # T0+30 is past: settled at once
    assert bob.connecting_until == at(70)
    assert view(state, "h1").connecting == 1
    assert not state.expire_connecting(at(69))
    assert state.expire_connecting(at(70))
    assert view(state, "h1").connecting == 0
    assert not state.expire_connecting(at(100))  # the old deadlines settle nothing


def test_an_unchanged_connecting_timeout_retimes_nothing() -> None:
    pool = Pool(pool_obj(limit=2, connectingTimeoutSeconds=30), [host_obj("h1")])
    state = pool.state
    assign_one(pool, "ra", "alice")
    state.set_pool(PoolRecord.of(pool_obj(limit=3, connectingTimeoutSeconds=30)), at(40))
    assert view(state, "h1").connecting == 1  # only expire settles it
    assert state.expire_connecting(at(40))


# ---------------------------------------------------------------------------- metrics


def metrics_host(name: str, sampled: int | None) -> Obj:
    obj = host_obj(name)
    metrics: Obj = {"cpuPercent": 10}
    if sampled is not None:
        metrics["sampledAt"] = at(sampled).isoformat()
    obj["status"] = {"metrics": metrics}
    return obj


def test_metrics_go_stale_with_time_alone() -> None:
    pool = Pool(pool_obj(), [metrics_host("h1", 0), metrics_host("h2", None)])
    state = pool.state
    state.views.metrics_stale_after = 120
    assert reports_metrics(state)
    state.capacity_changed = False
    assert not state.recheck_metrics(at(120))  # not older than 120 s yet
    assert not state.capacity_changed
    assert state.recheck_metrics(at(121))
    assert state.views.stale_hosts == {"h1"}
    assert state.capacity_changed
    assert view(state, "h1").metrics is None  # treated as never reported
    assert view(state, "h2").metrics is not None  # no sampledAt: never stale
    assert not state.recheck_metrics(at(122))  # no change since


def test_fresh_metrics_clear_staleness() -> None:
    pool = Pool(pool_obj(), [metrics_host("h1", 0)], now=at(500))
    state = pool.state
    assert state.views.stale_hosts == {"h1"}
    state.put_host(HostRecord.of(metrics_host("h1", 490)), at(500))
    assert state.views.stale_hosts == set()
    assert not state.recheck_metrics(at(611))  # 120 s counts from when it was seen (500)
    assert state.recheck_metrics(at(621))


def test_an_agent_whose_clock_is_behind_is_fresh_while_it_reports() -> None:
    """Its every sampledAt is five minutes in the operator's past: by the agent's clock it
    would always be stale. Each new sample counts from when the operator saw it."""
    pool = Pool(pool_obj(), [metrics_host("h1", -300)], now=at(0))
    state = pool.state
    assert state.views.stale_hosts == {"h1"}  # first sight: an old sample may be a dead agent's
    for t in (30, 60, 90, 120, 150):
        state.put_host(HostRecord.of(metrics_host("h1", t - 300)), at(t))
        assert state.views.stale_hosts == set(), f"stale at {t}"
    assert not state.recheck_metrics(at(270))
    assert state.recheck_metrics(at(271))  # then it went silent: stale 120 s after 150
    assert state.views.stale_hosts == {"h1"}


def test_an_agent_whose_clock_is_ahead_goes_stale_when_it_stops() -> None:
    """Its sampledAt is five minutes in the operator's future: by the agent's clock it would
    look alive for seven minutes after it died. A future time is never taken."""
    pool = Pool(pool_obj(), [metrics_host("h1", 300)], now=at(0))
    state = pool.state
    assert state.views.stale_hosts == set()
    state.put_host(HostRecord.of(metrics_host("h1", 330)), at(30))  # its last report
    assert not state.recheck_metrics(at(150))
    assert state.recheck_metrics(at(151))
    assert state.views.stale_hosts == {"h1"}


# ---------------------------------------------------------------------------- scaling


def saturated_pool(max_hosts: int, users: list[str], **scaling: Any) -> Pool:
    """Limit 1, one full host ``h1``, and a request of each of ``users`` waiting."""
    pool = Pool(pool_obj(limit=1, scaling={"maxHosts": max_hosts, **scaling}), [host_obj("h1")])
    pool.session("r0", "zed", "h1")
    for i, user in enumerate(users):
        pool.arrive(f"w{i}", user)
    pool.place()
    return pool


@pytest.mark.parametrize(
    ("max_hosts", "users", "add", "limited"),
    [
        pytest.param(3, [], 0, False, id="nobody-waits"),
        pytest.param(3, ["a"], 1, False, id="one-waits"),
        pytest.param(3, ["a", "b"], 2, False, id="two-wait"),
        pytest.param(3, ["a", "a", "b"], 2, False, id="users-count-once"),
        pytest.param(3, ["a", "b", "c", "d", "e"], 2, True, id="up-to-max-hosts"),
        pytest.param(1, ["a"], 0, True, id="at-max-hosts"),
        pytest.param(8, [f"u{i}" for i in range(5)], 5, False, id="five"),
    ],
)
def test_scaling_adds_hosts_for_requests_waiting_for_capacity(
    max_hosts: int, users: list[str], add: int, limited: bool
) -> None:
    pool = saturated_pool(max_hosts, users)
    assert pool_scaling.waiting_for_capacity(pool.state) == len(set(users))
    decision = pool_scaling.decide(pool.state, T0)
    assert decision is not None
    assert (decision.add, decision.remove, decision.limited) == (add, [], limited)


def test_a_request_placed_after_waiting_no_longer_counts_for_scaling() -> None:
    pool = saturated_pool(5, ["alice"])
    state = pool.state
    assert pool_scaling.waiting_for_capacity(state) == 1
    state.drop_request("r0")  # zed logs off: alice's request takes the slot
    assert [i.record.meta.name for i in pool.place() if isinstance(i, Assign)] == ["w0"]
    assert pool_scaling.waiting_for_capacity(state) == 0
    decision = pool_scaling.decide(state, T0)
    assert decision is not None
    assert decision.add == 0


def test_requests_waiting_for_another_reason_add_no_host() -> None:
    pool = Pool(pool_obj(limit=1, scaling={"maxHosts": 5}), [host_obj("h1", drainMode=True)])
    pool.arrive("r1", "alice")
    assert [i.reason for i in pool.place() if isinstance(i, Wait)] == [Reason.NO_ELIGIBLE_HOST]
    assert pool_scaling.waiting_for_capacity(pool.state) == 0
    decision = pool_scaling.decide(pool.state, T0)
    assert decision is not None
    assert decision.add == 0


def test_no_scaling_spec_decides_nothing() -> None:
    pool = saturated_pool(3, ["a"])
    pool.state.set_pool(PoolRecord.of(pool_obj(limit=1)), T0)
    assert pool_scaling.decide(pool.state, T0) is None
    assert pool_scaling.scale_down_due(pool.state, T0) is None


def scale_down_pool(delay: int = 300) -> Pool:
    return Pool(
        pool_obj(limit=2, scaling={"maxHosts": 5, "scaleDownDelaySeconds": delay}),
        [
            host_obj("mine", labels=MANAGED, created=0),
            host_obj("users", created=1),
            host_obj("busy", labels=MANAGED, created=2),
        ],
    )


@pytest.mark.parametrize(
    ("now", "removed", "due"),
    [
        pytest.param(0, [], at(300), id="just-empty"),
        pytest.param(299, [], at(300), id="just-before"),
        pytest.param(300, ["mine"], None, id="at-delay"),
        pytest.param(100_000, ["mine"], None, id="long-after"),
    ],
)
def test_empty_operator_hosts_go_only_after_the_scale_down_delay(
    now: int, removed: list[str], due: datetime | None
) -> None:
    pool = scale_down_pool()
    pool.session("rb", "bob", "busy")
    state = pool.state
    first = pool_scaling.decide(state, T0)  # notes since when each managed host is empty
    assert first is not None
    assert (first.add, first.remove) == (0, [])
    assert state.empty_since == {"mine": T0}  # never the user's host, never a busy one
    assert pool_scaling.scale_down_due(state, T0) == at(300)
    decision = pool_scaling.decide(state, at(now))
    assert decision is not None
    assert (decision.add, decision.remove) == (0, removed)
    assert pool_scaling.scale_down_due(state, at(now)) == due


def test_a_host_a_user_created_is_never_removed() -> None:
    pool = scale_down_pool(delay=0)
    state = pool.state
    for now in (0, 1, 10**6):
        decision = pool_scaling.decide(state, at(now))
        assert decision is not None
        assert "users" not in decision.remove
    assert "users" not in state.empty_since


def test_an_empty_delay_starts_again_when_the_host_had_a_session_meanwhile() -> None:
    pool = scale_down_pool()
    state = pool.state
    pool_scaling.decide(state, T0)  # busy and mine empty since T0
    pool.session("rm", "mona", "mine", now=at(100))
    pool_scaling.decide(state, at(100))
    assert "mine" not in state.empty_since
    state.drop_request("rm")
    pool_scaling.decide(state, at(200))
    assert state.empty_since["mine"] == at(200)
    assert pool_scaling.scale_down_due(state, at(250)) == at(300)  # busy's delay ends first
    decision = pool_scaling.decide(state, at(300))
    assert decision is not None
    assert decision.remove == ["busy"]
    state.begin_removal(decision.remove)
    assert pool_scaling.scale_down_due(state, at(300)) == at(500)
    decision = pool_scaling.decide(state, at(500))
    assert decision is not None
    assert decision.remove == ["mine"]


def test_no_host_is_removed_while_requests_wait_for_capacity() -> None:
    pool = Pool(
        pool_obj(limit=1, scaling={"maxHosts": 2, "scaleDownDelaySeconds": 0}),
        [host_obj("m1", labels=MANAGED), host_obj("m2", labels=MANAGED, drainMode=True)],
    )
    pool.session("r0", "zed", "m1")
    pool.arrive("r1", "alice")
    pool.place()
    decision = pool_scaling.decide(pool.state, at(1000))
    assert decision is not None
    assert (decision.add, decision.remove, decision.limited) == (0, [], True)


# ---------------------------------------------------------------------------- for status


def test_pending_count_and_waiting_reasons() -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    state = pool.state
    pool.session("r0", "zed", "h1")
    pool.arrive("r1", "alice")
    pool.put(request_obj("r2", "bob", status={"phase": "Pending", "reason": "PoolSaturated"}))
    pool.put(request_obj("r3", "carol", status={"phase": "Failed"}))
    pool.place()
    assert pending_count(state) == 2  # r1, r2 (r0 assigned, r3 failed)
    # The reasons the stored statuses give: r1's Wait is not written yet.
    assert waiting_reasons(state) == {None, "PoolSaturated"}
    state.drop_request("r0")
    assign = [i for i in pool.place() if isinstance(i, Assign)]
    assert [i.record.meta.name for i in assign] == ["r1"]
    assert pending_count(state) == 1  # r1 is being written
    assert waiting_reasons(state) == {"PoolSaturated"}


def intents_summary(intents: Iterable[Intent]) -> list[str]:
    return [type(i).__name__ + ":" + i.record.meta.name for i in intents]


def test_place_pending_leaves_no_request_behind_after_a_host_appears() -> None:
    pool = Pool(pool_obj(limit=1))
    pool.arrive("r1", "alice")
    pool.arrive("r2", "bob")
    assert intents_summary(pool.place()) == ["Wait:r1", "Wait:r2"]
    pool.state.put_host(HostRecord.of(host_obj("h1")), at(1))
    assert intents_summary(place_pending(pool.state, at(1))) == ["Assign:r1"]
    pool.state.put_host(HostRecord.of(host_obj("h2")), at(2))
    assert intents_summary(place_pending(pool.state, at(2))) == ["Assign:r2"]
    assert not pool.state.waiting


# ---------------------------------------------------------------------------- found by these tests
# Five rules the first version of these tests showed broken (the same in the operator before
# the split); each test failed before its fix.


def test_a_namesake_of_a_waiting_request_gets_its_own_wait_written() -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.session("r0", "zed", "h1")
    pool.arrive("r1", "alice")
    assert [type(i) for i in pool.place()] == [Wait]
    # A new object with the same name (its deletion was never seen) and an empty status.
    namesake = request_obj("r1", "bob", rv=7)
    namesake["metadata"]["uid"] = "uid-new"
    assert pool.put(namesake) is None
    pool.state.capacity_changed = True
    intents = pool.place()
    assert [(type(i), i.record.meta.uid) for i in intents] == [(Wait, "uid-new")]


def test_a_waiting_request_that_failed_no_longer_counts_for_scaling() -> None:
    pool = saturated_pool(5, ["alice"])
    assert pool_scaling.decide(pool.state, T0) is not None
    assert pool_scaling.waiting_for_capacity(pool.state) == 1
    pool.put(request_obj("w0", "alice", rv=5, status={"phase": Phase.FAILED.value}))
    assert pool_scaling.waiting_for_capacity(pool.state) == 0
    decision = pool_scaling.decide(pool.state, T0)
    assert decision is not None
    assert decision.add == 0


def test_an_aborted_removal_gives_its_slots_to_a_waiting_request() -> None:
    pool = Pool(pool_obj(limit=1, scaling={"maxHosts": 1}), [host_obj("m1", labels=MANAGED)])
    pool.place()
    pool.state.begin_removal(["m1"])
    pool.arrive("r1", "alice")
    assert [type(i) for i in pool.place()] == [Wait]
    pool.state.abort_removal("m1", at(1))
    intents = pool.place(at(1))
    assert [(type(i), i.record.meta.name) for i in intents] == [(Assign, "r1")]


@pytest.mark.parametrize("outside", ["invalid-spec", "being-removed"])
def test_stale_metrics_of_a_host_outside_the_engine_change_once(outside: str) -> None:
    host = metrics_host("h1", 0)
    if outside == "invalid-spec":
        host["spec"]["features"] = {"protocols": ["FTP"]}
    pool = Pool(pool_obj(), [host, metrics_host("h2", 0)])
    state = pool.state
    if outside == "being-removed":
        state.begin_removal(["h1"])
    assert state.recheck_metrics(at(200))
    state.capacity_changed = False
    assert not state.recheck_metrics(at(300))
    assert not state.capacity_changed  # no retry of every waiting request on each pass


def test_sessions_seen_before_their_pool_are_timed_by_the_pool() -> None:
    pool = Pool(None, [host_obj("h1")])
    pool.put(request_obj("r1", "alice", status=assigned("h1", state="Connecting")))
    pool.state.set_pool(PoolRecord.of(pool_obj(connectingTimeoutSeconds=10)), at(1))
    session = pool.state.ledger.session_of("alice")
    assert session is not None
    assert session.connecting_until == at(10)
    assert pool.state.expire_connecting(at(10))
