"""The pure scaling decisions: how many hosts to add, which empty ones may go."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.api import Scaling
from hostpool_operator.scaling.rules import ScaleHost, hosts_to_add, hosts_to_remove

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def scaling(**kw: int) -> Scaling:
    return Scaling.model_validate(kw)


def full(n: int, limit: int) -> list[ScaleHost]:
    return [ScaleHost(f"h{i}", sessions=limit) for i in range(n)]


def test_no_scaling_block_never_adds() -> None:
    assert hosts_to_add(None, 5, full(2, 5), waiting=100).add == 0


def test_saturated_pool_adds_enough_hosts_for_the_waiting_requests() -> None:
    decision = hosts_to_add(scaling(maxHosts=10), 5, full(2, 5), waiting=11)
    assert (decision.add, decision.limited) == (3, False)  # ceil(11 / 5)


def test_buffer_sessions_keep_free_slots_ahead_of_demand() -> None:
    hosts = [ScaleHost("h0", sessions=3), ScaleHost("h1", sessions=5)]  # 2 free of limit 5
    assert hosts_to_add(scaling(maxHosts=10, bufferSessions=6), 5, hosts, waiting=0).add == 1
    assert hosts_to_add(scaling(maxHosts=10, bufferSessions=2), 5, hosts, waiting=0).add == 0


def test_draining_hosts_give_no_capacity() -> None:
    hosts = [ScaleHost("h0", sessions=0, drain_mode=True)]
    assert hosts_to_add(scaling(maxHosts=4), 5, hosts, waiting=1).add == 1


def test_max_hosts_limits_growth_and_says_so() -> None:
    decision = hosts_to_add(scaling(maxHosts=3), 5, full(2, 5), waiting=20)
    assert (decision.add, decision.wanted, decision.limited) == (1, 4, True)
    at_max = hosts_to_add(scaling(maxHosts=2), 5, full(2, 5), waiting=1)
    assert (at_max.add, at_max.limited) == (0, True)


def test_min_hosts_is_enforced_without_demand() -> None:
    assert hosts_to_add(scaling(minHosts=3, maxHosts=5), 5, [], waiting=0).add == 3


def test_decision_is_idempotent_once_hosts_exist() -> None:
    """Derived from observed state: after the new hosts appear, nothing more is added."""
    hosts = full(2, 5)
    first = hosts_to_add(scaling(maxHosts=10), 5, hosts, waiting=7).add
    hosts += [ScaleHost(f"new{i}") for i in range(first)]
    assert hosts_to_add(scaling(maxHosts=10), 5, hosts, waiting=7).add == 0


def empty_since(seconds: int) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_scale_down_removes_managed_hosts_empty_for_the_delay() -> None:
    hosts = [
        ScaleHost("user-made", managed=False, empty_since=empty_since(9999)),
        ScaleHost("busy", managed=True, sessions=1),
        ScaleHost("young", managed=True, empty_since=empty_since(10)),
        ScaleHost("old", managed=True, empty_since=empty_since(601)),
    ]
    assert hosts_to_remove(scaling(scaleDownDelaySeconds=600), 5, hosts, 0, NOW) == ["old"]


def test_scale_down_keeps_min_hosts_and_buffer() -> None:
    hosts = [ScaleHost(f"m{i}", managed=True, empty_since=empty_since(999)) for i in range(4)]
    assert hosts_to_remove(scaling(minHosts=3, scaleDownDelaySeconds=1), 5, hosts, 0, NOW) == ["m3"]
    kept_for_buffer = hosts_to_remove(
        scaling(bufferSessions=12, scaleDownDelaySeconds=1), 5, hosts, 0, NOW
    )
    assert kept_for_buffer == ["m3"]  # 20 free -> 15 free; removing another leaves 10 < 12


def test_scale_down_never_while_requests_wait() -> None:
    hosts = [ScaleHost("m", managed=True, empty_since=empty_since(999))]
    assert hosts_to_remove(scaling(scaleDownDelaySeconds=1), 5, hosts, 1, NOW) == []


@pytest.mark.parametrize("sessions", [1, 5, 100])
def test_a_host_with_sessions_is_never_removed(sessions: int) -> None:
    hosts = [ScaleHost("m", managed=True, sessions=sessions, empty_since=empty_since(999))]
    assert hosts_to_remove(scaling(scaleDownDelaySeconds=0), 5, hosts, 0, NOW) == []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.booleans(), st.booleans()), max_size=12),
    st.integers(0, 40),
    st.integers(0, 12),
    st.integers(0, 12),
    st.integers(0, 20),
)
def test_scaling_bounds(
    raw: list[tuple[int, bool, bool]], waiting: int, lo: int, span: int, buffer: int
) -> None:
    spec = scaling(minHosts=lo, maxHosts=lo + span, bufferSessions=buffer, scaleDownDelaySeconds=0)
    hosts = [
        ScaleHost(f"h{i}", sessions=s, drain_mode=d, managed=m, empty_since=NOW if s == 0 else None)
        for i, (s, d, m) in enumerate(raw)
    ]
    up = hosts_to_add(spec, 5, hosts, waiting)
    assert 0 <= up.add <= max(0, spec.max_hosts - len(hosts))
    removed = hosts_to_remove(spec, 5, hosts, waiting, NOW)
    by_name = {h.name: h for h in hosts}
    assert all(by_name[n].managed and by_name[n].sessions == 0 for n in removed)
    assert len(hosts) - len(removed) >= min(len(hosts), spec.min_hosts)
    if removed:
        assert up.add == 0, "never add and remove hosts in the same decision"
