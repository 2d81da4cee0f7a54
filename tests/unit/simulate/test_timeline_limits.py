"""Session limits in the timeline: recorded sessions left Disconnected (``disconnectedAt``),
the pool's ``sessionLimits`` replayed (disconnectedMinutes, maxSessionMinutes with either
action; idleMinutes only noted), what the result says of them, the refusals, the shipped
example, and the properties: no disconnectedAt, no change; with fixed hosts a disconnected
limit never costs a placement or a wait; the quiet-pass shortcut stays exact."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.simulate import replay as replay_module
from hostpool_operator.simulate.report import format_timeline_table
from hostpool_operator.simulate.timeline import run_timeline
from hostpool_operator.simulate.timeline_document import TimelineError
from support.paths import REPO_ROOT

SCENARIOS = REPO_ROOT / "docs" / "scenarios"

POOL: dict[str, Any] = {
    "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 2},
    "scaling": {"maxHosts": 10, "scaleDownDelaySeconds": 0},
}


def session(user: str, start: str, end: str, left: str | None = None) -> dict[str, str]:
    """A recorded session on 2026-12-07 from "HH:MM" to "HH:MM", Disconnected from
    ``left`` if given."""
    out = {"user": user, "start": f"2026-12-07T{start}:00", "end": f"2026-12-07T{end}:00"}
    if left is not None:
        out["disconnectedAt"] = f"2026-12-07T{left}:00"
    return out


def history(
    sessions: list[dict[str, str]], limits: dict[str, Any] | None = None, **changes: Any
) -> dict[str, Any]:
    """A run from 07:00 for eight hours, a step a minute, replaying ``sessions`` (with the
    pool's ``sessionLimits`` if given)."""
    document: dict[str, Any] = {
        "start": "2026-12-07T07:00:00",
        "hours": 8,
        "stepMinutes": 1,
        "pool": copy.deepcopy(POOL),
        "sessions": sessions,
    }
    document.update(changes)
    if limits is not None:
        document["pool"]["sessionLimits"] = limits
    return document


def at(result: dict[str, Any], clock: str) -> dict[str, Any]:
    step: dict[str, Any] = next(s for s in result["steps"] if s["at"] == f"2026-12-07T{clock}:00")
    return step


# Two a host, depth-first: alice and bob on the first host from 08:00, carol on a second
# one added for her at 08:05. Alice leaves hers Disconnected at 09:00; it stays to 12:00.
WORKDAY = [
    session("alice", "08:00", "12:00", left="09:00"),
    session("bob", "08:00", "09:30"),
    session("carol", "08:05", "09:30"),
]


# ------------------------------------------------------------------------------ replay


def test_a_disconnected_session_holds_its_slot_until_its_end() -> None:
    result = run_timeline(history(WORKDAY))
    assert at(result, "08:59")["disconnected"] == 0
    assert at(result, "09:00")["disconnected"] == 1
    assert at(result, "09:10")["sessions"] == 3
    # Bob and Carol leave at 09:30; Alice's Disconnected session keeps its host to 12:00.
    assert at(result, "10:00")["sessions"] == 1
    assert at(result, "10:00")["hosts"] == 1
    assert at(result, "12:01")["hosts"] == 0
    assert result["disconnectedSessionHours"] == 3.0
    assert result["sessionsEndedByLimits"] == {"Disconnected": 0, "MaxSession": 0}
    assert result["notes"] == []
    # Alice 08:00-12:00 on one host; Bob with her; Carol on a second 08:05-09:30.
    assert result["hostHours"] == pytest.approx(4 + 85 / 60, abs=1e-3)


@pytest.mark.parametrize(
    ("minutes", "ended", "host_hours", "disconnected_hours"),
    [
        # Logged off at 09:30 (one hour after she left), her host goes with Bob's session.
        (30, 1, 1.5 + 85 / 60, 0.5),
        (0, 1, 1.5 + 85 / 60, 0.0),  # 0: at once (Bob keeps the host to 09:30)
        (180, 0, 4 + 85 / 60, 3.0),  # longer than she stayed: her own end comes first
        (181, 0, 4 + 85 / 60, 3.0),
    ],
)
def test_disconnected_minutes_logs_off_that_long_after_the_session_was_left(
    minutes: int, ended: int, host_hours: float, disconnected_hours: float
) -> None:
    result = run_timeline(history(WORKDAY, {"disconnectedMinutes": minutes}))
    assert result["sessionsEndedByLimits"] == {"Disconnected": ended, "MaxSession": 0}
    assert result["sessionsDisconnectedByLimits"] == {"MaxSession": 0}
    assert result["hostHours"] == pytest.approx(host_hours, abs=1e-3)
    assert result["disconnectedSessionHours"] == pytest.approx(disconnected_hours, abs=1e-3)
    assert result["placed"] == 3


def test_the_disconnected_limit_ends_the_session_at_the_minute() -> None:
    result = run_timeline(history(WORKDAY, {"disconnectedMinutes": 20}))
    assert at(result, "09:19")["sessions"] == 3
    assert at(result, "09:19")["disconnected"] == 1
    assert at(result, "09:20")["sessions"] == 2
    assert at(result, "09:20")["disconnected"] == 0


def test_max_session_logoff_ends_sessions_that_long_after_their_logon() -> None:
    result = run_timeline(history(WORKDAY, {"maxSessionMinutes": 60}))
    # Alice and Bob at 09:00, Carol at 09:05; nothing is left Disconnected after 09:00.
    assert at(result, "08:59")["sessions"] == 3
    assert at(result, "09:00")["sessions"] == 1
    assert at(result, "09:05")["sessions"] == 0
    assert result["sessionsEndedByLimits"] == {"Disconnected": 0, "MaxSession": 3}
    assert result["disconnectedSessionHours"] == 0.0
    assert result["hostHours"] == pytest.approx(2.0, abs=1e-3)


def test_max_session_counts_from_the_placement_of_a_session_that_waited() -> None:
    # No scaling, one host of two slots: carol waits for bob's slot (09:30) and is logged
    # off 60 minutes after she got it, not after she asked.
    pool = {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 2}}
    sessions = [
        session("alice", "08:00", "14:00"),
        session("bob", "08:00", "09:30"),
        session("carol", "08:05", "12:00"),
    ]
    result = run_timeline(history(sessions, {"maxSessionMinutes": 120}, pool=pool, hosts=1))
    assert at(result, "09:59")["sessions"] == 2  # alice, and carol since 09:30
    assert at(result, "10:00")["sessions"] == 1  # alice's 120 minutes are up
    assert at(result, "10:06")["sessions"] == 1  # carol's count from 09:30, not 08:05
    assert at(result, "11:29")["sessions"] == 1
    assert at(result, "11:30")["sessions"] == 0
    assert result["sessionsEndedByLimits"] == {"Disconnected": 0, "MaxSession": 2}


