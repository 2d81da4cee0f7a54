"""Personal pools end to end on a real API server with the operator running: each user's
requests go to one host of their own, which the operator writes as the host's
``spec.assignedUser``; concurrent first connects of many users never share a host or take
two; in a Direct pool a user waits ``NoHostAssigned`` until an administrator assigns a host.

Hosts here have no workload (the operator places on them as they are); workload-backed
personal hosts, stopped and started with their volumes, are not built yet.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from e2e import test_workloads_live as workloads
from e2e.test_workloads_live import node_label  # noqa: F401  (a fixture)
from support.builders import manifest
from support.cluster import Cluster
from support.conditions import cond_is, status
from support.kube import MERGE_PATCH, Kube
from support.operator_process import OperatorProcess

POOL = "desks"


def personal_pool(cluster: Cluster, hosts: list[str], **personal: Any) -> None:
    spec: dict[str, Any] = {"type": "Personal"}
    if personal:
        spec["personal"] = personal
    body = manifest("HostPool", POOL, spec, namespace=cluster.namespace)
    cluster.create_body(body)
    for name in hosts:
        cluster.create_host(name, POOL)
    cluster.wait_operator_knows(POOL, hosts)


def pod_spec() -> dict[str, Any]:
    """The fake nodes' pod, scheduled only onto nodes the test has labelled."""
    return workloads.pod_spec(nodeSelector={workloads.READY_LABEL: "yes"})


def owners(cluster: Cluster) -> dict[str, str | None]:
    return {name: h["spec"].get("assignedUser") for name, h in cluster.hosts().items()}


