"""The plan recommender's counting model of the plan rules, fast enough for the search
(``plan_search``) to try every candidate; the replay of the history then checks the
finalists (``recommend``).

Per local minute (``n`` sessions open, ``L`` the session limit, ``M`` maxHosts):

* A phase with threshold ``T`` asks for ``need_T = ceil(100 n / (T L))`` hosts (rule 4).
  In ramp-down and off-peak the pool follows it both ways, with the ramp-down minimum as a
  floor: ``max(minimum, need_T)`` (rules 3-5; a drained host is counted gone at once). In
  ramp-up and peak nothing is removed: the minimum is asked for at the start, and the
  hosts only grow with ``need_T``.
* A host asked for at minute ``t`` takes sessions at ``t + hostStart``; the pass that asks
  comes at most a minute after the logon that needs it. When ``hostStart + 1 <= maxWait``
  the pool's own scaling (hosts for the waiting requests) is always in time. Else the
  hosts asked for by ``t - lead`` and not drained since must hold the logons of minute
  ``t`` (``lead_minutes``).
* What a candidate costs is counted on the typical week (host-minutes, starting hosts
  included); whether it serves every logon in time, on each day of the history. Pure.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from .demand_curve import MINUTES_A_DAY, SLOT_MINUTES

#: A day is quiet when its high is at most this share of the week's highest day.
QUIET_SHARE = 0.1
#: Users arrive when the demand passes this share of the day's high; it is at its high
#: from this share; it is quiet again below this one.
RISE_SHARE = 0.05
TOP_SHARE = 0.9
FALL_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class Demand:
    """What the search works on: sessions open per local minute of a typical week
    (``week``, Monday first: what candidates cost) and of each day of the history in
    order (``days``, the first a ``first_weekday``: what every candidate must serve in
    time; none: the week's days), the pool's limits and the lead a host needs (see the
    module's docstring)."""

    week: tuple[Sequence[int], ...]
    limit: int
    max_hosts: int
    lead: int
    days: tuple[Sequence[int], ...] = ()
    first_weekday: int = 0

    def history(self) -> tuple[tuple[Sequence[int], ...], int]:
        return (self.days, self.first_weekday) if self.days else (self.week, 0)


def reachable_hosts(max_hosts: int) -> list[int]:
    """Host counts a minimum percent can give: ceil(maxHosts x p / 100), p = 0..100."""
    return sorted({-(-max_hosts * p // 100) for p in range(101)})


def percent_for(hosts: int, max_hosts: int) -> int:
    """The smallest percent whose minimum is at least ``hosts`` (rule 3)."""
    for percent in range(101):
        if -(-max_hosts * percent // 100) >= hosts:
            return percent
    return 100


def window_min(values: Sequence[int], width: int) -> list[int]:
    """out[t] = min(values[t - width : t + 1])."""
    out: list[int] = []
    window: deque[int] = deque()  # indexes of increasing values
    for t in range(len(values)):
        while window and values[window[-1]] >= values[t]:
            window.pop()
        window.append(t)
        if window[0] < t - width:
            window.popleft()
        out.append(values[window[0]])
    return out


def _need(n: int, limit: int, threshold: int, cap: int) -> int:
    return min(cap, -(-100 * n // (threshold * limit))) if n > 0 else 0


class Day:
    """The model's figures of one weekday, computed once and shared by every candidate:
    its typical minutes, their anchors, and which days of the history are this weekday."""

    def __init__(self, demand: Demand, weekday: int) -> None:
        self.weekday = weekday
        days, first = demand.history()
        self.actual = [i for i in range(len(days)) if (first + i) % 7 == weekday]
        self.n = list(demand.week[weekday])
        self.high = max(self.n, default=0)
        high = self.high
        self.rise = next((t for t, v in enumerate(self.n) if v > RISE_SHARE * high), 0)
        top = next((t for t, v in enumerate(self.n) if v >= TOP_SHARE * high), 0)
        self.top = top
        self.fall = next(
            (t for t in range(top, MINUTES_A_DAY) if self.n[t] < FALL_SHARE * high),
            MINUTES_A_DAY - 1,
        )


@dataclass(slots=True)
class DownDay:
    """One weekday under the ramp-down settings all day: hosts, their prefix sums, and the
    first and last minute whose logons would wait too long."""

    hosts: list[int]
    prefix: list[int]
    first_bad: int | None
    last_bad: int | None


@dataclass(slots=True)
class UpDay:
    """One weekday in ramp-up and peak from a start: the threshold's hosts (a running
    maximum from the start), their prefix sums, and the floor each ramp-down start needs
    (the largest of the logons' needs before it) with the minute that sets it."""

    start: int
    hosts: list[int]
    prefix: list[int]
    floor: list[int]
    #: Per minute from the start: the floor the logons ``lead`` minutes later need.
    needs: list[int]

    def floor_at(self, span: int, lead: int) -> int:
        """The minute of the first logon that needs the floor of a ramp-down at
        ``start + span``."""
        wanted = self.floor[span]
        return self.start + self.needs.index(wanted, 0, span) + lead


class Model:
    """The model's figures of a week of demand, each computed once (see the module's
    docstring)."""

    def __init__(self, demand: Demand) -> None:
        self.demand = demand
        self.days = [Day(demand, w) for w in range(7)]
        self.reachable = reachable_hosts(demand.max_hosts)
        self._reach = [
            self.reachable[bisect.bisect_left(self.reachable, h)]
            for h in range(demand.max_hosts + 1)
        ]
        self._need: dict[tuple[int, int], list[int]] = {}
        self._day_need: dict[tuple[int, int], list[int]] = {}
        self._late: dict[int, list[list[tuple[int, int]]]] = {}
        self._group_up: dict[
            tuple[tuple[int, ...], int, int], tuple[dict[int, int], dict[int, int]]
        ] = {}
        self._down: dict[tuple[int, int], list[DownDay]] = {}
        self._up: dict[tuple[int, int, int], UpDay] = {}
        week_high = max(d.high for d in self.days)
        self.quiet = tuple(d.weekday for d in self.days if d.high <= QUIET_SHARE * week_high)

    def reach(self, hosts: int) -> int:
        """The smallest minimum a percent can give that is at least ``hosts``."""
        if hosts < len(self._reach):
            return self._reach[hosts]
        return self.demand.max_hosts + 1

    def need(self, weekday: int, threshold: int) -> list[int]:
        key = (weekday, threshold)
        if key not in self._need:
            d = self.demand
            self._need[key] = [
                _need(v, d.limit, threshold, d.max_hosts) for v in self.days[weekday].n
            ]
        return self._need[key]

    def day_need(self, index: int, threshold: int) -> list[int]:
        """need_T of a day of the history."""
        key = (index, threshold)
        if key not in self._day_need:
            d = self.demand
            days, _ = d.history()
            self._day_need[key] = [_need(v, d.limit, threshold, d.max_hosts) for v in days[index]]
        return self._day_need[key]

    def down(self, threshold: int, floor: int) -> list[DownDay]:
        """Every weekday under ramp-down's settings (the day before gives the hosts a
        logon just after midnight relies on)."""
        key = (threshold, floor)
        if key in self._down:
            return self._down[key]
        d = self.demand
        _, first_weekday = d.history()
        # Where each weekday's logons would wait too long, over all its days in the
        # history (see ``late``).
        first_bad: list[int | None] = [None] * 7
        last_bad: list[int | None] = [None] * 7
        if d.lead > 0:
            above = d.limit * floor  # what the minimum alone holds
            for index, late in enumerate(self.late(threshold)):
                bad = [t for t, v in late if v > above]
                if bad:
                    weekday = (first_weekday + index) % 7
                    first = first_bad[weekday]
                    last = last_bad[weekday]
                    first_bad[weekday] = bad[0] if first is None else min(first, bad[0])
                    last_bad[weekday] = bad[-1] if last is None else max(last, bad[-1])
        out: list[DownDay] = []
        for w in range(7):
            hosts = [max(floor, h) for h in self.need(w, threshold)]
            prefix = [0, *accumulate(hosts)]
            out.append(DownDay(hosts, prefix, first_bad[w], last_bad[w]))
        self._down[key] = out
        return out

    def group_up(
        self, weekdays: tuple[int, ...], threshold: int, start: int
    ) -> tuple[dict[int, int], dict[int, int]]:
        """For a schedule's days from a ramp-up start: the floor their logons need before
        a ramp-down ``span`` minutes later, and their threshold's host-minutes until
        then (the spans of the 15-minute grid; the same whatever ramp-down's settings)."""
        key = (weekdays, threshold, start)
        if key not in self._group_up:
            ups = [self.up(w, threshold, start) for w in weekdays]
            lead = max(self.demand.lead, 0)
            spans = range(2 * SLOT_MINUTES, MINUTES_A_DAY - start + 1, SLOT_MINUTES)
            floors = {
                max(0, span - lead): max(u.floor[max(0, span - lead)] for u in ups)
                for span in spans
            }
            sums = {span: sum(u.prefix[span] for u in ups) for span in spans}
            self._group_up[key] = (floors, sums)
        return self._group_up[key]

    def late(self, threshold: int) -> list[list[tuple[int, int]]]:
        """Per day of the history, the minutes (and sessions) whose logons would wait too
        long under ramp-down's threshold without a minimum: the hosts ready at t are
        those asked for by t - lead and not drained since, the least of [t - lead, t]
        (the day before's end just after midnight; none before the history). With a
        minimum m the ready hosts are max(m, that), so those of the minutes with more
        sessions than m hosts hold stay late."""
        if threshold in self._late:
            return self._late[threshold]
        d = self.demand
        days, _ = d.history()
        cap = d.max_hosts * d.limit
        out: list[list[tuple[int, int]]] = []
        before = [0] * MINUTES_A_DAY
        for index, values in enumerate(days):
            hosts = self.day_need(index, threshold)
            ready = window_min(before + hosts, d.lead)[MINUTES_A_DAY:]
            limit = d.limit
            out.append([(t, v) for t, v in enumerate(values) if v > limit * ready[t] and v <= cap])
            before = hosts
        self._late[threshold] = out
        return out

    def up(self, weekday: int, threshold: int, start: int) -> UpDay:
        key = (weekday, threshold, start)
        if key in self._up:
            return self._up[key]
        d = self.demand
        hosts = list(accumulate(self.need(weekday, threshold)[start:], max))
        prefix = [0, *accumulate(hosts)]
        # needs[i]: the floor the logons of minute start + i + lead need, on the worst of
        # this weekday's days in the history (0 where the threshold's hosts asked for at
        # start + i on that day hold them); floor[i]: the largest of needs[:i], what a
        # ramp-down at start + i needs. The hosts there at the start are not counted on:
        # a day may have fewer than the typical one.
        needs = [0] * len(hosts)
        if d.lead > 0:
            days, _ = d.history()
            limit, lead, cap = d.limit, d.lead, d.max_hosts * d.limit
            span = min(len(hosts), MINUTES_A_DAY - start - lead)
            for index in self.days[weekday].actual:
                n = days[index]
                own = accumulate(self.day_need(index, threshold)[start : start + span], max)
                wants = [
                    -(-v // limit) if limit * o < v <= cap else 0
                    for v, o in zip(n[start + lead : start + lead + span], own, strict=True)
                ]
                needs[:span] = map(max, needs[:span], wants)
        floor = [0, *accumulate(needs, max)]
        made = UpDay(start, hosts, prefix, floor, needs)
        self._up[key] = made
        return made


def lead_minutes(host_start_minutes: float, max_wait_minutes: float) -> int:
    """How far ahead hosts must be asked for, in whole minutes (see the module's
    docstring): none when a waiting request's host, asked for by the pass after it
    arrived, is ready within the wait; else the host's start and the pass, as if no logon
    could wait at all. A logon that waits is no session yet, so the threshold does not see
    it and asks for fewer hosts than the demand needs: letting the model count on the wait
    underestimates a storm."""
    if host_start_minutes + 1 <= max_wait_minutes:
        return 0
    return math.ceil(host_start_minutes + 1)
