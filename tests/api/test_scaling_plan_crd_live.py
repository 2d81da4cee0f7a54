"""The ScalingPlan CRD on a real kube-apiserver: the plan rules of ``api.plan`` (OpenAPI
bounds and CEL) refuse bad plans with a message naming the field, good plans and the
boundary values are accepted, defaults are the models', the status subresource takes what
the operator writes (the plan's and the pool's), and ``kubectl get spl`` shows the columns.

Whether a well-formed time zone exists is not the API server's business: the schema checks
the name's format only, and the operator reports an unknown zone with the plan's Ready
condition (UnknownTimeZone).

Same fixtures as test_crds_live.py: a shared API server, a namespace per test.
"""

from __future__ import annotations

import copy
import datetime as dt
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import ValidationError

from hostpool_operator import api
from hostpool_operator.api.plan import ScalingPlanSpec
from support.builders import WEEKDAYS, manifest, plan_schedule, plan_spec, pool
from support.kube import ApiError, Kube, resource_path

Obj = dict[str, Any]

DAYS = [*WEEKDAYS, "Saturday", "Sunday"]


def plan(name: str = "plan", **changes: Any) -> Obj:
    """A valid ScalingPlan (the contract's example) with top-level spec fields replaced."""
    return manifest("ScalingPlan", name, plan_spec(**changes))


def plan_with(path: str, value: Any) -> Obj:
    """A valid plan with one field of its first schedule set, e.g. ``rampUp.startTime``."""
    obj = plan()
    node = obj["spec"]["schedules"][0]
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    return obj


def now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------
# Refusals


@dataclass(frozen=True)
class Refusal:
    obj: Obj
    field: str  # the field path the message must name
    text: str = ""  # further text the message must contain


SEVEN_AND_ONE = [plan_schedule(f"s{i}", [DAYS[i % 7]]) for i in range(8)]

