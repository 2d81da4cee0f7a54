"""The chart's alerts (templates/prometheusrule.yaml), checked and unit-tested by promtool.

The PrometheusRule is rendered by the project's helm; its ``spec.groups`` become a plain rules
file, which ``promtool check rules`` validates and ``promtool test rules`` runs against the
tests in ``tests/chart/alerts/<Alert>.yaml``: one file per alert, each with input series that
fire the alert and series that do not. promtool is built by ``hack/cluster/tools.sh`` (from
github.com/prometheus/prometheus, hack/cluster/promtool); without it these tests skip, or
fail under CI.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.helm import helm_template, helm_template_error
from support.monitoring import (
    Obj,
    busy_samples,
    exported_sample_names,
    metric_names,
    one,
    require_promtool,
)
from support.paths import REPO_ROOT

ALERT_TESTS = Path(__file__).resolve().parent / "alerts"
RUNBOOKS = REPO_ROOT / "docs" / "runbooks.md"
ALERTS = (
    "HostPoolSaturated",
    "HostPoolMaxHostsReached",
    "HostPoolAssignmentLatencyHigh",
    "HostPoolOperatorAbsent",
    "HostPoolNoLeader",
    "HostPoolAgentsSilent",
    "HostPoolApiErrorsRising",
    "HostPoolLeaderWritesPaused",
    "HostPoolUpdateStalled",
    "HostPoolSlowLogons",
)
#: Metrics of Prometheus itself that alerts may read besides the operator's.
PROMETHEUS_METRICS = {"up"}


@pytest.fixture(scope="module")
def helm(bin_dir: Path) -> Path:
    return bin_dir / "helm"


@pytest.fixture(scope="module")
def promtool(bin_dir: Path) -> Path:
    return require_promtool(bin_dir)


@pytest.fixture(scope="module")
def groups(helm: Path) -> list[Obj]:
    rule = one(helm_template(helm, {"prometheusRule.enabled": True}), "PrometheusRule")
    groups: list[Obj] = rule["spec"]["groups"]
    return groups


@pytest.fixture(scope="module")
def rules_file(groups: list[Obj], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rendered rules as a plain Prometheus rules file."""
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def alerts(groups: list[Obj]) -> dict[str, Obj]:
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def run_promtool(promtool: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args], capture_output=True, text=True, timeout=120, check=False
    )


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            title = match.group(1).strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return anchors


def test_promtool_is_the_pinned_version(promtool: Path) -> None:
    proc = run_promtool(promtool, "--version")
    assert proc.returncode == 0, proc.stderr
    assert "version 0.316.0" in proc.stdout + proc.stderr


def test_no_prometheus_rule_by_default(helm: Path) -> None:
    assert not [d for d in helm_template(helm) if d.get("kind") == "PrometheusRule"]


def test_prometheus_rule_object(helm: Path) -> None:
    values = {"prometheusRule.enabled": True, "prometheusRule.labels": {"release": "kps"}}
    docs = helm_template(helm, values)
    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "hostpool-system"
    assert rule["metadata"]["labels"]["release"] == "kps"


def test_every_alert_is_there_once(groups: list[Obj]) -> None:
    names = [rule["alert"] for group in groups for rule in group["rules"]]
    assert sorted(names) == sorted(ALERTS)


