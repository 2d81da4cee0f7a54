"""The Argo CD health checks (charts/hostpool-operator/argocd/hostpool.io/<Kind>/health.lua).

Run with Lua 5.1 (Argo CD's gopher-lua speaks 5.1) against objects taken from a live run of
the operator (``tests/support/fixtures/argocd/``, written by ``tests/e2e/test_rbac_live.py``
with ``HOSTPOOL_UPDATE_ARGOCD_FIXTURES=1``), and against variants of those objects for the
states a short run does not reach (a newer generation, Ready False for other reasons,
Unknown conditions).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from support.argocd_health import FIXTURE_DIR, HEALTH_DIR, argo_testdata_path, health, load_fixture

Obj = dict[str, Any]

#: fixture -> (status, a part of the message). The same table the live test checks.
EXPECTED: dict[str, tuple[str, str]] = {
    "hostpool-new": ("Progressing", "Waiting for the hostpool-operator to observe the pool"),
    "hostpool-ready": ("Healthy", "Reconciled: 2 of 3 hosts take new sessions"),
    "hostpool-saturated": ("Healthy", "saturated: RequestsWaiting"),
    "sessionhost-new": ("Progressing", "Waiting for the hostpool-operator to observe the host"),
    "sessionhost-available": ("Healthy", "AcceptingSessions: 1 of 2 sessions"),
    "sessionhost-full": ("Healthy", "SessionLimitReached: 2 sessions, limit 2"),
    "sessionhost-draining": ("Suspended", "Draining: drain mode"),
    "sessionhost-pool-not-found": ("Degraded", "PoolNotFound: HostPool 'nowhere' does not exist"),
    "sessionrequest-new": ("Progressing", "Waiting for the hostpool-operator to place"),
    "sessionrequest-assigned": ("Healthy", "Assigned to host-a (NewSession)"),
    "sessionrequest-pending": ("Progressing", "Pending: PoolSaturated"),
    "sessionrequest-failed": ("Degraded", "Failed: HostDeleted: SessionHost 'host-b' was deleted"),
    "scalingplan-new": ("Progressing", "Waiting for the hostpool-operator to observe the plan"),
    "scalingplan-applied": ("Healthy", "Applied: applied to 1 pool(s); phase Peak"),
    "scalingplan-pool-not-found": ("Degraded", "PoolNotFound: HostPool 'nowhere' does not exist"),
}


def set_condition(obj: Obj, type_: str, status: str, reason: str, message: str = "") -> Obj:
    out = copy.deepcopy(obj)
    conditions = out["status"]["conditions"]
    for c in conditions:
        if c["type"] == type_:
            c.update(status=status, reason=reason, message=message)
            return out
    conditions.append({"type": type_, "status": status, "reason": reason, "message": message})
    return out


def drop_condition(obj: Obj, type_: str) -> Obj:
    out = copy.deepcopy(obj)
    out["status"]["conditions"] = [c for c in out["status"]["conditions"] if c["type"] != type_]
    return out


def bump_generation(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    out["metadata"]["generation"] = out["status"]["observedGeneration"] + 1
    return out


def test_every_kind_has_a_check_in_argo_cds_layout() -> None:
    kinds = sorted(p.parent.name for p in HEALTH_DIR.glob("*/health.lua"))
    assert kinds == ["HostPool", "ScalingPlan", "SessionHost", "SessionRequest"]


def test_fixtures_are_complete_and_real() -> None:
    names = sorted(p.stem for p in FIXTURE_DIR.glob("*.json"))
    assert names == sorted(EXPECTED)
    for name in names:
        obj = load_fixture(name)
        assert obj["apiVersion"] == "hostpool.io/v1alpha1"
        # Taken from the API server: it set these, no hand-written object has them.
        assert obj["metadata"]["uid"]
        assert obj["metadata"]["resourceVersion"]
        assert obj["metadata"]["creationTimestamp"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_health(name: str) -> None:
    obj = load_fixture(name)
    status, text = EXPECTED[name]
    got = health(obj["kind"], obj)
    assert got["status"] == status, got
    assert text in got["message"], got


# ---------------------------------------------------------------------------------------
# HostPool


def test_pool_not_yet_observed_generation_is_progressing() -> None:
    got = health("HostPool", bump_generation(load_fixture("hostpool-ready")))
    assert got["status"] == "Progressing"
    assert "observe generation 2 (observed 1)" in got["message"]


def test_pool_ready_false_is_degraded() -> None:
    pool = set_condition(
        load_fixture("hostpool-ready"), "Ready", "False", "InvalidSpec", "maxSessionLimit: bad"
    )
    assert health("HostPool", pool) == {
        "status": "Degraded",
        "message": "InvalidSpec: maxSessionLimit: bad",
    }


def test_pool_ready_unknown_or_missing_is_progressing() -> None:
    pool = load_fixture("hostpool-ready")
    unknown = health("HostPool", set_condition(pool, "Ready", "Unknown", "Starting"))
    assert unknown["status"] == "Progressing"
    assert "Ready is Unknown" in unknown["message"]
    missing = health("HostPool", drop_condition(pool, "Ready"))
    assert missing == {"status": "Progressing", "message": "Waiting for condition Ready"}


def test_pool_saturated_and_limited_is_healthy_with_both_named() -> None:
    got = health("HostPool", load_fixture("hostpool-saturated"))
    assert got["status"] == "Healthy"
    assert "saturated: RequestsWaiting: 1 request(s) wait" in got["message"]
    assert "scaling limited: MaxHostsReached" in got["message"]


def with_update(obj: Obj, phase: str, updated: int, outdated: int, message: str) -> Obj:
    """The pool as the operator writes it during an image update (engine.status)."""
    out = copy.deepcopy(obj)
    out["status"]["update"] = {
        "revision": "1e4c0d23f9",
        "updatedHosts": updated,
        "outdatedHosts": outdated,
        "phase": phase,
        "message": message,
    }
    updating, reason, failed = {
        "Progressing": ("True", "Progressing", "False"),
        "Complete": ("False", "UpdateComplete", "False"),
        "Failed": ("False", "UpdateFailed", "True"),
    }[phase]
    out = set_condition(out, "Updating", updating, reason, message)
    return set_condition(out, "UpdateFailed", failed, "UpdateFailed", message)


def test_pool_updating_is_progressing_with_its_hosts() -> None:
    pool = with_update(load_fixture("hostpool-ready"), "Progressing", 1, 2, "1 host(s) updated")
    got = health("HostPool", pool)
    assert got["status"] == "Progressing"
    assert "image update Progressing: 1 updated, 2 outdated" in got["message"], got


def test_pool_update_failed_is_degraded_with_the_cause() -> None:
    cause = "canary host desk-x not Ready 1 min after it was made: ErrImagePull"
    got = health("HostPool", with_update(load_fixture("hostpool-ready"), "Failed", 1, 3, cause))
    assert got == {"status": "Degraded", "message": f"image update failed: UpdateFailed: {cause}"}


def test_pool_update_complete_is_healthy() -> None:
    pool = with_update(load_fixture("hostpool-ready"), "Complete", 3, 0, "all 3 host(s) updated")
    assert health("HostPool", pool)["status"] == "Healthy"


def test_pool_with_empty_conditions_is_progressing() -> None:
    pool = load_fixture("hostpool-ready")
    pool["status"]["conditions"] = []
    assert health("HostPool", pool)["status"] == "Progressing"


# ---------------------------------------------------------------------------------------
# SessionHost


@pytest.mark.parametrize(
    ("reason", "status"),
    [
        ("AcceptingSessions", "Healthy"),
        ("SessionLimitReached", "Healthy"),
        ("LogonStormThreshold", "Healthy"),
        ("Draining", "Suspended"),
        ("InvalidSpec", "Degraded"),
        ("PoolNotFound", "Degraded"),
        ("PoolInvalid", "Degraded"),
        ("SomethingNew", "Degraded"),
    ],
)
def test_host_available_false_reasons(reason: str, status: str) -> None:
    value = "True" if reason == "AcceptingSessions" else "False"
    host = set_condition(load_fixture("sessionhost-available"), "Available", value, reason, "m")
    assert health("SessionHost", host) == {"status": status, "message": f"{reason}: m"}


def test_host_not_yet_observed_or_unknown_is_progressing() -> None:
    host = load_fixture("sessionhost-available")
    assert health("SessionHost", bump_generation(host))["status"] == "Progressing"
    got = health("SessionHost", set_condition(host, "Available", "Unknown", "Starting"))
    assert got["status"] == "Progressing"
    assert health("SessionHost", drop_condition(host, "Available"))["status"] == "Progressing"


def test_host_status_from_an_agent_only_is_progressing() -> None:
    """An agent may write metrics before the operator has written anything."""
    host = load_fixture("sessionhost-new")
    host["status"] = {"metrics": {"cpuPercent": 12}}
    assert health("SessionHost", host)["status"] == "Progressing"


def test_host_stale_metrics_are_named() -> None:
    host = set_condition(
        load_fixture("sessionhost-available"), "MetricsStale", "True", "SampleTooOld", "old"
    )
    got = health("SessionHost", host)
    assert got["status"] == "Healthy"
    assert got["message"].endswith("; metrics stale: SampleTooOld: old")


# ---------------------------------------------------------------------------------------
# SessionRequest


def test_request_session_state_is_named() -> None:
    request = load_fixture("sessionrequest-assigned")
    request["status"]["sessionState"] = "Active"
    assert health("SessionRequest", request) == {
        "status": "Healthy",
        "message": "Assigned to host-a (NewSession), session Active",
    }


def test_request_pending_message_says_why() -> None:
    got = health("SessionRequest", load_fixture("sessionrequest-pending"))
    assert got["status"] == "Progressing"
    assert got["message"].startswith("Pending: PoolSaturated: ")


def test_request_failed_invalid_is_degraded() -> None:
    request = load_fixture("sessionrequest-failed")
    request["status"]["message"] = "invalid request: user: empty"
    request = set_condition(request, "Assigned", "False", "InvalidSpec", "invalid")
    got = health("SessionRequest", request)
    assert got == {
        "status": "Degraded",
        "message": "Failed: InvalidSpec: invalid request: user: empty",
    }


def test_request_unknown_phase() -> None:
    request = load_fixture("sessionrequest-assigned")
    request["status"]["phase"] = "Teleported"
    assert health("SessionRequest", request) == {
        "status": "Unknown",
        "message": "Unknown phase Teleported",
    }


# ---------------------------------------------------------------------------------------
# ScalingPlan


def test_plan_not_yet_observed_generation_is_progressing() -> None:
    got = health("ScalingPlan", bump_generation(load_fixture("scalingplan-applied")))
    assert got == {
        "status": "Progressing",
        "message": "Waiting for the hostpool-operator to observe generation 2 (observed 1)",
    }


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("InvalidSpec", "spec.schedules: Field required"),
        ("UnknownTimeZone", "unknown time zone 'Mars/Olympus_Mons'"),
        ("PoolNotFound", "HostPool 'nowhere' does not exist"),
        ("PoolConflict", "HostPool 'vdi' follows ScalingPlan 'other' already"),
        ("ScalingRequired", "HostPool 'vdi' has no explicit loadBalancer.maxSessionLimit"),
    ],
)
def test_plan_ready_false_is_degraded(reason: str, message: str) -> None:
    plan = set_condition(load_fixture("scalingplan-applied"), "Ready", "False", reason, message)
    assert health("ScalingPlan", plan) == {"status": "Degraded", "message": f"{reason}: {message}"}


def test_plan_unknown_time_zone_without_a_phase_is_degraded() -> None:
    """An unknown zone leaves no phase in force: the operator writes phase null."""
    plan = set_condition(
        load_fixture("scalingplan-applied"),
        "Ready",
        "False",
        "UnknownTimeZone",
        "unknown time zone 'Mars/Olympus_Mons'",
    )
    plan["status"]["phase"] = None
    plan["status"]["schedule"] = None
    assert health("ScalingPlan", plan) == {
        "status": "Degraded",
        "message": "UnknownTimeZone: unknown time zone 'Mars/Olympus_Mons'",
    }


def test_plan_every_problem_is_in_the_message() -> None:
    """Ready False names the first problem's reason and lists every problem."""
    message = "HostPool 'vdi' follows ScalingPlan 'other' already; HostPool 'gone' does not exist"
    plan = set_condition(
        load_fixture("scalingplan-applied"), "Ready", "False", "PoolConflict", message
    )
    assert health("ScalingPlan", plan) == {
        "status": "Degraded",
        "message": f"PoolConflict: {message}",
    }


