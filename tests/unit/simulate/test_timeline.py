"""Timeline simulation: run_timeline, its result shape, its rules, the CLI and the plot."""

from __future__ import annotations

import copy
import importlib.util
import itertools
import json
import math
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hostpool_operator import simulate
from hostpool_operator.simulate.report import format_timeline_table
from hostpool_operator.simulate.timeline import run_timeline
from hostpool_operator.simulate.timeline_document import TimelineError
from support.paths import REPO_ROOT

TIMELINES = sorted((REPO_ROOT / "docs" / "scenarios").glob("*.timeline.yaml"))
STEP_KEYS = {
    "at",
    "phase",
    "loadBalancerType",
    "hosts",
    "sessions",
    "pending",
    "usedCapacityPercent",
    "disconnected",
}
RESULT_KEYS = {
    "steps",
    "hostHours",
    "placed",
    "peakPending",
    "waitMinutes",
    "waitedOverMaxPercent",
    "sessionsEndedByLimits",
    "sessionsDisconnectedByLimits",
    "disconnectedSessionHours",
    "notes",
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hostpool_operator", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )


def day(**changes: Any) -> dict[str, Any]:
    """A plain day: depth-first, hosts added for demand, removed 10 minutes after emptying."""
    document: dict[str, Any] = {
        "seed": 1,
        "start": "2026-12-07T00:00:00",
        "hours": 24,
        "stepMinutes": 5,
        "pool": {
            "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 10},
            "scaling": {"maxHosts": 20, "scaleDownDelaySeconds": 600},
        },
        "hosts": 2,
        "arrivals": [{"from": "07:00", "to": "09:00", "perHour": 60}],
        "sessionMinutes": 240,
    }
    document.update(changes)
    return document


# ------------------------------------------------------------------------------ shape


def test_result_has_the_contract_shape() -> None:
    result = run_timeline(day())
    # The contract's four keys, the waits added with recorded histories, and what the
    # session limits did.
    assert set(result) == RESULT_KEYS
    assert set(result["waitMinutes"]) == {"p50", "p90", "p95", "p99", "max"}
    assert result["waitedOverMaxPercent"] is None  # no maxWaitMinutes given
    assert len(result["steps"]) == 24 * 60 // 5
    for step in result["steps"]:
        assert set(step) == STEP_KEYS
        assert step["phase"] is None
        assert step["loadBalancerType"] == "DepthFirst"
        assert isinstance(step["hosts"], int)
        assert isinstance(step["usedCapacityPercent"], int)
    assert isinstance(result["hostHours"], float)
    json.dumps(result)


def test_steps_are_the_state_at_the_end_of_each_step_in_local_time() -> None:
    steps = run_timeline(day(stepMinutes=15, hours=2))["steps"]
    assert [s["at"] for s in steps] == [
        f"2026-12-07T0{h}:{m:02d}:00" for h in range(3) for m in (0, 15, 30, 45)
    ][1:9]


def test_simulate_reexports_run_timeline() -> None:
    assert simulate.run_timeline is run_timeline
    assert simulate.TimelineError is TimelineError


def test_sixty_an_hour_for_two_hours_are_all_placed_and_each_lasts_its_minutes() -> None:
    result = run_timeline(day())
    assert result["placed"] == 120
    # A host is added when requests wait at a step's end, so at most a step's logons wait.
    assert result["peakPending"] == 5
    assert {s["pending"] for s in result["steps"]} == {0}
    by_at = {s["at"]: s for s in result["steps"]}
    assert by_at["2026-12-07T07:00:00"]["sessions"] == 0
    assert by_at["2026-12-07T08:00:00"]["sessions"] == 60
    assert by_at["2026-12-07T09:00:00"]["sessions"] == 120
    # 240 minutes later they leave at the rate they came.
    assert by_at["2026-12-07T12:00:00"]["sessions"] == 60
    assert by_at["2026-12-07T13:00:00"]["sessions"] == 0
    # Depth-first with a limit of 10: exactly as many hosts as needed.
    assert by_at["2026-12-07T09:00:00"]["hosts"] == 12
    assert by_at["2026-12-07T09:00:00"]["usedCapacityPercent"] == 100


def test_host_hours_are_the_sum_of_hosts_times_step_length() -> None:
    for step_minutes in (1, 5, 7, 60):
        result = run_timeline(day(stepMinutes=step_minutes))
        steps = result["steps"]
        assert len(steps) == math.ceil(24 * 60 / step_minutes)
        lengths = [step_minutes / 60] * (len(steps) - 1)
        lengths.append(24 - sum(lengths))  # the last step may be shorter
        expected = sum(s["hosts"] * h for s, h in zip(steps, lengths, strict=True))
        assert result["hostHours"] == pytest.approx(expected, abs=1e-3)


def test_the_hosts_at_the_start_stay_while_minhosts_says_so() -> None:
    pool = {
        "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 10},
        "scaling": {"minHosts": 2, "maxHosts": 20},
    }
    result = run_timeline(day(pool=pool, arrivals=[]))
    assert {s["hosts"] for s in result["steps"]} == {2}
    assert result["hostHours"] == pytest.approx(48.0)


def test_without_scaling_the_pool_keeps_its_hosts_and_requests_wait() -> None:
    pool = {"loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 10}}
    result = run_timeline(day(pool=pool, hosts=3))
    assert {s["hosts"] for s in result["steps"]} == {3}
    assert result["peakPending"] == 90
    # Those waiting get the slots as sessions end (11:00 onwards), first come first served.
    assert result["placed"] == 120
    assert result["peakPending"] == max(s["pending"] for s in result["steps"])


def test_buffer_sessions_keep_room_ahead_so_nobody_waits() -> None:
    pool = {
        "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 10},
        "scaling": {"maxHosts": 20, "bufferSessions": 5},
    }
    result = run_timeline(day(pool=pool))
    assert result["peakPending"] == 0
    assert result["placed"] == 120


def test_empty_hosts_go_after_the_scale_down_delay_in_simulated_time() -> None:
    pool = {
        "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 10},
        "scaling": {"maxHosts": 20, "scaleDownDelaySeconds": 3600},
    }
    steps = run_timeline(day(pool=pool, arrivals=[]))["steps"]
    hosts = [s["hosts"] for s in steps]
    assert hosts[: 60 // 5 - 1] == [2] * 11  # empty since 00:00, removed at 01:00
    assert hosts[11] == 0


def test_maxhosts_caps_growth_and_the_rest_wait() -> None:
    pool = {
        "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 10},
        "scaling": {"maxHosts": 5},
    }
    result = run_timeline(day(pool=pool))
    assert max(s["hosts"] for s in result["steps"]) == 5
    assert result["peakPending"] == 70


def test_arrivals_repeat_every_simulated_day() -> None:
    result = run_timeline(day(hours=48))
    steps = result["steps"]
    assert len(steps) == 48 * 12
    first, second = steps[:288], steps[288:]
    assert [s["sessions"] for s in first] == [s["sessions"] for s in second]
    assert [s["at"][11:] for s in first] == [s["at"][11:] for s in second]
    assert result["placed"] == 240


def test_a_window_across_midnight_and_one_ending_at_24() -> None:
    arrivals = [
        {"from": "22:00", "to": "02:00", "perHour": 6},
        {"from": "23:00", "to": "24:00", "perHour": 12},
    ]
    result = run_timeline(day(arrivals=arrivals, sessionMinutes=30))
    # 00:00-02:00 of the first day, and 22:00-24:00 (12 + 12), within the 24 hours.
    assert result["placed"] == 12 + 12 + 12


def test_a_session_longer_than_the_run_is_still_counted_at_the_end() -> None:
    result = run_timeline(day(hours=10, sessionMinutes=7 * 24 * 60))
    assert result["steps"][-1]["sessions"] == 120


def test_the_same_seed_gives_the_same_result_and_breadth_first_uses_it() -> None:
    pool = {
        "loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 10},
        "scaling": {"maxHosts": 20, "bufferSessions": 10},
    }
    document = day(pool=pool, seed=7, hosts=4)
    assert run_timeline(document) == run_timeline(copy.deepcopy(document))


def test_start_is_local_time_and_arrivals_follow_the_clock() -> None:
    result = run_timeline(day(start="2026-12-07T06:30:00", hours=3))
    steps = result["steps"]
    assert steps[0]["at"] == "2026-12-07T06:35:00"
    assert steps[-1]["at"] == "2026-12-07T09:30:00"
    assert result["placed"] == 120


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"hours": 0}, "hours"),
        ({"hours": 169}, "hours"),
        ({"stepMinutes": 0}, "stepMinutes"),
        ({"stepMinutes": 61}, "stepMinutes"),
        ({"start": "tomorrow"}, "start"),
        ({"start": "2026-12-07T00:00:00+01:00"}, "start: must be a local time"),
        ({"hosts": -1}, "hosts"),
        ({"sessionMinutes": 0}, "sessionMinutes"),
        ({"pool": {"loadBalancer": {"type": "DepthFirst"}}}, "pool.loadBalancer"),
        ({"arrivals": [{"from": "7:00", "to": "09:00", "perHour": 1}]}, "arrivals.0.from"),
        ({"arrivals": [{"from": "07:00", "to": "25:00", "perHour": 1}]}, "arrivals.0.to"),
        ({"arrivals": [{"from": 600, "to": "11:00", "perHour": 1}]}, "quote it in YAML"),
        ({"arrivals": [{"from": "07:00", "to": "07:00", "perHour": 1}]}, "arrivals.0"),
        ({"arrivals": [{"from": "07:00", "to": "08:00", "perHour": -1}]}, "perHour"),
        ({"arrivals": [{"from": "07:00", "to": "08:00"}]}, "arrivals.0.perHour"),
        ({"surprise": 1}, "surprise"),
        (
            {"hours": 168, "arrivals": [{"from": "00:00", "to": "24:00", "perHour": 100_000}]},
            "at most",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(TimelineError, match=field.replace(".", r"\.")):
        run_timeline(day(**changes))


@pytest.mark.parametrize("missing", ["start", "pool", "sessionMinutes"])
def test_required_fields(missing: str) -> None:
    document = day()
    del document[missing]
    with pytest.raises(TimelineError, match=f"^{missing}: Field required"):
        run_timeline(document)


def test_not_a_mapping() -> None:
    with pytest.raises(TimelineError, match=r"^timeline: must be a mapping"):
        run_timeline([1, 2])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ the CLI


def test_shipped_timelines_exist() -> None:
    assert len(TIMELINES) >= 2


@pytest.mark.parametrize("path", TIMELINES, ids=lambda p: p.name)
def test_shipped_timelines_run_as_json(path: Path) -> None:
    done = cli("simulate", "--timeline", str(path), "--output", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # The contract's four keys, the waits added with recorded histories, and what the
    # session limits did.
    assert set(result) == RESULT_KEYS
    assert set(result["waitMinutes"]) == {"p50", "p90", "p95", "p99", "max"}
    assert result["waitedOverMaxPercent"] is None  # no maxWaitMinutes given
    assert all(set(step) == STEP_KEYS for step in result["steps"])
    assert result["placed"] > 0


def test_cli_json_and_table(tmp_path: Path) -> None:
    path = tmp_path / "day.json"
    path.write_text(json.dumps(day()))
    done = cli("simulate", "--timeline", str(path), "--output", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == run_timeline(day())
    done = cli("simulate", "--timeline", str(path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["AT", "PHASE", "ALGORITHM", "HOSTS", "SESSIONS", "PENDING", "USED%"]
    assert any(line.startswith("2026-12-07T09:00:00") for line in lines)
    assert lines[-1].startswith("host-hours ")
    assert "placed 120 sessions" in lines[-1]
    assert len(lines) <= 24 + 4


def test_cli_bad_timeline_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("start: '2026-12-07T00:00:00'\nhours: 0\npool: {loadBalancer: {type: X}}\n")
    done = cli("simulate", "--timeline", str(path))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "hours" in done.stderr


def test_cli_wants_a_file_or_a_timeline_not_both(tmp_path: Path) -> None:
    assert cli("simulate").returncode == 2
    done = cli("simulate", "a.yaml", "--timeline", "b.yaml")
    assert done.returncode == 2
    assert "not both" in done.stderr


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_cli_plot_is_a_png(tmp_path: Path) -> None:
    path = tmp_path / "day.json"
    path.write_text(json.dumps(day()))
    out = tmp_path / "day.png"
    done = cli("simulate", "--timeline", str(path), "--plot", str(out), "--output", "json")
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_prints_one_line_an_hour_for_a_week() -> None:
    result = run_timeline(day(hours=168, stepMinutes=10))
    lines = format_timeline_table(result).splitlines()
    assert len(lines) == 1 + 168 + 2
    start = datetime(2026, 12, 7)
    assert lines[1].startswith((start + timedelta(hours=1)).isoformat())
    assert lines[168].startswith((start + timedelta(hours=168)).isoformat())


# ------------------------------------------------------------------------------ plans


def weekday_plan(**ramp_down: Any) -> dict[str, Any]:
    return {
        "timeZone": "Europe/Stockholm",
        "schedules": [
            {
                "name": "weekdays",
                "daysOfWeek": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"],
                "rampUp": {
                    "startTime": "06:30",
                    "loadBalancerType": "BreadthFirst",
                    "minimumHostsPercent": 20,
                    "capacityThresholdPercent": 60,
                },
                "peak": {"startTime": "09:00", "loadBalancerType": "BreadthFirst"},
                "rampDown": {
                    "startTime": "15:00",
                    "loadBalancerType": "DepthFirst",
                    "minimumHostsPercent": 10,
                    "capacityThresholdPercent": 90,
                    **ramp_down,
                },
                "offPeak": {"startTime": "19:00", "loadBalancerType": "DepthFirst"},
            }
        ],
    }


def planned(**changes: Any) -> dict[str, Any]:
    pool = {
        "loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 10},
        "scaling": {"maxHosts": 30},
    }
    document = day(pool=pool, plan=weekday_plan(), arrivals=ARRIVALS)
    document.update(changes)
    return document


ARRIVALS = [
    {"from": "07:00", "to": "09:00", "perHour": 80},
    {"from": "09:00", "to": "12:00", "perHour": 20},
    {"from": "12:00", "to": "17:00", "perHour": 10},
]
PHASES = {  # local time of a step's end -> the phase in force then
    "00:05": "OffPeak",  # Monday: Friday's off-peak, through the weekend
    "06:25": "OffPeak",
    "06:30": "RampUp",
    "08:55": "RampUp",
    "09:00": "Peak",
    "14:55": "Peak",
    "15:00": "RampDown",
    "18:55": "RampDown",
    "19:00": "OffPeak",
    "23:55": "OffPeak",
}


def test_the_phase_changes_at_its_local_start_and_the_algorithm_with_it() -> None:
    steps = {s["at"][11:16]: s for s in run_timeline(planned())["steps"]}
    for clock, phase in PHASES.items():
        assert steps[clock]["phase"] == phase, clock
        expected = "BreadthFirst" if phase in ("RampUp", "Peak") else "DepthFirst"
        assert steps[clock]["loadBalancerType"] == expected, clock


def test_the_minimum_is_kept_and_ramp_down_shrinks_but_never_below_it() -> None:
    result = run_timeline(planned())
    steps = result["steps"]
    ramp_up_minimum, ramp_down_minimum = 6, 3  # 20 % and 10 % of maxHosts 30
    growing = [s for s in steps if s["phase"] in ("RampUp", "Peak")]
    shrinking = [s for s in steps if s["phase"] in ("RampDown", "OffPeak")]
    assert all(s["hosts"] >= ramp_up_minimum for s in growing)
    assert all(s["hosts"] >= ramp_down_minimum for s in shrinking)
    # No host goes in ramp-up or peak.
    assert all(a["hosts"] <= b["hosts"] for a, b in itertools.pairwise(growing))
    # Ramp-down drains and removes: from the peak's hosts down to the minimum by midnight.
    peak_hosts = max(s["hosts"] for s in growing)
    assert peak_hosts > 10
    assert steps[-1]["hosts"] == ramp_down_minimum
    assert steps[-1]["phase"] == "OffPeak"
    # The capacity threshold adds hosts before the pool is full: nobody waits.
    assert result["peakPending"] == 0
    # After each step's passes, used capacity is back at the threshold or below, unless
    # maxHosts stops the growth.
    assert all(s["usedCapacityPercent"] <= 60 for s in growing if s["hosts"] < 30)
    assert any(s["hosts"] == 30 for s in growing)
    assert result["placed"] == 160 + 60 + 50


def test_a_week_carries_friday_off_peak_over_the_weekend() -> None:
    result = run_timeline(planned(hours=168, stepMinutes=15))
    steps = result["steps"]
    assert len(steps) == 168 * 4
    weekend = [s for s in steps if s["at"][:10] in ("2026-12-12", "2026-12-13")]
    assert len(weekend) == 2 * 96
    assert {s["phase"] for s in weekend} == {"OffPeak"}
    assert {s["loadBalancerType"] for s in weekend} == {"DepthFirst"}
    # Arrivals go on at the weekend (they repeat every day), the plan stays in off-peak:
    # ramp-down's threshold and minimum.
    assert all(s["hosts"] >= 3 for s in weekend)
    friday = [s for s in steps if s["at"].startswith("2026-12-11T") and s["phase"] == "RampUp"]
    assert friday
    expected = sum(s["hosts"] * 0.25 for s in steps)
    assert result["hostHours"] == pytest.approx(expected, abs=1e-3)


def test_forced_logoff_ends_the_sessions_of_drained_hosts_after_the_wait() -> None:
    long_day = {"sessionMinutes": 16 * 60}
    polite = run_timeline(planned(**long_day))
    forced = run_timeline(
        planned(plan=weekday_plan(forceLogoffUsers=True, waitTimeMinutes=30), **long_day)
    )
    at = {s["at"][11:16]: s for s in polite["steps"]}
    at_forced = {s["at"][11:16]: s for s in forced["steps"]}
    # Same day up to the ramp-down.
    assert at["14:55"] == at_forced["14:55"]
    # Polite: drained hosts wait for their users, who stay their 16 hours.
    assert at["15:35"]["sessions"] > at["14:55"]["sessions"]
    # Forced: the users of the hosts drained at 15:00 are logged off at 15:30.
    assert at_forced["15:25"]["sessions"] == at["15:25"]["sessions"]
    assert at_forced["15:35"]["sessions"] < at["15:35"]["sessions"]
    assert at_forced["15:35"]["hosts"] < at["15:35"]["hosts"]
    assert forced["hostHours"] < polite["hostHours"]


def test_start_is_local_time_of_the_plan_zone_across_a_dst_change() -> None:
    # Europe/Stockholm springs forward at 02:00 on Sunday 2026-03-29.
    result = run_timeline(planned(start="2026-03-29T00:00:00", stepMinutes=30, hours=4))
    ats = [s["at"][11:16] for s in result["steps"]]
    assert ats == ["00:30", "01:00", "01:30", "03:00", "03:30", "04:00", "04:30", "05:00"]
    assert result["hostHours"] == pytest.approx(sum(s["hosts"] for s in result["steps"]) / 2)


def test_plan_results_are_deterministic() -> None:
    assert run_timeline(planned()) == run_timeline(planned())


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"plan": {**weekday_plan(), "hostPoolRefs": [{"name": "a"}]}}, "plan.hostPoolRefs"),
        ({"plan": {**weekday_plan(), "timeZone": "Mars/Olympus"}}, "plan.timeZone"),
        ({"plan": {**weekday_plan(), "schedules": []}}, "plan.schedules"),
        (
            {"plan": weekday_plan(startTime="05:00")},
            "plan.schedules.0: rampDown.startTime must be after peak.startTime",
        ),
        ({"pool": {"loadBalancer": {"type": "BreadthFirst"}}}, "pool.scaling"),
        (
            {"pool": {"loadBalancer": {"type": "BreadthFirst"}, "scaling": {"maxHosts": 3}}},
            "pool.loadBalancer.maxSessionLimit",
        ),
    ],
)
def test_bad_plans_are_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(TimelineError, match=field.replace(".", r"\.")):
        run_timeline(planned(**changes))
