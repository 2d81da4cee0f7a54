"""The cluster a bench runs against: KUBECONFIG's when set, else a local control plane of
its own (hack/cluster/cluster.sh up), which the bench stops at its end."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def kubeconfig(state_dir: Path, log: Callable[[str], None]) -> tuple[Path, bool]:
    """The kubeconfig to use, and whether this run started its cluster (and stops it)."""
    value = os.environ.get("KUBECONFIG", "").strip()
    if value:
        log(f"using the cluster of KUBECONFIG={value}")
        return Path(value), False
    log("starting a local control plane with 3 fake nodes")
    script = ROOT / "hack" / "cluster" / "cluster.sh"
    subprocess.run([str(script), "up", str(state_dir)], check=True, stdout=subprocess.DEVNULL)
    return state_dir / "kubeconfig", True
