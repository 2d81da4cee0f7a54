"""The placement pass: pending requests, in arrival order, become Assign/Wait/Reject intents.

The pool's state is built the way the operator builds it, from API-shaped objects
(``PoolRecord.of`` and friends) through ``PoolState``'s observation methods; every time is
injected. An Assign's write is completed by hand (``Pool.written``) as the request writer
does it, so the next pass sees the request Assigned.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.api import Reason
from hostpool_operator.engine.balancer_view import Placement
from hostpool_operator.engine.demand import Demand
from hostpool_operator.engine.placement import Assign, Intent, Reject, Wait
from hostpool_operator.engine.pool_state import PoolState
from hostpool_operator.engine.records import HostRecord, PoolRecord
from hostpool_operator.engine.status import pending_message
from support.state_builders import (
    POOL,
    T0,
    Obj,
    Pool,
    assigned,
    at,
    host_obj,
    pool_obj,
    record_user,
    request_obj,
)

SATURATED = pending_message(Reason.POOL_SATURATED)
NOT_ELIGIBLE = pending_message(Reason.NO_ELIGIBLE_HOST)


def summary(intents: Iterable[Intent]) -> list[tuple[str, str, str | None]]:
    """(kind, request, host or reason) of each intent."""
    out: list[tuple[str, str, str | None]] = []
    for intent in intents:
        name = intent.record.meta.name
        if isinstance(intent, Assign):
            out.append(("assign", name, intent.placement.host))
        elif isinstance(intent, Wait):
            out.append(("wait", name, intent.reason.value))
        else:
            assert isinstance(intent, Reject)
            out.append(("reject", name, None))
    return out


# ---------------------------------------------------------------------------- reasons


def no_pool() -> Pool:
    return Pool(None, [host_obj("h1")])


def invalid_pool() -> Pool:
    return Pool(pool_obj(limit=None), [host_obj("h1")])  # DepthFirst needs a limit


def all_draining() -> Pool:
    return Pool(pool_obj(), [host_obj("h1", drainMode=True), host_obj("h2", drainMode=True)])


def all_full() -> Pool:
    pool = Pool(pool_obj(limit=1), [host_obj("h1"), host_obj("h2")])
    pool.session("rb", "bob", "h1")
    pool.session("rc", "carol", "h2")
    return pool


def no_host() -> Pool:
    return Pool(pool_obj())


def protocol_missing() -> Pool:
    return Pool(pool_obj(), [host_obj("h1", features={"protocols": ["RDP"]})])


@pytest.mark.parametrize(
    ("build", "reason", "message"),
    [
        pytest.param(no_pool, Reason.POOL_NOT_FOUND, "HostPool 'p' does not exist", id="no-pool"),
        pytest.param(
            invalid_pool,
            Reason.NO_ELIGIBLE_HOST,
            "HostPool 'p' is invalid: spec.loadBalancer: maxSessionLimit is required when "
            "type is DepthFirst",
            id="invalid-pool-spec",
        ),
        pytest.param(all_draining, Reason.NO_ELIGIBLE_HOST, NOT_ELIGIBLE, id="every-host-draining"),
        pytest.param(all_full, Reason.POOL_SATURATED, SATURATED, id="every-host-full"),
        pytest.param(no_host, Reason.POOL_SATURATED, SATURATED, id="no-host-yet"),
        pytest.param(protocol_missing, Reason.NO_ELIGIBLE_HOST, NOT_ELIGIBLE, id="no-protocol"),
    ],
)
def test_a_request_that_cannot_be_placed_waits_with_its_reason(
    build: Callable[[], Pool], reason: Reason, message: str
) -> None:
    pool = build()
    assert pool.put(request_obj("r1", "alice", protocol="PCOIP")) is None
    intents = pool.place()
    assert len(intents) == 1
    intent = intents[0]
    assert isinstance(intent, Wait)
    assert (intent.record.meta.name, intent.reason, intent.message) == ("r1", reason, message)
    state = pool.state
    assert list(state.waiting) == ["r1"]
    assert state.pending_said == {"r1": reason}
    assert "alice" not in state.ledger
    assert not state.inflight


def test_a_request_that_can_be_placed_is_assigned_and_reserved() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1"), host_obj("h2")])
    pool.arrive("r1", "alice")
    [intent] = pool.place(at(5))
    assert isinstance(intent, Assign)
    assert intent.placement == Placement("h1", Reason.NEW_SESSION)
    state = pool.state
    assert state.inflight == {"r1"}
    assert state.ledger.holds("alice", "r1")
    session = state.ledger.session_of("alice")
    assert session is not None
    assert (session.host, session.assigned_at, session.connecting_until) == ("h1", at(5), at(65))
    assert not state.waiting
    assert not state.arrivals


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"poolRef": {"name": POOL}, "user": ""}, id="empty-user"),
        pytest.param({"poolRef": {"name": POOL}}, id="no-user"),
        pytest.param({"poolRef": {"name": POOL}, "user": "a", "protocol": "VNC"}, id="protocol"),
        pytest.param({"poolRef": {"name": POOL}, "user": "a", "extra": 1}, id="unknown-field"),
    ],
)
def test_a_request_whose_spec_is_invalid_is_rejected(spec: Obj) -> None:
    pool = Pool(pool_obj(), [host_obj("h1")])
    obj = request_obj("bad")
    obj["spec"] = spec
    assert pool.put(obj) is None
    pool.arrive("good", "bob")
    assert summary(pool.place()) == [("reject", "bad", None), ("assign", "good", "h1")]
    assert "bad" not in pool.state.waiting
    assert pool.state.ledger.count_on("h1") == 1


def test_a_rejected_request_is_rejected_whatever_the_pool() -> None:
    pool = Pool(None)
    obj = request_obj("bad")
    obj["spec"] = {"poolRef": {"name": POOL}}
    pool.put(obj)
    assert summary(pool.place()) == [("reject", "bad", None)]


# ---------------------------------------------------------------------------- order


@pytest.mark.parametrize(
    ("seqs", "assigned_first"),
    [
        pytest.param({"a": 1, "b": 2, "c": 3}, ["a", "b", "c"], id="name-order"),
        pytest.param({"a": 3, "b": 2, "c": 1}, ["c", "b", "a"], id="reverse"),
        pytest.param({"a": 3, "b": 1, "c": 2}, ["b", "c", "a"], id="mixed"),
    ],
)
def test_requests_are_placed_in_arrival_order_not_name_order(
    seqs: dict[str, int], assigned_first: list[str]
) -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    for name in ["b", "a", "c"]:  # observed in neither order: seq decides
        pool.arrive(name, f"user-{name}", seq=seqs[name])
    first, *rest = assigned_first
    assert summary(pool.place()) == [
        ("assign", first, "h1"),
        *(("wait", name, "PoolSaturated") for name in rest),
    ]


def test_a_waiting_request_goes_before_a_later_arrival_when_capacity_appears() -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.session("r0", "zed", "h1")
    pool.arrive("waiter", "wendy")  # seq 2
    assert summary(pool.place()) == [("wait", "waiter", "PoolSaturated")]
    pool.state.drop_request("r0")
    pool.arrive("a-newcomer", "nick")  # seq 3, but first by name
    assert summary(pool.place()) == [
        ("assign", "waiter", "h1"),
        ("wait", "a-newcomer", "PoolSaturated"),
    ]


# ---------------------------------------------------------------------------- no rewrites


@pytest.mark.parametrize(
    ("stored", "writes"),
    [
        pytest.param(None, True, id="no-status"),
        pytest.param({"phase": "Pending", "reason": "PoolSaturated"}, False, id="says-so"),
        pytest.param({"phase": "Pending", "reason": "NoEligibleHost"}, True, id="other-reason"),
        pytest.param({"phase": "Pending"}, True, id="no-reason"),
        pytest.param({"reason": "PoolSaturated"}, True, id="no-phase"),
    ],
)
def test_a_stored_pending_reason_is_not_written_again(stored: Obj | None, writes: bool) -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.session("r0", "zed", "h1")
    assert pool.put(request_obj("r1", "alice", status=stored)) is None
    intents = pool.place()
    assert summary(intents) == ([("wait", "r1", "PoolSaturated")] if writes else [])
    # Either way it waits, and the state knows what its status says.
    assert list(pool.state.waiting) == ["r1"]
    assert pool.state.pending_said == {"r1": Reason.POOL_SATURATED}


def test_a_wait_being_written_is_not_written_again_on_a_retry() -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1"), host_obj("h2")])
    pool.session("r0", "zed", "h1")
    pool.session("rb", "bob", "h2")
    pool.arrive("r1", "alice")
    assert summary(pool.place()) == [("wait", "r1", "PoolSaturated")]
    pool.state.drop_request("rb")  # capacity appears ...
    pool.session("rc", "carol", "h2")  # ... and is taken before the pass
    assert pool.state.capacity_changed
    assert pool.place() == []  # retried, still saturated: its Wait is on its way already
    assert list(pool.state.waiting) == ["r1"]


def test_a_changed_reason_is_written() -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.session("r0", "zed", "h1")
    pool.arrive("r1", "alice")
    assert summary(pool.place()) == [("wait", "r1", "PoolSaturated")]
    pool.state.put_host(HostRecord.of(host_obj("h1", drainMode=True)), T0)
    intents = pool.place()
    assert summary(intents) == [("wait", "r1", "NoEligibleHost")]
    assert pool.state.pending_said == {"r1": Reason.NO_ELIGIBLE_HOST}


def test_a_request_created_again_after_its_deletion_gets_its_wait_written() -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.session("r0", "zed", "h1")
    pool.arrive("r1", "alice")
    assert summary(pool.place()) == [("wait", "r1", "PoolSaturated")]
    pool.state.drop_request("r1")
    again = request_obj("r1", "alice", rv=5)
    again["metadata"]["uid"] = "uid-r1-again"
    assert pool.put(again) is None
    assert summary(pool.place()) == [("wait", "r1", "PoolSaturated")]  # a new object: no status


# ---------------------------------------------------------------------------- retries


class CountingPlace:
    """Counts the engine's decisions of one state."""

    def __init__(self, state: PoolState, monkeypatch: pytest.MonkeyPatch) -> None:
        assert state.views.balancer is not None
        self.calls: list[str] = []
        original = state.views.balancer.place

        def place(demand: Demand) -> Placement:
            self.calls.append(demand.user)
            return original(demand)

        monkeypatch.setattr(state.views.balancer, "place", place)


