"""What the help desk reads: each connect's phases, the slowest against the pool's median,
and a failure's phase, reason in words and the Event behind it."""

from __future__ import annotations

from typing import Any

from hostpool_operator.api.request import ConnectPhase
from hostpool_operator.diagnostics import timeline
from hostpool_operator.diagnostics.timeline import Seen


def request(name: str, pool: str, *connects: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"poolRef": {"name": pool}, "user": "alice"},
        "status": {"connects": list(connects)},
    }


def connect(ref: str, when: str, **phases: float) -> dict[str, Any]:
    return {"ref": ref, "startedAt": when, "phases": phases, "outcome": "Succeeded"}


FAST = [
    connect(f"AAAAAAA{i}", f"2026-12-07T09:0{i}:00Z", queue=0.1, sessionStart=2.0)
    for i in range(2, 7)
]
SLOW = connect("BBBBBBBB", "2026-12-07T10:00:00Z", queue=0.1, hostStart=40.0, sessionStart=2.5)


def test_the_slowest_phase_is_the_one_furthest_over_its_pool_median() -> None:
    medians = timeline.medians([request("r1", "desk", *FAST), request("r2", "desk", SLOW)])
    assert medians["desk"][ConnectPhase.SESSION_START] == 2.0
    mark = timeline.slowest(SLOW, medians["desk"])
    assert mark == (ConnectPhase.HOST_START, 40.0, 0.0)
    lines = timeline.lines([Seen("desk", "r2", SLOW)], medians)
    assert lines[0].startswith("2026-12-07T10:00:00Z  connect BBBBBBBB  pool desk  request r2")
    assert any("hostStart" in line and "<- slowest" in line for line in lines), lines


def test_a_failure_says_its_phase_its_reason_in_words_and_its_event() -> None:
    failed = {
        "ref": "CCCCCCCC", "startedAt": "2026-12-07T11:00:00Z", "outcome": "Failed",
        "failedPhase": "authentication", "reason": "UidMismatch", "phases": {"queue": 0.2},
    }  # fmt: skip
    events = [
        {"type": "Normal", "reason": "Assigned", "lastTimestamp": "2026-12-07T11:00:01Z"},
        {
            "type": "Warning",
            "reason": "UidMismatch",
            "message": "uid 70001 is not alice's",
            "lastTimestamp": "2026-12-07T11:00:02Z",
        },
        {
            "type": "Warning",
            "reason": "UidMismatch",
            "message": "old",
            "lastTimestamp": "2026-12-07T08:00:00Z",
        },
    ]
    event = timeline.explaining(events, failed)
    assert event == "UidMismatch: uid 70001 is not alice's"
    lines = timeline.lines([Seen("desk", "r3", failed, event)], {})
    assert (
        "    failed in authentication: UidMismatch: the person's account on the host has "
        "another user id" in lines
    )
    assert "    event: UidMismatch: uid 70001 is not alice's" in lines
    (data,) = timeline.as_json([Seen("desk", "r3", failed, event)], {})
    assert data["explanation"].startswith("the person's account")
    assert data["event"] == event


def test_an_unknown_reason_is_said_as_it_is() -> None:
    assert timeline.words("SomethingNew") == "SomethingNew"
    assert timeline.words(None) == "no reason was recorded"
