"""Which pool follows which scaling plan (``bind``: the oldest plan keeps a pool) and what a
plan's status says (``plan_status``): the phase in force, the pools' entries, and Ready with
its reasons (Applied, InvalidSpec, UnknownTimeZone, PoolConflict, PoolNotFound,
ScalingRequired) in the contract's order, every problem in its message."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hostpool_operator.api.conditions import find
from hostpool_operator.api.plan import PlanConditionReason
from hostpool_operator.engine.records import PlanRecord
from hostpool_operator.scaling.plan_binding import PoolReport, bind, plan_problems, plan_status
from support.builders import plan_schedule, plan_spec

Obj = dict[str, Any]
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)  # a Monday: Peak in the plans below
LATER = NOW + timedelta(minutes=5)
NOW_TEXT = "2026-12-07T12:00:00Z"
LATER_TEXT = "2026-12-07T12:05:00Z"
NO_SCALING = "HostPool 'c' has no scaling (a plan needs scaling.maxHosts and a hostTemplate)"


def plan(
    name: str,
    *pools: str,
    created: str | None = "2026-01-01T00:00:00Z",
    zone: str = "UTC",
    generation: int = 1,
    status: Obj | None = None,
    spec: Obj | None = None,
) -> PlanRecord:
    metadata: Obj = {
        "namespace": "ns",
        "name": name,
        "uid": f"uid-{name}",
        "generation": generation,
    }
    if created is not None:
        metadata["creationTimestamp"] = created
    body = spec or plan_spec(zone=zone, hostPoolRefs=[{"name": p} for p in pools])
    record = PlanRecord.of({"metadata": metadata, "spec": body, "status": status or {}})
    if spec is None:
        assert record.spec is not None, record.spec_error
    return record


def entry(name: str, **kw: Any) -> Obj:
    return {"name": name, "schedule": "weekdays", "phase": "Peak", **kw}


def report(name: str, **kw: Any) -> PoolReport:
    return PoolReport(exists=True, entry=entry(name, **kw))


def ready(status: Mapping[str, Any]) -> tuple[str, str, str]:
    found = find(status.get("conditions"), "Ready")
    assert found is not None
    return (found["status"], found["reason"], found["message"])


def owners(bound: Mapping[str, PlanRecord]) -> dict[str, str]:
    return {pool: record.meta.name for pool, record in bound.items()}


# ---------------------------------------------------------------------------- bind


def test_the_oldest_plan_keeps_a_pool() -> None:
    young = plan("a-young", "y", "z", created="2026-02-01T00:00:00Z")
    old = plan("z-old", "x", "y", created="2026-01-01T00:00:00Z")
    assert owners(bind([young, old])) == {"x": "z-old", "y": "z-old", "z": "a-young"}
    assert owners(bind([old, young])) == {"x": "z-old", "y": "z-old", "z": "a-young"}


def test_plans_created_in_the_same_second_are_ordered_by_name() -> None:
    b = plan("b", "x")
    a = plan("a", "x")
    assert owners(bind([b, a])) == {"x": "a"}


def test_a_plan_without_a_creation_time_comes_last() -> None:
    unknown = plan("a", "x", created=None)
    dated = plan("b", "x", created="2030-01-01T00:00:00Z")
    assert owners(bind([unknown, dated])) == {"x": "b"}


def test_a_plan_with_an_invalid_spec_binds_nothing() -> None:
    invalid = plan("old", spec={"timeZone": "UTC", "hostPoolRefs": [{"name": "x"}]})
    assert invalid.spec is None
    young = plan("young", "x", created="2026-06-01T00:00:00Z")
    assert bind([invalid]) == {}
    assert owners(bind([invalid, young])) == {"x": "young"}


def test_a_plan_with_an_unknown_zone_keeps_its_pools() -> None:
    mars = plan("mars", "x", zone="Mars/Olympus_Mons")
    young = plan("young", "x", created="2026-06-01T00:00:00Z")
    assert owners(bind([young, mars])) == {"x": "mars"}


# ---------------------------------------------------------------------------- plan_status


def test_ready_true_applied_with_the_phase_in_force() -> None:
    mine = plan("p", "a", "b")
    reports = {"a": report("a", minimumHosts=2), "b": report("b")}
    status = plan_status(mine, bind([mine]), reports, NOW)
    assert ready(status) == ("True", "Applied", "applied to 2 pool(s)")
    assert (status["schedule"], status["phase"]) == ("weekdays", "Peak")
    assert status["pools"] == [entry("a", minimumHosts=2), entry("b")]


@pytest.mark.parametrize(
    "reports",
    [pytest.param({}, id="no-report"), pytest.param({"a": PoolReport(False)}, id="missing")],
)
def test_pool_not_found(reports: dict[str, PoolReport]) -> None:
    mine = plan("p", "a")
    status = plan_status(mine, bind([mine]), reports, NOW)
    assert ready(status) == ("False", "PoolNotFound", "HostPool 'a' does not exist")
    assert status["pools"] == [{"name": "a"}]
    assert status["phase"] == "Peak"  # the plan's phase, whatever its pools' state


def test_pool_conflict_names_the_plan_that_keeps_the_pool() -> None:
    old = plan("old", "a")
    young = plan("young", "a", created="2026-06-01T00:00:00Z")
    bound = bind([old, young])
    reports = {"a": report("a")}
    status = plan_status(young, bound, reports, NOW)
    assert ready(status) == (
        "False",
        "PoolConflict",
        "HostPool 'a' follows ScalingPlan 'old' already",
    )
    assert status["pools"] == [{"name": "a"}]  # the pool's entry is the other plan's
    assert ready(plan_status(old, bound, reports, NOW)) == (
        "True",
        "Applied",
        "applied to 1 pool(s)",
    )


def test_scaling_required_comes_from_the_pools_report() -> None:
    mine = plan("p", "c")
    problem = (PlanConditionReason.SCALING_REQUIRED, NO_SCALING)
    reports = {"c": PoolReport(True, entry("c"), problem)}
    status = plan_status(mine, bind([mine]), reports, NOW)
    assert ready(status) == ("False", "ScalingRequired", NO_SCALING)
    assert status["pools"] == [entry("c")]


def test_unknown_time_zone_has_no_phase() -> None:
    mine = plan("p", "a", zone="Mars/Olympus_Mons")
    status = plan_status(mine, bind([mine]), {"a": report("a")}, NOW)
    assert ready(status) == ("False", "UnknownTimeZone", "unknown time zone 'Mars/Olympus_Mons'")
    assert (status["schedule"], status["phase"]) == (None, None)
    assert status["pools"] == [entry("a")]  # it keeps its pool


def test_reasons_in_order_and_every_problem_in_the_message() -> None:
    other = plan("other", "b", created="2025-01-01T00:00:00Z")
    # Pools listed: missing, scaling required, conflict, fine.
    mine = plan("p", "a", "c", "b", "d", zone="Mars/Olympus_Mons")
    bound = bind([mine, other])
    reports = {
        "c": PoolReport(True, entry("c"), (PlanConditionReason.SCALING_REQUIRED, NO_SCALING)),
        "b": report("b"),
        "d": report("d"),
    }
    status = plan_status(mine, bound, reports, NOW)
    assert ready(status) == (
        "False",
        "UnknownTimeZone",
        "unknown time zone 'Mars/Olympus_Mons'; "
        "HostPool 'b' follows ScalingPlan 'other' already; "
        "HostPool 'a' does not exist; " + NO_SCALING,
    )
    assert [reason for reason, _ in plan_problems(mine, bound, reports)] == [
        PlanConditionReason.POOL_CONFLICT,
        PlanConditionReason.POOL_NOT_FOUND,
        PlanConditionReason.SCALING_REQUIRED,
    ]
    # With a known zone, the conflict comes first.
    earth = plan("p", "a", "c", "b", "d")
    assert ready(plan_status(earth, bind([earth, other]), reports, NOW))[1] == "PoolConflict"


def test_entries_only_for_the_pools_the_plan_owns() -> None:
    other = plan("other", "b", created="2025-01-01T00:00:00Z")
    mine = plan("p", "a", "b", "c")
    reports = {"a": report("a", usedCapacityPercent=41), "b": report("b"), "c": PoolReport(False)}
    status = plan_status(mine, bind([mine, other]), reports, NOW)
    assert status["pools"] == [entry("a", usedCapacityPercent=41), {"name": "b"}, {"name": "c"}]


def test_last_transition_time_kept_while_the_status_is_unchanged() -> None:
    first = plan_status(plan("p", "a"), {}, {}, NOW)  # PoolNotFound
    assert find(first["conditions"], "Ready") == {
        "type": "Ready",
        "status": "False",
        "reason": "PoolNotFound",
        "message": "HostPool 'a' does not exist",
        "lastTransitionTime": NOW_TEXT,
        "observedGeneration": 1,
    }
    stored = plan("p", "a", status=first)
    assert plan_status(stored, {}, {}, LATER) == first  # unchanged: nothing moves
    # Still False, for another reason: the time stays.
    problem = (PlanConditionReason.SCALING_REQUIRED, NO_SCALING)
    again = plan_status(stored, bind([stored]), {"a": PoolReport(True, None, problem)}, LATER)
    condition = find(again["conditions"], "Ready")
    assert condition is not None
    assert (condition["reason"], condition["lastTransitionTime"]) == ("ScalingRequired", NOW_TEXT)
    # True now: the time moves.
    fixed = plan_status(stored, bind([stored]), {"a": report("a")}, LATER)
    condition = find(fixed["conditions"], "Ready")
    assert condition is not None
    assert (condition["status"], condition["lastTransitionTime"]) == ("True", LATER_TEXT)


def test_observed_generation() -> None:
    mine = plan("p", "a", generation=7)
    status = plan_status(mine, bind([mine]), {"a": report("a")}, NOW)
    assert status["observedGeneration"] == 7
    condition = find(status["conditions"], "Ready")
    assert condition is not None
    assert condition["observedGeneration"] == 7


def test_an_invalid_spec_says_why() -> None:
    invalid = plan("p", spec={"timeZone": "UTC", "schedules": [plan_schedule()]}, generation=3)
    assert invalid.spec is None
    assert invalid.spec_error is not None
    assert "hostPoolRefs" in invalid.spec_error
    status = plan_status(invalid, bind([invalid]), {}, NOW)
    assert ready(status) == ("False", "InvalidSpec", invalid.spec_error)
    assert status["pools"] == []
    assert (status["schedule"], status["phase"], status["observedGeneration"]) == (None, None, 3)
