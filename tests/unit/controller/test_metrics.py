"""Prometheus metrics: what each series says, and a forgotten pool leaves no series behind,
other pools keep theirs."""

from __future__ import annotations

import platform
import urllib.error
import urllib.request

from prometheus_client import generate_latest

from hostpool_operator.controller.metrics import PrometheusMetrics, package_version
from support.ports import free_port

STATUS = {
    "pendingRequests": 2,
    "hosts": {"total": 3, "notReady": 1},
    "capacity": {"free": 4},
    "sessions": {"total": 5, "connecting": 1, "active": 4, "disconnected": 0},
}
#: A scaling pool whose requests wait for a slot, at maxHosts, with two silent agents.
SATURATED = {
    **STATUS,
    "hosts": {"total": 3, "notReady": 1, "agentSilent": 2},
    "conditions": [
        {"type": "Ready", "status": "True"},
        {"type": "Saturated", "status": "True", "reason": "RequestsWaiting"},
        {"type": "ScalingLimited", "status": "True", "reason": "MaxHostsReached"},
    ],
}


def exposition(metrics: PrometheusMetrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_forget_pool_drops_every_series_of_that_pool_only() -> None:
    metrics = PrometheusMetrics()
    for pool in ("gone", "kept"):
        metrics.pool_state("ns", pool, SATURATED)
        metrics.pool_state("ns", pool, {**SATURATED, "scalingPlan": {"phase": "Peak"}})
        metrics.observe_assignment("ns", pool, "NewSession", 0.2, queued=0.01)
        metrics.observe_assignment("ns", pool, "Reconnected", 0.1, queued=0.01)
        metrics.scaled("ns", pool, "up", 2)
        metrics.host_started("ns", pool, 1.5)
    assert 'pool="gone"' in exposition(metrics)
    metrics.forget_pool("ns", "gone")
    text = exposition(metrics)
    assert 'pool="gone"' not in text
    assert text.count('pool="kept"') > 20  # gauges, counters, both histograms' buckets


def test_forget_pool_of_a_pool_never_observed_is_harmless() -> None:
    metrics = PrometheusMetrics()
    metrics.forget_pool("ns", "never-seen")
    metrics.pool_state("ns", "never-seen", STATUS)
    assert 'pool="never-seen"' in exposition(metrics)


def test_host_start_and_not_ready_hosts_are_exported() -> None:
    metrics = PrometheusMetrics()
    metrics.pool_state("ns", "p", STATUS)
    metrics.host_started("ns", "p", 1.5)
    metrics.host_started("ns", "p", 40)
    text = exposition(metrics)
    assert 'hostpool_hosts_not_ready{namespace="ns",pool="p"} 1.0' in text
    assert 'hostpool_host_start_seconds_count{namespace="ns",pool="p"} 2.0' in text
    assert 'hostpool_host_start_seconds_bucket{le="2.0",namespace="ns",pool="p"} 1.0' in text


def test_plan_phase_is_one_for_the_phase_in_force_and_absent_without_a_plan() -> None:
    metrics = PrometheusMetrics()
    planned = {**STATUS, "scalingPlan": {"name": "office", "phase": "RampDown"}}
    metrics.pool_state("ns", "p", planned)
    text = exposition(metrics)
    assert 'hostpool_plan_phase{namespace="ns",phase="RampDown",pool="p"} 1.0' in text
    assert 'hostpool_plan_phase{namespace="ns",phase="Peak",pool="p"} 0.0' in text
    metrics.pool_state("ns", "p", {**STATUS, "scalingPlan": {"name": "office"}})
    assert "hostpool_plan_phase{" not in exposition(metrics)
    metrics.pool_state("ns", "p", planned)
    metrics.forget_pool("ns", "p")
    assert "hostpool_plan_phase{" not in exposition(metrics)


def test_update_hosts_and_phase_follow_status_update_and_go_with_the_pool() -> None:
    metrics = PrometheusMetrics()
    metrics.pool_state("ns", "p", {**STATUS, "update": {"revision": "r", "updatedHosts": 3,
                                                        "outdatedHosts": 0}})  # fmt: skip
    text = exposition(metrics)
    assert 'hostpool_update_hosts{namespace="ns",pool="p",state="updated"} 3.0' in text
    assert "hostpool_update_phase{" not in text  # no template change yet
    update = {"revision": "s", "updatedHosts": 1, "outdatedHosts": 2, "phase": "Progressing"}
    metrics.pool_state("ns", "p", {**STATUS, "update": update})
    text = exposition(metrics)
    assert 'hostpool_update_hosts{namespace="ns",pool="p",state="outdated"} 2.0' in text
    assert 'hostpool_update_phase{namespace="ns",phase="Progressing",pool="p"} 1.0' in text
    assert 'hostpool_update_phase{namespace="ns",phase="Failed",pool="p"} 0.0' in text
    metrics.pool_state("ns", "p", STATUS)  # the template removed: no series
    assert "hostpool_update_hosts{" not in exposition(metrics)
    metrics.pool_state("ns", "p", {**STATUS, "update": update})
    metrics.forget_pool("ns", "p")
    text = exposition(metrics)
    assert "hostpool_update_hosts{" not in text
    assert "hostpool_update_phase{" not in text


def test_sessions_by_state_add_up_to_the_total() -> None:
    # A sum() over the states must not count the sessions twice: no state="total" series.
    metrics = PrometheusMetrics()
    metrics.pool_state("ns", "p", STATUS)
    lines = [
        line for line in exposition(metrics).splitlines() if line.startswith("hostpool_sessions{")
    ]
    assert sorted(lines) == [
        'hostpool_sessions{namespace="ns",pool="p",state="active"} 4.0',
        'hostpool_sessions{namespace="ns",pool="p",state="connecting"} 1.0',
        'hostpool_sessions{namespace="ns",pool="p",state="disconnected"} 0.0',
    ]


def test_saturated_scaling_limited_and_silent_agents_follow_the_status() -> None:
    metrics = PrometheusMetrics()
    metrics.pool_state("ns", "p", SATURATED)
    text = exposition(metrics)
    assert 'hostpool_pool_saturated{namespace="ns",pool="p"} 1.0' in text
    assert 'hostpool_scaling_limited{namespace="ns",pool="p"} 1.0' in text
    assert 'hostpool_hosts_agent_silent{namespace="ns",pool="p"} 2.0' in text
    relieved = {
        **SATURATED,
        "hosts": {"total": 4, "agentSilent": 0},
        "conditions": [
            {"type": "Saturated", "status": "False", "reason": "CapacityAvailable"},
            {"type": "ScalingLimited", "status": "False", "reason": "WithinLimits"},
        ],
    }
    metrics.pool_state("ns", "p", relieved)
    text = exposition(metrics)
    assert 'hostpool_pool_saturated{namespace="ns",pool="p"} 0.0' in text
    assert 'hostpool_scaling_limited{namespace="ns",pool="p"} 0.0' in text
    assert 'hostpool_hosts_agent_silent{namespace="ns",pool="p"} 0.0' in text


def test_no_scaling_limited_series_without_scaling() -> None:
    metrics = PrometheusMetrics()
    metrics.pool_state("ns", "p", STATUS)  # no ScalingLimited condition: no scaling spec
    text = exposition(metrics)
    assert "hostpool_scaling_limited{" not in text
    assert 'hostpool_pool_saturated{namespace="ns",pool="p"} 0.0' in text
    metrics.pool_state("ns", "p", SATURATED)
    metrics.pool_state("ns", "p", STATUS)  # scaling removed from the spec
    assert "hostpool_scaling_limited{" not in exposition(metrics)


def test_build_info_and_the_process_collectors() -> None:
    text = exposition(PrometheusMetrics())
    version, python = package_version(), platform.python_version()
    assert f'hostpool_build_info{{python="{python}",version="{version}"}} 1.0' in text
    assert version != "unknown"  # the package is installed (editable) in the venv
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"):
        assert f"\n{name}" in text, name


def test_leader_gauge() -> None:
    metrics = PrometheusMetrics()
    assert "\nhostpool_leader 0.0" in exposition(metrics)  # a standby until told otherwise
    metrics.leading(True)
    assert "\nhostpool_leader 1.0" in exposition(metrics)
    metrics.leading(False)
    assert "\nhostpool_leader 0.0" in exposition(metrics)


def test_readyz_and_the_leader_gauge_tell_leader_from_standby() -> None:
    """/readyz on the metrics address: 503 while starting or stopping, 200 with the role
    once synced; hostpool_leader is 1 for the leader only. A real server on a free port."""
    metrics = PrometheusMetrics()
    port = free_port()
    metrics.serve(f"127.0.0.1:{port}")

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                return int(answer.status), answer.read().decode()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode()

    assert get("/readyz") == (503, "starting\n")
    metrics.role("standby")
    assert get("/readyz") == (200, "standby\n")
    assert "\nhostpool_leader 0.0" in get("/metrics")[1]
    metrics.role("leader")
    assert get("/readyz") == (200, "leader\n")
    assert "\nhostpool_leader 1.0" in get("/metrics")[1]
    metrics.role("stopping")
    assert get("/readyz") == (503, "stopping\n")
    assert "\nhostpool_leader 0.0" in get("/metrics")[1]


def test_api_writes_are_counted_by_verb() -> None:
    metrics = PrometheusMetrics()
    for verb in ("PUT", "PATCH", "PATCH"):
        metrics.api_write(verb)
    text = exposition(metrics)
    assert 'hostpool_api_writes_total{verb="PATCH"} 2.0' in text
    assert 'hostpool_api_writes_total{verb="PUT"} 1.0' in text


def test_api_errors_are_counted_by_code() -> None:
    metrics = PrometheusMetrics()
    for code in ("409", "409", "429", "transport"):
        metrics.api_error(code)
    text = exposition(metrics)
    assert 'hostpool_api_errors_total{code="409"} 2.0' in text
    assert 'hostpool_api_errors_total{code="429"} 1.0' in text
    assert 'hostpool_api_errors_total{code="transport"} 1.0' in text


def test_a_connect_that_ends_is_counted_by_phase_and_a_failure_by_reason() -> None:
    metrics = PrometheusMetrics()
    metrics.connect_ended("ns", "p", {"queue": 0.2, "sessionStart": 3.0}, "Succeeded", None)
    metrics.connect_ended("ns", "p", {"queue": 40.0}, "Failed", ("queue", "PoolDeleted"))
    text = exposition(metrics)
    assert 'hostpool_logon_phase_seconds_count{namespace="ns",phase="queue",pool="p"} 2.0' in text
    assert 'hostpool_logon_seconds_count{namespace="ns",pool="p"} 1.0' in text  # succeeded only
    assert 'hostpool_logon_seconds_sum{namespace="ns",pool="p"} 3.2' in text
    failures = (
        'hostpool_logon_failures_total{namespace="ns",phase="queue",pool="p",reason="PoolDeleted"}'
    )
    assert f"{failures} 1.0" in text
    metrics.forget_pool("ns", "p")
    text = exposition(metrics)
    assert "hostpool_logon_failures_total{" not in text
    assert "hostpool_logon_phase_seconds_count{" not in text
