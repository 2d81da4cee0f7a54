"""The placement controller: observed state in memory, one decision loop per pool.

Gather → decide → apply:

* **Gather.** Watch events (fed by the kopf handlers) and an initial LIST keep an in-memory view
  of every HostPool, SessionHost and SessionRequest. Per pool, a :class:`PoolBalancer` holds the
  hosts and sessions; a *ledger* maps each user's session to the requests that hold it.
* **Decide.** One asyncio task per pool takes pending requests in arrival order and asks the
  engine for a host. Decisions for one pool never interleave, and a decision reserves its slot
  in the balancer *before* the write, so no host can exceed its limit however many requests
  arrive at once.
* **Apply.** One status write per assignment, conditional on the request's resourceVersion.
  A failed write releases the reservation; the request is re-read and tried again.
  Pool and host status are written debounced (at most once per ``status_interval``), and only
  when they changed; while placements go on, changes of counts alone wait for a pause (or
  a maximum delay), so a storm costs each host one write and each pool a few.

Requests that cannot be placed wait with a reason (PoolNotFound, PoolSaturated,
NoEligibleHost) and are retried when capacity may have appeared: a host added, changed or
undrained, a session ended, the pool changed, a connecting session settled. Retries skip every
request whose shape (protocol, unauthenticated) already failed in the same pass, so a
saturated pool costs O(1) engine calls per capacity change, not O(waiting requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from . import conditions as cond
from .api import (
    GROUP,
    VERSION,
    HostMetrics,
    HostPoolSpec,
    Phase,
    Reason,
    SessionHostSpec,
    SessionRequestSpec,
    SessionState,
)
from .balancing import Demand, HostView, Placement, PoolBalancer
from .k8s import ApiError, Informer, KubeClient
from .scaling import ScaleHost, hosts_to_add, hosts_to_remove
from .writeslots import WriteSlots

log = logging.getLogger(__name__)

POOLS, HOSTS, REQUESTS = "hostpools", "sessionhosts", "sessionrequests"
#: Label put on hosts the operator creates (scaling); only those are ever removed.
MANAGED_LABEL = "hostpool.io/managed-by"
MANAGER = "hostpool-operator"
POOL_LABEL = "hostpool.io/pool"

Key = tuple[str, str]  # (namespace, name)


def _now() -> datetime:
    return datetime.now(UTC)


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _query_order(created: str) -> int:
    """Hosts are in query order by creationTimestamp (whole seconds), then name."""
    moment = _parse_time(created)
    return int(moment.timestamp()) if moment is not None else 0


def _rv_newer_or_same(new: str | None, old: str | None) -> bool:
    """Is ``new`` at least as recent as ``old``? resourceVersions are etcd revisions
    (integers) on every etcd-backed API server; if either is not, trust arrival order."""
    if new is None or old is None:
        return True
    try:
        return int(new) >= int(old)
    except ValueError:
        return True


def _validation_message(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"spec.{where}: {first['msg'].removeprefix('Value error, ')}"


# ------------------------------------------------------------------------------ records


@dataclass(slots=True)
class Meta:
    namespace: str
    name: str
    uid: str
    resource_version: str
    generation: int
    created: str
    labels: dict[str, str]

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Meta:
        meta = obj.get("metadata") or {}
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            generation=int(meta.get("generation") or 0),
            created=str(meta.get("creationTimestamp", "")),
            labels=dict(meta.get("labels") or {}),
        )


@dataclass(slots=True)
class RequestRecord:
    meta: Meta
    pool: str
    demand: Demand | None
    spec_error: str | None
    status: dict[str, Any]
    seq: int = 0
    seen: float = 0.0  # monotonic time the operator first saw the request

    @property
    def phase(self) -> str | None:
        value = self.status.get("phase")
        return value if isinstance(value, str) else None

    @property
    def host(self) -> str | None:
        value = self.status.get("host")
        return value if isinstance(value, str) else None

    @property
    def session_state(self) -> str | None:
        value = self.status.get("sessionState")
        return value if isinstance(value, str) else None

    @property
    def assigned_at(self) -> datetime | None:
        return _parse_time(self.status.get("assignedAt"))

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> RequestRecord:
        spec = obj.get("spec") or {}
        pool = ""
        if isinstance(spec, Mapping) and isinstance(spec.get("poolRef"), Mapping):
            pool = str(spec["poolRef"].get("name") or "")
        demand: Demand | None = None
        error: str | None = None
        try:
            parsed = SessionRequestSpec.model_validate(spec)
            demand = Demand(parsed.user, parsed.protocol, parsed.unauthenticated)
        except ValidationError as exc:
            error = _validation_message(exc)
        status = obj.get("status")
        return cls(
            Meta.of(obj), pool, demand, error, dict(status) if isinstance(status, Mapping) else {}
        )


@dataclass(slots=True)
class HostRecord:
    meta: Meta
    pool: str
    spec: SessionHostSpec | None
    spec_error: str | None
    metrics: HostMetrics | None
    metrics_error: str | None
    status: dict[str, Any]
    body: dict[str, Any]

    @property
    def managed(self) -> bool:
        return self.meta.labels.get(MANAGED_LABEL) == MANAGER

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> HostRecord:
        spec_raw = obj.get("spec") or {}
        pool = ""
        if isinstance(spec_raw, Mapping) and isinstance(spec_raw.get("poolRef"), Mapping):
            pool = str(spec_raw["poolRef"].get("name") or "")
        spec: SessionHostSpec | None = None
        error: str | None = None
        try:
            spec = SessionHostSpec.model_validate(spec_raw)
        except ValidationError as exc:
            error = _validation_message(exc)
        status = dict(obj.get("status") or {})
        metrics: HostMetrics | None = None
        metrics_error: str | None = None
        if status.get("metrics") is not None:
            try:
                metrics = HostMetrics.model_validate(status["metrics"])
            except ValidationError as exc:
                metrics_error = _validation_message(exc).replace("spec.", "status.metrics.", 1)
        return cls(Meta.of(obj), pool, spec, error, metrics, metrics_error, status, dict(obj))


@dataclass(slots=True)
class PoolRecord:
    meta: Meta
    spec: HostPoolSpec | None
    spec_error: str | None
    status: dict[str, Any]
    body: dict[str, Any]

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> PoolRecord:
        spec: HostPoolSpec | None = None
        error: str | None = None
        try:
            spec = HostPoolSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            error = _validation_message(exc)
        return cls(Meta.of(obj), spec, error, dict(obj.get("status") or {}), dict(obj))


# ------------------------------------------------------------------------------ settings


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    #: Pool and host status are written at most this often (seconds).
    status_interval: float = 1.0
    #: Host metrics sampled longer ago than this are stale: treated as never reported.
    metrics_stale_after: float = 120.0
    #: Host status waits for this long without placements, or at most host_status_max_delay.
    host_status_max_delay: float = 30.0
    #: During placements, a pool status whose only changes are counts waits at most this long
    #: (a change of a condition's status or reason is written within status_interval).
    pool_status_max_delay: float = 5.0
    #: Request status writes in flight at once, shared by all pools in turn. More is not
    #: faster: every write in flight is a goroutine in the API server, and the watch that
    #: delivers new requests (to this operator too) lags as they multiply
    #: (docs/performance.md: 256 was slower than 128).
    write_concurrency: int = 128
    #: The same Event (object, reason) is posted at most this often (seconds).
    event_interval: float = 30.0


class EventLimiter:
    """Lets an Event through at most once per interval per (object, reason)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[tuple[str, ...], float] = {}

    def allow(self, *key: str) -> bool:
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            return False
        self._last[key] = now
        if len(self._last) > 10_000:  # bounded memory under a storm of distinct keys
            cutoff = now - self._interval
            self._last = {k: t for k, t in self._last.items() if t >= cutoff}
        return True


