"""The plan recommender: the history's checks, the demand curve, the recommended plan's
properties (the bound kept, never dearer than the baselines), known optima, and the
``recommend-plan`` command line."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostpool_operator.api import HostPoolSpec
from hostpool_operator.api.plan import WEEKDAYS, PlanPhase, ScalingPlan, ScalingPlanSpec
from hostpool_operator.recommend.demand_curve import demand_curve, frame_of
from hostpool_operator.recommend.evaluation import Replays, hosts_before
from hostpool_operator.recommend.history import HistoryError, PastSession, parse_history
from hostpool_operator.recommend.recommender import (
    Options,
    Recommendation,
    RecommendError,
    evaluate_plan,
    recommend,
)
from hostpool_operator.recommend.search import PlanShape, ScheduleShape, later_ramp_downs
from hostpool_operator.scaling.plans import phase_in_force
from hostpool_operator.simulate.replay import replay
from support.paths import REPO_ROOT

MONDAY = datetime(2026, 11, 2, tzinfo=UTC)
POOL: dict[str, Any] = {
    "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 5},
    "scaling": {"maxHosts": 20, "scaleDownDelaySeconds": 600},
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hostpool_operator", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )


def office(
    days: int = 7,
    users: int = 40,
    *,
    weekend: bool = False,
    arrive: float = 8.0,
    leave: float = 16.75,
    spread: int = 15,
) -> list[PastSession]:
    """A flat office: every user logs on within ``spread`` minutes from ``arrive`` (hours)
    and off as long after ``leave``, on weekdays (and weekends when asked)."""
    out = []
    for d in range(days):
        day = MONDAY + timedelta(days=d)
        if not weekend and day.weekday() >= 5:
            continue
        for u in range(users):
            offset = timedelta(minutes=u * spread // users)
            out.append(
                PastSession(
                    f"user{u}",
                    day + timedelta(hours=arrive) + offset,
                    day + timedelta(hours=leave) + offset,
                )
            )
    out.sort(key=lambda s: s.start)
    return out


def lines(sessions: Sequence[PastSession]) -> str:
    return "".join(
        json.dumps({"user": s.user, "start": s.start.isoformat(), "end": s.end.isoformat()}) + "\n"
        for s in sessions
    )


def pool(**changes: Any) -> HostPoolSpec:
    document = {**POOL, **changes}
    return HostPoolSpec.model_validate(document)


def run(
    sessions: Sequence[PastSession], *, wait: float = 5, start: float = 0, **changes: Any
) -> Recommendation:
    return recommend("office", pool(**changes), sessions, Options(wait, start, "UTC"))


# ------------------------------------------------------------------------------ history


def _line(user: str, start: str, end: str, **extra: Any) -> str:
    return json.dumps({"user": user, "start": start, "end": end, **extra})


GOOD = [_line("alice", f"2026-11-0{d}T08:00:00Z", f"2026-11-0{d}T16:00:00Z") for d in range(2, 9)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ([GOOD[3], GOOD[1], "{not json", *GOOD[4:]], r"^line 3: not JSON"),
        (
            [*GOOD[:2], _line("bob", "2026-11-04T09:00:00Z", "2026-11-04T08:00:00Z"), *GOOD[3:]],
            r"^line 3: end 2026-11-04T08:00:00Z is before start",
        ),
        (
            [*GOOD[:1], _line("bob", "2026-11-03T09:00:00Z", "2026-11-03T10:00:00Z", host="h1")],
            r"^line 2: unknown field 'host'",
        ),
        ([], r"^the history is empty"),
        (["", "  "], r"^the history is empty"),
        (GOOD[:5], r"^the history covers 5 days \(2026-11-02 to 2026-11-06"),
        ([*GOOD[:2], "{not json"], r"^line 3: not JSON"),
        ([*GOOD[:2], "[1, 2]"], r"^line 3: must be a JSON object"),
        ([json.dumps({"user": "a", "start": "2026-11-02T08:00:00Z"})], r"^line 1: end is missing"),
        (
            [_line("a", "2026-11-02T08:00:00", "2026-11-02T09:00:00Z")],
            r"^line 1: start .* no offset",
        ),
        ([_line("a", "yesterday", "2026-11-02T09:00:00Z")], r"^line 1: start 'yesterday' is not"),
        ([_line("", "2026-11-02T08:00:00Z", "2026-11-02T09:00:00Z")], r"^line 1: user must be"),
        ([_line("a", "2026-11-02T08:00:00Z", "2026-11-02T08:00:00Z")], r"^line 1: end is start"),
    ],
    ids=[
        "unsorted-then-broken",
        "end-before-start",
        "unknown-field",
        "empty",
        "blank",
        "five-days",
        "not-json",
        "not-an-object",
        "missing-end",
        "naive-time",
        "bad-time",
        "empty-user",
        "zero-length",
    ],
)
def test_bad_histories_are_refused_naming_the_line(text: list[str], message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        parse_history(text, UTC)


def test_a_good_history_is_read_in_utc_and_blank_lines_are_skipped() -> None:
    sessions = parse_history(["", *GOOD, ""], UTC)
    assert len(sessions) == 7
    assert sessions[0].start == datetime(2026, 11, 2, 8, tzinfo=UTC)
    offset = parse_history(
        [_line("a", "2026-11-02T09:00:00+01:00", "2026-11-08T10:00:00+01:00")], UTC
    )
    assert offset[0].start == datetime(2026, 11, 2, 8, tzinfo=UTC)


def test_an_unsorted_history_is_read_in_start_order() -> None:
    # An export of a connection log is in the order sessions ended, or by user: as data it is
    # the same history, so it is sorted, not refused. A duplicate line is two sessions.
    shuffled = [GOOD[4], GOOD[0], GOOD[6], GOOD[2], GOOD[2], GOOD[1], GOOD[5], GOOD[3]]
    sessions = parse_history(shuffled, UTC)
    assert [s.start.day for s in sessions] == [2, 3, 4, 4, 5, 6, 7, 8]
    assert sessions == parse_history([*GOOD[:3], GOOD[2], *GOOD[3:]], UTC)


@given(st.permutations(range(12)))
@settings(max_examples=60, deadline=None)
def test_any_order_of_the_same_lines_gives_the_same_sessions(order: list[int]) -> None:
    # Twelve sessions of three users with equal starts and overlaps among them: the result
    # does not depend on the lines' order (ties are ordered by end, then user).
    base = [
        _line(
            f"u{i % 3}",
            f"2026-11-0{2 + i // 2}T08:00:00Z",
            f"2026-11-0{2 + i // 2}T1{i % 4}:30:00Z",
        )
        for i in range(12)
    ] + [GOOD[6]]
    expected = parse_history(base, UTC)
    assert [s.start for s in expected] == sorted(s.start for s in expected)
    assert parse_history([base[i] for i in order] + [base[12]], UTC) == expected


# ------------------------------------------------------------------------------ demand


def test_the_demand_curve_sets_one_odd_day_aside() -> None:
    sessions = office(days=28, users=20)
    # One Wednesday, twice the users stay: the curve must not follow it.
    odd = MONDAY + timedelta(days=16, hours=8)
    sessions += [PastSession(f"extra{u}", odd, odd + timedelta(hours=4)) for u in range(20)]
    sessions.sort(key=lambda s: s.start)
    frame = frame_of(sessions, UTC)
    curve = demand_curve(sessions, frame)
    assert curve.weeks == (4, 4, 4, 4, 4, 3, 3)  # it ends on the fourth Friday
    wednesday_ten = 10 * 60
    assert curve.robust[2][wednesday_ten] == 20
    assert curve.envelope[2][wednesday_ten] == 40
    assert max(curve.robust[5]) == 0  # weekends are empty
    assert curve.slots()[0][8 * 4 + 1] == 20  # Monday 08:15-08:30


# ------------------------------------------------------------------------------ known optima


def test_a_flat_office_day_is_within_ten_percent_of_the_per_slot_lower_bound() -> None:
    sessions = office(days=14, users=40)
    found = run(sessions)
    frame = frame_of(sessions, UTC)
    # Each slot's hosts: ceil(most sessions open in it / maxSessionLimit).
    bound = 0.0
    for slot in range(frame.minutes // 15):
        begin = frame.origin + timedelta(minutes=15 * slot)
        end = begin + timedelta(minutes=15)
        open_then = sum(1 for s in sessions if s.start < end and s.end > begin)
        bound += math.ceil(open_then / 5) * 0.25
    assert found.evaluation.waited_over == 0
    # Within 10 % (either way: the bound counts whole slots, the replay minutes).
    assert abs(found.evaluation.host_hours - bound) <= 0.1 * bound
    assert found.evaluation.host_hours <= found.always_on.host_hours


def test_host_start_minutes_move_ramp_up_earlier() -> None:
    sessions = office(days=7, users=40)
    starts = []
    for minutes in (0, 10, 30):
        found = run(sessions, start=minutes)
        assert found.evaluation.waited_over == 0, found.reasons
        (schedule,) = found.spec.schedules
        starts.append(schedule.ramp_up.start_time)
    assert starts[0] == "08:00"  # the first logons
    assert starts[0] > starts[1] > starts[2]
    hours, minutes = (int(x) for x in starts[2].split(":"))
    assert hours * 60 + minutes <= 8 * 60 - 30  # at least the start's lead before


def test_a_weekend_free_history_gets_a_weekday_schedule_and_off_peak_through_the_weekend() -> None:
    found = run(office(days=14, users=30), start=10)
    (schedule,) = found.spec.schedules
    assert [d.value for d in schedule.days_of_week] == [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
    ]
    for day in (7, 8):  # Saturday and Sunday noon: Friday's off-peak
        phase = phase_in_force(found.spec, MONDAY + timedelta(days=day - 2, hours=12))
        assert phase is not None
        assert phase.phase is PlanPhase.OFF_PEAK
        assert phase.schedule == schedule.name
    assert any("Saturday, Sunday: no schedule" in r for r in found.reasons)


def test_logons_that_no_host_count_can_serve_are_named() -> None:
    # 40 users, 2 hosts of 5: 30 wait all day whatever the plan.
    found = run(office(days=7, users=40), scaling={"maxHosts": 2})
    assert found.unservable
    assert found.evaluation.waited_over <= len(found.unservable)
    assert any("even with all 2 hosts always on" in r for r in found.reasons)
    assert found.always_on_hosts == 2


def test_always_on_without_a_replay_is_what_its_replay_gives() -> None:
    # With the peak's hosts always on no logon can wait: the figures are known unreplayed.
    sessions = office(days=14, users=23)
    found = run(sessions)
    fixed = pool().model_copy(update={"scaling": None})
    replayed = evaluate_plan(None, fixed, sessions, Options(), hosts=found.always_on_hosts)
    assert found.always_on_hosts == 5  # ceil(23 / 5)
    assert replayed.to_json() == found.always_on.to_json()
    assert replayed.weekly_hosts == found.always_on.weekly_hosts


def test_a_pool_that_cannot_follow_a_plan_is_refused() -> None:
    no_scaling = HostPoolSpec.model_validate({"loadBalancer": {"type": "BreadthFirst"}})
    with pytest.raises(RecommendError, match=r"^spec\.scaling"):
        recommend("p", no_scaling, office(), Options())
    no_limit = HostPoolSpec.model_validate(
        {"loadBalancer": {"type": "BreadthFirst"}, "scaling": {"maxHosts": 3}}
    )
    with pytest.raises(RecommendError, match=r"maxSessionLimit"):
        recommend("p", no_limit, office(), Options())


# ------------------------------------------------------------------------------ properties


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[PastSession], dict[str, Any], float, float]:
    """Seven days of random sessions (a busy hour or two a day, some strays), a pool, a
    host start and a wait bound."""
    sessions: list[PastSession] = []
    peak_hour = draw(st.integers(6, 12))
    for d in range(7):
        day = MONDAY + timedelta(days=d)
        count = draw(st.integers(0, 25))
        for i in range(count):
            if draw(st.integers(0, 9)) == 0:
                start = day + timedelta(minutes=draw(st.integers(0, 1439)))
            else:
                start = day + timedelta(hours=peak_hour, minutes=draw(st.integers(0, 120)))
            length = timedelta(minutes=draw(st.integers(5, 400)))
            sessions.append(PastSession(f"u{i}", start, start + length))
    if not sessions:
        sessions.append(PastSession("u0", MONDAY, MONDAY + timedelta(days=7)))
    else:
        last = MONDAY + timedelta(days=6, hours=23)
        sessions.append(PastSession("late", last, last + timedelta(minutes=30)))
    sessions.sort(key=lambda s: s.start)
    limit = draw(st.sampled_from([1, 2, 4]))
    spec = {
        "loadBalancer": {
            "type": draw(st.sampled_from(["DepthFirst", "BreadthFirst"])),
            "maxSessionLimit": limit,
        },
        "scaling": {
            "maxHosts": draw(st.integers(1, 12)),
            "minHosts": draw(st.integers(0, 1)),
            "bufferSessions": draw(st.sampled_from([0, 0, 2])),
            "scaleDownDelaySeconds": draw(st.sampled_from([0, 600])),
        },
    }
    return sessions, spec, draw(st.sampled_from([0, 5, 15])), draw(st.sampled_from([0, 3, 10]))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_the_plan_keeps_the_bound_and_costs_no_more_than_the_baselines(
    case: tuple[list[PastSession], dict[str, Any], float, float],
) -> None:
    sessions, spec, start, wait = case
    found = recommend("p", HostPoolSpec.model_validate(spec), sessions, Options(wait, start, "UTC"))
    evaluated = found.evaluation
    # The bound, or the logons no plan can serve in time are named (and no more wait).
    if evaluated.waited_over:
        assert found.unservable
        assert evaluated.waited_over <= len(found.unservable)
    assert evaluated.host_hours <= found.always_on.host_hours
    # Where the pool's own scaling keeps the bound more cheaply, the reasons say so (and by
    # how much): a plan's ramp-down can hold an empty host beside a drained one.
    cheaper = [r for r in found.reasons if r.startswith("The pool's own scaling keeps the bound")]
    if found.no_plan.waited_over == 0 and evaluated.host_hours > 1.05 * found.no_plan.host_hours:
        assert cheaper
        assert f"{found.no_plan.host_hours:g} host-hours" in cheaper[0]
    else:
        assert not cheaper
    ScalingPlan.model_validate({"spec": found.spec.to_api()})


def test_the_reasons_say_when_the_pools_own_scaling_keeps_the_bound_more_cheaply() -> None:
    """A Friday whose last two users end on two hosts: ramp-down drains the one whose user
    stays until 15:19, so the other, empty from 11:51, keeps taking sessions beside it (the
    drained host's session still counts). The pool's own scaling stops it at once."""
    friday = [
        ("u3", "03:19", "09:37"),
        ("u2", "06:48", "06:54"),
        ("u1", "07:05", "09:29"),
        ("u0", "07:25", "11:51"),
        ("u4", "07:26", "09:49"),
        ("u6", "07:26", "08:06"),
        ("u5", "08:39", "15:19"),
    ]

    def at(clock: str) -> datetime:
        hour, minute = map(int, clock.split(":"))
        return MONDAY + timedelta(days=4, hours=hour, minutes=minute)

    sessions = [PastSession(user, at(start), at(end)) for user, start, end in friday]
    spec = {
        "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 4},
        "scaling": {"maxHosts": 9, "minHosts": 0, "bufferSessions": 0, "scaleDownDelaySeconds": 0},
    }
    found = recommend("p", HostPoolSpec.model_validate(spec), sessions, Options(10, 0, "UTC"))
    assert found.no_plan.waited_over == found.evaluation.waited_over == 0
    assert found.evaluation.host_hours > 1.05 * found.no_plan.host_hours
    (said,) = [r for r in found.reasons if r.startswith("The pool's own scaling keeps the bound")]
    more = found.evaluation.host_hours - found.no_plan.host_hours
    assert f"{found.no_plan.host_hours:g} host-hours, {more:.1f} fewer" in said


def around_midnight(before: int, after: int, spread: int = 20) -> list[PastSession]:
    """Seven days of a peak at midnight: each night ``before`` users log on every
    ``spread`` minutes up to midnight and ``after`` from it on (none before the history,
    so its first logon is at its first minute), staying 90 minutes and 7 more per user."""
    out = []
    for d in range(7):
        midnight = MONDAY + timedelta(days=d)
        for k in range(-before, after):
            start = midnight + timedelta(minutes=k * spread)
            if start >= MONDAY:
                length = timedelta(minutes=90 + 7 * (k + before))
                out.append(PastSession(f"u{k + before}", start, start + length))
    out.sort(key=lambda s: s.start)
    return out


@pytest.mark.parametrize(
    ("sessions", "algorithm", "start", "wait"),
    [
        (around_midnight(0, 6), "BreadthFirst", 5, 3),
        (around_midnight(0, 6), "DepthFirst", 15, 10),
        (around_midnight(3, 3), "BreadthFirst", 5, 3),
        (around_midnight(3, 3), "DepthFirst", 5, 3),
    ],
    ids=["from-midnight", "from-midnight-slow-start", "spanning-midnight", "spanning-depth-first"],
)
def test_a_logon_in_the_first_minute_of_the_history_is_served_by_the_night_before(
    sessions: list[PastSession], algorithm: str, start: float, wait: float
) -> None:
    # The property's failing case: the pool's own scaling (minHosts 1, bufferSessions 2)
    # keeps the bound, and the plans ramp up at 00:00 with no minimum while ramp-down
    # keeps a host through the night. Their replays started with ramp-up's minimum (no
    # host), so the history's first logon, at 00:00 of its first day, waited for a host's
    # start: every candidate failed and the last resort held the peak's hosts all week.
    # The night before leaves ramp-down's host, as on every later day.
    spec = {
        "loadBalancer": {"type": algorithm, "maxSessionLimit": 4},
        "scaling": {"maxHosts": 8, "minHosts": 1, "bufferSessions": 2, "scaleDownDelaySeconds": 0},
    }
    found = recommend("p", HostPoolSpec.model_validate(spec), sessions, Options(wait, start, "UTC"))
    assert found.no_plan.waited_over == 0
    assert found.evaluation.waited_over == 0, found.reasons
    assert found.evaluation.host_hours <= 1.05 * found.no_plan.host_hours
    assert found.evaluation.host_hours < found.always_on.host_hours  # not the last resort


def every_day(
    ramp_up: tuple[str, int], peak: str, ramp_down: tuple[str, int], off_peak: str
) -> ScalingPlanSpec:
    """A plan of one schedule for every day: phase starts, and ramp-up's and ramp-down's
    minimum percent (threshold 100, depth-first)."""

    def phase(start: str, minimum: int | None = None) -> dict[str, Any]:
        settings = {"minimumHostsPercent": minimum, "capacityThresholdPercent": 100}
        return {"startTime": start, "loadBalancerType": "DepthFirst"} | (
            settings if minimum is not None else {}
        )

    schedule = {
        "name": "every-day",
        "daysOfWeek": [d.value for d in WEEKDAYS],
        "rampUp": phase(*ramp_up),
        "peak": phase(peak),
        "rampDown": phase(*ramp_down),
        "offPeak": phase(off_peak),
    }
    return ScalingPlanSpec.model_validate(
        {"timeZone": "UTC", "hostPoolRefs": [{"name": "p"}], "schedules": [schedule]}
    )


@pytest.mark.parametrize(
    ("plan", "hosts"),
    [
        (every_day(("00:00", 50), "02:00", ("04:00", 25), "06:00"), 1),
        (every_day(("00:00", 0), "02:00", ("04:00", 50), "06:00"), 2),
        (every_day(("06:00", 75), "08:00", ("16:00", 25), "18:00"), 1),
    ],
    ids=["ramp-up-from-midnight", "ramp-up-from-midnight-without-minimum", "off-peak-at-midnight"],
)
def test_the_hosts_a_plan_keeps_before_midnight(plan: ScalingPlanSpec, hosts: int) -> None:
    # Sunday's off-peak, with ramp-down's minimum (maxHosts 4), whatever starts at midnight.
    assert hosts_before(plan, 4, MONDAY) == hosts


def test_a_replay_starts_with_the_hosts_the_plan_kept_before_its_first_midnight() -> None:
    # Ramp-up from 00:00 asks for 2 hosts; ramp-down keeps 1 through the night. At each
    # midnight one host is there and the other starts (5 min): of the logons at 00:00 and
    # 00:01 (one session a host) the first is served at once, the second waits for the
    # start. The history's first midnight is no exception: neither no host (ramp-up's
    # minimum not asked for yet) nor ramp-up's two ready.
    plan = every_day(("00:00", 50), "02:00", ("04:00", 25), "06:00")
    sessions = [
        PastSession(
            f"u{k}", MONDAY + timedelta(days=d, minutes=k), MONDAY + timedelta(days=d, hours=1)
        )
        for d in range(7)
        for k in range(2)
    ]
    pool = HostPoolSpec.model_validate(
        {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 1}, "scaling": {"maxHosts": 4}}
    )
    replays = Replays.of_history(pool, frame_of(sessions, UTC), sessions, 5)
    assert replays.job(plan).hosts == 1
    waits = replay(replays.job(plan)).waits
    assert [round(w / 60) for w in waits] == [0, 4] * 7


def a_long_session_among_short_ones(
    hours: Sequence[float], *, days: int = 7, at: float = 8.0
) -> list[PastSession]:
    """Every day the same logons, a minute apart from ``at`` (hours), lasting ``hours``."""
    out = []
    for d in range(days):
        first = MONDAY + timedelta(days=d, hours=at)
        for i, length in enumerate(hours):
            start = first + timedelta(minutes=i)
            out.append(PastSession(f"u{i}", start, start + timedelta(hours=length)))
    out.sort(key=lambda s: s.start)
    return out


@pytest.mark.parametrize(
    ("hours", "algorithm", "moved"),
    [
        ((1, 1, 2, 2, 8), "DepthFirst", True),
        ((1, 1, 2, 2, 8), "BreadthFirst", True),
        # The long session on the first host: the host drained holds a 2-hour one.
        ((8, 1, 1, 2, 2), "DepthFirst", False),
    ],
    ids=["long-last", "long-last-breadth-first", "long-first"],
)
def test_ramp_down_waits_until_the_short_sessions_have_gone(
    hours: tuple[float, ...], algorithm: str, moved: bool
) -> None:
    # The model counts a drained host gone at once, so ramping down at 08:30 looked
    # cheapest. In the replay, ramp-down drained the host with the fewest sessions: the one
    # with the 8-hour session, and as its sessions count toward used capacity the other
    # host stayed up, emptied, until it ended (112.58 host-hours against no plan's 70.35).
    # Ramp-down later, once the short sessions have gone, drains the empty host.
    spec = {
        "loadBalancer": {"type": algorithm, "maxSessionLimit": 4},
        "scaling": {
            "maxHosts": 4,
            "minHosts": 0,
            "bufferSessions": 0,
            "scaleDownDelaySeconds": 0,
        },
    }
    sessions = a_long_session_among_short_ones(hours)
    found = recommend("p", HostPoolSpec.model_validate(spec), sessions, Options(10, 0, "UTC"))
    assert found.no_plan.waited_over == 0
    assert found.evaluation.waited_over == 0, found.reasons
    assert found.evaluation.host_hours <= 1.05 * found.no_plan.host_hours, found.reasons
    # The reasons say when ramp-down moved from the model's start, and what that replayed at.
    said = [r for r in found.reasons if "later than the model's cheapest start (08:30)" in r]
    assert len(said) == moved, found.reasons


def test_later_ramp_downs_start_where_the_demand_stays_at_half_its_high() -> None:
    day = [0] * 480 + [4] * 60 + [3] * 30 + [2] * 30 + [1] * 360 + [0] * 480
    week = tuple(day for _ in range(7))
    schedule = ScheduleShape(
        days=(0, 1, 2, 3, 4), ramp_up=480, peak=495, ramp_down=510, off_peak=975,
        up_hosts=0, up_threshold=100,
    )  # fmt: skip
    shape = PlanShape((schedule,), (5, 6), 0, 100, 0.0)
    (later,) = later_ramp_downs(shape, week)
    (moved,) = later.schedules
    # Over 2 sessions until 09:29: ramp-down at 09:30, the model's 08:30 kept for the reasons.
    assert (moved.ramp_down, moved.off_peak, moved.model_ramp_down) == (570, 975, 510)
    assert later.unscheduled == (5, 6)
    # Already there, or after: nothing to replay.
    assert later_ramp_downs(later, week) == []
    late = PlanShape((replace(schedule, ramp_down=1380, off_peak=1395),), (5, 6), 0, 100, 0.0)
    assert later_ramp_downs(late, week) == []


# ------------------------------------------------------------------------------ the CLI


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    history = tmp_path / "history.jsonl"
    history.write_text(lines(office(days=14, users=20)))
    manifest = tmp_path / "pool.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "hostpool.io/v1alpha1",
                "kind": "HostPool",
                "metadata": {"name": "finance", "namespace": "vdi"},
                "spec": POOL,
            }
        )
    )
    return manifest, history


def test_cli_json_has_the_contract_shape(inputs: tuple[Path, Path]) -> None:
    manifest, history = inputs
    done = cli(
        "recommend-plan",
        "--pool",
        str(manifest),
        "--history",
        str(history),
        "--host-start-minutes",
        "10",
        "--output",
        "json",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == {"plan", "evaluation", "baselines", "reasons"}
    keys = {"hostHours", "peakPending", "waitedOverMaxPercent", "p99WaitMinutes"}
    assert set(result["evaluation"]) == keys
    assert set(result["baselines"]) == {"noPlan", "alwaysOn"}
    assert set(result["baselines"]["noPlan"]) == keys
    assert set(result["baselines"]["alwaysOn"]) == keys
    assert result["evaluation"]["waitedOverMaxPercent"] == 0
    assert result["evaluation"]["hostHours"] < result["baselines"]["alwaysOn"]["hostHours"]
    assert result["plan"]["hostPoolRefs"] == [{"name": "finance"}]
    assert all(isinstance(r, str) for r in result["reasons"])
    assert "took" in done.stderr


def test_cli_yaml_is_a_scaling_plan_for_the_pool(inputs: tuple[Path, Path]) -> None:
    manifest, history = inputs
    done = cli("recommend-plan", "--pool", str(manifest), "--history", str(history))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# History: ")  # the reasons, as comments
    document = yaml.safe_load(done.stdout)
    assert document["apiVersion"] == "hostpool.io/v1alpha1"
    assert document["kind"] == "ScalingPlan"
    assert document["metadata"] == {"name": "finance-recommended", "namespace": "vdi"}
    plan = ScalingPlan.model_validate({"spec": document["spec"]})
    assert plan.spec.host_pool_refs[0].name == "finance"
    assert plan.spec.time_zone == "UTC"


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_cli_plot_is_a_png(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    manifest, history = inputs
    out = tmp_path / "plan.png"
    done = cli(
        "recommend-plan",
        "--pool",
        str(manifest),
        "--history",
        str(history),
        "--time-zone",
        "Europe/Stockholm",
        "--plot",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("history", "message"),
    [
        ("", "history.jsonl: the history is empty"),
        ("\n".join([GOOD[1], GOOD[0], '{"user": "c"']), "history.jsonl: line 3: not JSON"),
        (
            GOOD[0] + "\n" + _line("b", "2026-11-03T09:00:00Z", "2026-11-03T08:00:00Z"),
            "line 2: end",
        ),
        (
            _line("b", "2026-11-03T09:00:00Z", "2026-11-03T10:00:00Z", pool="x"),
            "line 1: unknown field",
        ),
        ("\n".join(GOOD[:3]), "history.jsonl: the history covers 3 days"),
    ],
    ids=["empty", "unsorted-then-broken", "end-before-start", "unknown-field", "three-days"],
)
def test_cli_bad_history_exits_2_with_one_line(
    inputs: tuple[Path, Path], history: str, message: str
) -> None:
    manifest, path = inputs
    path.write_text(history)
    done = cli("recommend-plan", "--pool", str(manifest), "--history", str(path))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert message in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("pool_text", "message"),
    [
        ("kind: ScalingPlan\n", "not a HostPool manifest"),
        (
            "kind: HostPool\nspec: {loadBalancer: {type: DepthFirst, maxSessionLimit: 5}}\n",
            "metadata.name",
        ),
        (
            "kind: HostPool\nmetadata: {name: p}\nspec: {loadBalancer: {type: DepthFirst}}\n",
            "spec.loadBalancer",
        ),
        (
            "kind: HostPool\nmetadata: {name: p}\n"
            "spec: {loadBalancer: {type: DepthFirst, maxSessionLimit: 5}}\n",
            "spec.scaling: a pool that follows a plan needs scaling",
        ),
        ("kind: [", "not valid YAML"),
    ],
)
def test_cli_bad_pool_exits_2_with_one_line(
    inputs: tuple[Path, Path], pool_text: str, message: str
) -> None:
    manifest, history = inputs
    manifest.write_text(pool_text)
    done = cli("recommend-plan", "--pool", str(manifest), "--history", str(history))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert message in done.stderr


def test_cli_bad_options_exit_2(inputs: tuple[Path, Path]) -> None:
    manifest, history = inputs
    done = cli(
        "recommend-plan",
        "--pool",
        str(manifest),
        "--history",
        str(history),
        "--time-zone",
        "Mars/Olympus",
    )
    assert done.returncode == 2
    assert "--time-zone" in done.stderr
    missing = cli("recommend-plan", "--pool", str(manifest), "--history", str(history) + ".nope")
    assert missing.returncode == 2
    assert "cannot read" in missing.stderr