def test_max_session_disconnect_then_the_disconnected_limit() -> None:
    limits = {"maxSessionMinutes": 30, "maxSessionAction": "Disconnect", "disconnectedMinutes": 15}
    result = run_timeline(history(WORKDAY, limits))
    # Each is Disconnected 30 minutes after logon, logged off 15 minutes later.
    assert at(result, "08:30")["disconnected"] == 2
    assert at(result, "08:35")["disconnected"] == 3
    assert at(result, "08:45")["sessions"] == 1
    assert at(result, "08:50")["sessions"] == 0
    assert result["sessionsDisconnectedByLimits"] == {"MaxSession": 3}
    assert result["sessionsEndedByLimits"] == {"Disconnected": 3, "MaxSession": 0}
    assert result["disconnectedSessionHours"] == pytest.approx(0.75, abs=1e-3)
    assert any(n.startswith("maxSessionAction Disconnect:") for n in result["notes"])


def test_max_session_disconnect_leaves_an_already_disconnected_session_alone() -> None:
    # Alice left at 09:00; her 90 minutes are up at 09:30: nothing to disconnect, and her
    # disconnected limit still counts from 09:00.
    limits = {"maxSessionMinutes": 90, "maxSessionAction": "Disconnect", "disconnectedMinutes": 45}
    result = run_timeline(history(WORKDAY[:1], limits))
    assert result["sessionsDisconnectedByLimits"] == {"MaxSession": 0}
    assert at(result, "09:44")["sessions"] == 1
    assert at(result, "09:45")["sessions"] == 0
    assert result["sessionsEndedByLimits"] == {"Disconnected": 1, "MaxSession": 0}


