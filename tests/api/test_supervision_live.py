"""A supervised task forced to die is started again and counted, and the pool it serves goes
on placing (real API server, the operator's controller in this process, so the test can make
one of its tasks fail).

Before, a pool's loop that raised outside its pass (its timers) ended for good: the pool
placed nothing more while the process looked healthy.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from hostpool_operator.controller.manager import Controller
from hostpool_operator.controller.metrics import PrometheusMetrics
from hostpool_operator.controller.settings import ControllerSettings
from support import builders
from support.client_helpers import operator_client
from support.kube import Kube, until


def phase(kube: Kube, namespace: str, name: str) -> str | None:
    status = kube.get("SessionRequest", namespace, name).get("status") or {}
    value = status.get("phase")
    return str(value) if value is not None else None


def test_a_pool_loop_forced_to_die_is_restarted_counted_and_places_again(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.create(namespace, builders.pool("finance", "DepthFirst", 5))
    kube.create(namespace, builders.host("rds-01", "finance"))
    kube.create(namespace, builders.request("before", "finance", user="alice@corp"))
    metrics = PrometheusMetrics(CollectorRegistry())

    async def run() -> tuple[float, list[str], str | None]:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            controller = Controller(client, ControllerSettings(status_interval=0.2), metrics)
            try:
                await controller.initial_sync([namespace])
                await until(
                    lambda: phase(kube, namespace, "before") == "Assigned", 60, in_thread=True
                )
                worker = controller.pools[(namespace, "finance")]
                failures = {"left": 5}
                real = worker._next_timer

                def broken() -> Any:
                    if failures["left"] > 0:
                        failures["left"] -= 1
                        raise RuntimeError("forced to die")
                    return real()

                monkeypatch.setattr(worker, "_next_timer", broken)
                worker.wake()
                # Five failures in a row: the liveness probe would now say so.
                task = f"pool {namespace}/finance"
                await until(lambda: controller.supervisor.failures(task) >= 5, 60, in_thread=True)
                failing = controller.supervisor.problems()
                await until(lambda: failures["left"] == 0, 60, in_thread=True)
                await asyncio.to_thread(
                    kube.create, namespace, builders.request("after", "finance", user="bob@corp")
                )
                await until(
                    lambda: phase(kube, namespace, "after") == "Assigned", 30, in_thread=True
                )
                restarts = metrics.registry.get_sample_value(
                    "hostpool_task_restarts_total", {"task": "pool"}
                )
                return restarts or 0.0, failing, phase(kube, namespace, "after")
            finally:
                await controller.stop()

    restarts, failing, placed = asyncio.run(run())
    assert restarts == 5
    assert len(failing) == 1
    assert "pool " in failing[0]
    assert "RuntimeError: forced to die" in failing[0]
    assert placed == "Assigned"


def test_a_request_the_controller_cannot_take_is_skipped_and_later_ones_are_placed(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's own handler made to raise on one crafted request: that request is
    skipped with a Warning Event naming it and counted, the watch keeps running, and requests
    created later are placed. Before, the exception ended the request watch: nothing after
    it was ever placed."""
    kube.create(namespace, builders.pool("finance", "DepthFirst", 5))
    kube.create(namespace, builders.host("rds-01", "finance"))
    kube.create(namespace, builders.request("poison", "finance", user="mallory@corp"))
    kube.create(namespace, builders.request("first", "finance", user="alice@corp"))
    metrics = PrometheusMetrics(CollectorRegistry())

    async def run() -> float:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            controller = Controller(client, ControllerSettings(status_interval=0.2), metrics)
            real = controller.on_request_event

            def handler(kind: str | None, obj: Any) -> None:
                if obj["metadata"]["name"] == "poison":
                    raise KeyError("a crafted object")
                real(kind, obj)

            # Before the informers are made: they hold the handler from then on.
            monkeypatch.setattr(controller, "on_request_event", handler)
            try:
                await controller.initial_sync([namespace])
                await until(
                    lambda: phase(kube, namespace, "first") == "Assigned", 60, in_thread=True
                )
                kube.create(namespace, builders.request("after", "finance", user="bob@corp"))
                await until(
                    lambda: phase(kube, namespace, "after") == "Assigned", 60, in_thread=True
                )
                await until(lambda: skipped_events(kube, namespace) > 0, 60, in_thread=True)
                value = metrics.registry.get_sample_value(
                    "hostpool_skipped_objects_total", {"kind": "SessionRequest"}
                )
                return value or 0.0
            finally:
                await controller.stop()

    skipped = asyncio.run(run())
    assert skipped >= 1
    assert phase(kube, namespace, "poison") is None  # never placed, never written


def skipped_events(kube: Kube, namespace: str) -> int:
    events = kube.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return sum(
        1
        for e in events
        if e["reason"] == "ObjectSkipped" and e["involvedObject"].get("name") == "poison"
    )