def test_waiting_requests_are_retried_only_when_capacity_may_have_appeared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.session("r0", "zed", "h1")
    pool.arrive("r1", "alice")
    pool.arrive("r2", "bob")
    assert summary(pool.place()) == [
        ("wait", "r1", "PoolSaturated"),
        ("wait", "r2", "PoolSaturated"),
    ]
    counter = CountingPlace(pool.state, monkeypatch)

    # A second pass without a capacity change: nothing is asked again.
    assert not pool.state.capacity_changed
    assert pool.place() == []
    assert counter.calls == []
    assert list(pool.state.waiting) == ["r1", "r2"]

    # The session on h1 ends (its request is deleted): the waiting ones are retried.
    pool.state.drop_request("r0")
    assert pool.state.capacity_changed
    intents = pool.place(at(10))
    assert summary(intents) == [("assign", "r1", "h1")]  # r2: said already, no write
    assert counter.calls == ["alice", "bob"]
    assert list(pool.state.waiting) == ["r2"]
    assert not pool.state.capacity_changed


def test_the_echo_of_a_wait_does_not_queue_the_request_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.session("r0", "zed", "h1")
    pool.arrive("r1", "alice")
    [wait] = pool.place()
    assert isinstance(wait, Wait)
    echo = request_obj("r1", "alice", rv=2, status={"phase": "Pending", "reason": "PoolSaturated"})
    assert pool.put(echo) is None  # the watch event of our own Pending write
    assert not pool.state.arrivals
    counter = CountingPlace(pool.state, monkeypatch)
    assert pool.place() == []
    assert counter.calls == []


