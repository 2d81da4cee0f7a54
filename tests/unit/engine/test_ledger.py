"""The session ledger: sessions per user and per host, their holders, connecting deadlines.

Every time is injected (``T0`` plus an offset): the ledger never reads a clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.engine.ledger import Session, SessionLedger

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TIMEOUT = timedelta(seconds=60)
TICK = timedelta(microseconds=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def assigned(
    ledger: SessionLedger, user: str, host: str, holder: str, *, when: datetime = T0
) -> Session:
    """What an assignment does: a new session, connecting until ``when + TIMEOUT``."""
    return ledger.open(user, host, holder=holder, assigned_at=when, connecting_until=when + TIMEOUT)


def invariants(ledger: SessionLedger) -> None:
    """The two indexes agree: every user is on exactly the host its session names."""
    users = dict(ledger.items())
    hosts = {session.host for session in users.values()}
    for host in hosts:
        on = {user for user, session in users.items() if session.host == host}
        assert ledger.users_on(host) == on
        assert ledger.count_on(host) == len(on)
    assert len(ledger) == len(users)


# ---------------------------------------------------------------------------- assignment


def test_assignment_opens_a_held_connecting_session() -> None:
    ledger = SessionLedger()
    session = assigned(ledger, "alice", "h1", "r1")
    assert "alice" in ledger
    assert len(ledger) == 1
    assert ledger.session_of("alice") is session
    assert ledger.host_of("alice") == "h1"
    assert ledger.holds("alice", "r1")
    assert not ledger.holds("alice", "r2")
    assert session.connecting
    assert session.assigned_at == T0
    assert ledger.users_on("h1") == {"alice"}
    assert (ledger.count_on("h1"), ledger.connecting_on("h1")) == (1, 1)
    assert ledger.next_deadline() == T0 + TIMEOUT


def test_open_without_deadline_is_not_connecting_and_not_in_the_heap() -> None:
    ledger = SessionLedger()
    session = ledger.open("alice", "h1")
    assert not session.connecting
    assert session.holders == ()
    assert ledger.connecting_on("h1") == 0
    assert ledger.next_deadline() is None


def test_open_refuses_a_second_session_of_the_same_user() -> None:
    ledger = SessionLedger()
    assigned(ledger, "alice", "h1", "r1")
    with pytest.raises(ValueError, match=r"'alice' already has a session on h1"):
        ledger.open("alice", "h2", holder="r2")
    assert ledger.host_of("alice") == "h1"
    assert ledger.count_on("h2") == 0
    assert not ledger.holds("alice", "r2")


def test_unknown_users_and_hosts_read_as_empty() -> None:
    ledger = SessionLedger()
    assert ledger.session_of("nobody") is None
    assert ledger.host_of("nobody") is None
    assert not ledger.holds("nobody", "r1")
    assert ledger.users_on("h1") == frozenset()
    assert (ledger.count_on("h1"), ledger.connecting_on("h1")) == (0, 0)
    assert ledger.end("nobody") is None
    assert ledger.end_on("h1") == []
    assert ledger.settle("nobody") is None
    assert ledger.release("nobody", "r1") is None


# ---------------------------------------------------------------------------- holders


def test_reconnect_adds_a_holder_and_the_last_holder_ends_the_session() -> None:
    ledger = SessionLedger()
    assigned(ledger, "alice", "h1", "r1")
    ledger.hold("alice", "r2")  # a reconnect
    assert ledger.holds("alice", "r1")
    assert ledger.holds("alice", "r2")
    assert ledger.count_on("h1") == 1  # one session, two holders

    assert ledger.release("alice", "r1") is None  # r2 still holds it
    assert ledger.host_of("alice") == "h1"
    assert ledger.count_on("h1") == 1

    ended = ledger.release("alice", "r2")
    assert ended is not None
    assert ended.host == "h1"
    assert "alice" not in ledger
    assert ledger.count_on("h1") == 0
    assert ledger.users_on("h1") == frozenset()


@pytest.mark.parametrize(
    ("holders", "releaser"),
    [
        pytest.param(["r1"], "stranger", id="not-a-holder"),
        pytest.param([], "stranger", id="no-holder-at-all"),
        pytest.param(["r1", "r2"], "r1", id="one-of-two-holders"),
    ],
)
def test_release_by_a_non_last_holder_keeps_the_session(holders: list[str], releaser: str) -> None:
    ledger = SessionLedger()
    ledger.open("alice", "h1")
    for holder in holders:
        ledger.hold("alice", holder)
    assert ledger.release("alice", releaser) is None
    assert ledger.host_of("alice") == "h1"
    assert ledger.count_on("h1") == 1


def test_release_twice_by_the_same_holder_ends_nothing_more() -> None:
    ledger = SessionLedger()
    assigned(ledger, "alice", "h1", "r1")
    assert ledger.release("alice", "r1") is not None
    assigned(ledger, "alice", "h2", "r2")  # a new session of the same user
    assert ledger.release("alice", "r1") is None  # r1's session is long gone
    assert ledger.host_of("alice") == "h2"


def test_end_ends_the_session_whoever_holds_it() -> None:
    ledger = SessionLedger()
    assigned(ledger, "alice", "h1", "r1")
    ledger.hold("alice", "r2")
    ended = ledger.end("alice")
    assert ended is not None
    assert set(ended.holders) == {"r1", "r2"}
    assert "alice" not in ledger
    assert ledger.count_on("h1") == 0


def test_end_on_ends_every_session_on_the_host_only() -> None:
    ledger = SessionLedger()
    assigned(ledger, "bob", "h1", "rb")
    assigned(ledger, "alice", "h1", "ra1")
    ledger.hold("alice", "ra2")
    assigned(ledger, "carol", "h2", "rc")
    ended = ledger.end_on("h1")
    assert [s.host for s in ended] == ["h1", "h1"]
    assert [sorted(s.holders) for s in ended] == [["ra1", "ra2"], ["rb"]]  # by user
    assert ledger.host_of("alice") is None
    assert ledger.host_of("bob") is None
    assert ledger.count_on("h1") == 0
    assert ledger.users_on("h1") == frozenset()
    assert ledger.host_of("carol") == "h2"
    assert len(ledger) == 1
    # The user is free again: a new session anywhere.
    assigned(ledger, "alice", "h2", "ra3")
    assert ledger.count_on("h2") == 2


# ---------------------------------------------------------------------------- counts


@pytest.mark.parametrize(
    ("sessions", "expected"),
    [
        pytest.param({}, {"h1": 0, "h2": 0}, id="empty"),
        pytest.param({"alice": "h1"}, {"h1": 1, "h2": 0}, id="one"),
        pytest.param(
            {"alice": "h1", "bob": "h1", "carol": "h2"}, {"h1": 2, "h2": 1}, id="two-hosts"
        ),
        pytest.param(
            {"u0": "h2", "u1": "h2", "u2": "h2", "u3": "h2"}, {"h1": 0, "h2": 4}, id="one-host"
        ),
    ],
)
def test_counts_per_host(sessions: dict[str, str], expected: dict[str, int]) -> None:
    ledger = SessionLedger()
    for user, host in sessions.items():
        assigned(ledger, user, host, f"r-{user}")
        ledger.hold(user, f"r2-{user}")  # holders never count as sessions
    assert {host: ledger.count_on(host) for host in expected} == expected
    assert {host: ledger.connecting_on(host) for host in expected} == expected
    assert len(ledger) == len(sessions)
    invariants(ledger)


def test_connecting_on_counts_only_sessions_still_connecting() -> None:
    ledger = SessionLedger()
    assigned(ledger, "alice", "h1", "r1")
    assigned(ledger, "bob", "h1", "r2")
    ledger.open("carol", "h1", holder="r3")  # observed Active: never connecting
    ledger.settle("bob")
    assert (ledger.count_on("h1"), ledger.connecting_on("h1")) == (3, 1)


# ---------------------------------------------------------------------------- settling


@pytest.mark.parametrize(
    ("connecting", "settles"),
    [
        pytest.param(True, True, id="connecting-settles"),
        pytest.param(False, False, id="already-settled"),
    ],
)
def test_settle_when_the_agent_reports_active_or_disconnected(
    connecting: bool, settles: bool
) -> None:
    ledger = SessionLedger()
    if connecting:
        assigned(ledger, "alice", "h1", "r1")
    else:
        ledger.open("alice", "h1", holder="r1", assigned_at=T0)
    settled = ledger.settle("alice")
    assert (settled is not None) == settles
    session = ledger.session_of("alice")
    assert session is not None
    assert not session.connecting
    assert ledger.connecting_on("h1") == 0
    assert ledger.count_on("h1") == 1  # settling ends nothing
    assert ledger.settle("alice") is None  # once only


def test_a_settled_session_is_not_settled_again_by_its_deadline() -> None:
    ledger = SessionLedger()
    assigned(ledger, "alice", "h1", "r1")
    ledger.settle("alice")
    assert ledger.expire(T0 + TIMEOUT) == []
    assert ledger.next_deadline() is None  # the stale entry was popped


@pytest.mark.parametrize(
    ("now", "settles"),
    [
        pytest.param(T0, False, id="at-assignment"),
        pytest.param(T0 + TIMEOUT - TICK, False, id="just-before"),
        pytest.param(T0 + TIMEOUT, True, id="exactly-at"),
        pytest.param(T0 + TIMEOUT + TICK, True, id="just-after"),
        pytest.param(T0 + 10 * TIMEOUT, True, id="long-after"),
    ],
)
def test_expiry_at_the_deadline_and_not_before(now: datetime, settles: bool) -> None:
    ledger = SessionLedger()
    session = assigned(ledger, "alice", "h1", "r1")
    settled = ledger.expire(now)
    assert settled == ([session] if settles else [])
    assert session.connecting is not settles
    assert ledger.connecting_on("h1") == (0 if settles else 1)
    assert ledger.next_deadline() == (None if settles else T0 + TIMEOUT)
    assert ledger.host_of("alice") == "h1"  # expiry settles, it never ends a session


def test_expire_settles_the_due_sessions_in_deadline_order() -> None:
    ledger = SessionLedger()
    for user, offset in [("late", 30), ("early", 0), ("middle", 10), ("last", 50)]:
        assigned(ledger, user, "h1", f"r-{user}", when=at(offset))
    assert ledger.next_deadline() == at(60)
    settled = ledger.expire(at(70))
    assert [ledger_user(ledger, s) for s in settled] == ["early", "middle"]
    assert ledger.next_deadline() == at(90)
    assert ledger.connecting_on("h1") == 2


def ledger_user(ledger: SessionLedger, session: Session) -> str:
    return next(user for user, s in ledger.items() if s is session)


def test_a_deadline_of_an_ended_session_does_not_settle_the_next_one() -> None:
    ledger = SessionLedger()
    assigned(ledger, "alice", "h1", "r1")  # deadline T0+60
    ledger.release("alice", "r1")
    later = assigned(ledger, "alice", "h2", "r2", when=at(30))  # deadline T0+90
    assert ledger.expire(at(60)) == []
    assert later.connecting
    assert ledger.expire(at(90)) == [later]


# ---------------------------------------------------------------------------- retime


def test_a_moved_deadline_leaves_a_stale_heap_entry_that_settles_nothing() -> None:
    ledger = SessionLedger()
    session = assigned(ledger, "alice", "h1", "r1")  # deadline T0+60
    assert ledger.retime(timedelta(seconds=120), at(10)) == []
    assert session.connecting_until == at(120)
    assert ledger.next_deadline() == at(60)  # the stale entry is still the heap's first
    assert ledger.expire(at(60)) == []  # ... and settles nothing
    assert session.connecting
    assert ledger.next_deadline() == at(120)
    assert ledger.expire(at(120) - TICK) == []
    assert ledger.expire(at(120)) == [session]
    assert ledger.next_deadline() is None


def test_a_shortened_deadline_settles_at_the_new_time() -> None:
    ledger = SessionLedger()
    session = assigned(ledger, "alice", "h1", "r1")  # deadline T0+60
    assert ledger.retime(timedelta(seconds=20), at(10)) == []
    assert ledger.next_deadline() == at(20)
    assert ledger.expire(at(20)) == [session]
    assert ledger.expire(at(60)) == []  # the old entry is stale


@pytest.mark.parametrize(
    ("timeout", "now", "settled", "still_connecting"),
    [
        # alice assigned at T0, bob at T0+20 (both connecting), carol Active, dave has no
        # assignedAt (observed without one): only alice and bob are retimed.
        pytest.param(30, 40, ["alice"], {"bob": at(50)}, id="one-past-new-deadline"),
        pytest.param(30, 30, ["alice"], {"bob": at(50)}, id="exactly-at-new-deadline"),
        pytest.param(30, 29, [], {"alice": at(30), "bob": at(50)}, id="none-past"),
        pytest.param(10, 30, ["alice", "bob"], {}, id="all-past"),
        pytest.param(300, 100, [], {"alice": at(300), "bob": at(320)}, id="longer"),
    ],
)
def test_retime_settles_the_sessions_already_past_the_new_deadline(
    timeout: int, now: int, settled: list[str], still_connecting: dict[str, datetime]
) -> None:
    ledger = SessionLedger()
    assigned(ledger, "alice", "h1", "ra")
    assigned(ledger, "bob", "h2", "rb", when=at(20))
    ledger.open("carol", "h1", holder="rc", assigned_at=T0)
    ledger.open("dave", "h2", holder="rd", connecting_until=at(1000))
    result = ledger.retime(timedelta(seconds=timeout), at(now))
    assert sorted(ledger_user(ledger, s) for s in result) == settled
    connecting = {
        user: s.connecting_until for user, s in ledger.items() if s.connecting and user != "dave"
    }
    assert connecting == still_connecting
    dave = ledger.session_of("dave")
    assert dave is not None
    assert dave.connecting_until == at(1000)  # no assignedAt: left as it was
    carol = ledger.session_of("carol")
    assert carol is not None
    assert not carol.connecting
    # The settled ones are never settled again by their old or new heap entries.
    later = ledger.expire(at(10_000))
    assert sorted(ledger_user(ledger, s) for s in later) == sorted([*still_connecting, "dave"])


# ---------------------------------------------------------------------------- properties

USERS = ["u0", "u1", "u2", "u3", "u4"]
HOSTS = ["h0", "h1", "h2"]
REQUESTS = ["r0", "r1", "r2", "r3"]

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("open"),
            st.sampled_from(USERS),
            st.sampled_from(HOSTS),
            st.sampled_from(REQUESTS),
            st.integers(0, 120),
        ),
        st.tuples(st.just("hold"), st.sampled_from(USERS), st.sampled_from(REQUESTS)),
        st.tuples(st.just("release"), st.sampled_from(USERS), st.sampled_from(REQUESTS)),
        st.tuples(st.just("end"), st.sampled_from(USERS)),
        st.tuples(st.just("end_on"), st.sampled_from(HOSTS)),
        st.tuples(st.just("settle"), st.sampled_from(USERS)),
        st.tuples(st.just("expire"), st.integers(0, 200)),
        st.tuples(st.just("retime"), st.integers(1, 120), st.integers(0, 200)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_counts_always_match_the_users_sessions(ops: list[tuple[object, ...]]) -> None:
    """For any sequence of operations, count_on(host) is the number of users whose host_of
    is that host, users_on agrees, and a session's holders are what was held and not
    released (a model kept beside the ledger)."""
    ledger = SessionLedger()
    model: dict[str, tuple[str, set[str]]] = {}  # user -> (host, holders)
    for op in ops:
        match op:
            case ("open", str(user), str(host), str(request), int(offset)):
                if user in model:
                    with pytest.raises(ValueError, match="already has a session"):
                        ledger.open(user, host, holder=request)
                else:
                    when = at(offset)
                    ledger.open(
                        user,
                        host,
                        holder=request,
                        assigned_at=when,
                        connecting_until=when + TIMEOUT,
                    )
                    model[user] = (host, {request})
            case ("hold", str(user), str(request)):
                if user in model:
                    ledger.hold(user, request)
                    model[user][1].add(request)
            case ("release", str(user), str(request)):
                ended = ledger.release(user, request)
                last = user in model and model[user][1] == {request}
                assert (ended is not None) == last
                if user in model:
                    model[user][1].discard(request)
                    if not model[user][1]:
                        del model[user]
            case ("end", str(user)):
                assert (ledger.end(user) is not None) == (user in model)
                model.pop(user, None)
            case ("end_on", str(host)):
                gone = [u for u, (h, _) in model.items() if h == host]
                assert len(ledger.end_on(host)) == len(gone)
                for user in gone:
                    del model[user]
            case ("settle", str(user)):
                ledger.settle(user)
            case ("expire", int(offset)):
                due = {
                    id(s)
                    for s in ledger.sessions()
                    if s.connecting_until is not None and s.connecting_until <= at(offset)
                }
                assert {id(s) for s in ledger.expire(at(offset))} == due
                # Nothing still connecting is past its deadline.
                assert all(
                    s.connecting_until is None or s.connecting_until > at(offset)
                    for s in ledger.sessions()
                )
            case ("retime", int(seconds), int(offset)):
                ledger.retime(timedelta(seconds=seconds), at(offset))
            case _:
                raise AssertionError(op)
        assert_agrees_with_model(ledger, model)
        invariants(ledger)


def assert_agrees_with_model(ledger: SessionLedger, model: dict[str, tuple[str, set[str]]]) -> None:
    """Each host's counts and users, and each user's session and holders, as the model says."""
    for host in HOSTS:
        on = {user for user in USERS if ledger.host_of(user) == host}
        assert ledger.count_on(host) == len(on) == len(ledger.users_on(host))
        assert ledger.users_on(host) == on
        assert on == {u for u, (h, _) in model.items() if h == host}
        assert ledger.connecting_on(host) <= ledger.count_on(host)
    for user in USERS:
        session = ledger.session_of(user)
        assert (session is None) == (user not in model)
        if session is not None:
            assert set(session.holders) == model[user][1]
