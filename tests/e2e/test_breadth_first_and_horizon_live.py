"""Breadth-first and Horizon placement end to end."""

from __future__ import annotations

from typing import Any

from support.cluster import Cluster
from support.conditions import (
    cond_is,
    count_by_host,
    half_up,
    host_of,
    now_rfc3339,
    sessions_total,
    status,
)
from support.operator_process import OperatorProcess

POOL = "wide"


def _give_sessions(cluster: Cluster, wanted: dict[str, int]) -> None:
    """Run requests through the operator so each host (all created draining) ends up with the
    wanted number of sessions: undrain one host at a time, place its share, drain it again."""
    for host, count in wanted.items():
        if count == 0:
            continue
        cluster.set_drain(host, False)
        cluster.wait_host(host, lambda h: cond_is(h, "Available", "True"), "Available=True")
        names = [f"pre-{host}-{i}" for i in range(count)]
        for name in names:
            cluster.create_request(name, POOL, name)
        placed = cluster.wait_assigned(names)
        assert {host_of(placed[n]) for n in names} == {host}
        cluster.set_drain(host, True)
        cluster.wait_host(host, lambda h: cond_is(h, "Available", "False", "Draining"), "Draining")


def test_breadth_first_picks_among_the_least_loaded_half(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    hosts = ["h1", "h2", "h3", "h4"]
    cluster.setup_pool(POOL, "BreadthFirst", hosts=hosts, host_spec={"drainMode": True})
    baseline = {"h1": 6, "h2": 4, "h3": 2, "h4": 0}
    _give_sessions(cluster, baseline)
    for host in hosts:
        cluster.set_drain(host, False)
    for host in hosts:
        cluster.wait_host(host, lambda h: cond_is(h, "Available", "True"), "Available=True")
    cluster.wait_host_sessions(baseline)

    # ceil(4/2) = 2: a new session goes to h3 or h4, never to h1 or h2. Each probe logs off
    # again, so every probe meets the same loads.
    least_loaded = {"h3", "h4"}
    assert half_up(len(hosts)) == len(least_loaded)
    seen: set[str] = set()
    for i in range(8):
        name = f"probe{i}"
        cluster.create_request(name, POOL, name)
        placed = cluster.wait_request(name, phase_="Assigned", reason="NewSession")
        chosen = host_of(placed)
        assert chosen in least_loaded, (name, chosen, baseline)
        seen.add(chosen)
        cluster.delete("SessionRequest", name)
        cluster.wait_host_sessions(baseline)
    assert seen <= least_loaded


def test_breadth_first_spreads_sessions_over_every_host(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    hosts = ["h1", "h2", "h3", "h4"]
    limit = 8
    cluster.setup_pool(POOL, "BreadthFirst", limit, hosts=hosts)
    names = [f"r{i:02d}" for i in range(20)]
    for name in names:
        cluster.create_request(name, POOL, f"user-{name}")
    placed = cluster.wait_assigned(names)
    per_host = count_by_host(placed)
    assert sum(per_host.values()) == 20, per_host
    assert set(per_host) == set(hosts), f"some host got no session: {per_host}"
    assert max(per_host.values()) <= limit, per_host
    cluster.wait_host_sessions(per_host)
    cluster.wait_pool(
        POOL,
        lambda p: (
            (status(p).get("sessions") or {}).get("total") == 20
            and (status(p).get("capacity") or {}).get("free") == 4 * limit - 20
        ),
        "20 sessions, 12 free",
    )


HORIZON: dict[str, Any] = {
    "loadIndex": {"cpuThresholdPercent": 90, "includeSessionCount": True},
    "connectionServer": {
        "rdsLoadIndexThreshold": 20,
        "rdsConnectingSessionThreshold": 20,
        "minRdsServersInLbQueue": 4,
    },
}


def _report_cpu(cluster: Cluster, cpu: dict[str, int]) -> None:
    """What a host agent does: write status.metrics through the status subresource."""
    for host, value in cpu.items():
        cluster.patch_status(
            "SessionHost", host, {"metrics": {"cpuPercent": value, "sampledAt": now_rfc3339()}}
        )


def test_horizon_load_index_buckets_and_a_fairly_spread_logon_storm(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    hosts = ["h1", "h2", "h3", "h4", "h5"]
    cluster.setup_pool(POOL, "Horizon", 100, hosts=hosts, horizon=HORIZON)
    # cpu/90 → 10, 20, 30, 40; h5 reports nothing: no load index (-1), bucket 3.
    _report_cpu(cluster, {"h1": 9, "h2": 18, "h3": 27, "h4": 36})
    expected_load = {"h1": 10, "h2": 20, "h3": 30, "h4": 40, "h5": -1}
    # Only h1 is under the configured threshold of 20; the minimum of 4 hosts raises it to
    # 41, so h1..h4 are bucket 1.
    expected_bucket = {"h1": 1, "h2": 1, "h3": 1, "h4": 1, "h5": 3}

    def indexed() -> bool:
        objs = cluster.hosts()
        return all(
            status(objs[h]).get("loadIndex") == expected_load[h]
            and status(objs[h]).get("bucket") == expected_bucket[h]
            for h in hosts
        )

    cluster.wait(indexed, f"load indexes {expected_load} and buckets {expected_bucket}")
    # Metrics written by the agent stay as they were written.
    assert status(cluster.host("h2"))["metrics"]["cpuPercent"] == 18

    names = [f"storm{i:02d}" for i in range(12)]
    for name in names:
        cluster.create_request(name, POOL, f"user-{name}")
    placed = cluster.wait_assigned(names)
    per_host = count_by_host(placed)
    assert per_host == {"h1": 3, "h2": 3, "h3": 3, "h4": 3}, per_host

    def settled() -> bool:
        objs = cluster.hosts()
        return all(
            sessions_total(objs[h]) == (0 if h == "h5" else 3)
            and status(objs[h]).get("bucket") == expected_bucket[h]
            # 3 sessions of 100 give a session factor of 3: the cpu factor stays the largest.
            and status(objs[h]).get("loadIndex") == expected_load[h]
            for h in hosts
        )

    cluster.wait(settled, "3 sessions on each bucket-1 host, none on h5, indexes unchanged")
    for host in ("h1", "h2", "h3", "h4"):
        assert status(cluster.host(host))["sessions"]["connecting"] == 3


def test_horizon_logon_storm_threshold_turns_new_logons_away(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    hosts = ["h1", "h2"]
    horizon = {**HORIZON, "logonStorm": {"connectingSessionThreshold": 2}}
    cluster.setup_pool(POOL, "Horizon", 100, hosts=hosts, horizon=horizon)
    _report_cpu(cluster, {"h1": 9, "h2": 18})
    cluster.wait(
        lambda: all(status(h).get("loadIndex", -1) >= 0 for h in cluster.hosts().values()),
        "load indexes on both hosts",
    )
    names = [f"r{i}" for i in range(5)]
    for name in names:
        cluster.create_request(name, POOL, f"user-{name}")

    # Two connecting sessions per host at most: four are placed, the fifth waits.
    def four_placed_one_waiting() -> dict[str, Any] | None:
        objs = cluster.requests()
        placed = [o for o in objs.values() if host_of(o)]
        waiting = [o for o in objs.values() if status(o).get("reason") == "NoEligibleHost"]
        return objs if len(placed) == 4 and len(waiting) == 1 else None

    requests = cluster.wait(
        four_placed_one_waiting, "4 requests Assigned and 1 Pending NoEligibleHost"
    )
    assert count_by_host(requests) == {"h1": 2, "h2": 2}
    for host in hosts:
        cluster.wait_host(
            host,
            lambda h: cond_is(h, "Available", "False", "LogonStormThreshold"),
            "Available=False/LogonStormThreshold",
        )

    # An agent reports one session on h1 Active: h1 takes the waiting request.
    on_h1 = sorted(n for n, o in requests.items() if host_of(o) == "h1")
    cluster.patch_status("SessionRequest", on_h1[0], {"sessionState": "Active"})
    waiting = next(n for n, o in requests.items() if not host_of(o))
    cluster.wait_request(waiting, phase_="Assigned", host="h1")
