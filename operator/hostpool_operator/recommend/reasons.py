"""Why the recommended plan is what it is: one line per finding, per schedule and phase,
and on the replays (the ``reasons`` of ``recommend-plan``). Pure text from figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from ..api import LoadBalancerType
from ..api.plan import WEEKDAYS, ScalingPlanSpec, Schedule
from ..scaling.plans import minimum_hosts
from .demand_curve import DemandCurve
from .model import FALL_SHARE, RISE_SHARE, TOP_SHARE
from .search import SIMPLER_BY, PlanShape, ScheduleShape


class Replayed(Protocol):
    """What the reasons read of a replay (``evaluation.Evaluation``)."""

    @property
    def host_hours(self) -> float: ...

    @property
    def waits(self) -> dict[str, float]: ...

    @property
    def waited_over(self) -> int: ...

    @property
    def waited_over_percent(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Figures:
    """The history's and the run's figures the reasons quote."""

    sessions: int
    users: int
    days: int
    first: datetime
    weeks: tuple[int, ...]
    peak: int
    limit: int
    max_hosts: int
    max_wait_minutes: float
    host_start_minutes: float
    lead: int
    #: The curve the plan is sized for ("robust", "envelope" or "hold") and its factor.
    curve: str
    factor: float
    #: Curves tried before: (curve, factor, logons over the bound, worst wait).
    tried: tuple[tuple[str, float, int, float], ...]
    always_on_hosts: int
    unservable: tuple[tuple[str, datetime, float], ...]
    #: The plan only follows the demand (the replay showed that hosts asked for when
    #: requests wait come in time), rather than asking for hosts ahead of it.
    follows_demand: bool = False


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _days(days: Sequence[int]) -> str:
    names = [WEEKDAYS[d].value for d in sorted(days)]
    if len(names) > 2 and sorted(days) == list(range(min(days), max(days) + 1)):
        return f"{names[0]} to {names[-1]}"
    return ", ".join(names)


def _minutes(value: float) -> str:
    return f"{value:g} min"


def _first(values: Sequence[int], share: float, high: int, start: int = 0) -> int | None:
    return next((t for t in range(start, len(values)) if values[t] > share * high), None)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The plan the reasons explain and the replays they quote."""

    #: The plan in the search's terms; None: no shape kept the bound, so the plan keeps
    #: the always-on hosts (the last resort).
    shape: PlanShape | None
    spec: ScalingPlanSpec
    #: The plan's replay and the baselines'.
    evaluated: Replayed
    no_plan: Replayed
    always_on: Replayed
    #: The other algorithm's replay of the same schedules, and the chosen one's.
    others: Mapping[LoadBalancerType, tuple[Replayed, Replayed]] = field(default_factory=dict)
    #: The replay with ramp-down where the model put it, when a later start replayed
    #: cheaper (``search.later_ramp_downs``).
    unmoved: Replayed | None = None


