"""Where the repository's parts are, for every test and helper: one owner of each path."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS_DIR = REPO_ROOT / "tests"
CRD_DIR = REPO_ROOT / "crds"
CHART_DIR = REPO_ROOT / "charts" / "hostpool-operator"
CLUSTER_SCRIPTS = REPO_ROOT / "hack" / "cluster"
