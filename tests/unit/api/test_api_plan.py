"""The ScalingPlan models: what they accept and refuse, and that the schema generated from
them is a CRD schema the API server takes (the CRD itself: tests/unit/test_crd_drift.py;
on a real API server: tests/api/test_scaling_plan_crd_live.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from hostpool_operator import api
from hostpool_operator.api import crdgen
from hostpool_operator.api.base import describe_validation_error
from hostpool_operator.api.plan import (
    DayOfWeek,
    PlanPhase,
    PoolScalingPlan,
    ScalingPlan,
    ScalingPlanSpec,
    SimulatedPlan,
    StopHostsWhen,
    zone_of,
)
from support.builders import plan_spec
from support.kube import iter_schema_nodes


def example() -> dict[str, Any]:
    """The contract's example plan (a new copy each time)."""
    return plan_spec()


def refused(spec: dict[str, Any]) -> str:
    """The one-line message the operator and simulator would give."""
    with pytest.raises(ValidationError) as info:
        ScalingPlanSpec.model_validate(spec)
    return describe_validation_error(info.value, under="spec")


def test_the_contract_example_is_valid_and_round_trips() -> None:
    spec = ScalingPlanSpec.model_validate(example())
    assert spec.schedules[0].days_of_week[0] is DayOfWeek.MONDAY
    assert spec.schedules[0].ramp_down.stop_hosts_when is StopHostsWhen.ZERO_SESSIONS
    assert spec.to_api() == example()
    assert ScalingPlan.model_validate({"spec": example()}).spec == spec


def test_ramp_down_extras_have_defaults() -> None:
    spec = example()
    for key in ("forceLogoffUsers", "waitTimeMinutes", "notificationMessage", "stopHostsWhen"):
        del spec["schedules"][0]["rampDown"][key]
    down = ScalingPlanSpec.model_validate(spec).schedules[0].ramp_down
    assert (down.force_logoff_users, down.wait_time_minutes, down.notification_message) == (
        False,
        30,
        "",
    )
    assert down.stop_hosts_when is StopHostsWhen.ZERO_SESSIONS


@pytest.mark.parametrize(
    ("phase", "start", "message"),
    [
        ("peak", "07:00", "spec.schedules.0: peak.startTime must be after rampUp.startTime"),
        ("peak", "06:59", "spec.schedules.0: peak.startTime must be after rampUp.startTime"),
        ("rampDown", "09:00", "rampDown.startTime must be after peak.startTime"),
        ("offPeak", "17:59", "offPeak.startTime must be after rampDown.startTime"),
    ],
)
def test_phases_must_start_in_order(phase: str, start: str, message: str) -> None:
    spec = example()
    spec["schedules"][0][phase]["startTime"] = start
    assert message in refused(spec)


def test_a_weekday_twice_in_a_schedule_is_refused() -> None:
    spec = example()
    spec["schedules"][0]["daysOfWeek"] = ["Monday", "Monday"]
    assert "daysOfWeek names Monday more than once" in refused(spec)


def test_a_weekday_in_two_schedules_is_refused() -> None:
    spec = example()
    weekend = copy.deepcopy(spec["schedules"][0])
    weekend["name"] = "weekend"
    weekend["daysOfWeek"] = ["Saturday", "Friday"]
    spec["schedules"].append(weekend)
    assert "a weekday appears in at most one schedule (Friday" in refused(spec)
    weekend["daysOfWeek"] = ["Saturday", "Sunday"]
    assert len(ScalingPlanSpec.model_validate(spec).schedules) == 2


def test_schedule_names_and_pools_are_unique() -> None:
    spec = example()
    spec["schedules"].append({**copy.deepcopy(spec["schedules"][0]), "daysOfWeek": ["Sunday"]})
    assert "schedule name 'weekdays' is used more than once" in refused(spec)
    spec = example()
    spec["hostPoolRefs"] = [{"name": "a"}, {"name": "a"}]
    assert "pool 'a' is named more than once" in refused(spec)


