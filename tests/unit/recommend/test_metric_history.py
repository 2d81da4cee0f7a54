"""A history recovered from the operator's counters (recommend-plan --prometheus): counter
growth per step (resets, new series, gaps), sessions from minute counts (first in, first
out), and the round trip sessions -> per-minute counters -> sessions keeping every minute's
logons and open sessions. Also the chunking and the queries of the HTTP reader."""

from __future__ import annotations

import bisect
import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.recommend.demand_curve import concurrency, frame_of
from hostpool_operator.recommend.history import HistoryError, PastSession, require_days
from hostpool_operator.recommend.metric_history import (
    STEP_SECONDS,
    MinuteCounts,
    minute_counts,
    sessions_from_counts,
    step_increase,
)
from hostpool_operator.recommend.sources.prometheus import (
    CHUNK_STEPS,
    MAX_POINTS,
    chunks,
    history_range,
    queries,
)

T0 = datetime(2026, 11, 2, tzinfo=UTC)
MIN = timedelta(minutes=1)
F = T0.timestamp()


def pts(*values: float | None) -> list[tuple[float, float]]:
    """Points at steps 0, 1, ... (None: no point at that step)."""
    return [(F + i * STEP_SECONDS, v) for i, v in enumerate(values) if v is not None]


def test_growth_per_step_with_a_reset_a_gap_and_a_new_series() -> None:
    a = pts(5, 5, 7, 2, None, None, 4, 4)  # reset at step 3, gap at 4-5
    b = pts(None, None, None, None, 3, 3, 4, 4)  # a new process at step 4
    assert step_increase([a], F, 7) == [0, 2, 2, 0, 0, 2, 0]
    assert step_increase([b], F, 7) == [0, 0, 0, 3, 0, 1, 0]
    assert step_increase([a, b], F, 7) == [0, 2, 2, 3, 0, 3, 0]
    assert step_increase([], F, 3) == [0, 0, 0]


def test_a_point_off_the_steps_is_refused() -> None:
    with pytest.raises(ValueError, match="not on a step"):
        step_increase([[(F + 30, 1.0)]], F, 3)
    with pytest.raises(ValueError, match="not on a step"):
        step_increase([[(F + 5 * 60, 1.0)]], F, 3)


def test_ends_match_the_oldest_open_session_and_the_rest_end_at_the_range_end() -> None:
    counts = MinuteCounts(T0, starts=[2, 0, 1, 0, 0], ends=[0, 1, 1, 0, 0])
    found = sessions_from_counts(counts)
    assert [(s.start, s.end) for s in found] == [
        (T0, T0 + 2 * MIN),
        (T0, T0 + 3 * MIN),
        (T0 + 2 * MIN, T0 + 5 * MIN),  # still open: ends with the range
    ]
    assert [s.user for s in found] == ["session-000001", "session-000002", "session-000003"]


def test_a_session_within_one_minute_lasts_that_minute() -> None:
    found = sessions_from_counts(MinuteCounts(T0, starts=[0, 1], ends=[0, 1]))
    assert [(s.start, s.end) for s in found] == [(T0 + MIN, T0 + 2 * MIN)]


def test_ends_of_sessions_open_before_the_range_are_not_the_historys() -> None:
    counts = MinuteCounts(T0, starts=[1, 0, 0], ends=[0, 1, 1])
    # Told two were open before: both ends are theirs, the new session runs to the end.
    assert [(s.start, s.end) for s in sessions_from_counts(counts, open_before=2)] == [
        (T0, T0 + 3 * MIN)
    ]
    # Not told: the first end is the new session's; the second has nothing to end.
    assert [(s.start, s.end) for s in sessions_from_counts(counts)] == [(T0, T0 + 2 * MIN)]


def test_counts_must_be_consistent() -> None:
    with pytest.raises(ValueError, match="same minutes"):
        MinuteCounts(T0, starts=[1], ends=[])
    with pytest.raises(ValueError, match="negative"):
        MinuteCounts(T0, starts=[-1], ends=[0])


# ------------------------------------------------------------------------------ round trip


def counters(
    sessions: list[PastSession], first: datetime, steps: int
) -> tuple[list[list[tuple[float, float]]], list[list[tuple[float, float]]]]:
    """The two counters as a scrape on every minute from ``first`` sees them (a start
    before the scrape, an end at or before it), one series each."""
    starts = sorted(s.start for s in sessions)
    ends = sorted(s.end for s in sessions)
    at = [first + i * MIN for i in range(steps + 1)]
    s = [(t.timestamp(), float(bisect.bisect_left(starts, t))) for t in at]
    e = [(t.timestamp(), float(bisect.bisect_right(ends, t))) for t in at]
    return [s], [e]


@st.composite
def histories(draw: st.DrawFn) -> list[PastSession]:
    """Sessions of arbitrary seconds within two days, some within a minute."""
    count = draw(st.integers(1, 60))
    out = []
    for i in range(count):
        start = draw(st.integers(0, 2 * 86_400 - 1))
        length = draw(st.integers(1, 6 * 3600))
        begin = T0 + timedelta(seconds=start)
        out.append(PastSession(f"u{i}", begin, begin + timedelta(seconds=length)))
    out.sort(key=lambda s: s.start)
    return out


