"""HostPool's /scale subresource, driven with the suite's kubectl against a running operator.

``kubectl scale hp POOL --replicas N`` sets ``spec.scaling.minHosts``: the operator then keeps
N hosts warm; ``kubectl get --subresource=scale`` reads the host count and the selector of
the hosts the operator created back. Scaling down lets the operator remove the empty hosts it
created once their delay is over. A pool without ``spec.scaling`` and a replica count above
``maxHosts`` are refused by the API server with a message naming the field; the pool is left
as it was. Reading the scale of a pool without ``spec.scaling`` is an error of the API server
(the replica field does not exist), not a count of 0.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.cluster import Cluster
from support.conditions import status
from support.controlplane import ensure_tools
from support.kube import Kube
from support.operator_process import OperatorProcess
from support.paths import REPO_ROOT

POOL = "finance"
MANAGED = "hostpool.io/managed-by"
POOL_LABEL = "hostpool.io/pool"


@pytest.fixture
def kubectl(kube: Kube, namespace: str) -> Any:
    """Run the suite's kubectl in the test namespace with the suite's kubeconfig; returns the
    completed process (the caller checks its exit code)."""
    bin_dir = kube.bin_dir if kube.bin_dir is not None else ensure_tools(REPO_ROOT)
    binary: Path = bin_dir / "kubectl"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(binary), "--kubeconfig", str(kube.kubeconfig), "--namespace", namespace]
        return subprocess.run(
            [*argv, *args], capture_output=True, text=True, timeout=60, check=False
        )

    return run


def managed(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {
        name: h
        for name, h in cluster.hosts().items()
        if h["metadata"].get("labels", {}).get(MANAGED) == "hostpool-operator"
    }


def scale_of(kubectl: Any, pool: str) -> dict[str, Any]:
    done = kubectl("get", "hp", pool, "--subresource=scale", "-o", "json")
    assert done.returncode == 0, done.stderr
    scale: dict[str, Any] = json.loads(done.stdout)
    return scale


def test_kubectl_scale_prewarms_hosts_and_scales_back_down(
    cluster: Cluster, operator_process: OperatorProcess, kubectl: Any
) -> None:
    del operator_process
    cluster.setup_pool(
        POOL,
        "DepthFirst",
        4,
        hosts=["user-host"],
        scaling={"minHosts": 0, "maxHosts": 10, "scaleDownDelaySeconds": 2},
    )
    done = kubectl("scale", "hp", POOL, "--replicas", "8")
    assert done.returncode == 0, done.stderr
    assert "scaled" in done.stdout
    assert cluster.pool(POOL)["spec"]["scaling"]["minHosts"] == 8
    # Eight hosts in all: the user's host counts, so the operator creates seven.
    cluster.wait(lambda: len(managed(cluster)) == 7 or None, "seven hosts created", timeout=60)
    cluster.wait_pool(POOL, lambda p: status(p)["hosts"]["total"] == 8, "8 hosts counted")

    scale = scale_of(kubectl, POOL)
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 8
    assert scale["status"]["replicas"] == 8
    assert scale["status"]["selector"] == f"{POOL_LABEL}={POOL}"
    # The selector matches the hosts the operator created, not the one created by hand.
    done = kubectl("get", "sh", "-l", scale["status"]["selector"], "-o", "name")
    assert done.returncode == 0, done.stderr
    selected = {line.split("/", 1)[1] for line in done.stdout.split()}
    assert selected == set(managed(cluster))

    done = kubectl("scale", "hp", POOL, "--replicas", "2")
    assert done.returncode == 0, done.stderr
    # Empty hosts of the operator go after their 2 s delay, down to two hosts in all; the
    # user's host is never removed.
    cluster.wait(lambda: len(cluster.hosts()) == 2 or None, "two hosts left", timeout=60)
    assert "user-host" in cluster.hosts()
    assert len(managed(cluster)) == 1
    cluster.wait_pool(POOL, lambda p: status(p)["hosts"]["total"] == 2, "2 hosts counted")
    scale = scale_of(kubectl, POOL)
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (2, 2)


def test_scale_above_max_hosts_is_refused(
    cluster: Cluster, operator_process: OperatorProcess, kubectl: Any
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "BreadthFirst", scaling={"minHosts": 1, "maxHosts": 5})
    before = cluster.pool(POOL)["spec"]["scaling"]
    done = kubectl("scale", "hp", POOL, "--replicas", "8")
    assert done.returncode != 0
    assert "spec.scaling.maxHosts" in done.stderr, done.stderr
    assert "maxHosts must be greater than or equal to minHosts" in done.stderr, done.stderr
    assert cluster.pool(POOL)["spec"]["scaling"] == before
    # Within the bounds it is accepted.
    done = kubectl("scale", "hp", POOL, "--replicas", "5")
    assert done.returncode == 0, done.stderr
    cluster.wait(lambda: len(managed(cluster)) == 5 or None, "five hosts created", timeout=60)


def test_scale_of_a_pool_without_scaling_is_refused_naming_the_field(
    cluster: Cluster, operator_process: OperatorProcess, kubectl: Any
) -> None:
    """/scale is not defaulted by the API server: on a pool without spec.scaling it would
    store a scaling of minHosts alone. The CRD refuses that, naming the missing field."""
    del operator_process
    cluster.setup_pool(POOL, "BreadthFirst", hosts=["h1"])
    done = kubectl("scale", "hp", POOL, "--replicas", "8")
    assert done.returncode != 0
    assert "spec.scaling.maxHosts: Required value" in done.stderr, done.stderr
    assert "already has spec.scaling" in done.stderr, done.stderr
    assert "scaling" not in cluster.pool(POOL)["spec"]
    # Such a pool has no replica count to read: the API server says the field is missing.
    done = kubectl("get", "hp", POOL, "--subresource=scale", "-o", "json")
    assert done.returncode != 0
    assert 'spec replicas field ".spec.scaling.minHosts" does not exist' in done.stderr
    assert not managed(cluster)
