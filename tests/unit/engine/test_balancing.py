"""One named test per statement of the load-balancing behaviour (see docs/ and the spec)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from hostpool_operator.api import (
    MAX_SESSION_LIMIT,
    HostFeatures,
    HostMetrics,
    HostPoolSpec,
    LoadIndexSettings,
    Protocol,
    Reason,
)
from hostpool_operator.engine.balancer_view import BalancerHost
from hostpool_operator.engine.balancing import PoolBalancer
from hostpool_operator.engine.demand import Demand
from hostpool_operator.engine.horizon import load_index
from hostpool_operator.simulate import run_scenario


def pool(kind: str, limit: int | None = None, **extra: Any) -> HostPoolSpec:
    lb: dict[str, Any] = {"type": kind}
    if limit is not None:
        lb["maxSessionLimit"] = limit
    return HostPoolSpec.model_validate({"loadBalancer": lb, **extra})


def balancer(
    spec: HostPoolSpec,
    sessions: list[int],
    *,
    seed: int | None = 1,
    drain: tuple[int, ...] = (),
    users: dict[str, int] | None = None,
) -> PoolBalancer:
    hosts = [
        BalancerHost(name=f"h{i + 1}", sessions=n, drain_mode=i in drain, order=i)
        for i, n in enumerate(sessions)
    ]
    owned = [(user, f"h{i + 1}") for user, i in (users or {}).items()]
    return PoolBalancer(spec, hosts, owned, seed=seed)


# ----------------------------------------------------------------------------- breadth-first


def test_breadth_first_nine_hosts_picks_among_the_five_least_loaded() -> None:
    seen: Counter[str] = Counter()
    for seed in range(400):
        b = balancer(pool("BreadthFirst"), [11, 12, 13, 14, 15, 16, 17, 18, 19], seed=seed)
        placement = b.place(Demand("new-user"))
        assert placement.reason is Reason.NEW_SESSION
        assert placement.host is not None
        seen[placement.host] += 1
    # Only the five hosts with 11..15 sessions, and every one of them, not only the emptiest.
    assert set(seen) == {"h1", "h2", "h3", "h4", "h5"}


def test_breadth_first_half_rounds_up() -> None:
    # Three eligible hosts: ceil(3/2) = 2 candidates, never the third.
    hosts = set()
    for seed in range(200):
        hosts.add(balancer(pool("BreadthFirst"), [0, 1, 5], seed=seed).place(Demand("u")).host)
    assert hosts == {"h1", "h2"}


def test_breadth_first_single_host_gets_everything() -> None:
    b = balancer(pool("BreadthFirst"), [7])
    assert b.place(Demand("u")).host == "h1"


def test_breadth_first_is_random_but_seedable() -> None:
    def run(seed: int) -> list[str | None]:
        b = balancer(pool("BreadthFirst"), [0] * 20, seed=seed)
        return [b.assign(Demand(f"u{i}")).host for i in range(50)]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_breadth_first_limit_defaults_to_999999() -> None:
    spec = pool("BreadthFirst")
    assert spec.load_balancer.max_session_limit is None
    assert spec.load_balancer.session_limit == MAX_SESSION_LIMIT == 999_999
    b = balancer(spec, [999_998, 999_999])
    assert b.place(Demand("u")).host == "h1"
    assert b.assign(Demand("u")).host == "h1"
    assert b.place(Demand("v")).reason is Reason.POOL_SATURATED


def test_breadth_first_ties_at_the_half_boundary_go_by_query_order() -> None:
    hosts = set()
    for seed in range(200):
        hosts.add(balancer(pool("BreadthFirst"), [2, 2, 2, 2], seed=seed).place(Demand("u")).host)
    assert hosts == {"h1", "h2"}


# ----------------------------------------------------------------------------- depth-first


def test_depth_first_fills_the_host_with_the_most_sessions() -> None:
    b = balancer(pool("DepthFirst", 10), [3, 7, 5])
    assert b.place(Demand("u")).host == "h2"


def test_depth_first_ties_go_to_the_first_host_in_query_order() -> None:
    b = balancer(pool("DepthFirst", 10), [4, 6, 6, 6])
    assert b.place(Demand("u")).host == "h2"


def test_depth_first_skips_full_hosts_and_fills_one_at_a_time() -> None:
    b = balancer(pool("DepthFirst", 3), [0, 0, 0])
    hosts = [b.assign(Demand(f"u{i}")).host for i in range(9)]
    assert hosts == ["h1"] * 3 + ["h2"] * 3 + ["h3"] * 3


def test_depth_first_requires_a_limit() -> None:
    with pytest.raises(ValueError, match="maxSessionLimit is required when type is DepthFirst"):
        pool("DepthFirst")


def test_depth_first_all_full_is_pool_saturated() -> None:
    b = balancer(pool("DepthFirst", 2), [2, 2])
    assert b.place(Demand("u")).reason is Reason.POOL_SATURATED


# ----------------------------------------------------------------------------- common rules


@pytest.mark.parametrize("kind", ["BreadthFirst", "DepthFirst", "Horizon"])
def test_drain_mode_takes_no_new_sessions(kind: str) -> None:
    b = balancer(pool(kind, 10), [0, 9], drain=(0,))
    for i in range(20):
        placement = b.assign(Demand(f"u{i}"))
        assert placement.host != "h1"


@pytest.mark.parametrize("kind", ["BreadthFirst", "DepthFirst", "Horizon"])
def test_all_hosts_draining_is_no_eligible_host(kind: str) -> None:
    b = balancer(pool(kind, 10), [0, 1], drain=(0, 1))
    assert b.place(Demand("u")).reason is Reason.NO_ELIGIBLE_HOST


@pytest.mark.parametrize("kind", ["BreadthFirst", "DepthFirst", "Horizon"])
def test_reconnect_goes_to_the_users_host_even_when_draining(kind: str) -> None:
    b = balancer(pool(kind, 10), [1, 0], drain=(0,), users={"alice": 0})
    placement = b.place(Demand("alice"))
    assert (placement.host, placement.reason) == ("h1", Reason.RECONNECTED)


@pytest.mark.parametrize("kind", ["BreadthFirst", "DepthFirst", "Horizon"])
def test_reconnect_goes_to_the_users_host_even_over_the_limit(kind: str) -> None:
    b = balancer(pool(kind, 2), [5, 0], users={"alice": 0})
    assert b.place(Demand("alice")).host == "h1"


@pytest.mark.parametrize("kind", ["BreadthFirst", "DepthFirst", "Horizon"])
def test_reconnect_creates_no_second_session(kind: str) -> None:
    b = balancer(pool(kind, 10), [0, 0])
    first = b.assign(Demand("alice"))
    again = b.assign(Demand("alice"))
    assert again.host == first.host
    assert again.reason is Reason.RECONNECTED
    assert sum(h.sessions for h in b.hosts()) == 1


@pytest.mark.parametrize("kind", ["BreadthFirst", "DepthFirst", "Horizon"])
def test_lowering_the_limit_evicts_nobody(kind: str) -> None:
    b = balancer(pool(kind, 10), [8, 2], users={"alice": 0})
    b.set_spec(pool(kind, 4))
    host = b.host("h1")
    assert host is not None
    assert host.sessions == 8
    assert b.place(Demand("alice")).host == "h1"  # the existing session stays reachable
    for i in range(2):
        assert b.assign(Demand(f"u{i}")).host == "h2"  # h1 takes no new session
    assert b.place(Demand("late")).reason is Reason.POOL_SATURATED
    assert b.availability("h1") == (False, "SessionLimitReached")


def test_algorithm_can_change_at_any_time() -> None:
    b = balancer(pool("DepthFirst", 10), [5, 1, 0])
    assert b.place(Demand("u")).host == "h1"
    b.set_spec(pool("BreadthFirst", 10))
    hosts = {b.place(Demand("u")).host for _ in range(100)}
    assert hosts == {"h2", "h3"}


@pytest.mark.parametrize("kind", ["BreadthFirst", "DepthFirst", "Horizon"])
def test_protocol_must_be_supported(kind: str) -> None:
    hosts = [
        BalancerHost("rdp-only", features=HostFeatures(protocols=[Protocol.RDP]), order=0),
        BalancerHost("blast", features=HostFeatures(protocols=[Protocol.BLAST]), order=1),
    ]
    b = PoolBalancer(pool(kind, 10), hosts, seed=1)
    for i in range(5):
        assert b.assign(Demand(f"u{i}", protocol=Protocol.BLAST)).host == "blast"
    assert b.place(Demand("p", protocol=Protocol.PCOIP)).reason is Reason.NO_ELIGIBLE_HOST


@pytest.mark.parametrize("kind", ["BreadthFirst", "DepthFirst", "Horizon"])
def test_unauthenticated_needs_unauthenticated_access(kind: str) -> None:
    hosts = [
        BalancerHost("closed", features=HostFeatures(unauthenticated_access=False), sessions=3),
        BalancerHost("open", sessions=0),
    ]
    b = PoolBalancer(pool(kind, 10), hosts, seed=1)
    for i in range(4):
        assert b.assign(Demand(f"kiosk{i}", unauthenticated=True)).host == "open"


def test_session_end_frees_the_slot() -> None:
    b = balancer(pool("DepthFirst", 1), [0])
    assert b.assign(Demand("alice")).host == "h1"
    assert b.place(Demand("bob")).reason is Reason.POOL_SATURATED
    assert b.end_session("alice", was_connecting=True) == "h1"
    assert b.assign(Demand("bob")).host == "h1"


def test_empty_pool_is_saturated() -> None:
    b = PoolBalancer(pool("DepthFirst", 5), [])
    assert b.place(Demand("u")).reason is Reason.POOL_SATURATED


def test_removed_host_releases_its_users() -> None:
    b = balancer(pool("DepthFirst", 5), [1, 0], users={"alice": 0})
    assert b.remove_host("h1") == frozenset({"alice"})
    assert b.session_host("alice") is None
    assert b.place(Demand("alice")).host == "h2"


# ----------------------------------------------------------------------------- load index


def settings(**kw: Any) -> LoadIndexSettings:
    return LoadIndexSettings.model_validate(kw)


def test_load_index_uses_session_count_by_default() -> None:
    # Nothing selected, no custom script: the session count is the input.
    s = settings(includeSessionCount=False)
    assert load_index(s, None, 5, 20) == 25
    assert load_index(settings(), HostMetrics(cpu_percent=99), 5, 20) == 25


def test_load_index_is_the_largest_factor() -> None:
    s = settings(cpuThresholdPercent=80, memoryThresholdPercent=50, includeSessionCount=True)
    m = HostMetrics(cpu_percent=40, memory_percent=30)
    # cpu 50, memory 60, sessions 10
    assert load_index(s, m, 2, 20) == 60


def test_load_index_factor_is_capped_at_100_and_rounds_half_up() -> None:
    s = settings(cpuThresholdPercent=80, includeSessionCount=False)
    assert load_index(s, HostMetrics(cpu_percent=100), 0, 10) == 100
    # 100 * 1 / 8 = 12.5 -> 13 (half up, not to even)
    s = settings(diskQueueLengthThreshold=8, includeSessionCount=False)
    assert load_index(s, HostMetrics(disk_queue_length=1), 0, 10) == 13


def test_load_index_ignores_sessions_when_a_metric_is_set_and_session_count_is_off() -> None:
    s = settings(cpuThresholdPercent=90, includeSessionCount=False)
    assert load_index(s, HostMetrics(cpu_percent=9), 19, 20) == 10


def test_load_index_with_custom_script_is_the_custom_value_only() -> None:
    s = settings(useCustomScript=True, cpuThresholdPercent=10, includeSessionCount=True)
    assert load_index(s, HostMetrics(cpu_percent=100, custom_load_value=20), 19, 20) == 20


def test_load_index_is_minus_one_when_a_needed_input_is_missing() -> None:
    assert load_index(settings(cpuThresholdPercent=90), HostMetrics(), 1, 10) == -1
    assert load_index(settings(cpuThresholdPercent=90), None, 1, 10) == -1
    assert load_index(settings(useCustomScript=True), HostMetrics(cpu_percent=5), 1, 10) == -1


# ----------------------------------------------------------------------------- Horizon


def horizon(limit: int = 100, **blocks: Any) -> HostPoolSpec:
    return pool("Horizon", limit, horizon=blocks)


def hv(name: str, sessions: int = 0, connecting: int = 0, **kw: Any) -> BalancerHost:
    return BalancerHost(name=name, sessions=sessions, connecting=connecting, **kw)


def test_horizon_bucket_one_gets_equal_shares_in_a_logon_storm() -> None:
    spec = horizon(connectionServer={"minRdsServersInLbQueue": 0})
    hosts = [hv("a", 1), hv("b", 3), hv("c", 5), hv("d", 9)]  # load index 1, 3, 5, 9
    b = PoolBalancer(spec, hosts)
    assert set(b.buckets().values()) == {1}
    placed = Counter(b.assign(Demand(f"u{i}")).host for i in range(40))
    # A least-loaded rule would give "a" everything; the fair share gives each host ten.
    assert placed == {"a": 10, "b": 10, "c": 10, "d": 10}


def test_horizon_minimum_servers_raises_the_load_threshold() -> None:
    spec = horizon(connectionServer={"rdsLoadIndexThreshold": 20, "minRdsServersInLbQueue": 4})
    hosts = [hv("a", 10), hv("b", 30), hv("c", 50), hv("d", 70), hv("e", 90)]
    b = PoolBalancer(spec, hosts)
    # Only "a" is under 20; the threshold rises until four hosts qualify (a..d), not "e".
    assert b.buckets() == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 3}
    without_raise = PoolBalancer(
        horizon(connectionServer={"rdsLoadIndexThreshold": 20, "minRdsServersInLbQueue": 1}),
        [hv("a", 10), hv("b", 30)],
    )
    assert without_raise.buckets() == {"a": 1, "b": 3}


def test_horizon_non_default_features_are_bucket_two() -> None:
    spec = horizon()
    hosts = [
        hv("std", 50),  # load 50: over the threshold 20 (the raise needs 4 default hosts)
        hv("rdp", 1, features=HostFeatures(protocols=[Protocol.RDP])),
    ]
    b = PoolBalancer(spec, hosts)
    assert b.buckets() == {"std": 1, "rdp": 2}
    assert b.place(Demand("u")).host == "std"  # bucket 1 first


def test_horizon_bucket_three_only_as_last_resort() -> None:
    spec = horizon(connectionServer={"minRdsServersInLbQueue": 0, "rdsLoadIndexThreshold": 20})
    hosts = [hv("busy", 80), hv("quiet", 10)]
    b = PoolBalancer(spec, hosts)
    assert b.buckets() == {"busy": 3, "quiet": 1}
    assert b.assign(Demand("u1")).host == "quiet"
    b.upsert_host(hv("quiet", 90, order=1))
    assert b.buckets() == {"busy": 3, "quiet": 3}
    assert b.place(Demand("u2")).host == "busy"  # lowest load index in bucket 3


def test_horizon_missing_metrics_make_bucket_three() -> None:
    spec = horizon(loadIndex={"cpuThresholdPercent": 90})
    hosts = [hv("unknown", 0), hv("known", 0, metrics=HostMetrics(cpu_percent=60))]
    b = PoolBalancer(spec, hosts)
    assert b.load_index_of("unknown") == -1
    assert b.buckets()["unknown"] == 3
    assert b.place(Demand("u")).host == "known"


def test_horizon_connecting_session_threshold_turns_new_logons_away() -> None:
    spec = horizon(logonStorm={"connectingSessionThreshold": 2})
    b = PoolBalancer(spec, [hv("only", 0)])
    assert b.assign(Demand("u1")).host == "only"
    assert b.assign(Demand("u2")).host == "only"
    assert b.availability("only") == (False, "LogonStormThreshold")
    assert b.place(Demand("u3")).reason is Reason.NO_ELIGIBLE_HOST


def test_horizon_connecting_threshold_exempts_reconnects() -> None:
    spec = horizon(logonStorm={"connectingSessionThreshold": 1})
    b = PoolBalancer(spec, [hv("only", 1, connecting=1)], [("alice", "only")])
    assert b.place(Demand("bob")).reason is Reason.NO_ELIGIBLE_HOST
    assert b.place(Demand("alice")) == b.place(Demand("alice"))
    assert b.place(Demand("alice")).reason is Reason.RECONNECTED


def test_horizon_load_index_threshold_turns_new_logons_away_but_not_reconnects() -> None:
    spec = horizon(logonStorm={"loadIndexThreshold": 90}, loadIndex={"cpuThresholdPercent": 100})
    hot = hv("hot", 1, metrics=HostMetrics(cpu_percent=95))
    b = PoolBalancer(spec, [hot], [("alice", "hot")])
    assert b.place(Demand("bob")).reason is Reason.NO_ELIGIBLE_HOST
    assert b.place(Demand("alice")).host == "hot"


def test_horizon_logon_storm_thresholds_default_to_disabled() -> None:
    b = PoolBalancer(horizon(), [hv("h", 0, connecting=150)])
    assert b.place(Demand("u")).host == "h"


def test_horizon_custom_script_value_drives_buckets() -> None:
    spec = horizon(
        loadIndex={"useCustomScript": True}, connectionServer={"minRdsServersInLbQueue": 0}
    )
    hosts = [
        hv("a", 0, metrics=HostMetrics(custom_load_value=70)),
        hv("b", 40, metrics=HostMetrics(custom_load_value=5)),
    ]
    b = PoolBalancer(spec, hosts)
    assert [b.load_index_of("a"), b.load_index_of("b")] == [70, 5]
    assert b.place(Demand("u")).host == "b"


# ----------------------------------------------------------------------------- the contract


def test_contract_example_scenario() -> None:
    result = run_scenario(
        {
            "seed": 7,
            "pool": {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 3}},
            "hosts": [{"name": "h1", "users": ["alice", "bob"], "sessions": 2}],
            "requests": [{"user": "carol"}, {"user": "dave"}, {"user": "alice", "protocol": "RDP"}],
        }
    )
    assert result == {
        "assignments": [
            {"user": "carol", "host": "h1", "reason": "NewSession"},
            {"user": "dave", "host": None, "reason": "PoolSaturated"},
            {"user": "alice", "host": "h1", "reason": "Reconnected"},
        ],
        "hosts": [{"name": "h1", "sessions": 3, "connecting": 1, "loadIndex": 100, "bucket": None}],
        "scaleUp": 0,
    }


def test_horizon_thresholds_are_strict_for_buckets_and_inclusive_for_logon_storms() -> None:
    # Bucket 1 needs a load index *below* the threshold: 20 of 20 is bucket 3.
    spec = horizon(connectionServer={"rdsLoadIndexThreshold": 20, "minRdsServersInLbQueue": 0})
    b = PoolBalancer(spec, [hv("at", 20), hv("below", 19)])
    assert b.buckets() == {"at": 3, "below": 1}
    rdp = HostFeatures(protocols=[Protocol.RDP])
    b = PoolBalancer(spec, [hv("at", 20), hv("rdp", 15, features=rdp)])
    assert b.place(Demand("u")).host == "rdp"  # bucket 2 before the bucket-3 host
    # A host turns new logons away *at* the logon-storm load-index threshold.
    storm = horizon(logonStorm={"loadIndexThreshold": 50})
    b = PoolBalancer(storm, [hv("at", 50), hv("below", 49)])
    assert b.availability("at") == (False, "LogonStormThreshold")
    assert b.availability("below") == (True, "AcceptingSessions")


def test_horizon_raise_counts_only_hosts_accepting_sessions() -> None:
    spec = horizon(connectionServer={"rdsLoadIndexThreshold": 10, "minRdsServersInLbQueue": 2})
    hosts = [hv("drained", 0, drain_mode=True), hv("a", 30), hv("b", 60), hv("c", 90)]
    b = PoolBalancer(spec, hosts)
    # The drained host is not in the queue: the raise reaches "b" (two accepting hosts).
    assert b.buckets() == {"drained": 1, "a": 1, "b": 1, "c": 3}
    assert b.place(Demand("u")).host == "a"