@pytest.mark.parametrize("waited", [False, True], ids=["queued", "waiting"])
def test_a_request_someone_else_assigned_leaves_the_queues(waited: bool) -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1", drainMode=waited)])
    pool.arrive("r1", "alice")
    if waited:
        assert summary(pool.place()) == [("wait", "r1", "NoEligibleHost")]
    assert pool.put(request_obj("r1", "alice", rv=2, status=assigned("h1"))) is None
    state = pool.state
    assert (state.arrivals, state.waiting) == ({}, {})
    state.capacity_changed = True
    assert pool.place() == []
    assert state.ledger.holds("alice", "r1")
    assert state.ledger.count_on("h1") == 1


def test_a_saturated_pass_asks_the_engine_once_per_request_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.session("r0", "zed", "h1")
    counter = CountingPlace(pool.state, monkeypatch)
    for i in range(5):
        pool.arrive(f"r{i + 1}", f"user{i}")
    pool.put(request_obj("rdp", "rita", protocol="RDP"))
    intents = pool.place()
    assert [i.reason for i in intents if isinstance(i, Wait)] == [Reason.POOL_SATURATED] * 6
    assert counter.calls == ["user0", "rita"]  # one per (protocol, unauthenticated)


def test_a_new_arrival_alone_does_not_retry_the_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.session("r0", "zed", "h1")
    pool.arrive("r1", "alice")
    pool.place()
    counter = CountingPlace(pool.state, monkeypatch)
    pool.arrive("r2", "bob")
    assert summary(pool.place()) == [("wait", "r2", "PoolSaturated")]
    assert counter.calls == ["bob"]


