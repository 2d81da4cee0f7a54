"""Per-host logon-storm policy (SessionHost ``spec.logonStorm``): each field a host sets wins
over the pool's ``horizon.logonStorm`` field of the same name for that host (0 disables it
there); a field left out is the pool's. Horizon pools only; reconnects are never turned away.

Through every layer: the API model and CRD, the engine (availability and the Horizon index),
the operator's view of a host, the simulator, and the host's Available message.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hostpool_operator import api
from hostpool_operator.api import (
    HostLogonStorm,
    HostMetrics,
    HostPoolSpec,
    HostTemplate,
    LogonStorm,
    Reason,
    SessionHostSpec,
    crdgen,
)
from hostpool_operator.engine.balancer_view import BalancerHost, Placement
from hostpool_operator.engine.balancing import PoolBalancer
from hostpool_operator.engine.demand import Demand
from hostpool_operator.engine.horizon import LogonStormBlock, logon_storm_block
from hostpool_operator.engine.placement import Assign
from hostpool_operator.engine.records import HostRecord
from hostpool_operator.engine.status import PoolForHosts, host_status
from hostpool_operator.scaling.rules import host_manifest
from hostpool_operator.simulate import ScenarioError, run_scenario
from support.state_builders import T0, Pool, host_obj, pool_obj


def horizon(storm: dict[str, int] | None = None, **lb: Any) -> HostPoolSpec:
    """A Horizon pool (limit 100, so a host's load index is its session count) with the
    pool's logon-storm thresholds ``storm``; the bucket-1 raise off, so every host with a
    load index under 20 is in bucket 1."""
    spec: dict[str, Any] = {
        "loadBalancer": {"type": "Horizon", "maxSessionLimit": 100, **lb},
        "horizon": {"connectionServer": {"minRdsServersInLbQueue": 0}},
    }
    if storm is not None:
        spec["horizon"]["logonStorm"] = storm
    return HostPoolSpec.model_validate(spec)


def policy(**fields: int) -> HostLogonStorm:
    return HostLogonStorm.model_validate(fields)


NOT_PLACED = Placement(None, Reason.NO_ELIGIBLE_HOST)


# ---------------------------------------------------------------------------- the engine

#: (pool's logonStorm, host's spec.logonStorm, host's sessions, connecting, available?)
#: Sessions are the load index here (limit 100, session count only).
CASES = [
    pytest.param({"connectingSessionThreshold": 5}, None, 2, 2, True, id="pool-only-under"),
    pytest.param({"connectingSessionThreshold": 2}, None, 2, 2, False, id="pool-only-at"),
    pytest.param({"connectingSessionThreshold": 2}, {}, 2, 2, False, id="empty-policy-is-pool"),
    pytest.param(
        {"connectingSessionThreshold": 5},
        {"connectingSessionThreshold": 2},
        2,
        2,
        False,
        id="host-stricter-connecting",
    ),
    pytest.param(
        {"connectingSessionThreshold": 5},
        {"connectingSessionThreshold": 2},
        1,
        1,
        True,
        id="host-stricter-connecting-under",
    ),
    pytest.param(
        {"connectingSessionThreshold": 2},
        {"connectingSessionThreshold": 10},
        9,
        9,
        True,
        id="host-looser-connecting",
    ),
    pytest.param(
        {"connectingSessionThreshold": 2},
        {"connectingSessionThreshold": 10},
        10,
        10,
        False,
        id="host-looser-connecting-at-its-own",
    ),
    pytest.param(
        {"connectingSessionThreshold": 2, "loadIndexThreshold": 5},
        {"connectingSessionThreshold": 0},
        4,
        4,
        True,
        id="host-disables-connecting",
    ),
    pytest.param(
        {"connectingSessionThreshold": 2, "loadIndexThreshold": 5},
        {"connectingSessionThreshold": 0},
        5,
        0,
        False,
        id="host-disables-connecting-keeps-pool-load",
    ),
    pytest.param(
        {"loadIndexThreshold": 5},
        {"loadIndexThreshold": 0},
        90,
        0,
        True,
        id="host-disables-load",
    ),
    pytest.param(
        {"connectingSessionThreshold": 3},
        {"loadIndexThreshold": 8},
        8,
        0,
        False,
        id="host-load-only-at-its-own",
    ),
    pytest.param(
        {"connectingSessionThreshold": 3},
        {"loadIndexThreshold": 8},
        7,
        3,
        False,
        id="host-load-only-inherits-connecting",
    ),
    pytest.param(
        {"connectingSessionThreshold": 3},
        {"loadIndexThreshold": 8},
        7,
        2,
        True,
        id="host-load-only-under-both",
    ),
    pytest.param(None, {"connectingSessionThreshold": 1}, 1, 1, False, id="pool-unset-host-set"),
    pytest.param(None, None, 90, 90, True, id="neither-set"),
]


@pytest.mark.parametrize(("storm", "host_policy", "sessions", "connecting", "available"), CASES)
def test_thresholds_in_force_decide_availability_and_placement(
    storm: dict[str, int] | None,
    host_policy: dict[str, int] | None,
    sessions: int,
    connecting: int,
    available: bool,
) -> None:
    own = None if host_policy is None else policy(**host_policy)
    host = BalancerHost("h", sessions=sessions, connecting=connecting, logon_storm=own)
    b = PoolBalancer(horizon(storm), [host], [("alice", "h")] if sessions else [])
    reason = "AcceptingSessions" if available else "LogonStormThreshold"
    assert b.availability("h") == (available, reason)
    expected = Placement("h", Reason.NEW_SESSION) if available else NOT_PLACED
    assert b.place(Demand("newcomer")) == expected
    if sessions:  # a reconnect is never turned away, whichever threshold is in force
        assert b.place(Demand("alice")).host == "h"
        assert b.place(Demand("alice")).reason is Reason.RECONNECTED


def test_a_stricter_host_is_skipped_and_its_neighbour_without_a_policy_is_not() -> None:
    strict = BalancerHost("strict", logon_storm=policy(connectingSessionThreshold=2), order=0)
    plain = BalancerHost("plain", order=1)
    b = PoolBalancer(horizon({"connectingSessionThreshold": 5}), [strict, plain])
    chosen = [b.assign(Demand(f"u{i}")).host for i in range(8)]
    # Fair share takes turns until "strict" is at its own 2, then "plain" up to the pool's 5.
    assert chosen == ["strict", "plain", "strict", "plain", "plain", "plain", "plain", None]
    assert b.availability("strict") == (False, "LogonStormThreshold")
    assert b.availability("plain") == (False, "LogonStormThreshold")
    assert b.place(Demand("u9")).reason is Reason.NO_ELIGIBLE_HOST


def test_a_host_whose_policy_changes_is_indexed_again() -> None:
    b = PoolBalancer(horizon({"connectingSessionThreshold": 5}), [BalancerHost("h", connecting=3)])
    assert b.place(Demand("u")).host == "h"
    b.upsert_host(BalancerHost("h", connecting=3, logon_storm=policy(connectingSessionThreshold=3)))
    assert b.place(Demand("u")).reason is Reason.NO_ELIGIBLE_HOST
    b.upsert_host(BalancerHost("h", connecting=3, logon_storm=policy(connectingSessionThreshold=0)))
    assert b.place(Demand("u")).host == "h"
    b.upsert_host(BalancerHost("h", connecting=3))
    assert b.place(Demand("u")).host == "h"  # back to the pool's 5


def test_the_load_index_threshold_of_a_host_uses_its_load_index_from_metrics() -> None:
    spec = HostPoolSpec.model_validate(
        {
            "loadBalancer": {"type": "Horizon", "maxSessionLimit": 100},
            "horizon": {
                "loadIndex": {"cpuThresholdPercent": 100, "includeSessionCount": False},
                "logonStorm": {"loadIndexThreshold": 95},
            },
        }
    )
    hot = BalancerHost(
        "hot", metrics=HostMetrics(cpu_percent=80), logon_storm=policy(loadIndexThreshold=75)
    )
    warm = BalancerHost("warm", metrics=HostMetrics(cpu_percent=90))
    unknown = BalancerHost("unknown", logon_storm=policy(loadIndexThreshold=1))  # load index -1
    b = PoolBalancer(spec, [hot, warm, unknown])
    assert b.availability("hot") == (False, "LogonStormThreshold")  # 80 >= its own 75
    assert b.availability("warm") == (True, "AcceptingSessions")  # 90 < the pool's 95
    assert b.availability("unknown") == (True, "AcceptingSessions")  # no load index: no block
    assert b.place(Demand("u")).host == "warm"


@pytest.mark.parametrize("kind", ["BreadthFirst", "DepthFirst"])
def test_pools_that_are_not_horizon_ignore_the_host_policy(kind: str) -> None:
    spec = HostPoolSpec.model_validate({"loadBalancer": {"type": kind, "maxSessionLimit": 10}})
    own = policy(connectingSessionThreshold=1, loadIndexThreshold=1)
    b = PoolBalancer(spec, [BalancerHost("h", sessions=5, connecting=5, logon_storm=own)])
    assert b.availability("h") == (True, "AcceptingSessions")
    assert [b.assign(Demand(f"u{i}")).host for i in range(5)] == ["h"] * 5
    assert b.place(Demand("u5")).reason is Reason.POOL_SATURATED


# ---------------------------------------------------------------------------- the merge


@pytest.mark.parametrize(
    ("storm", "own", "connecting", "load", "expected"),
    [
        pytest.param({}, None, 150, 100, None, id="all-disabled"),
        pytest.param(
            {"connectingSessionThreshold": 4},
            None,
            4,
            0,
            LogonStormBlock("connectingSessionThreshold", "pool", 4, 4),
            id="pool-connecting",
        ),
        pytest.param(
            {"connectingSessionThreshold": 4},
            {"connectingSessionThreshold": 2},
            3,
            0,
            LogonStormBlock("connectingSessionThreshold", "host", 2, 3),
            id="host-connecting",
        ),
        pytest.param(
            {"connectingSessionThreshold": 4, "loadIndexThreshold": 50},
            {"connectingSessionThreshold": 9},
            4,
            60,
            LogonStormBlock("loadIndexThreshold", "pool", 50, 60),
            id="host-connecting-pool-load",
        ),
        pytest.param(
            {"loadIndexThreshold": 50},
            {"loadIndexThreshold": 70},
            0,
            70,
            LogonStormBlock("loadIndexThreshold", "host", 70, 70),
            id="host-load",
        ),
        pytest.param(
            {"connectingSessionThreshold": 1, "loadIndexThreshold": 1},
            {"connectingSessionThreshold": 0, "loadIndexThreshold": 0},
            150,
            100,
            None,
            id="host-disables-both",
        ),
        pytest.param(
            {"loadIndexThreshold": 1},
            None,
            0,
            -1,
            None,
            id="no-load-index",
        ),
    ],
)
def test_logon_storm_block_names_the_threshold_in_force_and_whose_it_is(
    storm: dict[str, int],
    own: dict[str, int] | None,
    connecting: int,
    load: int,
    expected: LogonStormBlock | None,
) -> None:
    pool_storm = LogonStorm.model_validate(storm)
    host_policy = None if own is None else policy(**own)
    assert logon_storm_block(pool_storm, host_policy, connecting, load) == expected


# ---------------------------------------------------------------------------- the simulator


def storm_scenario(with_policies: bool) -> dict[str, Any]:
    hosts: list[dict[str, Any]] = [{"name": "small"}, {"name": "big"}, {"name": "std"}]
    if with_policies:
        hosts[0]["spec"] = {"logonStorm": {"connectingSessionThreshold": 1}}
        hosts[1]["spec"] = {"logonStorm": {"connectingSessionThreshold": 0}}
    return {
        "pool": {
            "loadBalancer": {"type": "Horizon", "maxSessionLimit": 100},
            "horizon": {
                "logonStorm": {"connectingSessionThreshold": 3},
                "connectionServer": {"minRdsServersInLbQueue": 0},
            },
        },
        "hosts": hosts,
        "requests": [{"user": f"u{i}"} for i in range(1, 10)] + [{"user": "u1"}],
    }


def test_simulator_per_host_policy_changes_where_a_logon_storm_goes() -> None:
    result = run_scenario(storm_scenario(with_policies=True))
    placed = [(a["user"], a["host"], a["reason"]) for a in result["assignments"]]
    # "small" stops at its own 1; "std" at the pool's 3; "big" has the threshold disabled
    # and takes the rest. The fair share still deals in turns while hosts are open.
    assert placed == [
        ("u1", "small", "NewSession"),
        ("u2", "big", "NewSession"),
        ("u3", "std", "NewSession"),
        ("u4", "big", "NewSession"),
        ("u5", "std", "NewSession"),
        ("u6", "big", "NewSession"),
        ("u7", "std", "NewSession"),
        ("u8", "big", "NewSession"),
        ("u9", "big", "NewSession"),
        ("u1", "small", "Reconnected"),  # at its threshold, but reconnects are exempt
    ]
    assert [(h["name"], h["connecting"]) for h in result["hosts"]] == [
        ("small", 1),
        ("big", 5),
        ("std", 3),
    ]
    # The same storm with the pool's thresholds only: turns round the three hosts, each
    # up to the pool's 3.
    plain = run_scenario(storm_scenario(with_policies=False))
    assert [a["host"] for a in plain["assignments"]] == [
        "small",
        "big",
        "std",
        "small",
        "big",
        "std",
        "small",
        "big",
        "std",
        "small",
    ]


def test_simulator_refuses_an_out_of_range_host_policy_naming_the_field() -> None:
    document = storm_scenario(with_policies=True)
    document["hosts"][0]["spec"] = {"logonStorm": {"connectingSessionThreshold": 151}}
    with pytest.raises(ScenarioError, match=r"hosts\.0\.spec\.logonStorm\.connecting"):
        run_scenario(document)


# ---------------------------------------------------------------------------- the operator


def test_the_operator_hands_the_host_policy_to_the_engine() -> None:
    storm = {"logonStorm": {"connectingSessionThreshold": 4}}
    pool = Pool(
        pool_obj(limit=10, lb_type="Horizon", horizon=storm),
        [
            host_obj("own", created=0, logonStorm={"connectingSessionThreshold": 1}),
            host_obj("inherits", created=1),
        ],
    )
    state = pool.state
    assert state.views.balancer is not None
    view = state.views.balancer.host("own")
    assert view is not None
    assert view.logon_storm == policy(connectingSessionThreshold=1)
    inherits = state.views.balancer.host("inherits")
    assert inherits is not None
    assert inherits.logon_storm is None
    hosts = []
    for i in range(5):
        pool.arrive(f"r{i}", f"u{i}")
        hosts += [i.placement.host for i in pool.place(T0) if isinstance(i, Assign)]
    # "own" stops at its own 1, "inherits" at the pool's 4.
    assert hosts == ["own", "inherits", "inherits", "inherits", "inherits"]
    assert state.views.balancer.availability("own") == (False, "LogonStormThreshold")
    # A changed policy reaches the engine with the host's next version.
    changed = host_obj("own", created=0, logonStorm={"connectingSessionThreshold": 3})
    changed["metadata"]["resourceVersion"] = "2"
    state.put_host(HostRecord.of(changed), T0)
    assert state.views.balancer.availability("own") == (True, "AcceptingSessions")


@pytest.mark.parametrize(
    ("own", "connecting", "message"),
    [
        pytest.param(
            {"connectingSessionThreshold": 2},
            2,
            "turning new logons away: 2 sessions connecting, at or above this host's "
            "spec.logonStorm.connectingSessionThreshold (2)",
            id="host-connecting",
        ),
        pytest.param(
            {"loadIndexThreshold": 30},
            4,
            "turning new logons away: 4 sessions connecting, at or above the pool's "
            "horizon.logonStorm.connectingSessionThreshold (4)",
            id="pool-connecting",
        ),
        pytest.param(
            {"loadIndexThreshold": 30},
            0,
            "turning new logons away: load index 30, at or above this host's "
            "spec.logonStorm.loadIndexThreshold (30)",
            id="host-load",
        ),
    ],
)
def test_the_available_message_names_the_threshold_and_whose_it_is(
    own: dict[str, int], connecting: int, message: str
) -> None:
    spec = {
        "loadBalancer": {"type": "Horizon", "maxSessionLimit": 10},
        "horizon": {"logonStorm": {"connectingSessionThreshold": 4}},
    }
    record = HostRecord.of(host_obj("h", logonStorm=own))
    assert record.spec is not None
    view = BalancerHost("h", sessions=3, connecting=connecting, logon_storm=record.spec.logon_storm)
    pool = PoolForHosts(
        pool_name="p",
        pool_exists=True,
        balancer=PoolBalancer(HostPoolSpec.model_validate(spec), [view]),
        counts={},
        buckets={},
        metrics_stale_after=90.0,
        now=T0,
    )
    status = host_status(record, pool, metrics_stale=False)
    available = next(c for c in status["conditions"] if c["type"] == "Available")
    assert (available["status"], available["reason"]) == ("False", "LogonStormThreshold")
    assert available["message"] == message


# ---------------------------------------------------------------------------- the API


def test_host_policy_fields_are_optional_and_bounded_like_the_pools() -> None:
    assert SessionHostSpec.model_validate({"poolRef": {"name": "p"}}).logon_storm is None
    spec = SessionHostSpec.model_validate({"poolRef": {"name": "p"}, "logonStorm": {}})
    assert spec.logon_storm == HostLogonStorm()
    assert spec.to_api()["logonStorm"] == {}  # absent fields stay absent: they inherit
    for field, top in (("connectingSessionThreshold", 150), ("loadIndexThreshold", 100)):
        for value in (0, top):
            SessionHostSpec.model_validate({"poolRef": {"name": "p"}, "logonStorm": {field: value}})
        for value in (-1, top + 1):
            with pytest.raises(ValidationError, match=f"logonStorm.{field}"):
                SessionHostSpec.model_validate(
                    {"poolRef": {"name": "p"}, "logonStorm": {field: value}}
                )


def _properties(kind: type[api.SessionHost] | type[api.HostPool], *path: str) -> dict[str, Any]:
    node = crdgen.object_schema(kind)
    for part in path:
        node = node["properties"][part]
    properties: dict[str, Any] = node["properties"]
    return properties


def test_crd_bounds_match_the_pools_and_carry_no_defaults() -> None:
    pool_storm = _properties(api.HostPool, "spec", "horizon", "logonStorm")
    host_storm = _properties(api.SessionHost, "spec", "logonStorm")
    template = _properties(api.HostPool, "spec", "scaling", "hostTemplate", "spec", "logonStorm")
    assert set(host_storm) == set(pool_storm) == set(template)
    for name, pool_field in pool_storm.items():
        for field in (host_storm[name], template[name]):
            assert (field["type"], field["minimum"], field["maximum"]) == (
                pool_field["type"],
                pool_field["minimum"],
                pool_field["maximum"],
            )
            assert "default" not in field  # absent means the pool's, so the server fills none


def test_hosts_made_from_a_template_carry_its_policy() -> None:
    template = HostTemplate.model_validate({"spec": {"logonStorm": {"loadIndexThreshold": 90}}})
    manifest = host_manifest(template, pool="desk", namespace="ns", pool_uid="u", labels={})
    assert manifest["spec"]["logonStorm"] == {"loadIndexThreshold": 90}
    spec = SessionHostSpec.model_validate(manifest["spec"])
    assert spec.logon_storm == policy(loadIndexThreshold=90)
