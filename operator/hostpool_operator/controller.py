"""The placement controller: routes watch events to one worker per pool and owns every task.

Gather → decide → apply, per pool (see ``pool_worker``): the initial LIST and the watches
(pools from kopf's handler, hosts and requests from the operator's own informers) feed the
workers; each worker decides with the pure modules (``pool_state``, ``placement``,
``scaling``, ``status``) and applies with its writers. Everything spawned goes through
:meth:`Controller.spawn`, so no task is lost and a failing one is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from .events import ApiEvents
from .k8s import Informer, KubeClient
from .pool_worker import PoolWorker
from .ports import MetricsSink
from .records import HostRecord, Meta, PoolRecord, RequestRecord, newer_or_same
from .services import HOSTS, POOLS, REQUESTS, Services
from .settings import ControllerSettings
from .writeslots import WriteSlots

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)


class Controller:
    """All pools of the operator's namespaces, fed by watch events."""

    def __init__(
        self,
        client: KubeClient,
        settings: ControllerSettings | None = None,
        metrics: MetricsSink | None = None,
    ) -> None:
        self.client = client
        self.settings = settings or ControllerSettings()
        self.metrics = metrics or MetricsSink()
        self.services = Services(
            client=client,
            settings=self.settings,
            metrics=self.metrics,
            events=ApiEvents(client, self.spawn, self.settings.event_interval),
            write_slots=WriteSlots(self.settings.write_concurrency),
            spawn=self.spawn,
            next_seq=self._next_seq,
        )
        self.pools: dict[Key, PoolWorker] = {}
        self.host_pool: dict[Key, str] = {}  # a host's pool (poolRef is immutable, but be sure)
        self.request_pool: dict[Key, str] = {}
        self._seq = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self.informers: list[Informer] = []
        self.started = False

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def worker(self, namespace: str, pool: str) -> PoolWorker:
        key = (namespace, pool)
        worker = self.pools.get(key)
        if worker is None:
            worker = self.pools[key] = PoolWorker(self.services, self, namespace, pool)
            if self.started:
                worker.start()
        return worker

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task the controller keeps, logs if it fails, and cancels at stop."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    # -------------------------------------------------------------- start / stop

    async def initial_sync(self, namespaces: list[str] | None) -> None:
        """LIST everything before the first decision, so no existing session is missed; then
        keep hosts and requests current with the operator's own informers (pools come from
        kopf's watch, see handlers)."""
        scopes: list[str | None] = list(namespaces) if namespaces else [None]
        for scope in scopes:
            listing = await self.client.list(POOLS, scope)
            for obj in listing["items"]:
                self.on_pool_event("ADDED", obj)
        self.informers = [
            Informer(self.client, plural, scope, handler)
            for plural, handler in ((HOSTS, self.on_host_event), (REQUESTS, self.on_request_event))
            for scope in scopes
        ]
        for informer in self.informers:
            await informer.list_once()
        self.start()
        for informer in self.informers:
            self.spawn(informer.run())

    def start(self) -> None:
        self.started = True
        for worker in self.pools.values():
            worker.start()

    async def stop(self) -> None:
        for worker in list(self.pools.values()):
            await worker.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -------------------------------------------------------------- events

    def on_pool_event(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        meta = Meta.of(obj)
        worker = self.worker(meta.namespace, meta.name)
        if kind == "DELETED":
            worker.on_pool(None)
            if worker.state.requests:
                log.info("%s/%s: pool deleted; its pending requests wait for it", *meta_key(meta))
            self._forget_if_unused(worker)
            return
        record = PoolRecord.of(obj)
        known = worker.state.pool
        if (
            known is not None
            and known.meta.uid == record.meta.uid
            and not newer_or_same(record.meta.resource_version, known.meta.resource_version)
        ):
            return
        worker.on_pool(record)

    def on_host_event(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        record = HostRecord.of(obj)
        key = (record.meta.namespace, record.meta.name)
        old_pool = self.host_pool.get(key)
        if kind == "DELETED":
            self.host_pool.pop(key, None)
            if old_pool is not None:
                self._host_left(key, old_pool)
            return
        if old_pool is not None and old_pool != record.pool:
            self._host_left(key, old_pool)
        worker = self.worker(key[0], record.pool)
        existing = worker.state.hosts.get(key[1])
        if (
            existing is not None
            and existing.meta.uid == record.meta.uid
            and not newer_or_same(record.meta.resource_version, existing.meta.resource_version)
        ):
            return
        self.host_pool[key] = record.pool
        worker.on_host(record)

    def on_request_event(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        record = RequestRecord.of(obj)
        key = (record.meta.namespace, record.meta.name)
        old_pool = self.request_pool.get(key)
        if kind == "DELETED":
            self.request_pool.pop(key, None)
            if old_pool is not None:
                self._request_left(key, old_pool)
            return
        if old_pool is not None and old_pool != record.pool:
            self._request_left(key, old_pool)
        self.request_pool[key] = record.pool
        self.worker(key[0], record.pool).on_request(record)

    def _host_left(self, key: Key, pool: str) -> None:
        worker = self.worker(key[0], pool)
        worker.on_host_deleted(key[1])
        self._forget_if_unused(worker)

    def _request_left(self, key: Key, pool: str) -> None:
        worker = self.worker(key[0], pool)
        worker.on_request_deleted(key[1])
        self._forget_if_unused(worker)

    def _forget_if_unused(self, worker: PoolWorker) -> None:
        """A pool name nothing refers to any more (no pool, host or request) loses its
        worker and its metric series, so names that come and go never pile up."""
        key = (worker.namespace, worker.name)
        if self.pools.get(key) is not worker or not worker.state.forgotten:
            return
        del self.pools[key]
        self.metrics.forget_pool(*key)
        self.spawn(worker.stop())


def meta_key(meta: Meta) -> Key:
    return (meta.namespace, meta.name)