@settings(max_examples=150, deadline=None)
@given(histories())
def test_sessions_to_counters_to_sessions_keeps_every_minute(sessions: list[PastSession]) -> None:
    steps = 3 * 1440  # the two days and the longest session after them
    starts, ends = counters(sessions, T0, steps)
    counts = minute_counts(starts, ends, T0, steps)
    found = sessions_from_counts(counts)
    assert len(found) == len(sessions)
    # Every logon in its minute (the start's floor) ...
    assert sorted(s.start for s in found) == sorted(
        T0 + (s.start - T0) // MIN * MIN for s in sessions
    )
    # ... and the sessions open in every minute, as the recommender counts them.
    frame = frame_of(sessions, UTC)
    assert concurrency(found, frame) == concurrency(sessions, frame)
    assert all(s.end > s.start for s in found)


@settings(max_examples=50, deadline=None)
@given(histories(), st.integers(1, 40), st.integers(0, 3000))
def test_a_restart_and_a_gap_change_nothing(
    sessions: list[PastSession], gap: int, restart: int
) -> None:
    """The counters of a process that restarted (from zero, as a new series) and a scrape
    gap give the same minutes, but for the gap's logons and ends, which come at its end."""
    steps = 3 * 1440
    (s,), (e,) = counters(sessions, T0, steps)
    cut = restart + 1
    # The second process counts what came after the first's last scrape (step cut - 1).
    s2 = [(t, v - s[cut - 1][1]) for t, v in s[cut:]]
    e2 = [(t, v - e[cut - 1][1]) for t, v in e[cut:]]
    whole = minute_counts([s], [e], T0, steps)
    split = minute_counts([s[:cut], s2], [e[:cut], e2], T0, steps)
    assert split == whole
    # A gap of ``gap`` steps from step 3500: its growth comes at the step after it.
    hole = range(3500, 3500 + gap)
    gapped = minute_counts(
        [[p for i, p in enumerate(s) if i not in hole]],
        [[p for i, p in enumerate(e) if i not in hole]],
        T0,
        steps,
    )
    assert sum(gapped.starts) == sum(whole.starts)
    assert gapped.starts[: 3500 - 1] == whole.starts[: 3500 - 1]
    after = 3500 + gap
    assert gapped.starts[after:] == whole.starts[after:]


def test_fewer_than_seven_days_is_the_histories_error() -> None:
    minutes = 3 * 1440
    ends = [0] * minutes
    ends[60] = 1
    counts = MinuteCounts(T0, starts=[1] + [0] * (minutes - 1), ends=ends)
    with pytest.raises(HistoryError, match=r"^the history covers 1 day .*at least 7"):
        require_days(sessions_from_counts(counts), UTC)
    with pytest.raises(HistoryError, match=r"^the history is empty"):
        require_days([], UTC)


# ------------------------------------------------------------------------------ the reader


@pytest.mark.parametrize("steps", [1, 9_999, 10_000, 10_001, 40_320, 123_457])
def test_chunks_cover_every_step_within_the_points_limit(steps: int) -> None:
    parts = chunks(T0, steps)
    assert parts[0][0] == T0
    assert parts[-1][1] == T0 + steps * MIN
    for (_, end), (start, _) in itertools.pairwise(parts):
        assert start == end  # consecutive, the shared step read twice and merged
    for start, end in parts:
        points = (end - start) // MIN + 1
        assert 2 <= points <= CHUNK_STEPS + 1 <= MAX_POINTS


def test_the_queries() -> None:
    q = queries("vdi", "finance")
    assert (
        q.starts
        == 'hostpool_assignments_total{namespace="vdi", pool="finance", reason="NewSession"}'
    )
    assert q.ends == 'hostpool_session_ends_total{namespace="vdi", pool="finance"}'
    assert q.open == 'sum(hostpool_sessions{namespace="vdi", pool="finance"})'
    assert (
        queries('a"b', "c\\d").ends
        == 'hostpool_session_ends_total{namespace="a\\"b", pool="c\\\\d"}'
    )


NOW = datetime(2026, 12, 1, 12, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("since", "until", "days", "expected"),
    [
        (None, None, None, (NOW - timedelta(days=28), NOW)),
        (None, None, 14.0, (NOW - timedelta(days=14), NOW)),
        ("2026-11-02T00:00:00Z", None, None, (T0, NOW)),
        ("2026-11-02T01:00:00+01:00", None, 7.0, (T0, T0 + timedelta(days=7))),
        (None, "2026-11-30T00:00:00Z", 7.0, (T0 + timedelta(days=21), T0 + timedelta(days=28))),
    ],
)
def test_the_range_of_the_flags(
    since: str | None, until: str | None, days: float | None, expected: tuple[datetime, datetime]
) -> None:
    assert history_range(since, until, days, NOW) == expected


@pytest.mark.parametrize(
    ("since", "until", "days", "message"),
    [
        ("2026-11-02T00:00:00", None, None, "--since: .* has no offset"),
        ("monday", None, None, "--since: 'monday' is not an RFC 3339 time"),
        ("2026-11-02T00:00:00Z", "2026-11-01T00:00:00Z", None, "--until .* is not after"),
        ("2026-11-02T00:00:00Z", "2026-11-09T00:00:00Z", 7.0, "not all three"),
        (None, None, 0.0, "--days must be a positive number"),
    ],
)
def test_bad_ranges_are_refused(
    since: str | None, until: str | None, days: float | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        history_range(since, until, days, NOW)