def test_a_freed_slot_lets_a_waiting_logon_in_sooner() -> None:
    # One host of two slots, no scaling: dave waits for a slot. Without a limit alice's
    # Disconnected session holds hers until 12:00; with one he gets it at 09:10.
    pool = {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 2}}
    sessions = [
        session("alice", "08:00", "12:00", left="09:00"),
        session("bob", "08:00", "13:00"),
        session("dave", "08:30", "10:00"),
    ]
    without = run_timeline(history(sessions, pool=pool, hosts=1))
    limited = run_timeline(history(sessions, {"disconnectedMinutes": 10}, pool=pool, hosts=1))
    assert without["waitMinutes"]["max"] == 210.0  # 08:30 to 12:00
    assert limited["waitMinutes"]["max"] == 40.0  # 08:30 to 09:10
    assert at(limited, "09:15")["sessions"] == 2


def test_zero_active_sessions_lets_a_plan_delete_a_host_with_only_disconnected_sessions() -> None:
    def plan(stop: str) -> dict[str, Any]:
        phase = {"loadBalancerType": "DepthFirst"}
        return {
            "timeZone": "UTC",
            "schedules": [
                {
                    "name": "day",
                    "daysOfWeek": ["Monday"],
                    "rampUp": {
                        **phase,
                        "startTime": "07:00",
                        "minimumHostsPercent": 0,
                        "capacityThresholdPercent": 100,
                    },
                    "peak": {**phase, "startTime": "08:00"},
                    "rampDown": {
                        **phase,
                        "startTime": "09:00",
                        "minimumHostsPercent": 0,
                        "capacityThresholdPercent": 100,
                        "stopHostsWhen": stop,
                    },
                    "offPeak": {**phase, "startTime": "18:00"},
                }
            ],
        }

    # Two a host: alice and bob on one host, carol on a second, Disconnected from 08:30.
    # When bob leaves at 09:15 one host holds both sessions, so ramp-down drains one: of
    # two with a session each, the last (carol's).
    sessions = [
        session("alice", "08:00", "14:00"),
        session("bob", "08:01", "09:15"),
        session("carol", "08:02", "14:00", left="08:30"),
    ]
    polite = run_timeline(history(sessions, plan=plan("ZeroSessions")))
    active = run_timeline(history(sessions, plan=plan("ZeroActiveSessions")))
    # ZeroSessions: carol's Disconnected session keeps her drained host until 14:00.
    assert at(polite, "13:00")["hosts"] == 2
    assert at(polite, "13:00")["disconnected"] == 1
    # ZeroActiveSessions: her host goes on the next pass, and her session with it.
    assert at(active, "09:15")["hosts"] == 2
    assert at(active, "09:16")["hosts"] == 1
    assert at(active, "09:16")["sessions"] == 1
    assert at(active, "09:16")["disconnected"] == 0
    assert active["hostHours"] < polite["hostHours"]
    # That is the plan's doing, not a session limit's.
    assert active["sessionsEndedByLimits"] == {"Disconnected": 0, "MaxSession": 0}