REFUSALS: dict[str, Refusal] = {
    "peak-before-rampUp": Refusal(
        plan_with("peak.startTime", "06:59"),
        "spec.schedules[0].peak.startTime",
        "peak.startTime must be after rampUp.startTime",
    ),
    "peak-at-rampUp": Refusal(
        plan_with("peak.startTime", "07:00"),
        "spec.schedules[0].peak.startTime",
        "peak.startTime must be after rampUp.startTime",
    ),
    "offPeak-before-rampDown": Refusal(
        plan_with("offPeak.startTime", "17:00"),
        "spec.schedules[0].offPeak.startTime",
        "offPeak.startTime must be after rampDown.startTime",
    ),
    "a-weekday-in-two-schedules": Refusal(
        plan(schedules=[plan_schedule(), plan_schedule("weekend", ["Friday", "Saturday"])]),
        "spec.schedules",
        "a weekday appears in at most one schedule",
    ),
    "a-weekday-twice-in-a-schedule": Refusal(
        plan(schedules=[plan_schedule(days=["Monday", "Monday"])]),
        "spec.schedules[0].daysOfWeek[1]",
        "Duplicate value",
    ),
    "an-unknown-weekday": Refusal(
        plan(schedules=[plan_schedule(days=["Funday"])]),
        "spec.schedules[0].daysOfWeek[0]",
        "Funday",
    ),
    "a-schedule-name-twice": Refusal(
        plan(schedules=[plan_schedule("a"), plan_schedule("a", ["Sunday"])]),
        "spec.schedules[1]",
        "Duplicate value",
    ),
    "start-7:00": Refusal(
        plan_with("rampUp.startTime", "7:00"), "spec.schedules[0].rampUp.startTime"
    ),
    "start-24:00": Refusal(
        plan_with("offPeak.startTime", "24:00"), "spec.schedules[0].offPeak.startTime"
    ),
    "start-07:60": Refusal(
        plan_with("peak.startTime", "07:60"), "spec.schedules[0].peak.startTime"
    ),
    "zone-Europe/": Refusal(plan(timeZone="Europe/"), "spec.timeZone"),
    "zone-../etc": Refusal(plan(timeZone="../etc"), "spec.timeZone"),
    "zone-with-a-space": Refusal(plan(timeZone="Europe Stockholm"), "spec.timeZone"),
    "zone-empty": Refusal(plan(timeZone=""), "spec.timeZone"),
    "zone-missing": Refusal(
        manifest(
            "ScalingPlan", "plan", {"hostPoolRefs": [{"name": "a"}], "schedules": [plan_schedule()]}
        ),
        "spec.timeZone",
        "Required value",
    ),
    "horizon-in-a-phase": Refusal(
        plan_with("peak.loadBalancerType", "Horizon"),
        "spec.schedules[0].peak.loadBalancerType",
        '"Horizon"',
    ),
    "minimumHostsPercent-101": Refusal(
        plan_with("rampUp.minimumHostsPercent", 101), "spec.schedules[0].rampUp.minimumHostsPercent"
    ),
    "minimumHostsPercent-negative": Refusal(
        plan_with("rampDown.minimumHostsPercent", -1),
        "spec.schedules[0].rampDown.minimumHostsPercent",
    ),
    "capacityThresholdPercent-0": Refusal(
        plan_with("rampDown.capacityThresholdPercent", 0),
        "spec.schedules[0].rampDown.capacityThresholdPercent",
    ),
    "capacityThresholdPercent-101": Refusal(
        plan_with("rampUp.capacityThresholdPercent", 101),
        "spec.schedules[0].rampUp.capacityThresholdPercent",
    ),
    "waitTimeMinutes-1441": Refusal(
        plan_with("rampDown.waitTimeMinutes", 1441), "spec.schedules[0].rampDown.waitTimeMinutes"
    ),
    "notificationMessage-1025": Refusal(
        plan_with("rampDown.notificationMessage", "x" * 1025),
        "spec.schedules[0].rampDown.notificationMessage",
    ),
    "stopHostsWhen-Never": Refusal(
        plan_with("rampDown.stopHostsWhen", "Never"), "spec.schedules[0].rampDown.stopHostsWhen"
    ),
    "rampUp-without-capacityThresholdPercent": Refusal(
        plan(
            schedules=[
                {
                    **plan_schedule(),
                    "rampUp": {
                        "startTime": "07:00",
                        "loadBalancerType": "DepthFirst",
                        "minimumHostsPercent": 0,
                    },
                }
            ]
        ),
        "spec.schedules[0].rampUp.capacityThresholdPercent",
        "Required value",
    ),
    "zero-hostPoolRefs": Refusal(plan(hostPoolRefs=[]), "spec.hostPoolRefs"),
    "101-hostPoolRefs": Refusal(
        plan(hostPoolRefs=[{"name": f"p{i}"} for i in range(101)]), "spec.hostPoolRefs"
    ),
    "a-hostPoolRef-twice": Refusal(
        plan(hostPoolRefs=[{"name": "finance"}, {"name": "sales"}, {"name": "finance"}]),
        "spec.hostPoolRefs[2]",
        "Duplicate value",
    ),
    "an-empty-hostPoolRef-name": Refusal(
        plan(hostPoolRefs=[{"name": ""}]), "spec.hostPoolRefs[0].name"
    ),
    "zero-schedules": Refusal(plan(schedules=[]), "spec.schedules"),
    "eight-schedules": Refusal(plan(schedules=SEVEN_AND_ONE), "spec.schedules", "at most 7"),
}


@pytest.mark.parametrize("case", list(REFUSALS.values()), ids=list(REFUSALS))
def test_invalid_plan_is_refused(kube: Kube, namespace: str, case: Refusal) -> None:
    status, body = kube.request("POST", resource_path("ScalingPlan", namespace), body=case.obj)
    assert status == 422, f"expected 422, got {status}: {body}"
    message = body.get("message", "") if isinstance(body, dict) else str(body)
    assert case.field in message, f"the message does not name {case.field}: {message}"
    assert case.text in message, f"the message lacks {case.text!r}: {message}"
    assert not kube.exists("ScalingPlan", namespace, case.obj["metadata"]["name"])


@pytest.mark.parametrize("case", list(REFUSALS.values()), ids=list(REFUSALS))
def test_the_models_refuse_the_same_plans(case: Refusal) -> None:
    """The models' validators (simulator, operator) refuse every plan the server refuses.
    (No ``kube`` here: a plain check next to the live one, so the two tables stay one.)"""
    with pytest.raises(ValidationError):
        api.ScalingPlan.model_validate({"spec": case.obj["spec"]})


def test_a_change_to_an_invalid_plan_is_refused(kube: Kube, namespace: str) -> None:
    """The rules hold on updates too (CEL sees the whole new object)."""
    kube.create(namespace, plan())
    patch = {
        "spec": {"schedules": [plan_with("rampDown.startTime", "08:00")["spec"]["schedules"][0]]}
    }
    with pytest.raises(ApiError) as info:
        kube.merge_patch("ScalingPlan", namespace, "plan", patch)
    assert info.value.status == 422, info.value
    assert "rampDown.startTime must be after peak.startTime" in info.value.message
    stored = kube.get("ScalingPlan", namespace, "plan")
    assert stored["spec"]["schedules"][0]["rampDown"]["startTime"] == "18:00"


