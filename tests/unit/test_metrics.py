"""Prometheus metrics: a forgotten pool leaves no series behind, other pools keep theirs."""

from __future__ import annotations

from prometheus_client import generate_latest

from hostpool_operator.metrics import PrometheusMetrics

STATUS = {
    "pendingRequests": 2,
    "hosts": {"total": 3},
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
