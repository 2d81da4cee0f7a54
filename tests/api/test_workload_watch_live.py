"""The operator watches only the workloads hosts stand on (real API server, the operator's
controller in this process so its memory can be read).

Before: one informer per kind in use kept every object of the kind in the operator's
namespaces, each with its whole status (every Pod, whoever made it), and never let a kind
go. Now the operator's own workloads are watched by their label, a user's own workload by
its name; unrelated Pods are never kept, and a kind nobody uses any more is dropped.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hostpool_operator.api.vocabulary import HOST_LABEL, MANAGED_LABEL, MANAGER, POOL_LABEL
from hostpool_operator.controller.manager import Controller
from support import builders
from support.client_helpers import operator_client
from support.kube import Kube, until, wait_default_service_account

POD = {
    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
    "terminationGracePeriodSeconds": 0,
    "containers": [{"name": "desktop", "image": "registry.k8s.io/pause:3.10"}],
}


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": POD}  # fmt: skip


def test_only_the_workloads_hosts_stand_on_are_kept_and_an_unused_kind_goes(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    wait_default_service_account(kube, namespace)
    ours = {MANAGED_LABEL: MANAGER, POOL_LABEL: "finance", HOST_LABEL: "finance-abc"}
    kube.call("POST", pods, body=pod("finance-abc", ours))  # as the operator makes them
    kube.call("POST", pods, body=pod("users-own"))  # a user's, referred to by a user's host
    for i in range(5):
        kube.call("POST", pods, body=pod(f"unrelated-{i}"))  # nobody's business here
    ref = {"apiVersion": "v1", "kind": "Pod"}
    kube.create(namespace, builders.pool("finance", "DepthFirst", 2))
    managed = builders.host("finance-abc", "finance", workloadRef={**ref, "name": "finance-abc"})
    managed["metadata"]["labels"] = {MANAGED_LABEL: MANAGER, POOL_LABEL: "finance"}
    kube.create(namespace, managed)
    kube.create(
        namespace, builders.host("desk", "finance", workloadRef={**ref, "name": "users-own"})
    )

    async def run() -> tuple[set[str], set[str], set[str], int]:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            controller = Controller(client)
            try:
                await controller.initial_sync([namespace])
                cached = {key[3] for key in controller.workloads.cache}
                # The user's host goes: so does the watch on its workload, and the record.
                await asyncio.to_thread(kube.delete, "SessionHost", namespace, "desk")
                await until(lambda: "users-own" not in names(controller))
                after_user = names(controller)
                # The operator's host goes too: nothing uses Pods any more.
                await asyncio.to_thread(kube.delete, "SessionHost", namespace, "finance-abc")
                await until(lambda: not controller.workloads.kinds)
                return cached, after_user, names(controller), len(controller.workloads.kinds)
            finally:
                await controller.stop()

    cached, after_user, at_end, kinds = asyncio.run(run())
    assert cached == {"finance-abc", "users-own"}, cached
    assert after_user == {"finance-abc"}
    assert at_end == set()
    assert kinds == 0


def names(controller: Controller) -> set[str]:
    return {key[3] for key in controller.workloads.cache}
