"""Timeline additions: a recorded history replayed (``sessions``), hosts that take minutes to
start (``hostStartMinutes``), each logon's wait (``waitMinutes``, ``waitedOverMaxPercent``),
and the run's skipped quiet passes, which must change nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.simulate import replay as replay_module
from hostpool_operator.simulate.timeline import run_timeline
from hostpool_operator.simulate.timeline_document import TimelineError
from hostpool_operator.simulate.waits import nearest_rank, wait_table, waited_over_percent

POOL: dict[str, Any] = {
    "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 2},
    "scaling": {"maxHosts": 10, "scaleDownDelaySeconds": 0},
}


def history(recorded: list[tuple[str, str, str]], **changes: Any) -> dict[str, Any]:
    """A day from 07:00 replaying (user, "HH:MM" start, "HH:MM" end) on 2026-12-07."""
    document: dict[str, Any] = {
        "start": "2026-12-07T07:00:00",
        "hours": 4,
        "stepMinutes": 1,
        "pool": copy.deepcopy(POOL),
        "sessions": [
            {"user": user, "start": f"2026-12-07T{begin}:00", "end": f"2026-12-07T{end}:00"}
            for user, begin, end in recorded
        ],
    }
    document.update(changes)
    return document


def at(result: dict[str, Any], clock: str) -> dict[str, Any]:
    step: dict[str, Any] = next(s for s in result["steps"] if s["at"] == f"2026-12-07T{clock}:00")
    return step


# ------------------------------------------------------------------------------ sessions


def test_recorded_sessions_are_replayed_as_they_happened() -> None:
    result = run_timeline(
        history(
            [("alice", "08:00", "09:00"), ("bob", "08:10", "08:40"), ("carol", "08:20", "10:00")]
        )
    )
    assert result["placed"] == 3
    assert at(result, "08:05")["sessions"] == 1
    assert at(result, "08:25")["sessions"] == 3
    assert at(result, "08:45")["sessions"] == 2  # bob left at 08:40
    assert at(result, "09:05")["sessions"] == 1  # alice at 09:00
    assert at(result, "10:05")["sessions"] == 0
    # Two a host: one host, then a second for carol; nobody waited (hosts start at once
    # and the pass at the end of carol's minute added hers).
    assert at(result, "08:25")["hosts"] == 2
    assert result["waitMinutes"]["max"] <= 1


def test_sessions_in_an_offset_are_instants_and_the_order_of_the_list_does_not_matter() -> None:
    local = history([("bob", "08:10", "08:40"), ("alice", "08:00", "09:00")])
    instants = copy.deepcopy(local)
    for session in instants["sessions"]:
        session["start"] += "+00:00"
        session["end"] += "+00:00"
    assert run_timeline(local) == run_timeline(instants)


def test_sessions_outside_the_run_are_left_out() -> None:
    result = run_timeline(history([("alice", "06:00", "09:00"), ("bob", "12:00", "13:00")]))
    assert result["placed"] == 0


def test_a_session_that_waits_lasts_as_long_as_it_did() -> None:
    # No scaling: one host of two slots; carol waits for bob's slot (08:40) and then stays
    # the 100 minutes she stayed in the history.
    pool = {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 2}}
    result = run_timeline(
        history(
            [("alice", "08:00", "10:50"), ("bob", "08:10", "08:40"), ("carol", "08:20", "10:00")],
            pool=pool,
            hosts=1,
            maxWaitMinutes=5,
        )
    )
    assert at(result, "08:30")["pending"] == 1
    assert at(result, "08:45")["sessions"] == 2
    assert at(result, "10:15")["sessions"] == 2  # carol until 10:20, not 10:00
    assert at(result, "10:25")["sessions"] == 1
    assert result["waitMinutes"]["max"] == 20.0
    assert result["waitedOverMaxPercent"] == pytest.approx(100 / 3, abs=1e-3)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"arrivals": [{"from": "07:00", "to": "08:00", "perHour": 1}]}, "not both"),
        ({"sessionMinutes": 30}, "not both"),
        (
            {
                "sessions": [
                    {"user": "a", "start": "2026-12-07T08:00:00", "end": "2026-12-07T07:00:00"}
                ]
            },
            "sessions.0: end must be after start",
        ),
        ({"sessions": [{"user": "a", "start": "2026-12-07T08:00:00"}]}, "sessions.0.end"),
        (
            {
                "sessions": [
                    {"user": "", "start": "2026-12-07T08:00:00", "end": "2026-12-07T09:00:00"}
                ]
            },
            "sessions.0.user",
        ),
        (
            {
                "sessions": [
                    {"user": "a", "start": "2026-12-07T08:00:00", "end": "2026-12-07T09:00:00Z"}
                ]
            },
            "both have an offset",
        ),
        (
            {"sessions": [{"user": "a", "start": "x", "end": "2026-12-07T09:00:00"}]},
            "sessions.0.start",
        ),
        ({"hostStartMinutes": -1}, "hostStartMinutes"),
        ({"maxWaitMinutes": -1}, "maxWaitMinutes"),
    ],
)
def test_bad_histories_are_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(TimelineError, match=field.replace(".", r"\.")):
        run_timeline(history([("alice", "08:00", "09:00")], **changes))


def test_without_sessions_session_minutes_is_required() -> None:
    document = history([])
    del document["sessions"]
    with pytest.raises(TimelineError, match=r"^sessionMinutes: Field required"):
        run_timeline(document)


# ------------------------------------------------------------------------------ host start


def test_an_added_host_takes_sessions_host_start_minutes_later() -> None:
    result = run_timeline(history([("alice", "08:00", "09:00")], hostStartMinutes=10))
    # alice arrives at 08:00 and finds no host; the pass at 08:00 adds one; it takes
    # sessions at 08:10, and she is placed then.
    assert at(result, "08:00")["hosts"] == 1
    assert at(result, "08:05")["sessions"] == 0
    assert at(result, "08:05")["pending"] == 1
    assert at(result, "08:10")["sessions"] == 1
    assert result["waitMinutes"]["max"] == 10.0
    # A starting host costs: it is counted from 08:00.
    assert result["hostHours"] == pytest.approx(70 / 60, abs=0.02)


def test_a_starting_host_counts_so_the_same_demand_never_adds_twice() -> None:
    sessions = [(f"u{i}", "08:00", "09:00") for i in range(2)]
    result = run_timeline(history(sessions, hostStartMinutes=15))
    assert {s["hosts"] for s in result["steps"] if "08:00" <= s["at"][11:16] <= "08:15"} == {1}


def test_a_plan_s_minimum_is_ready_host_start_minutes_after_ramp_up_begins() -> None:
    plan = {
        "timeZone": "UTC",
        "schedules": [
            {
                "name": "all",
                "daysOfWeek": ["Monday"],
                "rampUp": {
                    "startTime": "07:30",
                    "loadBalancerType": "DepthFirst",
                    "minimumHostsPercent": 20,
                    "capacityThresholdPercent": 100,
                },
                "peak": {"startTime": "09:00", "loadBalancerType": "DepthFirst"},
                "rampDown": {
                    "startTime": "10:00",
                    "loadBalancerType": "DepthFirst",
                    "minimumHostsPercent": 0,
                    "capacityThresholdPercent": 100,
                },
                "offPeak": {"startTime": "10:30", "loadBalancerType": "DepthFirst"},
            }
        ],
    }
    sessions = [("alice", "07:35", "08:30"), ("bob", "07:45", "08:30")]
    result = run_timeline(history(sessions, plan=plan, hostStartMinutes=10, maxWaitMinutes=5))
    # Two hosts (20 % of 10) asked for at 07:30, ready at 07:40: alice waits 5 minutes,
    # bob none.
    assert at(result, "07:31")["hosts"] == 2
    assert at(result, "07:39")["usedCapacityPercent"] == 0
    assert result["waitMinutes"]["max"] == 5.0
    assert result["waitedOverMaxPercent"] == 0.0


# ------------------------------------------------------------------------------ waits


def test_wait_table_is_nearest_rank_in_minutes() -> None:
    waits = [0.0] * 98 + [120.0, 600.0]
    assert wait_table(waits) == {"p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 2.0, "max": 10.0}
    assert wait_table([]) == {"p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    assert nearest_rank([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert waited_over_percent(waits, 2) == 1.0  # 120 s is not over 2 minutes
    assert waited_over_percent(waits, 1.99) == 2.0
    assert waited_over_percent([], 5) == 0.0


def test_arrivals_report_waits_too() -> None:
    document = {
        "start": "2026-12-07T00:00:00",
        "hours": 24,
        "pool": {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 10}},
        "hosts": 1,
        "arrivals": [{"from": "07:00", "to": "08:00", "perHour": 20}],
        "sessionMinutes": 60,
        "maxWaitMinutes": 29,
    }
    result = run_timeline(document)
    # Ten fit (one every 3 minutes); the other ten wait for the first ten to leave, each
    # 30 minutes (they came 30 minutes after those they replace).
    assert result["waitMinutes"]["p50"] == 0.0
    assert result["waitMinutes"]["max"] == pytest.approx(30.0, abs=0.1)
    assert result["waitedOverMaxPercent"] == 50.0


# ------------------------------------------------------------------------------ quiet passes


_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_ALGORITHMS = st.sampled_from(["DepthFirst", "BreadthFirst"])


@st.composite
def timelines(draw: st.DrawFn) -> dict[str, Any]:
    """Small random runs: pools, plans, host start, arrivals or a history."""
    limit = draw(st.sampled_from([1, 2, 5]))
    pool = {
        "loadBalancer": {"type": draw(_ALGORITHMS), "maxSessionLimit": limit},
        "connectingTimeoutSeconds": draw(st.sampled_from([30, 600])),
        "scaling": {
            "maxHosts": draw(st.integers(1, 12)),
            "minHosts": draw(st.integers(0, 1)),
            "bufferSessions": draw(st.sampled_from([0, 0, 2])),
            "scaleDownDelaySeconds": draw(st.sampled_from([0, 120, 600])),
        },
    }
    document: dict[str, Any] = {
        "seed": draw(st.integers(0, 5)),
        "start": "2026-12-07T00:00:00",
        "hours": draw(st.sampled_from([6, 24])),
        "stepMinutes": draw(st.sampled_from([1, 5])),
        "pool": pool,
        "hosts": draw(st.integers(0, 2)),
        "hostStartMinutes": draw(st.sampled_from([0, 0, 3, 12])),
    }
    if draw(st.booleans()):
        starts = draw(st.lists(st.integers(0, 6 * 60), min_size=1, max_size=40))
        document["sessions"] = [
            {
                "user": f"u{i % 7}",
                "start": f"2026-12-07T{s // 60:02d}:{s % 60:02d}:00",
                "end": f"2026-12-07T{(s + d) // 60:02d}:{(s + d) % 60:02d}:00",
            }
            for i, (s, d) in enumerate(
                zip(
                    starts,
                    draw(st.lists(st.integers(1, 300), min_size=40, max_size=40)),
                    strict=False,
                )
            )
        ]
    else:
        hour = draw(st.integers(0, 4))
        document["arrivals"] = [
            {"from": f"0{hour}:00", "to": f"0{hour + 1}:30", "perHour": draw(st.integers(1, 30))}
        ]
        document["sessionMinutes"] = draw(st.sampled_from([10, 60, 200]))
    if draw(st.booleans()):
        hours = sorted(draw(st.lists(st.integers(0, 5), min_size=4, max_size=4, unique=True)))
        document["plan"] = {
            "timeZone": "UTC",
            "schedules": [
                {
                    "name": "s",
                    "daysOfWeek": draw(
                        st.lists(st.sampled_from(_DAYS), min_size=1, max_size=3, unique=True)
                    ),
                    "rampUp": {
                        "startTime": f"0{hours[0]}:00",
                        "loadBalancerType": draw(_ALGORITHMS),
                        "minimumHostsPercent": draw(st.sampled_from([0, 20, 50])),
                        "capacityThresholdPercent": draw(st.sampled_from([40, 80, 100])),
                    },
                    "peak": {"startTime": f"0{hours[1]}:10", "loadBalancerType": draw(_ALGORITHMS)},
                    "rampDown": {
                        "startTime": f"0{hours[2]}:20",
                        "loadBalancerType": draw(_ALGORITHMS),
                        "minimumHostsPercent": draw(st.sampled_from([0, 10])),
                        "capacityThresholdPercent": draw(st.sampled_from([50, 90, 100])),
                        "forceLogoffUsers": draw(st.booleans()),
                        "waitTimeMinutes": draw(st.sampled_from([0, 15])),
                    },
                    "offPeak": {
                        "startTime": f"0{hours[3]}:30",
                        "loadBalancerType": draw(_ALGORITHMS),
                    },
                }
            ],
        }
    return document


@settings(max_examples=60, deadline=None)
@given(timelines())
def test_skipping_quiet_passes_changes_nothing(document: dict[str, Any]) -> None:
    fast = run_timeline(copy.deepcopy(document))
    try:
        replay_module._Run.skip_quiet_passes = False
        exact = run_timeline(copy.deepcopy(document))
    finally:
        replay_module._Run.skip_quiet_passes = True
    assert fast == exact
