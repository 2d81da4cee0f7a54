"""``hostpool_session_limit_actions_total{namespace,pool,limit,action}``: each action of a
pool's session limit counts once under its limit and action; a forgotten pool drops its
series, other pools keep theirs."""

from __future__ import annotations

from prometheus_client import generate_latest

from hostpool_operator.controller.metrics import PrometheusMetrics
from hostpool_operator.kube.sinks import MetricsSink


def test_actions_count_by_limit_and_action_and_go_with_their_pool() -> None:
    metrics = PrometheusMetrics()
    metrics.session_limit_action("vdi", "finance", "Disconnected", "Logoff")
    metrics.session_limit_action("vdi", "finance", "Disconnected", "Logoff")
    metrics.session_limit_action("vdi", "finance", "Idle", "Disconnect")
    metrics.session_limit_action("vdi", "sales", "MaxSession", "Logoff")
    text = generate_latest(metrics.registry).decode()
    assert "# TYPE hostpool_session_limit_actions_total counter" in text
    series = (
        'hostpool_session_limit_actions_total{action="%s",limit="%s",namespace="vdi",pool="%s"}'
    )
    assert series % ("Logoff", "Disconnected", "finance") + " 2.0" in text
    assert series % ("Disconnect", "Idle", "finance") + " 1.0" in text
    metrics.forget_pool("vdi", "finance")
    text = generate_latest(metrics.registry).decode()
    assert 'pool="finance"' not in text
    assert series % ("Logoff", "MaxSession", "sales") + " 1.0" in text


def test_the_base_sink_takes_it_and_does_nothing() -> None:
    MetricsSink().session_limit_action("vdi", "p", "Idle", "Disconnect")
