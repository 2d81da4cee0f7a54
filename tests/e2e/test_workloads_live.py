"""Hosts backed by workloads, end to end: the operator creates a Pod (or any object with a
Ready condition) with each host it adds, opens the host only once that workload is Ready,
copies its address to the requests, fails the sessions on a workload that is gone (HostLost)
and makes its own workloads again, leaves users' workloads alone, and reports templates the
API server refuses without hammering it.

The pods run on the suite's control plane's fake nodes (kwok: scheduled and Ready within a
second or two, with a pod IP); they tolerate the fake nodes' taint and name an image that
is never pulled there (on kind, a real kubelet runs it: the pause image). Tests that break
a pod or a node on purpose need the suite's own control plane and are skipped elsewhere.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from support.cluster import Cluster
from support.conditions import cond_is, condition, host_of, parse_time, phase, status
from support.kube import (
    MERGE_PATCH,
    ApiError,
    Kube,
    load_yaml_documents,
    need_control_plane,
    unique_name,
    wait_for,
)
from support.operator_process import OperatorProcess

Obj = dict[str, Any]

POOL = "desk"
MANAGED = "hostpool.io/managed-by"
MANAGER = "hostpool-operator"
POOL_LABEL = "hostpool.io/pool"
HOST_LABEL = "hostpool.io/host"
IMAGE = "registry.k8s.io/pause:3.10"
TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
#: A node label the test puts on the nodes to let the template's pods be scheduled.
READY_LABEL = "hostpool-e2e/ready"

CRD_FILE = (
    Path(__file__).resolve().parents[1] / "support" / "fixtures" / "workloads" / "desktop-crd.yaml"
)
CRD_BASE = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
DESKTOP_GROUP = "e2e.hostpool.test"
DESKTOP_API_VERSION = f"{DESKTOP_GROUP}/v1"


# ---------------------------------------------------------------------------------------
# manifests


def pod_spec(**extra: Any) -> Obj:
    """A pod spec that runs on the fake nodes (and, with the pause image, on kind)."""
    return {
        "tolerations": [TOLERATION],
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "desktop", "image": IMAGE}],
        **extra,
    }


def pod_template(spec: Obj | None = None, **extra: Any) -> Obj:
    """hostTemplate.workload for a Pod."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": {"app": "desktop"}, "annotations": {"e2e/from": "template"}},
        "spec": spec if spec is not None else pod_spec(),
        **extra,
    }


def scaling(workload: Obj, **kw: Any) -> Obj:
    return {
        "minHosts": 0,
        "maxHosts": 6,
        "scaleDownDelaySeconds": 600,
        "hostTemplate": {"metadata": {"labels": {"tier": "generated"}}, "workload": workload},
        **kw,
    }


def user_pod(name: str) -> Obj:
    """A pod a user created themselves (no labels, no owner)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec()}


def pod_ref(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "name": name}


# ---------------------------------------------------------------------------------------
# pods and other workloads


def pods_path(namespace: str, name: str | None = None) -> str:
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")


def pods(kube: Kube, namespace: str) -> dict[str, Obj]:
    items = kube.call("GET", pods_path(namespace))["items"]
    return {p["metadata"]["name"]: p for p in items}


def get_pod(kube: Kube, namespace: str, name: str) -> Obj | None:
    """The pod, or None when there is none of that name."""
    code, body = kube.request("GET", pods_path(namespace, name))
    if code == 404:
        return None
    if not 200 <= code < 300:
        raise ApiError("GET", pods_path(namespace, name), code, body)
    result: Obj = body
    return result


def create_pod(kube: Kube, namespace: str, body: Obj) -> Obj:
    result: Obj = kube.call("POST", pods_path(namespace), body=body)
    return result


def delete_pod(kube: Kube, namespace: str, name: str) -> None:
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    kube.call("DELETE", pods_path(namespace, name), body=body)


def ready_cond(obj: Mapping[str, Any]) -> Obj | None:
    return condition(obj, "Ready")


def is_ready(obj: Mapping[str, Any] | None) -> bool:
    cond = ready_cond(obj) if obj is not None else None
    return cond is not None and cond.get("status") == "True"


def pod_ip(obj: Mapping[str, Any]) -> str | None:
    value = status(obj).get("podIP")
    return value if isinstance(value, str) and value else None


def desktops_path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/{DESKTOP_API_VERSION}/namespaces/{namespace}/desktops"
    return path + (f"/{name}" if name else "")


def desktops(kube: Kube, namespace: str) -> dict[str, Obj]:
    items = kube.call("GET", desktops_path(namespace))["items"]
    return {d["metadata"]["name"]: d for d in items}


# ---------------------------------------------------------------------------------------
# the namespace as the tests look at it


def managed(cluster: Cluster) -> dict[str, Obj]:
    """The SessionHosts the operator created."""
    return {
        name: h
        for name, h in cluster.hosts().items()
        if (h["metadata"].get("labels") or {}).get(MANAGED) == MANAGER
    }


def assigned_per_host(requests: Mapping[str, Obj]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, obj in sorted(requests.items()):
        host = host_of(obj)
        if phase(obj) == "Assigned" and host is not None:
            out.setdefault(host, []).append(name)
    return out


def events(cluster: Cluster, kind: str, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events about the object of this kind and name."""
    return [
        (str(e.get("type")), str(e.get("reason")), str(e.get("message")))
        for e in cluster.events_for(name)
        if (e.get("involvedObject") or {}).get("kind") == kind
    ]