@pytest.mark.parametrize("start", ["7:00", "24:00", "07:60", "07:00:00", "0700", " 07:00", ""])
def test_start_time_must_be_hh_mm(start: str) -> None:
    spec = example()
    spec["schedules"][0]["rampUp"]["startTime"] = start
    assert refused(spec).startswith("spec.schedules.0.rampUp.startTime: ")


@pytest.mark.parametrize(("ramp_up", "off_peak"), [("00:00", "23:59"), ("00:01", "23:00")])
def test_start_times_at_the_day_edges_are_valid(ramp_up: str, off_peak: str) -> None:
    spec = example()
    spec["schedules"][0]["rampUp"]["startTime"] = ramp_up
    spec["schedules"][0]["offPeak"]["startTime"] = off_peak
    ScalingPlanSpec.model_validate(spec)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("rampUp", "minimumHostsPercent"), -1),
        (("rampUp", "minimumHostsPercent"), 101),
        (("rampUp", "capacityThresholdPercent"), 0),
        (("rampUp", "capacityThresholdPercent"), 101),
        (("rampDown", "minimumHostsPercent"), 101),
        (("rampDown", "capacityThresholdPercent"), 0),
        (("rampDown", "waitTimeMinutes"), -1),
        (("rampDown", "waitTimeMinutes"), 1441),
        (("rampDown", "notificationMessage"), "x" * 1025),
        (("rampDown", "stopHostsWhen"), "Never"),
        (("peak", "minimumHostsPercent"), 20),  # peak takes ramp-up's: not a peak field
        (("offPeak", "capacityThresholdPercent"), 50),
    ],
)
def test_bounds(path: tuple[str, str], value: object) -> None:
    spec = example()
    spec["schedules"][0][path[0]][path[1]] = value
    assert refused(spec).startswith(f"spec.schedules.0.{path[0]}.{path[1]}: ")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("rampUp", "minimumHostsPercent"), 0),
        (("rampUp", "minimumHostsPercent"), 100),
        (("rampUp", "capacityThresholdPercent"), 1),
        (("rampDown", "capacityThresholdPercent"), 100),
        (("rampDown", "waitTimeMinutes"), 0),
        (("rampDown", "waitTimeMinutes"), 1440),
        (("rampDown", "notificationMessage"), "x" * 1024),
    ],
)
def test_bounds_are_inclusive(path: tuple[str, str], value: object) -> None:
    spec = example()
    spec["schedules"][0][path[0]][path[1]] = value
    ScalingPlanSpec.model_validate(spec)


def test_list_sizes() -> None:
    spec = example()
    spec["schedules"] = []
    assert refused(spec).startswith("spec.schedules: ")
    spec = example()
    spec["hostPoolRefs"] = []
    assert refused(spec).startswith("spec.hostPoolRefs: ")
    spec["hostPoolRefs"] = [{"name": f"p{i}"} for i in range(101)]
    assert refused(spec).startswith("spec.hostPoolRefs: ")
    spec["hostPoolRefs"] = [{"name": f"p{i}"} for i in range(100)]
    ScalingPlanSpec.model_validate(spec)
    spec["schedules"][0]["daysOfWeek"] = []
    assert refused(spec).startswith("spec.schedules.0.daysOfWeek: ")
    spec["schedules"][0]["daysOfWeek"] = ["Funday"]
    assert refused(spec).startswith("spec.schedules.0.daysOfWeek.0: ")
    del spec["timeZone"]
    assert refused(spec).startswith("spec.timeZone: ")


def test_seven_schedules_one_a_day_are_the_most() -> None:
    spec = example()
    base = spec["schedules"][0]
    spec["schedules"] = [
        {**copy.deepcopy(base), "name": day.value.lower(), "daysOfWeek": [day.value]}
        for day in DayOfWeek
    ]
    assert len(ScalingPlanSpec.model_validate(spec).schedules) == 7
    spec["schedules"].append({**copy.deepcopy(base), "name": "eighth", "daysOfWeek": ["Monday"]})
    assert refused(spec).startswith("spec.schedules: ")


