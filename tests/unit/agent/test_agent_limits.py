"""The agent's part of session limits and admin operations, pure: what a sample of a session
writes (state, stateChangedAt, logonAt, idleSince), the idle re-check before an Idle
disconnect or logoff, pending notices and disconnects, a forced logoff's message recorded
once, and the sessions command's idleSeconds."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.agent.sessions import (
    IDLE_REPORT_SECONDS,
    IDLE_REWRITE_SECONDS,
    IDLE_SLACK_SECONDS,
    LOGOFF_TITLE,
    NOTICE_TITLE,
    WARNING_TITLE,
    HostRequest,
    active_since,
    idle_fields,
    idle_logoff_withdrawn,
    logoff_message,
    notice_message,
    parse_session_lines,
    pending_disconnects,
    pending_notices,
    state_fields,
)
from hostpool_operator.api.timestamps import parse_time, rfc3339

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def request(**status: Any) -> HostRequest:
    obj = {
        "metadata": {"name": "alice", "uid": "u-1", "resourceVersion": "7"},
        "spec": {"user": "alice"},
        "status": {"phase": "Assigned", "host": "h1", **status},
    }
    made = HostRequest.of(obj)
    assert made is not None
    return made


def at(seconds: float) -> str:
    return rfc3339(T0 + timedelta(seconds=seconds))


# --------------------------------------------------------------------------- the request read


def test_a_request_carries_its_asks() -> None:
    r = request(
        sessionState="Active",
        logonAt=at(0),
        idleSince=at(60),
        disconnect={"requestedAt": at(120), "limit": "Idle"},
        notice={"message": "hi", "sentAt": at(100), "shownAt": at(101)},
        logoff={"message": "bye", "deadline": at(300), "limit": "MaxSession"},
    )
    assert r.logon_at == T0
    assert r.idle_since == T0 + timedelta(seconds=60)
    assert r.disconnect is not None
    assert r.disconnect.limit == "Idle"
    assert r.disconnect.requested == at(120)
    assert r.disconnect.done_at is None
    assert r.notice is not None
    assert r.notice.shown_at == T0 + timedelta(seconds=101)
    assert r.logoff_limit == "MaxSession"
    assert r.resource_version == "7"


@pytest.mark.parametrize(
    "status",
    [
        {"notice": {"message": "", "sentAt": "x"}},  # no message: nothing to show
        {"notice": "text"},
        {"disconnect": ["x"]},
    ],
)
def test_malformed_asks_are_no_asks(status: dict[str, Any]) -> None:
    r = request(**status)
    assert r.notice is None
    assert r.disconnect is None


# --------------------------------------------------------------------------- state and logon


@pytest.mark.parametrize(
    ("stored", "logon", "state", "expected"),
    [
        # first report: the state, when it changed, and the logon (once)
        ("Connecting", None, "Active", {"sessionState", "stateChangedAt", "logonAt"}),
        # unchanged and logged on: nothing
        ("Active", at(0), "Active", set()),
        # a change: the state and when; never the logon again
        ("Active", at(0), "Disconnected", {"sessionState", "stateChangedAt"}),
        # an older agent reported the state but no logon: the logon only
        ("Active", None, "Active", {"logonAt"}),
    ],
)
def test_state_fields(stored: str, logon: str | None, state: str, expected: set[str]) -> None:
    r = request(sessionState=stored, logonAt=logon)
    now = T0 + timedelta(minutes=5)
    fields = state_fields(r, state, now)
    assert set(fields) == expected
    for key in fields.keys() - {"sessionState"}:
        assert fields[key] == rfc3339(now)
    if "sessionState" in fields:
        assert fields["sessionState"] == state


# --------------------------------------------------------------------------- idle


NOW = T0 + timedelta(hours=1)


@pytest.mark.parametrize(
    ("stored", "idle", "expected"),
    [
        (None, None, {}),  # not measured: nothing
        (None, 10.0, {}),  # active, and so stored: nothing
        (None, 59.9, {}),
        (None, 60.0, {"idleSince": rfc3339(NOW - timedelta(seconds=60))}),
        (None, 600.0, {"idleSince": rfc3339(NOW - timedelta(seconds=600))}),
        # the same idle period, sampled again (jitter, whole seconds): nothing
        (NOW - timedelta(seconds=600), 603.0, {}),
        (NOW - timedelta(seconds=600), 596.0, {}),
        # a new idle period (input, then a minute without)
        (NOW - timedelta(seconds=600), 70.0, {"idleSince": rfc3339(NOW - timedelta(seconds=70))}),
        # active again
        (NOW - timedelta(seconds=600), 3.0, {"idleSince": None}),
    ],
)
def test_idle_fields(stored: datetime | None, idle: float | None, expected: dict[str, Any]) -> None:
    assert idle_fields(stored, idle, NOW) == expected


@given(
    idles=st.lists(st.floats(min_value=0, max_value=7200, allow_nan=False), max_size=40),
    step=st.floats(min_value=1, max_value=30),
)
def test_idle_since_follows_the_samples(idles: list[float], step: float) -> None:
    """Whatever the samples: after each write the stored value is null exactly when the
    sample is under a minute, else within IDLE_REWRITE_SECONDS of now - idle; a sample that
    writes nothing leaves that true; an unchanged idle period is written once."""
    stored: datetime | None = None
    now = T0
    for idle in idles:
        now += timedelta(seconds=step)
        fields = idle_fields(stored, idle, now)
        if "idleSince" in fields:
            value = fields["idleSince"]
            stored = parse_time(value) if value is not None else None
            assert fields != {}
            assert idle_fields(stored, idle, now) == {}
        if idle < IDLE_REPORT_SECONDS:
            assert stored is None
        else:
            assert stored is not None
            # whole seconds of the timestamp plus the rewrite tolerance
            drift = abs((stored - (now - timedelta(seconds=idle))).total_seconds())
            assert drift <= IDLE_REWRITE_SECONDS + 1


@pytest.mark.parametrize(
    ("idle_since", "decided", "idle", "active"),
    [
        (None, 0, 500.0, True),  # cleared by the agent: the user was active
        (-600, 0, None, False),  # unknown now: the decision stands
        (-600, 0, 600.0, False),  # still idle since then
        (-600, 0, 595.0, False),  # within the slack
        (-600, 0, 30.0, True),  # input 30 s ago
        (-600, 0, 585.0, True),  # input 15 s after the idle period began
        # the agent rewrote idleSince after input that came after the decision: the
        # decision's time still tells
        (-70, -100, 70.0, True),
    ],
)
def test_active_since(
    idle_since: float | None, decided: float, idle: float | None, active: bool
) -> None:
    since = None if idle_since is None else NOW + timedelta(seconds=idle_since)
    assert active_since(since, NOW + timedelta(seconds=decided), idle, NOW) is active


@given(
    idle_for=st.floats(min_value=60, max_value=7200),
    input_after=st.floats(min_value=0, max_value=7200),
    late=st.floats(min_value=0, max_value=600),
)
def test_input_after_the_idle_period_began_is_activity(
    idle_for: float, input_after: float, late: float
) -> None:
    """The operator decided at ``decided`` on an idle period that began ``idle_for`` before;
    the agent looks ``late`` seconds later. Input after the period began (by more than the
    slack) is activity; none is not."""
    decided = NOW
    since = decided - timedelta(seconds=idle_for)
    now = decided + timedelta(seconds=late)
    no_input = (now - since).total_seconds()
    assert not active_since(since, decided, no_input, now)
    last_input = since + timedelta(seconds=input_after)
    if last_input > now:
        return
    idle = (now - last_input).total_seconds()
    assert active_since(since, decided, idle, now) is (input_after > IDLE_SLACK_SECONDS)


def test_pending_disconnects() -> None:
    idle_user = request(idleSince=at(0), disconnect={"requestedAt": at(1800), "limit": "Idle"})
    active_user = request(idleSince=None, disconnect={"requestedAt": at(1800), "limit": "Idle"})
    by_admin = request(disconnect={"requestedAt": at(1800)})
    done = request(disconnect={"requestedAt": at(1800), "doneAt": at(1801)})
    now = T0 + timedelta(seconds=1805)
    steps = pending_disconnects([idle_user, active_user, by_admin, done, request()], {}, now)
    assert [(s.request, s.act) for s in steps] == [
        (idle_user, True),
        (active_user, False),
        (by_admin, True),
    ]
    assert "active" in steps[1].why
    # measured input 5 s ago: the Idle one is not done
    (step,) = pending_disconnects([idle_user], {"alice": 5.0}, now)
    assert not step.act
    assert "5s ago" in step.why


def test_an_idle_logoff_is_withdrawn_after_input() -> None:
    r = request(idleSince=at(0), logoff={"deadline": at(1800), "limit": "Idle", "message": ""})
    now = T0 + timedelta(seconds=1802)
    assert not idle_logoff_withdrawn(r, 1802.0, now)
    assert idle_logoff_withdrawn(r, 4.0, now)
    other = request(idleSince=at(0), logoff={"deadline": at(1800), "limit": "MaxSession"})
    assert not idle_logoff_withdrawn(other, 4.0, now)


# --------------------------------------------------------------------------- notices


def test_pending_notices_and_their_titles() -> None:
    new = request(notice={"message": "hello", "sentAt": at(0)})
    shown = request(notice={"message": "hello", "sentAt": at(0), "shownAt": at(1)})
    warning = request(notice={"message": "idle", "sentAt": at(0), "limit": "Idle"})
    assert pending_notices([new, shown, warning, request()]) == [new, warning]
    assert new.notice is not None
    assert warning.notice is not None
    assert notice_message(new.notice).title == NOTICE_TITLE
    assert notice_message(warning.notice).title == WARNING_TITLE


def test_a_logoffs_message_is_recorded_once() -> None:
    logoff = {"message": "Maintenance.", "deadline": at(600)}
    r = request(logoff=logoff)
    shown = logoff_message(r)
    assert shown.title == LOGOFF_TITLE
    assert shown.text == "Maintenance.\n\nYour session ends at 09:10 UTC."
    assert not r.logoff_shown
    # the agent marks logoff.shownAt once it told the user: an agent started again reads it
    assert request(logoff={**logoff, "shownAt": at(1)}).logoff_shown
    # a new logoff (the CLI, a plan) clears shownAt
    assert not request(logoff={**logoff, "shownAt": None}).logoff_shown
    assert logoff_message(request(logoff={"deadline": at(60)})).text == (
        "Your session ends at 09:01 UTC."
    )


# --------------------------------------------------------------------------- the sessions command


def test_idle_seconds_in_the_sessions_command() -> None:
    lines = [
        {"user": "alice", "state": "Active", "idleSeconds": 75},
        {"user": "alice", "state": "Disconnected", "idleSeconds": 12.5},  # the least counts
        {"user": "bob", "state": "Active"},  # no idle time: none
        {"user": "carol", "state": "Active", "idleSeconds": -1},
        {"user": "dave", "state": "Active", "idleSeconds": "5"},
        {"user": "erin", "state": "Active", "idleSeconds": True},
        {"user": "frank", "state": "Active", "idleSeconds": 0},
    ]
    text = (
        "\n".join(json.dumps(line) for line in lines)
        + '\n{"user": "gus", "state": "Active", "idleSeconds": NaN}'
    )
    parsed = parse_session_lines(text)
    assert parsed.states == {"alice": "Active", "bob": "Active", "frank": "Active"}
    assert parsed.idle == {"alice": 12.5, "frank": 0.0}
    assert [p.split(":")[0] for p in parsed.problems] == ["line 4", "line 5", "line 6", "line 8"]
    assert all("idleSeconds" in p for p in parsed.problems)
