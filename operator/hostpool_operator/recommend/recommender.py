"""The plan recommender: from a pool's session history, the scaling plan with the fewest
host-hours whose replay keeps every logon within a wait (the contract's "Recommending a
scaling plan"; ``hostpool-operator recommend-plan`` reads the files and prints).

1. The history's demand per local weekday and minute (``demand_curve``: the second highest
   week, so one odd day moves what a plan costs little; every day is kept as well).
2. The search (``search`` over ``model``) finds the cheapest plan shape: cost on
   the typical week, every day of the history served in time.
3. The replay (``simulate.replay``: the engine, the plan rules and the pool's scaling,
   hosts ready ``hostStartMinutes`` after they are added, a pass a minute) runs the whole
   history through the plan, with breadth-first and with depth-first in ramp-up and peak; the
   cheaper that keeps the bound wins. A shape that counts on half the wait is replayed as
   well, and so is the chosen one with ramp-down later, once the demand has fallen (the
   model counts a drained host gone at once); either is kept when it keeps the bound for
   less. Should none keep it (the model's approximations), the search runs again on a
   raised demand. The baselines: the pool's own scaling without a plan (replayed) and the
   history's peak of hosts always on (its replay's outcome is known: nobody waits).

Replays are started through a ``Runner`` (``evaluation``) while the search goes on; the
command line runs them on two processes. ``evaluate_plan`` replays a given plan the same
way. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from ..api import API_VERSION, HostPoolSpec, LoadBalancerType
from ..api.base import MAX_NAME
from ..api.plan import WEEKDAYS, PlanRules, ScalingPlanSpec, zone_of
from ..simulate.replay import replay
from ..simulate.replay_state import ReplayInput, ReplayResult
from ..simulate.waits import wait_table
from .demand_curve import SLOTS_A_DAY, DemandCurve, Frame, demand_curve, frame_of, peak_concurrency
from .evaluation import Evaluation, Replays, Runner, evaluation, run_serially
from .history import PastSession
from .model import Demand, lead_minutes, percent_for
from .reasons import Figures, Outcome, explain
from .search import PlanShape, Search, days_name, later_ramp_downs

#: The demand the search is given in turn until a plan's replay keeps the bound: as
#: recorded, then raised (for what the model does not see: seconds within a minute,
#: drained hosts that linger, sessions that start late after a wait).
FACTORS = (1.0, 1.1, 1.25, 1.5, 2.0)


@dataclass(frozen=True, slots=True)
class Options:
    """The command's options: the wait bound, how long a new host takes to start, and
    the plan's time zone (the history's weekdays and times are read in it)."""

    max_wait_minutes: float = 5.0
    host_start_minutes: float = 0.0
    time_zone: str = "UTC"


class RecommendError(ValueError):
    """The pool cannot follow a plan (the message names the field)."""


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The plan, its replay, the two baselines, and why."""

    pool: str
    spec: ScalingPlanSpec
    evaluation: Evaluation
    no_plan: Evaluation
    always_on: Evaluation
    always_on_hosts: int
    reasons: tuple[str, ...]
    #: Logons that wait over the bound even with every host of maxHosts always on:
    #: (user, start, minutes waited).
    unservable: tuple[tuple[str, datetime, float], ...]
    #: The demand per weekday and slot (robust), and the pool's limit (for the plot).
    demand: tuple[list[int], ...]
    limit: int

    def to_json(self) -> dict[str, Any]:
        """The contract's JSON: plan, evaluation, baselines, reasons."""
        return {
            "plan": self.spec.to_api(),
            "evaluation": self.evaluation.to_json(),
            "baselines": {
                "noPlan": self.no_plan.to_json(),
                "alwaysOn": self.always_on.to_json(),
            },
            "reasons": list(self.reasons),
        }

    def manifest(self, namespace: str | None = None) -> dict[str, Any]:
        """The ScalingPlan manifest for the pool."""
        metadata: dict[str, Any] = {"name": plan_name(self.pool)}
        if namespace:
            metadata["namespace"] = namespace
        return {
            "apiVersion": API_VERSION,
            "kind": "ScalingPlan",
            "metadata": metadata,
            "spec": self.spec.to_api(),
        }


def plan_name(pool: str) -> str:
    return f"{pool[: MAX_NAME - len('-recommended')]}-recommended"


