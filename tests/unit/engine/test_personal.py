"""Personal placement: each user's own host, a claim for a user without one, or a wait.

Table tests of every rule, then properties over random pools and arrival orders: however
requests of however many users arrive, no host is ever given to two users, no user gets
two hosts, and a user keeps the host they were given.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.api import PersonalAssignment, Reason
from hostpool_operator.engine.balancer_view import Placement
from hostpool_operator.engine.personal import PersonalHost, PersonalPlacement, place_personal
from hostpool_operator.engine.power import PowerView, hosts_to_stop, next_stop, stop_due

AUTO = PersonalAssignment.AUTOMATIC
DIRECT = PersonalAssignment.DIRECT


def h(name: str, user: str | None = None, *, open_: bool = True, **more: object) -> PersonalHost:
    return PersonalHost(name, user, open_, **more)  # type: ignore[arg-type]


def placed(
    host: str, reason: Reason = Reason.PERSONAL, *, claim: bool = False
) -> PersonalPlacement:
    return PersonalPlacement(Placement(host, reason), claim=claim)


def waits(reason: Reason) -> PersonalPlacement:
    return PersonalPlacement(Placement(None, reason))


CASES = [
    pytest.param(
        [h("a", "bob"), h("b", "alice")], AUTO, {}, None, False, placed("b"), id="own-host"
    ),
    pytest.param(
        [h("a", "bob"), h("b", "alice")], DIRECT, {}, None, False, placed("b"), id="own-host-direct"
    ),
    pytest.param(
        [h("a", "alice", open_=False, starting=True), h("b")],
        AUTO,
        {},
        None,
        False,
        waits(Reason.HOSTS_STARTING),
        id="own-host-starting-no-second-host",
    ),
    pytest.param(
        [h("a", "alice", open_=False), h("b")],
        AUTO,
        {},
        None,
        False,
        waits(Reason.NO_ELIGIBLE_HOST),
        id="own-host-draining",
    ),
    pytest.param(
        [h("a", "bob"), h("b", sessions=1), h("c", open_=False), h("d"), h("e")],
        AUTO,
        {},
        None,
        False,
        placed("d", claim=True),
        id="first-free-open-empty-unassigned",
    ),
    pytest.param(
        [h("a"), h("b")],
        AUTO,
        {"a": "bob"},
        None,
        False,
        placed("b", claim=True),
        id="claims-count",
    ),
    # Theirs by a claim not seen written: this request's write makes sure of it first.
    pytest.param(
        [h("a")], AUTO, {"a": "alice"}, None, False, placed("a", claim=True), id="own-claim"
    ),
    pytest.param(
        [h("a"), h("b")],
        AUTO,
        {"a": "alice"},
        "a",
        False,
        placed("a", Reason.RECONNECTED, claim=True),
        id="reconnect-on-a-claim-on-its-way",
    ),
    # The claim failed after a second request was placed on its strength: the reconnect
    # gives the host to them before the assignment, rather than leave it nobody's.
    pytest.param(
        [h("a", sessions=1), h("b")],
        AUTO,
        {},
        "a",
        False,
        placed("a", Reason.RECONNECTED, claim=True),
        id="reconnect-to-a-host-nobody-has",
    ),
    pytest.param(
        [h("a", "bob", sessions=1)],
        AUTO,
        {},
        "a",
        False,
        placed("a", Reason.RECONNECTED),
        id="reconnect-to-someone-elses-host-claims-nothing",
    ),
    pytest.param([h("a")], DIRECT, {}, None, False, waits(Reason.NO_HOST_ASSIGNED), id="direct"),
    pytest.param(
        [h("a", "bob")], AUTO, {}, None, True, waits(Reason.HOSTS_STARTING), id="room-to-add"
    ),
    pytest.param([h("a", "bob")], AUTO, {}, None, False, waits(Reason.NO_HOST_ASSIGNED), id="full"),
    pytest.param(
        [h("a", open_=False, starting=True)],
        AUTO,
        {},
        None,
        False,
        waits(Reason.HOSTS_STARTING),
        id="unassigned-starting",
    ),
    pytest.param(
        [h("a", "alice")],
        AUTO,
        {},
        "a",
        False,
        placed("a", Reason.RECONNECTED),
        id="reconnect",
    ),
    pytest.param(
        [h("a", "alice", open_=False)],
        DIRECT,
        {},
        "a",
        False,
        placed("a", Reason.RECONNECTED),
        id="reconnect-to-a-closed-host",
    ),
]


@pytest.mark.parametrize(("hosts", "assignment", "claims", "reconnect", "can_add", "want"), CASES)
def test_personal_placement(
    hosts: list[PersonalHost],
    assignment: PersonalAssignment,
    claims: dict[str, str],
    reconnect: str | None,
    can_add: bool,
    want: PersonalPlacement,
) -> None:
    got = place_personal(
        "alice", hosts, assignment, claims=claims, reconnect=reconnect, can_add=can_add
    )
    assert got == want


users = st.sampled_from(["alice", "bob", "carol", "dave", "erin"])
pools = st.lists(
    st.tuples(st.sampled_from([None, "alice", "bob", "zed"]), st.booleans()),
    min_size=0,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(pools, st.lists(users, max_size=30), st.sampled_from([AUTO, DIRECT]))
def test_no_host_is_shared_and_no_user_gets_two(
    layout: list[tuple[str | None, bool]], arrivals: list[str], assignment: PersonalAssignment
) -> None:
    """Requests arrive in any order, each decision's claim kept as the operator keeps it:
    every host ends with at most one user, every user with at most one host, each user's
    requests all go to one host, and a host assigned beforehand goes to no one else."""
    # Hosts assigned beforehand are each their user's only one (the CEL keeps it so).
    seen: set[str] = set()
    hosts = []
    for index, (user, is_open) in enumerate(layout):
        owner = user if user not in seen else None
        if owner is not None:
            seen.add(owner)
        hosts.append(h(f"h{index}", owner, open_=is_open))
    claims: dict[str, str] = {}
    given_to: dict[str, str] = {}
    for user in arrivals:
        answer = place_personal(user, hosts, assignment, claims=claims)
        host = answer.placement.host
        if host is None:
            assert (
                user not in given_to or not next(x for x in hosts if x.name == given_to[user]).open
            )
            continue
        assert answer.placement.reason is Reason.PERSONAL
        owner = next(x.user for x in hosts if x.name == host)
        if answer.claim:
            # A host nobody has, or theirs by a claim not seen written yet.
            assert assignment is AUTO
            assert owner is None
            assert claims.get(host, user) == user
            claims[host] = user
        else:
            assert owner == user  # seen written: nothing to make sure of
        assert given_to.setdefault(user, host) == host
    owners = [claims.get(x.name, x.user) for x in hosts]
    named = [owner for owner in owners if owner is not None]
    assert len(named) == len(set(named))


# ---------------------------------------------------------------------------- power

T = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def pv(
    name: str,
    user: str | None = "alice",
    *,
    running: bool = True,
    sessions: int = 0,
    unused: int | None = 0,
) -> PowerView:
    since = None if unused is None else T + timedelta(seconds=unused)
    return PowerView(name, user, running, sessions, since)


@pytest.mark.parametrize(
    ("host", "due"),
    [
        pytest.param(pv("h"), T + MINUTE, id="unused-since-T"),
        pytest.param(pv("h", unused=30), T + MINUTE + timedelta(seconds=30), id="later"),
        pytest.param(pv("h", sessions=1, unused=None), None, id="in-use"),
        pytest.param(pv("h", user=None), None, id="unassigned-is-scalings"),
        pytest.param(pv("h", running=False), None, id="stopped-already"),
    ],
)
def test_stop_due(host: PowerView, due: datetime | None) -> None:
    assert stop_due(host, MINUTE) == due


def test_hosts_to_stop_and_the_next_look() -> None:
    hosts = [pv("a"), pv("b", unused=45), pv("c", sessions=2, unused=None), pv("d", user=None)]
    assert hosts_to_stop(hosts, None, T + timedelta(days=9)) == []  # absent: never
    assert hosts_to_stop(hosts, MINUTE, T + timedelta(seconds=59)) == []
    assert hosts_to_stop(hosts, MINUTE, T + MINUTE) == ["a"]
    assert next_stop(hosts, MINUTE, T + MINUTE) == T + timedelta(seconds=105)
    assert hosts_to_stop(hosts, MINUTE, T + timedelta(seconds=105)) == ["a", "b"]
    assert next_stop(hosts, MINUTE, T + timedelta(seconds=105)) is None
    assert next_stop(hosts, None, T) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 3), st.one_of(st.none(), st.integers(0, 600))),
        max_size=6,
    ),
    st.integers(1, 10),
    st.integers(0, 1200),
)
def test_a_host_in_use_is_never_stopped_and_the_timer_misses_nothing(
    layout: list[tuple[bool, int, int | None]], minutes: int, at: int
) -> None:
    hosts = [
        pv(f"h{i}", running=running, sessions=sessions, unused=None if sessions else unused)
        for i, (running, sessions, unused) in enumerate(layout)
    ]
    after = timedelta(minutes=minutes)
    now = T + timedelta(seconds=at)
    stopped = set(hosts_to_stop(hosts, after, now))
    for host in hosts:
        if host.sessions or not host.running:
            assert host.name not in stopped
    look = next_stop(hosts, after, now)
    if look is not None:
        assert look > now
        assert set(hosts_to_stop(hosts, after, look - timedelta(microseconds=1))) == stopped
        assert set(hosts_to_stop(hosts, after, look)) > stopped
