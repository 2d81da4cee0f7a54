"""The cluster a bench runs against: KUBECONFIG's when set, else a local control plane of
its own (hack/cluster/cluster.sh up), stopped when the bench ends."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "cluster" / "cluster.sh"


@contextlib.contextmanager
def kubeconfig(state_dir: Path, log: Callable[[str], None]) -> Iterator[Path]:
    """The kubeconfig to use; a control plane this started is stopped on leaving."""
    value = os.environ.get("KUBECONFIG", "").strip()
    if value:
        log(f"using the cluster of KUBECONFIG={value}")
        yield Path(value)
        return
    log("starting a local control plane with 3 fake nodes")
    subprocess.run([str(SCRIPT), "up", str(state_dir)], check=True, stdout=subprocess.DEVNULL)
    try:
        yield state_dir / "kubeconfig"
    finally:
        subprocess.run([str(SCRIPT), "down", str(state_dir)], check=False)
