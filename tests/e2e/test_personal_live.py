"""Personal pools end to end on a real API server with the operator running: each user's
requests go to one host of their own, which the operator writes as the host's
``spec.assignedUser``; concurrent first connects of many users never share a host or take
two; in a Direct pool a user waits ``NoHostAssigned`` until an administrator assigns a host.

Most hosts here have no workload (the operator places on them as they are). Pod-backed ones
on the fake nodes: a host stopped when unused and started on connect; a claim another
controls never mounted; and a user's claim never reaching another user: deleted on
``unassign`` before the host is free, kept for that user alone with ``--keep-data``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e import test_workloads_live as workloads
from e2e.test_kubectl_hostpool_live import (  # noqa: F401  (fixtures)
    admin_kubeconfig,
    failed,
    ok,
    plugin,
    session_admin_role,
)
from e2e.test_workloads_live import node_label  # noqa: F401  (a fixture)
from support.admission import host_updates_refused
from support.builders import manifest
from support.cluster import Cluster
from support.conditions import cond_is, status
from support.kube import MERGE_PATCH, Kube
from support.operator_process import OperatorProcess

POOL = "desks"
REVISION = "hostpool.io/template-revision"


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


#: The admission policy's rule: no update makes alice a host's user.
NOT_ALICE = (
    "!has(object.spec.assignedUser) || object.spec.assignedUser != 'alice' || "
    "(has(oldObject.spec.assignedUser) && oldObject.spec.assignedUser == 'alice')"
)


def alice_refused(kube: Kube, cluster: Cluster, host: str) -> bool | None:
    """Giving ``host`` to alice is refused (the policy is in force); a dry run."""
    path = f"/apis/hostpool.io/v1alpha1/namespaces/{cluster.namespace}/sessionhosts/{host}"
    body = {"spec": {"assignedUser": "alice"}}
    code, _ = kube.request(
        "PATCH", path, body=body, query={"dryRun": "All"}, content_type=MERGE_PATCH
    )
    return code in (400, 403, 422) or None


def test_no_request_lands_on_a_host_its_user_was_not_given(
    kube: Kube, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    """A cluster's own admission policy refuses to make alice a host's user. Her two tabs,
    connecting at once, both wait, each with a HostNotGiven Event, and neither is written
    onto a host that does not name her (before, the second rode on the first's claim and
    was assigned, and the first followed it there as a reconnect: both on a host of
    nobody's). bob is placed meanwhile. Once the policy goes, both tabs land on one host,
    hers."""
    personal_pool(cluster, ["h1", "h2"])
    tabs = ["alice-a", "alice-b"]
    with host_updates_refused(
        kube, cluster.namespace, f"not-alice-{cluster.namespace}", NOT_ALICE, "not alice"
    ):
        cluster.wait(lambda: alice_refused(kube, cluster, "h1"), "the policy in force")
        cluster.create_requests_concurrently([(tab, POOL, "alice") for tab in tabs])
        # The first claim refused: by then the second tab's assignment, had it ridden on
        # that claim unchecked, would have been written (one write against the claim's two).
        cluster.wait(
            lambda: "could not give host h1 to alice" in operator_process.log_text() or None,
            "the operator to say the API server refused to give h1 to alice",
        )
        for tab in tabs:
            assert status(cluster.request(tab)).get("phase") != "Assigned", cluster.request(tab)
        for tab in tabs:
            cluster.wait(
                lambda tab=tab: (
                    any(  # type: ignore[misc]
                        e["reason"] == "HostNotGiven" and e["type"] == "Warning"
                        for e in cluster.events_for(tab)
                    )
                    or None
                ),
                f"a HostNotGiven Event on {tab}",
            )
        cluster.create_request("bob-1", POOL, "bob")
        bob = status(cluster.wait_request("bob-1", phase_="Assigned", reason="Personal"))["host"]
        for tab in tabs:
            assert status(cluster.request(tab)).get("phase") != "Assigned", cluster.request(tab)
        assert owners(cluster) == {"h1": None, "h2": None} | {bob: "bob"}
        message = next(
            e["message"] for e in cluster.events_for("alice-a") if e["reason"] == "HostNotGiven"
        )
        assert "not alice" in message, message  # the API server's own words
        assert "h1 to alice" in message, message
    placed = cluster.wait_assigned(tabs, timeout=60.0)
    hers = {status(placed[tab])["host"] for tab in tabs}
    assert len(hers) == 1, {tab: status(placed[tab]) for tab in tabs}
    assert bob not in hers
    assert owners(cluster) == {next(iter(hers)): "alice", bob: "bob"}


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
    # Logon diagnostics: her wait for the stopped host (short here: the nodes take Pods
    # again at once) is the connect's hostStart, apart from its queue.
    (connect,) = status(again)["connects"]
    assert connect["phases"]["hostStart"] > 0, connect
    assert set(connect["phases"]) == {"queue", "hostStart"}, connect


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


#: Whose files a personal host holds (the operator's annotation; the API contract's name).
DATA_OF = "hostpool.io/data-of"
#: Fake nodes store nothing: a mark on a claim stands for the files in it.
MARK = "e2e.hostpool.test/files-of"
CLAIM_SPEC = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}


def home_pool(cluster: Cluster, max_hosts: int) -> None:
    """An Automatic personal pool whose hosts get a Pod and a claim home-<host>. The Pod's
    own volume of the template's name stands in for the claim (the fake nodes have no
    storage, left as written), so it runs while its claim stays Pending."""
    own_volume = {**pod_spec(), "volumes": [{"name": "home", "emptyDir": {}}]}
    template = workloads.scaling(workloads.pod_template(own_volume), maxHosts=max_hosts)
    template["hostTemplate"]["volumeClaimTemplates"] = [
        {"metadata": {"name": "home"}, "spec": CLAIM_SPEC}
    ]
    spec = {"type": "Personal", "scaling": template}
    cluster.create_body(manifest("HostPool", POOL, spec, namespace=cluster.namespace))


def claim_path(cluster: Cluster, name: str) -> str:
    return f"/api/v1/namespaces/{cluster.namespace}/persistentvolumeclaims/{name}"


def claim(kube: Kube, cluster: Cluster, name: str) -> dict[str, Any] | None:
    code, body = kube.request("GET", claim_path(cluster, name))
    if code == 404:
        return None
    assert 200 <= code < 300, (code, body)
    found: dict[str, Any] = body
    return found


def first_desktop(cluster: Cluster, kube: Kube, request: str, user: str) -> tuple[str, str, str]:
    """``user`` connects, is given a host and its claim home-<host>, marked as theirs, and
    logs off: (host, the claim's uid, the Pod's uid)."""
    cluster.create_request(request, POOL, user)
    host = status(cluster.wait_request(request, phase_="Assigned", reason="Personal", timeout=60))[
        "host"
    ]
    home = claim(kube, cluster, f"home-{host}")
    assert home is not None
    mark = {"metadata": {"annotations": {MARK: user}}}
    kube.call("PATCH", claim_path(cluster, f"home-{host}"), body=mark, content_type=MERGE_PATCH)
    pod = workloads.get_pod(kube, cluster.namespace, host)
    assert pod is not None
    cluster.delete("SessionRequest", request)
    cluster.wait_host(host, lambda h: status(h).get("sessions", {}).get("total") == 0, "empty")
    return host, home["metadata"]["uid"], pod["metadata"]["uid"]


def available(obj: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status(obj).get("conditions", []) if c["type"] == "Available")


def test_unassign_deletes_the_users_claims_before_anyone_else_gets_the_host(
    cluster: Cluster,
    kube: Kube,
    operator_process: OperatorProcess,
    node_label: Callable[[], list[str]],  # noqa: F811
    admin_kubeconfig: Path,  # noqa: F811
) -> None:
    """Security review item 2, as reported: alice's host unassigned by the helpdesk was the
    first free host for bob, her claim home-<host> (her files) and her Pod with it. Now:
    one host in the pool; after ``unassign`` her claim is deleted and her Pod with it, and
    bob waits (the host held, saying why) until the claim is gone; then he gets the host
    with a new, empty claim and a new Pod."""
    del operator_process
    node_label()
    home_pool(cluster, max_hosts=1)
    mine, alices_claim, alices_pod = first_desktop(cluster, kube, "alice-1", "alice")

    said = ok(plugin("unassign", mine, kubeconfig=admin_kubeconfig))
    cluster.create_request("bob-1", POOL, "bob")
    # Passes go by (the operator's status interval is 0.2 s): bob is never given her host
    # while her claim is there.
    until = time.monotonic() + 3
    while time.monotonic() < until:
        bob = cluster.request("bob-1")
        home = claim(kube, cluster, f"home-{mine}")
        given = status(bob).get("phase") == "Assigned" and status(bob).get("host") == mine
        assert not (given and home is not None and home["metadata"]["uid"] == alices_claim), (
            "bob was given alice's host while her claim is still there",
            home,
        )
        time.sleep(0.2)
    cluster.wait_request("bob-1", phase_="Pending", reason="HostsStarting")
    assert said == (
        f"{mine} unassigned (was alice's)\nits workload and volume claims (alice's files) are "
        "deleted before anyone else is given it\n"
    )

    def being_deleted() -> bool | None:
        home = claim(kube, cluster, f"home-{mine}")
        return home is None or bool(home["metadata"].get("deletionTimestamp")) or None

    cluster.wait(being_deleted, "alice's claim to be deleted")
    held = cluster.wait_host(
        mine, lambda h: cond_is(h, "Available", "False", "DeletingData"), "DeletingData"
    )
    assert "alice's files" in available(held)["message"], available(held)
    cluster.wait(
        lambda: workloads.get_pod(kube, cluster.namespace, mine) is None or None,
        "alice's Pod to be gone",
    )
    time.sleep(1)  # more passes: bob is still not on her host, her claim still there
    assert status(cluster.request("bob-1")).get("phase") == "Pending"
    home = claim(kube, cluster, f"home-{mine}")
    assert home is not None
    assert home["metadata"]["uid"] == alices_claim
    assert workloads.get_pod(kube, cluster.namespace, mine) is None  # not made again

    # The claim-protection controller (not run here) lets the claim go once no Pod uses it.
    unprotected = {"metadata": {"finalizers": None}}
    kube.call(
        "PATCH", claim_path(cluster, f"home-{mine}"), body=unprotected, content_type=MERGE_PATCH
    )
    placed = cluster.wait_request("bob-1", phase_="Assigned", reason="Personal", timeout=60)
    assert status(placed)["host"] == mine
    home = claim(kube, cluster, f"home-{mine}")
    assert home is not None
    assert home["metadata"]["uid"] != alices_claim
    assert MARK not in (home["metadata"].get("annotations") or {})
    pod = workloads.get_pod(kube, cluster.namespace, mine)
    assert pod is not None
    assert pod["metadata"]["uid"] != alices_pod
    host = cluster.host(mine)
    assert host["spec"]["assignedUser"] == "bob"
    assert host["metadata"]["annotations"][DATA_OF] == "bob"
    deleted = [e for e in cluster.events_for(mine) if e["reason"] == "HostDataDeleted"]
    assert [e["type"] for e in deleted] == ["Normal"], deleted
    assert f"PersistentVolumeClaim home-{mine}" in deleted[0]["message"], deleted


def test_unassign_keep_data_keeps_the_claim_for_that_user_alone(
    cluster: Cluster,
    kube: Kube,
    operator_process: OperatorProcess,
    node_label: Callable[[], list[str]],  # noqa: F811
    admin_kubeconfig: Path,  # noqa: F811
) -> None:
    """``unassign --keep-data``: alice's claim and Pod stay and the host is hers alone. bob's
    connect gets another host; ``assign`` of hers to carol is refused; a write that races
    past that check gives carol nothing (a Warning Event, the host says why, the claim and
    Pod untouched); back to nobody, alice's next connect gets her own claim again."""
    del operator_process
    node_label()
    home_pool(cluster, max_hosts=2)
    mine, alices_claim, alices_pod = first_desktop(cluster, kube, "alice-1", "alice")

    said = ok(plugin("unassign", mine, "--keep-data", kubeconfig=admin_kubeconfig))
    assert said == (
        f"{mine} unassigned (was alice's)\nits files are kept for alice: only alice may be "
        "assigned it again\n"
    )
    assert cluster.host(mine)["spec"]["keepData"] is True
    cluster.wait_host(mine, lambda h: cond_is(h, "Available", "False", "DataKept"), "DataKept")
    cluster.create_request("bob-1", POOL, "bob")
    bob = cluster.wait_request("bob-1", phase_="Assigned", reason="Personal", timeout=60)
    assert status(bob)["host"] != mine

    failed(plugin("assign", mine, "carol", kubeconfig=admin_kubeconfig), "keeps alice's files")
    cluster.patch("SessionHost", mine, {"spec": {"assignedUser": "carol"}})
    cluster.create_request("carol-1", POOL, "carol")
    cluster.wait_request("carol-1", phase_="Pending", reason="NoEligibleHost")
    refused = cluster.wait_host(
        mine,
        lambda h: (
            cond_is(h, "Available", "False", "DataKept")
            and "carol is not placed" in available(h)["message"]
        ),
        "the host to say carol is not placed there",
    )
    assert "alice's files" in available(refused)["message"]

    def warned() -> list[dict[str, Any]] | None:
        found = [e for e in cluster.events_for(mine) if e["reason"] == "HostDataKept"]
        return found or None

    (event,) = cluster.wait(warned, "the HostDataKept Event")
    assert event["type"] == "Warning"
    assert "carol" in event["message"]
    time.sleep(2)
    assert status(cluster.request("carol-1")).get("phase") == "Pending"
    home = claim(kube, cluster, f"home-{mine}")
    assert home is not None
    assert home["metadata"]["uid"] == alices_claim
    assert not home["metadata"].get("deletionTimestamp")
    pod = workloads.get_pod(kube, cluster.namespace, mine)
    assert pod is not None
    assert pod["metadata"]["uid"] == alices_pod

    cluster.delete("SessionRequest", "carol-1")
    cluster.patch("SessionHost", mine, {"spec": {"assignedUser": None}})
    cluster.create_request("alice-2", POOL, "alice")
    again = cluster.wait_request("alice-2", phase_="Assigned", reason="Personal", timeout=60)
    assert status(again)["host"] == mine
    home = claim(kube, cluster, f"home-{mine}")
    assert home is not None
    assert home["metadata"]["uid"] == alices_claim
    assert home["metadata"]["annotations"][MARK] == "alice"
    host = cluster.host(mine)
    assert "keepData" not in host["spec"]  # hers again: kept no longer
    assert host["metadata"]["annotations"][DATA_OF] == "alice"


