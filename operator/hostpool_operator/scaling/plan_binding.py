"""Which pool follows which scaling plan, and what each plan's status says.

Pure. A pool follows at most one plan: when several plans name it, the oldest plan
(creation time, then name) keeps it and every other one reports ``PoolConflict``, so
adding a second plan never changes how a running pool is managed. A plan whose spec is
invalid binds no pool. A plan with an unknown time zone keeps its pools (they follow their
own settings meanwhile), so fixing the zone does not move pools between plans.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..api import conditions as cond
from ..api.plan import PlanConditionReason
from ..api.timestamps import parse_time
from ..engine.records import PlanRecord
from .plans import phase_in_force

#: The order in which a plan's problems name its Ready condition's reason.
PROBLEM_ORDER = (
    PlanConditionReason.UNKNOWN_TIME_ZONE,
    PlanConditionReason.POOL_CONFLICT,
    PlanConditionReason.POOL_NOT_FOUND,
    PlanConditionReason.SCALING_REQUIRED,
    PlanConditionReason.WRITES_FAILED,
)


@dataclass(frozen=True, slots=True)
class PoolReport:
    """What a pool's worker says of the plan it follows: its entry in the plan's
    status.pools, and why the plan cannot manage it (None: it can)."""

    exists: bool
    entry: Mapping[str, Any] | None = None
    problem: tuple[PlanConditionReason, str] | None = None


def _age(plan: PlanRecord) -> tuple[float, str]:
    created = parse_time(plan.meta.created)
    return (created.timestamp() if created is not None else float("inf"), plan.meta.name)


def bind(plans: Iterable[PlanRecord]) -> dict[str, PlanRecord]:
    """Pool name -> the plan it follows, for the plans of one namespace."""
    bound: dict[str, PlanRecord] = {}
    for plan in sorted(plans, key=_age):
        if plan.spec is None:
            continue
        for pool in plan.pools:
            bound.setdefault(pool, plan)
    return bound


def plan_problems(
    plan: PlanRecord, bound: Mapping[str, PlanRecord], reports: Mapping[str, PoolReport]
) -> list[tuple[PlanConditionReason, str]]:
    """Every reason the plan does not apply in full, in ``PROBLEM_ORDER``."""
    problems: list[tuple[PlanConditionReason, str]] = []
    for pool in plan.pools:
        owner = bound.get(pool)
        report = reports.get(pool)
        if owner is not None and owner.meta.uid != plan.meta.uid:
            problems.append(
                (
                    PlanConditionReason.POOL_CONFLICT,
                    f"HostPool {pool!r} follows ScalingPlan {owner.meta.name!r} already",
                )
            )
        elif report is None or not report.exists:
            problems.append(
                (PlanConditionReason.POOL_NOT_FOUND, f"HostPool {pool!r} does not exist")
            )
        elif report.problem is not None:
            problems.append(report.problem)
    return sorted(problems, key=lambda p: PROBLEM_ORDER.index(p[0]))


def plan_status(
    plan: PlanRecord,
    bound: Mapping[str, PlanRecord],
    reports: Mapping[str, PoolReport],
    now: datetime,
) -> dict[str, Any]:
    """The plan's status: the phase in force, each pool's entry, and Ready (False with
    the first problem's reason and every problem in the message)."""
    status: dict[str, Any] = {"observedGeneration": plan.meta.generation}
    desired: list[cond.Cond]
    if plan.spec is None:
        desired = [cond.Cond("Ready", "False", "InvalidSpec", plan.spec_error or "")]
        status["pools"] = []
        status["schedule"] = status["phase"] = None
    else:
        problems: list[tuple[PlanConditionReason, str]] = []
        try:
            phase = phase_in_force(plan.spec, now)
        except ValueError as error:
            phase = None
            problems.append((PlanConditionReason.UNKNOWN_TIME_ZONE, str(error)))
        status["schedule"] = phase.schedule if phase is not None else None
        status["phase"] = phase.phase.value if phase is not None else None
        problems += plan_problems(plan, bound, reports)
        pools = []
        for pool in plan.pools:
            report = reports.get(pool)
            owner = bound.get(pool)
            mine = owner is not None and owner.meta.uid == plan.meta.uid
            entry = report.entry if mine and report is not None else None
            pools.append(dict(entry) if entry else {"name": pool})
        status["pools"] = pools
        if problems:
            message = "; ".join(text for _, text in problems)
            desired = [cond.Cond("Ready", "False", problems[0][0].value, message)]
        else:
            count = len(plan.pools)
            desired = [
                cond.Cond(
                    "Ready",
                    "True",
                    PlanConditionReason.APPLIED.value,
                    f"applied to {count} pool(s)",
                )
            ]
    status["conditions"] = cond.merge(
        plan.status.get("conditions"), desired, now=now, generation=plan.meta.generation
    )
    return status