def explain(figures: Figures, curve: DemandCurve, outcome: Outcome) -> list[str]:
    """The reasons: the history, the curve, each schedule and phase, the algorithm, the
    replays."""
    f = figures
    shape, spec, evaluated = outcome.shape, outcome.spec, outcome.evaluated
    no_plan, always_on, others = outcome.no_plan, outcome.always_on, outcome.others
    reasons = [
        f"History: {f.sessions} sessions of {f.users} users over {f.days} days from "
        f"{f.first:%Y-%m-%d} ({spec.time_zone}); at most {f.peak} at once, "
        f"{-(-f.peak // f.limit)} hosts of {f.limit} sessions (maxHosts {f.max_hosts})."
    ]
    weeks = sorted(set(f.weeks))
    reasons.append(
        "Demand per weekday and 15-minute slot: at each minute the second highest of the "
        f"weeks (with 3 or more of a weekday; this history has {weeks[0]}"
        + (f" to {weeks[-1]}" if len(weeks) > 1 else "")
        + "), so one odd day does not set what the plan costs; every day of the history, "
        "odd ones included, must be served in time, and the replay checks it."
    )
    for _, factor, over, worst in f.tried[:-1] if f.curve != "hold" else f.tried:
        raised = f" raised by {round(100 * (factor - 1))} %" if factor != 1.0 else ""
        reasons.append(
            f"A plan for the demand{raised} left {over} logons waiting over "
            f"{_minutes(f.max_wait_minutes)} in the replay (worst {_minutes(worst)}); the "
            "search ran again on a higher demand."
        )
    if f.curve != "hold" and f.factor != 1.0:
        reasons.append(
            f"The plan is for the demand raised by {round(100 * (f.factor - 1))} %: what the "
            "model does not see (seconds within a minute, drained hosts that linger, "
            "sessions that start late after a wait) needed it."
        )
    if shape is None:
        reasons.append(
            f"No plan shape kept every logon within {_minutes(f.max_wait_minutes)}: the plan "
            f"keeps the history's peak of {f.always_on_hosts} hosts all day, every day "
            "(the always-on baseline), the pool's own scaling adding for waiting requests."
        )
    else:
        if f.follows_demand:
            reasons.append(
                "The pool's own scaling keeps every logon within the bound in the replay, so "
                "the plan only follows the demand (no hosts asked for ahead of it): it kept "
                "the bound too, more cheaply than a plan that plans for the worst minute."
            )
        reasons.extend(_schedules(f, curve, shape, spec, outcome.unmoved))
        if others:
            ((other, (replayed, base)),) = others.items()
            chosen = spec.schedules[0].ramp_up.load_balancer_type
            delta = replayed.host_hours - base.host_hours
            if replayed.waited_over > base.waited_over:
                why = f"it left {replayed.waited_over} logons waiting over the bound"
            else:
                share = 100 * delta / base.host_hours if base.host_hours else 0.0
                why = f"the same schedules replay at {delta:+.1f} host-hours ({share:+.1f} %)"
            reasons.append(
                f"Ramp-up and peak place with {chosen.value}: with {other.value} {why}"
                + (
                    " (ties go to breadth-first, which spreads users over the hosts)."
                    if chosen is LoadBalancerType.BREADTH_FIRST
                    else "."
                )
            )
    reasons.append(
        f"Replay of the whole history (a pass a minute; an added host takes sessions "
        f"{_minutes(f.host_start_minutes)} later): {evaluated.host_hours:g} host-hours; "
        f"{evaluated.waited_over} logons waited over {_minutes(f.max_wait_minutes)} "
        f"(worst {_minutes(evaluated.waits['max'])}, p99 {_minutes(evaluated.waits['p99'])})."
    )
    reasons.append(
        f"Baselines: no plan (the pool's own scaling) {no_plan.host_hours:g} host-hours, "
        f"{no_plan.waited_over_percent:g} % of logons over the bound (worst "
        f"{_minutes(no_plan.waits['max'])}); always on ({f.always_on_hosts} hosts) "
        f"{always_on.host_hours:g} host-hours (worst {_minutes(always_on.waits['max'])})."
    )
    reasons.extend(_own_scaling_cheaper(f, evaluated, no_plan))
    if f.unservable:
        named = ", ".join(
            f"{user} at {when:%Y-%m-%d %H:%M}Z ({_minutes(wait)})"
            for user, when, wait in f.unservable[:5]
        )
        more = f" and {len(f.unservable) - 5} more" if len(f.unservable) > 5 else ""
        reasons.append(
            f"{len(f.unservable)} logons wait over {_minutes(f.max_wait_minutes)} even with "
            f"all {f.max_hosts} hosts always on (more sessions than maxHosts x "
            f"maxSessionLimit): {named}{more}."
        )
    return reasons


#: Within this factor of the pool's own scaling a plan's cost is not worth a word: the
#: minutes between a drain and a deletion alone cost that much.
OWN_SCALING_MARGIN = 1.05


def _own_scaling_cheaper(f: Figures, evaluated: Replayed, no_plan: Replayed) -> list[str]:
    """Say so when the pool's own scaling keeps the bound more cheaply than the plan: a
    plan's ramp-down counts a drained host's sessions while they last, so an emptied host
    that still takes sessions can stay on beside it, where the pool's own scaling stops
    every empty host (a plan's rule 5, which no plan shape avoids)."""
    if no_plan.waited_over > len(f.unservable) or evaluated.host_hours <= OWN_SCALING_MARGIN * (
        no_plan.host_hours
    ):
        return []
    more = evaluated.host_hours - no_plan.host_hours
    share = 100 * more / no_plan.host_hours if no_plan.host_hours else 0.0
    return [
        f"The pool's own scaling keeps the bound more cheaply than this plan: "
        f"{no_plan.host_hours:g} host-hours, {more:.1f} fewer ({share:.1f} %). Under a plan, "
        "ramp-down keeps counting a drained host's sessions until they end, so a host "
        "emptied meanwhile can stay on beside it; the pool's own scaling stops every empty "
        "host. For cost alone, keep the pool without a plan; the plan is for its schedule."
    ]


