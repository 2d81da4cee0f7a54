"""The placement controller: routes watch events to one worker per pool and owns every task.

Gather → decide → apply, per pool (see ``controller.pool.worker``): the operator's own
informers (pools, hosts, requests, plans, workloads: a LIST, then a watch) feed the workers;
each worker decides with the pure modules (``pool_state``, ``placement``, ``scaling``,
``status``) and applies with its writers. Everything spawned goes through
:meth:`Controller.spawn`, so no task is lost and a failing one is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any

from ..api import WorkloadRef
from ..api.vocabulary import HOSTS, POOLS, REQUESTS
from ..engine.records import (
    HostRecord,
    Meta,
    PlanRecord,
    PoolRecord,
    RequestRecord,
    Tombstones,
    newer_or_same,
)
from ..engine.workloads import KindKey, WorkloadKey, WorkloadRecord, kind_key, workload_key
from ..kube.client import KubeClient
from ..kube.informer import Informer
from ..kube.recorder import ApiEvents
from ..kube.sinks import MetricsSink
from ..kube.writeslots import WriteSlots
from ..scaling.plan_binding import PoolReport
from .deps import Deps
from .plan_watch import PlanWatch
from .pool.worker import PoolWorker
from .settings import ControllerSettings
from .supervisor import Supervisor
from .workload_watch import WorkloadWatch

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
        self.supervisor = Supervisor(self.metrics, self.spawn)
        self.workloads = WorkloadWatch(
            client,
            supervise=self.supervisor.supervise,
            on_skip=self.on_skipped,
            on_event=self.on_workload_event,
            on_synced=self.on_workload_kind_synced,
            on_named_synced=self.on_named_workload_synced,
            on_error=self.on_workload_kind_error,
        )
        self.events = ApiEvents(
            client, self.spawn, self.settings.event_interval, allowed=self._is_leading
        )
        self.deps = Deps(
            client=client,
            settings=self.settings,
            metrics=self.metrics,
            events=self.events,
            write_slots=WriteSlots(self.settings.write_concurrency),
            status_slots=WriteSlots(self.settings.status_concurrency),
            spawn=self.spawn,
            supervise=self.supervisor.supervise,
            next_seq=self._next_seq,
            workload_resource=self.workloads.resource,
            leading=self._is_leading,
        )
        self.plans = PlanWatch(
            client,
            self.deps.events,
            supervise=self.supervisor.supervise,
            on_skip=self.on_skipped,
            status_interval=self.settings.status_interval,
            set_pool_plan=self._set_pool_plan,
            pool_report=self._pool_report,
        )
        self.pools: dict[Key, PoolWorker] = {}
        self.host_pool: dict[Key, str] = {}  # a host's pool (poolRef is immutable, but be sure)
        self.request_pool: dict[Key, str] = {}
        # Which host stands on which workload, both ways (a host's workloadRef may change).
        self.host_workload: dict[Key, WorkloadKey] = {}
        self.workload_host: dict[WorkloadKey, tuple[str, str]] = {}  # -> (pool, host)
        #: Each host's workloadRef, and whether its workload is watched by name (a user's own
        #: host) rather than by the operator's label.
        self.host_ref: dict[Key, tuple[WorkloadRef, bool]] = {}
        #: The workload kind (apiVersion, kind) of each pool's template; and how many pool
        #: templates and managed hosts use each kind: at 0 its label watch goes.
        self.pool_kind: dict[Key, tuple[str, str]] = {}
        self.kind_users: dict[KindKey, int] = {}
        #: Hosts and requests whose deletion was seen (see ``Tombstones``).
        self.tombstones = Tombstones()
        self._seq = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self.informers: list[Informer] = []
        #: The informers run (the view is current); set by initial_sync.
        self.started = False
        #: This instance decides and writes (see :meth:`lead`); a standby only watches.
        self.leading = False

    def _is_leading(self) -> bool:
        return self.leading

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def worker(self, namespace: str, pool: str) -> PoolWorker:
        key = (namespace, pool)
        worker = self.pools.get(key)
        if worker is None:
            worker = self.pools[key] = PoolWorker(self.deps, self, namespace, pool)
            worker.on_plan(self.plans.plan_for(namespace, pool))
            if self.leading:
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

    def on_skipped(self, kind: str, obj: Mapping[str, Any], error: Exception) -> None:
        """A watch event the operator could not take: counted, and a Warning Event on the
        object (once per object and interval), so its owner learns why nothing happens."""
        object_kind = str(obj.get("kind") or "object")
        self.metrics.skipped_object(object_kind)
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping) or not meta.get("name") or not meta.get("uid"):
            return  # nothing an Event could name
        message = (
            f"the operator skipped this {object_kind} ({kind} event): "
            f"{type(error).__name__}: {error}"
        )[:1024]
        self.deps.events.post(
            obj,
            object_kind,
            "ObjectSkipped",
            message,
            "Warning",
            once_per=(str(meta.get("namespace", "")), str(meta.get("name")), "ObjectSkipped"),
        )

    # -------------------------------------------------------------- start / stop

    async def initial_sync(self, namespaces: list[str] | None, *, lead: bool = True) -> None:
        """LIST everything before the first decision, so no existing session is missed; then
        keep pools, hosts and requests current with the operator's own informers (one relist,
        skip and metric behaviour for every kind). The garbage collector is paused meanwhile
        and what was built is frozen after (see :func:`collector_paused`).

        With ``lead=False`` the instance is a warm standby: its informers run and its pools'
        state follows them, but nothing decides or writes until :meth:`lead`."""
        with collector_paused():
            await self._initial_sync(namespaces)
        self.started = True
        if lead:
            self.lead()
        for informer in self.informers:
            self.supervisor.supervise(
                f"informer {informer.plural} {informer.namespace or '*'}",
                f"informer/{informer.plural}",
                informer.run,
            )

    async def _initial_sync(self, namespaces: list[str] | None) -> None:
        scopes: list[str | None] = list(namespaces) if namespaces else [None]
        before = self.client.list_timing.copy()
        # Pools first: each host and request then joins a pool whose spec is known.
        kinds = (
            (POOLS, self.on_pool_event),
            (HOSTS, self.on_host_event),
            (REQUESTS, self.on_request_event),
        )
        self.informers = [
            Informer(self.client, plural, scope, handler, on_skip=self.on_skipped)
            for plural, handler in kinds
            for scope in scopes
        ]
        self.workloads.scopes = scopes
        for informer in self.informers:
            await informer.list_once()
        await self.plans.start(scopes)
        # The workloads of every kind in use are listed before the first decision too: a
        # host whose workload is merely not listed yet must not look lost.
        for api_version, kind in self.pool_kind.values():
            self.workloads.want(api_version, kind)
        for key, (ref, named) in self.host_ref.items():
            self._watch_ref(key, ref, named)
        for api_version, kind in self._kinds_in_use():
            await self.workloads.ensure(api_version, kind)
        timing = self.client.list_timing
        fed = sum(informer.feed_seconds for informer in self.informers)
        log.info(
            "initial sync: list %.2fs, decode %.2fs, rebuild %.2fs, %d objects",
            timing.wait - before.wait,
            timing.decode - before.decode,
            fed,
            timing.objects - before.objects,
        )

    def lead(self) -> None:
        """Decide and write from now on (this instance holds the Lease, or runs alone): the
        plans' status writer and every pool's loop start, and each pool first does what a
        standby left to the leader (see ``PoolWorker.take_over``). No LIST: the view the
        informers kept is the one decided on."""
        if self.leading:
            return
        self.leading = True
        # What the first LIST skipped or found invalid is said now (older: by the leader).
        self.events.release(max_age=self.settings.event_interval)
        self.plans.start_writing()
        # The pools with requests to place first: each loop's first pass runs in the order
        # the loops start, and at 1,000 pools the passes of the idle ones (statuses alone)
        # held a new leader's first placement up by about a second.
        for worker in sorted(self.pools.values(), key=lambda w: not w.has_requests_to_place):
            worker.take_over()
            worker.start()

    def start(self) -> None:
        self.started = True
        self.lead()

    async def stop(self) -> None:
        for worker in list(self.pools.values()):
            await worker.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -------------------------------------------------------------- events

    def _kinds_in_use(self) -> set[tuple[str, str]]:
        kinds = set()
        for worker in self.pools.values():
            template = worker.keeper.template()
            if template is not None:
                kinds.add((template.api_version, template.kind))
            for host in worker.state.hosts.values():
                ref = host.spec.workload_ref if host.spec is not None else None
                if ref is not None:
                    kinds.add((ref.api_version, ref.kind))
        return kinds

    # -------------------------------------------------------------- scaling plans

    def _set_pool_plan(self, namespace: str, pool: str, plan: PlanRecord | None) -> None:
        worker = self.pools.get((namespace, pool))
        if worker is not None:
            worker.on_plan(plan)

    def _pool_report(self, namespace: str, pool: str) -> PoolReport:
        worker = self.pools.get((namespace, pool))
        if worker is None or worker.state.pool is None:
            return PoolReport(exists=False)
        return PoolReport(True, worker.plans.entry, worker.plans.problem)

    def on_plan_report(self, namespace: str, plan: str) -> None:
        self.plans.mark((namespace, plan))

    # -------------------------------------------------------------- events

    def on_pool_event(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        meta = Meta.of(obj)
        # Read before anything changes: a pool that cannot be read is skipped whole (see
        # Informer._deliver), never left half-applied as a worker without its pool.
        record = PoolRecord.of(obj) if kind != "DELETED" else None
        worker = self.worker(meta.namespace, meta.name)
        self.plans.pool_changed(meta.namespace, meta.name)
        if record is None:
            worker.on_pool(None)
            self._set_pool_kind((meta.namespace, meta.name), None)
            if worker.state.requests:
                log.info("%s/%s: pool deleted; its pending requests wait for it", *meta_key(meta))
            self._forget_if_unused(worker)
            return
        known = worker.state.pool
        if (
            known is not None
            and known.meta.uid == record.meta.uid
            and not newer_or_same(record.meta.resource_version, known.meta.resource_version)
        ):
            return
        worker.on_pool(record)
        template = worker.keeper.template()
        used = (template.api_version, template.kind) if template is not None else None
        self._set_pool_kind((meta.namespace, meta.name), used)

    def _set_pool_kind(self, key: Key, used: tuple[str, str] | None) -> None:
        """The workload kind of a pool's template changed (None: it has none, or is gone)."""
        old = self.pool_kind.get(key)
        if old == used:
            return
        if used is not None:
            self.pool_kind[key] = used
            self._use_kind(*used, +1)
            if self.started:
                self.workloads.want(*used)
        else:
            self.pool_kind.pop(key, None)
        if old is not None:
            self._use_kind(*old, -1)

    def _use_kind(self, api_version: str, kind: str, delta: int) -> None:
        """Count a template or managed host using the kind; at 0 its label watch goes."""
        key = kind_key(api_version, kind)
        users = self.kind_users.get(key, 0) + delta
        if users > 0:
            self.kind_users[key] = users
            return
        self.kind_users.pop(key, None)
        if self.started:
            self.workloads.unwant(key)

    def on_host_event(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        record = HostRecord.of(obj)
        key = (record.meta.namespace, record.meta.name)
        old_pool = self.host_pool.get(key)
        if kind == "DELETED":
            self.tombstones.bury(record.meta.uid)
            self.host_pool.pop(key, None)
            self._unlink_workload(key)
            if old_pool is not None:
                self._host_left(key, old_pool)
            return
        if record.meta.uid in self.tombstones:
            return  # a write's answer for a host whose deletion was seen: stale
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
        self._link_workload(key, record, worker)

    # -------------------------------------------------------------- workloads

    def _link_workload(self, key: Key, record: HostRecord, worker: PoolWorker) -> None:
        """Keep the host ↔ workload index, and tell the pool about a workload new to it."""
        ref = record.spec.workload_ref if record.spec is not None else None
        wanted = workload_key(key[0], ref) if ref is not None else None
        if self.host_workload.get(key) == wanted and wanted is not None:
            return  # unchanged: the pool knows its workload already
        self._unlink_workload(key)
        if ref is None or wanted is None:
            if key[1] in worker.state.workloads:
                worker.on_workload(key[1], None, known=False)
            return
        self.host_workload[key] = wanted
        self.workload_host[wanted] = (record.pool, key[1])
        # The operator's own hosts stand on workloads it made (labelled); a user's host on
        # the user's own workload, watched by its name.
        named = not record.managed
        self.host_ref[key] = (ref, named)
        if not named:
            self._use_kind(ref.api_version, ref.kind, +1)
        if self.started:
            self._watch_ref(key, ref, named)
        known = (
            self.workloads.named_synced(wanted)
            if named
            else self.workloads.synced(kind_key(ref.api_version, ref.kind))
        )
        worker.on_workload(key[1], self.workloads.get(wanted), known=known)

    def _watch_ref(self, key: Key, ref: WorkloadRef, named: bool) -> None:
        if named:
            self.workloads.want_named(ref.api_version, ref.kind, key[0], ref.name)
        else:
            self.workloads.want(ref.api_version, ref.kind)

    def _unlink_workload(self, key: Key) -> None:
        old = self.host_workload.pop(key, None)
        if old is not None and self.workload_host.get(old, (None, key[1]))[1] == key[1]:
            self.workload_host.pop(old, None)
        linked = self.host_ref.pop(key, None)
        if linked is None:
            return
        ref, named = linked
        if not named:
            self._use_kind(ref.api_version, ref.kind, -1)
        elif self.started and old is not None and old not in self.workload_host:
            self.workloads.unwant_named(kind_key(ref.api_version, ref.kind), key[0], ref.name)

    def on_workload_event(self, key: WorkloadKey, record: WorkloadRecord | None) -> None:
        owner = self.workload_host.get(key)
        if owner is not None:
            self.worker(key[0], owner[0]).on_workload(owner[1], record, known=True)

    def on_workload_kind_synced(self, kind: KindKey) -> None:
        """A kind was listed: every host on a workload of that kind learns what exists."""
        for key, (pool, host) in list(self.workload_host.items()):
            named = self.host_ref.get((key[0], host), (None, False))[1]
            if (key[1], key[2]) == kind and not named:  # a user's: its own watch says
                self.worker(key[0], pool).on_workload(host, self.workloads.get(key), known=True)

    def on_named_workload_synced(self, key: WorkloadKey) -> None:
        """A user's workload was listed: the host on it learns whether it exists."""
        owner = self.workload_host.get(key)
        if owner is not None:
            self.worker(key[0], owner[0]).on_workload(owner[1], self.workloads.get(key), known=True)

    def on_workload_kind_error(self, kind: KindKey, message: str | None) -> None:
        """A kind cannot be watched (or can again): the pools whose template uses it say so."""
        for worker in list(self.pools.values()):
            template = worker.keeper.template()
            if template is not None and kind_key(template.api_version, template.kind) == kind:
                worker.on_watch_error(message)

    def on_request_event(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        record = RequestRecord.of(obj)
        key = (record.meta.namespace, record.meta.name)
        old_pool = self.request_pool.get(key)
        if kind == "DELETED":
            self.tombstones.bury(record.meta.uid)
            self.request_pool.pop(key, None)
            if old_pool is not None:
                self._request_left(key, old_pool)
            return
        if record.meta.uid in self.tombstones:
            return  # a write's answer for a request whose deletion was seen: stale
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
        worker.halt()  # before its series go: a pass already due must not bring them back
        self.metrics.forget_pool(*key)
        self.spawn(worker.stop())


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (the rebuild of 100,000 records makes millions of
    objects, and each collection pass scans every survivor: about half the rebuild's time);
    on leaving, what survived moves to the collector's permanent generation
    (``gc.freeze``), so later passes no longer scan the records listed at start-up either.
    Those records are freed by reference counting as usual when replaced or deleted."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def meta_key(meta: Meta) -> Key:
    return (meta.namespace, meta.name)