def test_each_user_gets_a_host_of_their_own_and_keeps_it(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    personal_pool(cluster, ["h1", "h2", "h3"])
    cluster.create_request("alice-1", POOL, "alice")
    first = cluster.wait_request("alice-1", phase_="Assigned", reason="Personal")
    mine = status(first)["host"]
    assert mine == "h1", status(first)  # the first unassigned host in query order
    assert cond_is(first, "Assigned", "True", "Personal"), status(first)
    assert owners(cluster)[mine] == "alice"

    cluster.create_request("bob-1", POOL, "bob")
    bob = status(cluster.wait_request("bob-1", phase_="Assigned", reason="Personal"))["host"]
    assert bob != mine
    assert owners(cluster)[bob] == "bob"

    # alice logs off (her request is deleted) and comes back: the same host, not a new one.
    cluster.delete("SessionRequest", "alice-1")
    cluster.wait_host(mine, lambda h: status(h).get("sessions", {}).get("total") == 0, "empty")
    cluster.create_request("alice-2", POOL, "alice")
    again = cluster.wait_request("alice-2", phase_="Assigned", reason="Personal")
    assert status(again)["host"] == mine, status(again)

    # carol takes the last host; dave finds none and waits, saying why.
    cluster.create_request("carol-1", POOL, "carol")
    cluster.wait_request("carol-1", phase_="Assigned", reason="Personal")
    cluster.create_request("dave-1", POOL, "dave")
    waiting = cluster.wait_request("dave-1", phase_="Pending", reason="NoHostAssigned")
    assert cond_is(waiting, "Assigned", "False", "NoHostAssigned"), status(waiting)
    assert sorted(u for u in owners(cluster).values() if u) == ["alice", "bob", "carol"]


def test_twenty_concurrent_first_connects_give_twenty_hosts(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    """20 users, each connecting twice at once, on 24 hosts: 20 hosts assigned, one per
    user, each user's two requests on it; 4 hosts left unassigned."""
    del operator_process
    hosts = [f"h{i:02d}" for i in range(24)]
    personal_pool(cluster, hosts)
    users = [f"user{i:02d}" for i in range(20)]
    items = [(f"{user}-{tab}", POOL, user) for user in users for tab in ("a", "b")]
    cluster.create_requests_concurrently(items)
    placed = cluster.wait_assigned([name for name, _, _ in items], timeout=60.0)
    host_of = {name: status(obj)["host"] for name, obj in placed.items()}
    for user in users:
        assert host_of[f"{user}-a"] == host_of[f"{user}-b"], (user, host_of)
    per_host = Counter(host_of[f"{user}-a"] for user in users)
    assert len(per_host) == 20, per_host  # none shared
    assigned = {h: u for h, u in owners(cluster).items() if u}
    assert len(assigned) == 20, assigned
    assert assigned == {host_of[f"{user}-a"]: user for user in users}


def test_direct_assignment_waits_for_an_administrator(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    personal_pool(cluster, ["h1", "h2"], assignment="Direct")
    cluster.create_request("alice-1", POOL, "alice")
    cluster.wait_request("alice-1", phase_="Pending", reason="NoHostAssigned")
    assert owners(cluster) == {"h1": None, "h2": None}  # nothing taken by itself

    cluster.patch("SessionHost", "h2", {"spec": {"assignedUser": "alice"}})
    placed = cluster.wait_request("alice-1", phase_="Assigned", reason="Personal", host="h2")
    assert status(placed)["host"] == "h2"


def test_automatic_pools_add_a_host_per_user_and_never_remove_an_assigned_one(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    """No hosts to start with, room for two: alice and bob each get a host the operator
    adds; carol waits NoHostAssigned at maxHosts. Empty for longer than the scale-down
    delay, the assigned hosts stay."""
    del operator_process
    scaling = {"maxHosts": 2, "scaleDownDelaySeconds": 0}
    spec = {"type": "Personal", "scaling": scaling}
    cluster.create_body(manifest("HostPool", POOL, spec, namespace=cluster.namespace))
    cluster.create_request("alice-1", POOL, "alice")
    alice = status(cluster.wait_request("alice-1", phase_="Assigned", reason="Personal"))["host"]
    cluster.create_request("bob-1", POOL, "bob")
    bob = status(cluster.wait_request("bob-1", phase_="Assigned", reason="Personal"))["host"]
    assert alice != bob
    assert owners(cluster) == {alice: "alice", bob: "bob"}
    cluster.create_request("carol-1", POOL, "carol")
    cluster.wait_request("carol-1", phase_="Pending", reason="NoHostAssigned")

    cluster.delete("SessionRequest", "alice-1")
    cluster.delete("SessionRequest", "bob-1")
    for host in (alice, bob):
        cluster.wait_host(host, lambda h: status(h).get("sessions", {}).get("total") == 0, "empty")
    cluster.wait_pool(
        POOL, lambda p: status(p).get("sessions", {}).get("total") == 0, "no sessions left"
    )
    time.sleep(3)  # several passes past the (zero) scale-down delay
    assert owners(cluster) == {alice: "alice", bob: "bob"}


def test_an_unused_host_is_stopped_and_starts_again_when_its_user_connects(
    cluster: Cluster,
    kube: Kube,
    operator_process: OperatorProcess,
    node_label: Callable[[], list[str]],  # noqa: F811
) -> None:
    """Pod-backed personal hosts on the suite's fake nodes, stopAfterMinutes 1: alice's
    first connect adds her host and its Pod; a minute after she logged off the Pod is gone,
    the host says Stopped and is still hers; her next connect waits HostsStarting, the Pod
    is made again and she is placed on the same host."""
    del operator_process
    spec = {
        "type": "Personal",
        "personal": {"stopAfterMinutes": 1},
        "scaling": workloads.scaling(workloads.pod_template(pod_spec()), maxHosts=2),
    }
    nodes = node_label()
    cluster.create_body(manifest("HostPool", POOL, spec, namespace=cluster.namespace))
    cluster.create_request("alice-1", POOL, "alice")
    first = cluster.wait_request("alice-1", phase_="Assigned", reason="Personal", timeout=60)
    mine = status(first)["host"]
    pod_uid = workloads.get_pod(kube, cluster.namespace, mine)["metadata"]["uid"]  # type: ignore[index]
    cluster.wait_host(mine, lambda h: status(h).get("power") == "Running", "power Running")

    cluster.delete("SessionRequest", "alice-1")
    left = time.monotonic()
    stopped = cluster.wait_host(
        mine, lambda h: status(h).get("power") == "Stopped", "power Stopped", timeout=120
    )
    waited = time.monotonic() - left
    assert 55 <= waited <= 90, waited  # one minute unused, give or take a pass
    assert stopped["spec"]["assignedUser"] == "alice"
    assert cond_is(stopped, "Available", "False", "Stopped"), status(stopped)
    cluster.wait(
        lambda: workloads.get_pod(kube, cluster.namespace, mine) is None or None,
        "the pod to be gone",
    )
    assert ("Normal", "HostStopped") in {(e["type"], e["reason"]) for e in cluster.events_for(mine)}

    # The nodes take no new desktop for now: the new pod waits, and so does alice.
    for node in nodes:
        patch = {"metadata": {"labels": {workloads.READY_LABEL: None}}}
        kube.call("PATCH", f"/api/v1/nodes/{node}", body=patch, content_type=MERGE_PATCH)
    cluster.create_request("alice-2", POOL, "alice")
    waiting = cluster.wait_request("alice-2", phase_="Pending", reason="HostsStarting")
    assert cond_is(waiting, "Assigned", "False", "HostsStarting"), status(waiting)
    cluster.wait_host(mine, lambda h: status(h).get("power") == "Starting", "power Starting")
    node_label()
    again = cluster.wait_request("alice-2", phase_="Assigned", reason="Personal", timeout=60)
    assert status(again)["host"] == mine
    pod = workloads.get_pod(kube, cluster.namespace, mine)
    assert pod is not None
    assert pod["metadata"]["uid"] != pod_uid  # a new pod for the same host
    cluster.wait_host(mine, lambda h: status(h).get("power") == "Running", "power Running")
    assert len(cluster.hosts()) == 1  # started again, not a second host


def test_a_claim_another_controls_is_never_mounted(
    cluster: Cluster,
    kube: Kube,
    operator_process: OperatorProcess,
    node_label: Callable[[], list[str]],  # noqa: F811
) -> None:
    """A personal host's claim home-<host> replaced by a namesake it does not control (made
    by someone else, or another pool's host whose names run together): when the host's Pod
    is made again the operator does not mount it; the pool says WorkloadFailure naming the
    claim, and no Pod is made."""
    del operator_process
    node_label()
    # The fake nodes have no storage: the Pod's own volume of the template's name stands
    # in for the claim (left as written), so the Pod runs while its claims are still made.
    own_volume = {**pod_spec(), "volumes": [{"name": "home", "emptyDir": {}}]}
    template = workloads.scaling(workloads.pod_template(own_volume), maxHosts=2)
    claim_spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    template["hostTemplate"]["volumeClaimTemplates"] = [
        {"metadata": {"name": "home"}, "spec": claim_spec}
    ]
    spec = {"type": "Personal", "scaling": template}
    cluster.create_body(manifest("HostPool", POOL, spec, namespace=cluster.namespace))
    cluster.create_request("alice-1", POOL, "alice")
    mine = status(cluster.wait_request("alice-1", phase_="Assigned", timeout=60))["host"]
    claims = f"/api/v1/namespaces/{cluster.namespace}/persistentvolumeclaims"
    ours = kube.call("GET", f"{claims}/home-{mine}")
    assert ours["metadata"]["ownerReferences"][0]["uid"] == cluster.host(mine)["metadata"]["uid"]

    # No claim-protection controller runs here: its finalizer is taken off by hand.
    unprotected = {"metadata": {"finalizers": None}}
    kube.call("PATCH", f"{claims}/home-{mine}", body=unprotected, content_type=MERGE_PATCH)
    kube.call("DELETE", f"{claims}/home-{mine}")
    cluster.wait(
        lambda: kube.request("GET", f"{claims}/home-{mine}")[0] == 404 or None,
        "alice's claim to be gone",
    )
    foreign = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"home-{mine}"},
        "spec": claim_spec,
    }
    kube.call("POST", claims, body=foreign)
    pod = workloads.get_pod(kube, cluster.namespace, mine)
    assert pod is not None
    kube.call("DELETE", f"/api/v1/namespaces/{cluster.namespace}/pods/{mine}")

    failed = cluster.wait(
        lambda: (
            (
                cond_is(cluster.pool(POOL), "WorkloadFailure", "True", "ClaimNotOwned")
                and cluster.pool(POOL)
            )
            or None
        ),
        "the pool to refuse the claim it does not control",
        timeout=60,
    )
    message = next(
        c["message"] for c in status(failed)["conditions"] if c["type"] == "WorkloadFailure"
    )
    assert f"home-{mine}" in message, message
    again = workloads.get_pod(kube, cluster.namespace, mine)
    assert again is None or again["metadata"]["uid"] == pod["metadata"]["uid"], again