# ---------------------------------------------------------------------------------------
# Accepted plans


def test_the_contract_example_is_stored_as_written(kube: Kube, namespace: str) -> None:
    obj = plan()
    created = kube.create(namespace, obj)
    assert created["spec"] == obj["spec"]
    assert created["spec"] == ScalingPlanSpec.model_validate(obj["spec"]).to_api()
    assert created["metadata"]["generation"] == 1


def test_an_unknown_but_well_formed_zone_is_accepted(kube: Kube, namespace: str) -> None:
    """The format is the schema's; whether the zone exists is left to the operator, which
    reports it with the Ready condition (UnknownTimeZone)."""
    created = kube.create(namespace, plan(timeZone="Mars/Olympus_Mons"))
    assert created["spec"]["timeZone"] == "Mars/Olympus_Mons"
    model = ScalingPlanSpec.model_validate(created["spec"])
    with pytest.raises(ValueError, match="unknown time zone"):
        _ = model.zone


def test_ramp_down_defaults_are_the_models(kube: Kube, namespace: str) -> None:
    obj = plan()
    down = obj["spec"]["schedules"][0]["rampDown"]
    for key in ("forceLogoffUsers", "waitTimeMinutes", "notificationMessage", "stopHostsWhen"):
        del down[key]
    created = kube.create(namespace, obj)
    assert created["spec"]["schedules"][0]["rampDown"] == {
        "startTime": "18:00",
        "loadBalancerType": "DepthFirst",
        "minimumHostsPercent": 10,
        "capacityThresholdPercent": 90,
        "forceLogoffUsers": False,
        "waitTimeMinutes": 30,
        "notificationMessage": "",
        "stopHostsWhen": "ZeroSessions",
    }
    assert created["spec"] == ScalingPlanSpec.model_validate(obj["spec"]).to_api()


def test_boundary_values_are_accepted(kube: Kube, namespace: str) -> None:
    """The limits themselves (the refusals above are one step outside)."""
    edge = plan_schedule("edge", ["Monday"])
    edge["rampUp"].update(startTime="00:00", minimumHostsPercent=100, capacityThresholdPercent=1)
    edge["rampDown"].update(
        minimumHostsPercent=0,
        capacityThresholdPercent=100,
        waitTimeMinutes=1440,
        notificationMessage="x" * 1024,
        stopHostsWhen="ZeroActiveSessions",
        forceLogoffUsers=True,
    )
    edge["offPeak"]["startTime"] = "23:59"
    seven = [plan_schedule(day.lower(), [day]) for day in DAYS]
    objs = [
        plan("edges", schedules=[edge]),
        plan("one-a-day", schedules=seven),
        plan("a-hundred-pools", hostPoolRefs=[{"name": f"p{i}"} for i in range(100)]),
        plan("whole-week", schedules=[plan_schedule(days=DAYS)]),
        plan("gmt", timeZone="Etc/GMT+5"),
        plan("three-parts", timeZone="America/Argentina/Buenos_Aires"),
        plan("hyphen", timeZone="America/Port-au-Prince"),
        plan("utc", timeZone="UTC"),
    ]
    for obj in objs:
        kube.create(namespace, obj)
        api.ScalingPlan.model_validate({"spec": obj["spec"]})


def test_unknown_fields_are_pruned(kube: Kube, namespace: str) -> None:
    """A field a phase does not have (peak takes ramp-up's minimum) is dropped, not stored;
    with strict field validation the plan is refused naming it."""
    obj = plan_with("peak.minimumHostsPercent", 50)
    created = kube.create(namespace, obj)
    assert "minimumHostsPercent" not in created["spec"]["schedules"][0]["peak"]
    status, body = kube.request(
        "POST",
        resource_path("ScalingPlan", namespace),
        body={**obj, "metadata": {"name": "strict"}},
        query={"fieldValidation": "Strict"},
    )
    assert status == 400, body
    assert "minimumHostsPercent" in body["message"], body


# ---------------------------------------------------------------------------------------
# Status: what the operator writes


def plan_status() -> Obj:
    return {
        "observedGeneration": 1,
        "schedule": "weekdays",
        "phase": "Peak",
        "pools": [
            {
                "name": "finance",
                "schedule": "weekdays",
                "phase": "Peak",
                "loadBalancerType": "BreadthFirst",
                "minimumHosts": 2,
                "capacityThresholdPercent": 60,
                "usedCapacityPercent": 41,
            },
            {"name": "sales"},
        ],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Applied",
                "message": "2 pools follow the plan",
                "lastTransitionTime": now(),
                "observedGeneration": 1,
            }
        ],
    }


