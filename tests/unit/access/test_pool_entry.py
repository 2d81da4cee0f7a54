"""What ``GET /v1/pools`` says of a pool for the portal: its display name, whether it opens
in the browser, and whether hosts are starting for it (from the pool's status)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.access.connect import pool_entry
from hostpool_operator.access.views import HostView, PoolView, RequestView
from support.access_views import host_view, request_view

Obj = dict[str, Any]

#: Every key the entry had before the portal: kept as they were (add, never rename).
EARLIER_KEYS = {"namespace", "name", "loadBalancerType", "available", "session"}


def view(spec: Obj | None = None, status: Obj | None = None) -> PoolView:
    return PoolView.from_api(
        {
            "metadata": {"namespace": "ns", "name": "desk"},
            "spec": {
                "loadBalancer": {"type": "BreadthFirst"},
                "entitlements": {"users": ["alice"]},
                **(spec or {}),
            },
            **({"status": status} if status is not None else {}),
        }
    )


def saturated(reason: str, status: str = "True") -> Obj:
    return {"type": "Saturated", "status": status, "reason": reason, "message": "m"}


def test_display_name_else_the_name() -> None:
    assert pool_entry(view(), [])["displayName"] == "desk"
    named = pool_entry(view({"displayName": "Finance desktops"}), [])
    assert (named["displayName"], named["name"]) == ("Finance desktops", "desk")


def test_web_follows_the_connection() -> None:
    assert pool_entry(view(), [])["web"] is False
    assert pool_entry(view({"connection": {}}), [])["web"] is False
    assert pool_entry(view({"connection": {"web": True}}), [])["web"] is True


def test_no_desktop_in_the_browser_where_the_broker_serves_no_client() -> None:
    # Issue 50, item 6: the page offered "Open in browser" and the click ended in a 404.
    web = view({"connection": {"web": True}})
    assert pool_entry(web, [], web_served=False)["web"] is False
    assert pool_entry(view(), [], web_served=True)["web"] is False


@pytest.mark.parametrize(
    ("status", "available", "starting"),
    [
        (None, False, False),  # no status yet
        ({"capacity": {"free": 2}}, True, False),
        ({"capacity": {"free": 0}}, False, False),  # full
        ({"capacity": {"free": 0}, "hosts": {"notReady": 1}}, False, True),
        # Slots free now: a connect does not wait, whatever else is starting.
        ({"capacity": {"free": 1}, "hosts": {"notReady": 2}}, True, False),
        ({"capacity": {"free": 0}, "conditions": [saturated("HostsStarting")]}, False, True),
        ({"capacity": {"free": 0}, "conditions": [saturated("RequestsWaiting")]}, False, False),
        (
            {"capacity": {"free": 0}, "conditions": [saturated("HostsStarting", "False")]},
            False,
            False,
        ),
        # Malformed parts are read as absent, never raised.
        ({"capacity": "x", "hosts": [], "conditions": "y"}, False, False),
        ({"capacity": {"free": 0}, "hosts": {"notReady": "2"}, "conditions": [3]}, False, False),
    ],
)
def test_available_and_hosts_starting(status: Obj | None, available: bool, starting: bool) -> None:
    entry = pool_entry(view(status=status), [])
    assert (entry["available"], entry["hostsStarting"]) == (available, starting)


def test_the_earlier_keys_stay() -> None:
    placed = request_view("r", phase="Assigned", host="h1", address="a")
    entry = pool_entry(view({"displayName": "D", "connection": {"web": True}}), [placed])
    assert set(entry) >= EARLIER_KEYS
    session = {"request": "r", "host": "h1", "state": "Assigned"}
    assert entry["session"] == {**session, "disconnectRequestedAt": None}


def test_a_disconnect_a_limit_asked_for_is_said() -> None:
    # Issue 50, item 4: the desktop page reconnects a dropped connection, never a session a
    # limit disconnected on purpose; it tells them apart by this.
    at = "2026-12-05T08:00:00Z"
    placed = RequestView.from_api(
        {
            "metadata": {"namespace": "ns", "name": "r", "uid": "u1"},
            "spec": {"poolRef": {"name": "desk"}, "user": "alice"},
            "status": {
                "phase": "Assigned",
                "host": "h1",
                "disconnect": {"requestedAt": at, "limit": "idle", "doneAt": None},
            },
        }
    )
    entry = pool_entry(view(), [placed])
    assert entry["session"]["disconnectRequestedAt"] == at


@given(
    st.one_of(st.none(), st.integers(-3, 5), st.text(max_size=3)),
    st.one_of(st.none(), st.integers(-3, 5), st.text(max_size=3)),
    st.lists(st.sampled_from(["HostsStarting", "RequestsWaiting", "NoFreeSessions"]), max_size=2),
)
def test_never_available_and_starting_at_once(
    free: Any, not_ready: Any, reasons: list[str]
) -> None:
    status = {
        "capacity": {"free": free},
        "hosts": {"notReady": not_ready},
        "conditions": [saturated(r) for r in reasons],
    }
    entry = pool_entry(view(status=status), [])
    assert not (entry["available"] and entry["hostsStarting"])
    assert entry["available"] is (isinstance(free, int) and free != 0)


# ---------------------------------------------------------------------------------------
# personal pools: the caller's own desktop


def personal(assignment: str = "Automatic") -> PoolView:
    return view({"type": "Personal", "personal": {"assignment": assignment}})


def host(power: str | None, user: str | None = "alice", pool: str = "desk") -> HostView:
    return host_view("desk-1", status={"power": power} if power else {}, pool=pool, user=user)


def test_a_pooled_pool_says_so_and_has_no_desktop() -> None:
    entry = pool_entry(view(), [])
    assert entry["type"] == "Pooled"
    assert "desktop" not in entry


@pytest.mark.parametrize(
    ("power", "available", "starting", "shown"),
    [
        ("Running", True, False, "Running"),
        ("Starting", False, True, "Starting"),
        ("Stopped", False, False, "Stopped"),
        # A host that is not workload-backed has no power: it runs.
        (None, True, False, "Running"),
    ],
)
def test_a_personal_pool_is_as_available_as_the_callers_desktop(
    power: str | None, available: bool, starting: bool, shown: str
) -> None:
    # Free slots elsewhere in the pool do not matter: only the caller's own host does.
    pool = view(
        {"type": "Personal", "personal": {"assignment": "Automatic"}},
        {"capacity": {"free": 5}, "hosts": {"notReady": 2}},
    )
    entry = pool_entry(pool, [], host(power))
    assert entry["type"] == "Personal"
    assert entry["desktop"] == {"host": "desk-1", "power": shown}
    assert (entry["available"], entry["hostsStarting"]) == (available, starting)


@pytest.mark.parametrize("assignment", ["Automatic", "Direct"])
def test_without_a_desktop_the_assignment_says_what_a_connect_does(assignment: str) -> None:
    entry = pool_entry(personal(assignment), [])
    assert (entry["desktop"], entry["assignment"]) == (None, assignment)
    assert (entry["available"], entry["hostsStarting"]) == (False, False)


def test_host_view_reads_user_pool_and_power_and_ignores_junk() -> None:
    seen = host("Stopped")
    assert (seen.pool, seen.assigned_user, seen.power) == ("desk", "alice", "Stopped")
    junk = HostView.from_api(
        {
            "metadata": {"name": "h"},
            "spec": {"poolRef": "x", "assignedUser": 3},
            "status": {"power": 1},
        }
    )
    assert (junk.pool, junk.assigned_user, junk.power) == ("", None, None)
