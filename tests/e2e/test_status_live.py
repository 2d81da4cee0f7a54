"""Status end to end: session states written by agents, connecting counts, and conditions that
follow the Kubernetes API conventions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from support.cluster import Cluster
from support.conditions import condition, parse_time, status
from support.kube import wait_for
from support.operator_process import OperatorProcess

POOL = "states"
TIMEOUT_SECONDS = 8


def _sessions(obj: dict[str, Any]) -> dict[str, int]:
    return dict(status(obj).get("sessions") or {})


def _counts(total: int, connecting: int, active: int, disconnected: int) -> dict[str, int]:
    return {
        "total": total,
        "connecting": connecting,
        "active": active,
        "disconnected": disconnected,
    }


def test_session_state_from_an_agent_is_kept_and_counted(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(
        POOL, "DepthFirst", 5, hosts=["h1"], connectingTimeoutSeconds=TIMEOUT_SECONDS
    )
    cluster.create_request("r1", POOL, "alice")
    cluster.create_request("r2", POOL, "bob")
    placed = cluster.wait_assigned(["r1", "r2"])
    for name in ("r1", "r2"):
        assert status(placed[name])["sessionState"] == "Connecting"

    # Just assigned, no agent report: both are connecting (for connectingTimeoutSeconds).
    two_connecting = _counts(2, 2, 0, 0)
    cluster.wait_pool(POOL, lambda p: _sessions(p) == two_connecting, f"{two_connecting}")

    # An agent reports alice Active: she is no longer connecting; bob still is.
    cluster.patch_status("SessionRequest", "r1", {"sessionState": "Active"})
    one_active = _counts(2, 1, 1, 0)
    cluster.wait_pool(POOL, lambda p: _sessions(p) == one_active, f"{one_active}")
    cluster.wait_host("h1", lambda h: _sessions(h) == one_active, f"{one_active}")

    # After connectingTimeoutSeconds bob counts as active although nobody reported him.
    settled = _counts(2, 0, 2, 0)
    cluster.wait_pool(
        POOL, lambda p: _sessions(p) == settled, f"{settled}", timeout=TIMEOUT_SECONDS + 10
    )
    bob = cluster.request("r2")
    assert status(bob)["sessionState"] == "Connecting"  # the operator does not rewrite it

    # Disconnected is counted as such; a reconnect request of alice adds no session and
    # leaves her first request's state alone.
    cluster.patch_status("SessionRequest", "r2", {"sessionState": "Disconnected"})
    cluster.create_request("r1-again", POOL, "alice")
    again = cluster.wait_request("r1-again", phase_="Assigned", reason="Reconnected", host="h1")
    assert status(again)["sessionState"] == "Connecting"
    disconnected = _counts(2, 0, 1, 1)
    cluster.wait_pool(POOL, lambda p: _sessions(p) == disconnected, f"{disconnected}")
    assert status(cluster.request("r1"))["sessionState"] == "Active"
    assert status(cluster.request("r2"))["sessionState"] == "Disconnected"


def test_a_shorter_connecting_timeout_applies_to_sessions_already_connecting(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    """A session is connecting while it is Connecting and was assigned less than
    connectingTimeoutSeconds ago: the pool's current setting, not the one at assignment."""
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 5, hosts=["h1"], connectingTimeoutSeconds=3600)
    cluster.create_request("r1", POOL, "alice")
    placed = cluster.wait_request("r1", phase_="Assigned")
    cluster.wait_pool(POOL, lambda p: _sessions(p) == _counts(1, 1, 0, 0), "1 connecting")
    assigned_at = parse_time(status(placed)["assignedAt"])
    moment = assigned_at + timedelta(seconds=3)
    wait_for(
        lambda: datetime.now(UTC) >= moment, 10, what=f"the clock to pass {moment}", interval=0.1
    )

    # Assigned more than 2 s ago: with a timeout of 2 s it is no longer connecting.
    cluster.patch("HostPool", POOL, {"spec": {"connectingTimeoutSeconds": 2}})
    cluster.wait_pool(POOL, lambda p: _sessions(p) == _counts(1, 0, 1, 0), "1 active, 0 connecting")
    cluster.wait_host("h1", lambda h: _sessions(h) == _counts(1, 0, 1, 0), "1 active")


def _ltt(obj: dict[str, Any], type_: str) -> str:
    cond = condition(obj, type_)
    assert cond is not None, (type_, status(obj))
    return str(cond["lastTransitionTime"])


def _wait_past(ltt: str) -> None:
    """Let the clock pass the second of ``ltt`` (condition times have whole seconds), so a
    rewritten time would differ. A precondition, not an assertion."""
    moment = parse_time(ltt) + timedelta(seconds=1.2)
    wait_for(
        lambda: datetime.now(UTC) >= moment, 10, what=f"the clock to pass {moment}", interval=0.1
    )


def test_conditions_follow_api_conventions(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    pool = cluster.setup_pool(POOL, "DepthFirst", 2, hosts=["h1"])
    ready = condition(pool, "Ready")
    assert ready is not None
    assert ready["status"] == "True", ready
    saturated = condition(pool, "Saturated")
    assert saturated is not None
    assert saturated["status"] == "False", saturated
    ready_ltt, saturated_ltt = ready["lastTransitionTime"], saturated["lastTransitionTime"]
    available_ltt = _ltt(cluster.host("h1"), "Available")
    _wait_past(max(ready_ltt, saturated_ltt, available_ltt))

    # An unrelated update (a session starts): statuses change, no condition flips.
    cluster.create_request("r1", POOL, "alice")
    cluster.wait_assigned(["r1"])
    pool = cluster.wait_pool(
        POOL, lambda p: _sessions(p).get("total") == 1, "1 session", timeout=10
    )
    assert _ltt(pool, "Ready") == ready_ltt
    assert _ltt(pool, "Saturated") == saturated_ltt
    assert _ltt(cluster.host("h1"), "Available") == available_ltt

    # The host fills up: Saturated and Available flip, so their times move; Ready's does not.
    cluster.create_request("r2", POOL, "bob")
    pool = cluster.wait_pool(
        POOL,
        lambda p: (condition(p, "Saturated") or {}).get("status") == "True",
        "Saturated=True",
    )
    assert _ltt(pool, "Saturated") > saturated_ltt
    assert _ltt(pool, "Ready") == ready_ltt
    host = cluster.wait_host(
        "h1", lambda h: (condition(h, "Available") or {}).get("status") == "False", "full"
    )
    assert _ltt(host, "Available") > available_ltt
    saturated_ltt = _ltt(pool, "Saturated")
    _wait_past(saturated_ltt)

    # A spec change: observedGeneration follows metadata.generation, in the status and in
    # every condition the operator writes.
    changed = cluster.set_limit(POOL, 3)
    generation = changed["metadata"]["generation"]
    assert generation > pool["metadata"]["generation"]
    pool = cluster.wait_pool(
        POOL,
        lambda p: (
            status(p).get("observedGeneration") == generation
            and (condition(p, "Saturated") or {}).get("status") == "False"
        ),
        f"observedGeneration {generation} and Saturated=False",
    )
    for cond in status(pool)["conditions"]:
        assert cond.get("observedGeneration") == generation, cond
    assert _ltt(pool, "Ready") == ready_ltt
    assert _ltt(pool, "Saturated") > saturated_ltt

    # Requests' conditions describe their own generation.
    request = cluster.request("r1")
    assigned = condition(request, "Assigned")
    assert assigned is not None
    assert assigned["status"] == "True", assigned
    assert assigned.get("observedGeneration") == request["metadata"]["generation"]
    assert assigned.get("lastTransitionTime")
