"""The agent's ServiceAccount token in a pod-backed desktop host, on a real kubelet node.

The pod is the one ``crds/examples/session-host-pool.yaml`` describes (the session-host
image: the desktop container runs xrdp, the agent is a native sidecar under the shared
``hostpool-agent`` ServiceAccount, both share the pod's process namespace), created as the
operator would create it for host ``tok-1``, with the chart's agent objects (Role, policy)
applied. The agent must keep reporting with the pod-bound token, while a desktop user (and
even root) in the desktop container finds no token there, and a desktop user cannot reach
the agent container's copy through ``/proc/<agent>/root`` either.

A control plane of the module's own with one real node (``support.real_nodes``) and the
project's CRDs; no operator runs.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.agent_objects import apply_agent_objects
from support.builders import desktop_users, session_host_pool
from support.controlplane import ControlPlane
from support.kube import Kube, unique_name, wait_default_service_account, wait_for
from support.log_lines import lines_saying
from support.paths import REPO_ROOT
from support.podman import build_image
from support.real_nodes import node_cluster_dir, node_tools, require_nodes
from support.report_logs import EXTRA_LOGS

HOST = "tok-1"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN = f"{TOKEN_DIR}/token"
DESKTOP_USER, DESKTOP_PASSWORD = "alice", "alice-desk-pw"
Obj = dict[str, Any]


@dataclass
class Node:
    cp: ControlPlane
    kube: Kube
    bin_dir: Path
    image: str

    def kubectl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.cp.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A control plane with one real node and the session-host image in its containerd."""
    require_nodes()
    bin_dir = node_tools({})
    image = build_image("--session-host")
    with ControlPlane(
        node_cluster_dir(tmp_path_factory, "token-node"),
        bin_dir=bin_dir,
        fake_nodes=0,
        real_nodes=1,
        timeout=900,
    ) as cp:
        cp.import_image(image)
        node = Node(cp, Kube.connect(cp.kubeconfig), bin_dir, image)
        applied = node.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
        assert applied.returncode == 0, applied.stderr
        waited = node.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"
        )
        assert waited.returncode == 0, waited.stderr
        yield node


def desktop_pod(image: str) -> Obj:
    """The example pool's pod, as the operator makes it for host ``HOST``."""
    pool = session_host_pool(image, agent_interval=1)
    workload = pool["spec"]["scaling"]["hostTemplate"]["workload"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": HOST, "labels": dict(workload["metadata"]["labels"])},
        "spec": workload["spec"],
    }


def ready(pod: Obj) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions", [])
    )


def test_a_desktop_user_cannot_read_the_agents_token(
    node: Node, request: pytest.FixtureRequest
) -> None:
    kube = node.kube
    ns = unique_name("token")
    kube.create_namespace(ns)
    wait_default_service_account(kube, ns)
    apply_agent_objects(
        node.bin_dir,
        node.cp.kubeconfig,
        unique_name("tok", max_length=20),
        ns,
        {"agents.namespaces": [ns]},
    )
    kube.call(
        "POST",
        f"/api/v1/namespaces/{ns}/secrets",
        body=desktop_users({DESKTOP_USER: DESKTOP_PASSWORD}),
    )
    kube.create(ns, {
        "apiVersion": "hostpool.io/v1alpha1", "kind": "HostPool", "metadata": {"name": "tok"},
        "spec": {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 2}},
    })  # fmt: skip
    kube.create(ns, {
        "apiVersion": "hostpool.io/v1alpha1", "kind": "SessionHost", "metadata": {"name": HOST},
        "spec": {"poolRef": {"name": "tok"}},
    })  # fmt: skip
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    logs.append(
        ("agent log", lambda: node.kubectl("-n", ns, "logs", HOST, "-c", "agent").stdout[-4000:])
    )
    kube.call("POST", f"/api/v1/namespaces/{ns}/pods", body=desktop_pod(node.image))
    pod_path = f"/api/v1/namespaces/{ns}/pods/{HOST}"
    pod = wait_for(
        lambda: (lambda p: p if ready(p) else None)(kube.call("GET", pod_path)),
        180,
        what="the desktop pod to become Ready",
    )

    def sampled() -> str | None:
        host = kube.get("SessionHost", ns, HOST)
        return ((host.get("status") or {}).get("metrics") or {}).get("sampledAt")

    first = wait_for(sampled, 60, what="the agent's first report under its token")

    def in_container(container: str, *argv: str) -> tuple[int, str]:
        """The exit code and the length of what was printed (never the text: a token)."""
        done = node.kubectl("-n", ns, "exec", HOST, "-c", container, "--", *argv)
        return done.returncode, done.stdout

    def as_user(*argv: str) -> list[str]:
        return ["setpriv", f"--reuid={DESKTOP_USER}", f"--regid={DESKTOP_USER}",
                "--init-groups", *argv]  # fmt: skip

    # The agent's container has the token, where the kubelet would have put it.
    code, _ = in_container("agent", "test", "-s", TOKEN)
    assert code == 0, "the agent's container has no token"

    # A desktop user reads it in the desktop container (where automount put it) ...
    code, text = in_container("desktop", *as_user("cat", TOKEN))
    printed = len(text)
    assert code != 0, (
        f"desktop user {DESKTOP_USER} read the agent's token in the desktop container "
        f"({printed} characters)"
    )
    # ... or not at all: nothing is mounted there, not even for root.
    code, _ = in_container("desktop", "ls", TOKEN_DIR)
    assert code != 0, f"the desktop container has {TOKEN_DIR}"
    # Nor through the shared process namespace: the agent's root is root's to enter.
    agents = in_container("desktop", "pgrep", "-f", "hostpool-agent")[1].split()
    assert agents, "the desktop container does not see the agent's process"
    for pid in agents:
        code, _ = in_container("desktop", *as_user("cat", f"/proc/{pid}/root{TOKEN}"))
        assert code != 0, (
            f"desktop user {DESKTOP_USER} read the agent's token through /proc/{pid}/root"
        )

    # The pod as the API server has it: no automount, the token volume in the agent alone.
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    mounts = {
        c["name"]: [m["mountPath"] for m in c.get("volumeMounts", [])]
        for c in spec["containers"] + spec["initContainers"]
    }
    assert TOKEN_DIR not in mounts["desktop"], mounts
    assert TOKEN_DIR in mounts["agent"], mounts

    # The agent keeps reporting (its token re-read from the same file).
    later = time.monotonic()
    wait_for(lambda: (s := sampled()) is not None and s != first, 30, what="a later report")
    log = node.kubectl("-n", ns, "logs", HOST, "-c", "agent").stdout
    assert lines_saying(log, "401", "403") == [], log[-3000:]
    print(f"agent token test: later report {time.monotonic() - later:.1f} s after the checks")
