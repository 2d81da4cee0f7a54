"""The operator under changing and bad runtime conditions, end to end: the algorithm changed
mid-storm, a host or the pool deleted under live sessions, a restart, a storm of requests."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from support.cluster import Cluster
from support.conditions import (
    cond_is,
    count_by_host,
    host_of,
    hosts_of,
    phase,
    sessions_total,
    status,
)
from support.kube import Kube
from support.operator_process import OperatorProcess
from support.recorder import RequestRecorder

POOL = "busy"


def test_algorithm_changed_mid_storm(
    kube: Kube, namespace: str, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    hosts = [f"h{i:02d}" for i in range(10)]
    limit = 5
    cluster.setup_pool(POOL, "BreadthFirst", limit, hosts=hosts)
    names = [f"r{i:02d}" for i in range(50)]
    client = Kube.connect(kube.kubeconfig, pool_size=32)
    threaded = Cluster(client, namespace)
    created = threading.Semaphore(0)

    def create(name: str) -> None:
        threaded.create_request(name, POOL, f"user-{name}")
        created.release()

    try:
        with RequestRecorder(kube.kubeconfig, namespace) as watcher, ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(create, name) for name in names]
            for _ in range(20):  # a third of the storm is in
                assert created.acquire(timeout=60)
            cluster.patch("HostPool", POOL, {"spec": {"loadBalancer": {"type": "DepthFirst"}}})
            for future in futures:
                future.result()
            placed = cluster.wait_assigned(names, timeout=60)
            per_host = count_by_host(placed)
            assert sum(per_host.values()) == 50
            assert max(per_host.values()) <= limit, per_host
            # 50 sessions on 10 hosts of 5: every host is full.
            assert per_host == dict.fromkeys(hosts, limit), per_host
            cluster.wait_host_sessions(per_host)
            assert watcher.problems() == []
    finally:
        client.close()
    pool_obj = cluster.wait_pool(
        POOL,
        lambda p: (
            status(p).get("observedGeneration") == p["metadata"]["generation"]
            and (status(p).get("sessions") or {}).get("total") == 50
        ),
        "the new algorithm observed, 50 sessions",
    )
    assert pool_obj["spec"]["loadBalancer"]["type"] == "DepthFirst"


def test_host_deleted_under_sessions_fails_its_requests(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 3, hosts=["h1", "h2", "h3"])
    names = [f"r{i}" for i in range(6)]
    for name in names:
        cluster.create_request(name, POOL, f"user-{name}")
    placed = cluster.wait_assigned(names)
    on_h1 = sorted(n for n in names if host_of(placed[n]) == "h1")
    on_h2 = sorted(n for n in names if host_of(placed[n]) == "h2")
    assert on_h1 == ["r0", "r1", "r2"]
    assert on_h2 == ["r3", "r4", "r5"]

    cluster.delete("SessionHost", "h1")

    def all_failed() -> dict[str, Any] | None:
        objs = cluster.requests()
        return objs if all(phase(objs[n]) == "Failed" for n in on_h1) else None

    after = cluster.wait(all_failed, f"{on_h1} to become Failed")
    for name in on_h1:
        assert cond_is(after[name], "Assigned", "False", "HostDeleted"), status(after[name])
    for name in on_h2:
        assert phase(after[name]) == "Assigned", status(after[name])
        assert host_of(after[name]) == "h2"
        assert status(after[name])["assignedAt"] == status(placed[name])["assignedAt"]

    # New requests go to the remaining hosts (h2 is full: h3); the user whose session was on
    # h1 starts a new one.
    cluster.create_request("new", POOL, "user-new")
    cluster.create_request("r0-again", POOL, "user-r0")
    assert host_of(cluster.wait_request("new", phase_="Assigned")) == "h3"
    again = cluster.wait_request("r0-again", phase_="Assigned", reason="NewSession")
    assert host_of(again) == "h3"
    cluster.wait_host_sessions({"h2": 3, "h3": 2})
    cluster.wait_pool(
        POOL,
        lambda p: (
            (status(p).get("hosts") or {}).get("total") == 2
            and (status(p).get("sessions") or {}).get("total") == 5
        ),
        "2 hosts, 5 sessions",
    )

    # Each failed request has an Event saying why.
    def events_recorded() -> bool:
        return all(
            any(e.get("reason") == "HostDeleted" for e in cluster.events_for(name))
            for name in on_h1
        )

    cluster.wait(events_recorded, f"HostDeleted Events for {on_h1}")
    for name in on_h1:
        event = next(e for e in cluster.events_for(name) if e.get("reason") == "HostDeleted")
        assert event["involvedObject"]["kind"] == "SessionRequest"
        assert event["type"] == "Warning"
    # The failed requests stay failed.
    for name in on_h1:
        assert phase(cluster.request(name)) == "Failed"


def test_pool_deleted_keeps_sessions_and_new_requests_wait(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 3, hosts=["h1"])
    cluster.create_request("r1", POOL, "alice")
    cluster.create_request("r2", POOL, "bob")
    before = cluster.wait_assigned(["r1", "r2"])

    cluster.delete("HostPool", POOL)
    cluster.create_request("r3", POOL, "carol")
    waiting = cluster.wait_request("r3", phase_="Pending", reason="PoolNotFound")
    assert cond_is(waiting, "Assigned", "False", "PoolNotFound"), status(waiting)
    cluster.wait_host(
        "h1", lambda h: cond_is(h, "Available", "False"), "Available=False without a pool"
    )
    for name in ("r1", "r2"):
        now = cluster.request(name)
        assert phase(now) == "Assigned", status(now)
        assert host_of(now) == "h1"
        assert status(now)["assignedAt"] == status(before[name])["assignedAt"]

    # The pool comes back with a limit of 2: alice's and bob's sessions still count, so
    # carol waits until a host with room appears.
    cluster.create_pool(POOL, "DepthFirst", 2)
    cluster.wait_request("r3", phase_="Pending", reason="PoolSaturated")
    cluster.wait_host_sessions({"h1": 2})
    cluster.create_host("h2", POOL)
    assert host_of(cluster.wait_request("r3", phase_="Assigned")) == "h2"
    for name in ("r1", "r2"):
        assert host_of(cluster.request(name)) == "h1"


def test_restart_keeps_every_assignment(
    kube: Kube, namespace: str, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    hosts = ["h1", "h2", "h3", "h4"]
    limit = 5
    cluster.setup_pool(POOL, "DepthFirst", limit, hosts=hosts)
    with RequestRecorder(kube.kubeconfig, namespace) as watcher:
        first = [f"a{i}" for i in range(8)]
        for name in first:
            cluster.create_request(name, POOL, f"user-{name}")
        before = hosts_of(cluster.wait_assigned(first))
        assert count_by_host(cluster.requests()) == {"h1": 5, "h2": 3}

        operator_process.stop()
        second = [f"b{i}" for i in range(8)]
        for name in second:
            cluster.create_request(name, POOL, f"user-{name}")
        # A user who had a session before the restart asks again while the operator is down.
        cluster.create_request("a0-again", POOL, "user-a0")
        operator_process.start()

        everything = [*first, *second, "a0-again"]
        placed = cluster.wait_assigned(everything)
        assert {n: host_of(placed[n]) for n in first} == before
        again = status(placed["a0-again"])
        assert (again["reason"], again["host"]) == ("Reconnected", before["a0"])
        per_host = count_by_host(placed)
        assert per_host == {"h1": 5, "h2": 5, "h3": 5, "h4": 1}, per_host
        cluster.wait_host_sessions(per_host)
        assert watcher.problems() == []
        # Every request was assigned exactly once, and the watch saw all of them.
        histories = watcher.snapshot()
        assert set(everything) <= set(histories)
        for name in everything:
            assert histories[name].assignments() == 1, (name, histories[name].states)


def test_host_deleted_while_the_operator_is_down(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    cluster.setup_pool(POOL, "DepthFirst", 2, hosts=["h1", "h2"])
    names = ["r0", "r1", "r2"]
    for name in names:
        cluster.create_request(name, POOL, f"user-{name}")
    placed = cluster.wait_assigned(names)
    assert hosts_of(placed) == {"r0": "h1", "r1": "h1", "r2": "h2"}

    operator_process.stop()
    cluster.delete("SessionHost", "h1")
    cluster.create_request("r3", POOL, "user-r3")
    operator_process.start()

    def settled() -> dict[str, Any] | None:
        objs = cluster.requests()
        done = all(phase(objs[n]) == "Failed" for n in ("r0", "r1"))
        return objs if done and phase(objs["r3"]) == "Assigned" else None

    after = cluster.wait(settled, "r0, r1 Failed and r3 Assigned")
    for name in ("r0", "r1"):
        assert cond_is(after[name], "Assigned", "False", "HostDeleted"), status(after[name])
    assert host_of(after["r2"]) == "h2"
    assert status(after["r2"])["assignedAt"] == status(placed["r2"])["assignedAt"]
    assert host_of(after["r3"]) == "h2"
    cluster.wait_host_sessions({"h2": 2})


def test_a_session_ended_while_the_operator_is_down_frees_its_slot(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    cluster.setup_pool(POOL, "DepthFirst", 1, hosts=["h1"])
    cluster.create_request("r1", POOL, "alice")
    cluster.wait_request("r1", phase_="Assigned", host="h1")
    cluster.create_request("r2", POOL, "bob")
    cluster.wait_request("r2", phase_="Pending", reason="PoolSaturated")

    operator_process.stop()
    cluster.delete("SessionRequest", "r1")
    operator_process.start()

    placed = cluster.wait_request("r2", phase_="Assigned", host="h1")
    assert status(placed)["reason"] == "NewSession"
    cluster.wait_host_sessions({"h1": 1})


def test_storm_of_200_requests(
    kube: Kube, namespace: str, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    hosts = [f"h{i:02d}" for i in range(10)]
    limit = 20
    cluster.setup_pool(POOL, "DepthFirst", limit, hosts=hosts)
    names = [f"s{i:03d}" for i in range(200)]
    client = Kube.connect(kube.kubeconfig, pool_size=32)
    try:
        threaded = Cluster(client, namespace)
        with RequestRecorder(kube.kubeconfig, namespace) as watcher:
            threaded.create_requests_concurrently(
                [(name, POOL, f"user-{name}") for name in names], threads=16
            )
            placed = cluster.wait_assigned(names, timeout=60)
            per_host = count_by_host(placed)
            assert per_host == dict.fromkeys(hosts, limit), per_host
            cluster.wait_host_sessions(per_host)
            assert watcher.problems() == []
    finally:
        client.close()
    for name, obj in placed.items():
        meta = obj["metadata"]
        assert not meta.get("finalizers"), (name, meta.get("finalizers"))
        kopf_keys = [k for k in meta.get("annotations") or {} if "kopf" in k]
        assert kopf_keys == [], (name, kopf_keys)
        assert status(obj)["reason"] == "NewSession"
    pool = cluster.wait_pool(
        POOL,
        lambda p: (
            (status(p).get("sessions") or {}).get("total") == 200
            and status(p).get("pendingRequests") == 0
        ),
        "200 sessions, nothing pending",
    )
    assert status(pool)["capacity"]["free"] == 0
    assert all(sessions_total(h) == limit for h in cluster.hosts().values())


def test_a_pool_that_is_gone_leaves_nothing_behind(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    """Once a pool, its hosts and its requests are all deleted, the operator forgets the
    pool name (its metric series go); the same name used again starts from scratch."""
    label = 'pool="brief"'
    for user in ("alice", "bob"):
        cluster.setup_pool("brief", "BreadthFirst", 2, hosts=["b1"])
        cluster.create_request(f"r-{user}", "brief", user)
        placed = cluster.wait_assigned([f"r-{user}"])
        assert host_of(placed[f"r-{user}"]) == "b1"
        cluster.wait(lambda: label in operator_process.metrics() or None, "the pool's metrics")
        cluster.delete("SessionRequest", f"r-{user}")
        cluster.delete("SessionHost", "b1")
        cluster.delete("HostPool", "brief")
        cluster.wait(
            lambda: label not in operator_process.metrics() or None,
            "the pool's metric series to go",
        )


def test_a_restarted_container_takes_its_own_lease_back_at_once(
    kube: Kube,
    namespace: str,
    cluster: Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the pod's name as its identity (the chart sets POD_NAME), an operator killed
    with SIGKILL and started again in the same pod holds the Lease at once: it does not wait
    the 15 s for its own Lease to expire, as a process with a new identity must."""
    monkeypatch.setenv("POD_NAME", "hostpool-operator-7d9f6-x2k4q")
    operator = OperatorProcess(kube.kubeconfig, namespace, tmp_path / "operator.log")
    operator.start()
    try:
        cluster.setup_pool(POOL, "DepthFirst", 5, hosts=["h1"])
        cluster.create_request("before", POOL, "u0")
        cluster.wait_assigned(["before"])
        killed = operator.proc
        assert killed is not None
        killed.kill()  # SIGKILL: the Lease is not released
        killed.wait(timeout=10)
        operator.proc = None
        restarted = time.monotonic()
        operator.start()
        cluster.create_request("after", POOL, "u1")
        cluster.wait_assigned(["after"], timeout=30)
        took = time.monotonic() - restarted
        print(f"restart -> placed: {took:.2f} s")
        assert took < 10, f"placed {took:.1f} s after the restart: it waited for the Lease"
        assert "waiting as a standby" not in operator.log_text()
        assert operator.problems() == []
    finally:
        operator.stop(wait=False)
