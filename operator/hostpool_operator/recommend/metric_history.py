"""A pool's session history recovered from the operator's own metrics, for the plan
recommender (``recommend-plan --prometheus``). Pure: the caller queries Prometheus and
hands the series in.

Two counters of the operator make the history recoverable, per pool, at a resolution of a
minute:

* ``hostpool_assignments_total{namespace, pool, reason="NewSession"}``: sessions that
  started (a logon placed on a host; a reconnect, ``reason="Reconnected"``, joins a session
  and starts none);
* ``hostpool_session_ends_total{namespace, pool}``: sessions that ended (their last
  SessionRequest deleted or failed, or their host or workload gone).

Counters, not the ``hostpool_sessions`` gauge: a counter sampled once a minute still tells
how many sessions started and ended in that minute, and a scrape gap moves the gap's count
to the minute after it instead of losing it; a gauge only shows the net change.

Sampled at the steps of a ``query_range`` (60 s apart, the raw counter, no ``increase()``:
its extrapolation gives fractions of a logon), each series' growth from one step to the
next is that minute's count (:func:`step_increase`): a value below the one before is a
counter reset (the operator restarted; all of the new value is new), a series that
appears after the first step is a new counter (a new operator process or a pool created
meanwhile) counting from zero, and the series of several operator processes (restarts,
leader changes: each its own ``instance`` or ``pod``) add up.

Minute ``m`` of the counts is ``[origin + m min, origin + (m + 1) min)``: its starts began in
it (the recovered session starts at the minute's beginning, the floor of its real start);
its ends ended in it (the recovered session ends at the minute's end, the ceiling). The
sessions open at some moment of each minute, as :func:`~.demand_curve.concurrency` counts
them, and the logons of each minute are therefore the history's own.

Which start an end belongs to is not recorded: ends are matched first in, first out with
the sessions open (those open before the range, ``open_before``, first: they are not part
of the history, as an export of the sessions that started in the range would not hold
them; an end with no open session to match is one of theirs too). That changes no
session count of any minute, only which session lasted how long. User names are not
recoverable from metrics either (they would be a series per user); the sessions get
synthetic ones, one per session (``session-000001``, in start order), and the recommender
does not need the real ones: it places each logon as a new session, as it does for any
history whose users have one session at a time. Sessions still open at the range's end
end there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .history import PastSession

#: The resolution of a recovered history, and the step of the queries that read it.
STEP_SECONDS = 60
#: A counter's point: (unix time in seconds, value).
Point = tuple[float, float]


@dataclass(frozen=True, slots=True)
class MinuteCounts:
    """Per minute from ``origin`` (a whole minute, aware): sessions started and ended."""

    origin: datetime
    starts: Sequence[int]
    ends: Sequence[int]

    def __post_init__(self) -> None:
        if len(self.starts) != len(self.ends):
            raise ValueError("starts and ends must cover the same minutes")
        if self.origin.tzinfo is None:
            raise ValueError("origin must be aware")
        if any(v < 0 for v in self.starts) or any(v < 0 for v in self.ends):
            raise ValueError("counts must not be negative")


def step_increase(series: Iterable[Sequence[Point]], first: float, steps: int) -> list[int]:
    """Per step ``i`` (at ``first + i * STEP_SECONDS``, ``i`` from 1 to ``steps``): how much
    the counters of ``series`` grew since step ``i - 1``, added up over the series. Step 0
    is every series' baseline. Each series is one label set's points in time order, at
    steps (as ``query_range`` gives them: a step without a point is a gap, whose growth
    counts at the next step with one). Returns ``steps`` whole numbers (index 0: step 1)."""
    out = [0.0] * steps
    for points in series:
        last: float | None = None
        for at, value in points:
            offset = (at - first) / STEP_SECONDS
            index = round(offset)
            if abs(offset - index) > 1e-6 or not 0 <= index <= steps:
                raise ValueError(
                    f"a point at {at} is not on a step of {STEP_SECONDS} s from {first} "
                    f"within {steps} steps"
                )
            if index == 0:
                last = value
                continue
            if last is None:
                grown = value  # a counter that appeared in the range: it counted from zero
            elif value < last:
                grown = value  # a reset: the operator restarted, all of it is new
            else:
                grown = value - last
            out[index - 1] += grown
            last = value
    return [round(v) for v in out]


def minute_counts(
    starts: Iterable[Sequence[Point]],
    ends: Iterable[Sequence[Point]],
    first: datetime,
    steps: int,
) -> MinuteCounts:
    """The minutes of the counters' growth: the series of the started and of the ended
    sessions sampled at ``first`` (the baseline) and every minute after it, ``steps`` times.
    Minute ``m`` is the growth from step ``m`` to step ``m + 1``, so the counts begin at
    ``first``."""
    at = first.timestamp()
    return MinuteCounts(
        origin=first.astimezone(UTC),
        starts=step_increase(starts, at, steps),
        ends=step_increase(ends, at, steps),
    )


def synthetic_user(number: int) -> str:
    """The name of the ``number``-th session (from 1) of a recovered history."""
    return f"session-{number:06d}"


def sessions_from_counts(counts: MinuteCounts, *, open_before: int = 0) -> list[PastSession]:
    """The sessions the minute counts describe, in start order, with synthetic users (see
    the module's docstring): starts matched first in, first out with the ends of the same
    minute or later, after the ``open_before`` sessions already open at the origin."""
    step = timedelta(seconds=STEP_SECONDS)
    origin = counts.origin
    open_sessions: deque[int] = deque()  # minute of each open session's start, oldest first
    before = max(0, open_before)
    found: list[tuple[int, int]] = []  # (start minute, end minute + 1)
    for minute, (started, ended) in enumerate(zip(counts.starts, counts.ends, strict=True)):
        open_sessions.extend([minute] * started)
        for _ in range(ended):
            if before:
                before -= 1
            elif open_sessions:
                found.append((open_sessions.popleft(), minute + 1))
            # else: the end of a session that started before the range (or before the
            # counters were there); it is not part of the history.
    after = len(counts.starts)
    found += [(minute, after) for minute in open_sessions]
    found.sort()
    return [
        PastSession(synthetic_user(i), origin + begin * step, origin + end * step)
        for i, (begin, end) in enumerate(found, start=1)
    ]