# ------------------------------------------------------------------------------ plans


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def plan_spec(
    shape: PlanShape,
    pool: str,
    zone: str,
    max_hosts: int,
    up_algorithm: LoadBalancerType,
) -> ScalingPlanSpec:
    """The ScalingPlan spec of a shape: ramp-up and peak with ``up_algorithm``, ramp-down
    and off-peak depth-first (it fills the fullest hosts, so drained ones empty), users
    never logged off (the history says when they leave)."""
    schedules = []
    down = LoadBalancerType.DEPTH_FIRST.value
    for s in sorted(shape.schedules, key=lambda s: min(s.days)):
        schedules.append(
            {
                "name": days_name(s.days),
                "daysOfWeek": [WEEKDAYS[d].value for d in sorted(s.days)],
                "rampUp": {
                    "startTime": _clock(s.ramp_up),
                    "loadBalancerType": up_algorithm.value,
                    "minimumHostsPercent": percent_for(s.up_hosts, max_hosts),
                    "capacityThresholdPercent": s.up_threshold,
                },
                "peak": {"startTime": _clock(s.peak), "loadBalancerType": up_algorithm.value},
                "rampDown": {
                    "startTime": _clock(s.ramp_down),
                    "loadBalancerType": down,
                    "minimumHostsPercent": percent_for(shape.down_hosts, max_hosts),
                    "capacityThresholdPercent": shape.down_threshold,
                    "forceLogoffUsers": False,
                    "stopHostsWhen": "ZeroSessions",
                },
                "offPeak": {"startTime": _clock(s.off_peak), "loadBalancerType": down},
            }
        )
    return ScalingPlanSpec.model_validate(
        {"timeZone": zone, "hostPoolRefs": [{"name": pool}], "schedules": schedules}
    )


def hold_spec(pool: str, zone: str, max_hosts: int, hosts: int) -> ScalingPlanSpec:
    """The last resort: every day, ``hosts`` kept all the time (as the always-on
    baseline), the pool's own scaling adding for waiting requests."""
    percent = percent_for(hosts, max_hosts)
    return ScalingPlanSpec.model_validate(
        {
            "timeZone": zone,
            "hostPoolRefs": [{"name": pool}],
            "schedules": [
                {
                    "name": "every-day",
                    "daysOfWeek": [d.value for d in WEEKDAYS],
                    "rampUp": {
                        "startTime": "00:00",
                        "loadBalancerType": "DepthFirst",
                        "minimumHostsPercent": percent,
                        "capacityThresholdPercent": 100,
                    },
                    "peak": {"startTime": "00:15", "loadBalancerType": "DepthFirst"},
                    "rampDown": {
                        "startTime": "00:30",
                        "loadBalancerType": "DepthFirst",
                        "minimumHostsPercent": percent,
                        "capacityThresholdPercent": 100,
                    },
                    "offPeak": {"startTime": "00:45", "loadBalancerType": "DepthFirst"},
                }
            ],
        }
    )


def _raised(week: Sequence[Sequence[int]], factor: float) -> tuple[list[int], ...]:
    return tuple([math.ceil(v * factor) for v in day] for day in week)


def check_pool(pool: HostPoolSpec) -> tuple[int, int]:
    """(maxSessionLimit, maxHosts) of a pool a plan can manage; RecommendError naming the
    field otherwise (the plan's ScalingRequired)."""
    if pool.scaling is None:
        raise RecommendError(
            "spec.scaling: a pool that follows a plan needs scaling (maxHosts bounds the plan)"
        )
    limit = pool.load_balancer.max_session_limit
    if limit is None:
        raise RecommendError(
            "spec.loadBalancer.maxSessionLimit: a pool that follows a plan needs it set"
        )
    if pool.scaling.max_hosts < 1:
        raise RecommendError("spec.scaling.maxHosts: a plan needs at least one host")
    return limit, pool.scaling.max_hosts


# ------------------------------------------------------------------------------ recommend


@dataclass(frozen=True, slots=True)
class _Given:
    """What every step works from: the pool and its limits, the options, and the history
    read as demand (its frame, curve and peak) and as the replays' shared input."""

    pool_name: str
    pool: HostPoolSpec
    options: Options
    zone: tzinfo
    limit: int
    max_hosts: int
    sessions: Sequence[PastSession]
    frame: Frame
    curve: DemandCurve
    peak: int
    replays: Replays
    #: How far ahead the plan asks for hosts (``model.lead_minutes``).
    lead: int
    #: The history's peak of hosts (at most maxHosts): the always-on baseline.
    always_on_hosts: int

    def search(self, factor: float, lead: int) -> PlanShape | None:
        """The search's cheapest shape for the demand raised by ``factor``."""
        curve = self.curve
        week = curve.robust if factor == 1.0 else _raised(curve.robust, factor)
        days = curve.days if factor == 1.0 else _raised(curve.days, factor)
        demand = Demand(week, self.limit, self.max_hosts, lead, days, curve.first_weekday)
        return Search(demand).plan()

    @property
    def half_wait_lead(self) -> int:
        """A lead that counts on half the wait (the model's lead takes none of it; all of
        it lets a storm outrun the threshold)."""
        options = self.options
        return math.ceil(options.host_start_minutes + 1 - options.max_wait_minutes / 2)

    def spec(self, shape: PlanShape, algorithm: LoadBalancerType) -> ScalingPlanSpec:
        return plan_spec(shape, self.pool_name, self.options.time_zone, self.max_hosts, algorithm)

    def evaluated(self, run: ReplayResult) -> Evaluation:
        return evaluation(run, self.options.max_wait_minutes, self.frame)


