"""``cluster.sh add-nodes DIR N``: a real kubelet node joins a control plane that is already
running (what ``make demo-desktop`` does to the demo's cluster).

The module starts a control plane of its own with one fake node, serving on a hosts' bridge
(pods reach the API server only on an address that is not loopback), and a client watching
it. A first ``add-nodes`` fails: the new API server it starts crashes before /readyz (the test
kills it, once its log has a line). That attempt must say why from the API server's own log
and put the cluster back as it was: the old API server configuration serving again, the
state and token files unchanged, no node, bridge or node certificate left. ``add-nodes`` is
then run again on the same cluster: it restarts the API server with the Node authorizer and
the node's token, and kube-controller-manager with the controllers real nodes need; the node
becomes Ready beside the fake one with a kubeconfig of one token (a token line an earlier
attempt left behind is replaced, not added to), a pod runs on it, the watch
goes on after the restart, a third ``add-nodes`` is refused and the cluster stays up;
``cluster.sh down`` then leaves nothing of the node. A cluster serving on 127.0.0.1 only is
refused before anything changes.

Root, like the other real-node tests: they skip saying why elsewhere (fail under CI=true where
apt-get is).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import allocate
from support.controlplane import ControlPlane
from support.kube import wait_for
from support.real_nodes import (
    CLUSTER_SCRIPT,
    NODE,
    leftovers,
    node_cluster_dir,
    node_tools,
    node_traces,
    pid_of,
    require_nodes,
)


def cluster_sh(
    cp: ControlPlane, *args: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLUSTER_SCRIPT), args[0], str(cp.directory), *args[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "HOSTPOOL_BIN_DIR": str(cp.bin_dir)},
    )


def kubectl(cp: ControlPlane, *args: str) -> str:
    assert cp.bin_dir is not None
    proc = subprocess.run(
        [str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def state(cp: ControlPlane) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (cp.directory / "state.env").read_text().splitlines())
    return {key: value.strip('"') for key, value in pairs}


class Watch(threading.Thread):
    """``kubectl get --watch`` on ConfigMaps, restarted when the API server drops it (as any
    client would): the names it has seen."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        super().__init__(daemon=True)
        self.cp, self.namespace = cp, namespace
        self.seen: set[str] = set()
        self.stopping = False
        self.proc: subprocess.Popen[str] | None = None

    def run(self) -> None:
        assert self.cp.bin_dir is not None
        while not self.stopping:
            self.proc = subprocess.Popen(
                [
                    str(self.cp.bin_dir / "kubectl"),
                    "--kubeconfig",
                    str(self.cp.kubeconfig),
                    "-n",
                    self.namespace,
                    "get",
                    "configmaps",
                    "--watch",
                    "-o",
                    "name",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.seen.add(line.strip().removeprefix("configmap/"))
            self.proc.wait()
            time.sleep(0.2)

    def stop(self) -> None:
        self.stopping = True
        if self.proc is not None:
            self.proc.kill()


@pytest.fixture(scope="module")
def node_bin_dir() -> Path:
    require_nodes()
    return node_tools({})


@pytest.fixture(scope="module")
def bridge() -> allocate.Bridge:
    """Its own bridge and subnet, allocated (neither a worker's nor the demo's)."""
    return allocate.bridge()


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, node_bin_dir: Path, bridge: allocate.Bridge
) -> Iterator[ControlPlane]:
    with ControlPlane(
        node_cluster_dir(tmp_path_factory, "add-nodes"),
        bin_dir=node_bin_dir,
        fake_nodes=1,
        hosts_bridge=bridge.spec,
        timeout=300,
    ) as cp:
        yield cp


class CrashNewApiServer(threading.Thread):
    """Kills, with SIGKILL, the API server that ``add-nodes`` starts in place of ``old`` (a pid):
    once the pid file names another live process and that process has written its first log
    line, so the crash is mid-start, before /readyz."""

    def __init__(self, cp: ControlPlane, old: int) -> None:
        super().__init__(daemon=True)
        self.cp, self.old = cp, old
        self.killed: int | None = None
        self.stopping = False

    def run(self) -> None:
        pid_file = self.cp.directory / "pids" / "kube-apiserver.pid"
        log = self.cp.directory / "logs" / "kube-apiserver.log"
        while not self.stopping:
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                pid = self.old
            if pid != self.old and log.exists() and log.stat().st_size > 0:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    continue
                self.killed = pid
                return
            time.sleep(0.01)


def test_a_failed_add_nodes_puts_the_cluster_back_so_that_it_can_be_run_again(
    running: ControlPlane,
) -> None:
    cp = running
    pki = cp.directory / "pki"
    state_before = (cp.directory / "state.env").read_text()
    tokens_before = (pki / "tokens.csv").read_text()
    pki_before = sorted(p.name for p in pki.iterdir())
    old = pid_of(cp.directory, "kube-apiserver")

    crash = CrashNewApiServer(cp, old)
    crash.start()
    failed = cluster_sh(cp, "add-nodes", "1")
    crash.stopping = True
    crash.join(5)
    assert crash.killed is not None, "the new API server was never seen:\n" + failed.stderr
    assert failed.returncode != 0, failed.stderr
    assert "kube-apiserver exited before /readyz" in failed.stderr, failed.stderr
    # The log it names is the one the crashed API server wrote (not a missing file).
    log = cp.directory / "logs" / "kube-apiserver.log"
    assert "(no log at" not in failed.stderr, failed.stderr
    assert f"last lines of {log}" in failed.stderr, failed.stderr

    # Put back: the API server serves again in its old configuration (no Node authorizer),
    # with the same state, tokens and certificates, and nothing of a node.
    assert cluster_sh(cp, "status").returncode == 0, failed.stderr
    assert (cp.directory / "state.env").read_text() == state_before
    assert (pki / "tokens.csv").read_text() == tokens_before
    assert sorted(p.name for p in pki.iterdir()) == pki_before
    assert not (cp.directory / "nodes").exists()
    args = Path(f"/proc/{pid_of(cp.directory, 'kube-apiserver')}/cmdline").read_bytes()
    assert b"--authorization-mode=RBAC\0" in args
    bridge = re.search(r"nodes' bridge (\S+) \(", failed.stderr)
    assert bridge, failed.stderr
    assert not Path("/sys/class/net", bridge[1]).exists()
    kubectl(cp, "get", "--raw", "/readyz")


def test_a_node_joins_the_running_cluster_and_leaves_nothing(running: ControlPlane) -> None:
    cp = running
    kubectl(cp, "create", "namespace", "joined")
    watch = Watch(cp, "joined")
    watch.start()
    kubectl(cp, "-n", "joined", "create", "configmap", "before")
    wait_for(lambda: "before" in watch.seen, 60, what="the watch to see the first ConfigMap")

    # A token line an earlier failed attempt left (what the reported failure had: the node's
    # kubeconfig then held two tokens, and was not YAML): replaced, not added to.
    tokens = cp.directory / "pki" / "tokens.csv"
    stale = "0" * 48
    with tokens.open("a") as out:
        out.write(f"{stale},system:node:{NODE},system:node:{NODE},system:nodes\n")
    started = time.monotonic()
    added = cluster_sh(cp, "add-nodes", "1")
    took = time.monotonic() - started
    assert added.returncode == 0, added.stderr
    assert state(cp)["REAL_NODES"] == "1"
    # The node's kubeconfig is YAML with its one token, the one the token file holds.
    config = yaml.safe_load((cp.directory / "nodes" / NODE / "kubeconfig").read_text())
    token = config["users"][0]["user"]["token"]
    node_tokens = [
        line.split(",")[0]
        for line in tokens.read_text().splitlines()
        if f",system:node:{NODE}," in line
    ]
    assert node_tokens == [token]
    assert token != stale
    nodes = json.loads(kubectl(cp, "get", "nodes", "-o", "json"))["items"]
    ready = {
        n["metadata"]["name"]: next(
            c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready"
        )
        for n in nodes
    }
    assert ready == {"kwok-node-1": "True", NODE: "True"}, ready

    # A pod runs on it: the pause image the node imported at its start, never pulled.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sleeper", "namespace": "joined"},
        "spec": {
            "nodeSelector": {"type": "real"},
            "containers": [
                {"name": "pause", "image": state(cp)["PAUSE_IMAGE"], "imagePullPolicy": "Never"}
            ],
        },
    }
    assert cp.bin_dir is not None
    subprocess.run(
        [str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), "apply", "-f", "-"],
        input=json.dumps(pod),
        text=True,
        check=True,
        capture_output=True,
        timeout=60,
    )

    def pod_running() -> dict[str, Any] | None:
        got: dict[str, Any] = json.loads(
            kubectl(cp, "-n", "joined", "get", "pod", "sleeper", "-o", "json")
        )
        return got if got["status"].get("phase") == "Running" else None

    got = wait_for(pod_running, 120, what="the pod to run on the real node")
    assert got["spec"]["nodeName"] == NODE
    assert got["status"]["podIP"].startswith(state(cp)["NODES_NET"] + ".")

    # The client's watch goes on across the API server's restart.
    kubectl(cp, "-n", "joined", "create", "configmap", "after")
    wait_for(
        lambda: "after" in watch.seen,
        60,
        what="the watch to see a ConfigMap made after the restart",
    )
    watch.stop()

    again = cluster_sh(cp, "add-nodes", "1")
    assert again.returncode != 0
    assert "has 1 real node(s) already" in again.stderr, again.stderr
    assert cluster_sh(cp, "status").returncode == 0

    # Everything of the node goes with the cluster.
    pids = [pid_of(cp.directory, f"{c}-{NODE}") for c in ("kubelet", "containerd")]
    traces = node_traces(cp.directory, state(cp), pids)
    assert f"bridge {traces.bridge}" in leftovers(traces)
    cp.stop()
    left = leftovers(traces)
    assert not left, "left behind after cluster.sh down:\n  " + "\n  ".join(left)
    assert cp.hosts_bridge is not None
    assert not Path("/sys/class/net", cp.hosts_bridge.split(":")[0]).exists()
    print(f"\nadd-nodes 1 on a running cluster: {took:.1f} s")


def test_a_cluster_on_loopback_only_is_refused(
    tmp_path_factory: pytest.TempPathFactory, node_bin_dir: Path
) -> None:
    cp = ControlPlane(
        node_cluster_dir(tmp_path_factory, "add-nodes-lo"), bin_dir=node_bin_dir, fake_nodes=0
    )
    try:
        cp.start()
        before = (cp.directory / "state.env").read_text()
        refused = cluster_sh(cp, "add-nodes", "1")
        assert refused.returncode != 0
        assert "serves on 127.0.0.1 only" in refused.stderr, refused.stderr
        assert (cp.directory / "state.env").read_text() == before
        assert not (cp.directory / "nodes").exists()
        assert cluster_sh(cp, "status").returncode == 0
    finally:
        cp.stop()
