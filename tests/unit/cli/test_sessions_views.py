"""What ``kubectl hostpool`` prints, from objects and ``now``: ages exactly as kubectl prints
them (apimachinery's HumanDuration, case by case at each boundary), durations as its flags
take them, tables aligned as kubectl aligns them, the sessions of a namespace's requests
(filtered, ordered, the stable JSON), ``top``'s tables and a drain's progress lines."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.api.timestamps import rfc3339
from hostpool_operator.cli.session_views import (
    SessionFilter,
    drain_progress,
    host_table,
    human_duration,
    logoff_cell,
    parse_duration,
    pool_table,
    session_json,
    session_table,
    sessions,
    table,
    users_on,
)

NOW = datetime(2026, 12, 2, 14, 0, 0, tzinfo=UTC)
S, M, H, D = 1, 60, 3600, 86400


# (seconds, kubectl's text): each branch of HumanDuration and both sides of its boundaries
AGES = [
    (-3, "<invalid>"),
    (-2, "<invalid>"),
    (-1, "0s"),
    (0, "0s"),
    (59, "59s"),
    (119, "119s"),
    (120, "2m"),
    (5 * M + 30, "5m30s"),
    (9 * M + 59, "9m59s"),
    (10 * M, "10m"),
    (10 * M + 59, "10m"),
    (179 * M + 59, "179m"),
    (3 * H, "3h"),
    (2 * H + 3 * M, "123m"),
    (3 * H + 3 * M, "3h3m"),
    (7 * H + 59 * M, "7h59m"),
    (8 * H, "8h"),
    (47 * H + 59 * M, "47h"),
    (48 * H, "2d"),
    (3 * D + 4 * H, "3d4h"),
    (7 * D + 23 * H, "7d23h"),
    (8 * D, "8d"),
    (729 * D, "729d"),
    (730 * D, "2y"),
    (740 * D, "2y10d"),
    (8 * 365 * D, "8y"),
    (20 * 365 * D + 3 * D, "20y"),
]


@pytest.mark.parametrize(("seconds", "text"), AGES)
def test_ages_as_kubectl_prints_them(seconds: int, text: str) -> None:
    assert human_duration(timedelta(seconds=seconds)) == text


def shown_seconds(text: str) -> int:
    parts = re.fullmatch(r"(?:(\d+)y)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    assert parts is not None, text
    units = (365 * D, D, H, M, S)
    return sum(int(n) * u for n, u in zip(parts.groups(), units, strict=True) if n)


@given(st.integers(min_value=0, max_value=30 * 365 * D), st.integers(min_value=0, max_value=D))
def test_an_age_rounds_down_by_less_than_an_eighth_and_never_goes_back(
    seconds: int, later: int
) -> None:
    """Read back, an age is at most the time elapsed and less than an eighth (or a second)
    short of it; a later moment never shows a smaller age."""
    shown = shown_seconds(human_duration(timedelta(seconds=seconds)))
    assert shown <= seconds
    assert seconds - shown < max(1, seconds / 8)
    assert shown_seconds(human_duration(timedelta(seconds=seconds + later))) >= shown


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("2h", 7200), ("1h30m", 5400), ("0s", 0), ("1.5h", 5400)],
)
def test_durations_as_the_flags_take_them(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "10", "m", "10 m", "-5m", "10min", "1d", "1h30"])
def test_durations_without_a_unit_or_with_another_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a duration: give e\.g\. 90s, 10m, 2h or 1h30m"):
        parse_duration(text)


def test_a_table_is_aligned_like_kubectls() -> None:
    out = table(("USER", "POOL", "STATE"), [("alice@corp", "finance", "Active"), ("b", "hr", "x")])
    assert out.splitlines() == [
        "USER         POOL      STATE",
        "alice@corp   finance   Active",
        "b            hr        x",
    ]
    # a narrow column is still six wide; the last column is never padded
    assert table(("A", "B"), [("x", "y")]).splitlines() == ["A     B", "x     y"]


# --------------------------------------------------------------------------- sessions


def request(
    name: str,
    user: str,
    host: str | None,
    *,
    pool: str = "finance",
    namespace: str = "vdi",
    phase: str = "Assigned",
    **status: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"poolRef": {"name": pool}, "user": user},
        "status": {"phase": phase, **({"host": host} if host else {}), **status},
    }


def ago(seconds: int) -> str:
    return rfc3339(NOW - timedelta(seconds=seconds))


REQUESTS = [
    request(
        "bob",
        "bob@corp",
        "rds-02",
        sessionState="Disconnected",
        stateChangedAt=ago(5 * M),
        logonAt=ago(2 * H + 3 * M),
        assignedAt=ago(3 * H),
    ),
    request(
        "alice",
        "alice@corp",
        "rds-01",
        sessionState="Active",
        stateChangedAt=ago(42),
        logonAt=ago(3 * D + 4 * H),
        idleSince=ago(9 * M),
        notice={"message": "hi", "sentAt": ago(60), "shownAt": ago(30)},
        logoff={"message": "bye", "deadline": rfc3339(NOW + timedelta(minutes=10))},
    ),
    request("carol", "carol@corp", "rds-01", assignedAt=ago(20), sessionState="Connecting"),
    request("dave", "dave@corp", None, phase="Pending"),
    request("erin", "erin@corp", "rds-09", pool="hr", namespace="a-team", sessionState="Active"),
]


def test_sessions_are_the_assigned_requests_in_a_stable_order() -> None:
    found = sessions(REQUESTS)
    assert [(s.namespace, s.pool, s.host, s.user) for s in found] == [
        ("a-team", "hr", "rds-09", "erin@corp"),
        ("vdi", "finance", "rds-01", "alice@corp"),
        ("vdi", "finance", "rds-01", "carol@corp"),
        ("vdi", "finance", "rds-02", "bob@corp"),
    ]
    assert [s.user for s in sessions(REQUESTS, SessionFilter(host="rds-01"))] == [
        "alice@corp",
        "carol@corp",
    ]
    assert [s.user for s in sessions(REQUESTS, SessionFilter(pool="hr"))] == ["erin@corp"]
    assert sessions(REQUESTS, SessionFilter(pool="finance", user="nobody")) == []


def test_the_sessions_table_and_its_wide_and_all_namespaces_forms() -> None:
    found = sessions(REQUESTS, SessionFilter(pool="finance"))
    assert session_table(found, NOW).splitlines() == [
        "USER         POOL      HOST     STATE          SINCE   LOGON",
        "alice@corp   finance   rds-01   Active         42s     3d4h",
        "carol@corp   finance   rds-01   Connecting     20s     <none>",
        "bob@corp     finance   rds-02   Disconnected   5m      123m",
    ]
    wide = session_table(found, NOW, wide=True).splitlines()
    assert wide[0].split() == [
        "USER", "POOL", "HOST", "STATE", "SINCE", "LOGON",
        "IDLE", "NOTICE", "LOGOFF", "DISCONNECT", "REQUEST",
    ]  # fmt: skip
    assert "9m   " in wide[1]
    assert "shown 30s ago" in wide[1]
    assert "in 10m" in wide[1]
    assert wide[1].endswith("alice")
    every = session_table(sessions(REQUESTS), NOW, namespaces=True).splitlines()
    assert every[0].startswith("NAMESPACE   USER")
    assert every[1].startswith("a-team      erin@corp")


def test_the_json_has_the_contracts_keys() -> None:
    items = session_json(sessions(REQUESTS, SessionFilter(user="bob@corp")))["items"]
    assert items == [
        {
            "user": "bob@corp",
            "namespace": "vdi",
            "pool": "finance",
            "host": "rds-02",
            "state": "Disconnected",
            "stateChangedAt": ago(5 * M),
            "logonAt": ago(2 * H + 3 * M),
            "request": "bob",
            "idleSince": None,
            "notice": None,
            "logoff": None,
            "disconnect": None,
        }
    ]
    # no stateChangedAt yet (an older agent): the assignment is the last change known
    carol = session_json(sessions(REQUESTS, SessionFilter(user="carol@corp")))["items"][0]
    assert carol["stateChangedAt"] == ago(20)


def test_a_logoff_cell_says_when() -> None:
    soon = {"deadline": rfc3339(NOW + timedelta(minutes=3)), "limit": "Idle"}
    assert logoff_cell(soon, NOW) == "in 3m (Idle)"
    assert logoff_cell({"deadline": ago(90)}, NOW) == "due 90s ago"
    assert logoff_cell(None, NOW) == "<none>"


# --------------------------------------------------------------------------- top, drain


def test_top_shows_the_pools_counts_and_each_hosts_state() -> None:
    pool = {
        "metadata": {"name": "finance", "namespace": "vdi"},
        "status": {
            "hosts": {"total": 2, "available": 1, "draining": 1},
            "sessions": {"total": 3, "connecting": 1, "active": 1, "disconnected": 1},
            "capacity": {"total": 10, "free": 7},
            "pendingRequests": 0,
        },
    }
    bare = {"metadata": {"name": "new", "namespace": "vdi"}}
    lines = pool_table([pool, bare]).splitlines()
    assert lines[0].split() == [
        "POOL", "HOSTS", "AVAILABLE", "DRAINING", "SESSIONS", "CONNECTING",
        "ACTIVE", "DISCONNECTED", "FREE", "PENDING",
    ]  # fmt: skip
    assert lines[1].split() == ["finance", "2", "1", "1", "3", "1", "1", "1", "7", "0"]
    assert lines[2].split() == ["new", *["<none>"] * 9]
    hosts = [
        {
            "metadata": {"name": "rds-01", "namespace": "vdi"},
            "spec": {"poolRef": {"name": "finance"}},
            "status": {
                "sessions": {"total": 2, "active": 1, "disconnected": 0},
                "loadIndex": 20,
                "metrics": {"cpuPercent": 35, "memoryPercent": 40},
                "conditions": [{"type": "Available", "status": "True"}],
            },
        },
        {
            "metadata": {"name": "rds-02", "namespace": "vdi"},
            "spec": {"poolRef": {"name": "finance"}, "drainMode": True},
            "status": {"sessions": {"total": 1}},
        },
        {
            "metadata": {"name": "rds-03", "namespace": "vdi"},
            "spec": {"poolRef": {"name": "finance"}},
            "status": {
                "conditions": [
                    {"type": "Available", "status": "False", "reason": "SessionLimitReached"}
                ]
            },
        },
    ]
    rows = [line.split() for line in host_table(hosts).splitlines()]
    assert rows[0] == [
        "HOST", "POOL", "STATE", "SESSIONS", "ACTIVE", "DISCONNECTED", "LOAD", "CPU%", "MEMORY%",
    ]  # fmt: skip
    assert rows[1] == ["rds-01", "finance", "Available", "2", "1", "0", "20", "35", "40"]
    assert rows[2][:4] == ["rds-02", "finance", "Draining", "1"]
    assert rows[3][2] == "SessionLimitReached"


def test_a_drains_progress_names_who_left_and_who_came_back() -> None:
    assert users_on(REQUESTS, "rds-01") == {"alice@corp", "carol@corp"}
    assert drain_progress("rds-01", {"a", "b", "c"}, {"c"}) == [
        "a left rds-01 (2 sessions left)",
        "b left rds-01 (1 session left)",
    ]
    assert drain_progress("rds-01", {"a", "b"}, {"d"}) == [
        "a left rds-01 (2 sessions left)",
        "b left rds-01 (1 session left)",
        "d is on rds-01 again (reconnected)",
    ]
    assert drain_progress("rds-01", {"c"}, set()) == ["c left rds-01 (0 sessions left)"]
    assert drain_progress("rds-01", {"c"}, {"c", "d"}) == ["d is on rds-01 again (reconnected)"]
    assert drain_progress("rds-01", {"c"}, {"c"}) == []