# ---------------------------------------------------------------------------- reservations


@pytest.mark.parametrize(
    ("limit", "hosts", "requests", "assigned_to"),
    [
        pytest.param(1, 1, 2, ["h1"], id="limit1-two-requests"),
        pytest.param(1, 2, 3, ["h1", "h2"], id="two-hosts-three-requests"),
        pytest.param(2, 2, 5, ["h1", "h1", "h2", "h2"], id="depth-first-fills-in-turn"),
        pytest.param(3, 1, 3, ["h1", "h1", "h1"], id="exactly-full"),
    ],
)
def test_a_reservation_counts_toward_the_limit_at_once(
    limit: int, hosts: int, requests: int, assigned_to: list[str]
) -> None:
    pool = Pool(pool_obj(limit=limit), [host_obj(f"h{i + 1}") for i in range(hosts)])
    for i in range(requests):
        pool.arrive(f"r{i}", f"user{i}")
    intents = pool.place()
    assigns = [i for i in intents if isinstance(i, Assign)]
    waits = [i for i in intents if isinstance(i, Wait)]
    assert [a.placement.host for a in assigns] == assigned_to
    assert [w.reason for w in waits] == [Reason.POOL_SATURATED] * (requests - len(assigned_to))
    for h in range(hosts):
        assert pool.state.ledger.count_on(f"h{h + 1}") <= limit
        view = pool.state.views.balancer.host(f"h{h + 1}") if pool.state.views.balancer else None
        assert view is not None
        assert view.sessions == pool.state.ledger.count_on(f"h{h + 1}")


def test_two_requests_of_one_user_in_one_pass_share_one_session() -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.arrive("r1", "alice")
    pool.arrive("r2", "alice")
    intents = pool.place()
    assert [(i.record.meta.name, i.placement) for i in intents if isinstance(i, Assign)] == [
        ("r1", Placement("h1", Reason.NEW_SESSION)),
        ("r2", Placement("h1", Reason.RECONNECTED)),
    ]
    ledger = pool.state.ledger
    assert ledger.count_on("h1") == 1
    assert ledger.holds("alice", "r1")
    assert ledger.holds("alice", "r2")


# ---------------------------------------------------------------------------- reconnects


