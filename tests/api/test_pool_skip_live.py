"""A HostPool the operator cannot take is skipped and counted like a skipped host, and the
pools next to it are placed, changed and deleted as before (real API server, the
operator's controller in this process).

HostPools used to come from kopf's event handler: a pool whose handling raised was only a
line in kopf's log, uncounted and without an Event, and the initial LIST raised out of the
start-up. Now pools go through the operator's own informer, as hosts and requests do.

The operator's models are lenient on purpose (an invalid spec is a condition on the pool, not
an exception), so no pool the API server accepts fails today: reading one pool by name is
made to fail here, standing in for whatever a future version could not read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from hostpool_operator.controller.manager import Controller
from hostpool_operator.controller.metrics import PrometheusMetrics
from hostpool_operator.controller.settings import ControllerSettings
from hostpool_operator.engine.records import PoolRecord
from support import builders
from support.client_helpers import operator_client
from support.kube import Kube, until

POISON = "poison"
SKIPPED = "hostpool_skipped_objects_total"


def phase(kube: Kube, namespace: str, name: str) -> str | None:
    status = kube.get("SessionRequest", namespace, name).get("status") or {}
    value = status.get("phase")
    return str(value) if value is not None else None


def test_a_pool_that_cannot_be_read_is_skipped_and_counted_and_its_neighbours_are_placed(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.create(namespace, builders.pool("finance", "DepthFirst", 5))
    kube.create(namespace, builders.pool(POISON, "DepthFirst", 5))
    kube.create(namespace, builders.host("rds-01", "finance"))
    kube.create(namespace, builders.request("before", "finance", user="alice@corp"))
    read = PoolRecord.of

    def unreadable(obj: Mapping[str, Any]) -> PoolRecord:
        if obj["metadata"]["name"] == POISON:
            raise TypeError("a pool this operator cannot read")
        return read(obj)

    monkeypatch.setattr(PoolRecord, "of", unreadable)
    metrics = PrometheusMetrics(CollectorRegistry())

    def skipped(kind: str = "HostPool") -> float:
        return metrics.registry.get_sample_value(SKIPPED, {"kind": kind}) or 0.0

    async def run() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            controller = Controller(client, ControllerSettings(status_interval=0.2), metrics)
            try:
                await controller.initial_sync([namespace])
                seen["listed"] = skipped()
                seen["poison worker"] = (namespace, POISON) in controller.pools
                await until(lambda: phase(kube, namespace, "before") == "Assigned")
                # Through the watch: the poisoned pool changes (skipped again), a pool is
                # created and placed in, a pool's spec changes, a pool is deleted.
                await asyncio.to_thread(
                    kube.merge_patch,
                    "HostPool",
                    namespace,
                    POISON,
                    {"metadata": {"labels": {"touched": "yes"}}},
                )
                await until(lambda: skipped() >= seen["listed"] + 1)
                for obj in (
                    builders.pool("sales", "DepthFirst", 5),
                    builders.host("rds-02", "sales"),
                    builders.request("after", "sales", user="bob@corp"),
                ):
                    await asyncio.to_thread(kube.create, namespace, obj)
                await until(lambda: phase(kube, namespace, "after") == "Assigned", 30)
                await asyncio.to_thread(
                    kube.merge_patch,
                    "HostPool",
                    namespace,
                    "finance",
                    {"spec": {"loadBalancer": {"maxSessionLimit": 7}}},
                )
                await until(lambda: pool_generation(controller, namespace, "finance") == 2)
                await asyncio.to_thread(kube.delete, "HostPool", namespace, "sales")
                await until(lambda: pool_generation(controller, namespace, "sales") is None)
                seen["watched"] = skipped()
                seen["hosts skipped"] = skipped("SessionHost")
            finally:
                await controller.stop()
        return seen

    seen = asyncio.run(run())
    assert seen["listed"] == 1  # the LIST's copy
    assert not seen["poison worker"]  # skipped whole: no worker without its pool
    assert seen["watched"] == 2  # and the watch's, counted under the same metric
    assert seen["hosts skipped"] == 0
    events = kube.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    ours = [e for e in events if e["involvedObject"].get("name") == POISON]
    assert [e["reason"] for e in ours] == ["ObjectSkipped"], ours
    assert ours[0]["involvedObject"]["kind"] == "HostPool"
    assert "TypeError: a pool this operator cannot read" in ours[0]["message"]


def pool_generation(controller: Controller, namespace: str, name: str) -> int | None:
    worker = controller.pools.get((namespace, name))
    pool = worker.state.pool if worker is not None else None
    return pool.meta.generation if pool is not None else None
