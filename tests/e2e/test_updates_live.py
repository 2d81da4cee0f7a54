"""Image updates end to end, on pod-backed hosts (kwok's nodes run the pods): a new host
template replaces the pool's hosts without ending a session, placement sends new logons to
the updated hosts, the update completes when the last outdated host empties, and the rollout
commands. (A canary that fails is shown on the real node: tests/e2e/desktop/
test_nodes_chart_live.py, with the kubelet's ErrImagePull.)"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.cluster import Cluster
from support.conditions import cond_is, host_of, phase, status
from support.host_census import HostCensus, made
from support.operator_process import OperatorProcess

POOL = "desk"
REVISION = "hostpool.io/template-revision"
IMAGE = "registry.k8s.io/pause:3.10"
TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}

Obj = dict[str, Any]


def template(tag: str, **spec: Any) -> Obj:
    """hostTemplate.workload: a Pod of the desktop image ``tag`` (on kwok's nodes)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": {"app": "desktop", "image-tag": tag}},
        "spec": {
            "tolerations": [TOLERATION],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "desktop", "image": f"{IMAGE}-{tag}"}],
            **spec,
        },
    }


def scaling(workload: Obj, **kw: Any) -> Obj:
    return {
        "minHosts": 3,
        "maxHosts": 6,
        "scaleDownDelaySeconds": 600,
        "hostTemplate": {"workload": workload},
        **kw,
    }


def revision_of(host: Obj) -> str | None:
    labels: dict[str, str] = host["metadata"].get("labels", {})
    return labels.get(REVISION)


def update_of(cluster: Cluster) -> Obj:
    found: Obj = status(cluster.pool(POOL)).get("update") or {}
    return found


@pytest.fixture
def pool_of_three(cluster: Cluster, operator_process: OperatorProcess) -> Obj:
    """A depth-first pool (2 sessions a host) of three pod-backed hosts, all Ready."""
    del operator_process
    update = {"maxSurge": 1, "maxUnavailable": 0}
    cluster.create_pool(POOL, "DepthFirst", 2, scaling=scaling(template("v1")), update=update)
    cluster.wait(
        lambda: (
            (
                len(made(cluster)) == 3
                and all(cond_is(h, "Available", "True") for h in made(cluster).values())
            )
            or None
        ),
        "three hosts taking sessions",
        timeout=60,
    )
    return cluster.pool(POOL)


def test_wait_for_logoff_replaces_hosts_as_they_empty_and_ends_no_session(
    cluster: Cluster, pool_of_three: Obj
) -> None:
    first = made(cluster)
    revisions = {revision_of(h) for h in first.values()}
    assert len(revisions) == 1
    (old,) = revisions
    assert old
    cluster.wait_pool(
        POOL,
        lambda p: (status(p).get("update") or {}).get("revision") == old,
        "status.update.revision",
    )
    # Three users: depth-first fills the first host, then the second.
    for i in range(3):
        cluster.create_request(f"u{i}", POOL, f"user{i}")
    assigned = cluster.wait_assigned([f"u{i}" for i in range(3)])
    busy = {host_of(obj) for obj in assigned.values()}
    assert len(busy) == 2
    (idle,) = set(first) - busy

    spec = copy.deepcopy(pool_of_three["spec"]["scaling"])
    spec["hostTemplate"]["workload"] = template("v2")
    with HostCensus(cluster) as census:
        cluster.patch("HostPool", POOL, {"spec": {"scaling": spec}})
        new = cluster.wait(
            lambda: (
                (u := update_of(cluster)).get("revision") not in (None, old) and u.get("revision")
            ),
            "a new revision in status.update",
        )
        # The empty host is replaced at once; the busy ones keep their sessions.
        cluster.wait(lambda: idle not in cluster.hosts() or None, f"{idle} replaced", timeout=60)
        cluster.wait(
            lambda: (
                (
                    sum(1 for h in made(cluster).values() if revision_of(h) == new) >= 1
                    and all(
                        cond_is(h, "Available", "True")
                        for h in made(cluster).values()
                        if revision_of(h) == new
                    )
                )
                or None
            ),
            "an updated host taking sessions",
            timeout=60,
        )
        # A new logon goes to an updated host, not to the outdated host with room.
        cluster.create_request("late", POOL, "late-user")
        late = cluster.wait_assigned(["late"])["late"]
        assert revision_of(cluster.host(host_of(late) or "")) == new
        for i in range(3):
            obj = cluster.request(f"u{i}")
            assert phase(obj) == "Assigned", obj
            assert host_of(obj) == host_of(assigned[f"u{i}"])
        pool = cluster.pool(POOL)
        assert cond_is(pool, "Updating", "True", "Progressing")
        assert update_of(cluster).get("phase") == "Progressing"
        assert update_of(cluster).get("outdatedHosts") == 2

        # Their users log off: each outdated host goes when its last session ends.
        for i in range(3):
            cluster.delete("SessionRequest", f"u{i}")
        cluster.wait(
            lambda: update_of(cluster).get("phase") == "Complete" or None,
            "the update complete",
            timeout=90,
        )
    hosts = made(cluster)
    assert all(revision_of(h) == new for h in hosts.values()), hosts
    assert not set(first) & set(hosts), "every first host replaced"
    assert len(hosts) == 3
    # maxSurge 1: never more than 4 hosts; maxUnavailable 0: never fewer than 3 serving.
    assert census.most <= 4, census.most
    assert census.fewest_serving is not None
    assert census.fewest_serving >= 3, census.fewest_serving
    assert phase(cluster.request("late")) == "Assigned"
    reasons = [e.get("reason") for e in cluster.events_for(POOL)]
    for reason in ("UpdateStarted", "HostUpdated", "UpdateComplete"):
        assert reason in reasons, reasons
    pool = cluster.pool(POOL)
    assert cond_is(pool, "Updating", "False", "UpdateComplete")
    assert cond_is(pool, "UpdateFailed", "False")


