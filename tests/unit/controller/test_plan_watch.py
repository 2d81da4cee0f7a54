"""The ScalingPlan watch rebinds pools only when a plan's spec changes (its generation), not
on every new resourceVersion: the operator's own status write of a plan changes only its
status, and used to rebind and recompute every pool the plan names at each write.

The watch is fed real ScalingPlan bodies; its client is never called here (nothing is
listed or written), so it points nowhere."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import kopf

from hostpool_operator.controller.plan_watch import PlanWatch
from hostpool_operator.engine.records import PlanRecord
from hostpool_operator.kube.client import KubeClient
from hostpool_operator.kube.sinks import EventSink
from hostpool_operator.scaling.plan_binding import PoolReport
from support import builders

NS = "ns"


class Events(EventSink):
    def __init__(self) -> None:
        self.posted: list[str] = []

    def post(
        self, involved: Any, kind: str, reason: str, message: str, type_: str, **_: Any
    ) -> None:
        self.posted.append(reason)


def plan_obj(*, rv: int, generation: int, **status: Any) -> dict[str, Any]:
    obj = builders.manifest("ScalingPlan", "office", builders.plan_spec("finance"), namespace=NS)
    obj["metadata"].update(uid="plan-uid", resourceVersion=str(rv), generation=generation)
    obj["metadata"]["creationTimestamp"] = "2026-12-01T08:00:00Z"
    if status:
        obj["status"] = status
    return obj


def watch() -> tuple[PlanWatch, list[tuple[str, str, PlanRecord | None]]]:
    bound: list[tuple[str, str, PlanRecord | None]] = []

    def spawn(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        raise AssertionError("nothing is spawned by an event")

    plans = PlanWatch(
        KubeClient(kopf.ConnectionInfo(server="https://127.0.0.1:9")),
        Events(),
        supervise=lambda *_: spawn(None),  # type: ignore[arg-type]
        status_interval=1.0,
        set_pool_plan=lambda ns, pool, plan: bound.append((ns, pool, plan)),
        pool_report=lambda ns, pool: PoolReport(exists=True),
    )
    return plans, bound


def test_a_status_only_change_rebinds_nothing() -> None:
    plans, bound = watch()
    plans.on_event("ADDED", plan_obj(rv=10, generation=1))
    assert [(ns, pool) for ns, pool, _ in bound] == [(NS, "finance")]
    plans.dirty.clear()
    # The operator's own status write comes back through the watch: a new resourceVersion.
    plans.on_event("MODIFIED", plan_obj(rv=11, generation=1, phase="Peak"))
    assert len(bound) == 1, "a status write re-bound the pool"
    assert plans.dirty == set()
    assert plans.plans[(NS, "office")].status == {"phase": "Peak"}  # the newest is kept


def test_a_spec_change_rebinds_the_pools() -> None:
    plans, bound = watch()
    plans.on_event("ADDED", plan_obj(rv=10, generation=1))
    plans.on_event("MODIFIED", plan_obj(rv=12, generation=2))
    assert len(bound) == 2
    assert bound[-1][2] is not None
    assert bound[-1][2].meta.generation == 2
    assert (NS, "office") in plans.dirty