@dataclass(frozen=True, slots=True)
class _Baselines:
    """The pool's own scaling without a plan and the history's peak of hosts always on,
    replayed, and the logons that wait over the bound even then."""

    no_plan: Evaluation
    always_on: Evaluation
    #: (user, start, minutes waited) of each.
    unservable: tuple[tuple[str, datetime, float], ...]

    def kept(self, replayed: Evaluation) -> bool:
        """The replay keeps the bound but for the logons nothing can serve in time."""
        return replayed.waited_over <= len(self.unservable)


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A plan shape replayed with one algorithm in ramp-up and peak."""

    shape: PlanShape
    algorithm: LoadBalancerType
    #: A shape with no lead: it only follows the demand.
    follows_demand: bool
    spec: ScalingPlanSpec


@dataclass(frozen=True, slots=True)
class _Choice:
    """The plan recommended, its replay, and what the reasons say of how it was found."""

    spec: ScalingPlanSpec
    evaluation: Evaluation
    #: None: the last resort (the always-on hosts held all day).
    shape: PlanShape | None
    #: In ramp-up and peak.
    algorithm: LoadBalancerType
    #: The curve the plan is sized for ("robust", or "hold" for the last resort), its
    #: factor and the lead it was searched with.
    curve: str
    factor: float
    lead: int
    follows_demand: bool = False
    #: The other algorithm's replay of the same schedules, and the chosen one's.
    others: Mapping[LoadBalancerType, tuple[Evaluation, Evaluation]] = field(default_factory=dict)
    #: The replay with ramp-down where the model put it, when a later one replayed cheaper.
    unmoved: Evaluation | None = None


#: A demand tried: its curve, factor, and the replay of its shape (breadth-first or
#: depth-first) with fewer logons over the bound (for the reasons).
_Tried = tuple[str, float, Evaluation]


def recommend(
    pool_name: str,
    pool: HostPoolSpec,
    sessions: Sequence[PastSession],
    options: Options,
    *,
    run: Runner = run_serially,
) -> Recommendation:
    """The recommendation for a pool and its history (sorted by start, as
    ``history.parse_history`` gives it)."""
    given = _given(pool_name, pool, sessions, options)
    baselines_replaying = run(_baseline_jobs(given))
    # The first search runs while the baselines replay.
    first = given.search(1.0, given.lead)
    baselines = _baselines(given, baselines_replaying())
    chosen, tried = _choose(given, baselines, first, run)
    if chosen is None or chosen.evaluation.host_hours > baselines.always_on.host_hours:
        chosen = _hold(given, run)
    return _recommendation(given, baselines, chosen, tried)


def _given(
    pool_name: str, pool: HostPoolSpec, sessions: Sequence[PastSession], options: Options
) -> _Given:
    """The pool's limits and the history read in the plan's zone; RecommendError when the
    pool cannot follow a plan, the zone is unknown or the history empty."""
    limit, max_hosts = check_pool(pool)
    try:
        zone = zone_of(options.time_zone)
    except ValueError as error:
        raise RecommendError(f"time zone: {error}") from None
    if not sessions:
        raise RecommendError("the history is empty: no session in it")
    frame = frame_of(sessions, zone)
    peak = peak_concurrency(sessions)
    return _Given(
        pool_name=pool_name,
        pool=pool,
        options=options,
        zone=zone,
        limit=limit,
        max_hosts=max_hosts,
        sessions=sessions,
        frame=frame,
        curve=demand_curve(sessions, frame),
        peak=peak,
        replays=Replays.of_history(pool, frame, sessions, options.host_start_minutes),
        lead=lead_minutes(options.host_start_minutes, options.max_wait_minutes),
        always_on_hosts=min(max_hosts, max(1, -(-peak // limit))),
    )


def _baseline_jobs(given: _Given) -> list[ReplayInput]:
    """The pool's own scaling without a plan; and, when every host always on is still
    short of the peak, that too: the logons that wait then wait whatever the plan."""
    jobs = [given.replays.job(None)]
    if given.peak > given.always_on_hosts * given.limit:
        without = given.pool.model_copy(update={"scaling": None})
        jobs.append(given.replays.job(None, pool=without, hosts=given.always_on_hosts))
    return jobs


def _baselines(given: _Given, runs: list[ReplayResult]) -> _Baselines:
    """The baselines from their replays (``_baseline_jobs``)."""
    no_plan_run, *short = runs
    frame = given.frame
    if not short:
        # Enough hosts for the peak always on: no logon can wait, the replay's outcome is
        # known without running it (the hosts at each step are the same all along).
        hosts = given.always_on_hosts
        always_on = Evaluation(
            host_hours=round(hosts * frame.total_seconds / 3600, 2),
            peak_pending=0,
            waits=wait_table([0.0] * len(given.sessions)),
            waited_over=0,
            waited_over_percent=0.0,
            weekly_hosts=tuple([float(hosts)] * SLOTS_A_DAY for _ in range(7)),
        )
        return _Baselines(given.evaluated(no_plan_run), always_on, ())
    limit_seconds = given.options.max_wait_minutes * 60 + 1e-6
    unservable = tuple(
        (
            logon.user,
            (frame.origin + timedelta(seconds=logon.at)).astimezone(UTC),
            round(wait / 60, 2),
        )
        for logon, wait in zip(given.replays.logons, short[0].waits, strict=False)
        if wait > limit_seconds
    )
    return _Baselines(given.evaluated(no_plan_run), given.evaluated(short[0]), unservable)


def _choose(
    given: _Given, baselines: _Baselines, first: PlanShape | None, run: Runner
) -> tuple[_Choice | None, list[_Tried]]:
    """The cheapest finalist that keeps the bound, on the demand as recorded and then
    raised until one does; and the demands tried."""
    tried: list[_Tried] = []
    for factor in FACTORS:
        shape = first if factor == 1.0 else given.search(factor, given.lead)
        if shape is None:
            continue
        candidates = _candidates(given, baselines, shape, factor, first_tried=not tried)
        replaying = run([given.replays.job(c.spec) for c in candidates])
        # While they replay: the same search counting on half the wait.
        closer = None
        if factor == 1.0 and 0 < given.half_wait_lead < given.lead:
            closer = given.search(factor, given.half_wait_lead)
        results = [given.evaluated(r) for r in replaying()]
        tried.append(("robust", factor, min(results[:2], key=lambda e: e.waited_over)))
        chosen = _cheapest_kept(given, baselines, candidates, results, factor)
        if chosen is not None:
            if chosen.follows_demand:
                closer = None
            return _refined(given, baselines, chosen, closer, run), tried
    return None, tried


def _candidates(
    given: _Given, baselines: _Baselines, shape: PlanShape, factor: float, *, first_tried: bool
) -> list[_Candidate]:
    """The shape with breadth-first and with depth-first in ramp-up and peak; on the first
    demand tried, when the pool's own scaling keeps the bound, also a plan that only
    follows the demand (no lead): it may keep it too, more cheaply than the model's worst
    case says."""
    finalists = [
        (shape, LoadBalancerType.BREADTH_FIRST, False),
        (shape, LoadBalancerType.DEPTH_FIRST, False),
    ]
    if given.lead > 0 and first_tried and baselines.kept(baselines.no_plan):
        follow = given.search(factor, 0)
        if follow is not None:
            finalists.append((follow, LoadBalancerType.DEPTH_FIRST, True))
    return [_Candidate(s, a, f, given.spec(s, a)) for s, a, f in finalists]


def _cheapest_kept(
    given: _Given,
    baselines: _Baselines,
    candidates: list[_Candidate],
    results: list[Evaluation],
    factor: float,
) -> _Choice | None:
    """The cheapest candidate whose replay keeps the bound (ties: breadth-first, for the
    users), with the other algorithm's replay of the same schedules."""
    kept = [
        (result.host_hours, candidate.algorithm is LoadBalancerType.DEPTH_FIRST, i)
        for i, (candidate, result) in enumerate(zip(candidates, results, strict=True))
        if baselines.kept(result)
    ]
    if not kept:
        return None
    _, _, best = min(kept)
    picked = candidates[best]
    return _Choice(
        spec=picked.spec,
        evaluation=results[best],
        shape=picked.shape,
        algorithm=picked.algorithm,
        curve="robust",
        factor=factor,
        lead=given.lead,
        follows_demand=picked.follows_demand,
        others={
            c.algorithm: (results[i], results[best])
            for i, c in enumerate(candidates)
            if c.shape is picked.shape and c.algorithm is not picked.algorithm
        },
    )


