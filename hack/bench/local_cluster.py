"""The cluster a bench runs against, with the project's CRDs installed: the cluster of a
kubeconfig named in the environment when set, else a local control plane of its own
(hack/cluster/cluster.sh up), stopped when the bench ends unless it is to be kept."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "cluster" / "cluster.sh"
KUBECTL = ROOT / ".cluster" / "bin" / "kubectl"


@dataclass(frozen=True)
class Options:
    """How the bench's own control plane is had."""

    #: The environment variable naming an existing cluster's kubeconfig.
    env: str = "KUBECONFIG"
    #: kwok's fake nodes (a storm that needs no pods runs without them, and without a
    #: scheduler's work).
    fake_nodes: bool = True
    #: Stop one left running at this directory first.
    fresh: bool = False
    #: Use the one left running at this directory by an earlier run, and leave it running.
    reuse: bool = False
    #: Leave it running afterwards.
    keep: bool = False


@dataclass(frozen=True)
class BenchCluster:
    kubeconfig: Path
    #: The local control plane's directory (None: a cluster of the environment's).
    directory: Path | None


def install_crds(kubeconfig: Path) -> None:
    """crds/ applied and Established."""
    kubectl = [str(KUBECTL), "--kubeconfig", str(kubeconfig)]
    subprocess.run([*kubectl, "apply", "-f", str(ROOT / "crds")], check=True, capture_output=True)
    subprocess.run(
        [*kubectl, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
        check=True,
        capture_output=True,
    )


@contextlib.contextmanager
def bench_cluster(
    state_dir: Path, log: Callable[[str], None], options: Options | None = None
) -> Iterator[BenchCluster]:
    """The cluster to use, its CRDs installed; a control plane this started is stopped on
    leaving (unless ``options.keep`` or ``options.reuse``)."""
    options = options or Options()
    value = os.environ.get(options.env, "").strip()
    if value:
        log(f"using the cluster of {options.env}={value}")
        cluster = BenchCluster(Path(value), None)
        install_crds(cluster.kubeconfig)
        yield cluster
        return
    cluster = BenchCluster(state_dir / "kubeconfig", state_dir)
    if options.reuse:
        log(f"using the control plane left running at {state_dir}")
        yield cluster
        return
    if options.fresh:
        subprocess.run([str(SCRIPT), "down", str(state_dir)], check=False, capture_output=True)
    nodes = "with 3 fake nodes" if options.fake_nodes else "without nodes"
    log(f"starting a local control plane {nodes}")
    env = {**os.environ, **({} if options.fake_nodes else {"HOSTPOOL_FAKE_NODES": "0"})}
    subprocess.run(
        [str(SCRIPT), "up", str(state_dir)], check=True, env=env, stdout=subprocess.DEVNULL
    )
    try:
        install_crds(cluster.kubeconfig)
        yield cluster
    finally:
        if not options.keep:
            # A kept kube-apiserver goes on deleting the bench's namespaces for minutes.
            subprocess.run([str(SCRIPT), "down", str(state_dir)], check=False, capture_output=True)