def test_rules_pass_promtool_check(promtool: Path, rules_file: Path) -> None:
    proc = run_promtool(promtool, "check", "rules", str(rules_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in proc.stdout


def test_every_alert_has_severity_summary_description_and_runbook(groups: list[Obj]) -> None:
    anchors = github_anchors(RUNBOOKS.read_text())
    for name, rule in alerts(groups).items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["for"], name
        annotations = rule["annotations"]
        assert annotations["summary"], name
        assert annotations["description"], name
        url = annotations["runbook_url"]
        assert url == f"docs/runbooks.md#{name.lower()}", name
        assert name.lower() in anchors, f"docs/runbooks.md has no section {name}"


def test_alerts_read_only_metrics_the_operator_exports(groups: list[Obj]) -> None:
    exported = exported_sample_names()
    for name, rule in alerts(groups).items():
        used = metric_names(rule["expr"])
        assert used, f"{name} reads none of the operator's metrics"
        assert used <= exported, f"{name}: not exported: {sorted(used - exported)}"
        words = set(re.findall(r"\b[a-z_]+(?=\{)", rule["expr"]))
        assert words <= exported | PROMETHEUS_METRICS, name


def test_alert_test_series_are_labelled_like_the_operators() -> None:
    """The input series of the promtool tests carry the labels the operator's samples carry
    (plus the target's job, instance and namespace), so the tests speak of real series."""
    real: dict[str, set[str]] = {}
    for sample, _ in busy_samples():
        real.setdefault(sample.name, set()).update(sample.labels)
    target = {"job", "instance", "namespace"}
    for path in sorted(ALERT_TESTS.glob("*.yaml")):
        for group in yaml.safe_load(path.read_text())["tests"]:
            for series in group["input_series"]:
                match = re.fullmatch(r"(\w+)\{(.*)\}", series["series"])
                assert match, series["series"]
                name = match.group(1)
                labels = set(re.findall(r"(\w+)=", match.group(2)))
                if name in PROMETHEUS_METRICS:
                    continue
                assert name in real, f"{path.name}: {name} is not a sample the operator exposes"
                assert real[name] <= labels <= real[name] | target, (path.name, name, labels)


@pytest.mark.parametrize("alert", ALERTS)
def test_alert_unit_tests(alert: str, promtool: Path, rules_file: Path, tmp_path: Path) -> None:
    """promtool test rules: the alert fires on some input series and not on others."""
    source = ALERT_TESTS / f"{alert}.yaml"
    assert source.exists(), f"no promtool tests for {alert}: add {source.name}"
    tests: Obj = yaml.safe_load(source.read_text())
    cases = [
        case
        for group in tests["tests"]
        for case in group["alert_rule_test"]
        if case["alertname"] == alert
    ]
    assert any(case["exp_alerts"] for case in cases), f"{source.name}: nothing fires {alert}"
    assert any(not case["exp_alerts"] for case in cases), f"{source.name}: no non-firing case"
    assert all(case["alertname"] == alert for g in tests["tests"] for case in g["alert_rule_test"])
    unit: dict[str, Any] = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": "1m",
        **tests,
    }
    test_file = tmp_path / source.name
    test_file.write_text(yaml.safe_dump(unit, sort_keys=False))
    proc = run_promtool(promtool, "test", "rules", str(test_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_alert_tests_cover_exactly_the_alerts() -> None:
    assert sorted(p.stem for p in ALERT_TESTS.glob("*.yaml")) == sorted(ALERTS)


def test_thresholds_and_durations_come_from_values(helm: Path) -> None:
    rule = one(
        helm_template(
            helm,
            {
                "prometheusRule.enabled": True,
                "prometheusRule.alerts.assignmentLatency": {
                    "p99Seconds": 2.5,
                    "window": "10m",
                    "for": "15m",
                    "severity": "critical",
                },
                "prometheusRule.alerts.apiErrors": {
                    "perSecond": 0.5,
                    "conflictsPerSecond": 3,
                    "window": "15m",
                    "for": "30m",
                    "severity": "warning",
                },
                "prometheusRule.alerts.writesPaused": {
                    "seconds": 20,
                    "window": "30m",
                    "for": "10m",
                    "severity": "critical",
                },
                "prometheusRule.alerts.saturated.for": "2m",
                "prometheusRule.runbookUrl": "https://docs.example.com/vdi/runbooks",
                "prometheusRule.additionalLabels": {"team": "vdi"},
            },
        ),
        "PrometheusRule",
    )
    by_name = alerts(rule["spec"]["groups"])
    latency = by_name["HostPoolAssignmentLatencyHigh"]
    assert latency["expr"].endswith("> 2.5")
    assert "[10m]" in latency["expr"]
    assert latency["for"] == "15m"
    assert latency["labels"] == {"severity": "critical", "team": "vdi"}
    errors = by_name["HostPoolApiErrorsRising"]
    assert re.search(r'code!="409"\}\[15m\]\)\)\s*> 0\.5\s', errors["expr"])
    assert re.search(r'code="409"\}\[15m\]\)\)\s*> 3$', errors["expr"])
    assert errors["for"] == "30m"
    paused = by_name["HostPoolLeaderWritesPaused"]
    assert re.search(r"\[30m\]\)\)\s*> 20$", paused["expr"]), paused["expr"]
    assert paused["for"] == "10m"
    assert paused["labels"]["severity"] == "critical"
    assert by_name["HostPoolSaturated"]["for"] == "2m"
    assert (
        by_name["HostPoolNoLeader"]["annotations"]["runbook_url"]
        == "https://docs.example.com/vdi/runbooks#hostpoolnoleader"
    )


def test_selectors_follow_the_release_and_the_job_value(helm: Path) -> None:
    def rule(**values: Any) -> dict[str, Obj]:
        docs = helm_template(helm, {"prometheusRule.enabled": True, **values}, namespace="vdi-ops")
        return alerts(one(docs, "PrometheusRule")["spec"]["groups"])

    default = rule()
    # Pool metrics carry the pool's namespace: selected by job only.
    assert (
        'hostpool_pool_saturated{job="hp-hostpool-operator-metrics"}'
        in (default["HostPoolSaturated"]["expr"])
    )
    # The operator's own metrics carry the release namespace.
    assert (
        'up{job="hp-hostpool-operator-metrics", namespace="vdi-ops"}'
        in (default["HostPoolOperatorAbsent"]["expr"])
    )
    custom = rule(**{"prometheusRule.job": "hostpool"})
    expr = custom["HostPoolNoLeader"]["expr"]
    assert 'hostpool_leader{job="hostpool", namespace="vdi-ops"}' in expr


def test_alerts_can_be_disabled(helm: Path) -> None:
    docs = helm_template(
        helm,
        {
            "prometheusRule.enabled": True,
            "prometheusRule.disabled": ["HostPoolMaxHostsReached", "HostPoolAgentsSilent"],
        },
    )
    names = set(alerts(one(docs, "PrometheusRule")["spec"]["groups"]))
    assert names == set(ALERTS) - {"HostPoolMaxHostsReached", "HostPoolAgentsSilent"}
    everything = {"prometheusRule.enabled": True, "prometheusRule.disabled": list(ALERTS)}
    docs = helm_template(helm, everything)
    assert one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"] == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"prometheusRule.enabled": True, "metrics.enabled": False}, "needs metrics.enabled"),
        ({"prometheusRule.disabled": ["HostPoolTypo"]}, "/prometheusRule/disabled/0"),
        ({"prometheusRule.alerts.saturated.for": "5 minutes"}, "/alerts/saturated/for"),
        ({"prometheusRule.alerts.assignmentLatency.p99Seconds": 0}, "p99Seconds"),
        ({"prometheusRule.alerts.noLeader.after": "5m"}, "after"),
        ({"prometheusRule.additionalLabels": {"severity": "page"}}, "additionalLabels"),
    ],
)
def test_bad_alert_values_are_refused(helm: Path, values: dict[str, Any], message: str) -> None:
    assert message in helm_template_error(helm, values)


def test_service_monitor_keeps_the_pools_namespace_label(helm: Path) -> None:
    monitor = one(helm_template(helm, {"serviceMonitor.enabled": True}), "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_missing_promtool_fails_under_ci_and_skips_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="make tools"):
        require_promtool(tmp_path)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="make tools"):
        require_promtool(tmp_path)
