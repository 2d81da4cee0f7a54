"""Placement during an image update: each algorithm chooses among the updated hosts first,
an outdated host takes a new session only when no updated host can, and a reconnect still
goes where the session is. With no update running (no host outdated) nothing changes."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.api import HostMetrics, HostPoolSpec, Reason
from hostpool_operator.engine.balancer_view import BalancerHost
from hostpool_operator.engine.balancing import PoolBalancer
from hostpool_operator.engine.demand import Demand

ALGORITHMS = ("BreadthFirst", "DepthFirst", "Horizon")


def pool(kind: str, limit: int = 4) -> HostPoolSpec:
    extra: dict[str, Any] = {}
    if kind == "Horizon":
        extra["horizon"] = {"loadIndex": {"useCustomScript": False}}
    return HostPoolSpec.model_validate(
        {"loadBalancer": {"type": kind, "maxSessionLimit": limit}, **extra}
    )


def hosts(
    sessions: list[int], outdated: set[int], drain: frozenset[int] | set[int] = frozenset()
) -> list[BalancerHost]:
    return [
        BalancerHost(
            name=f"h{i + 1}",
            sessions=n,
            order=i,
            outdated=i in outdated,
            drain_mode=i in drain,
            metrics=HostMetrics(cpu_percent=10, memory_percent=10),
        )
        for i, n in enumerate(sessions)
    ]


@pytest.mark.parametrize("kind", ALGORITHMS)
def test_an_updated_host_with_room_is_chosen_over_every_outdated_one(kind: str) -> None:
    # The outdated hosts are emptier (breadth-first's pick) and fuller (depth-first's): the
    # updated host wins either way.
    balancer = PoolBalancer(pool(kind), hosts([0, 2, 3, 1], outdated={0, 2, 3}), seed=1)
    for _ in range(2):
        placement = balancer.place(Demand(f"u{_}"))
        assert placement.host == "h2", kind
        balancer.commit(Demand(f"u{_}"), placement)


@pytest.mark.parametrize("kind", ALGORITHMS)
def test_an_outdated_host_takes_a_session_only_when_no_updated_host_can(kind: str) -> None:
    # h2 (updated) is full, h4 (updated) drains: the logon is not refused, it goes outdated.
    balancer = PoolBalancer(pool(kind), hosts([1, 4, 2, 0], outdated={0, 2}, drain={3}), seed=1)
    placement = balancer.place(Demand("late"))
    assert placement.reason is Reason.NEW_SESSION
    assert placement.host in {"h1", "h3"}


@pytest.mark.parametrize("kind", ALGORITHMS)
def test_a_reconnect_goes_to_the_outdated_host_that_holds_the_session(kind: str) -> None:
    balancer = PoolBalancer(pool(kind), hosts([1, 0], outdated={0}), [("alice", "h1")], seed=1)
    assert balancer.place(Demand("alice")) == balancer.place(Demand("alice"))
    assert balancer.place(Demand("alice")).host == "h1"
    assert balancer.place(Demand("alice")).reason is Reason.RECONNECTED


def test_breadth_first_spreads_over_the_updated_hosts_only() -> None:
    seen: Counter[str] = Counter()
    for seed in range(200):
        balancer = PoolBalancer(
            pool("BreadthFirst", limit=10),
            hosts([0, 0, 3, 3, 0, 0], outdated={0, 1, 4, 5}),
            seed=seed,
        )
        placement = balancer.place(Demand("new"))
        assert placement.host is not None
        seen[placement.host] += 1
    assert set(seen) == {"h3"}  # ceil(2/2) = 1 candidate: the least loaded updated host


@pytest.mark.parametrize("kind", ALGORITHMS)
@given(
    sessions=st.lists(st.integers(0, 4), min_size=1, max_size=8),
    outdated=st.sets(st.integers(0, 7)),
    drain=st.sets(st.integers(0, 7)),
)
def test_placement_prefers_updated_hosts_and_never_refuses_for_an_update(
    kind: str, sessions: list[int], outdated: set[int], drain: set[int]
) -> None:
    """For any pool: the host chosen is updated whenever an updated host could take the
    session, and a logon waits only if it would wait with no update running."""
    with_update = PoolBalancer(pool(kind), hosts(sessions, outdated, drain), seed=3)
    without = PoolBalancer(pool(kind), hosts(sessions, set(), drain), seed=3)
    chosen = with_update.place(Demand("x"))
    plain = without.place(Demand("x"))
    assert (chosen.host is None) == (plain.host is None)
    open_updated = [
        i for i, n in enumerate(sessions) if i not in outdated and i not in drain and n < 4
    ]
    if chosen.host is not None and open_updated:
        assert int(chosen.host[1:]) - 1 in open_updated
