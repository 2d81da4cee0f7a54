"""The plan recommender's search: the cheapest plan shape for a week of demand, judged by
the counting model (``plan_model``); the replay of the history then checks the finalists
(``recommend``).

The plan's shape: one ramp-down minimum and threshold for the whole plan (they also apply
through the nights and the unscheduled days, which makes the schedules independent),
and per schedule its days, ramp-up start (by the day's first logons), ramp-down start
(after the demand reached its high unless earlier is cheaper), the ramp-up minimum (the
smallest floor that keeps every logon of the ramp within the wait, given the threshold's
hosts) and threshold. Days with (almost) no demand may get no schedule: the previous
day's off-peak then runs through them. Peak and off-peak starts change only the
algorithm, which the replay chooses. The replay also tries the chosen shape with
ramp-down later (``later_ramp_downs``: the model counts a drained host gone at once).
Pure.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .demand_curve import MINUTES_A_DAY, SLOT_MINUTES
from .model import Demand, DownDay, Model, UpDay

#: The capacity thresholds tried, in ramp-up and peak and in ramp-down and off-peak.
UP_THRESHOLDS = (100, 90, 80, 70, 60, 50, 40)
DOWN_THRESHOLDS = (100, 90, 80, 70, 60, 50)
#: Ramp-down minimums tried: this many of the smallest a percent of maxHosts can give.
DOWN_FLOORS = 8
#: How much earlier than the latest possible start ramp-up starts are tried.
EARLIER_STARTS = 2
#: The last start of ramp-down: room for off-peak after it.
LAST_RAMP_DOWN = MINUTES_A_DAY - 2 * SLOT_MINUTES
#: A grouping with fewer schedules wins unless another is cheaper by more than this.
SIMPLER_BY = 0.01
#: Ramp-down starts after the demand's high unless an earlier start is cheaper by more.
CONVENTIONAL_BY = 0.01
#: The later ramp-down starts the replay tries (``later_ramp_downs``): from where the
#: demand stays at or under these shares of the day's high. One: its replay runs beside
#: the one of the shape that counts on half the wait, on the command line's two processes.
LATER_SHARES = (0.5,)

MONDAY_TO_FRIDAY = (0, 1, 2, 3, 4)
WEEKEND = (5, 6)


@dataclass(frozen=True, slots=True)
class ScheduleShape:
    """One schedule of a plan shape: its days and phase starts (minutes after local
    midnight) and ramp-up's minimum (hosts) and threshold."""

    days: tuple[int, ...]
    ramp_up: int
    peak: int
    ramp_down: int
    off_peak: int
    up_hosts: int
    up_threshold: int
    #: The host-minutes this schedule's days cost in the model.
    cost: float = 0.0
    #: Where the minimum comes from: the weekday and minute of the logon that needs it.
    floor_for: tuple[int, int] | None = None
    #: The model's ramp-down start, when the replay moved ramp-down later
    #: (``later_ramp_downs``); None: ramp-down starts where the model put it.
    model_ramp_down: int | None = None


@dataclass(frozen=True, slots=True)
class PlanShape:
    """A plan in the search's terms: schedules, the days left without one, and the
    ramp-down minimum (hosts) and threshold shared by every schedule."""

    schedules: tuple[ScheduleShape, ...]
    unscheduled: tuple[int, ...]
    down_hosts: int
    down_threshold: int
    #: Host-minutes of a typical week in the model.
    cost: float
    #: The groupings tried and their costs (for the reasons), cheapest first.
    alternatives: tuple[tuple[str, float], ...] = field(default=())


_DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def days_name(days: Sequence[int]) -> str:
    """A schedule's name from its days: weekdays, weekend, every-day, a day's name, a run
    of days (tuesday-to-friday) or the days joined (monday-wednesday)."""
    ordered = tuple(sorted(days))
    names = [_DAY_NAMES[d] for d in ordered]
    if ordered == MONDAY_TO_FRIDAY:
        return "weekdays"
    if ordered == WEEKEND:
        return "weekend"
    if len(ordered) == 7:
        return "every-day"
    if len(ordered) == 1:
        return names[0]
    if ordered == tuple(range(ordered[0], ordered[-1] + 1)):
        return f"{names[0]}-to-{names[-1]}"
    return "-".join(names)


