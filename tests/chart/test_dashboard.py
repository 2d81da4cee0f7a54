"""The chart's Grafana dashboard (files/dashboards/hostpool.json, templates/dashboards.yaml).

Rendered by the project's helm: the ConfigMap carries the sidecar's label, its JSON parses,
and every query reads only metrics the operator exports, as a live registry of
``hostpool_operator.metrics.PrometheusMetrics`` lists them (so a renamed or dropped metric
fails here, not on someone's Grafana). And every query returns data when Prometheus's own
engine (promtool's rule tests) evaluates it over the series such a registry exposes, with
their real label names.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.controlplane import ensure_tools
from support.helm import helm_template, helm_template_error
from support.monitoring import (
    Obj,
    busy_samples,
    exported_sample_names,
    metric_names,
    one,
    require_promtool,
)
from support.paths import CHART_DIR, REPO_ROOT

DASHBOARD = CHART_DIR / "files" / "dashboards" / "hostpool.json"
#: What the issue asks the dashboard to show, as metrics some panel must read.
SHOWN = {
    "pools and hosts": "hostpool_hosts",
    "sessions by state": "hostpool_sessions",
    "pending requests": "hostpool_pending_requests",
    "assignment latency": "hostpool_assignment_latency_seconds_bucket",
    "scaling actions": "hostpool_scale_actions_total",
    "plan phase": "hostpool_plan_phase",
    "API errors": "hostpool_api_errors_total",
    "leader": "hostpool_leader",
    "saturation": "hostpool_pool_saturated",
    "image update hosts": "hostpool_update_hosts",
    "image update phase": "hostpool_update_phase",
    "time to connect by phase": "hostpool_logon_phase_seconds_bucket",
    "slow logons": "hostpool_logon_seconds_bucket",
    "logon failures": "hostpool_logon_failures_total",
}
#: The metrics of the operator process, not of a pool: filtered by $job only.
OPERATOR_METRICS = {
    "hostpool_leader",
    "hostpool_build_info",
    "hostpool_api_errors_total",
    "hostpool_leader_writes_paused_seconds_total",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
}


@pytest.fixture(scope="module")
def config_map(helm: Path) -> Obj:
    return one(helm_template(helm, {"dashboards.enabled": True}), "ConfigMap")


@pytest.fixture(scope="module")
def dashboard(config_map: Obj) -> Obj:
    data: dict[str, str] = config_map["data"]
    assert list(data) == ["hostpool.json"]
    parsed: Obj = json.loads(data["hostpool.json"])
    return parsed


def panels(dashboard: Obj) -> Iterator[Obj]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold their panels


def queries(dashboard: Obj) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query: Any = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            yield f"variable {variable['name']}", text


def test_no_dashboard_by_default(helm: Path) -> None:
    assert not [d for d in helm_template(helm) if d.get("kind") == "ConfigMap"]


def test_config_map_carries_the_sidecar_label(config_map: Obj) -> None:
    meta = config_map["metadata"]
    assert meta["name"] == "hp-hostpool-operator-dashboards"
    assert meta["namespace"] == "hostpool-system"
    assert meta["labels"]["grafana_dashboard"] == "1"


def test_config_map_label_namespace_and_annotations_are_values(helm: Path) -> None:
    values = {
        "dashboards.enabled": True,
        "dashboards.label": "grafana.io/dashboard",
        "dashboards.labelValue": "hostpool",
        "dashboards.namespace": "monitoring",
        "dashboards.labels": {"team": "vdi"},
        "dashboards.annotations": {"grafana_folder": "VDI"},
    }
    meta = one(helm_template(helm, values), "ConfigMap")["metadata"]
    assert meta["namespace"] == "monitoring"
    assert meta["labels"]["grafana.io/dashboard"] == "hostpool"
    assert "grafana_dashboard" not in meta["labels"]
    assert meta["labels"]["team"] == "vdi"
    assert meta["annotations"] == {"grafana_folder": "VDI"}


def test_the_config_map_holds_the_file_as_is(dashboard: Obj) -> None:
    assert dashboard == json.loads(DASHBOARD.read_text())


def test_dashboard_shape(dashboard: Obj) -> None:
    assert dashboard["uid"] == "hostpool-operator"
    assert dashboard["title"]
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    datasource = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert [v["query"] for v in datasource] == ["prometheus"]
    for panel in panels(dashboard):
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]


def test_every_query_reads_only_exported_metrics(dashboard: Obj) -> None:
    exported = exported_sample_names()
    unknown = {}
    for where, expr in queries(dashboard):
        used = metric_names(expr)
        assert used, f"{where} reads none of the operator's metrics: {expr}"
        if used - exported:
            unknown[where] = sorted(used - exported)
    assert not unknown, f"metrics the operator does not export: {unknown}"


def test_the_dashboard_shows_what_the_issue_asks(dashboard: Obj) -> None:
    used = set().union(*(metric_names(expr) for _, expr in queries(dashboard)))
    missing = {what: name for what, name in SHOWN.items() if name not in used}
    assert not missing


def test_every_query_follows_the_variables(dashboard: Obj) -> None:
    """Every query is filtered by $job; pool metrics also by $namespace and $pool."""
    for where, expr in queries(dashboard):
        if where.startswith("variable"):
            continue
        assert 'job=~"$job"' in expr, where
        if metric_names(expr) - OPERATOR_METRICS:
            assert 'namespace=~"$namespace", pool=~"$pool"' in expr, where


def test_the_operator_metrics_are_the_ones_without_a_pool() -> None:
    """OPERATOR_METRICS above: the families of the registry without namespace/pool labels."""
    no_pool = {sample.name for sample, _ in busy_samples() if "pool" not in sample.labels}
    used = set().union(*(metric_names(e) for _, e in queries(json.loads(DASHBOARD.read_text()))))
    assert used & no_pool == OPERATOR_METRICS


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            "histogram_quantile(0.99, sum by (le) (rate("
            'hostpool_assignment_latency_seconds_bucket{job=~"$job"}[$__rate_interval])))',
            {"hostpool_assignment_latency_seconds_bucket"},
        ),
        (
            'sum by (code) (rate(hostpool_api_errors_total{code!="hostpool_x"}[5m]))',
            {"hostpool_api_errors_total"},
        ),
        ('label_values(hostpool_hosts{job=~"$job"}, namespace)', {"hostpool_hosts"}),
        ("rate(process_cpu_seconds_total[1m]) / on(instance) up", {"process_cpu_seconds_total"}),
        (
            "hostpool_plan_phase == 1 and on(pool) hostpool_pool_saturated",
            {"hostpool_plan_phase", "hostpool_pool_saturated"},
        ),
    ],
)
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_suffix_rules_follow_the_metric_types() -> None:
    exported = exported_sample_names()
    # A counter is read as _total, a histogram as _bucket/_sum/_count, a gauge as itself.
    assert "hostpool_assignments_total" in exported
    assert "hostpool_assignments" not in exported
    assert {
        f"hostpool_assignment_latency_seconds{s}" for s in ("_bucket", "_sum", "_count")
    } <= exported
    assert "hostpool_assignment_latency_seconds" not in exported
    assert "hostpool_hosts" in exported
    assert "hostpool_hosts_total" not in exported
    assert "hostpool_hosts_bucket" not in exported
    assert "process_cpu_seconds_total" in exported


def test_bad_dashboard_values_are_refused(helm: Path) -> None:
    assert "/dashboards/label" in helm_template_error(helm, {"dashboards.label": ""})


#: What the dashboard's variables stand for when promtool evaluates its queries.
VARIABLES = {"$job": ".*", "$namespace": ".*", "$pool": ".*", "$__rate_interval": "5m"}
#: The target labels Prometheus adds (the ServiceMonitor's, with honorLabels: a sample's own
#: namespace label wins).
TARGET = {"job": "hp-hostpool-operator-metrics", "instance": "10.0.0.1:9090"}


def busy_operator_series() -> list[dict[str, str]]:
    """promtool input series: every sample of a registry that saw a little of everything,
    with the target's labels; counters grow each minute, gauges stay."""
    series = []
    for sample, kind in busy_samples():
        growing = kind in ("counter", "histogram")
        labels = {"namespace": "hostpool-system", **TARGET, **sample.labels}
        selector = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
        value = max(float(sample.value), 1.0) if growing else float(sample.value)
        values = f"0+{value:g}x15" if growing else f"{value:g}x15"
        series.append({"series": f"{sample.name}{{{selector}}}", "values": values})
    return series


def as_promql(query: str) -> str:
    """A dashboard query as plain PromQL: variables replaced, label_values(X, l) as X."""
    for variable, value in VARIABLES.items():
        query = query.replace(variable, value)
    match = re.fullmatch(r"label_values\((.*),\s*\w+\)", query.strip())
    return match.group(1) if match else query


def test_every_query_returns_data(dashboard: Obj, tmp_path: Path) -> None:
    promtool = require_promtool(ensure_tools(REPO_ROOT))
    checks = list(queries(dashboard))
    # One alert per query, firing (with no labels, as count() leaves none) when it has data.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"alert": f"Query{i}", "expr": f"count({as_promql(expr)})"}
                    for i, (_, expr) in enumerate(checks)
                ],
            }
        ]
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    unit = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": busy_operator_series(),
                "alert_rule_test": [
                    {"eval_time": "10m", "alertname": f"Query{i}", "exp_alerts": [{}]}
                    for i in range(len(checks))
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(unit))
    proc = subprocess.run(
        [str(promtool), "test", "rules", str(tmp_path / "test.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    names = "\n".join(f"Query{i}: {where}" for i, (where, _) in enumerate(checks))
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\n{names}"
