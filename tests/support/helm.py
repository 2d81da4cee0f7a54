"""The chart as the project's helm renders it (``helm template``): for the chart's own tests
and for the live tests that install parts of it. Values go in as ``--set-json``, so their
types arrive exactly as given."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from support.paths import CHART_DIR

Obj = dict[str, Any]


def set_json(values: dict[str, Any] | None) -> list[str]:
    """``--set-json key=<json>`` for each value."""
    args: list[str] = []
    for key, value in (values or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


def _template(helm: Path, values: dict[str, Any] | None, release: str, namespace: str) -> Any:
    argv = [str(helm), "template", release, str(CHART_DIR), "--namespace", namespace]
    return subprocess.run(
        [*argv, *set_json(values)], capture_output=True, text=True, timeout=120, check=False
    )


def helm_template(
    helm: Path,
    values: dict[str, Any] | None = None,
    *,
    release: str = "hp",
    namespace: str = "hostpool-system",
) -> list[Obj]:
    """The documents the chart renders with ``values`` for this release and namespace."""
    proc = _template(helm, values, release, namespace)
    if proc.returncode != 0:
        raise AssertionError(f"helm template failed:\n{proc.stderr}{proc.stdout}")
    return [d for d in yaml.safe_load_all(proc.stdout) if isinstance(d, dict)]


def helm_template_error(helm: Path, values: dict[str, Any]) -> str:
    """The error of a ``helm template`` expected to fail (its stderr)."""
    proc = _template(helm, values, "hp", "hostpool-system")
    assert proc.returncode != 0, f"helm template succeeded:\n{proc.stdout}"
    return str(proc.stderr)