def grouping_name(groups: Sequence[Sequence[int]], left: Sequence[int]) -> str:
    """How a grouping reads: its schedules, and the days left without one."""
    text = " + ".join(days_name(g) for g in sorted(groups, key=min))
    if left:
        text += f" ({days_name(left)} without a schedule)"
    return text


@dataclass(frozen=True, slots=True)
class _Days:
    """What every ramp-up candidate of one schedule's days shares under the ramp-down
    settings: each weekday under them, the lead, the first ramp-down start their logons
    allow, and ramp-down's hosts summed over the days up to each start of the grid."""

    weekdays: tuple[int, ...]
    downs: list[DownDay]
    lead: int
    earliest_down: int
    #: The minutes before ramp-up and from ramp-down on cost the same whatever ramp-up
    #: does; starts are on the 15-minute grid, so the sums are kept there only.
    down_sum: dict[int, int]


@dataclass(frozen=True, slots=True)
class _Floor:
    """A ramp-up minimum (``floor``) against the threshold's hosts of each day from one
    start: the hosts there from the start (``own``: the minimum, or ramp-down's hosts
    carried over when more), the minute the threshold's hosts reach them (``reached``;
    the last of the days: ``until``) and the host-minutes they add before that
    (``extra``)."""

    floor: int
    ups: list[UpDay]
    own: list[int]
    reached: list[int]
    until: int
    extra: int

    @classmethod
    def of(cls, ups: list[UpDay], carry: list[int], floor: int) -> _Floor:
        own = [max(floor, c) for c in carry]
        reached = [bisect.bisect_left(u.hosts, o) for u, o in zip(ups, own, strict=True)]
        extra = sum(o * j - u.prefix[j] for u, o, j in zip(ups, own, reached, strict=True))
        return cls(floor, ups, own, reached, max(reached), extra)

    def added(self, span: int) -> int:
        """The host-minutes the minimum adds over the threshold's hosts in the first
        ``span`` minutes."""
        if span >= self.until:
            return self.extra
        added = 0
        for u, o, j in zip(self.ups, self.own, self.reached, strict=True):
            k = min(j, span)
            added += o * k - u.prefix[k]
        return added


@dataclass(slots=True)
class _Cheapest:
    """The cheapest schedule found so far, and the cheapest whose ramp-down starts after
    the demand's high (``after_high``): that one reads as a plan is expected to, and is
    kept unless starting earlier saves more than ``CONVENTIONAL_BY``."""

    after_high: int
    best: ScheduleShape | None = None
    conventional: ScheduleShape | None = None

    def improves(self, cost: float, ramp_down: int) -> bool:
        best, conventional = self.best, self.conventional
        return (
            best is None
            or cost < best.cost
            or (ramp_down >= self.after_high and (conventional is None or cost < conventional.cost))
        )

    def offer(self, shape: ScheduleShape) -> None:
        if self.best is None or shape.cost < self.best.cost:
            self.best = shape
        if shape.ramp_down >= self.after_high and (
            self.conventional is None or shape.cost < self.conventional.cost
        ):
            self.conventional = shape

    def chosen(self) -> ScheduleShape | None:
        best, conventional = self.best, self.conventional
        if (
            conventional is not None
            and best is not None
            and conventional.cost <= best.cost * (1 + CONVENTIONAL_BY)
        ):
            return conventional
        return best