# ------------------------------------------------------------------------------ a pool


@dataclass
class Session:
    host: str
    holders: set[str] = field(default_factory=set)
    connecting_until: datetime | None = None
    assigned_at: datetime | None = None


class PoolWorker:
    """Everything about one pool: its hosts, requests, sessions, and its decision loop."""

    def __init__(self, controller: Controller, namespace: str, name: str) -> None:
        self.controller = controller
        self.namespace = namespace
        self.name = name
        self.pool: PoolRecord | None = None
        self.hosts: dict[str, HostRecord] = {}
        self.requests: dict[str, RequestRecord] = {}
        self.balancer: PoolBalancer | None = None
        self.sessions: dict[str, Session] = {}  # by user
        self.arrivals: dict[str, None] = {}  # request names, in arrival order
        self.waiting: dict[str, None] = {}  # requests that could not be placed yet
        self.inflight: set[str] = set()
        self.pending_said: dict[str, Reason] = {}  # the pending reason last written per request
        self.pending_writes: dict[str, asyncio.Task[None]] = {}  # Pending statuses on their way
        # Pool and host status are written by tasks of their own: a round of host writes in a
        # large pool takes long, and the pool's status must not wait for it.
        self.pool_flush: asyncio.Task[None] | None = None
        self.host_flush: asyncio.Task[None] | None = None
        self.capacity_changed = False
        self.pool_dirty = True
        self.hosts_dirty = True
        self.wake = asyncio.Event()
        self.deadlines: list[tuple[datetime, str]] = []  # (connecting deadline, user)
        self.stale_hosts: set[str] = set()
        self.task: asyncio.Task[None] | None = None
        # Status writes get their own, small lane: they must never hold up assignments.
        self.status_writes = asyncio.Semaphore(4)
        self.last_status_write = 0.0
        self.last_host_write = 0.0
        self.last_activity = 0.0  # monotonic time of the latest placement
        self.written_host_status: dict[str, dict[str, Any]] = {}
        self.written_pool_status: dict[str, Any] | None = None
        self.pool_status_written_at = 0.0  # monotonic
        self.saturated_since: bool | None = None
        self.removing: set[str] = set()  # hosts being deleted by scale-down
        self.empty_since: dict[str, datetime] = {}  # managed hosts with no session, since when
        self.scaling_task: asyncio.Task[None] | None = None
        self.scaling_limited: tuple[bool, str] | None = None

    # -------------------------------------------------------------- helpers

    @property
    def status_dirty(self) -> bool:
        return self.pool_dirty or self.hosts_dirty

    @status_dirty.setter
    def status_dirty(self, value: bool) -> None:
        self.pool_dirty = self.hosts_dirty = value

    @property
    def spec(self) -> HostPoolSpec | None:
        return None if self.pool is None else self.pool.spec

    def _connecting_timeout(self) -> timedelta:
        seconds = 60 if self.spec is None else self.spec.connecting_timeout_seconds
        return timedelta(seconds=seconds)

    def poke(self, *, capacity: bool = False) -> None:
        if capacity:
            self.capacity_changed = True
        self.status_dirty = True
        self.wake.set()

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(
                self._run(), name=f"pool/{self.namespace}/{self.name}"
            )

    async def stop(self) -> None:
        for task in (self.pool_flush, self.host_flush, self.scaling_task):
            if task is not None:
                task.cancel()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    def idle(self) -> bool:
        return self.pool is None and not self.hosts and not self.requests

    # -------------------------------------------------------------- host views

    def _metrics_for(self, host: HostRecord, now: datetime) -> HostMetrics | None:
        metrics = host.metrics
        if metrics is None:
            return None
        sampled = metrics.sampled_at
        stale_after = self.controller.settings.metrics_stale_after
        if sampled is not None and (now - sampled).total_seconds() > stale_after:
            self.stale_hosts.add(host.meta.name)
            return None
        self.stale_hosts.discard(host.meta.name)
        return metrics

    def _view(self, host: HostRecord, now: datetime) -> HostView | None:
        if host.spec is None:
            return None
        users = self.balancer.users_on(host.meta.name) if self.balancer else frozenset()
        connecting = sum(
            1
            for user in users
            if (s := self.sessions.get(user)) is not None and s.connecting_until is not None
        )
        return HostView(
            name=host.meta.name,
            drain_mode=host.spec.drain_mode,
            features=host.spec.features,
            address=host.spec.address,
            sessions=len(users),
            connecting=connecting,
            metrics=self._metrics_for(host, now),
            order=_query_order(host.meta.created),
        )

    def _rebuild_balancer(self) -> None:
        """(Re)build the engine's state from the records: after the pool appears or becomes
        valid. Sessions are re-adopted from the ledger."""
        spec = self.spec
        if spec is None:
            self.balancer = None
            return
        now = _now()
        views = []
        for host in self.hosts.values():
            view = self._view(host, now)
            if view is not None:
                view.sessions = view.connecting = 0  # sessions are adopted below
                views.append(view)
        balancer = PoolBalancer(spec, views)
        for user, session in self.sessions.items():
            if balancer.host(session.host) is not None:
                balancer.adopt(user, session.host, connecting=session.connecting_until is not None)
        self.balancer = balancer
        self.poke(capacity=True)

    def _reorder_host(self, host: HostRecord) -> None:
        if self.balancer is None or host.meta.name in self.removing:
            return
        view = self._view(host, _now())
        if view is None:
            self.balancer.remove_host(host.meta.name)
            return
        self.balancer.upsert_host(view)

    # -------------------------------------------------------------- events: pool

    def on_pool(self, record: PoolRecord | None) -> None:
        old = self.pool
        self.pool = record
        if record is None or record.spec is None:
            self.balancer = None
        elif self.balancer is None or old is None or old.spec is None:
            self._rebuild_balancer()
        elif old.spec != record.spec:
            self.balancer.set_spec(record.spec)
        if (
            old is not None
            and old.spec is not None
            and record is not None
            and record.spec is not None
            and old.spec.connecting_timeout_seconds != record.spec.connecting_timeout_seconds
        ):
            self._retime_connecting()
        self.poke(capacity=True)
        if (
            record is not None
            and record.spec_error
            and self.controller.events.allow("pool", self.namespace, self.name, "InvalidSpec")
        ):
            self.controller.event(
                record.body, "HostPool", "InvalidSpec", record.spec_error, "Warning"
            )

    # -------------------------------------------------------------- events: hosts

    def on_host(self, record: HostRecord) -> None:
        self.hosts[record.meta.name] = record
        self._reorder_host(record)
        self.poke(capacity=True)
        if record.spec_error and self.controller.events.allow(
            "host", self.namespace, record.meta.name, "InvalidSpec"
        ):
            self.controller.event(
                record.body, "SessionHost", "InvalidSpec", record.spec_error, "Warning"
            )

    def on_host_deleted(self, name: str) -> None:
        self.hosts.pop(name, None)
        self.removing.discard(name)
        self.empty_since.pop(name, None)
        self.written_host_status.pop(name, None)
        self.stale_hosts.discard(name)
        if self.balancer is not None:
            self.balancer.remove_host(name)
        # Sessions on a deleted host are gone: their requests fail (documented), never move.
        lost = [user for user, s in self.sessions.items() if s.host == name]
        for user in lost:
            session = self.sessions.pop(user)
            for request_name in session.holders:
                request = self.requests.get(request_name)
                if request is not None:
                    self.controller.spawn(self._write_failed(request, name))
        self.poke(capacity=True)

    # -------------------------------------------------------------- events: requests

    def on_request(self, record: RequestRecord) -> None:
        name = record.meta.name
        previous = self.requests.get(name)
        if previous is not None and previous.meta.uid != record.meta.uid:
            self._forget_request(previous)  # a namesake replaced the old one
            previous = None
        if previous is not None and not _rv_newer_or_same(
            record.meta.resource_version, previous.meta.resource_version
        ):
            return  # stale event: we already know a newer version
        record.seq = previous.seq if previous is not None else self.controller.next_seq()
        record.seen = previous.seen if previous is not None else time.monotonic()
        self.requests[name] = record
        if name in self.inflight:
            return  # our own write is on its way; its answer decides
        phase = record.phase
        if phase == Phase.ASSIGNED.value and record.host:
            self._observe_assigned(record)
        elif phase == Phase.FAILED.value:
            self._release(record)
            self.arrivals.pop(name, None)
            self.waiting.pop(name, None)
        else:
            if self._holds_session(record):
                # Someone reset a status we had written: release and place again.
                self._release(record)
            if name not in self.waiting:
                self.arrivals[name] = None
            self.wake.set()
        self.status_dirty = True

    def on_request_deleted(self, name: str) -> None:
        self.pending_said.pop(name, None)
        record = self.requests.pop(name, None)
        self.arrivals.pop(name, None)
        self.waiting.pop(name, None)
        if record is not None:
            self._release(record)
        self.poke(capacity=True)

    def _forget_request(self, record: RequestRecord) -> None:
        self._release(record)
        self.arrivals.pop(record.meta.name, None)
        self.waiting.pop(record.meta.name, None)

    def _holds_session(self, record: RequestRecord) -> bool:
        if record.demand is None:
            return False
        session = self.sessions.get(record.demand.user)
        return session is not None and record.meta.name in session.holders

    def _is_connecting(self, record: RequestRecord) -> datetime | None:
        """The deadline until which this assigned request's session counts as connecting."""
        if record.session_state != SessionState.CONNECTING.value:
            return None
        if record.status.get("reason") != Reason.NEW_SESSION.value:
            return None
        assigned = record.assigned_at
        if assigned is None:
            return None
        deadline = assigned + self._connecting_timeout()
        return deadline if deadline > _now() else None

    def _observe_assigned(self, record: RequestRecord) -> None:
        """An assigned request seen in the API: adopt its session if we did not know it."""
        name = record.meta.name
        self.arrivals.pop(name, None)
        self.waiting.pop(name, None)
        if record.demand is None or record.host is None:
            return
        user = record.demand.user
        session = self.sessions.get(user)
        if session is None:
            if record.host not in self.hosts:
                # Assigned to a host that no longer exists: that session is gone.
                self.controller.spawn(self._write_failed(record, record.host))
                return
            session = Session(host=record.host, assigned_at=record.assigned_at)
            self.sessions[user] = session
            deadline = self._is_connecting(record)
            if deadline is not None:
                session.connecting_until = deadline
                heapq.heappush(self.deadlines, (deadline, user))
            if self.balancer is not None and self.balancer.host(record.host) is not None:
                self.balancer.adopt(user, record.host, connecting=deadline is not None)
        elif session.host != record.host:
            log.warning(
                "%s/%s: user %r has sessions on %s and %s; keeping %s",
                self.namespace,
                name,
                user,
                session.host,
                record.host,
                session.host,
            )
        session.holders.add(name)
        # An agent reporting Active/Disconnected ends the connecting phase.
        if session.connecting_until is not None and record.session_state in (
            SessionState.ACTIVE.value,
            SessionState.DISCONNECTED.value,
        ):
            self._settle(user, session)

    def _retime_connecting(self) -> None:
        """connectingTimeoutSeconds changed: sessions still connecting get the new deadline
        (counted from their assignment); those past it settle now."""
        now = _now()
        timeout = self._connecting_timeout()
        for user, session in self.sessions.items():
            if session.connecting_until is None or session.assigned_at is None:
                continue
            deadline = session.assigned_at + timeout
            if deadline <= now:
                self._settle(user, session)
            else:
                session.connecting_until = deadline
                heapq.heappush(self.deadlines, (deadline, user))

    def _settle(self, user: str, session: Session) -> None:
        session.connecting_until = None
        if self.balancer is not None:
            self.balancer.adjust_connecting(session.host, -1)
        self.poke(capacity=True)

    def _release(self, record: RequestRecord) -> None:
        """This request no longer holds its user's session; the last holder ends it."""
        if record.demand is None:
            return
        user = record.demand.user
        session = self.sessions.get(user)
        if session is None or record.meta.name not in session.holders:
            return
        session.holders.discard(record.meta.name)
        if session.holders:
            return
        del self.sessions[user]
        if self.balancer is not None:
            self.balancer.end_session(user, was_connecting=session.connecting_until is not None)
        self.capacity_changed = True
        self.wake.set()

    # -------------------------------------------------------------- the decision loop

    async def _run(self) -> None:
        while True:
            timeout = self._next_timer()
            if timeout is None or timeout > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout)
            else:
                await asyncio.sleep(0)  # something is due now; still let every other task run
            self.wake.clear()
            try:
                self._expire_connecting()
                self._recheck_metrics()
                self.place_pending()
                self._scale()
                self._maybe_flush()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one bad object stop a pool
                log.exception("%s/%s: placement pass failed; retrying", self.namespace, self.name)
                await asyncio.sleep(1)
                self.wake.set()

    def _next_timer(self) -> float | None:
        now = _now()
        timers: list[float] = []
        if self.deadlines:
            timers.append((self.deadlines[0][0] - now).total_seconds())
        clock = time.monotonic()
        interval = self.controller.settings.status_interval
        if self.pool_dirty and _idle(self.pool_flush):
            timers.append(interval - (clock - self.last_status_write))
        if self.hosts_dirty and _idle(self.host_flush):
            due = min(
                self.last_activity + interval,
                self.last_host_write + self.controller.settings.host_status_max_delay,
            )
            timers.append(due - clock)
        if any(
            h.metrics is not None and h.metrics.sampled_at is not None for h in self.hosts.values()
        ):
            timers.append(self.controller.settings.metrics_stale_after / 4)
        spec = self.spec
        if spec is not None and spec.scaling is not None and self.empty_since:
            # Only delays still running: a host whose delay is over was kept for a reason
            # (minHosts, bufferSessions, waiting requests) that only an event can change, and
            # a due time in the past would make this loop run again at once, forever.
            delay = timedelta(seconds=spec.scaling.scale_down_delay_seconds)
            ends = [since + delay for since in self.empty_since.values() if since + delay > now]
            if ends:
                timers.append((min(ends) - now).total_seconds() + 0.05)
        return max(0.0, min(timers)) if timers else None

    def _expire_connecting(self) -> None:
        now = _now()
        while self.deadlines and self.deadlines[0][0] <= now:
            deadline, user = heapq.heappop(self.deadlines)
            session = self.sessions.get(user)
            if session is not None and session.connecting_until == deadline:
                self._settle(user, session)

    def _recheck_metrics(self) -> None:
        """Metrics go stale with time alone; re-evaluate hosts that report sampledAt."""
        if self.balancer is None:
            return
        now = _now()
        stale_after = self.controller.settings.metrics_stale_after
        for host in self.hosts.values():
            sampled = host.metrics.sampled_at if host.metrics is not None else None
            if sampled is None:
                continue
            stale = (now - sampled).total_seconds() > stale_after
            if stale != (host.meta.name in self.stale_hosts):
                self._reorder_host(host)
                self.poke(capacity=True)

    def place_pending(self) -> None:
        """One pass in arrival order: the waiting requests too when capacity may have
        appeared, else only the new arrivals (the waiting ones would fail again)."""
        names = set(self.arrivals)
        if self.capacity_changed:
            names.update(self.waiting)
            self.capacity_changed = False
        self.arrivals.clear()
        queue = sorted((n for n in names if n in self.requests), key=lambda n: self.requests[n].seq)
        failed_shapes: dict[tuple[Any, bool], Reason] = {}
        for name in queue:
            record = self.requests.get(name)
            if record is None or name in self.inflight:
                self.waiting.pop(name, None)
                continue
            self._decide(record, failed_shapes)

    def _decide(self, record: RequestRecord, failed: dict[tuple[Any, bool], Reason]) -> None:
        name = record.meta.name
        if record.demand is None:
            self.waiting.pop(name, None)
            self.controller.spawn(self._write_invalid(record))
            return
        if self.pool is None:
            self._wait(record, Reason.POOL_NOT_FOUND, f"HostPool {self.name!r} does not exist")
            return
        if self.balancer is None:
            message = f"HostPool {self.name!r} is invalid: {self.pool.spec_error}"
            self._wait(record, Reason.NO_ELIGIBLE_HOST, message)
            return
        demand = record.demand
        shape = (demand.protocol, demand.unauthenticated)
        if demand.user not in self.sessions and shape in failed:
            self._wait(record, failed[shape], self._pending_message(failed[shape]))
            return
        placement = self.balancer.place(demand)
        if placement.host is None:
            failed[shape] = placement.reason
            self._wait(record, placement.reason, self._pending_message(placement.reason))
            return
        self.waiting.pop(name, None)
        self.pending_said.pop(name, None)
        self._reserve(record, placement)
        self.controller.spawn(self._write_assigned(record, placement))

    def _pending_message(self, reason: Reason) -> str:
        if reason is Reason.POOL_SATURATED:
            return "every host that could take this session is at maxSessionLimit"
        return "no host can take a new session now (drain mode, features or logon-storm limits)"

    def _reserve(self, record: RequestRecord, placement: Placement) -> None:
        assert record.demand is not None
        assert placement.host is not None
        assert self.balancer is not None
        user = record.demand.user
        session = self.sessions.get(user)
        if session is None:
            now = _now()
            deadline = now + self._connecting_timeout()
            session = Session(host=placement.host, connecting_until=deadline, assigned_at=now)
            self.sessions[user] = session
            heapq.heappush(self.deadlines, (deadline, user))
            self.balancer.commit(record.demand, placement)
        session.holders.add(record.meta.name)
        self.inflight.add(record.meta.name)
        self.last_activity = time.monotonic()
        self.status_dirty = True

    def _wait(self, record: RequestRecord, reason: Reason, message: str) -> None:
        name = record.meta.name
        self.waiting[name] = None
        if self.pending_said.get(name) == reason:
            return  # written (or being written) already
        self.pending_said[name] = reason
        if record.phase == Phase.PENDING.value and record.status.get("reason") == reason.value:
            return  # already says so: no write
        task = self.controller.spawn(self._write_pending(record, reason, message))
        self.pending_writes[name] = task
        task.add_done_callback(
            lambda done: (
                self.pending_writes.pop(name, None)
                if self.pending_writes.get(name) is done
                else None
            )
        )

    # -------------------------------------------------------------- scaling

    def _waiting_for_capacity(self) -> int:
        """Distinct users whose requests wait because every slot is taken."""
        users = set()
        for name, reason in self.pending_said.items():
            record = self.requests.get(name)
            if reason is Reason.POOL_SATURATED and record is not None and record.demand is not None:
                users.add(record.demand.user)
        return len(users)

    def _scale_hosts(self, now: datetime) -> list[ScaleHost]:
        balancer = self.balancer
        assert balancer is not None
        hosts = []
        for record in sorted(
            self.hosts.values(), key=lambda h: (_query_order(h.meta.created), h.meta.name)
        ):
            name = record.meta.name
            view = balancer.host(name)
            sessions = view.sessions if view is not None else 0
            if record.managed and sessions == 0 and name not in self.removing:
                self.empty_since.setdefault(name, now)
            else:
                self.empty_since.pop(name, None)
            hosts.append(
                ScaleHost(
                    name=name,
                    sessions=sessions,
                    # A host the engine cannot use (invalid spec) adds no capacity.
                    drain_mode=view is None or view.drain_mode,
                    managed=record.managed,
                    empty_since=self.empty_since.get(name),
                )
            )
        return hosts

    def _scale(self) -> None:
        """Add hosts when requests wait for capacity (or the buffer runs low); remove the
        operator's empty hosts after the delay. Derived from observed hosts every time, so a
        restart never creates a host twice."""
        spec = self.spec
        if spec is None or self.balancer is None:
            return
        if self.scaling_task is not None and not self.scaling_task.done():
            return  # one change at a time; its result is observed before the next decision
        scaling = spec.scaling
        if scaling is None:
            if self.scaling_limited is not None:
                self.scaling_limited = None
                self.status_dirty = True
            return
        now = _now()
        hosts = [h for h in self._scale_hosts(now) if h.name not in self.removing]
        waiting = self._waiting_for_capacity()
        up = hosts_to_add(scaling, self.balancer.limit, hosts, waiting)
        limited = (
            (
                True,
                f"maxHosts {scaling.max_hosts} reached; {up.wanted - up.add} more host(s) "
                "would be needed",
            )
            if up.limited
            else (False, f"{len(hosts)} of at most {scaling.max_hosts} hosts")
        )
        if limited != self.scaling_limited:
            if limited[0] and self.controller.events.allow("limited", self.namespace, self.name):
                self.controller.event(
                    self.pool.body if self.pool else {},
                    "HostPool",
                    "ScalingLimited",
                    limited[1],
                    "Warning",
                )
            self.scaling_limited = limited
            self.status_dirty = True
        if up.add > 0:
            self.scaling_task = asyncio.get_running_loop().create_task(self._create_hosts(up.add))
            return
        doomed = hosts_to_remove(scaling, self.balancer.limit, hosts, waiting, now)
        if doomed:
            for name in doomed:
                # Out of the engine first, so no request can be placed on a host being removed.
                self.removing.add(name)
                self.balancer.remove_host(name)
                self.empty_since.pop(name, None)
            self.scaling_task = asyncio.get_running_loop().create_task(self._remove_hosts(doomed))

    def _host_manifest(self) -> dict[str, Any]:
        assert self.pool is not None
        assert self.spec is not None
        assert self.spec.scaling is not None
        template = self.spec.scaling.host_template
        labels = {**template.metadata.labels, POOL_LABEL: self.name, MANAGED_LABEL: MANAGER}
        spec = template.spec.to_api()
        spec["poolRef"] = {"name": self.name}
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SessionHost",
            "metadata": {
                "generateName": f"{self.name}-"[:58],
                "namespace": self.namespace,
                "labels": labels,
                "annotations": dict(template.metadata.annotations),
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "HostPool",
                        "name": self.name,
                        "uid": self.pool.meta.uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }

    async def _create_hosts(self, count: int) -> None:
        created = 0
        for _ in range(count):
            try:
                obj = await self.controller.client.create(
                    HOSTS, self.namespace, self._host_manifest()
                )
            except (ApiError, OSError, TimeoutError) as error:
                log.warning("%s/%s: could not create a host: %s", self.namespace, self.name, error)
                self.controller.event(
                    self.pool.body if self.pool else {},
                    "HostPool",
                    "ScaleUpFailed",
                    str(error),
                    "Warning",
                )
                await asyncio.sleep(2)
                break
            # Known at once, so the next decision counts it (the watch event follows).
            self.controller.on_host_event("ADDED", obj)
            created += 1
        if created:
            self.controller.metrics.scaled(self.namespace, self.name, "up", created)
            log.info("%s/%s: added %d host(s)", self.namespace, self.name, created)
            self.controller.event(
                self.pool.body if self.pool else {},
                "HostPool",
                "HostsAdded",
                f"added {created} SessionHost(s) from the template",
                "Normal",
            )
        self.wake.set()

    async def _remove_hosts(self, names: list[str]) -> None:
        removed = 0
        for name in names:
            record = self.hosts.get(name)
            try:
                if record is not None:
                    await self.controller.client.delete(
                        HOSTS, self.namespace, name, uid=record.meta.uid
                    )
                    removed += 1
            except ApiError as error:
                if not error.not_found:
                    log.warning(
                        "%s/%s: could not remove %s: %s", self.namespace, self.name, name, error
                    )
                    self.removing.discard(name)
                    if record is not None:
                        self._reorder_host(record)  # back into the engine
                    continue
            except (OSError, TimeoutError) as error:
                log.warning(
                    "%s/%s: could not remove %s: %s", self.namespace, self.name, name, error
                )
                self.removing.discard(name)
                if record is not None:
                    self._reorder_host(record)
                continue
        if removed:
            self.controller.metrics.scaled(self.namespace, self.name, "down", removed)
            log.info("%s/%s: removed %d empty host(s)", self.namespace, self.name, removed)
            self.controller.event(
                self.pool.body if self.pool else {},
                "HostPool",
                "HostsRemoved",
                f"removed empty SessionHost(s): {', '.join(names)}",
                "Normal",
            )
        self.wake.set()

    # -------------------------------------------------------------- writes

    def _assigned_status(self, record: RequestRecord, placement: Placement) -> dict[str, Any]:
        now = _now()
        host = self.hosts.get(placement.host or "")
        address = host.spec.address if host is not None and host.spec is not None else None
        reason = placement.reason.value
        message = (
            f"reconnected to the session on {placement.host}"
            if placement.reason is Reason.RECONNECTED
            else f"new session on {placement.host}"
        )
        return {
            "observedGeneration": record.meta.generation,
            "phase": Phase.ASSIGNED.value,
            "host": placement.host,
            "hostAddress": address,
            "reason": reason,
            "message": message,
            "sessionState": SessionState.CONNECTING.value,
            "assignedAt": cond.rfc3339(now),
            "conditions": cond.merge(
                record.status.get("conditions"),
                [cond.Cond("Assigned", "True", reason, message)],
                now=now,
                generation=record.meta.generation,
            ),
        }

    async def _write_assigned(self, record: RequestRecord, placement: Placement) -> None:
        name = record.meta.name
        earlier = self.pending_writes.get(name)
        if earlier is not None:
            # Our own Pending status for this request is still on its way: wait for it and
            # write on top of the version it produced, instead of conflicting with ourselves.
            await asyncio.wait([earlier])
            current = self.requests.get(name)
            if (
                current is None
                or current.meta.uid != record.meta.uid
                or current.phase in (Phase.ASSIGNED.value, Phase.FAILED.value)
            ):
                # Gone, or decided by someone else meanwhile: the observed state wins.
                self.inflight.discard(name)
                self._release(record)
                if current is not None:
                    self.on_request(current)
                return
            record = current
        # The whole status, as stored plus the decision: the write replaces it, and only on
        # the version it was read from, so nothing another writer set can be lost.
        status = {**record.status, **self._assigned_status(record, placement)}
        status = {key: value for key, value in status.items() if value is not None}
        try:
            async with self.controller.write_slots.slot((self.namespace, self.name)):
                queued = time.monotonic() - record.seen
                obj = await self.controller.client.replace_status(
                    REQUESTS,
                    "SessionRequest",
                    self.namespace,
                    name,
                    status,
                    resource_version=record.meta.resource_version,
                    uid=record.meta.uid,
                )
            self.controller.metrics.observe_assignment(
                self.namespace,
                self.name,
                placement.reason.value,
                time.monotonic() - record.seen,
                queued=queued,
            )
        except ApiError as error:
            # A definite answer: the write did not apply. Free the slot, re-read, go again.
            self.inflight.discard(name)
            self._release(record)
            await self._after_failed_write(record, error)
            return
        except (OSError, TimeoutError) as error:
            # No answer: the write may or may not have applied. The slot stays reserved
            # until a re-read tells which, or another request could take it and the host
            # would end up over its limit.
            await self._settle_unknown_write(record, placement, error)
            return
        self.inflight.discard(name)
        fresh = RequestRecord.of(obj)
        fresh.seq, fresh.seen = record.seq, record.seen
        current = self.requests.get(name)
        if current is None or current.meta.uid != fresh.meta.uid:
            # Deleted while we wrote: the deletion event already released or will release it.
            self._release(fresh)
            return
        self.requests[name] = fresh
        self.status_dirty = True

    async def _settle_unknown_write(
        self, record: RequestRecord, placement: Placement, error: BaseException
    ) -> None:
        name = record.meta.name
        log.warning(
            "%s/%s: no answer to the assignment write (%s); holding the slot until a re-read "
            "tells whether it applied",
            self.namespace,
            name,
            error,
        )
        delay = 0.2
        while True:
            await asyncio.sleep(delay)
            try:
                obj = await self.controller.client.get(REQUESTS, self.namespace, name)
                break
            except ApiError as again:
                if again.not_found:
                    self.inflight.discard(name)
                    self.on_request_deleted(name)
                    return
                log.warning("%s/%s: re-read failed: %s", self.namespace, name, again)
            except (OSError, TimeoutError) as again:
                log.warning("%s/%s: re-read failed: %s", self.namespace, name, again)
            delay = min(delay * 2, 5.0)
        fresh = RequestRecord.of(obj)
        current = self.requests.get(name)
        self.inflight.discard(name)
        if current is None:
            self._release(record)  # deleted meanwhile: its deletion ended the session
            return
        if current.meta.uid == fresh.meta.uid:
            fresh.seq, fresh.seen = current.seq, current.seen
            if not _rv_newer_or_same(fresh.meta.resource_version, current.meta.resource_version):
                fresh = current
        applied = fresh.phase == Phase.ASSIGNED.value and fresh.host == placement.host
        if applied and fresh.meta.uid == record.meta.uid:
            self.requests[name] = fresh  # it did apply: the reservation is that session
            self.status_dirty = True
            return
        self._release(record)  # it did not (or someone else decided): observed state wins
        self.on_request(fresh)
        self.wake.set()

    async def _after_failed_write(self, record: RequestRecord, error: BaseException) -> None:
        """Re-read the request and let the observed state decide what happens next."""
        name = record.meta.name
        if isinstance(error, ApiError) and error.not_found:
            self.on_request_deleted(name)
            return
        if not (isinstance(error, ApiError) and error.conflict):
            log.warning("%s/%s: status write failed: %s; retrying", self.namespace, name, error)
            await asyncio.sleep(0.5)
        try:
            obj = await self.controller.client.get(REQUESTS, self.namespace, name)
        except ApiError as again:
            if again.not_found:
                self.on_request_deleted(name)
                return
            log.warning("%s/%s: re-read failed: %s", self.namespace, name, again)
            self.arrivals[name] = None
            self.wake.set()
            return
        except (OSError, TimeoutError) as again:
            log.warning("%s/%s: re-read failed: %s", self.namespace, name, again)
            self.arrivals[name] = None
            self.wake.set()
            return
        fresh = RequestRecord.of(obj)
        current = self.requests.get(name)
        if current is not None and not _rv_newer_or_same(
            fresh.meta.resource_version, current.meta.resource_version
        ):
            fresh = current
        said = self.pending_said.get(name)
        if said is not None and not (
            fresh.phase == Phase.PENDING.value and fresh.status.get("reason") == said.value
        ):
            # The pending reason we last wrote lost to another write (e.g. an older reason
            # of ours written on the same version): decide again, so it is written anew.
            self.pending_said.pop(name, None)
            self.waiting.pop(name, None)
        # Back in line at its old place (same sequence number, same first-seen time).
        self.on_request(fresh)
        self.wake.set()

    async def _write_pending(self, record: RequestRecord, reason: Reason, message: str) -> None:
        now = _now()
        status = {
            "observedGeneration": record.meta.generation,
            "phase": Phase.PENDING.value,
            "reason": reason.value,
            "message": message,
            "host": None,
            "hostAddress": None,
            "conditions": cond.merge(
                record.status.get("conditions"),
                [cond.Cond("Assigned", "False", reason.value, message)],
                now=now,
                generation=record.meta.generation,
            ),
        }
        await self._write_simple(record, status)
        if self.controller.events.allow("pending", self.namespace, self.name, reason.value):
            self.controller.event(
                {"metadata": {**_meta_dict(record.meta)}},
                "SessionRequest",
                reason.value,
                f"{message} (pool {self.name}; further requests pending for this reason are "
                "not reported for a while)",
                "Warning" if reason is not Reason.POOL_SATURATED else "Normal",
            )

    async def _write_failed(self, record: RequestRecord, host: str) -> None:
        message = f"SessionHost {host!r} was deleted; the session on it ended"
        await self._fail(record, "HostDeleted", message, conditional=False)

    async def _write_invalid(self, record: RequestRecord) -> None:
        if record.phase != Phase.FAILED.value:
            await self._fail(record, "InvalidSpec", f"invalid request: {record.spec_error}")

    async def _fail(
        self, record: RequestRecord, reason: str, message: str, *, conditional: bool = True
    ) -> None:
        """Phase Failed, condition Assigned False with the reason, and a Warning Event."""
        status = {
            "observedGeneration": record.meta.generation,
            "phase": Phase.FAILED.value,
            "message": message,
            "conditions": cond.merge(
                record.status.get("conditions"),
                [cond.Cond("Assigned", "False", reason, message)],
                now=_now(),
                generation=record.meta.generation,
            ),
        }
        await self._write_simple(record, status, conditional=conditional)
        self.controller.event(
            {"metadata": _meta_dict(record.meta)}, "SessionRequest", reason, message, "Warning"
        )

    async def _write_simple(
        self, record: RequestRecord, status: dict[str, Any], *, conditional: bool = True
    ) -> None:
        name = record.meta.name
        try:
            async with self.controller.write_slots.slot((self.namespace, self.name)):
                obj = await self.controller.client.patch_status(
                    REQUESTS,
                    self.namespace,
                    name,
                    status,
                    resource_version=record.meta.resource_version if conditional else None,
                )
        except ApiError as error:
            if error.conflict:
                # The request changed under us; the newer version's event re-decides.
                await self._after_failed_write(record, error)
            elif not error.not_found:
                log.warning("%s/%s: status write failed: %s", self.namespace, name, error)
            return
        except (OSError, TimeoutError) as error:
            log.warning("%s/%s: status write failed: %s", self.namespace, name, error)
            return
        fresh = RequestRecord.of(obj)
        current = self.requests.get(name)
        if current is not None and current.meta.uid == fresh.meta.uid:
            fresh.seq, fresh.seen = current.seq, current.seen
            if _rv_newer_or_same(fresh.meta.resource_version, current.meta.resource_version):
                self.requests[name] = fresh

    # -------------------------------------------------------------- pool and host status

    def _maybe_flush(self) -> None:
        """Start a status write (in a task of its own, so decisions never wait for it) when
        the interval has passed and something changed; pool and host status independently."""
        clock = time.monotonic()
        interval = self.controller.settings.status_interval
        loop = asyncio.get_running_loop()
        if (
            self.pool_dirty
            and _idle(self.pool_flush)
            and clock - self.last_status_write >= interval
        ):
            self.pool_dirty = False
            self.last_status_write = clock
            self.pool_flush = loop.create_task(self._flush_pool())
        # Host status waits for a quiet moment (or the maximum delay): during a storm every
        # assignment changes some host's counts, and one write per host per second would
        # cost as much as the assignments themselves.
        if (
            self.hosts_dirty
            and _idle(self.host_flush)
            and (
                clock - self.last_activity >= interval
                or clock - self.last_host_write >= self.controller.settings.host_status_max_delay
            )
        ):
            self.hosts_dirty = False
            self.last_host_write = clock
            self.host_flush = loop.create_task(self._flush_hosts())
        # Otherwise the loop wakes again when one is due (_next_timer).

    async def _flush_pool(self) -> None:
        try:
            await self._write_pool_status(self._session_counts())
        except Exception:
            log.exception("%s/%s: pool status write failed", self.namespace, self.name)
            self.pool_dirty = True
        finally:
            self.wake.set()  # re-check: more may have changed meanwhile

    async def _flush_hosts(self) -> None:
        try:
            await self._write_host_statuses(self._session_counts())
        except Exception:
            log.exception("%s/%s: host status write failed", self.namespace, self.name)
            self.hosts_dirty = True
        finally:
            self.wake.set()

    def _host_status(
        self,
        host: HostRecord,
        counts: dict[str | None, dict[str, int]],
        buckets: dict[str, int],
    ) -> dict[str, Any]:
        name = host.meta.name
        balancer = self.balancer
        now = _now()
        desired: list[cond.Cond] = []
        status: dict[str, Any] = {"observedGeneration": host.meta.generation}
        view = balancer.host(name) if balancer is not None else None
        if host.spec is None:
            desired.append(cond.Cond("Available", "False", "InvalidSpec", host.spec_error or ""))
        elif self.pool is None:
            desired.append(
                cond.Cond(
                    "Available", "False", "PoolNotFound", f"HostPool {self.name!r} does not exist"
                )
            )
        elif balancer is None or view is None:
            desired.append(
                cond.Cond("Available", "False", "PoolInvalid", "the pool's spec is invalid")
            )
        else:
            available, reason = balancer.availability(name)
            messages = {
                "Draining": "drain mode: no new sessions; reconnects still allowed",
                "SessionLimitReached": f"{view.sessions} sessions, limit {balancer.limit}",
                "LogonStormThreshold": "turning new logons away (logon-storm threshold)",
                "AcceptingSessions": f"{view.sessions} of {balancer.limit} sessions",
            }
            desired.append(
                cond.Cond("Available", "True" if available else "False", reason, messages[reason])
            )
            status["loadIndex"] = balancer.load_index_of(name)
            if name in buckets:
                status["bucket"] = buckets[name]
        status["sessions"] = counts.get(name, _zero_counts())
        if host.metrics_error:
            desired.append(cond.Cond("MetricsStale", "True", "InvalidMetrics", host.metrics_error))
        elif name in self.stale_hosts:
            desired.append(
                cond.Cond(
                    "MetricsStale",
                    "True",
                    "SampleTooOld",
                    f"metrics older than {self.controller.settings.metrics_stale_after:.0f}s are "
                    "ignored: the load index treats them as never reported",
                )
            )
        else:
            desired.append(cond.Cond("MetricsStale", "False", "Fresh", ""))
        status["conditions"] = cond.merge(
            host.status.get("conditions"), desired, now=now, generation=host.meta.generation
        )
        return status

    def _session_counts(self) -> dict[str | None, dict[str, int]]:
        """Sessions by state, per host and (under None) for the whole pool, in one pass.

        A session is connecting within connectingTimeoutSeconds of its assignment unless an
        agent reported otherwise; disconnected when every request holding it says so; active
        otherwise."""
        counts: dict[str | None, dict[str, int]] = {}
        for session in self.sessions.values():
            if session.connecting_until is not None:
                state = "connecting"
            else:
                states = {
                    self.requests[h].session_state for h in session.holders if h in self.requests
                }
                disconnected = states == {SessionState.DISCONNECTED.value}
                state = "disconnected" if disconnected else "active"
            for key in (session.host, None):
                bucket = counts.setdefault(key, _zero_counts())
                bucket["total"] += 1
                bucket[state] += 1
        return counts

    async def _write_host_statuses(self, counts: dict[str | None, dict[str, int]]) -> None:
        balancer = self.balancer
        horizon = balancer is not None and balancer.algorithm.value == "Horizon"
        buckets = balancer.buckets() if balancer is not None and horizon else {}
        changed = []
        for host in list(self.hosts.values()):
            status = self._host_status(host, counts, buckets)
            previous = self.written_host_status.get(host.meta.name)
            if previous is not None and _same_status(previous, status):
                continue
            if previous is None and _same_status(_ours(host.status, status), status):
                self.written_host_status[host.meta.name] = status
                continue
            changed.append((host, status))
        await asyncio.gather(*(self._write_host_status(h, st) for h, st in changed))

    async def _write_host_status(self, host: HostRecord, status: dict[str, Any]) -> None:
        async with self.status_writes:
            try:
                await self.controller.client.patch_status(
                    HOSTS, self.namespace, host.meta.name, status
                )
                self.written_host_status[host.meta.name] = status
                host.status.update(status)
            except ApiError as error:
                if not error.not_found:
                    log.warning("%s/%s: host status: %s", self.namespace, host.meta.name, error)
                    self.status_dirty = True
            except (OSError, TimeoutError) as error:
                log.warning("%s/%s: host status: %s", self.namespace, host.meta.name, error)
                self.status_dirty = True

    def pool_status(self, counts: dict[str | None, dict[str, int]]) -> dict[str, Any]:
        assert self.pool is not None
        now = _now()
        balancer = self.balancer
        waiting_reasons = {
            self.requests[n].status.get("reason") for n in self.waiting if n in self.requests
        }
        pending = sum(
            1
            for r in self.requests.values()
            if r.phase not in (Phase.ASSIGNED.value, Phase.FAILED.value)
            and r.meta.name not in self.inflight
        )
        hosts = {"total": len(self.hosts), "available": 0, "draining": 0, "full": 0}
        capacity = {"total": 0, "free": 0}
        if balancer is not None:
            for view in balancer.hosts():
                if view.drain_mode:
                    hosts["draining"] += 1
                else:
                    capacity["total"] += balancer.limit
                if view.sessions >= balancer.limit:
                    hosts["full"] += 1
                if balancer.availability(view.name)[0]:
                    hosts["available"] += 1
            capacity["free"] = balancer.free_slots()
        desired: list[cond.Cond] = []
        if self.pool.spec is None:
            desired.append(cond.Cond("Ready", "False", "InvalidSpec", self.pool.spec_error or ""))
            desired.append(cond.Cond("Saturated", "Unknown", "InvalidSpec", "the spec is invalid"))
        else:
            if hosts["total"] == 0:
                desired.append(
                    cond.Cond("Ready", "True", "NoHosts", "the pool has no SessionHost yet")
                )
            else:
                desired.append(
                    cond.Cond(
                        "Ready",
                        "True",
                        "Reconciled",
                        f"{hosts['available']} of {hosts['total']} hosts take new sessions",
                    )
                )
            saturated = Reason.POOL_SATURATED.value in waiting_reasons
            if saturated:
                desired.append(
                    cond.Cond(
                        "Saturated",
                        "True",
                        "RequestsWaiting",
                        f"{pending} request(s) wait for a free session slot",
                    )
                )
            elif hosts["total"] and capacity["free"] == 0:
                desired.append(
                    cond.Cond("Saturated", "True", "NoFreeSessions", "every slot is taken")
                )
            else:
                desired.append(
                    cond.Cond(
                        "Saturated", "False", "CapacityAvailable", f"{capacity['free']} free slots"
                    )
                )
        if self.scaling_limited is not None:
            limited, message = self.scaling_limited
            desired.append(
                cond.Cond(
                    "ScalingLimited",
                    "True" if limited else "False",
                    "MaxHostsReached" if limited else "WithinLimits",
                    message,
                )
            )
        return {
            "observedGeneration": self.pool.meta.generation,
            "hosts": hosts,
            "sessions": counts.get(None, _zero_counts()),
            "capacity": capacity,
            "pendingRequests": pending,
            "conditions": cond.merge(
                self.pool.status.get("conditions"),
                desired,
                now=now,
                generation=self.pool.meta.generation,
            ),
        }

    async def _write_pool_status(self, counts: dict[str | None, dict[str, int]]) -> None:
        if self.pool is None:
            return
        status = self.pool_status(counts)
        self.controller.metrics.pool_state(self.namespace, self.name, status)
        previous = self.written_pool_status
        clock = time.monotonic()
        settings = self.controller.settings
        if not pool_status_due(
            previous,
            status,
            busy=clock - self.last_activity < settings.status_interval,
            since_written=clock - self.pool_status_written_at,
            max_delay=settings.pool_status_max_delay,
        ):
            if previous is not None and not _same_status(previous, status):
                self.pool_dirty = True  # counts only, mid-storm: at the pause or the max delay
            return
        saturated = cond.find(status["conditions"], "Saturated")
        is_saturated = saturated is not None and saturated.get("status") == "True"
        if self.saturated_since is not None and is_saturated != self.saturated_since:
            reason = "PoolSaturated" if is_saturated else "PoolRecovered"
            message = saturated.get("message", "") if saturated else ""
            self.controller.event(self.pool.body, "HostPool", reason, str(message), "Normal")
        self.saturated_since = is_saturated
        try:
            await self.controller.client.patch_status(POOLS, self.namespace, self.name, status)
            self.written_pool_status = status
            self.pool_status_written_at = time.monotonic()
            self.pool.status.update(status)
        except ApiError as error:
            if not error.not_found:
                log.warning("%s/%s: pool status write failed: %s", self.namespace, self.name, error)
                self.status_dirty = True
        except (OSError, TimeoutError) as error:
            log.warning("%s/%s: pool status write failed: %s", self.namespace, self.name, error)
            self.status_dirty = True


