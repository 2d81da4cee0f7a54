"""Personal placement: each user's own host, a claim for a user without one, or a wait.

Table tests of every rule, then properties over random pools and arrival orders: however
requests of however many users arrive, no host is ever given to two users, no user gets
two hosts, and a user keeps the host they were given.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.api import PersonalAssignment, Reason
from hostpool_operator.engine.host_view import Placement
from hostpool_operator.engine.personal import (
    PersonalHost,
    PersonalPlacement,
    place_personal,
    unassigned_hosts_wanted,
)

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
    pytest.param([h("a")], AUTO, {"a": "alice"}, None, False, placed("a"), id="own-claim"),
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


def test_hosts_wanted_counts_spare_unassigned_hosts() -> None:
    hosts = [h("a", "bob"), h("b"), h("c", open_=False, starting=True), h("d", sessions=1)]
    assert unassigned_hosts_wanted(5, hosts) == 3
    assert unassigned_hosts_wanted(1, hosts) == 0


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
            assert assignment is AUTO
            assert owner is None
            assert host not in claims
            claims[host] = user
        else:
            assert claims.get(host, owner) == user
        assert given_to.setdefault(user, host) == host
    owners = [claims.get(x.name, x.user) for x in hosts]
    named = [owner for owner in owners if owner is not None]
    assert len(named) == len(set(named))