@pytest.mark.parametrize(
    ("pool_spec", "h1"),
    [
        pytest.param(pool_obj(limit=2), host_obj("h1", drainMode=True), id="draining"),
        pytest.param(pool_obj(limit=1), host_obj("h1"), id="full"),
        pytest.param(pool_obj(limit=1), host_obj("h1", drainMode=True), id="draining-and-full"),
    ],
)
def test_a_user_with_a_session_goes_back_to_its_host(pool_spec: Obj, h1: Obj) -> None:
    pool = Pool(pool_spec, [h1, host_obj("h2")])
    pool.session("r1", "alice", "h1")
    pool.arrive("r2", "alice")
    [intent] = pool.place()
    assert isinstance(intent, Assign)
    assert intent.placement == Placement("h1", Reason.RECONNECTED)
    ledger = pool.state.ledger
    assert ledger.count_on("h1") == 1  # no second session
    assert ledger.count_on("h2") == 0
    assert ledger.holds("alice", "r1")
    assert ledger.holds("alice", "r2")


def test_a_reconnect_is_placed_even_after_its_shape_failed_in_the_pass() -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1"), host_obj("h2")])
    pool.session("r1", "alice", "h1")
    pool.session("rb", "bob", "h2")
    pool.arrive("c1", "carol")  # saturated: the shape (None, False) failed
    pool.arrive("r2", "alice")  # same shape, but a reconnect
    assert summary(pool.place()) == [
        ("wait", "c1", "PoolSaturated"),
        ("assign", "r2", "h1"),
    ]


def test_a_lowered_limit_ends_no_session_but_new_requests_wait() -> None:
    pool = Pool(pool_obj(limit=3), [host_obj("h1")])
    pool.session("ra", "alice", "h1")
    pool.session("rb", "bob", "h1")
    pool.state.set_pool(PoolRecord.of(pool_obj(limit=1)), at(1))
    ledger = pool.state.ledger
    assert ledger.count_on("h1") == 2
    assert (ledger.host_of("alice"), ledger.host_of("bob")) == ("h1", "h1")
    pool.arrive("rc", "carol")
    pool.arrive("ra2", "alice")
    intents = pool.place(at(2))
    assert summary(intents) == [("wait", "rc", "PoolSaturated"), ("assign", "ra2", "h1")]
    assert ledger.count_on("h1") == 2
    # Back up: carol fits again.
    pool.state.set_pool(PoolRecord.of(pool_obj(limit=3)), at(3))
    assert summary(pool.place(at(4))) == [("assign", "rc", "h1")]
    assert ledger.count_on("h1") == 3


def test_requests_wait_for_their_pool_and_are_placed_when_it_appears() -> None:
    pool = Pool(None, [host_obj("h1")])
    pool.arrive("r1", "alice")
    assert summary(pool.place()) == [("wait", "r1", "PoolNotFound")]
    pool.state.set_pool(PoolRecord.of(pool_obj()), at(1))
    assert summary(pool.place(at(2))) == [("assign", "r1", "h1")]


def test_an_inflight_request_is_not_placed_again() -> None:
    pool = Pool(pool_obj(limit=5), [host_obj("h1")])
    pool.arrive("r1", "alice")
    [intent] = pool.place()
    assert isinstance(intent, Assign)
    pool.state.arrivals["r1"] = None  # e.g. a re-read puts it back while its write is on its way
    pool.state.capacity_changed = True
    assert pool.place() == []
    assert pool.state.ledger.count_on("h1") == 1


def test_a_request_deleted_before_its_pass_is_skipped() -> None:
    pool = Pool(pool_obj(limit=1), [host_obj("h1")])
    pool.arrive("r1", "alice")
    pool.arrive("r2", "bob")
    pool.state.drop_request("r1")
    assert summary(pool.place()) == [("assign", "r2", "h1")]


# ---------------------------------------------------------------------------- property

USERS = [f"u{i}" for i in range(6)]