def wait_event(
    cluster: Cluster, kind: str, name: str, reason: str, type_: str = "Warning"
) -> tuple[str, str, str]:
    def check() -> tuple[str, str, str] | None:
        return next(
            (e for e in events(cluster, kind, name) if e[0] == type_ and e[1] == reason), None
        )

    return cluster.wait(check, f"a {type_} Event {reason} on {kind} {name}")


def wait_all(
    cluster: Cluster,
    names: list[str],
    check: Callable[[Obj], bool],
    what: str,
    timeout: float = 30.0,
) -> dict[str, Obj]:
    """Wait until every named request passes ``check``; return all requests by name."""

    def probe() -> dict[str, Obj] | None:
        items = cluster.requests()
        return items if all(n in items and check(items[n]) for n in names) else None

    return cluster.wait(probe, f"{len(names)} requests: {what}", timeout)


def pending_because(reason: str) -> Callable[[Obj], bool]:
    return lambda r: phase(r) == "Pending" and status(r).get("reason") == reason


def host_lost(obj: Obj) -> bool:
    return (
        phase(obj) == "Failed"
        and status(obj).get("reason") == "HostLost"
        and cond_is(obj, "Assigned", "False", "HostLost")
    )


def within_seconds(later: str, earlier: str) -> bool:
    """``later`` is not before ``earlier``, to the second (API timestamps have seconds)."""
    return parse_time(later).replace(microsecond=0) >= parse_time(earlier).replace(microsecond=0)


def observe(seconds: float, check: Callable[[], str | None], interval: float = 0.5) -> list[str]:
    """Check an invariant for ``seconds`` (a window of observation, not a wait for a state);
    return every violation seen."""
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while True:
        problem = check()
        if problem is not None and problem not in seen:
            seen.append(problem)
        if time.monotonic() >= deadline:
            return seen
        time.sleep(interval)


def create_requests(cluster: Cluster, count: int, prefix: str = "r") -> list[str]:
    names = [f"{prefix}{i:02d}" for i in range(count)]
    for i, name in enumerate(names):
        cluster.create_request(name, POOL, f"{prefix}-user{i}@corp.example")
    return names


def check_workload_of(
    workload: Obj, host: Obj, *, kind: str, template_labels: Mapping[str, str]
) -> None:
    """A workload the operator created with a host: named after it, labelled, controlled by it."""
    name = host["metadata"]["name"]
    meta = workload["metadata"]
    assert meta["name"] == name
    labels = meta.get("labels") or {}
    assert labels.get(POOL_LABEL) == POOL, labels
    assert labels.get(HOST_LABEL) == name, labels
    assert labels.get(MANAGED) == MANAGER, labels
    for key, value in template_labels.items():
        assert labels.get(key) == value, labels
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    assert len(owners) == 1, meta.get("ownerReferences")
    owner = owners[0]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "SessionHost",
        name,
        host["metadata"]["uid"],
    ), owner
    ref = host["spec"]["workloadRef"]
    assert (ref["kind"], ref["name"]) == (kind, name), ref


# ---------------------------------------------------------------------------------------
# 1. scale-up creates pods; hosts open only when they are Ready


@pytest.fixture(autouse=True)
def _default_service_account(kube: Kube, namespace: str) -> None:
    """Pods are refused in a namespace until its ServiceAccount controller has made the
    ``default`` account; right after a control-plane restart (an earlier test's) that can
    take longer than these tests wait for a pod. A property of the cluster, waited for here."""
    wait_for(
        lambda: (
            kube.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")[0] == 200
        ),
        60,
        what=f"the default ServiceAccount of {namespace}",
    )


@pytest.fixture
def node_label(kube: Kube) -> Iterator[Callable[[], list[str]]]:
    """Puts READY_LABEL=yes on every node when called (returns their names); removes it
    afterwards."""

    def set_label(node: str, value: str | None) -> None:
        patch = {"metadata": {"labels": {READY_LABEL: value}}}
        kube.call("PATCH", f"/api/v1/nodes/{node}", body=patch, content_type=MERGE_PATCH)

    def nodes() -> list[str]:
        return [n["metadata"]["name"] for n in kube.call("GET", "/api/v1/nodes")["items"]]

    # A run that was killed may have left the label behind: the pods would not wait.
    for node in kube.call("GET", "/api/v1/nodes", query={"labelSelector": READY_LABEL})["items"]:
        set_label(node["metadata"]["name"], None)
    labelled: list[str] = []

    def label() -> list[str]:
        names = nodes()
        for node in names:
            set_label(node, "yes")
            labelled.append(node)
        return names

    yield label
    for node in labelled:
        patch = {"metadata": {"labels": {READY_LABEL: None}}}
        kube.request("PATCH", f"/api/v1/nodes/{node}", body=patch, content_type=MERGE_PATCH)