@pytest.mark.parametrize("phase", ["rampUp", "peak", "rampDown", "offPeak"])
def test_a_phase_cannot_use_horizon(phase: str) -> None:
    spec = example()
    spec["schedules"][0][phase]["loadBalancerType"] = "Horizon"
    assert refused(spec) == (
        f"spec.schedules.0.{phase}.loadBalancerType: "
        "a plan's phase uses BreadthFirst or DepthFirst, not Horizon"
    )


@pytest.mark.parametrize(
    "zone",
    ["UTC", "Europe/Stockholm", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "EST5EDT",
     "America/Port-au-Prince"],
)  # fmt: skip
def test_iana_zone_names(zone: str) -> None:
    spec = example()
    spec["timeZone"] = zone
    ScalingPlanSpec.model_validate(spec)
    SimulatedPlan.model_validate({k: v for k, v in spec.items() if k != "hostPoolRefs"})
    assert zone_of(zone).key == zone


@pytest.mark.parametrize(
    "zone", ["", "Europe/", "/UTC", "Europe Stockholm", "../etc/passwd", "Europe//Oslo", "9/X"]
)
def test_malformed_zone_names_are_refused(zone: str) -> None:
    spec = example()
    spec["timeZone"] = zone
    assert refused(spec).startswith("spec.timeZone: ")
    with pytest.raises(ValueError, match="not an IANA time zone name"):
        zone_of(zone)


def test_an_unknown_zone_is_left_to_a_condition_but_refused_by_the_simulator() -> None:
    spec = example()
    spec["timeZone"] = "Mars/Olympus_Mons"
    plan = ScalingPlanSpec.model_validate(spec)  # as the API server: the format is fine
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus_Mons'"):
        _ = plan.zone
    del spec["hostPoolRefs"]
    with pytest.raises(ValidationError) as info:
        SimulatedPlan.model_validate(spec)
    assert describe_validation_error(info.value, under="plan") == (
        "plan.timeZone: unknown time zone 'Mars/Olympus_Mons'"
    )
    with pytest.raises(ValueError, match="unknown time zone"):
        zone_of("Europe")  # a directory of the tz database, not a zone


def test_a_simulated_plan_has_no_pools() -> None:
    with pytest.raises(ValidationError):
        SimulatedPlan.model_validate(example())


# ---------------------------------------------------------------------------------------
# The schema a CRD would carry

FORBIDDEN_KEYS = ("$ref", "$defs", "definitions", "anyOf", "allOf", "oneOf", "not")


def schema() -> dict[str, Any]:
    return crdgen.object_schema(ScalingPlan)


def test_the_schema_is_structural_typed_described_and_bounded() -> None:
    problems = []
    for path, node in iter_schema_nodes(schema()):
        problems += [f"{path}: {key}" for key in FORBIDDEN_KEYS if key in node]
        if node.get("additionalProperties") is False or node.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            problems.append(f"{path}: not closed")
        if "type" not in node:
            problems.append(f"{path}: no type")
        if "description" not in node and path != ".metadata":
            problems.append(f"{path}: no description")
        kind = node.get("type")
        if kind == "string" and path not in (".apiVersion", ".kind"):
            if not ("maxLength" in node or "enum" in node or node.get("format") == "date-time"):
                problems.append(f"{path}: string without maxLength")
        elif kind == "array" and "maxItems" not in node:
            problems.append(f"{path}: array without maxItems")
        elif kind == "integer" and not ("minimum" in node and "maximum" in node):
            problems.append(f"{path}: integer without bounds")
        for rule in node.get("x-kubernetes-validations", []):
            if not (rule.get("rule") and rule.get("message")):
                problems.append(f"{path}: rule without a message {rule}")
    assert not problems, "\n".join(problems)
    assert schema()["required"] == ["spec"]