steps = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), st.sampled_from(USERS)),
        st.tuples(st.just("drop"), st.integers(0, 50)),
        st.tuples(st.just("write"), st.integers(0, 50)),
        st.tuples(st.just("echo"), st.integers(0, 50)),
        st.tuples(st.just("pass"), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(1, 3),
    draining=st.lists(st.booleans(), min_size=1, max_size=3),
    kind=st.sampled_from(["DepthFirst", "BreadthFirst"]),
    steps=steps,
)
def test_no_host_ever_goes_over_its_limit(
    limit: int, draining: list[bool], kind: str, steps: list[tuple[str, int | str]]
) -> None:
    """Random arrivals (users repeat: reconnects), deletions, completed writes and their
    echoes, with placement passes in between: after every pass no host has more sessions
    than the limit, the engine's counts are the ledger's, and nobody waits while a slot is
    free."""
    hosts = [host_obj(f"h{i}", drainMode=d) for i, d in enumerate(draining)]
    pool = Pool(pool_obj(limit=limit, lb_type=kind), hosts)
    state = pool.state
    assert state.views.balancer is not None
    pending_writes: list[Assign] = []
    names = itertools.count()
    for step, arg in [*steps, ("pass", 0)]:
        if step == "arrive":
            assert isinstance(arg, str)
            pool.arrive(f"r{next(names)}", arg)
        elif step == "drop" and state.requests:
            assert isinstance(arg, int)
            name = sorted(state.requests)[arg % len(state.requests)]
            state.drop_request(name)
            state.inflight.discard(name)  # the writer sees it gone
        elif step == "write" and pending_writes:
            assert isinstance(arg, int)
            intent = pending_writes.pop(arg % len(pending_writes))
            if intent.record.meta.name in state.requests:
                pool.written(intent)
        elif step == "echo" and state.requests:
            # The watch sends back a version the state has already (our own write's echo).
            assert isinstance(arg, int)
            name = sorted(state.requests)[arg % len(state.requests)]
            again = dataclasses.replace(state.requests[name])
            assert state.put_request(again, T0, seq=lambda: -1, seen=0.0) is None
        elif step == "pass":
            pending_writes += [i for i in pool.place() if isinstance(i, Assign)]
            for view in state.views.balancer.hosts():
                assert view.sessions == state.ledger.count_on(view.name)
                assert view.sessions <= limit
            free = state.views.balancer.free_slots()
            assert not (state.waiting and free), (dict(state.waiting), free)
    # Every request is either held by its user's session or waiting, none forgotten.
    for name, record in state.requests.items():
        user = record_user(record)
        assert state.ledger.holds(user, name) or name in state.waiting


# --------------------------------------------------------------------------- a plan's drain


def test_a_host_the_plan_drains_takes_no_new_session_in_the_same_pass() -> None:
    """Ramp-down drains the emptiest host, exactly where breadth-first sends the next logon.
    Closed when the plan decides (not when its drain write comes back), no new user lands
    there to be logged off; a user with a session there still reconnects to it."""
    pool = Pool(pool_obj(5, "BreadthFirst"), [host_obj("h1"), host_obj("h2")])
    pool.session("a", "alice", "h1")
    pool.session("b1", "bob", "h2")
    pool.session("b2", "bea", "h2")
    pool.arrive("new-1", "carol")
    assert summary(pool.place()) == [("assign", "new-1", "h1")]  # the emptiest, as expected

    pool = Pool(pool_obj(5, "BreadthFirst"), [host_obj("h1"), host_obj("h2")])
    pool.session("a", "alice", "h1")
    pool.session("b1", "bob", "h2")
    pool.session("b2", "bea", "h2")
    pool.state.close_for_plan(["h1"], T0)
    pool.arrive("new-1", "carol")
    pool.arrive("again", "alice")  # alice's second request: a reconnect
    assert summary(pool.place()) == [("assign", "new-1", "h2"), ("assign", "again", "h1")]


def test_a_host_no_longer_drained_by_the_plan_opens_again() -> None:
    pool = Pool(pool_obj(5, "BreadthFirst"), [host_obj("h1"), host_obj("h2")])
    pool.session("b1", "bob", "h2")
    pool.state.close_for_plan(["h1"], T0)
    pool.state.close_for_plan([], T0)  # the next pass: the plan drains nothing
    pool.arrive("new-1", "carol")
    assert summary(pool.place()) == [("assign", "new-1", "h1")]