def test_a_limit_can_cost_host_hours_where_later_sessions_land() -> None:
    # Depth-first fills the fullest host. Without the limit ann's Disconnected session
    # keeps host 1 full, so dan joins cid on host 2; host 1 empties at 10:00 and goes.
    # With it ann is logged off at 08:10, dan joins bob on host 1, and when bob leaves at
    # 09:00 each host keeps one session to 12:00. Sessions never move between hosts: a
    # limit frees slots, and what that saves depends on where the next logons land.
    sessions = [
        session("ann", "08:00", "10:00", left="08:10"),
        session("bob", "08:00", "09:00"),
        session("cid", "08:02", "12:00"),
        session("dan", "08:30", "12:00"),
    ]
    without = run_timeline(history(sessions, hours=6))
    limited = run_timeline(history(sessions, {"disconnectedMinutes": 0}, hours=6))
    assert at(without, "10:30")["hosts"] == 1
    assert at(limited, "10:30")["hosts"] == 2
    assert without["hostHours"] == pytest.approx(5.9667, abs=1e-3)
    assert limited["hostHours"] == pytest.approx(7.9667, abs=1e-3)


# ------------------------------------------------------------------------------ notes


def test_idle_minutes_is_not_replayed_and_the_result_says_so() -> None:
    plain = run_timeline(history(WORKDAY))
    idle = run_timeline(history(WORKDAY, {"idleMinutes": 30, "idleAction": "Logoff"}))
    assert idle["notes"] == [
        "idleMinutes: not replayed: neither a recorded history nor arrivals say when a user "
        "last gave input, so no session here is disconnected or logged off for being idle"
    ]
    assert {k: v for k, v in idle.items() if k != "notes"} == {
        k: v for k, v in plain.items() if k != "notes"
    }


def test_disconnected_minutes_without_disconnected_sessions_is_noted() -> None:
    recorded = run_timeline(history(WORKDAY[1:], {"disconnectedMinutes": 5}))
    assert recorded["notes"] == [
        "disconnectedMinutes: no session has disconnectedAt, so it changes nothing here"
    ]
    arrivals = {
        "start": "2026-12-07T07:00:00",
        "hours": 4,
        "pool": POOL | {"sessionLimits": {"disconnectedMinutes": 5}},
        "arrivals": [{"from": "07:00", "to": "08:00", "perHour": 6}],
        "sessionMinutes": 60,
    }
    assert run_timeline(arrivals)["notes"] == [
        "disconnectedMinutes: arrivals are never left Disconnected, so it changes nothing "
        "here; replay sessions with disconnectedAt to see its effect"
    ]


def test_arrivals_take_the_session_time_limit() -> None:
    document = {
        "start": "2026-12-07T07:00:00",
        "hours": 6,
        "stepMinutes": 1,
        "pool": POOL | {"sessionLimits": {"maxSessionMinutes": 90}},
        "arrivals": [{"from": "07:00", "to": "08:00", "perHour": 6}],
        "sessionMinutes": 240,
    }
    result = run_timeline(document)
    assert result["sessionsEndedByLimits"] == {"Disconnected": 0, "MaxSession": 6}
    # The first logon is at 07:05 (the middle of its tenth of the hour): off at 08:35.
    assert at(result, "08:34")["sessions"] == 6
    assert at(result, "08:35")["sessions"] == 5
    assert result["notes"] == []


# ------------------------------------------------------------------------------ refusals