def test_status_carries_no_defaults() -> None:
    status = schema()["properties"]["status"]
    assert not [p for p, node in iter_schema_nodes(status, ".status") if "default" in node]


def _node(path: str) -> dict[str, Any]:
    node = schema()
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def test_the_cel_rules_and_list_types_are_in_the_schema() -> None:
    spec_rules = _node("spec")["x-kubernetes-validations"]
    assert [r["message"] for r in spec_rules] == ["a weekday appears in at most one schedule"]
    schedule = _node("spec.schedules.[]")
    assert [r["rule"] for r in schedule["x-kubernetes-validations"]] == [
        "self.rampUp.startTime < self.peak.startTime",
        "self.peak.startTime < self.rampDown.startTime",
        "self.rampDown.startTime < self.offPeak.startTime",
    ]
    assert _node("spec.schedules")["x-kubernetes-list-map-keys"] == ["name"]
    assert _node("spec.hostPoolRefs")["x-kubernetes-list-map-keys"] == ["name"]
    assert _node("spec.schedules.[].daysOfWeek")["x-kubernetes-list-type"] == "set"
    assert _node("status.pools")["x-kubernetes-list-map-keys"] == ["name"]
    for phase in ("rampUp", "peak", "rampDown", "offPeak"):
        assert _node(f"spec.schedules.[].{phase}.loadBalancerType")["enum"] == [
            "BreadthFirst",
            "DepthFirst",
        ]
    assert _node("spec.timeZone")["pattern"].startswith("^[A-Za-z]")
    assert _node("spec.schedules.[].rampUp.startTime")["pattern"] == (
        "^([01][0-9]|2[0-3]):[0-5][0-9]$"
    )


def test_names() -> None:
    assert (ScalingPlan.kind, ScalingPlan.plural, ScalingPlan.short_names) == (
        "ScalingPlan",
        "scalingplans",
        ("spl",),
    )


def test_names_and_kinds() -> None:
    assert api.ScalingPlan is ScalingPlan
    assert ScalingPlan in api.KINDS


# ---------------------------------------------------------------------------------------
# What the operator writes: the plan's status, and the plan a pool follows


def test_the_plan_status_names_the_schedule_and_phase_in_force() -> None:
    status = {
        "observedGeneration": 2,
        "schedule": "weekdays",
        "phase": "RampDown",
        "pools": [{"name": "finance", "schedule": "weekdays", "phase": "RampDown"}],
    }
    plan = ScalingPlan.model_validate({"spec": example(), "status": status})
    assert (plan.status.schedule, plan.status.phase) == ("weekdays", PlanPhase.RAMP_DOWN)
    assert plan.status.to_api() == {**status, "conditions": []}
    bare = ScalingPlan.model_validate({"spec": example()}).status
    assert (bare.schedule, bare.phase) == (None, None)
    with pytest.raises(ValidationError):
        ScalingPlan.model_validate({"spec": example(), "status": {"phase": "Lunch"}})


def test_a_pool_status_names_the_plan_it_follows() -> None:
    follows = {
        "name": "finance-week",
        "schedule": "weekdays",
        "phase": "Peak",
        "loadBalancerType": "BreadthFirst",
    }
    status = api.HostPoolStatus.model_validate({"scalingPlan": follows})
    assert status.scaling_plan == PoolScalingPlan(
        name="finance-week",
        schedule="weekdays",
        phase=PlanPhase.PEAK,
        load_balancer_type=api.LoadBalancerType.BREADTH_FIRST,
    )
    assert status.to_api()["scalingPlan"] == follows
    # Only the name is required (a pool follows a plan with no phase in force yet);
    # without a plan the field is absent.
    assert PoolScalingPlan(name="p").to_api() == {"name": "p"}
    assert "scalingPlan" not in api.HostPoolStatus().to_api()
    for bad in ({"name": ""}, {"name": "p", "phase": "Lunch"}, {"schedule": "weekdays"}):
        with pytest.raises(ValidationError):
            PoolScalingPlan.model_validate(bad)