def _refined(
    given: _Given,
    baselines: _Baselines,
    chosen: _Choice,
    closer: PlanShape | None,
    run: Runner,
) -> _Choice:
    """The choice, or what replays cheaper and keeps the bound, replayed together with the
    chosen algorithm: the shape that counts on half the wait (``closer``), and the chosen
    shape with ramp-down later (``search.later_ramp_downs``: in the replay a drained host
    lingers while its sessions last, which the model does not see)."""
    assert chosen.shape is not None
    later = later_ramp_downs(chosen.shape, given.curve.robust)
    shapes = ([] if closer is None else [closer]) + later
    if not shapes:
        return chosen
    specs = [given.spec(shape, chosen.algorithm) for shape in shapes]
    results = [given.evaluated(r) for r in run([given.replays.job(spec) for spec in specs])()]
    best = chosen
    for i, (shape, spec, result) in enumerate(zip(shapes, specs, results, strict=True)):
        if baselines.kept(result) and result.host_hours < best.evaluation.host_hours:
            moved = closer is None or i > 0
            best = replace(
                chosen,
                spec=spec,
                evaluation=result,
                shape=shape,
                lead=chosen.lead if moved else given.half_wait_lead,
                unmoved=chosen.evaluation if moved else None,
            )
    return best


def _hold(given: _Given, run: Runner) -> _Choice:
    """The last resort: the always-on hosts held all day, every day."""
    spec = hold_spec(
        given.pool_name, given.options.time_zone, given.max_hosts, given.always_on_hosts
    )
    (held,) = run([given.replays.job(spec)])()
    return _Choice(
        spec=spec,
        evaluation=given.evaluated(held),
        shape=None,
        algorithm=LoadBalancerType.DEPTH_FIRST,
        curve="hold",
        factor=1.0,
        lead=given.lead,
    )


