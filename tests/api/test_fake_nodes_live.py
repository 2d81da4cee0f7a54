"""Pods on the suite's control plane: kube-scheduler places them on kwok's fake nodes, kwok
reports them Running and Ready with an IP, and a pod or a node can be broken on purpose.

This is what workload-backed hosts stand on: a Pod is the machine behind a SessionHost.
Only the suite's own control plane has fake nodes; against a cluster of
``HOSTPOOL_TEST_KUBECONFIG`` (kind) real kubelets run the pods and these tests are skipped.
"""

from __future__ import annotations

import time
from typing import Any

from support.controlplane import DEFAULT_FAKE_NODES, ControlPlane
from support.kube import ApiError, Kube, need_control_plane, unique_name, wait_for

Obj = dict[str, Any]


def _control_plane(kube: Kube) -> ControlPlane:
    # With kind, real kubelets run the pods: fake nodes exist only on the suite's own.
    return need_control_plane(kube, "acting on kwok's fake nodes")


def pod(name: str, node_selector: Obj | None = None) -> Obj:
    """A pod that tolerates the fake nodes' taint and never really runs anything."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": node_selector or {"type": "kwok"},
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [{"name": "desktop", "image": "example.invalid/desktop:1"}],
        },
    }


def get_pod(kube: Kube, namespace: str, name: str) -> Obj:
    result: Obj = kube.call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return result


def ready(obj: Obj) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def create_pod(kube: Kube, namespace: str, body: Obj) -> None:
    kube.call("POST", f"/api/v1/namespaces/{namespace}/pods", body=body)


def ready_pod(kube: Kube, namespace: str, name: str) -> Obj:
    def check() -> Obj | None:
        obj = get_pod(kube, namespace, name)
        return obj if ready(obj) else None

    return wait_for(
        check,
        timeout=60,
        what=f"pod {name} scheduled and Ready",
        show=lambda: str(get_pod(kube, namespace, name).get("status")),
    )


def test_the_fake_nodes_are_ready_and_schedulable(kube: Kube) -> None:
    _control_plane(kube)
    nodes = kube.call("GET", "/api/v1/nodes", query={"labelSelector": "type=kwok"})["items"]
    assert len(nodes) >= DEFAULT_FAKE_NODES
    for node in nodes:
        assert ready(node), node["metadata"]["name"]
        taints = {t["key"] for t in node["spec"].get("taints") or []}
        assert "node.kubernetes.io/not-ready" not in taints
        assert "kwok.x-k8s.io/node" in taints  # pods must opt in


def test_a_pod_is_scheduled_to_a_fake_node_and_becomes_ready(kube: Kube, namespace: str) -> None:
    _control_plane(kube)
    create_pod(kube, namespace, pod("desk-1"))
    obj = ready_pod(kube, namespace, "desk-1")
    assert obj["spec"]["nodeName"].startswith("kwok-node-")
    assert obj["status"]["phase"] == "Running"
    assert obj["status"].get("podIP")


def test_a_pod_without_the_toleration_is_not_scheduled(kube: Kube, namespace: str) -> None:
    _control_plane(kube)
    body = pod("untolerated")
    del body["spec"]["tolerations"]
    create_pod(kube, namespace, body)

    def unschedulable() -> bool:
        conditions = (get_pod(kube, namespace, "untolerated").get("status") or {}).get(
            "conditions"
        ) or []
        return any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in conditions
        )

    wait_for(unschedulable, timeout=60, what="the scheduler to refuse the pod")
    assert not get_pod(kube, namespace, "untolerated")["spec"].get("nodeName")


def test_a_pod_failed_on_purpose_stays_failed(kube: Kube, namespace: str) -> None:
    plane = _control_plane(kube)
    create_pod(kube, namespace, pod("desk-2"))
    ready_pod(kube, namespace, "desk-2")
    plane.fail_pod(namespace, "desk-2")
    obj = get_pod(kube, namespace, "desk-2")
    assert obj["status"]["phase"] == "Failed"
    assert not ready(obj)
    # kwok must not bring it back (it would hide a lost host from the operator).
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        obj = get_pod(kube, namespace, "desk-2")
        assert obj["status"]["phase"] == "Failed"
        assert not ready(obj)
        time.sleep(0.5)


def test_removing_a_node_removes_its_pods(kube: Kube, namespace: str) -> None:
    plane = _control_plane(kube)
    node = unique_name("kwok-extra", max_length=30)
    # A node of this test's own (the shared ones stay), like the ones cluster.sh makes.
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": node, "type": "kwok-extra"},
        },
        "spec": {
            "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
        },
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
    }
    kube.call("POST", "/api/v1/nodes", body=body)
    try:
        wait_for(
            lambda: ready(kube.call("GET", f"/api/v1/nodes/{node}")),
            timeout=60,
            what=f"node {node} Ready",
        )
        create_pod(kube, namespace, pod("desk-3", {"kubernetes.io/hostname": node}))
        assert ready_pod(kube, namespace, "desk-3")["spec"]["nodeName"] == node
        plane.remove_node(node)

        def pod_gone() -> bool:
            try:
                get_pod(kube, namespace, "desk-3")
            except ApiError as error:
                return error.status == 404
            return False

        # Pod GC deletes the pods of a node that is gone after a quarantine of 40 s.
        wait_for(pod_gone, timeout=150, interval=1.0, what="the removed node's pod deleted")
    finally:
        kube.request("DELETE", f"/api/v1/nodes/{node}")