PLUGIN = Path(sys.executable).parent / "kubectl-hostpool"


def rollout(cluster: Cluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``kubectl hostpool rollout ARGS POOL`` (the console script) with the suite's login."""
    argv = [str(PLUGIN), "rollout", *args, POOL, "--kubeconfig", str(cluster.kube.kubeconfig)]
    return subprocess.run(
        [*argv, "-n", cluster.namespace], capture_output=True, text=True, timeout=timeout
    )


def test_rollout_history_pause_resume_status_and_undo(cluster: Cluster, pool_of_three: Obj) -> None:
    first = cluster.wait(lambda: update_of(cluster).get("revision"), "the first revision")
    cluster.create_request("u0", POOL, "user0")
    busy = host_of(cluster.wait_assigned(["u0"])["u0"])
    # Paused before the new template comes: nothing is replaced, and status says so.
    assert rollout(cluster, "pause").returncode == 0
    spec = copy.deepcopy(pool_of_three["spec"]["scaling"])
    spec["hostTemplate"]["workload"] = template("v2")
    cluster.patch("HostPool", POOL, {"spec": {"scaling": spec}})
    cluster.wait(lambda: update_of(cluster).get("phase") == "Paused" or None, "Paused")
    assert set(made(cluster)) >= {busy}
    now = rollout(cluster, "status", "--no-watch")
    assert now.returncode == 0, now.stderr
    assert "Paused" in now.stdout, now.stdout
    history = rollout(cluster, "history")
    assert history.returncode == 0, history.stderr
    lines = history.stdout.splitlines()
    assert lines[0].split()[:3] == ["REVISION", "HASH", "CURRENT"], lines
    assert len(lines) == 3, lines  # both templates kept
    assert any(first in line and f"{IMAGE}-v1" in line for line in lines), lines
    assert any("*" in line.split() and f"{IMAGE}-v2" in line for line in lines), lines
    # Resumed, the user logs off: status follows it to the end and exits 0.
    assert rollout(cluster, "resume").returncode == 0
    cluster.delete("SessionRequest", "u0")
    followed = rollout(cluster, "status", "--timeout", "90s", timeout=120)
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert "Complete" in followed.stdout, followed.stdout
    # Undo: the first template is back, and the pool's hosts follow it.
    undone = rollout(cluster, "undo")
    assert undone.returncode == 0, undone.stderr
    assert f"({first})" in undone.stdout, undone.stdout
    cluster.wait(
        lambda: (
            (
                update_of(cluster).get("revision") == first
                and update_of(cluster).get("phase") == "Complete"
                and all(revision_of(h) == first for h in made(cluster).values())
            )
            or None
        ),
        "every host back on the first revision",
        timeout=90,
    )
    missing = rollout(cluster, "undo", "--to-revision", "999")
    assert missing.returncode != 0
    assert "no revision 999" in missing.stderr, missing.stderr
