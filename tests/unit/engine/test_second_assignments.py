"""One host per user, whatever administrators assign at once: which assignments are taken
back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.engine.personal import Assignment, second_assignments
from hostpool_operator.engine.records import HostRecord
from support.state_builders import T0, Pool, host_obj, pool_obj


def a(host: str, user: str, sessions: int = 0, seen: int = 0) -> Assignment:
    return Assignment(host, user, sessions, seen)


def test_a_user_with_one_host_keeps_it() -> None:
    assert second_assignments([a("h1", "alice"), a("h2", "bob")]) == []


def test_the_assignment_seen_first_is_kept() -> None:
    undo = second_assignments([a("h1", "alice", seen=2), a("h2", "alice", seen=1)])
    assert undo == [a("h1", "alice", seen=2)]


def test_the_host_in_use_is_kept_and_a_host_in_use_never_taken_back() -> None:
    assert second_assignments([a("h1", "alice", seen=1), a("h2", "alice", 1, seen=2)]) == [
        a("h1", "alice", seen=1)
    ]
    both = [a("h1", "alice", 1, seen=1), a("h2", "alice", 2, seen=2)]
    assert second_assignments(both) == []  # in use: left, never taken from under a session


assignments = st.lists(
    st.builds(
        Assignment,
        host=st.sampled_from([f"h{i}" for i in range(8)]),
        user=st.sampled_from(["alice", "bob", "carol"]),
        sessions=st.integers(0, 2),
        seen=st.integers(0, 20),
    ),
    unique_by=lambda x: x.host,
)


@given(assignments)
def test_after_taking_back_each_user_has_one_idle_host_at_most_besides_in_use_ones(
    given_: list[Assignment],
) -> None:
    undo = second_assignments(given_)
    left = [x for x in given_ if x not in undo]
    assert all(x.sessions == 0 for x in undo)
    for user in {x.user for x in given_}:
        theirs = [x for x in left if x.user == user]
        assert theirs  # nobody loses every host
        idle = [x for x in theirs if x.sessions == 0]
        assert len(theirs) == 1 or not idle


#: A host event: (host, its spec.assignedUser or None) put, or (host, "deleted").
host_events = st.lists(
    st.tuples(
        st.sampled_from([f"h{i}" for i in range(6)]),
        st.sampled_from([None, "alice", "bob", "deleted"]),
    ),
    max_size=40,
)


@given(host_events)
def test_the_pool_knows_in_one_look_whether_a_user_has_a_second_host(
    events: list[tuple[str, str | None]],
) -> None:
    """What the controller asks on each host event (so that only then it scans the pool)
    always agrees with the assignments the pool state holds, through any sequence of hosts
    assigned, reassigned, unassigned and deleted."""
    pool = Pool(pool_obj(type="Personal"))
    for host, user in events:
        if user == "deleted":
            pool.state.drop_host(host)
        else:
            obj = host_obj(host) if user is None else host_obj(host, assignedUser=user)
            pool.state.put_host(HostRecord.of(obj), T0)
        for who in ("alice", "bob"):
            held = [h for h, (u, _) in pool.state.personal.assignment_seen.items() if u == who]
            assert pool.state.personal.has_second_host(who) is (len(held) > 1), (who, held)
