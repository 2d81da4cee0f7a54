"""Helpers of the alert and dashboard tests: render the chart, find promtool, and the metric
names the operator exports and the ones a PromQL expression reads."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.samples import Sample

from hostpool_operator.controller.metrics import PrometheusMetrics

Obj = dict[str, Any]

#: The sample names a metric family of each type exposes, as suffixes of the family's name.
SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "unknown": ("",),
}

#: Names the operator's own metrics start with (the process collector's process_*).
OWN_PREFIXES = ("hostpool_", "process_")
#: A metric name in PromQL: an identifier not followed by "(" (a function), not preceded by
#: "." or a letter; label names inside {...} and by (...) never start with these prefixes.
_IDENTIFIER = re.compile(r"(?<![A-Za-z0-9_:.])([a-zA-Z_:][a-zA-Z0-9_:]*)")


def one(docs: list[Obj], kind: str) -> Obj:
    found = [d for d in docs if d.get("kind") == kind]
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


def require_promtool(bin_dir: Path) -> Path:
    """promtool next to the other tools (hack/cluster/tools.sh builds it).

    Missing: the test skips, saying how to get it; under CI (CI=true) it fails instead, since
    `make test` builds it there.
    """
    promtool = bin_dir / "promtool"
    if promtool.exists():
        return promtool
    message = f"promtool not found at {promtool}: run `make tools` (hack/cluster/tools.sh)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def exported_sample_names() -> set[str]:
    """Every sample name the operator's families may expose (``_total`` of counters,
    ``_bucket``/``_sum``/``_count`` of histograms, ...), whether or not a child exists yet."""
    names: set[str] = set()
    registry = PrometheusMetrics().registry
    for family in registry.collect():
        names.update(sample.name for sample in family.samples)
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def metric_names(expr: str) -> set[str]:
    """The names of the operator's metrics (``hostpool_*``, ``process_*``) a PromQL
    expression (or a Grafana ``label_values(...)`` query) reads. String literals are left
    out, so a label value that happens to look like a metric name is not taken for one."""
    code = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    return {m for m in _IDENTIFIER.findall(code) if m.startswith(OWN_PREFIXES)}


def busy_samples() -> list[tuple[Sample, str]]:
    """The samples (and their family's type) of a registry that saw a little of everything:
    a pool with a plan, saturated, assignments, scaling both ways, a host started, API errors,
    leadership. ``_created`` samples are left out (Prometheus does not ingest them)."""
    metrics = PrometheusMetrics()
    metrics.leading(True)
    for code in ("409", "500", "transport"):
        metrics.api_error(code)
    status = {
        "pendingRequests": 3,
        "hosts": {"total": 4, "notReady": 1, "agentSilent": 1},
        "capacity": {"free": 2},
        "sessions": {"connecting": 1, "active": 10, "disconnected": 2},
        "conditions": [
            {"type": "Saturated", "status": "True"},
            {"type": "ScalingLimited", "status": "False"},
        ],
        "scalingPlan": {"phase": "Peak"},
        "update": {
            "revision": "1e4c0d23f9",
            "updatedHosts": 2,
            "outdatedHosts": 2,
            "phase": "Progressing",
        },
    }
    metrics.pool_state("vdi", "finance", status)
    for seconds in (0.02, 0.3, 4.0):
        metrics.observe_assignment("vdi", "finance", "NewSession", seconds, queued=seconds / 10)
    metrics.sessions_ended("vdi", "finance", 2)
    metrics.scaled("vdi", "finance", "up", 2)
    metrics.scaled("vdi", "finance", "down", 1)
    metrics.host_started("vdi", "finance", 12.0)
    metrics.connect_ended("vdi", "finance", {"queue": 0.1, "sessionStart": 2.0}, "Succeeded", None)
    metrics.connect_ended("vdi", "finance", {"queue": 0.1}, "Failed", ("queue", "PoolDeleted"))
    return [
        (sample, family.type)
        for family in metrics.registry.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    ]