def test_plan_status_subresource(kube: Kube, namespace: str) -> None:
    created = kube.create(namespace, {**plan(), "status": plan_status()})
    assert created.get("status") in (None, {}), "status is ignored on create"
    written = kube.replace_status(namespace, {**created, "status": plan_status()})
    assert {k: v for k, v in written["status"].items() if k != "conditions"} == {
        k: v for k, v in plan_status().items() if k != "conditions"
    }
    assert written["metadata"]["generation"] == 1
    api.ScalingPlan.model_validate({"spec": written["spec"], "status": written["status"]})
    # A spec change through the main resource bumps the generation and keeps the status.
    changed = kube.merge_patch("ScalingPlan", namespace, "plan", {"spec": {"timeZone": "UTC"}})
    assert changed["metadata"]["generation"] == 2
    assert changed["status"]["phase"] == "Peak"


STATUS_REFUSALS: dict[str, tuple[Obj, str]] = {
    "unknown-phase": ({"phase": "Lunch"}, "status.phase"),
    "schedule-254-chars": ({"schedule": "s" * 254}, "status.schedule"),
    "pool-unknown-phase": (
        {"pools": [{"name": "finance", "phase": "Lunch"}]},
        "status.pools[0].phase",
    ),
    "pool-without-name": ({"pools": [{"phase": "Peak"}]}, "status.pools[0].name"),
    "pool-twice": ({"pools": [{"name": "a"}, {"name": "a"}]}, "status.pools[1]"),
    "pool-threshold-0": (
        {"pools": [{"name": "a", "capacityThresholdPercent": 0}]},
        "status.pools[0].capacityThresholdPercent",
    ),
}


@pytest.mark.parametrize("case", list(STATUS_REFUSALS.values()), ids=list(STATUS_REFUSALS))
def test_invalid_plan_status_is_refused(kube: Kube, namespace: str, case: tuple[Obj, str]) -> None:
    status, field_path = case
    kube.create(namespace, plan())
    with pytest.raises(ApiError) as info:
        kube.merge_patch("ScalingPlan", namespace, "plan", {"status": status}, status=True)
    assert info.value.status == 422, info.value
    assert field_path in info.value.message, info.value.message


def test_a_pool_status_names_its_plan(kube: Kube, namespace: str) -> None:
    kube.create(namespace, pool("finance", "DepthFirst", 10, scaling={"maxHosts": 8}))
    follows = {
        "name": "plan",
        "schedule": "weekdays",
        "phase": "RampDown",
        "loadBalancerType": "DepthFirst",
    }
    patched = kube.merge_patch(
        "HostPool", namespace, "finance", {"status": {"scalingPlan": follows}}, status=True
    )
    assert patched["status"]["scalingPlan"] == follows
    assert api.HostPoolStatus.model_validate(patched["status"]).scaling_plan is not None
    for bad, field_path in (
        ({"name": "plan", "phase": "Lunch"}, "status.scalingPlan.phase"),
        ({"name": "plan", "loadBalancerType": "RoundRobin"}, "status.scalingPlan.loadBalancerType"),
        ({"name": ""}, "status.scalingPlan.name"),
    ):
        with pytest.raises(ApiError) as info:
            kube.merge_patch(
                "HostPool", namespace, "finance", {"status": {"scalingPlan": bad}}, status=True
            )
        assert info.value.status == 422, info.value
        assert field_path in info.value.message, info.value.message
    # A merge patch with null takes the field away (the pool no longer follows a plan).
    cleared = kube.merge_patch(
        "HostPool", namespace, "finance", {"status": {"scalingPlan": None}}, status=True
    )
    assert "scalingPlan" not in cleared["status"]
    # Then a phase without the plan's name is refused: the name is required.
    with pytest.raises(ApiError) as info:
        kube.merge_patch(
            "HostPool",
            namespace,
            "finance",
            {"status": {"scalingPlan": {"phase": "Peak"}}},
            status=True,
        )
    assert info.value.status == 422, info.value
    assert "status.scalingPlan.name" in info.value.message, info.value.message


# ---------------------------------------------------------------------------------------
# Printer columns: the Table API and kubectl


def _plans_with_status(kube: Kube, namespace: str) -> None:
    created = kube.create(namespace, plan(hostPoolRefs=[{"name": "finance"}, {"name": "sales"}]))
    kube.replace_status(namespace, {**created, "status": plan_status()})
    kube.create(namespace, plan("fresh", timeZone="UTC"))


