"""The demand a history shows, per local weekday and minute (and 15-minute slot): how many
sessions were open, for the plan recommender.

Concurrency counts the sessions open at any moment of a minute. The curve of a weekday
takes, at each minute, the second highest value over the weeks once there are three or
more of that weekday (one odd day, a storm or an outage, moves it little; with one or two
weeks, the highest): what a plan costs is judged on it. The ``envelope`` is the highest;
the days themselves are kept too, as every logon of the history must be served in time.
Times are local (the plan's zone): a DST day has its minutes at their wall-clock place
(the repeated hour counts once, at its highest; the skipped one repeats the minute
before). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta, tzinfo

from .history import PastSession

MINUTES_A_DAY = 24 * 60
SLOT_MINUTES = 15
SLOTS_A_DAY = MINUTES_A_DAY // SLOT_MINUTES
#: Weeks of a weekday from which the highest is set aside.
ROBUST_FROM_WEEKS = 3

#: A week of minutes: seven lists (Monday first) of 1440 values.
Week = tuple[list[int], ...]


@dataclass(frozen=True, slots=True)
class Frame:
    """The history's time frame: local midnight of its first day (as a UTC instant) up to
    local midnight after its last end, in the plan's zone."""

    zone: tzinfo
    origin: datetime
    first_day: int  # ordinal of the first local date
    days: int
    minutes: int  # elapsed minutes from origin to the end

    @property
    def total_seconds(self) -> float:
        return self.minutes * 60.0


def frame_of(sessions: Sequence[PastSession], zone: tzinfo) -> Frame:
    first = sessions[0].start.astimezone(zone).date()
    last = max(s.end for s in sessions).astimezone(zone).date()
    origin = datetime.combine(first, time(), tzinfo=zone).astimezone(UTC)
    end = datetime.combine(last + timedelta(days=1), time(), tzinfo=zone).astimezone(UTC)
    return Frame(
        zone=zone,
        origin=origin,
        first_day=first.toordinal(),
        days=(last - first).days + 1,
        minutes=math.ceil((end - origin).total_seconds() / 60),
    )


def concurrency(sessions: Sequence[PastSession], frame: Frame) -> list[int]:
    """Per elapsed minute of the frame: the sessions open at some moment of it."""
    delta = [0] * (frame.minutes + 1)
    origin = frame.origin
    for session in sessions:
        begin = (session.start - origin).total_seconds() / 60
        end = (session.end - origin).total_seconds() / 60
        first = max(0, math.floor(begin))
        after = min(frame.minutes, math.ceil(end))
        if after > first:
            delta[first] += 1
            delta[after] -= 1
    out: list[int] = []
    open_now = 0
    for change in delta[:-1]:
        open_now += change
        out.append(open_now)
    return out


def peak_concurrency(sessions: Sequence[PastSession]) -> int:
    """The most sessions open at one instant (an end before a start at the same instant)."""
    events = sorted(
        [(s.start, 1) for s in sessions] + [(s.end, -1) for s in sessions],
        key=lambda event: (event[0], event[1]),
    )
    peak = open_now = 0
    for _, change in events:
        open_now += change
        peak = max(peak, open_now)
    return peak


def local_days(per_minute: Sequence[int], frame: Frame) -> list[list[int]]:
    """The elapsed minutes laid out as local days of 1440 minutes each."""
    days = [[-1] * MINUTES_A_DAY for _ in range(frame.days)]
    zone = frame.zone
    for minute, value in enumerate(per_minute):
        local = (frame.origin + timedelta(minutes=minute)).astimezone(zone)
        day = local.toordinal() - frame.first_day
        if 0 <= day < frame.days:
            slot = local.hour * 60 + local.minute
            days[day][slot] = max(days[day][slot], value)
    for values in days:
        last = 0
        for i, value in enumerate(values):
            if value < 0:
                values[i] = last  # a skipped DST hour: as the minute before
            else:
                last = value
    return days


def _robust(values: list[int]) -> int:
    if len(values) >= ROBUST_FROM_WEEKS:
        return sorted(values)[-2]
    return max(values, default=0)


@dataclass(frozen=True, slots=True)
class DemandCurve:
    """Sessions open per local weekday (Monday = 0) and minute, over a history."""

    #: The robust curve: the second highest week at each minute (three weeks or more).
    robust: Week
    #: The highest week at each minute.
    envelope: Week
    #: How many of each weekday the history has.
    weeks: tuple[int, ...]
    #: Logons per weekday and 15-minute slot, the robust way (for the reasons).
    logons: Week
    #: Every local day of the history in order, and the weekday of the first.
    days: tuple[list[int], ...] = ()
    first_weekday: int = 0

    def slots(self, week: Week | None = None) -> Week:
        """Per weekday and 15-minute slot: the highest minute of the slot."""
        source = self.robust if week is None else week
        return tuple(
            [max(day[s * SLOT_MINUTES : (s + 1) * SLOT_MINUTES]) for s in range(SLOTS_A_DAY)]
            for day in source
        )


def demand_curve(sessions: Sequence[PastSession], frame: Frame) -> DemandCurve:
    """The curve of a history (see the module's docstring)."""
    days = local_days(concurrency(sessions, frame), frame)
    starts = [[0] * SLOTS_A_DAY for _ in range(frame.days)]
    for session in sessions:
        local = session.start.astimezone(frame.zone)
        day = local.toordinal() - frame.first_day
        if 0 <= day < frame.days:
            starts[day][(local.hour * 60 + local.minute) // SLOT_MINUTES] += 1
    by_weekday: list[list[int]] = [[] for _ in range(7)]
    for index in range(frame.days):
        by_weekday[(frame.first_day + index - 1) % 7].append(index)  # ordinal 1 is a Monday
    robust: list[list[int]] = []
    envelope: list[list[int]] = []
    logons: list[list[int]] = []
    for weekday in range(7):
        indexes = by_weekday[weekday]
        robust.append([_robust([days[i][m] for i in indexes]) for m in range(MINUTES_A_DAY)])
        envelope.append(
            [max((days[i][m] for i in indexes), default=0) for m in range(MINUTES_A_DAY)]
        )
        logons.append([_robust([starts[i][s] for i in indexes]) for s in range(SLOTS_A_DAY)])
    return DemandCurve(
        robust=tuple(robust),
        envelope=tuple(envelope),
        weeks=tuple(len(i) for i in by_weekday),
        logons=tuple(logons),
        days=tuple(days),
        first_weekday=(frame.first_day - 1) % 7,
    )
