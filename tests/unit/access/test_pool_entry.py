"""What ``GET /v1/pools`` says of a pool for the portal: its display name, whether it opens
in the browser, and whether hosts are starting for it (from the pool's status)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.access.connect import pool_entry
from hostpool_operator.access.views import PoolView
from support.access_views import request_view

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
    assert entry["session"] == {"request": "r", "host": "h1", "state": "Assigned"}


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
