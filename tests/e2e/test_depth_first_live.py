"""Depth-first placement end to end: hosts fill one by one in query order; logoff frees a slot."""

from __future__ import annotations

from typing import Any

from support.cluster import Cluster
from support.conditions import cond_is, condition, host_of, status
from support.operator_process import OperatorProcess

POOL = "finance"


def _seven_requests_on_two_hosts(cluster: Cluster) -> None:
    # Created in name order, so query order (creationTimestamp, then name) is h1, h2.
    cluster.setup_pool(
        POOL, "DepthFirst", 3, hosts=["h1", "h2"], host_spec={"address": "rds.corp.example"}
    )
    for i in range(1, 8):
        cluster.create_request(f"r{i}", POOL, f"user{i}")


def test_depth_first_fills_hosts_in_query_order(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    _seven_requests_on_two_hosts(cluster)

    placed = cluster.wait_assigned([f"r{i}" for i in range(1, 7)])
    for i in range(1, 7):
        st = status(placed[f"r{i}"])
        assert st["host"] == ("h1" if i <= 3 else "h2"), (f"r{i}", st)
        assert st["hostAddress"] == "rds.corp.example"
        assert st["reason"] == "NewSession"
        assert st["sessionState"] == "Connecting"
        assert st.get("assignedAt"), st
        assert cond_is(placed[f"r{i}"], "Assigned", "True", "NewSession"), st

    last = cluster.wait_request("r7", phase_="Pending", reason="PoolSaturated")
    assert host_of(last) is None
    assert cond_is(last, "Assigned", "False", "PoolSaturated"), status(last)

    def pool_settled(pool: dict[str, Any]) -> bool:
        st = status(pool)
        return (
            st.get("hosts", {}).get("total") == 2
            and st.get("sessions", {}).get("total") == 6
            and st.get("capacity", {}).get("free") == 0
            and st.get("pendingRequests") == 1
            and cond_is(pool, "Saturated", "True")
        )

    pool = cluster.wait_pool(POOL, pool_settled, "2 hosts, 6 sessions, 0 free, 1 pending")
    assert cond_is(pool, "Ready", "True"), status(pool)
    assert status(pool)["capacity"]["total"] == 6
    assert status(pool)["hosts"]["full"] == 2, status(pool)
    assert status(pool)["hosts"]["available"] == 0, status(pool)
    assert status(pool)["hosts"]["draining"] == 0, status(pool)

    for name in ("h1", "h2"):
        host = cluster.wait_host(
            name,
            lambda h: (
                status(h).get("sessions", {}).get("total") == 3
                and cond_is(h, "Available", "False", "SessionLimitReached")
            ),
            "3 sessions, Available=False/SessionLimitReached",
        )
        assert status(host)["sessions"]["connecting"] == 3, status(host)


def test_deleting_a_request_ends_its_session_and_the_waiting_one_takes_the_slot(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    _seven_requests_on_two_hosts(cluster)
    cluster.wait_assigned([f"r{i}" for i in range(1, 7)])
    cluster.wait_request("r7", phase_="Pending", reason="PoolSaturated")

    cluster.delete("SessionRequest", "r5")  # a user on h2 logs off

    placed = cluster.wait_request("r7", phase_="Assigned", host="h2", timeout=10)
    assert status(placed)["reason"] == "NewSession"
    assert cond_is(placed, "Assigned", "True", "NewSession")
    cluster.wait_host_sessions({"h1": 3, "h2": 3})
    pool = cluster.wait_pool(
        POOL,
        lambda p: (
            status(p).get("pendingRequests") == 0
            and status(p).get("sessions", {}).get("total") == 6
        ),
        "no pending request, 6 sessions",
    )
    saturated = condition(pool, "Saturated")
    assert saturated is not None
    assert saturated["status"] == "True", saturated
    assert saturated["reason"] != "RequestsWaiting", saturated

    # Logging off on h1 frees a slot there; nothing is waiting, so it stays free.
    cluster.delete("SessionRequest", "r1")
    cluster.wait_host_sessions({"h1": 2, "h2": 3})
    cluster.wait_pool(
        POOL,
        lambda p: (
            status(p).get("capacity", {}).get("free") == 1 and cond_is(p, "Saturated", "False")
        ),
        "1 free slot, Saturated=False",
    )


def test_requests_created_with_their_pool_are_placed_in_creation_order(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    """No waiting for the operator between creating the pools, hosts and requests: requests
    it sees before the pool or its hosts wait, and are still placed in arrival order (the
    creation order, which one watch delivers). Three pools, to meet the races more often."""
    del operator_process
    pools = ["p1", "p2", "p3"]
    for pool in pools:
        cluster.create_pool(pool, "DepthFirst", 3)
        cluster.create_hosts([f"{pool}-h1", f"{pool}-h2"], pool)
        for i in range(1, 8):
            cluster.create_request(f"{pool}-r{i}", pool, f"user{i}")

    def six_per_pool() -> dict[str, Any] | None:
        objs = cluster.requests()
        placed = [n for n, o in objs.items() if host_of(o)]
        return objs if len(placed) == 6 * len(pools) else None

    objs = cluster.wait(six_per_pool, "6 requests placed in each pool")
    for pool in pools:
        got = {i: host_of(objs[f"{pool}-r{i}"]) for i in range(1, 8)}
        h1, h2 = f"{pool}-h1", f"{pool}-h2"
        assert got == {1: h1, 2: h1, 3: h1, 4: h2, 5: h2, 6: h2, 7: None}, (pool, got)
    for pool in pools:
        cluster.wait_request(f"{pool}-r7", phase_="Pending", reason="PoolSaturated")