def test_an_image_update_makes_each_users_host_again_in_place_keeping_their_files(
    cluster: Cluster,
    kube: Kube,
    operator_process: OperatorProcess,
    node_label: Callable[[], list[str]],  # noqa: F811
) -> None:
    """A new host template on a personal pool: alice, logged off, has her Pod made again
    from the new template on the same host, her claim (her files) the same; bob, still
    connected, keeps his Pod until he logs off, then his is made again; no host is replaced
    or added, and the update completes."""
    del operator_process
    node_label()
    home_pool(cluster, max_hosts=2)
    alices, alices_claim, alices_pod = first_desktop(cluster, kube, "alice-1", "alice")
    cluster.create_request("bob-1", POOL, "bob")
    bobs = status(cluster.wait_request("bob-1", phase_="Assigned", reason="Personal", timeout=60))[
        "host"
    ]
    bobs_pod = workloads.get_pod(kube, cluster.namespace, bobs)
    assert bobs_pod is not None
    old = cluster.host(bobs)["metadata"]["labels"][REVISION]

    tag = {"spec": {"scaling": {"hostTemplate": {"workload": {"metadata": {"labels": {
        "image-tag": "v2"}}}}}}}  # fmt: skip
    cluster.patch("HostPool", POOL, tag)

    def new_pod(host: str) -> dict[str, Any] | None:
        pod = workloads.get_pod(kube, cluster.namespace, host)
        labels = (pod or {}).get("metadata", {}).get("labels", {})
        return pod if labels.get("image-tag") == "v2" else None

    remade = cluster.wait(lambda: new_pod(alices), "alice's Pod made from the new template")
    assert remade["metadata"]["uid"] != alices_pod
    home = claim(kube, cluster, f"home-{alices}")
    assert home is not None
    assert home["metadata"]["uid"] == alices_claim
    new = cluster.wait_host(
        alices, lambda h: h["metadata"]["labels"].get(REVISION) != old, "alice's host updated"
    )
    assert new["spec"]["assignedUser"] == "alice"

    # bob's session holds his host as it is, pass after pass.
    until = time.monotonic() + 3
    while time.monotonic() < until:
        pod = workloads.get_pod(kube, cluster.namespace, bobs)
        assert pod is not None
        assert pod["metadata"]["uid"] == bobs_pod["metadata"]["uid"]
        time.sleep(0.3)
    progress = status(cluster.pool(POOL)).get("update", {})
    assert progress.get("phase") == "Progressing", progress
    assert "1 wait for their user to log off" in progress.get("message", ""), progress

    cluster.delete("SessionRequest", "bob-1")
    cluster.wait(lambda: new_pod(bobs), "bob's Pod made from the new template once he left")
    done = cluster.wait_pool(
        POOL, lambda p: status(p).get("update", {}).get("phase") == "Complete", "update Complete"
    )
    assert status(done)["update"]["updatedHosts"] == 2, status(done)
    assert sorted(cluster.hosts()) == sorted({alices, bobs})  # made again, never replaced
    updated = [e["message"] for e in cluster.events_for(POOL) if e["reason"] == "HostUpdated"]
    assert any(alices in m and "volumes kept" in m for m in updated), updated
