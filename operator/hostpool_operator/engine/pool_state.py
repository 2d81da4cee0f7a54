"""Everything the operator knows of one pool, and how each observation changes it.

Pure: the records of the pool, its hosts and its requests; the session ledger; the views of
its hosts and the engine built from them (``views``, a :class:`~.host_views.HostViews`); and
the queues of the placement pass (new arrivals, requests waiting for capacity, assignments
being written). It owns two parts that keep state of their own and read the pool's records:
what falls due on its sessions (``limit_watch``, a :class:`~.limit_watch.LimitWatch`) and, in
a personal pool, whose each host is (``personal``, a :class:`~.personal_state.PersonalState`).
Methods take ``now`` and return what the I/O side has to do (a request to fail), never doing
it themselves. One :class:`PoolState` per pool, driven by one task
(``controller.pool.worker``), so its changes never interleave.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import InitVar, dataclass, field
from datetime import datetime, timedelta

from ..api import (
    DEFAULT_CONNECTING_TIMEOUT_SECONDS,
    HostPoolSpec,
    LoadBalancerType,
    Phase,
    Reason,
    SessionState,
)
from ..api.timestamps import parse_time
from ..api.update import UpdatePhase, template_revision
from ..api.vocabulary import TEMPLATE_REVISION_LABEL
from .balancer_view import Placement
from .host_views import HostViews
from .ledger import Session, SessionLedger
from .limit_watch import LimitWatch
from .personal_state import PersonalState
from .records import HostRecord, PoolRecord, RequestRecord, newer_or_same
from .workloads import WorkloadRecord, WorkloadState, host_address, workload_state

log = logging.getLogger(__name__)


@dataclass
class PoolState:
    """One pool's records, sessions and placement queues."""

    namespace: str
    name: str
    #: Host metrics sampled longer ago than this (seconds) are treated as never reported.
    metrics_stale_after: InitVar[float] = 120.0
    #: During an image update, new sessions go to updated hosts first (False: placement as
    #: if no update ran, only to measure what the preference brings: bench-update).
    prefer_updated: bool = True
    pool: PoolRecord | None = None
    hosts: dict[str, HostRecord] = field(default_factory=dict)
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    ledger: SessionLedger = field(default_factory=SessionLedger)
    arrivals: dict[str, None] = field(default_factory=dict)  # request names, arrival order
    waiting: dict[str, None] = field(default_factory=dict)  # could not be placed yet
    inflight: set[str] = field(default_factory=set)  # assignment writes on their way
    pending_said: dict[str, Reason] = field(default_factory=dict)  # last pending reason written
    removing: set[str] = field(default_factory=set)  # hosts being deleted by scale-down
    #: Personal pools: hosts whose workload the operator deleted after stopAfterMinutes
    #: unused (status.power Stopped); their user's next connect starts them.
    power_off: set[str] = field(default_factory=set)
    #: Personal pools: hosts to start in this pass (a connect found them stopped).
    starts: set[str] = field(default_factory=set)
    #: Personal pools: since when each running host has had no session.
    unused_since: dict[str, datetime] = field(default_factory=dict)
    empty_since: dict[str, datetime] = field(default_factory=dict)  # managed, no session
    #: The workload of each host with a workloadRef whose kind has been listed (None: it
    #: does not exist). A host missing here has a workload not observed yet.
    workloads: dict[str, WorkloadRecord | None] = field(default_factory=dict)
    #: Capacity may have appeared since the last pass: the waiting requests are tried again.
    capacity_changed: bool = False
    #: Sessions that were in the API (``Session.started``) and ended since the controller
    #: last took the count (``take_sessions_ended``): logoffs, and sessions on lost hosts.
    sessions_ended: int = 0
    #: The algorithm a scaling plan's phase places with (None: the pool's own).
    algorithm: LoadBalancerType | None = None
    #: Hosts a scaling plan decided to drain in this pass: closed to new sessions at once, as
    #: if drained, while the drain is written (else the emptiest host, the one a ramp-down
    #: drains, is where breadth-first sends the next logons, whose users it then logs off).
    plan_closed: frozenset[str] = frozenset()
    #: The revision of the pool's host template (None: it has none), and the revision whose
    #: update failed (status.update; None: none did). While an update of the current
    #: revision runs, placement prefers the hosts made from it.
    revision: str | None = None
    failed_revision: str | None = None
    #: Metrics freshness, each host's view and the balancer built from them.
    views: HostViews = field(init=False, repr=False, compare=False)
    #: The session limits' looks and the forced logoffs' deadlines.
    limit_watch: LimitWatch = field(init=False, repr=False, compare=False)
    #: Personal pools: the claims, the assignments as seen, the deletions of files.
    personal: PersonalState = field(init=False, repr=False, compare=False)

    def __post_init__(self, metrics_stale_after: float) -> None:
        self.views = HostViews(self, metrics_stale_after=metrics_stale_after)
        self.limit_watch = LimitWatch(self)
        self.personal = PersonalState(self)

    @property
    def spec(self) -> HostPoolSpec | None:
        return None if self.pool is None else self.pool.spec

    @property
    def forgotten(self) -> bool:
        """Nothing refers to this pool name any more: no pool, host or request."""
        return self.pool is None and not self.hosts and not self.requests

    def placement_spec(self) -> HostPoolSpec | None:
        """The spec the engine places with: the pool's, with a plan phase's algorithm."""
        spec = self.spec
        if spec is None or self.algorithm in (None, spec.load_balancer.type):
            return spec
        balancer = spec.load_balancer.model_copy(update={"type": self.algorithm})
        return spec.model_copy(update={"load_balancer": balancer})

    def set_algorithm(self, algorithm: LoadBalancerType | None) -> bool:
        """A plan's phase changed the algorithm (None: back to the pool's). True if the
        engine places differently now."""
        if algorithm == self.algorithm:
            return False
        before = self.placement_spec()
        self.algorithm = algorithm
        after = self.placement_spec()
        balancer = self.views.balancer
        if balancer is not None and after is not None and after != before:
            balancer.set_spec(after)
            self.capacity_changed = True
        return after != before

    def connecting_timeout(self) -> timedelta:
        spec = self.spec
        seconds = (
            DEFAULT_CONNECTING_TIMEOUT_SECONDS if spec is None else spec.connecting_timeout_seconds
        )
        return timedelta(seconds=seconds)

    def workload_state(self, host: HostRecord, now: datetime) -> WorkloadState | None:
        """The host's workload as decisions see it (None: the host has no workloadRef)."""
        if host.spec is None or host.spec.workload_ref is None:
            return None
        spec = self.spec
        scaling = spec.scaling if spec is not None else None
        timeout = scaling.host_ready_timeout_seconds if scaling is not None else 600
        return workload_state(
            host.spec.workload_ref,
            self.workloads.get(host.meta.name),
            known=host.meta.name in self.workloads,
            managed=host.managed,
            host_created=parse_time(host.meta.created),
            ready_timeout=timeout,
            now=now,
        )

    def is_outdated(self, host: HostRecord) -> bool:
        """A host the operator made from an earlier template of the pool, while the update
        to the current one has not failed. (A host without the label is the current
        revision's: hosts made before revisions were kept are adopted, not replaced.)"""
        made_from = host.meta.labels.get(TEMPLATE_REVISION_LABEL)
        return (
            made_from is not None
            and self.revision is not None
            and made_from != self.revision
            and self.failed_revision != self.revision
            and host.managed
        )

    def placed_last(self, host: HostRecord) -> bool:
        """An outdated host, which placement chooses only when no updated host has room."""
        return self.prefer_updated and self.is_outdated(host)

    def address_of(self, host: HostRecord) -> str | None:
        return host_address(host, self.workloads.get(host.meta.name))

    def rebuild_balancer(self, now: datetime) -> None:
        """(Re)build the engine from the records, after the pool appears or becomes valid."""
        if self.views.rebuild(self.placement_spec(), now):
            self.capacity_changed = True

    def recheck_metrics(self, now: datetime) -> bool:
        """Metrics go stale with time alone. True if a host's staleness changed."""
        changed = self.views.recheck_metrics(now)
        if changed:
            self.capacity_changed = True
        return changed

    # -------------------------------------------------------------- workloads

    def observe_workload(
        self, host: str, workload: WorkloadRecord | None, *, known: bool, now: datetime
    ) -> list[tuple[RequestRecord, str]]:
        """The workload under ``host`` was observed. If it is gone (or has ended) while the
        host holds sessions, those sessions are gone too: their requests are returned, to
        fail (never moved)."""
        if not known:
            self.workloads.pop(host, None)
        else:
            self.workloads[host] = workload
        lost: list[tuple[RequestRecord, str]] = []
        if known and (workload is None or workload.terminal) and self.ledger.count_on(host):
            lost = self._end_sessions_on(host)
        record = self.hosts.get(host)
        if record is not None:
            self.views.refresh_host(record, now)
        self.capacity_changed = True
        return lost

    # -------------------------------------------------------------- observations

    def set_pool(self, record: PoolRecord | None, now: datetime) -> None:
        old = self.pool
        self.pool = record
        balancer = self.views.balancer
        revisions = (self.revision, self.failed_revision)
        self.revision, self.failed_revision = update_revisions(record)
        if record is None or record.spec is None:
            self.views.balancer = None
        elif balancer is None or old is None or old.spec is None:
            self.rebuild_balancer(now)
        elif revisions != (self.revision, self.failed_revision):
            self.rebuild_balancer(now)  # which hosts are outdated changed: every view
        elif old.spec != record.spec:
            balancer.set_spec(self.placement_spec() or record.spec)
        # Connecting sessions are timed again when the timeout changes, and when the pool first
        # becomes valid (sessions observed before it got the default).
        old_timeout = (
            None if old is None or old.spec is None else old.spec.connecting_timeout_seconds
        )
        if (
            record is not None
            and record.spec is not None
            and record.spec.connecting_timeout_seconds != old_timeout
        ):
            for session in self.ledger.retime(self.connecting_timeout(), now):
                self._settled(session)
        spec = self.spec
        self.limit_watch.set_limits(None if spec is None else spec.session_limits, now)
        self.capacity_changed = True

    def put_host(self, record: HostRecord, now: datetime) -> None:
        if record.meta.name not in self.hosts and record.status.get("power") == "Stopped":
            self.power_off.add(record.meta.name)  # stopped before this operator started
        self.hosts[record.meta.name] = record
        self.personal.observe_host(record)
        self.views.note_sample(record, now)
        self.views.refresh_host(record, now)
        self.capacity_changed = True

    def drop_host(self, name: str) -> list[tuple[RequestRecord, str]]:
        """The host is gone, and so are its sessions: returns the requests that held them
        (they fail, they are never moved) with the host's name."""
        self.hosts.pop(name, None)
        self.removing.discard(name)
        self.personal.forget_host(name)
        self.power_off.discard(name)
        self.starts.discard(name)
        self.unused_since.pop(name, None)
        self.empty_since.pop(name, None)
        self.workloads.pop(name, None)
        self.views.forget(name)
        lost = self._end_sessions_on(name)
        self.capacity_changed = True
        return lost

    def _end_sessions_on(self, name: str) -> list[tuple[RequestRecord, str]]:
        """Every session on the host ends; the requests that held them, with the host."""
        ended = self.ledger.end_on(name)
        self.sessions_ended += sum(1 for session in ended if session.started)
        return [
            (request, name)
            for session in ended
            for holder in sorted(session.holders)
            if (request := self.requests.get(holder)) is not None
        ]

    def take_sessions_ended(self) -> int:
        """The sessions that ended since the last call (for the metrics)."""
        ended, self.sessions_ended = self.sessions_ended, 0
        return ended

    def put_request(
        self, record: RequestRecord, now: datetime, *, seq: Callable[[], int], seen: float
    ) -> RequestRecord | None:
        """A request was added or changed. Returns it if it claims a session on a host that
        no longer exists (that session is gone: the request fails)."""
        name = record.meta.name
        previous = self.requests.get(name)
        if previous is not None and previous.meta.uid != record.meta.uid:
            self.forget_request(previous)  # a namesake replaced the old one
            previous = None
        if previous is not None and not newer_or_same(
            record.meta.resource_version, previous.meta.resource_version
        ):
            return None  # stale event: a newer version is known
        record.seq = previous.seq if previous is not None else seq()
        record.seen = previous.seen if previous is not None else seen
        self.requests[name] = record
        self.limit_watch.observe(record, now)
        if name in self.inflight:
            return None  # our own write is on its way; its answer decides
        phase = record.phase
        if phase == Phase.ASSIGNED.value and record.host:
            return None if self.observe_assigned(record, now) else record
        if phase == Phase.FAILED.value:
            self.forget_request(record)
        else:
            if self.holds_session(record):
                # Someone reset a status we had written: release and place again.
                self.release(record)
            if name not in self.waiting:
                self.arrivals[name] = None
        return None

    def drop_request(self, name: str) -> None:
        self.pending_said.pop(name, None)
        record = self.requests.pop(name, None)
        self.limit_watch.forget(name)
        self.arrivals.pop(name, None)
        self.waiting.pop(name, None)
        if record is not None:
            self.release(record)
        self.capacity_changed = True

    def forget_request(self, record: RequestRecord) -> None:
        """The request leaves the queues and its session (a Failed request, a namesake); the
        reason last written for it no longer holds either (a namesake starts afresh, and a
        Failed request waits for nothing, so scaling must not count it)."""
        self.release(record)
        self.arrivals.pop(record.meta.name, None)
        self.waiting.pop(record.meta.name, None)
        self.pending_said.pop(record.meta.name, None)
        self.limit_watch.looks.forget(record.meta.name)

    # -------------------------------------------------------------- sessions

    def holds_session(self, record: RequestRecord) -> bool:
        return record.demand is not None and self.ledger.holds(record.demand.user, record.meta.name)

    def connecting_deadline(self, record: RequestRecord, now: datetime) -> datetime | None:
        """Until when this assigned request's session counts as connecting (None: not)."""
        if record.session_state != SessionState.CONNECTING.value:
            return None
        if record.reason != Reason.NEW_SESSION.value:
            return None
        assigned = record.assigned_at
        if assigned is None:
            return None
        deadline = assigned + self.connecting_timeout()
        return deadline if deadline > now else None

    def observe_assigned(self, record: RequestRecord, now: datetime) -> bool:
        """An assigned request seen in the API: adopt its session if it is new to us. False
        when the session is on a host that no longer exists."""
        name = record.meta.name
        self.arrivals.pop(name, None)
        self.waiting.pop(name, None)
        if record.demand is None or record.host is None:
            return True
        user = record.demand.user
        session = self.ledger.session_of(user)
        if session is None:
            if record.host not in self.hosts:
                return False
            deadline = self.connecting_deadline(record, now)
            session = self.ledger.open(
                user, record.host, assigned_at=record.assigned_at, connecting_until=deadline
            )
            if self.views.balancer is not None:
                self.views.balancer.session_started(record.host, connecting=deadline is not None)
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
        session.add_holder(name)
        session.started = True
        # An agent reporting Active/Disconnected ends the connecting phase.
        if record.session_state in (SessionState.ACTIVE.value, SessionState.DISCONNECTED.value):
            settled = self.ledger.settle(user)
            if settled is not None:
                self._settled(settled)
        return True

    def reserve(self, record: RequestRecord, placement: Placement, now: datetime) -> None:
        """The decision takes its slot before it is written, so the next one sees it."""
        assert record.demand is not None
        assert placement.host is not None
        user = record.demand.user
        if self.ledger.session_of(user) is None:
            self.ledger.open(
                user,
                placement.host,
                assigned_at=now,
                connecting_until=now + self.connecting_timeout(),
            )
            if self.views.balancer is not None:
                self.views.balancer.session_started(placement.host, connecting=True)
        self.ledger.hold(user, record.meta.name)
        self.inflight.add(record.meta.name)

    def assignment_written(self, record: RequestRecord, *, new_session: bool) -> None:
        """The assignment write of a new session applied: the reservation is a session in
        the API now (its end will count). Ended already (the request was deleted or replaced
        while the write was on its way): it counts as ended at once, as it was counted as
        assigned."""
        if not new_session or record.demand is None:
            return
        session = self.ledger.session_of(record.demand.user)
        if session is not None and record.meta.name in session.holders:
            session.started = True
        else:
            self.sessions_ended += 1

    def release(self, record: RequestRecord) -> None:
        """This request no longer holds its user's session; the last holder ends it."""
        if record.demand is None:
            return
        ended = self.ledger.release(record.demand.user, record.meta.name)
        if ended is None:
            return
        if ended.started:
            self.sessions_ended += 1
        if self.views.balancer is not None:
            self.views.balancer.session_ended(ended.host, was_connecting=ended.connecting)
        self.capacity_changed = True

    def expire_connecting(self, now: datetime) -> bool:
        """Sessions past their connecting deadline settle. True if any did."""
        settled = self.ledger.expire(now)
        for session in settled:
            self._settled(session)
        return bool(settled)

    def _settled(self, session: Session) -> None:
        if self.views.balancer is not None:
            self.views.balancer.adjust_connecting(session.host, -1)
        self.capacity_changed = True

    # -------------------------------------------------------------- scaling

    def close_for_plan(self, names: Iterable[str], now: datetime) -> None:
        """The hosts the plan drains in this pass take no new session from now on (a user
        with a session there still reconnects to it, as to any draining host)."""
        wanted = frozenset(name for name in names if name in self.hosts)
        if wanted == self.plan_closed:
            return
        changed = wanted ^ self.plan_closed
        self.plan_closed = wanted
        for name in sorted(changed):
            host = self.hosts.get(name)
            if host is not None:
                self.views.refresh_host(host, now)
        self.capacity_changed = True

    def begin_removal(self, names: list[str]) -> None:
        """Out of the engine first, so no request can be placed on a host being removed."""
        for name in names:
            self.removing.add(name)
            self.empty_since.pop(name, None)
            self.views.withdraw(name)

    def abort_removal(self, name: str, now: datetime) -> None:
        """The host could not be removed: back into the engine."""
        self.removing.discard(name)
        record = self.hosts.get(name)
        if record is not None:
            self.views.refresh_host(record, now)
            self.capacity_changed = True  # its slots are there again for waiting requests