def test_scale_up_creates_a_pod_per_host_and_opens_each_host_once_its_pod_is_ready(
    kube: Kube,
    cluster: Cluster,
    node_label: Callable[[], list[str]],
    operator_process: OperatorProcess,
) -> None:
    del operator_process
    ns = cluster.namespace
    # The pods can be scheduled only once the test labels the nodes: until then they stay
    # Pending, so the starting phase is observed for sure, however fast kwok is.
    template = pod_template(pod_spec(nodeSelector={READY_LABEL: "yes"}))
    # No clipboard: each pod is told so (the session-host image turns xrdp's channel off).
    connection = {"clipboard": "Disabled"}
    cluster.create_pool(POOL, "DepthFirst", 2, scaling=scaling(template), connection=connection)
    cluster.wait_operator_knows(POOL, [])
    names = create_requests(cluster, 7)

    # 7 sessions at 2 a host: exactly 4 hosts, each with its pod; every request waits for
    # the hosts being started.
    wait_all(cluster, names, pending_because("HostsStarting"), "Pending, HostsStarting")
    cluster.wait(lambda: len(pods(kube, ns)) == 4 or None, "four pods")
    hosts = managed(cluster)
    assert len(hosts) == 4, sorted(hosts)
    assert len(cluster.hosts()) == 4
    workloads = pods(kube, ns)
    assert set(workloads) == set(hosts)
    for name, host in hosts.items():
        pod = workloads[name]
        check_workload_of(pod, host, kind="Pod", template_labels={"app": "desktop"})
        assert pod["metadata"].get("annotations", {}).get("e2e/from") == "template"
        assert pod["spec"]["containers"][0]["image"] == IMAGE
        assert {"name": "HOSTPOOL_CLIPBOARD", "value": "Disabled"} in pod["spec"]["containers"][0][
            "env"
        ]
        assert pod["spec"]["nodeSelector"] == {READY_LABEL: "yes"}
        assert host["spec"]["workloadRef"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "addressFrom": "status.podIP",
        }
        assert host["metadata"]["labels"][POOL_LABEL] == POOL
        assert not is_ready(pod)
    for name in hosts:
        cluster.wait_host(
            name,
            lambda h: (
                cond_is(h, "Available", "False", "WorkloadNotReady")
                and cond_is(h, "WorkloadReady", "False", "NotReady")
            ),
            "Available False (WorkloadNotReady) while its pod is Pending",
        )
    cluster.wait_pool(
        POOL,
        lambda p: (
            cond_is(p, "Saturated", "True", "HostsStarting")
            and (status(p).get("hosts") or {}).get("notReady") == 4
        ),
        "Saturated True (HostsStarting), 4 hosts not ready",
    )
    assert all(phase(r) == "Pending" for r in cluster.requests().values())

    # Let the pods be scheduled: they become Ready, the hosts open, the requests are placed.
    node_label()
    placed = cluster.wait_assigned(names, timeout=60)
    workloads = pods(kube, ns)
    hosts = managed(cluster)
    assert len(hosts) == 4, sorted(hosts)
    assert len(cluster.hosts()) == 4, sorted(cluster.hosts())
    assert set(workloads) == set(hosts)
    per_host = assigned_per_host(placed)
    assert set(per_host) <= set(hosts)
    assert max(len(v) for v in per_host.values()) <= 2, per_host
    assert sum(len(v) for v in per_host.values()) == 7
    for name, obj in placed.items():
        on = host_of(obj)
        assert on is not None
        pod = workloads[on]
        ready = ready_cond(pod)
        assert ready is not None, pod.get("status")
        assert ready["status"] == "True", pod.get("status")
        # The host took the session only once its pod was Ready, at its address.
        assert status(obj).get("hostAddress") == pod_ip(pod), (name, status(obj), pod["status"])
        assert within_seconds(status(obj)["assignedAt"], ready["lastTransitionTime"]), (
            name,
            status(obj)["assignedAt"],
            ready,
        )
    expected = {h: len(v) for h, v in per_host.items()}

    def settled() -> bool:
        current = cluster.hosts()
        return all(
            (status(current[h]).get("sessions") or {}).get("total") == expected.get(h, 0)
            and status(current[h]).get("address") == pod_ip(workloads[h])
            and cond_is(current[h], "WorkloadReady", "True", "Ready")
            for h in hosts
        )

    cluster.wait(settled, "host status: sessions, address and WorkloadReady True")
    for name, host in cluster.hosts().items():
        available = condition(host, "Available")
        assert available is not None
        if available["status"] == "True":
            ready = ready_cond(workloads[name])
            assert ready is not None
            assert within_seconds(available["lastTransitionTime"], ready["lastTransitionTime"])
        else:
            assert available["reason"] == "SessionLimitReached", available
    cluster.wait_pool(
        POOL,
        lambda p: (
            (status(p).get("hosts") or {}).get("notReady") == 0
            and not cond_is(p, "Saturated", "True", "HostsStarting")
            and cond_is(p, "WorkloadFailure", "False", "WorkloadsCreated")
            and cond_is(p, "Ready", "True")
        ),
        "no host not ready, WorkloadFailure False (WorkloadsCreated), Ready",
    )
    assert len(cluster.hosts()) == 4
    assert len(pods(kube, ns)) == 4