def test_table_api_shows_every_pool_the_phase_and_ready(kube: Kube, namespace: str) -> None:
    _plans_with_status(kube, namespace)
    table = kube.table("ScalingPlan", namespace)
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns == ["Name", "Pools", "Phase", "Ready", "Schedule", "Zone", "Age"], columns
    wide = {c["name"] for c in table["columnDefinitions"] if c.get("priority", 0) > 0}
    assert wide == {"Schedule", "Zone"}
    rows = {row["cells"][0]: dict(zip(columns, row["cells"], strict=True)) for row in table["rows"]}
    # Every pool, not only the first (a `[*].name` path would show "finance" alone).
    assert rows["plan"]["Pools"] == '[{"name":"finance"},{"name":"sales"}]'
    assert (rows["plan"]["Phase"], rows["plan"]["Ready"]) == ("Peak", "True")
    assert (rows["plan"]["Schedule"], rows["plan"]["Zone"]) == ("weekdays", "Europe/Stockholm")
    # Before the operator has written a status: no phase, no Ready.
    assert rows["fresh"]["Pools"] == '[{"name":"finance"}]'
    assert rows["fresh"]["Phase"] is None
    assert rows["fresh"]["Ready"] is None


def _kubectl(kube: Kube) -> str | None:
    if kube.bin_dir is not None and (kube.bin_dir / "kubectl").exists():
        return str(kube.bin_dir / "kubectl")
    return shutil.which("kubectl")


def _run(kubectl: str, kube: Kube, namespace: str, *args: str) -> str:
    proc = subprocess.run(
        [kubectl, "--kubeconfig", str(kube.kubeconfig), "-n", namespace, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _columns(output: str) -> dict[str, dict[str, str]]:
    """kubectl's table by row name and header, cut at the headers' columns (an empty cell
    stays an empty string)."""
    header, *rows = output.splitlines()
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [header[a:b].strip() for a, b in bounds]
    table: dict[str, dict[str, str]] = {}
    for row in rows:
        cells = dict(zip(names, (row[a:b].strip() for a, b in bounds), strict=True))
        table[cells["NAME"]] = cells
    return table


def test_kubectl_get_spl_shows_the_columns(kube: Kube, namespace: str) -> None:
    kubectl = _kubectl(kube)
    if kubectl is None:
        pytest.skip("no kubectl (neither the suite's tools nor on PATH)")
    _plans_with_status(kube, namespace)
    table = _columns(_run(kubectl, kube, namespace, "get", "spl"))
    assert list(table["plan"]) == ["NAME", "POOLS", "PHASE", "READY", "AGE"], table
    assert table["plan"]["POOLS"] == '[{"name":"finance"},{"name":"sales"}]'
    assert (table["plan"]["PHASE"], table["plan"]["READY"]) == ("Peak", "True")
    assert table["fresh"]["POOLS"] == '[{"name":"finance"}]'
    assert (table["fresh"]["PHASE"], table["fresh"]["READY"]) == ("", "")
    wide = _columns(_run(kubectl, kube, namespace, "get", "scalingplans", "-o", "wide"))
    assert list(wide["plan"]) == ["NAME", "POOLS", "PHASE", "READY", "SCHEDULE", "ZONE", "AGE"]
    assert (wide["plan"]["SCHEDULE"], wide["plan"]["ZONE"]) == ("weekdays", "Europe/Stockholm")
    assert (wide["fresh"]["SCHEDULE"], wide["fresh"]["ZONE"]) == ("", "UTC")
    # The project's category lists plans with the other kinds.
    everything = _run(kubectl, kube, namespace, "get", "hostpool-all")
    assert "scalingplan.hostpool.io/plan" in everything, everything


def test_the_crd_on_the_server(kube: Kube) -> None:
    crd = kube.read_crd(f"scalingplans.{api.GROUP}")
    assert crd["spec"]["names"]["shortNames"] == ["spl"]
    assert crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    paths = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert paths["Pools"] == ".spec.hostPoolRefs"
    assert paths["Ready"] == '.status.conditions[?(@.type=="Ready")].status'


def test_copy_of_the_example_round_trips(kube: Kube, namespace: str) -> None:
    """A plan read back and sent again unchanged is no change (no defaulting drift)."""
    created = kube.create(namespace, plan())
    again = kube.replace(namespace, copy.deepcopy(created))
    assert again["metadata"]["generation"] == 1
    assert again["spec"] == created["spec"]