# ------------------------------------------------------------------ for status


def update_revisions(record: PoolRecord | None) -> tuple[str | None, str | None]:
    """(the pool's template revision, the revision whose update failed) of a pool record."""
    spec = record.spec if record is not None else None
    if record is None or spec is None or spec.scaling is None:
        return None, None
    revision = template_revision(spec.scaling.host_template)
    update = record.status.get("update")
    failed = None
    if isinstance(update, Mapping) and update.get("phase") == UpdatePhase.FAILED.value:
        failed = update.get("revision") if isinstance(update.get("revision"), str) else None
    return revision, failed


def pending_count(state: PoolState) -> int:
    """Requests neither assigned nor failed, and not being written."""
    return sum(
        1
        for r in state.requests.values()
        if r.phase not in (Phase.ASSIGNED.value, Phase.FAILED.value)
        and r.meta.name not in state.inflight
    )


def waiting_reasons(state: PoolState) -> set[object]:
    """The reasons the waiting requests' stored statuses give."""
    return {state.requests[n].reason for n in state.waiting if n in state.requests}


def reports_metrics(state: PoolState) -> bool:
    """Some host reports when its metrics were sampled (so they can go stale)."""
    return any(
        h.metrics is not None and h.metrics.sampled_at is not None for h in state.hosts.values()
    )