# ---------------------------------------------------------------------------------------
# 2. a pod gone under sessions


def start_two_hosts(cluster: Cluster, kube: Kube, **extra: Any) -> tuple[dict[str, Obj], str]:
    """A pool of limit 2 with a Pod template, 4 requests: two hosts of two sessions.
    Returns the requests and the host of r00."""
    cluster.create_pool(POOL, "DepthFirst", 2, scaling=scaling(pod_template(), **extra))
    cluster.wait_operator_knows(POOL, [])
    names = create_requests(cluster, 4)
    placed = cluster.wait_assigned(names, timeout=60)
    per_host = assigned_per_host(placed)
    assert sorted(len(v) for v in per_host.values()) == [2, 2], per_host
    assert set(pods(kube, cluster.namespace)) == set(per_host)
    victim = host_of(placed["r00"])
    assert victim is not None
    return placed, victim


def check_lost_and_recreated(
    cluster: Cluster,
    kube: Kube,
    placed: Mapping[str, Obj],
    victim: str,
    old_uid: str,
) -> None:
    """The requests on ``victim`` fail with HostLost (Events on each and on the host), the
    others stay where they were; the pod comes back under the same name and the host takes a
    new session on it."""
    ns = cluster.namespace
    before = {name: host_of(obj) for name, obj in placed.items()}
    lost = sorted(n for n, h in before.items() if h == victim)
    kept = sorted(n for n, h in before.items() if h != victim)
    wait_all(cluster, lost, host_lost, "Failed, HostLost")
    for name in lost:
        wait_event(cluster, "SessionRequest", name, "HostLost")
    wait_event(cluster, "SessionHost", victim, "HostLost")
    now = cluster.requests()
    for name in kept:
        assert (phase(now[name]), host_of(now[name])) == ("Assigned", before[name]), now[name]

    def recreated() -> Obj | None:
        pod = get_pod(kube, ns, victim)
        return (
            pod if pod is not None and pod["metadata"]["uid"] != old_uid and is_ready(pod) else None
        )

    pod = cluster.wait(recreated, f"pod {victim} created again (new uid) and Ready", timeout=60)
    owner = next(o for o in pod["metadata"]["ownerReferences"] if o.get("controller"))
    assert (owner["kind"], owner["name"]) == ("SessionHost", victim)
    wait_event(cluster, "SessionHost", victim, "WorkloadRecreated", "Normal")
    cluster.wait_host(
        victim,
        lambda h: cond_is(h, "Available", "True") and cond_is(h, "WorkloadReady", "True"),
        "Available again",
    )
    # The other host is full: a new session can only go to the host that came back.
    cluster.create_request("after", POOL, "late-user@corp.example")
    after = cluster.wait_request("after", phase_="Assigned", host=victim)
    assert status(after).get("hostAddress") == pod_ip(pod)
    now = cluster.requests()
    for name in kept:
        assert (phase(now[name]), host_of(now[name])) == ("Assigned", before[name]), now[name]
    for name in lost:
        assert phase(now[name]) == "Failed", now[name]
    assert len(managed(cluster)) == 2, sorted(cluster.hosts())


