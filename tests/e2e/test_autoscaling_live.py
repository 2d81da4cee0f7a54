"""Scaling end to end: the operator adds hosts when a depth-first pool is full, keeps a buffer,
stops at maxHosts (ScalingLimited), removes only its own empty hosts after the delay, and
never creates more hosts than needed, across restarts too."""

from __future__ import annotations

from typing import Any

from support.cluster import Cluster
from support.conditions import cond_is, host_of, phase, status
from support.operator_process import OperatorProcess

POOL = "ops"
MANAGED = "hostpool.io/managed-by"


def scaling(**kw: Any) -> dict[str, Any]:
    return {
        "minHosts": 0,
        "maxHosts": 6,
        "scaleDownDelaySeconds": 600,
        "hostTemplate": {"metadata": {"labels": {"tier": "generated"}}},
        **kw,
    }


def managed(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {
        name: h
        for name, h in cluster.hosts().items()
        if h["metadata"].get("labels", {}).get(MANAGED) == "hostpool-operator"
    }


def per_host(cluster: Cluster) -> dict[str, int]:
    counts: dict[str, int] = {}
    for obj in cluster.requests().values():
        if phase(obj) == "Assigned":
            host = host_of(obj)
            assert host is not None
            counts[host] = counts.get(host, 0) + 1
    return counts


def test_saturation_scales_up_and_waiting_requests_are_placed(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 3, hosts=["rds-01"], scaling=scaling())
    names = [f"r{i:02d}" for i in range(10)]
    for i, name in enumerate(names):
        cluster.create_request(name, POOL, f"user{i}")
    cluster.wait_assigned(names, timeout=60)
    created = managed(cluster)
    # 10 sessions at 3 per host: rds-01 plus exactly three generated hosts.
    assert len(created) == 3, sorted(created)
    for host in created.values():
        meta = host["metadata"]
        assert meta["labels"]["tier"] == "generated"
        assert meta["labels"]["hostpool.io/pool"] == POOL
        owner = meta["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("HostPool", POOL, True)
        assert host["spec"]["poolRef"] == {"name": POOL}
    assert max(per_host(cluster).values()) <= 3
    cluster.wait_pool(
        POOL,
        lambda p: cond_is(p, "ScalingLimited", "False") and status(p)["hosts"]["total"] == 4,
        "ScalingLimited False (within maxHosts) and 4 hosts counted",
    )
    added = [e for e in cluster.events_for(POOL) if e.get("reason") == "HostsAdded"]
    assert added, "a HostsAdded Event on the pool"


def test_buffer_sessions_keep_free_slots_ahead(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    # Scaling is switched on once the operator knows rds-01: a pool seen without it would
    # rightly add two buffer hosts.
    cluster.setup_pool(POOL, "DepthFirst", 4, hosts=["rds-01"])
    cluster.patch("HostPool", POOL, {"spec": {"scaling": scaling(bufferSessions=6)}})
    # 4 free slots < 6: one more host makes 8 free; then two sessions leave 6 free: no more.
    cluster.wait(lambda: len(managed(cluster)) == 1 or None, "one buffer host")
    for i in range(2):
        cluster.create_request(f"r{i}", POOL, f"user{i}")
    cluster.wait_assigned(["r0", "r1"])
    pool = cluster.wait_pool(
        POOL, lambda p: status(p).get("capacity", {}).get("free") == 6, "6 free slots"
    )
    assert status(pool)["hosts"]["total"] == 2
    assert len(managed(cluster)) == 1
    # A third session drops the buffer to 5: another host.
    cluster.create_request("r2", POOL, "user2")
    cluster.wait(lambda: len(managed(cluster)) == 2 or None, "a second buffer host")


def test_max_hosts_limits_growth_and_requests_wait_saturated(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 2, hosts=["rds-01"], scaling=scaling(maxHosts=2))
    names = [f"r{i}" for i in range(6)]
    for i, name in enumerate(names):
        cluster.create_request(name, POOL, f"user{i}")
    cluster.wait(
        lambda: sum(1 for o in cluster.requests().values() if phase(o) == "Assigned") == 4 or None,
        "four requests assigned (two hosts of two)",
    )
    waiting = [o for o in cluster.requests().values() if phase(o) != "Assigned"]
    assert len(waiting) == 2
    for obj in waiting:
        cluster.wait_request(obj["metadata"]["name"], phase_="Pending", reason="PoolSaturated")
    # The conditions are written at once; a status of counts alone waits for a pause in the
    # placements (at most 5 s), so hosts.total may follow them a moment later.
    cluster.wait_pool(
        POOL,
        lambda p: (
            cond_is(p, "ScalingLimited", "True", "MaxHostsReached")
            and cond_is(p, "Saturated", "True")
            and status(p).get("hosts", {}).get("total") == 2
        ),
        "ScalingLimited True (MaxHostsReached), Saturated, and two hosts counted",
    )
    assert len(cluster.hosts()) == 2


def test_scale_down_removes_only_empty_operator_hosts_after_the_delay(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(
        POOL, "DepthFirst", 2, hosts=["user-host"], scaling=scaling(scaleDownDelaySeconds=2)
    )
    names = [f"r{i}" for i in range(6)]
    for i, name in enumerate(names):
        cluster.create_request(name, POOL, f"user{i}")
    placed = cluster.wait_assigned(names, timeout=60)
    generated = sorted(managed(cluster))
    assert len(generated) == 2
    # Keep one generated host busy; empty the other and the user's host.
    keep = generated[0]
    for name, obj in placed.items():
        if host_of(obj) != keep:
            cluster.delete("SessionRequest", name)
    gone = generated[1]
    cluster.wait(lambda: gone not in cluster.hosts() or None, f"{gone} removed", timeout=30)
    hosts = cluster.hosts()
    assert keep in hosts, "a host with sessions is never removed"
    assert "user-host" in hosts, "a host a user created is never removed"
    # Once the busy host empties, it goes too (the user's host stays, empty).
    for name, obj in placed.items():
        if host_of(obj) == keep:
            cluster.delete("SessionRequest", name)
    cluster.wait(lambda: keep not in cluster.hosts() or None, f"{keep} removed", timeout=30)
    assert set(cluster.hosts()) == {"user-host"}
    removed = [e for e in cluster.events_for(POOL) if e.get("reason") == "HostsRemoved"]
    assert removed


def test_an_empty_host_kept_by_min_hosts_after_its_delay_leaves_the_operator_running(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    """minHosts 1 and scaleDownDelaySeconds 0: the operator creates one host, which is empty
    and past its delay at once, and must stay. Its scale-down due time is then in the past for
    good; that must not make the pool's loop run again without pause (which held the whole
    operator: the generated-input test hung on such a pool). Another pool created afterwards
    must still be served, and the kept host must still be there."""
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 2, scaling=scaling(minHosts=1, scaleDownDelaySeconds=0))
    cluster.wait(lambda: len(managed(cluster)) == 1 or None, "the minHosts host")
    cluster.setup_pool("other", "BreadthFirst", 2, hosts=["other-1"])
    cluster.create_request("r0", "other", "user0")
    cluster.wait_assigned(["r0"], timeout=30)
    assert len(managed(cluster)) == 1, "the minHosts host stays"


def test_no_over_creation_across_a_restart_mid_scale(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    cluster.setup_pool(POOL, "DepthFirst", 5, hosts=["rds-01"], scaling=scaling(maxHosts=10))
    first = [f"a{i:02d}" for i in range(12)]
    for i, name in enumerate(first):
        cluster.create_request(name, POOL, f"a-user{i}")
    # Stop the operator as soon as it has started adding hosts.
    cluster.wait(lambda: len(managed(cluster)) >= 1 or None, "scale-up started")
    operator_process.restart()
    second = [f"b{i:02d}" for i in range(8)]
    for i, name in enumerate(second):
        cluster.create_request(name, POOL, f"b-user{i}")
    cluster.wait_assigned(first + second, timeout=60)
    # 20 sessions at 5 per host need exactly four hosts: rds-01 and three generated ones.
    cluster.wait(lambda: len(cluster.hosts()) == 4 or None, "four hosts")
    assert len(managed(cluster)) == 3
    counts = per_host(cluster)
    assert sum(counts.values()) == 20
    assert max(counts.values()) <= 5