class Search:
    """The search over one week of demand (see the module's docstring), judged by the
    model of that week."""

    def __init__(self, demand: Demand) -> None:
        self.model = Model(demand)
        self._schedules: dict[tuple[tuple[int, ...], int, int], ScheduleShape | None] = {}

    # -------------------------------------------------------------- one schedule

    def schedule(
        self, weekdays: Sequence[int], down_threshold: int, down_floor: int
    ) -> ScheduleShape | None:
        """The cheapest schedule for these weekdays under the given ramp-down settings;
        None when none keeps their logons within the wait."""
        key = (tuple(weekdays), down_threshold, down_floor)
        if key not in self._schedules:
            self._schedules[key] = self._schedule(weekdays, down_threshold, down_floor)
        return self._schedules[key]

    def _schedule(
        self, weekdays: Sequence[int], down_threshold: int, down_floor: int
    ) -> ScheduleShape | None:
        model = self.model
        downs = model.down(down_threshold, down_floor)
        lead = max(model.demand.lead, 0)
        latest, earliest_down = self._bounds(weekdays, downs, lead)
        if latest < 0:
            return None
        days = _Days(
            weekdays=tuple(weekdays),
            downs=downs,
            lead=lead,
            earliest_down=earliest_down,
            down_sum={
                t: sum(downs[w].prefix[t] for w in weekdays)
                for t in range(0, MINUTES_A_DAY + 1, SLOT_MINUTES)
            },
        )
        cheapest = _Cheapest(after_high=max(model.days[w].top for w in weekdays))
        starts = [latest - k * SLOT_MINUTES for k in range(EARLIER_STARTS + 1)]
        for threshold in UP_THRESHOLDS:
            for start in starts:
                if start >= 0:
                    self._ramp_downs(days, threshold, start, cheapest)
        chosen = cheapest.chosen()
        return None if chosen is None else self._anchored(chosen)

    def _bounds(self, weekdays: Sequence[int], downs: list[DownDay], lead: int) -> tuple[int, int]:
        """The latest ramp-up start (on the grid; negative: none) and the earliest
        ramp-down start the days' logons allow under ramp-down's settings."""
        latest = min(
            min(self.model.days[w].rise for w in weekdays), MINUTES_A_DAY - 4 * SLOT_MINUTES
        )
        earliest_down = 0
        for w in weekdays:
            first, last = downs[w].first_bad, downs[w].last_bad
            if first is not None:
                latest = min(latest, first - lead)
            if last is not None:
                # Ramp-down drains at once: from its start the logons rely on its hosts.
                earliest_down = max(earliest_down, last + 1)
        return latest // SLOT_MINUTES * SLOT_MINUTES, earliest_down

    def _ramp_downs(self, days: _Days, threshold: int, start: int, cheapest: _Cheapest) -> None:
        """Every ramp-down start after a ramp-up at ``start`` with ``threshold``, each with
        the smallest minimum that keeps the ramp's logons in time, offered to
        ``cheapest``."""
        model = self.model
        weekdays, lead, down_sum = days.weekdays, days.lead, days.down_sum
        ups = [model.up(w, threshold, start) for w in weekdays]
        floors, up_sums = model.group_up(weekdays, threshold, start)
        carry = [days.downs[w].hosts[start] for w in weekdays]
        first_down = max(start + 2 * SLOT_MINUTES, days.earliest_down)
        first_down = -(-first_down // SLOT_MINUTES) * SLOT_MINUTES
        # The minimum changes seldom from one ramp-down start to the next: its figures are
        # kept until it does.
        above: _Floor | None = None
        for ramp_down in range(first_down, LAST_RAMP_DOWN + 1, SLOT_MINUTES):
            span = ramp_down - start
            # The floor is for the logons before ramp-down (from it on they are
            # ramp-down's: its drains come at once).
            upto = max(0, span - lead)
            wanted = floors[upto]
            floor = model.reach(wanted) if wanted > 0 else 0
            if floor > model.demand.max_hosts:
                continue
            if above is None or floor != above.floor:
                above = _Floor.of(ups, carry, floor)
            # Up: sum over [start, ramp_down) of max(own, threshold's hosts).
            cost = float(
                up_sums[span] + down_sum[start] + down_sum[MINUTES_A_DAY] - down_sum[ramp_down]
            )
            cost += above.added(span)
            if cheapest.improves(cost, ramp_down):
                cheapest.offer(
                    ScheduleShape(
                        days=weekdays,
                        ramp_up=start,
                        peak=start,  # set by _anchored
                        ramp_down=ramp_down,
                        off_peak=ramp_down,
                        up_hosts=floor,
                        up_threshold=threshold,
                        cost=cost,
                        floor_for=_floor_for(weekdays, ups, upto, lead) if wanted > 0 else None,
                    )
                )

    def _anchored(self, shape: ScheduleShape) -> ScheduleShape:
        """Peak from when the demand is at its high, off-peak from when it is quiet again
        (both only change the algorithm), kept inside the schedule's order."""
        top = min(self.model.days[w].top for w in shape.days)
        fall = max(self.model.days[w].fall for w in shape.days)
        peak = -(-top // SLOT_MINUTES) * SLOT_MINUTES
        peak = min(max(peak, shape.ramp_up + SLOT_MINUTES), shape.ramp_down - SLOT_MINUTES)
        off = -(-fall // SLOT_MINUTES) * SLOT_MINUTES
        off = min(max(off, shape.ramp_down + SLOT_MINUTES), MINUTES_A_DAY - SLOT_MINUTES)
        return ScheduleShape(
            days=shape.days,
            ramp_up=shape.ramp_up,
            peak=peak,
            ramp_down=shape.ramp_down,
            off_peak=off,
            up_hosts=shape.up_hosts,
            up_threshold=shape.up_threshold,
            cost=shape.cost,
            floor_for=shape.floor_for,
        )

    # -------------------------------------------------------------- the plan

    def groupings(self) -> list[tuple[str, list[tuple[int, ...]], tuple[int, ...]]]:
        """(name, groups of weekdays with a schedule, weekdays without one) to try."""
        busy = [w for w in range(7) if w not in self.model.quiet]
        quiet = list(self.model.quiet)
        if not busy:
            busy, quiet = quiet, []

        def split(*parts: Sequence[int]) -> list[tuple[int, ...]]:
            rest = [w for w in busy if not any(w in p for p in parts)]
            groups = [tuple(w for w in p if w in busy) for p in parts]
            return [g for g in [*groups, tuple(rest)] if g]

        shapes: list[list[tuple[int, ...]]] = [
            split(),
            split(MONDAY_TO_FRIDAY),
            split((0,), (1, 2, 3, 4)),
            [(w,) for w in busy],
        ]
        out: list[tuple[str, list[tuple[int, ...]], tuple[int, ...]]] = []
        seen: set[tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]] = set()
        for groups in shapes:
            variants: list[tuple[list[tuple[int, ...]], tuple[int, ...]]] = [(groups, tuple(quiet))]
            if quiet:
                variants.append(([*groups, tuple(quiet)], ()))
            for g, left in variants:
                key = (tuple(sorted(g)), left)
                if key not in seen:
                    seen.add(key)
                    out.append((grouping_name(g, left), g, left))
        return out

    def plan(self) -> PlanShape | None:
        """The cheapest plan shape, preferring fewer schedules within ``SIMPLER_BY``;
        None when no shape keeps the logons within the wait."""
        tried: list[tuple[float, int, str, PlanShape]] = []
        for name, groups, left in self.groupings():
            best: PlanShape | None = None
            for down_threshold in DOWN_THRESHOLDS:
                for floor in self.model.reachable[:DOWN_FLOORS]:
                    if best is not None and floor * 7 * MINUTES_A_DAY >= best.cost:
                        break  # the minimum alone, all week, costs more
                    shape = self._plan_for(groups, left, down_threshold, floor)
                    if shape is not None and (best is None or shape.cost < best.cost):
                        best = shape
            if best is not None:
                tried.append((best.cost, len(best.schedules), name, best))
        if not tried:
            return None
        cheapest = min(cost for cost, _, _, _ in tried)
        within = [t for t in tried if t[0] <= cheapest * (1 + SIMPLER_BY)]
        _, _, _, chosen = min(within, key=lambda t: (t[1], t[0]))
        alternatives = tuple((name, cost) for cost, _, name, _ in sorted(tried, key=lambda t: t[0]))
        return PlanShape(
            chosen.schedules,
            chosen.unscheduled,
            chosen.down_hosts,
            chosen.down_threshold,
            chosen.cost,
            alternatives,
        )

    def _plan_for(
        self,
        groups: list[tuple[int, ...]],
        left: tuple[int, ...],
        down_threshold: int,
        down_floor: int,
    ) -> PlanShape | None:
        downs = self.model.down(down_threshold, down_floor)
        cost = 0.0
        for w in left:
            if downs[w].first_bad is not None:
                return None
            cost += downs[w].prefix[MINUTES_A_DAY]
        schedules: list[ScheduleShape] = []
        for group in groups:
            shape = self.schedule(group, down_threshold, down_floor)
            if shape is None:
                return None
            schedules.append(shape)
            cost += shape.cost
        return PlanShape(tuple(schedules), left, down_floor, down_threshold, cost)


def _floor_for(
    weekdays: tuple[int, ...], ups: list[UpDay], upto: int, lead: int
) -> tuple[int, int]:
    """Where a ramp-up minimum comes from: the day whose logons before ramp-down need the
    most, and the minute of the first logon that needs it."""
    i = max(range(len(ups)), key=lambda k: ups[k].floor[upto])
    return weekdays[i], ups[i].floor_at(upto, lead)


def later_ramp_downs(shape: PlanShape, week: Sequence[Sequence[int]]) -> list[PlanShape]:
    """The shape with ramp-down later, one shape per share of ``LATER_SHARES``: each
    schedule's ramp-down from the first start of the grid (after the model's) from which
    its days' demand (``week``: sessions per weekday and minute; the highest of the days)
    stays at or under that share of its high; off-peak after it. The model counts a
    drained host gone at once, so an early ramp-down looks cheapest; but the host with
    the fewest sessions may hold a long one, and as its sessions count toward used
    capacity the other hosts stay up too, emptied or not. Later, fewer sessions are left
    and empty hosts are drained. Shapes equal to ``shape`` or to one before are left
    out."""
    out: list[PlanShape] = []
    seen = {tuple(s.ramp_down for s in shape.schedules)}
    for share in LATER_SHARES:
        schedules = tuple(_later(s, week, share) for s in shape.schedules)
        starts = tuple(s.ramp_down for s in schedules)
        if starts not in seen:
            seen.add(starts)
            out.append(
                PlanShape(
                    schedules,
                    shape.unscheduled,
                    shape.down_hosts,
                    shape.down_threshold,
                    shape.cost,
                    shape.alternatives,
                )
            )
    return out


def _later(shape: ScheduleShape, week: Sequence[Sequence[int]], share: float) -> ScheduleShape:
    """One schedule with ramp-down where its days' demand stays at or under ``share`` of
    its high, on the grid, not before the model's start nor after ``LAST_RAMP_DOWN``."""
    demand = [max(week[w][t] for w in shape.days) for t in range(MINUTES_A_DAY)]
    high = max(demand)
    start = shape.ramp_down
    above = [t for t in range(start, MINUTES_A_DAY) if demand[t] > share * high]
    settled = -(-(above[-1] + 1) // SLOT_MINUTES) * SLOT_MINUTES if above else start
    ramp_down = min(settled, LAST_RAMP_DOWN)
    if ramp_down <= start:
        return shape
    return replace(
        shape,
        ramp_down=ramp_down,
        off_peak=max(shape.off_peak, ramp_down + SLOT_MINUTES),
        model_ramp_down=start,
    )