def _idle(task: asyncio.Task[None] | None) -> bool:
    return task is None or task.done()


def _zero_counts() -> dict[str, int]:
    return {"total": 0, "connecting": 0, "active": 0, "disconnected": 0}


def _meta_dict(meta: Meta) -> dict[str, Any]:
    return {
        "namespace": meta.namespace,
        "name": meta.name,
        "uid": meta.uid,
        "resourceVersion": meta.resource_version,
    }


def _without_times(status: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(status)
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions") or []
    ]
    return out


def _same_status(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return _without_times(a) == _without_times(b)


#: HostPool status fields that only count: during a storm they change with every placement.
POOL_COUNT_FIELDS = frozenset({"hosts", "sessions", "capacity", "pendingRequests"})


def _pool_status_gist(status: Mapping[str, Any]) -> dict[str, Any]:
    """A pool status without its counts: every other field, and each condition's type, status
    and reason (condition messages quote counts)."""
    gist = {k: v for k, v in status.items() if k not in POOL_COUNT_FIELDS and k != "conditions"}
    gist["conditions"] = sorted(
        (str(c.get("type")), str(c.get("status")), str(c.get("reason")))
        for c in status.get("conditions") or []
    )
    return gist


def pool_status_due(
    previous: Mapping[str, Any] | None,
    status: Mapping[str, Any],
    *,
    busy: bool,
    since_written: float,
    max_delay: float,
) -> bool:
    """Whether a pool's new status is written now.

    A pool status of counts alone would otherwise be written every status interval for as
    long as a storm lasts, per pool: with many pools that is as many writes per second, taken
    from the API server the assignments need. So while placements go on (``busy``), a change
    of counts only waits for the pause, or ``max_delay`` since the last write; anything else
    (a condition's status or reason, observedGeneration) is written at once.
    """
    if previous is None:
        return True
    if _same_status(previous, status):
        return False
    if not busy or since_written >= max_delay:
        return True
    return _pool_status_gist(previous) != _pool_status_gist(status)


def _ours(current: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``current`` that the operator writes (as ``template`` has them)."""
    return {k: current.get(k) for k in template}


# ------------------------------------------------------------------------------ metrics hook


class MetricsSink:
    """Where the controller reports what it did (Prometheus in the operator, nothing in tests)."""

    def observe_assignment(
        self, namespace: str, pool: str, reason: str, seconds: float, *, queued: float
    ) -> None:
        """A request was assigned: ``seconds`` from first sight to the written status,
        ``queued`` from first sight to the write being sent."""

    def scaled(self, namespace: str, pool: str, direction: str, hosts: int) -> None:
        """Hosts were added ("up") or removed ("down")."""

    def pool_state(self, namespace: str, pool: str, status: Mapping[str, Any]) -> None:
        """The pool's latest status (hosts, sessions, capacity, pending)."""

    def forget_pool(self, namespace: str, pool: str) -> None:
        """The pool is gone: drop its series."""


# ------------------------------------------------------------------------------ controller


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
        self.events = EventLimiter(self.settings.event_interval)
        self.write_slots = WriteSlots(self.settings.write_concurrency)
        self.pools: dict[Key, PoolWorker] = {}
        self.host_pool: dict[Key, str] = {}  # a host's pool (poolRef is immutable, but be sure)
        self.request_pool: dict[Key, str] = {}
        self._seq = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self.informers: list[Informer] = []
        self.started = False

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def worker(self, namespace: str, pool: str) -> PoolWorker:
        key = (namespace, pool)
        worker = self.pools.get(key)
        if worker is None:
            worker = self.pools[key] = PoolWorker(self, namespace, pool)
            if self.started:
                worker.start()
        return worker

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    def event(
        self, involved: Mapping[str, Any], kind: str, reason: str, message: str, type_: str
    ) -> None:
        self.spawn(
            self.client.post_event(involved, kind=kind, reason=reason, message=message, type_=type_)
        )

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
            self.controller_event_pool_deleted(worker)
            self._forget_if_idle(worker)
        else:
            record = PoolRecord.of(obj)
            known = worker.pool
            if (
                known is not None
                and known.meta.uid == record.meta.uid
                and not _rv_newer_or_same(record.meta.resource_version, known.meta.resource_version)
            ):
                return
            worker.on_pool(record)

    def _host_left(self, key: tuple[str, str], pool: str) -> None:
        worker = self.worker(key[0], pool)
        worker.on_host_deleted(key[1])
        self._forget_if_idle(worker)

    def _request_left(self, key: tuple[str, str], pool: str) -> None:
        worker = self.worker(key[0], pool)
        worker.on_request_deleted(key[1])
        self._forget_if_idle(worker)

    def _forget_if_idle(self, worker: PoolWorker) -> None:
        """A pool name nothing refers to any more (no pool, host or request) loses its
        worker and its metric series, so names that come and go never pile up."""
        key = (worker.namespace, worker.name)
        if self.pools.get(key) is not worker or not worker.idle():
            return
        del self.pools[key]
        self.metrics.forget_pool(*key)
        self.spawn(worker.stop())

    def controller_event_pool_deleted(self, worker: PoolWorker) -> None:
        if worker.requests and self.events.allow("pool-deleted", worker.namespace, worker.name):
            log.info(
                "%s/%s: pool deleted; its pending requests wait for it",
                worker.namespace,
                worker.name,
            )

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
        existing = worker.hosts.get(key[1])
        if (
            existing is not None
            and existing.meta.uid == record.meta.uid
            and not _rv_newer_or_same(record.meta.resource_version, existing.meta.resource_version)
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
