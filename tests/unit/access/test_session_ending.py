"""Ending sessions, as the broker decides it: a failed request is replaced on the next
connect even when it carries a logoff; ending a session asks the host's agent only while the
agent's figures are fresh (as the operator's ``--metrics-stale-after`` judges them), and
deletes the request otherwise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.access import connect
from hostpool_operator.access.names import request_name
from hostpool_operator.access.views import HostView, RequestView
from support.access_views import host_view, pool_view, request_view

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
STALE_AFTER = 120.0
NAME = request_name("ns", "desk", "alice")
ALICE = connect.Caller("alice", frozenset())


def stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


#: A logoff due 5 s ago (status.logoff).
LOGOFF = {"message": "bye", "deadline": stamp(NOW - timedelta(seconds=5))}


def request(
    *,
    phase: str | None = None,
    host: str | None = None,
    logoff: bool = False,
    deleting: bool = False,
    name: str = NAME,
) -> RequestView:
    """alice's request, with a logoff due 5 s ago and deleted ``NOW`` when asked."""
    return request_view(
        name,
        phase=phase,
        host=host,
        logoff=LOGOFF if logoff else None,
        deleted_at=stamp(NOW) if deleting else None,
    )


def host(status: dict[str, Any] | None) -> HostView:
    return host_view(status=status)


def reported(seconds_ago: float) -> dict[str, object]:
    """A host whose agent last reported ``seconds_ago`` (its sampledAt)."""
    sampled = stamp(NOW - timedelta(seconds=seconds_ago))
    return {"agent": {"version": "1"}, "metrics": {"cpuPercent": 3, "sampledAt": sampled}}


# ---------------------------------------------------------------------------- the connect


@pytest.mark.parametrize(
    ("own", "expected"),
    [
        (request(phase="Failed"), "replace"),
        # The hole: a logoff left on a Failed request kept the user out for good.
        (request(phase="Failed", logoff=True), "replace"),
        (request(phase="Assigned", host="h1", logoff=True), "ending"),
        (request(phase="Failed", logoff=True, deleting=True), "ending"),
        (request(phase="Pending", deleting=True), "ending"),
        (request(deleting=True), "ending"),
        (request(phase="Assigned", host="h1"), "reuse"),
        (request(phase="Pending"), "reuse"),
    ],
    ids=[
        "failed",
        "failed-with-logoff",
        "assigned-with-logoff",
        "failed-being-deleted",
        "pending-being-deleted",
        "new-being-deleted",
        "assigned",
        "pending",
    ],
)
def test_a_connect_replaces_a_failed_request_whatever_logoff_it_carries(
    own: RequestView, expected: str
) -> None:
    decision = connect.decide("ns", "desk", pool_view(["alice"], free=None), ALICE, [own])
    wanted = {
        "replace": connect.Create(NAME, replaces=own),
        "ending": connect.Ending(own),
        "reuse": connect.Reuse(own),
    }[expected]
    assert decision == wanted


def test_a_failed_request_with_a_logoff_is_neither_live_nor_in_the_way() -> None:
    failed = request(phase="Failed", logoff=True)
    assert not failed.live
    assert failed.logoff
    assert not failed.deleting
    assert failed.ending  # what the answers read: the session there is over


# ---------------------------------------------------------------------------- the agent


@pytest.mark.parametrize(
    ("status", "alive"),
    [
        (None, False),
        ({}, False),
        ({"agent": {"version": "1"}}, False),  # reported once, no figures: cannot be judged
        (reported(10), True),
        (reported(STALE_AFTER), True),  # the operator's rule: stale only when older
        (reported(STALE_AFTER + 1), False),
        (reported(3600), False),
        (reported(-30), True),  # the agent's clock is ahead: not stale
        ({"agent": {}, "metrics": {"sampledAt": "yesterday"}}, False),
        ({"agent": {}, "metrics": "not an object"}, False),
        ({"metrics": {"sampledAt": stamp(NOW)}}, False),  # figures but no agent record
    ],
    ids=[
        "no-status",
        "empty-status",
        "agent-without-figures",
        "fresh",
        "at-the-limit",
        "just-stale",
        "an-hour-old",
        "agent-clock-ahead",
        "malformed-time",
        "malformed-metrics",
        "no-agent",
    ],
)
def test_an_agent_acts_only_while_its_figures_are_fresh(
    status: dict[str, Any] | None, alive: bool
) -> None:
    assert host(status).agent_alive(NOW, STALE_AFTER) is alive


@given(age=st.floats(min_value=-1e6, max_value=1e6), stale_after=st.floats(1.0, 1e5))
def test_agent_alive_is_the_operators_staleness_rule(age: float, stale_after: float) -> None:
    view = host(reported(age))
    # The age as the timestamp carries it (whole microseconds).
    carried = (NOW - (NOW - timedelta(seconds=age))).total_seconds()
    assert view.agent_alive(NOW, stale_after) is (carried <= stale_after)


# ---------------------------------------------------------------------------- ending


FRESH, STALE, NO_AGENT = host(reported(5)), host(reported(600)), host({})


@pytest.mark.parametrize(
    ("req", "on", "expected"),
    [
        (request(phase="Assigned", host="h1"), FRESH, "logoff"),
        # The hole: an agent that reported once counted for ever.
        (request(phase="Assigned", host="h1"), STALE, "delete"),
        (request(phase="Assigned", host="h1"), NO_AGENT, "delete"),
        (request(phase="Assigned", host="h1"), None, "delete"),  # host gone
        (request(phase="Pending"), None, "delete"),
        (request(), None, "delete"),
        # Already being logged off by a live agent: nothing more to ask.
        (request(phase="Assigned", host="h1", logoff=True), FRESH, None),
        # ... by an agent that went silent: nobody will, the broker deletes it.
        (request(phase="Assigned", host="h1", logoff=True), STALE, "delete"),
        (request(phase="Assigned", host="h1", logoff=True), None, "delete"),
        (request(phase="Failed", host="h1"), FRESH, "delete"),
        (request(phase="Failed", host="h1", logoff=True), STALE, "delete"),
        (request(phase="Assigned", host="h1", deleting=True), FRESH, None),
        (request(phase="Assigned", host="h1", deleting=True), STALE, None),
    ],
    ids=[
        "assigned-fresh-agent",
        "assigned-stale-agent",
        "assigned-no-agent",
        "assigned-host-gone",
        "pending",
        "new",
        "logoff-fresh-agent",
        "logoff-stale-agent",
        "logoff-host-gone",
        "failed",
        "failed-with-logoff",
        "deleting-fresh",
        "deleting-stale",
    ],
)
def test_ending_a_session_asks_the_agent_only_while_it_reports(
    req: RequestView, on: HostView | None, expected: str | None
) -> None:
    assert connect.end_by(req, on, NOW, STALE_AFTER) == expected