def _schedules(
    f: Figures,
    curve: DemandCurve,
    shape: PlanShape,
    spec: ScalingPlanSpec,
    unmoved: Replayed | None = None,
) -> list[str]:
    out: list[str] = []
    names = {tuple(sorted(d.days_of_week)): d for d in spec.schedules}
    listed = "; ".join(
        f"{s.name} ({_days([WEEKDAYS.index(d) for d in s.days_of_week])})" for s in spec.schedules
    )
    out.append(f"Schedules: {listed}.")
    if len(shape.alternatives) > 1:
        chosen = next(
            (name, cost) for name, cost in shape.alternatives if abs(cost - shape.cost) < 1e-6
        )
        cheapest_name, cheapest = shape.alternatives[0]
        if cheapest < shape.cost - 1e-6:
            out.append(
                f"Grouping: {chosen[0]}; {cheapest_name} would cost "
                f"{100 * (shape.cost - cheapest) / shape.cost:.1f} % less in the model, "
                f"within {100 * SIMPLER_BY:g} %, so fewer schedules."
            )
        else:
            runner_up = next(((n, c) for n, c in shape.alternatives if n != chosen[0]), None)
            if runner_up is not None and shape.cost:
                out.append(
                    f"Grouping: {chosen[0]}, the cheapest in the model ({runner_up[0]}: "
                    f"+{100 * (runner_up[1] - shape.cost) / shape.cost:.1f} %)."
                )
    if shape.unscheduled:
        high = max(max(curve.robust[d]) for d in shape.unscheduled)
        out.append(
            f"{_days(shape.unscheduled)}: no schedule (at most {high} sessions at once): "
            "the off-peak before runs through, with ramp-down's settings."
        )
    lead = f.lead
    for s in sorted(shape.schedules, key=lambda s: min(s.days)):
        schedule = names[tuple(sorted(WEEKDAYS[d] for d in s.days))]
        high = max(max(curve.robust[d]) for d in s.days)
        first = min(
            (
                t
                for d in s.days
                if (t := _first(curve.robust[d], RISE_SHARE, max(curve.robust[d]))) is not None
            ),
            default=s.ramp_up,
        )
        up = schedule.ramp_up
        k = minimum_hosts(f.max_hosts, up.minimum_hosts_percent)
        text = (
            f"{schedule.name} rampUp {up.start_time}: logons start coming at {_clock(first)} "
            f"(over {100 * RISE_SHARE:g} % of the day's high of {high} sessions)"
        )
        if lead > 0:
            counted = f.host_start_minutes + 1 - lead
            text += (
                f"; an added host takes sessions {_minutes(f.host_start_minutes)} later (and "
                "the pass that asks for it comes up to a minute after the logon), so hosts "
                f"are asked for {lead} min ahead"
                + (
                    f", counting on {_minutes(counted)} of the {_minutes(f.max_wait_minutes)} "
                    "a logon may wait"
                    if counted > 0
                    else " (a waiting request is no session yet: the threshold does not see "
                    "it, so the plan does not count on the wait)"
                )
            )
        if k and s.floor_for is not None:
            weekday, minute = s.floor_for
            text += (
                f"; minimum {up.minimum_hosts_percent} % ({k} of {f.max_hosts} hosts), asked "
                f"for at the start: the logons up to {WEEKDAYS[weekday].value} "
                f"{_clock(minute)} need them before the threshold's hosts are ready"
            )
        else:
            text += f"; minimum {up.minimum_hosts_percent} %: the threshold's hosts come in time"
        if up.capacity_threshold_percent < 100:
            text += (
                f"; capacity threshold {up.capacity_threshold_percent} %: hosts are added "
                f"while {100 - up.capacity_threshold_percent} % of the slots are still free"
            )
        else:
            text += "; capacity threshold 100 %: hosts are added once every slot is taken"
        text += " (the cheapest threshold and minimum that keep the ramp's logons in time)."
        out.append(text)
        out.append(
            f"{schedule.name} peak {schedule.peak.start_time}: the demand is at "
            f"{100 * TOP_SHARE:g} % of its high by then; ramp-up's minimum and threshold "
            "go on, and no host is removed until ramp-down."
        )
        out.append(_ramp_down(curve, s, schedule, unmoved))
        out.append(
            f"{schedule.name} offPeak {schedule.off_peak.start_time}: the demand is under "
            f"{100 * FALL_SHARE:g} % of its high; ramp-down's settings go on until the next "
            "ramp-up."
        )
    down = spec.schedules[0].ramp_down
    k = minimum_hosts(f.max_hosts, down.minimum_hosts_percent)
    out.append(
        f"Ramp-down and off-peak, every schedule: minimum {down.minimum_hosts_percent} % "
        f"({k} hosts), capacity threshold {down.capacity_threshold_percent} %, DepthFirst "
        "(it fills the fullest hosts, so drained ones empty and go), nobody logged off: the "
        "cheapest pair that keeps the evenings' and nights' logons in time."
    )
    return out


def _ramp_down(
    curve: DemandCurve, s: ScheduleShape, schedule: Schedule, unmoved: Replayed | None
) -> str:
    """Why a schedule's ramp-down starts when it does: the model's cheapest start, or
    later, where the replay was cheaper (``search.later_ramp_downs``)."""
    down = schedule.ramp_down
    follows = (
        ": from then on the pool follows the demand down as well as up, and no later logon "
        "needs hosts asked for ahead of the threshold's."
    )
    if s.model_ramp_down is not None and unmoved is not None:
        return (
            f"{schedule.name} rampDown {down.start_time}: later than the model's cheapest "
            f"start ({_clock(s.model_ramp_down)}), once the demand has fallen; the model "
            "counts a drained host gone at once, but a host drained earlier may still hold "
            "a long session, and its sessions keep the other hosts up, emptied or not (the "
            f"replay with the model's starts: {unmoved.host_hours:g} host-hours)" + follows
        )
    top = max(
        next(
            (t for t, v in enumerate(curve.robust[d]) if v >= TOP_SHARE * max(curve.robust[d])),
            0,
        )
        for d in s.days
    )
    when = "after the demand's high" if s.ramp_down >= top else "before the demand's high"
    return (
        f"{schedule.name} rampDown {down.start_time}: the cheapest start in the model, {when}"
        + follows
    )