def _recommendation(
    given: _Given, baselines: _Baselines, chosen: _Choice, tried: list[_Tried]
) -> Recommendation:
    """The choice with its baselines, and why (``reasons.explain``)."""
    figures = Figures(
        sessions=len(given.sessions),
        users=len({s.user for s in given.sessions}),
        days=given.frame.days,
        first=given.frame.origin.astimezone(given.zone),
        weeks=given.curve.weeks,
        peak=given.peak,
        limit=given.limit,
        max_hosts=given.max_hosts,
        max_wait_minutes=given.options.max_wait_minutes,
        host_start_minutes=given.options.host_start_minutes,
        lead=chosen.lead,
        curve=chosen.curve,
        factor=chosen.factor,
        tried=tuple((w, f, e.waited_over, e.waits["max"]) for w, f, e in tried),
        always_on_hosts=given.always_on_hosts,
        unservable=baselines.unservable,
        follows_demand=chosen.follows_demand,
    )
    outcome = Outcome(
        shape=chosen.shape,
        spec=chosen.spec,
        evaluated=chosen.evaluation,
        no_plan=baselines.no_plan,
        always_on=baselines.always_on,
        others=chosen.others,
        unmoved=chosen.unmoved,
    )
    return Recommendation(
        pool=given.pool_name,
        spec=chosen.spec,
        evaluation=chosen.evaluation,
        no_plan=baselines.no_plan,
        always_on=baselines.always_on,
        always_on_hosts=given.always_on_hosts,
        reasons=tuple(explain(figures, given.curve, outcome)),
        unservable=baselines.unservable,
        demand=given.curve.slots(),
        limit=given.limit,
    )


# ------------------------------------------------------------------------------ a given plan


def evaluate_plan(
    plan: PlanRules | None,
    pool: HostPoolSpec,
    sessions: Sequence[PastSession],
    options: Options,
    *,
    hosts: int | None = None,
) -> Evaluation:
    """Replay the history through a given plan (e.g. a hand-written one; None: the pool's
    own scaling), as the recommendation's plans are replayed; ``hosts`` at the start
    (default: the minimum of the phase in force, or minHosts)."""
    frame = frame_of(sessions, zone_of(options.time_zone))
    replays = Replays.of_history(pool, frame, sessions, options.host_start_minutes)
    return evaluation(replay(replays.job(plan, hosts=hosts)), options.max_wait_minutes, frame)
