"""The plan recommender: from a pool's session history, the scaling plan with the fewest
host-hours whose replay keeps every logon within a wait (the contract's "Recommending a
scaling plan"; ``hostpool-operator recommend-plan`` reads the files and prints).

1. The history's demand per local weekday and minute (``demand_curve``: the second highest
   week, so one odd day moves what a plan costs little; every day is kept as well).
2. The search (``plan_search`` over ``plan_model``) finds the cheapest plan shape: cost on
   the typical week, every day of the history served in time.
3. The replay (``replay``: the engine, the plan rules and the pool's scaling, hosts ready
   ``hostStartMinutes`` after they are added, a pass a minute) runs the whole history
   through the plan, with breadth-first and with depth-first in ramp-up and peak; the
   cheaper that keeps the bound wins. A shape that counts on half the wait is replayed as
   well, and kept when it keeps the bound for less. Should none keep it (the model's
   approximations), the search runs again on a raised demand. The baselines: the pool's
   own scaling without a plan (replayed) and the history's peak of hosts always on (its
   replay's outcome is known: nobody waits).

Replays are started through a ``Runner`` (``recommend_evaluation``) while the search goes
on; the command line runs them on two processes. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..api import API_VERSION, HostPoolSpec, LoadBalancerType
from ..api.base import MAX_NAME
from ..api.plan import WEEKDAYS, ScalingPlanSpec, zone_of
from ..simulate.replay_state import Logon
from ..simulate.waits import wait_table
from .demand_curve import SLOTS_A_DAY, demand_curve, frame_of, peak_concurrency
from .evaluation import Evaluation as Evaluation
from .evaluation import Options as Options
from .evaluation import Replays, evaluation
from .evaluation import Runner as Runner
from .evaluation import evaluate_plan as evaluate_plan
from .evaluation import run_serially as run_serially
from .history import PastSession
from .model import Demand, lead_minutes, percent_for
from .reasons import Figures, explain
from .search import PlanShape, Search, days_name

#: The demand the search is given in turn until a plan's replay keeps the bound: as
#: recorded, then raised (for what the model does not see: seconds within a minute,
#: drained hosts that linger, sessions that start late after a wait).
FACTORS = (1.0, 1.1, 1.25, 1.5, 2.0)


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
    limit, max_hosts = check_pool(pool)
    try:
        zone = zone_of(options.time_zone)
    except ValueError as error:
        raise RecommendError(f"time zone: {error}") from None
    if not sessions:
        raise RecommendError("the history is empty: no session in it")
    frame = frame_of(sessions, zone)
    curve = demand_curve(sessions, frame)
    peak = peak_concurrency(sessions)
    replays = Replays(
        pool=pool,
        zone=zone,
        frame=frame,
        logons=tuple(
            Logon(
                (s.start - frame.origin).total_seconds(),
                (s.end - s.start).total_seconds(),
                s.user,
            )
            for s in sessions
        ),
        host_start_seconds=options.host_start_minutes * 60,
    )
    bound = options.max_wait_minutes
    always_hosts = min(max_hosts, max(1, -(-peak // limit)))
    without = pool.model_copy(update={"scaling": None})
    jobs = [replays.job(None)]
    if peak > always_hosts * limit:
        # Every host always on and still short of the peak: the logons that wait then
        # wait whatever the plan.
        jobs.append(replays.job(None, pool=without, hosts=always_hosts))
    baselines = run(jobs)
    lead = lead_minutes(options.host_start_minutes, bound)
    # The first search runs while the baselines replay.
    first = Search(Demand(curve.robust, limit, max_hosts, lead, curve.days, curve.first_weekday))
    first_shape = first.plan()
    no_plan_run, *short = baselines()
    no_plan = evaluation(no_plan_run, bound, frame)
    unservable: list[tuple[str, datetime, float]] = []
    if short:
        always_on = evaluation(short[0], bound, frame)
        limit_seconds = bound * 60 + 1e-6
        for logon, wait in zip(replays.logons, short[0].waits, strict=False):
            if wait > limit_seconds:
                when = frame.origin + timedelta(seconds=logon.at)
                unservable.append((logon.user, when.astimezone(UTC), round(wait / 60, 2)))
    else:
        # Enough hosts for the peak always on: no logon can wait, the replay's outcome is
        # known without running it (the hosts at each step are the same all along).
        always_on = Evaluation(
            host_hours=round(always_hosts * frame.total_seconds / 3600, 2),
            peak_pending=0,
            waits=wait_table([0.0] * len(sessions)),
            waited_over=0,
            waited_over_percent=0.0,
            weekly_hosts=tuple([float(always_hosts)] * SLOTS_A_DAY for _ in range(7)),
        )

    tried: list[tuple[str, float, Evaluation]] = []
    chosen: tuple[ScalingPlanSpec, Evaluation, PlanShape | None, str, float] | None = None
    others: dict[LoadBalancerType, tuple[Evaluation, Evaluation]] = {}
    reactive = False
    used_lead = lead
    for factor in FACTORS:
        which = "robust"
        week = curve.robust if factor == 1.0 else _raised(curve.robust, factor)
        days = curve.days if factor == 1.0 else _raised(curve.days, factor)
        if factor == 1.0:
            shape = first_shape
        else:
            shape = Search(Demand(week, limit, max_hosts, lead, days, curve.first_weekday)).plan()
        if shape is None:
            continue
        # (shape, algorithm in ramp-up and peak, follows the demand only)
        candidates: list[tuple[PlanShape, LoadBalancerType, bool]] = [
            (shape, LoadBalancerType.BREADTH_FIRST, False),
            (shape, LoadBalancerType.DEPTH_FIRST, False),
        ]
        if lead > 0 and not tried and no_plan.waited_over <= len(unservable):
            # The pool's own scaling keeps the bound: a plan that only follows the demand
            # (no lead) may too, more cheaply than the model's worst case says.
            follow = Search(Demand(week, limit, max_hosts, 0, days, curve.first_weekday)).plan()
            if follow is not None:
                candidates.append((follow, LoadBalancerType.DEPTH_FIRST, True))
        specs = [
            plan_spec(s, pool_name, options.time_zone, max_hosts, algorithm)
            for s, algorithm, _ in candidates
        ]
        waiting_for = run([replays.job(x) for x in specs])
        # While they replay: the same search counting on half the wait (the model's
        # lead takes none of it; all of it lets a storm outrun the threshold).
        tighter = math.ceil(options.host_start_minutes + 1 - bound / 2)
        closer: PlanShape | None = None
        if factor == 1.0 and 0 < tighter < lead:
            closer = Search(
                Demand(week, limit, max_hosts, tighter, days, curve.first_weekday)
            ).plan()
        results = [evaluation(r, bound, frame) for r in waiting_for()]
        keeping = [
            (result.host_hours, algorithm is LoadBalancerType.DEPTH_FIRST, i)
            for i, ((_, algorithm, _), result) in enumerate(zip(candidates, results, strict=True))
            if result.waited_over <= len(unservable)
        ]
        tried.append((which, factor, min(results[:2], key=lambda e: e.waited_over)))
        if keeping:
            _, _, best = min(keeping)  # ties: breadth-first, for the users
            picked, algorithm, reactive = candidates[best]
            chosen = (specs[best], results[best], picked, which, factor)
            # The other algorithm on the same schedules, and this one's replay of them.
            others = {
                a: (results[i], results[best])
                for i, (s, a, _) in enumerate(candidates)
                if s is picked and a is not algorithm
            }
            if closer is not None and not reactive:
                spec = plan_spec(closer, pool_name, options.time_zone, max_hosts, algorithm)
                (run_closer,) = run([replays.job(spec)])()
                tried_closer = evaluation(run_closer, bound, frame)
                if (
                    tried_closer.waited_over <= len(unservable)
                    and tried_closer.host_hours < chosen[1].host_hours
                ):
                    chosen = (spec, tried_closer, closer, which, factor)
                    used_lead = tighter
            break
    if chosen is None or chosen[1].host_hours > always_on.host_hours:
        spec = hold_spec(pool_name, options.time_zone, max_hosts, always_hosts)
        (held,) = run([replays.job(spec)])()
        chosen = (spec, evaluation(held, bound, frame), None, "hold", 1.0)
        others = {}
        reactive = False
    spec, evaluated, shape, which, factor = chosen
    figures = Figures(
        sessions=len(sessions),
        users=len({s.user for s in sessions}),
        days=frame.days,
        first=frame.origin.astimezone(zone),
        weeks=curve.weeks,
        peak=peak,
        limit=limit,
        max_hosts=max_hosts,
        max_wait_minutes=bound,
        host_start_minutes=options.host_start_minutes,
        lead=used_lead,
        curve=which,
        factor=factor,
        tried=tuple((w, f, e.waited_over, e.waits["max"]) for w, f, e in tried),
        always_on_hosts=always_hosts,
        unservable=tuple(unservable),
        follows_demand=reactive,
    )
    reasons = explain(
        figures,
        curve,
        shape,
        spec,
        evaluated,
        no_plan,
        always_on,
        others,
    )
    return Recommendation(
        pool=pool_name,
        spec=spec,
        evaluation=evaluated,
        no_plan=no_plan,
        always_on=always_on,
        always_on_hosts=always_hosts,
        reasons=tuple(reasons),
        unservable=tuple(unservable),
        demand=curve.slots(),
        limit=limit,
    )