def _one(**fields: str) -> dict[str, Any]:
    return history(
        [{"user": "a", "start": "2026-12-07T08:00:00", "end": "2026-12-07T09:00:00"} | fields]
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"disconnectedAt": "2026-12-07T07:59:00"}, "sessions.0.disconnectedAt: must be within"),
        ({"disconnectedAt": "2026-12-07T09:01:00"}, "sessions.0.disconnectedAt: must be within"),
        ({"disconnectedAt": "soon"}, "sessions.0.disconnectedAt: Input should be a valid datetime"),
        (
            {"disconnectedAt": "2026-12-07T08:30:00Z"},
            "sessions.0.disconnectedAt: must have an offset when",
        ),
        (
            {
                "start": "2026-12-07T08:00:00Z",
                "end": "2026-12-07T09:00:00Z",
                "disconnectedAt": "2026-12-07T08:30:00",
            },
            "sessions.0.disconnectedAt: must have an offset when",
        ),
        # A session that is wrong itself is reported as such, not through disconnectedAt.
        (
            {"end": "2026-12-07T07:00:00", "disconnectedAt": "2026-12-07T07:30:00"},
            "sessions.0: end must be after start",
        ),
        ({"start": "nope", "disconnectedAt": "2026-12-07T08:30:00"}, "sessions.0.start:"),
    ],
)
def test_a_bad_disconnected_at_is_refused_naming_the_field(
    fields: dict[str, str], message: str
) -> None:
    with pytest.raises(TimelineError) as refused:
        run_timeline(_one(**fields))
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize("left", ["2026-12-07T08:00:00", "2026-12-07T09:00:00"])
def test_disconnected_at_may_be_the_start_or_the_end(left: str) -> None:
    result = run_timeline(_one(disconnectedAt=left))
    assert result["placed"] == 1
    assert result["disconnectedSessionHours"] == (1.0 if left.endswith("08:00:00") else 0.0)


def test_disconnected_at_with_an_offset_is_an_instant_like_start_and_end() -> None:
    local = history(WORKDAY, {"disconnectedMinutes": 30})
    instants = copy.deepcopy(local)
    for recorded in instants["sessions"]:
        for key in ("start", "end", "disconnectedAt"):
            if key in recorded:
                recorded[key] += "+00:00"
    assert run_timeline(local) == run_timeline(instants)


def test_a_bad_session_limit_is_refused_naming_the_field() -> None:
    with pytest.raises(TimelineError, match=r"^pool\.sessionLimits\.disconnectedMinutes:"):
        run_timeline(history(WORKDAY, {"disconnectedMinutes": -1}))


# ------------------------------------------------------------------------------ the example


