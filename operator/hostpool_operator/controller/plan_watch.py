"""Every ScalingPlan of the operator's namespaces: the watch, which pool follows which plan,
and each plan's status and Events.

The controller owns one :class:`PlanWatch`. Plans are watched with the operator's own
informer; on each change the pools of the namespace are bound again (``plan_binding``) and
every pool whose plan changed is told (``set_pool_plan``). The per-pool figures come from
the pools' workers (``pool_report``); a plan's status is written at most once per status
interval, only when it changed. A cluster without the ScalingPlan CRD (an older install)
keeps working: the watch retries and says why in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ..api.vocabulary import PLANS
from ..engine.records import PlanRecord, newer_or_same
from ..engine.status import same_status
from ..kube.backoff import Backoff
from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError
from ..kube.informer import Informer, SkipHandler
from ..kube.sinks import EventSink
from ..scaling.plan_binding import PoolReport, bind, plan_status
from ..scaling.plans import next_phase_start
from .deps import Supervise

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)


class PlanWatch:
    """Plans, the pool -> plan binding, and the plans' status writes."""

    def __init__(
        self,
        client: KubeClient,
        events: EventSink,
        *,
        supervise: Supervise,
        on_skip: SkipHandler | None = None,
        status_interval: float,
        set_pool_plan: Callable[[str, str, PlanRecord | None], None],
        pool_report: Callable[[str, str], PoolReport],
    ) -> None:
        self.client = client
        self.events = events
        self.supervise = supervise
        self.on_skip = on_skip
        self.status_interval = status_interval
        self._set_pool_plan = set_pool_plan
        self._pool_report = pool_report
        self.plans: dict[Key, PlanRecord] = {}
        self.bound: dict[Key, PlanRecord] = {}  # (namespace, pool) -> plan
        self.informers: list[Informer] = []
        self.dirty: set[Key] = set()
        self.written: dict[Key, dict[str, Any]] = {}
        self.said: dict[Key, tuple[str, str]] = {}  # the problem last posted as an Event
        self._wake = asyncio.Event()
        self._backoff = Backoff(first=1.0, cap=60.0)

    # -------------------------------------------------------------- start

    async def start(self, scopes: list[str | None]) -> None:
        """List the plans (before the first placement, so pools start with their phase's
        algorithm), then watch them (their statuses are written once the instance leads:
        :meth:`start_writing`)."""
        self.informers = [
            Informer(self.client, PLANS, scope, self.on_event, on_skip=self.on_skip)
            for scope in scopes
        ]
        for informer in self.informers:
            try:
                await informer.list_once()
            except (ApiError, ApiTransportError) as error:
                log.warning("scalingplans cannot be listed (%s); retrying in the background", error)
        for informer in self.informers:
            self.supervise(
                f"informer {PLANS} {informer.namespace or '*'}", f"informer/{PLANS}", informer.run
            )

    def start_writing(self) -> None:
        """Write the plans' statuses from now on (the instance leads; a standby writes none)."""
        self.supervise("plan status writer", "plan_status", self._write_loop)

    def plan_for(self, namespace: str, pool: str) -> PlanRecord | None:
        return self.bound.get((namespace, pool))

    # -------------------------------------------------------------- events

    def on_event(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        record = PlanRecord.of(obj)
        key = (record.meta.namespace, record.meta.name)
        if kind == "DELETED":
            self.plans.pop(key, None)
            self.written.pop(key, None)
            self.said.pop(key, None)
            self.dirty.discard(key)
        else:
            known = self.plans.get(key)
            if (
                known is not None
                and known.meta.uid == record.meta.uid
                and not newer_or_same(record.meta.resource_version, known.meta.resource_version)
            ):
                return
            self.plans[key] = record
            if (
                known is not None
                and known.meta.uid == record.meta.uid
                and known.meta.generation == record.meta.generation
            ):
                # Status or metadata only (the operator's own status write, mostly): the
                # spec the pools follow is the same, so nothing is bound or decided again.
                return
            self.mark(key)
            if record.spec_error:
                self.events.post(
                    record.body,
                    "ScalingPlan",
                    "InvalidSpec",
                    record.spec_error,
                    "Warning",
                    once_per=("plan", *key, "InvalidSpec"),
                )
        self.rebind(key[0])

    def rebind(self, namespace: str) -> None:
        """Bind the namespace's pools again; tell each pool whose plan changed."""
        bound = bind(plan for (ns, _), plan in self.plans.items() if ns == namespace)
        pools = {pool for (ns, pool) in self.bound if ns == namespace} | set(bound)
        for pool in sorted(pools):
            key = (namespace, pool)
            old = self.bound.get(key)
            new = bound.get(pool)
            if new is None:
                self.bound.pop(key, None)
            else:
                self.bound[key] = new
            if old is not new:
                self._set_pool_plan(namespace, pool, new)
        for key in self.plans:
            if key[0] == namespace:
                self.mark(key)

    def pool_changed(self, namespace: str, pool: str) -> None:
        """A pool appeared, went or changed: the plans naming it say so."""
        for key, plan in self.plans.items():
            if key[0] == namespace and pool in plan.pools:
                self.mark(key)

    def mark(self, key: Key) -> None:
        self.dirty.add(key)
        self._wake.set()

    # -------------------------------------------------------------- status

    def _next_phase(self, now: datetime) -> float | None:
        """Seconds until some plan's phase changes (its status says the phase)."""
        starts = []
        for plan in self.plans.values():
            if plan.spec is None:
                continue
            with contextlib.suppress(ValueError):
                start = next_phase_start(plan.spec, now)
                if start is not None:
                    starts.append((start - now).total_seconds())
        return max(0.0, min(starts)) + 0.05 if starts else None

    async def _write_loop(self) -> None:
        while True:
            timeout = self._next_phase(datetime.now(UTC))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancel
                    await self._wake.wait()
            if timeout is not None and not self._wake.is_set():
                self.dirty.update(self.plans)  # a phase began
            self._wake.clear()
            await asyncio.sleep(self.status_interval)  # changes come in bursts
            dirty, self.dirty = self.dirty, set()
            failed = False
            for key in sorted(dirty):
                try:
                    failed |= not await self._write(key)
                except asyncio.CancelledError:
                    raise
                except Exception:  # never let one plan stop the others
                    log.exception("%s/%s: plan status write failed", *key)
                    self.dirty.add(key)
                    failed = True
            if failed:
                await asyncio.sleep(self._backoff.next())  # refused or unanswered: wait longer
            else:
                self._backoff.reset()

    def status_of(self, key: Key, now: datetime) -> dict[str, Any] | None:
        plan = self.plans.get(key)
        if plan is None:
            return None
        namespace = key[0]
        bound = {pool: p for (ns, pool), p in self.bound.items() if ns == namespace}
        reports = {pool: self._pool_report(namespace, pool) for pool in plan.pools}
        return plan_status(plan, bound, reports, now)

    async def _write(self, key: Key) -> bool:
        """Write the plan's status if it changed. False when the write failed (it is marked
        to be written again)."""
        plan = self.plans.get(key)
        status = self.status_of(key, datetime.now(UTC))
        if plan is None or status is None:
            return True
        self._say(key, plan, status)
        previous = self.written.get(key)
        if previous is not None and same_status(previous, status):
            return True
        try:
            await self.client.patch_status(PLANS, key[0], key[1], status)
        except ApiError as error:
            if error.not_found:
                return True
            log.warning("%s/%s: plan status: %s", *key, error)
            self.mark(key)
            return False
        except ApiTransportError as error:
            log.warning("%s/%s: plan status: %s", *key, error)
            self.mark(key)
            return False
        self.written[key] = status
        # The next status merges its conditions with these (lastTransitionTime); a new
        # record, not a change to the one the pools were handed.
        current = self.plans.get(key)
        if current is not None and current.meta.uid == plan.meta.uid:
            self.plans[key] = dataclasses.replace(current, status={**current.status, **status})
        return True

    def _say(self, key: Key, plan: PlanRecord, status: Mapping[str, Any]) -> None:
        """A Warning Event when the plan's Ready condition names a new problem."""
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        if ready is None:
            return
        said = (str(ready.get("reason")), str(ready.get("message")))
        if ready.get("status") == "True" or self.said.get(key) == said:
            if ready.get("status") == "True":
                self.said.pop(key, None)
            return
        self.said[key] = said
        log.warning("%s/%s: %s", *key, said[1])
        self.events.post(plan.body, "ScalingPlan", said[0], said[1], "Warning")
