"""Properties of the engine over random pools and request streams (hypothesis).

The incremental engine is checked against a naive reference that re-reads every host for
every decision, with the same random draws, so the fast path can never drift from the rules.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.api import (
    ALL_PROTOCOLS,
    HostFeatures,
    HostMetrics,
    HostPoolSpec,
    Protocol,
    Reason,
)
from hostpool_operator.engine.balancer_view import BalancerHost, breadth_first_candidates
from hostpool_operator.engine.balancing import PoolBalancer
from hostpool_operator.engine.demand import Demand
from hostpool_operator.engine.horizon import load_index

USERS = [f"user{i}" for i in range(30)]


@dataclass
class World:
    kind: str
    limit: int
    hosts: list[BalancerHost]
    owned: list[tuple[str, str]]
    stream: list[tuple[str, Demand]]  # ("request", demand) or ("logoff", demand)
    seed: int

    def spec(self) -> HostPoolSpec:
        return HostPoolSpec.model_validate(
            {"loadBalancer": {"type": self.kind, "maxSessionLimit": self.limit}}
        )

    def fresh_hosts(self) -> list[BalancerHost]:
        return [
            BalancerHost(
                name=h.name,
                drain_mode=h.drain_mode,
                features=h.features,
                sessions=h.sessions,
                connecting=h.connecting,
                order=h.order,
            )
            for h in self.hosts
        ]


protocol_sets = st.lists(st.sampled_from(ALL_PROTOCOLS), min_size=1, max_size=3, unique=True)


@st.composite
def worlds(draw: st.DrawFn, kinds: tuple[str, ...] = ("BreadthFirst", "DepthFirst")) -> World:
    kind = draw(st.sampled_from(kinds))
    limit = draw(st.integers(1, 6))
    n = draw(st.integers(0, 8))
    hosts = []
    for i in range(n):
        protocols = draw(st.one_of(st.just(list(ALL_PROTOCOLS)), protocol_sets))
        hosts.append(
            BalancerHost(
                name=f"h{i}",
                drain_mode=draw(st.booleans()) and draw(st.booleans()),
                features=HostFeatures(
                    protocols=protocols, unauthenticated_access=draw(st.booleans()) or i % 2 == 0
                ),
                sessions=draw(st.integers(0, limit + 2)),
                order=i,
            )
        )
    owned: list[tuple[str, str]] = []
    free_users = list(USERS)
    for h in hosts:
        k = draw(st.integers(0, min(h.sessions, 2)))
        for _ in range(k):
            owned.append((free_users.pop(), h.name))
    demands = st.builds(
        Demand,
        user=st.sampled_from(USERS),
        protocol=st.one_of(st.none(), st.none(), st.sampled_from(ALL_PROTOCOLS)),
        unauthenticated=st.sampled_from([False, False, False, True]),
    )
    stream = draw(
        st.lists(
            st.tuples(st.sampled_from(["request", "request", "request", "logoff"]), demands),
            max_size=60,
        )
    )
    return World(kind, limit, hosts, owned, stream, draw(st.integers(0, 2**32)))


def reference_choice(
    kind: str, limit: int, hosts: list[BalancerHost], demand: Demand, rng: random.Random
) -> str | None:
    """The rules, read literally, re-reading every host."""
    eligible = [h for h in hosts if not h.drain_mode and h.sessions < limit and h.supports(demand)]
    if not eligible:
        return None
    if kind == "DepthFirst":
        most = max(h.sessions for h in eligible)
        return next(h.name for h in eligible if h.sessions == most)  # first in query order
    fewest = sorted(eligible, key=lambda h: (h.sessions, h.order))
    return fewest[rng.randrange(breadth_first_candidates(len(eligible)))].name


def drive(world: World) -> list[tuple[str, str | None, Reason]]:
    b = PoolBalancer(world.spec(), world.fresh_hosts(), world.owned, seed=world.seed)
    out = []
    for op, demand in world.stream:
        if op == "logoff":
            b.end_session(demand.user)
            continue
        placement = b.assign(demand)
        out.append((demand.user, placement.host, placement.reason))
    return out


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_engine_matches_the_reference_rules(world: World) -> None:
    b = PoolBalancer(world.spec(), world.fresh_hosts(), world.owned, seed=world.seed)
    ref_hosts = world.fresh_hosts()
    ref_by_name = {h.name: h for h in ref_hosts}
    ref_owner = dict(world.owned)
    rng = random.Random(world.seed)
    for op, demand in world.stream:
        if op == "logoff":
            b.end_session(demand.user)
            name = ref_owner.pop(demand.user, None)
            if name is not None:
                ref_by_name[name].sessions -= 1
            continue
        placement = b.assign(demand)
        if demand.user in ref_owner:
            assert placement.reason is Reason.RECONNECTED
            assert placement.host == ref_owner[demand.user]
            continue
        expected = reference_choice(world.kind, world.limit, ref_hosts, demand, rng)
        assert placement.host == expected
        if expected is not None:
            ref_by_name[expected].sessions += 1
            ref_owner[demand.user] = expected
        else:
            assert placement.reason in (Reason.POOL_SATURATED, Reason.NO_ELIGIBLE_HOST)


@settings(max_examples=300, deadline=None)
@given(worlds(("BreadthFirst", "DepthFirst", "Horizon")))
def test_invariants_hold_for_every_algorithm(world: World) -> None:
    b = PoolBalancer(world.spec(), world.fresh_hosts(), world.owned, seed=world.seed)
    initial = {h.name: h.sessions for h in world.hosts}
    drained = {h.name for h in world.hosts if h.drain_mode}
    owner = dict(world.owned)
    for op, demand in world.stream:
        if op == "logoff":
            b.end_session(demand.user)
            owner.pop(demand.user, None)
            continue
        before = {h.name: h.sessions for h in b.hosts()}
        placement = b.assign(demand)
        if demand.user in owner:
            # Reconnects are stable: same host, no new session.
            assert placement == placement.__class__(owner[demand.user], Reason.RECONNECTED)
            assert {h.name: h.sessions for h in b.hosts()} == before
            continue
        if placement.host is None:
            continue
        owner[demand.user] = placement.host
        host = b.host(placement.host)
        assert host is not None
        assert placement.host not in drained, "new session on a drained host"
        assert before[placement.host] < world.limit, "new session on a full host"
        assert host.sessions <= max(world.limit, initial[placement.host])
        assert host.supports(demand)
    for h in b.hosts():
        assert h.sessions <= max(world.limit, initial[h.name])


@settings(max_examples=100, deadline=None)
@given(worlds(("BreadthFirst", "DepthFirst", "Horizon")))
def test_identical_seeds_give_identical_results(world: World) -> None:
    assert drive(world) == drive(world)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=40), st.integers(0, 2**32))
def test_breadth_first_only_picks_from_the_fewest_half(sessions: list[int], seed: int) -> None:
    spec = HostPoolSpec.model_validate({"loadBalancer": {"type": "BreadthFirst"}})
    hosts = [BalancerHost(f"h{i}", sessions=n, order=i) for i, n in enumerate(sessions)]
    b = PoolBalancer(spec, hosts, seed=seed)
    chosen = b.place(Demand("u")).host
    ranked = sorted(range(len(sessions)), key=lambda i: (sessions[i], i))
    allowed = {f"h{i}" for i in ranked[: (len(sessions) + 1) // 2]}
    assert chosen in allowed
    # Whatever the draw, the chosen host has no more sessions than the median cut.
    cut = sorted(sessions)[(len(sessions) + 1) // 2 - 1]
    assert sessions[int(chosen[1:])] <= cut


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.booleans()), min_size=1, max_size=30))
def test_depth_first_always_takes_the_fullest_eligible_host(hosts: list[Any]) -> None:
    spec = HostPoolSpec.model_validate(
        {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 8}}
    )
    views = [
        BalancerHost(f"h{i}", sessions=n, drain_mode=d, order=i) for i, (n, d) in enumerate(hosts)
    ]
    chosen = PoolBalancer(spec, views).place(Demand("u", protocol=Protocol.RDP)).host
    eligible = [(n, -i) for i, (n, d) in enumerate(hosts) if not d and n < 8]
    if not eligible:
        assert chosen is None
    else:
        best = max(eligible)
        assert chosen == f"h{-best[1]}"


# ----------------------------------------------------------------------------- Horizon


def reference_horizon(spec: HostPoolSpec, hosts: list[BalancerHost], demand: Demand) -> str | None:
    """The Horizon rules read literally: per-host loads and thresholds, the raise, buckets."""
    hz = spec.horizon_settings
    limit = spec.load_balancer.session_limit
    server, storm = hz.connection_server, hz.logon_storm

    def load(h: BalancerHost) -> int:
        return load_index(hz.load_index, h.metrics, h.sessions, limit)

    def accepting(h: BalancerHost) -> bool:
        if h.drain_mode or h.sessions >= limit:
            return False
        if (
            storm.connecting_session_threshold
            and h.connecting >= storm.connecting_session_threshold
        ):
            return False
        li = load(h)
        return not (storm.load_index_threshold and li != -1 and li >= storm.load_index_threshold)

    queue = [h for h in hosts if accepting(h)]
    ranked = [
        h for h in queue if load(h) != -1 and h.connecting < server.rds_connecting_session_threshold
    ]
    candidates = [h for h in ranked if h.features.all_default]
    threshold = server.rds_load_index_threshold
    loads = sorted(load(h) for h in candidates)
    wanted = server.min_rds_servers_in_lb_queue
    if wanted > 0 and loads and sum(1 for x in loads if x < threshold) < wanted:
        threshold = max(threshold, loads[min(wanted, len(loads)) - 1] + 1)
    bucket1 = [h for h in candidates if load(h) < threshold]
    if bucket1:
        return min(bucket1, key=lambda h: (h.connecting, load(h), h.order)).name
    bucket2 = [
        h
        for h in ranked
        if not h.features.all_default
        and load(h) < server.rds_load_index_threshold
        and h.supports(demand)
    ]
    rest = [h for h in queue if h.supports(demand)]
    for bucket in (bucket2, rest):
        if bucket:
            return min(
                bucket, key=lambda h: (101 if load(h) == -1 else load(h), h.connecting, h.order)
            ).name
    return None


@st.composite
def horizon_worlds(draw: st.DrawFn) -> tuple[HostPoolSpec, list[BalancerHost], list[Demand]]:
    limit = draw(st.integers(1, 40))
    spec = HostPoolSpec.model_validate(
        {
            "loadBalancer": {"type": "Horizon", "maxSessionLimit": limit},
            "horizon": {
                "loadIndex": {
                    "useCustomScript": draw(st.booleans()) and draw(st.booleans()),
                    "includeSessionCount": draw(st.booleans()),
                    "cpuThresholdPercent": draw(st.sampled_from([0, 0, 50, 90])),
                    "memoryThresholdPercent": draw(st.sampled_from([0, 80])),
                },
                "logonStorm": {
                    "connectingSessionThreshold": draw(st.sampled_from([0, 0, 2, 5])),
                    "loadIndexThreshold": draw(st.sampled_from([0, 0, 90])),
                },
                "connectionServer": {
                    "rdsLoadIndexThreshold": draw(st.sampled_from([0, 20, 50])),
                    "rdsConnectingSessionThreshold": draw(st.sampled_from([0, 3, 20])),
                    "minRdsServersInLbQueue": draw(st.integers(0, 6)),
                },
            },
        }
    )
    hosts = []
    for i in range(draw(st.integers(0, 10))):
        sessions = draw(st.integers(0, limit + 1))
        metrics = draw(
            st.one_of(
                st.none(),
                st.builds(
                    HostMetrics,
                    cpu_percent=st.one_of(st.none(), st.integers(0, 100)),
                    memory_percent=st.one_of(st.none(), st.integers(0, 100)),
                    custom_load_value=st.one_of(st.none(), st.integers(0, 100)),
                ),
            )
        )
        default = draw(st.booleans()) or draw(st.booleans())
        hosts.append(
            BalancerHost(
                name=f"h{i}",
                drain_mode=draw(st.integers(0, 5)) == 0,
                features=HostFeatures() if default else HostFeatures(protocols=draw(protocol_sets)),
                sessions=sessions,
                connecting=draw(st.integers(0, min(sessions, 6))),
                metrics=metrics,
                order=i,
            )
        )
    demands = draw(
        st.lists(
            st.builds(
                Demand,
                user=st.sampled_from(USERS),
                protocol=st.one_of(st.none(), st.sampled_from(ALL_PROTOCOLS)),
            ),
            max_size=40,
        )
    )
    return spec, hosts, demands


@settings(max_examples=400, deadline=None)
@given(horizon_worlds())
def test_horizon_engine_matches_the_reference_rules(
    world: tuple[HostPoolSpec, list[BalancerHost], list[Demand]],
) -> None:
    spec, hosts, demands = world
    b = PoolBalancer(spec, [BalancerHost(**{s: getattr(h, s) for s in h.__slots__}) for h in hosts])
    ref = {h.name: h for h in hosts}
    owner: dict[str, str] = {}
    for demand in demands:
        placement = b.assign(demand)
        if demand.user in owner:
            assert placement.host == owner[demand.user]
            continue
        expected = reference_horizon(spec, hosts, demand)
        assert placement.host == expected
        if expected is not None:
            ref[expected].sessions += 1
            ref[expected].connecting += 1
            owner[demand.user] = expected
    assert b.buckets() == {
        h.name: bucket for h, bucket in zip(hosts, reference_buckets(spec, hosts), strict=True)
    }


def reference_buckets(spec: HostPoolSpec, hosts: list[BalancerHost]) -> list[int]:
    hz = spec.horizon_settings
    limit = spec.load_balancer.session_limit
    server = hz.connection_server
    probe = PoolBalancer(
        spec, [BalancerHost(**{s: getattr(h, s) for s in h.__slots__}) for h in hosts]
    )
    accepting = {h.name for h in hosts if probe.availability(h.name)[0]}

    def load(h: BalancerHost) -> int:
        return load_index(hz.load_index, h.metrics, h.sessions, limit)

    loads = sorted(
        load(h)
        for h in hosts
        if h.name in accepting
        and h.features.all_default
        and load(h) != -1
        and h.connecting < server.rds_connecting_session_threshold
    )
    threshold = server.rds_load_index_threshold
    wanted = server.min_rds_servers_in_lb_queue
    if wanted > 0 and loads and sum(1 for x in loads if x < threshold) < wanted:
        threshold = max(threshold, loads[min(wanted, len(loads)) - 1] + 1)
    out = []
    for h in hosts:
        li = load(h)
        if li == -1 or h.connecting >= server.rds_connecting_session_threshold:
            out.append(3)
        elif h.features.all_default:
            out.append(1 if li < threshold else 3)
        else:
            out.append(2 if li < server.rds_load_index_threshold else 3)
    return out