def _example(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((SCENARIOS / name).read_text())
    return document


def test_the_shipped_example_differs_only_by_the_limit_and_saves_host_hours() -> None:
    without = _example("disconnected-sessions.timeline.yaml")
    limited = _example("disconnected-limit.timeline.yaml")
    assert limited["pool"].pop("sessionLimits") == {"disconnectedMinutes": 60}
    assert limited == without
    before = run_timeline(_example("disconnected-sessions.timeline.yaml"))
    after = run_timeline(_example("disconnected-limit.timeline.yaml"))
    # The figures docs/sessions.md shows.
    assert before["hostHours"] == pytest.approx(116.3333, abs=1e-3)
    assert after["hostHours"] == pytest.approx(74.4167, abs=1e-3)
    assert before["placed"] == after["placed"] == 24
    assert after["sessionsEndedByLimits"] == {"Disconnected": 10, "MaxSession": 0}
    assert after["disconnectedSessionHours"] == 10.0


def test_the_table_shows_disconnected_sessions_and_what_the_limits_did() -> None:
    table = format_timeline_table(run_timeline(_example("disconnected-limit.timeline.yaml")))
    lines = table.splitlines()
    assert lines[0].split()[-1] == "DISC"
    assert lines[-2] == (
        "session-hours Disconnected 10; logged off by limits 10 (Disconnected 10, MaxSession 0)"
    )
    assert lines[-1].startswith("host-hours 74.4167; placed 24 sessions;")
    # A run without Disconnected sessions prints the table it always printed.
    plain = format_timeline_table(run_timeline(history(WORKDAY[1:])))
    assert "DISC" not in plain.splitlines()[0]
    assert plain.splitlines()[-2] == ""


def test_the_cli_prints_the_notes_and_the_limit_figures(tmp_path: Path) -> None:
    path = tmp_path / "day.yaml"
    path.write_text(
        yaml.safe_dump(history(WORKDAY, {"disconnectedMinutes": 30, "idleMinutes": 20}))
    )
    done = subprocess.run(
        [sys.executable, "-m", "hostpool_operator", "simulate", "--timeline", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "\nnote: idleMinutes: not replayed:" in done.stdout
    assert "logged off by limits 1 (Disconnected 1, MaxSession 0)" in done.stdout
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hostpool_operator",
            "simulate",
            "--timeline",
            str(path),
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    assert json.loads(done.stdout)["sessionsEndedByLimits"] == {"Disconnected": 1, "MaxSession": 0}
    path.write_text(yaml.safe_dump(_one(disconnectedAt="2026-12-07T10:00:00")))
    done = subprocess.run(
        [sys.executable, "-m", "hostpool_operator", "simulate", "--timeline", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 2
    assert "sessions.0.disconnectedAt: must be within the session" in done.stderr
    assert done.stdout == ""


# ------------------------------------------------------------------------------ properties


_ALGORITHMS = st.sampled_from(["DepthFirst", "BreadthFirst"])


def _clock(minute: int) -> str:
    return f"2026-12-07T{minute // 60:02d}:{minute % 60:02d}:00"


@st.composite
def recorded(draw: st.DrawFn, *, disconnect: bool) -> list[dict[str, str]]:
    """Up to 30 sessions between 00:00 and 23:59, some (if ``disconnect``) left
    Disconnected before their end."""
    out: list[dict[str, str]] = []
    for i in range(draw(st.integers(1, 30))):
        start = draw(st.integers(0, 10 * 60))
        end = min(start + draw(st.integers(1, 600)), 23 * 60 + 59)
        entry = {"user": f"u{i % 9}", "start": _clock(start), "end": _clock(end)}
        if disconnect and draw(st.booleans()):
            entry["disconnectedAt"] = _clock(draw(st.integers(start, end)))
        out.append(entry)
    return out


@st.composite
def runs(draw: st.DrawFn, *, disconnect: bool = True, fixed_hosts: bool = False) -> dict[str, Any]:
    """Small runs of a recorded history: pools with their own scaling, or a plan, or
    (``fixed_hosts``) neither, only the hosts at the start."""
    pool: dict[str, Any] = {
        "loadBalancer": {
            "type": draw(_ALGORITHMS),
            "maxSessionLimit": draw(st.sampled_from([1, 2, 5])),
        }
    }
    document: dict[str, Any] = {
        "seed": draw(st.integers(0, 3)),
        "start": "2026-12-07T00:00:00",
        "hours": draw(st.sampled_from([12, 24])),
        "stepMinutes": draw(st.sampled_from([1, 5])),
        "pool": pool,
        "hosts": draw(st.integers(1, 3)) if fixed_hosts else draw(st.integers(0, 2)),
        "sessions": draw(recorded(disconnect=disconnect)),
    }
    if fixed_hosts:
        return document
    pool["scaling"] = {
        "maxHosts": draw(st.integers(1, 10)),
        "minHosts": draw(st.integers(0, 1)),
        "bufferSessions": draw(st.sampled_from([0, 0, 2])),
        "scaleDownDelaySeconds": draw(st.sampled_from([0, 120, 900])),
    }
    document["hostStartMinutes"] = draw(st.sampled_from([0, 0, 5]))
    if draw(st.booleans()):
        hours = sorted(draw(st.lists(st.integers(0, 11), min_size=4, max_size=4, unique=True)))

        def phase(index: int, **more: Any) -> dict[str, Any]:
            return {
                "startTime": f"{hours[index]:02d}:00",
                "loadBalancerType": draw(_ALGORITHMS),
                **more,
            }

        document["plan"] = {
            "timeZone": "UTC",
            "schedules": [
                {
                    "name": "day",
                    "daysOfWeek": ["Monday"],
                    "rampUp": phase(
                        0,
                        minimumHostsPercent=draw(st.sampled_from([0, 20])),
                        capacityThresholdPercent=draw(st.sampled_from([50, 100])),
                    ),
                    "peak": phase(1),
                    "rampDown": phase(
                        2,
                        minimumHostsPercent=draw(st.sampled_from([0, 10])),
                        capacityThresholdPercent=draw(st.sampled_from([50, 90, 100])),
                        forceLogoffUsers=draw(st.booleans()),
                        waitTimeMinutes=draw(st.sampled_from([0, 15])),
                        stopHostsWhen=draw(st.sampled_from(["ZeroSessions", "ZeroActiveSessions"])),
                    ),
                    "offPeak": phase(3),
                }
            ],
        }
    return document


def _limited(document: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(document)
    out["pool"]["sessionLimits"] = limits
    return out


def _without_notes(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "notes"}


@settings(max_examples=40, deadline=None)
@given(runs(disconnect=False), st.integers(0, 600))
def test_without_disconnected_at_the_disconnected_limit_changes_nothing(
    document: dict[str, Any], minutes: int
) -> None:
    plain = run_timeline(copy.deepcopy(document))
    limited = run_timeline(_limited(document, {"disconnectedMinutes": minutes}))
    assert _without_notes(limited) == _without_notes(plain)
    assert plain["disconnectedSessionHours"] == 0.0


@settings(max_examples=40, deadline=None)
@given(runs(fixed_hosts=True), st.integers(0, 120))
def test_with_fixed_hosts_a_disconnected_limit_never_costs_a_host_hour_a_placement_or_a_wait(
    document: dict[str, Any], minutes: int
) -> None:
    # The hosts are the same in both runs; slots freed sooner can only place a waiting
    # logon sooner (first come, first served, every slot alike). With scaling or a plan a
    # limit can cost host-hours: test_a_limit_can_cost_host_hours_where_later_sessions_land.
    plain = run_timeline(copy.deepcopy(document))
    limited = run_timeline(_limited(document, {"disconnectedMinutes": minutes}))
    assert limited["hostHours"] <= plain["hostHours"]
    assert limited["placed"] >= plain["placed"]
    for row, wait in limited["waitMinutes"].items():
        assert wait <= plain["waitMinutes"][row], row


@settings(max_examples=40, deadline=None)
@given(runs(), st.integers(0, 120))
def test_the_disconnected_limit_bounds_every_disconnected_stretch(
    document: dict[str, Any], minutes: int
) -> None:
    result = run_timeline(_limited(document, {"disconnectedMinutes": minutes}))
    left = sum("disconnectedAt" in s for s in document["sessions"])
    assert result["sessionsEndedByLimits"]["Disconnected"] <= left
    assert result["disconnectedSessionHours"] <= left * minutes / 60 + 1e-3
    assert all(step["disconnected"] <= step["sessions"] for step in result["steps"])


@settings(max_examples=40, deadline=None)
@given(
    runs(),
    st.fixed_dictionaries(
        {},
        optional={
            "disconnectedMinutes": st.integers(0, 90),
            "maxSessionMinutes": st.integers(10, 300),
            "maxSessionAction": st.sampled_from(["Logoff", "Disconnect"]),
        },
    ),
)
def test_skipping_quiet_passes_changes_nothing_with_limits(
    document: dict[str, Any], limits: dict[str, Any]
) -> None:
    document = _limited(document, limits)
    fast = run_timeline(copy.deepcopy(document))
    try:
        replay_module._Run.skip_quiet_passes = False
        exact = run_timeline(copy.deepcopy(document))
    finally:
        replay_module._Run.skip_quiet_passes = True
    assert fast == exact
