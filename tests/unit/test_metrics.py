"""Prometheus metrics: a forgotten pool leaves no series behind, other pools keep theirs."""

from __future__ import annotations

from prometheus_client import generate_latest

from hostpool_operator.metrics import PrometheusMetrics

STATUS = {
    "pendingRequests": 2,
    "hosts": {"total": 3, "notReady": 1},
    "capacity": {"free": 4},
    "sessions": {"total": 5, "connecting": 1, "active": 4, "disconnected": 0},
}


def exposition(metrics: PrometheusMetrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_forget_pool_drops_every_series_of_that_pool_only() -> None:
    metrics = PrometheusMetrics()
    for pool in ("gone", "kept"):
        metrics.pool_state("ns", pool, STATUS)
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