def test_a_pod_deleted_under_sessions_fails_them_and_is_created_again(
    kube: Kube, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    placed, victim = start_two_hosts(cluster, kube)
    pod = get_pod(kube, cluster.namespace, victim)
    assert pod is not None
    delete_pod(kube, cluster.namespace, victim)
    check_lost_and_recreated(cluster, kube, placed, victim, pod["metadata"]["uid"])


def test_a_pod_that_failed_under_sessions_is_replaced(
    kube: Kube, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    """A pod that ended (phase Failed) is the operator's to delete and make again."""
    del operator_process
    plane = need_control_plane(kube, "failing a pod on a fake node")
    placed, victim = start_two_hosts(cluster, kube)
    pod = get_pod(kube, cluster.namespace, victim)
    assert pod is not None
    plane.fail_pod(cluster.namespace, victim)
    check_lost_and_recreated(cluster, kube, placed, victim, pod["metadata"]["uid"])


def test_a_pod_lost_under_a_host_that_is_removed_for_it_is_not_made_again(
    kube: Kube, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    """Its pod gone, the host's sessions fail (HostLost) and the host, now empty with
    scaleDownDelaySeconds 0, is due for removal: it is removed, and its pod is not made again
    first (before, the pass re-created the pod and the next one deleted the host 6 ms later:
    a pod started for nothing)."""
    del operator_process
    ns = cluster.namespace
    placed, victim = start_two_hosts(cluster, kube, scaleDownDelaySeconds=0)
    other = next(h for h in assigned_per_host(placed) if h != victim)
    delete_pod(kube, ns, victim)
    cluster.wait(lambda: victim not in cluster.hosts() or None, f"host {victim} removed", 60)

    # Events are written after the decisions they tell of: wait for the HostLost one.
    def lost() -> list[str] | None:
        reasons = [e[1] for e in events(cluster, "SessionHost", victim)]
        return reasons if "HostLost" in reasons else None

    reasons = cluster.wait(lost, "the HostLost Event of the removed host", 30)
    assert "WorkloadRecreated" not in reasons, reasons
    cluster.wait(lambda: set(pods(kube, ns)) == {other} or None, "only the other pod left", 30)


# ---------------------------------------------------------------------------------------
# 3. a user's own host and pod


def test_a_users_host_follows_its_own_pod_and_the_operator_never_recreates_it(
    kube: Kube, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    ns = cluster.namespace
    cluster.create_pool(POOL, "DepthFirst", 2)
    cluster.create_host("user-desk", POOL, workloadRef=pod_ref("user-pod"))
    cluster.wait_host(
        "user-desk",
        lambda h: (
            cond_is(h, "Available", "False", "WorkloadMissing")
            and cond_is(h, "WorkloadReady", "False", "Missing")
        ),
        "Available False (WorkloadMissing) before its pod exists",
    )
    create_pod(kube, ns, user_pod("user-pod"))
    cluster.wait(lambda: is_ready(get_pod(kube, ns, "user-pod")) or None, "user-pod Ready")
    pod = get_pod(kube, ns, "user-pod")
    assert pod is not None
    ip = pod_ip(pod)
    assert ip
    cluster.wait_host(
        "user-desk",
        lambda h: (
            cond_is(h, "Available", "True")
            and cond_is(h, "WorkloadReady", "True", "Ready")
            and status(h).get("address") == ip
        ),
        f"Available, WorkloadReady and address {ip}",
    )
    names = create_requests(cluster, 2)
    placed = cluster.wait_assigned(names)
    for obj in placed.values():
        assert host_of(obj) == "user-desk"
        assert status(obj).get("hostAddress") == ip
    pod = get_pod(kube, ns, "user-pod")
    assert pod is not None
    # The operator did not touch the user's pod.
    assert not pod["metadata"].get("labels"), pod["metadata"]
    assert not pod["metadata"].get("ownerReferences"), pod["metadata"]

    delete_pod(kube, ns, "user-pod")
    wait_all(cluster, names, host_lost, "Failed, HostLost")
    for name in names:
        wait_event(cluster, "SessionRequest", name, "HostLost")
    wait_event(cluster, "SessionHost", "user-desk", "HostLost")
    cluster.wait(lambda: get_pod(kube, ns, "user-pod") is None or None, "user-pod gone")

    # Not the operator's to make again.
    def came_back() -> str | None:
        back = get_pod(kube, ns, "user-pod")
        return None if back is None else f"user-pod exists again: {back['metadata']}"

    assert observe(10, came_back) == []
    cluster.wait_host(
        "user-desk",
        lambda h: (
            cond_is(h, "Available", "False", "WorkloadMissing")
            and cond_is(h, "WorkloadReady", "False", "Missing")
        ),
        "Available False (WorkloadMissing) after its pod was deleted",
    )
    assert "WorkloadRecreated" not in {e[1] for e in events(cluster, "SessionHost", "user-desk")}
    assert set(cluster.hosts()) == {"user-desk"}


# ---------------------------------------------------------------------------------------
# 4. scale-down


def test_scale_down_deletes_the_operators_hosts_and_their_pods_but_not_a_users(
    kube: Kube, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    ns = cluster.namespace
    create_pod(kube, ns, user_pod("user-pod"))
    cluster.create_pool(
        POOL, "DepthFirst", 2, scaling=scaling(pod_template(), scaleDownDelaySeconds=2)
    )
    cluster.create_host("user-desk", POOL, workloadRef=pod_ref("user-pod"))
    cluster.wait_host("user-desk", lambda h: cond_is(h, "Available", "True"), "Available")
    user_uid = (get_pod(kube, ns, "user-pod") or {})["metadata"]["uid"]
    names = create_requests(cluster, 6)
    placed = cluster.wait_assigned(names, timeout=120)  # kwok's pods on a busy machine
    generated = sorted(managed(cluster))
    assert len(generated) == 2, sorted(cluster.hosts())
    assert len(assigned_per_host(placed)["user-desk"]) == 2
    assert set(pods(kube, ns)) == {"user-pod", *generated}

    for name in names:
        cluster.delete("SessionRequest", name)
    cluster.wait(
        lambda: set(cluster.hosts()) == {"user-desk"} or None,
        "the operator's empty hosts removed",
        timeout=60,
    )
    cluster.wait(
        lambda: set(pods(kube, ns)) == {"user-pod"} or None,
        "their pods garbage-collected",
        timeout=60,
    )
    pod = get_pod(kube, ns, "user-pod")
    assert pod is not None
    assert pod["metadata"]["uid"] == user_uid
    assert set(cluster.hosts()) == {"user-desk"}
    removed = [e for e in events(cluster, "HostPool", POOL) if e[1] == "HostsRemoved"]
    assert removed


# ---------------------------------------------------------------------------------------
# 5. another kind: a custom resource with a Ready condition


@pytest.fixture
def desktop_kind(kube: Kube) -> Iterator[str]:
    """The Desktop CRD (e2e.hostpool.test/v1), installed for the test and removed after."""
    (crd,) = load_yaml_documents(CRD_FILE)
    name = crd["metadata"]["name"]
    code, body = kube.request("POST", CRD_BASE, body=crd)
    if code != 409 and not 200 <= code < 300:
        raise ApiError("POST", CRD_BASE, code, body)

    def served() -> bool:
        conds = (kube.call("GET", f"{CRD_BASE}/{name}").get("status") or {}).get("conditions")
        state = {c.get("type"): c.get("status") for c in conds or []}
        established = state.get("Established") == "True"
        return (
            established and kube.request("GET", f"/apis/{DESKTOP_API_VERSION}/desktops")[0] == 200
        )

    wait_for(served, 60, what=f"CRD {name} served", retry_on=(ApiError,), raises=TimeoutError)
    try:
        yield DESKTOP_API_VERSION
    finally:
        kube.request("DELETE", f"{CRD_BASE}/{name}")
        wait_for(
            lambda: kube.request("GET", f"{CRD_BASE}/{name}")[0] == 404,
            60,
            what=f"CRD {name} deleted",
            raises=TimeoutError,
        )


def test_any_kind_with_a_ready_condition_backs_hosts(
    kube: Kube, cluster: Cluster, desktop_kind: str, operator_process: OperatorProcess
) -> None:
    del operator_process
    ns = cluster.namespace
    desktop_spec = {"image": "desktop:1", "size": "small", "ports": [3389]}
    template = {
        "apiVersion": desktop_kind,
        "kind": "Desktop",
        "metadata": {"labels": {"app": "vdi"}},
        "spec": desktop_spec,
        "addressFrom": "status.ip",
    }
    cluster.create_pool(POOL, "DepthFirst", 2, scaling=scaling(template))
    cluster.wait_operator_knows(POOL, [])
    names = create_requests(cluster, 3)
    wait_all(cluster, names, pending_because("HostsStarting"), "Pending, HostsStarting")
    cluster.wait(lambda: len(desktops(kube, ns)) == 2 or None, "two Desktops")
    hosts = managed(cluster)
    assert len(hosts) == 2, sorted(hosts)
    found = desktops(kube, ns)
    assert set(found) == set(hosts)
    for name, host in hosts.items():
        check_workload_of(found[name], host, kind="Desktop", template_labels={"app": "vdi"})
        assert found[name]["spec"] == desktop_spec  # kept as written
        assert host["spec"]["workloadRef"]["addressFrom"] == "status.ip"
        cluster.wait_host(
            name,
            lambda h: cond_is(h, "Available", "False", "WorkloadNotReady"),
            "Available False (WorkloadNotReady) while nothing reports it Ready",
        )
    cluster.wait_pool(
        POOL, lambda p: cond_is(p, "Saturated", "True", "HostsStarting"), "HostsStarting"
    )

    # What a Desktop controller would do: report each one Ready, with its address.
    ips = {name: f"10.123.0.{i + 10}" for i, name in enumerate(sorted(hosts))}
    for name, ip in ips.items():
        patch = {
            "status": {
                "ip": ip,
                "conditions": [{"type": "Ready", "status": "True", "reason": "Started"}],
            }
        }
        kube.call(
            "PATCH", desktops_path(ns, name) + "/status", body=patch, content_type=MERGE_PATCH
        )
    placed = cluster.wait_assigned(names)
    per_host = assigned_per_host(placed)
    assert max(len(v) for v in per_host.values()) <= 2, per_host
    for obj in placed.values():
        on = host_of(obj)
        assert on is not None
        assert on in ips
        assert status(obj).get("hostAddress") == ips[on], status(obj)
    for name, ip in ips.items():

        def opened(h: Obj, ip: str = ip) -> bool:
            return status(h).get("address") == ip and cond_is(h, "WorkloadReady", "True")

        cluster.wait_host(name, opened, f"address {ip} and WorkloadReady True")
    assert len(cluster.hosts()) == 2


# ---------------------------------------------------------------------------------------
# 6. bad templates


NEXT_TRY = re.compile(r"next try in (\d+)s")


def test_a_refused_pod_template_is_reported_backed_off_and_retried_once_fixed(
    kube: Kube, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    ns = cluster.namespace
    bad_spec = pod_spec(containers=[{"name": "desktop"}])  # no image: the API server refuses
    cluster.create_pool(POOL, "DepthFirst", 2, scaling=scaling(pod_template(bad_spec)))
    cluster.wait_operator_knows(POOL, [])
    names = create_requests(cluster, 3)
    pool = cluster.wait_pool(
        POOL,
        lambda p: (
            cond_is(p, "WorkloadFailure", "True", "FailedCreate")
            and cond_is(p, "Ready", "False", "WorkloadFailure")
        ),
        "WorkloadFailure True (FailedCreate), Ready False (WorkloadFailure)",
    )
    failure = condition(pool, "WorkloadFailure")
    assert failure is not None
    assert "image" in failure["message"], failure  # the API server's words, naming the field
    event = wait_event(cluster, "HostPool", POOL, "WorkloadCreateFailed")
    assert "image" in event[2], event
    started = time.monotonic()

    # Over 15 s: a handful of tries (back-off), never more than one host, nothing lost.
    def invariant() -> str | None:
        hosts = cluster.hosts()
        if len(hosts) > 1:
            return f"{len(hosts)} hosts while the template is refused: {sorted(hosts)}"
        bad = {n: phase(r) for n, r in cluster.requests().items() if phase(r) != "Pending"}
        return f"requests not Pending: {bad}" if bad else None

    assert observe(15 - (time.monotonic() - started), invariant) == []
    tries = [
        line
        for line in operator_process.log_text().splitlines()
        if "next try in" in line and f"{ns}/{POOL}" in line
    ]
    delays = [int(m.group(1)) for line in tries if (m := NEXT_TRY.search(line))]
    assert 2 <= len(tries) <= 4, "\n".join(tries)
    # Steps of 5 and 10 s, each wait drawn between half its step and the step (jitter).
    assert 2 <= delays[0] <= 5, delays
    assert 5 <= delays[1] <= 10, delays
    assert delays == sorted(delays), delays
    assert pods(kube, ns) == {}
    assert len(cluster.hosts()) <= 1

    # Fixed: the missing workload is created at once, the requests are placed.
    good = {"containers": [{"name": "desktop", "image": IMAGE}]}
    cluster.patch(
        "HostPool", POOL, {"spec": {"scaling": {"hostTemplate": {"workload": {"spec": good}}}}}
    )
    placed = cluster.wait_assigned(names, timeout=60)
    hosts = managed(cluster)
    assert len(hosts) == 2, sorted(hosts)
    assert set(pods(kube, ns)) == set(hosts)
    workloads = pods(kube, ns)
    for obj in placed.values():
        host = host_of(obj)
        assert host is not None
        assert status(obj).get("hostAddress") == pod_ip(workloads[host])
    cluster.wait_pool(
        POOL,
        lambda p: (
            cond_is(p, "WorkloadFailure", "False", "WorkloadsCreated")
            and cond_is(p, "Ready", "True")
        ),
        "WorkloadFailure False (WorkloadsCreated) and Ready again",
    )


def test_a_kind_the_api_server_does_not_serve_is_reported(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    template = {"apiVersion": DESKTOP_API_VERSION, "kind": "NoSuchThing", "spec": {}}
    cluster.create_pool(POOL, "DepthFirst", 2, scaling=scaling(template))
    cluster.wait_operator_knows(POOL, [])
    names = create_requests(cluster, 2)
    pool = cluster.wait_pool(
        POOL,
        lambda p: (
            (
                cond_is(p, "WorkloadFailure", "True", "KindNotServed")
                or cond_is(p, "WorkloadFailure", "True", "WatchFailed")
            )
            and cond_is(p, "Ready", "False", "WorkloadFailure")
        ),
        "WorkloadFailure True (KindNotServed or WatchFailed), Ready False",
    )
    failure = condition(pool, "WorkloadFailure")
    assert failure is not None
    assert "NoSuchThing" in failure["message"], failure
    wait_all(cluster, names, lambda r: phase(r) == "Pending", "Pending")
    assert len(cluster.hosts()) <= 1
    assert all(phase(r) == "Pending" for r in cluster.requests().values())


# ---------------------------------------------------------------------------------------
# a host that never becomes Ready


def test_a_host_whose_pod_never_becomes_ready_is_counted_out_after_its_timeout(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    never = pod_template(pod_spec(nodeSelector={READY_LABEL: "never"}))
    cluster.create_pool(
        POOL, "DepthFirst", 2, scaling=scaling(never, maxHosts=2, hostReadyTimeoutSeconds=3)
    )
    cluster.wait_operator_knows(POOL, [])
    cluster.create_request("r00", POOL, "alice@corp.example")
    first = cluster.wait(lambda: sorted(managed(cluster)) or None, "a host added")[0]
    cluster.wait_host(
        first,
        lambda h: (
            cond_is(h, "WorkloadReady", "False", "StartTimeout")
            and cond_is(h, "Available", "False", "WorkloadNotReady")
        ),
        "WorkloadReady False (StartTimeout)",
        timeout=20,
    )
    wait_event(cluster, "SessionHost", first, "HostNotReady")
    # It no longer counts as capacity: another host is added for the waiting request.
    cluster.wait(lambda: len(managed(cluster)) == 2 or None, "a second host", timeout=20)
    assert phase(cluster.request("r00")) == "Pending"


def test_once_every_host_is_ready_no_request_still_says_hosts_starting(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    """A reason that changes while the previous one is being written (HostsStarting while
    the pods start, PoolSaturated once they are Ready and full) ends up written: found by
    the demo, where one of ten waiting requests kept saying HostsStarting."""
    del operator_process
    cluster.create_pool(POOL, "DepthFirst", 1, scaling=scaling(pod_template(), maxHosts=3))
    cluster.wait_operator_knows(POOL, [])
    names = [f"r{i:02d}" for i in range(12)]
    cluster.create_requests_concurrently(
        [(name, POOL, f"user{i:02d}@corp.example") for i, name in enumerate(names)]
    )

    def settled() -> list[str] | None:
        requests = cluster.requests()
        if sum(phase(requests[n]) == "Assigned" for n in names if n in requests) != 3:
            return None
        reasons = sorted(
            str(status(r).get("reason")) for r in requests.values() if phase(r) == "Pending"
        )
        return reasons if len(reasons) == 9 else None

    reasons = cluster.wait(settled, "3 assigned (maxHosts 3, limit 1) and 9 pending", 60)
    # Whatever they said meanwhile, the waiting requests end up saying why they wait now.
    cluster.wait(
        lambda: (
            all(
                status(r).get("reason") == "PoolSaturated"
                for r in cluster.requests().values()
                if phase(r) == "Pending"
            )
            or None
        ),
        f"every pending request saying PoolSaturated (said {reasons})",
        15,
    )


# ---------------------------------------------------------------------------------------
# 7. a node removed under a pod with sessions


def fake_node(name: str, labels: Mapping[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok-extra", **labels},
        },
        "spec": {
            "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
        },
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
    }


def test_a_node_removed_under_a_pod_with_sessions(
    kube: Kube, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    plane = need_control_plane(kube, "removing a fake node")
    ns = cluster.namespace
    group = unique_name("nodes", max_length=20)
    label = {"hostpool-e2e/node-group": group}
    first = unique_name("kwok-wl-a", max_length=30)
    second = unique_name("kwok-wl-b", max_length=30)
    made: list[str] = []

    def add_node(name: str) -> None:
        kube.call("POST", "/api/v1/nodes", body=fake_node(name, label))
        made.append(name)
        wait_for(
            lambda: is_ready(kube.call("GET", f"/api/v1/nodes/{name}")),
            60,
            what=f"node {name} Ready",
        )

    try:
        add_node(first)
        template = pod_template(pod_spec(nodeSelector=label))
        cluster.create_pool(POOL, "DepthFirst", 2, scaling=scaling(template))
        cluster.wait_operator_knows(POOL, [])
        names = create_requests(cluster, 2)
        placed = cluster.wait_assigned(names, timeout=60)
        (host,) = set(assigned_per_host(placed))
        pod = get_pod(kube, ns, host)
        assert pod is not None
        assert pod["spec"]["nodeName"] == first
        old_uid = pod["metadata"]["uid"]
        add_node(second)  # where the new pod can go
        plane.remove_node(first)
        # Pod GC deletes the pods of a node that is gone after a quarantine of 40 s.
        wait_all(cluster, names, host_lost, "Failed, HostLost", timeout=150)
        wait_event(cluster, "SessionHost", host, "HostLost")

        def recreated() -> Obj | None:
            now = get_pod(kube, ns, host)
            fresh = now is not None and now["metadata"]["uid"] != old_uid
            return now if fresh and is_ready(now) else None

        pod = cluster.wait(recreated, f"pod {host} created again and Ready", timeout=60)
        assert pod["spec"]["nodeName"] == second
        cluster.wait_host(host, lambda h: cond_is(h, "Available", "True"), "Available again")
        cluster.create_request("after", POOL, "late-user@corp.example")
        after = cluster.wait_request("after", phase_="Assigned", host=host)
        assert status(after).get("hostAddress") == pod_ip(pod)
    finally:
        for name in made:
            kube.request("DELETE", f"/api/v1/nodes/{name}")