def test_plan_ready_unknown_or_missing_is_progressing() -> None:
    plan = load_fixture("scalingplan-applied")
    unknown = health("ScalingPlan", set_condition(plan, "Ready", "Unknown", "Starting", "soon"))
    assert unknown == {"status": "Progressing", "message": "Ready is Unknown: Starting: soon"}
    missing = health("ScalingPlan", drop_condition(plan, "Ready"))
    assert missing == {"status": "Progressing", "message": "Waiting for condition Ready"}


def test_plan_applied_without_a_phase_names_none() -> None:
    plan = load_fixture("scalingplan-applied")
    del plan["status"]["phase"]
    assert health("ScalingPlan", plan) == {
        "status": "Healthy",
        "message": "Applied: applied to 1 pool(s)",
    }


@pytest.mark.parametrize("phase", ["RampUp", "Peak", "RampDown", "OffPeak"])
def test_plan_applied_names_the_phase(phase: str) -> None:
    plan = load_fixture("scalingplan-applied")
    plan["status"]["phase"] = phase
    got = health("ScalingPlan", plan)
    assert got == {"status": "Healthy", "message": f"Applied: applied to 1 pool(s); phase {phase}"}


def test_plan_status_without_observed_generation_is_progressing() -> None:
    plan = load_fixture("scalingplan-new")
    plan["status"] = {"conditions": []}
    assert health("ScalingPlan", plan) == {
        "status": "Progressing",
        "message": "Waiting for the hostpool-operator to observe the plan",
    }


# ---------------------------------------------------------------------------------------
# Argo CD's own test layout (health_test.yaml + testdata/), for an upstream contribution


@pytest.mark.parametrize("kind", ["HostPool", "ScalingPlan", "SessionHost", "SessionRequest"])
def test_upstream_health_test_yaml(kind: str) -> None:
    """What Argo CD's TestLuaHealthScript does: every case's status and message, exactly."""
    cases = yaml.safe_load((HEALTH_DIR / kind / "health_test.yaml").read_text())["tests"]
    assert cases
    for case in cases:
        obj = yaml.safe_load((HEALTH_DIR / kind / case["inputPath"]).read_text())
        assert health(kind, obj) == case["healthStatus"], case["inputPath"]


def test_upstream_testdata_are_the_fixtures() -> None:
    fixtures = sorted(p.stem for p in FIXTURE_DIR.glob("*.json"))
    testdata = sorted(HEALTH_DIR.glob("*/testdata/*.yaml"))
    assert sorted(argo_testdata_path(name) for name in fixtures) == testdata
    for name in fixtures:
        assert yaml.safe_load(argo_testdata_path(name).read_text()) == load_fixture(name), name
