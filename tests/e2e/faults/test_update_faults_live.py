"""An image update with the operator killed (SIGKILL) in the middle of it, twice, under the
chart's least-privilege identity: the new instance carries on from the cluster's state (the
revision labels, the replaced-by marks). Every outdated host is replaced exactly once, none is
forgotten, never more hosts than wanted + maxSurge, and no session ends under WaitForLogoff."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cluster import Cluster
from support.conditions import host_of, phase, status
from support.host_census import HostCensus, made
from support.identity import Identity, install_identity, leaked_secrets, remove_identity
from support.kube import Kube
from support.operator_process import OperatorProcess

POOL = "desk"
REVISION = "hostpool.io/template-revision"
TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
HOSTS = 6
SURGE = 2

Obj = dict[str, Any]


def template(tag: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": {"app": "desktop"}},
        "spec": {
            "tolerations": [TOLERATION],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "desktop", "image": f"registry.k8s.io/pause:3.10-{tag}"}],
        },
    }


@pytest.fixture
def identity(kube: Kube, namespace: str, tmp_path: Path) -> Iterator[Identity]:
    made_identity = install_identity(kube, namespace, tmp_path)
    try:
        yield made_identity
    finally:
        remove_identity(kube, made_identity)


def test_an_update_carries_on_after_the_operator_is_killed_twice(
    cluster: Cluster, identity: Identity, namespace: str, tmp_path: Path
) -> None:
    op = OperatorProcess(
        identity.kubeconfig, namespace, tmp_path / "operator.log",
        extra_args=["--lease-duration", "3"],
    )  # fmt: skip
    op.start()
    try:
        scaling = {"minHosts": HOSTS, "maxHosts": 10, "hostTemplate": {"workload": template("v1")}}
        update = {"maxSurge": SURGE, "maxUnavailable": 1}
        cluster.create_pool(POOL, "DepthFirst", 2, scaling=scaling, update=update)
        first = cluster.wait(lambda: (len(made(cluster)) == HOSTS and made(cluster)) or None,
                             "six hosts", timeout=60)  # fmt: skip
        users = [f"u{i}" for i in range(8)]
        for user in users:
            cluster.create_request(user, POOL, user)
        placed = {n: host_of(o) for n, o in cluster.wait_assigned(users, timeout=60).items()}

        with HostCensus(cluster, every=0.05) as watcher:
            scaling["hostTemplate"] = {"workload": template("v2")}
            cluster.patch("HostPool", POOL, {"spec": {"scaling": scaling}})
            # Killed as soon as the first outdated host is replaced: its marks are half done.
            cluster.wait(lambda: set(first) - set(made(cluster)) or None, "a first replacement")
            op.kill()
            op.start(timeout=90)
            # The users of the two busiest hosts log off; killed again as those go.
            busiest = {host for host, _ in Counter(placed.values()).most_common(2)}
            for user, host in placed.items():
                if host in busiest:
                    cluster.delete("SessionRequest", user)
            op.kill()
            op.start(timeout=90)
            # The rest log off: the update completes.
            for user, host in placed.items():
                if host not in busiest:
                    cluster.delete("SessionRequest", user)
            cluster.wait(
                lambda: (
                    (status(cluster.pool(POOL)).get("update") or {}).get("phase") == "Complete"
                    or None
                ),
                "the update complete",
                timeout=120,
            )
        final = made(cluster)
        new = {h["metadata"]["labels"][REVISION] for h in final.values()}
        assert len(new) == 1
        assert not set(first) & set(final), "an outdated host was forgotten"
        # Each outdated host got one replacement: no host made twice for the same one.
        assert len(watcher.seen - set(first)) == HOSTS, sorted(watcher.seen - set(first))
        assert len(final) == HOSTS
        assert watcher.most <= HOSTS + SURGE, watcher.most
        # Until they logged off, nobody's session moved or ended.
        for obj in cluster.requests().values():
            assert phase(obj) != "Failed", obj
        assert op.kills == 2
    finally:
        op.stop(wait=False)
    assert not op.problems(), op.problems()
    assert not leaked_secrets(identity, op.log_text())
