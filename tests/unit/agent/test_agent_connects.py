"""The agent's share of a connect: once the session runs, its authentication (the
verifier's logon) and its session's start, and the connect Succeeded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hostpool_operator.agent.logon_refusals import LOGONS_FILE, latest_logons
from hostpool_operator.agent.sessions import HostRequest, connect_fields, refused_fields
from hostpool_operator.agent.signon import record_logon

ASSIGNED = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def request(state: str = "Connecting", **connect: Any) -> HostRequest:
    begun = {"ref": "ABCDEFGH", "startedAt": "2026-12-07T08:59:59Z", "phases": {"queue": 0.5}}
    obj = {
        "metadata": {"name": "r1", "uid": "u1"},
        "spec": {"user": "alice"},
        "status": {
            "phase": "Assigned",
            "sessionState": state,
            "assignedAt": "2026-12-07T09:00:00Z",
            "connects": [{**begun, **connect}],
        },
    }
    found = HostRequest.of(obj)
    assert found is not None
    return found


def test_the_session_running_ends_the_connect_with_its_logon_and_start() -> None:
    logon = ((ASSIGNED + timedelta(seconds=2)).timestamp(), 0.4)
    now = ASSIGNED + timedelta(seconds=5)
    (connect,) = connect_fields(request(), "Active", now, logon)["connects"]
    assert connect["phases"] == {"queue": 0.5, "authentication": 0.4, "sessionStart": 3.0}
    assert connect["outcome"] == "Succeeded"


def test_without_a_logon_of_its_own_the_session_start_counts_from_the_assignment() -> None:
    earlier = ((ASSIGNED - timedelta(hours=1)).timestamp(), 0.4)  # yesterday's logon
    now = ASSIGNED + timedelta(seconds=4)
    (connect,) = connect_fields(request(), "Active", now, earlier)["connects"]
    assert connect["phases"] == {"queue": 0.5, "sessionStart": 4.0}


def test_nothing_is_written_unless_a_connect_is_under_way_and_the_session_starts() -> None:
    now = ASSIGNED + timedelta(seconds=4)
    # Already Active (a pass whose write did not land, or a takeover): it ends now.
    assert connect_fields(request("Active"), "Active", now, None)["connects"][0]["outcome"] == (
        "Succeeded"
    )
    assert connect_fields(request(), "Disconnected", now, None) == {}
    assert connect_fields(request(outcome="Succeeded"), "Active", now, None) == {}


def test_the_verifier_keeps_each_users_last_logon(tmp_path: Path) -> None:
    record_logon(tmp_path, "alice", 0.25, 100.0)
    record_logon(tmp_path, "bob", 0.5, 101.0)
    record_logon(tmp_path, "alice", 0.75, 102.0)
    (tmp_path / LOGONS_FILE).open("a").write("not json\n")
    found = latest_logons((tmp_path / LOGONS_FILE).read_text())
    assert (found["alice"].at, found["alice"].seconds) == (102.0, 0.75)
    assert found["bob"].seconds == 0.5


def test_a_refused_logon_fails_the_connect_in_authentication() -> None:
    (connect,) = refused_fields(request(), "UidMismatch", "uid 70001 is not alice's")["connects"]
    assert (connect["outcome"], connect["failedPhase"], connect["reason"]) == (
        "Failed",
        "authentication",
        "UidMismatch",
    )
    assert refused_fields(request(outcome="Succeeded"), "Replayed", "again") == {}


def test_a_reconnect_counts_its_session_start_from_its_own_start() -> None:
    later = "2026-12-07T11:00:00Z"  # two hours after the session was placed
    now = ASSIGNED + timedelta(hours=2, seconds=3)
    (connect,) = connect_fields(request(startedAt=later, reconnect=True), "Active", now, None)[
        "connects"
    ]
    assert connect["phases"]["sessionStart"] == 3.0
