"""One pool's task: takes in its watch events, runs its placement passes one at a time, and
carries out what they decide.

Gather (``on_*``, called by the controller for this pool's objects) → decide
(``engine.pool_state``, ``engine.placement``, ``scaling``: pure) → apply (``request_writer``,
``status_flusher``, ``host_scaler``). The loop sleeps until an event wakes it or a timer is
due: a connecting deadline, a status flush, metrics going stale, a scale-down delay ending.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from ...api import Phase
from ...diagnostics.connects import connects_of, ended_since, phases_of
from ...engine.personal import Assignment
from ...engine.placement import Assign, Reject, Wait, place_pending
from ...engine.pool_state import PoolState, reports_metrics
from ...engine.records import HostRecord, PlanRecord, PoolRecord, RequestRecord
from ...engine.time_limits import BadFactsError
from ...engine.workloads import WorkloadRecord
from ...scaling import pool as pool_scaling
from ..deps import Deps
from .data_keeper import DataKeeper
from .host_scaler import HostScaler
from .host_updater import HostUpdater
from .plan_keeper import PlanKeeper
from .power_keeper import PowerKeeper
from .request_writer import RequestWriter
from .status_flusher import StatusFlusher
from .workload_keeper import WorkloadKeeper

log = logging.getLogger(__name__)

#: Sessions the session limits look at in one pass, at most (at a start, every held session
#: of a pool with limits is due at once; the pass must not keep placements waiting).
LIMIT_LOOKS_PER_PASS = 1_000


#: A second host of a user not taken back (it changed, or the write was refused) is looked
#: at again after this long.
RELOOK_SECONDS = 1.0


def _now() -> datetime:
    return datetime.now(UTC)


class HostRouter(Protocol):
    """Where objects the pool wrote are reported (the controller, which routes them), and
    who hears that a pool's entry in its scaling plan's status changed."""

    def on_host_event(self, kind: str | None, obj: Mapping[str, Any]) -> None: ...

    def on_request_event(self, kind: str | None, obj: Mapping[str, Any]) -> None: ...

    def on_plan_report(self, namespace: str, plan: str) -> None: ...


class PoolWorker:
    """One pool: its state, its decision loop, and the parts that write for it."""

    def __init__(self, deps: Deps, router: HostRouter, namespace: str, name: str) -> None:
        self.deps = deps
        self.namespace = namespace
        self.name = name
        self.state = PoolState(
            namespace,
            name,
            metrics_stale_after=deps.settings.metrics_stale_after,
            prefer_updated=deps.settings.prefer_updated,
        )
        self.writer = RequestWriter(self.state, deps, self)
        #: Second hosts of a user being taken back (host, user): one write each at a time.
        self._taking_back: set[tuple[str, str]] = set()
        self.keeper = WorkloadKeeper(
            self.state,
            deps,
            workload_created=self._on_workload_written,
            wake=self.wake,
            mark_dirty=self.mark_dirty,
            host_changed=lambda obj: router.on_host_event("MODIFIED", obj),
        )
        self.power = PowerKeeper(self.state, deps, self.keeper, mark_dirty=self.mark_dirty)
        self.data = DataKeeper(
            self.state,
            deps,
            self.keeper,
            host_changed=lambda obj: router.on_host_event("MODIFIED", obj),
            wake=self.wake,
            mark_dirty=self.mark_dirty,
        )
        self.scaler = HostScaler(
            self.state,
            deps,
            self.keeper,
            host_created=lambda obj: router.on_host_event("ADDED", obj),
            wake=self.wake,
            mark_dirty=self.mark_dirty,
        )
        self.updater = HostUpdater(
            self.state,
            deps,
            self.scaler,
            host_changed=lambda obj: router.on_host_event("MODIFIED", obj),
            request_changed=lambda obj: router.on_request_event("MODIFIED", obj),
            wake=self.wake,
            mark_dirty=self.mark_dirty,
        )
        self.plans = PlanKeeper(
            self.state,
            deps,
            host_changed=lambda obj: router.on_host_event("MODIFIED", obj),
            request_changed=lambda obj: router.on_request_event("MODIFIED", obj),
            wake=self.wake,
            mark_dirty=self.mark_dirty,
            reported=lambda plan: router.on_plan_report(namespace, plan),
        )
        self.flusher = StatusFlusher(
            self.state,
            deps,
            scaling_limited=lambda: self.scaler.limited,
            wake=self.wake,
            workload_failure=self.keeper.workload_failure,
            scaling_plan=self.plans.pool_status,
            update=self.updater.status,
        )
        self._wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        #: On a standby: requests whose session ended with their host or workload (request ->
        #: (host, its workload is gone)), to be failed at take-over unless the leader did it.
        self._ended: dict[str, tuple[str, bool]] = {}
        self._logoff_grace = timedelta(seconds=deps.settings.logoff_grace)

    # -------------------------------------------------------------- life

    def start(self) -> None:
        if self.task is None:
            self.task = self.deps.supervise(f"pool {self.namespace}/{self.name}", "pool", self._run)

    def halt(self) -> None:
        """Cancel the loop and the writers' tasks now (``stop`` waits for them): a pool being
        forgotten runs no further pass, so no status flush brings its metric series back."""
        self.flusher.stop()
        self.scaler.stop()
        self.updater.stop()
        self.plans.stop()
        if self.task is not None:
            self.task.cancel()

    async def stop(self) -> None:
        self.halt()
        if self.task is not None:
            # wait, not `await task` under suppress(CancelledError): that would also swallow
            # a cancel of whoever is stopping the pool.
            await asyncio.wait({self.task})
            self.task = None

    @property
    def has_requests_to_place(self) -> bool:
        """Requests arrived or waiting for a host: what this pool's next pass may place."""
        return bool(self.state.arrivals or self.state.waiting)

    def take_over(self) -> None:
        """This instance leads now: what a standby saw but left to the leader is done unless
        the leader did it (the watch says): requests whose session ended with their host or
        workload are failed, and a user's second host is taken back. The rest (placement,
        status, scaling, limits, plans) is the loop's first pass."""
        ended, self._ended = self._ended, {}
        for name, (host, workload_gone) in ended.items():
            record = self.state.requests.get(name)
            if record is None or record.phase != Phase.ASSIGNED.value or record.host != host:
                continue  # failed, deleted or changed meanwhile: by the leader
            if workload_gone:
                self.deps.spawn(self.writer.write_workload_lost(record, host))
            else:
                self.deps.spawn(self.writer.write_host_lost(record, host))
        self._one_host_per_user()
        self._changed()

    def _session_ended(self, record: RequestRecord, host: str, *, workload_gone: bool) -> None:
        """The session of ``record`` ended with its host (or its workload): it fails."""
        if not self.deps.leading():
            self._ended[record.meta.name] = (host, workload_gone)
        elif workload_gone:
            self.deps.spawn(self.writer.write_workload_lost(record, host))
        else:
            self.deps.spawn(self.writer.write_host_lost(record, host))

    def wake(self) -> None:
        self._wake.set()

    def mark_dirty(self) -> None:
        self.flusher.mark_dirty()

    def _changed(self) -> None:
        """Capacity may have changed: status is dirty and the loop runs a pass."""
        self.flusher.mark_dirty()
        self._wake.set()

    # -------------------------------------------------------------- events

    def on_pool(self, record: PoolRecord | None) -> None:
        old = self.keeper.template()
        self.state.set_pool(record, _now())
        if self.keeper.template() != old:
            self.keeper.template_changed()
        self._changed()
        if record is not None and record.spec_error:
            self.deps.events.post(
                record.body,
                "HostPool",
                "InvalidSpec",
                record.spec_error,
                "Warning",
                once_per=("pool", self.namespace, self.name, "InvalidSpec"),
            )

    def on_plan(self, plan: PlanRecord | None) -> None:
        """The scaling plan this pool follows changed (None: none)."""
        if self.plans.set_plan(plan):
            self._changed()

    def on_host(self, record: HostRecord) -> None:
        self.state.put_host(record, _now())
        self.plans.observe_host(record)
        self._changed()
        user = record.spec.assigned_user if record.spec is not None else None
        if user is not None and self.state.personal.has_second_host(user):
            self._one_host_per_user()  # a pool scan: only when this user has two hosts
        if record.spec_error:
            self.deps.events.post(
                record.body,
                "SessionHost",
                "InvalidSpec",
                record.spec_error,
                "Warning",
                once_per=("host", self.namespace, record.meta.name, "InvalidSpec"),
            )

    def _one_host_per_user(self) -> None:
        """Takes back a user's second host (administrators' assigns raced), once a write."""
        if not self.deps.leading():
            return  # the leader does it; take_over looks again
        for assignment in self.state.personal.second_assignments(_now()):
            key = (assignment.host, assignment.user)
            if key in self._taking_back:
                continue
            self._taking_back.add(key)
            self.deps.spawn(self._take_back(assignment, key))

    async def _take_back(self, assignment: Assignment, key: tuple[str, str]) -> None:
        try:
            taken = await self.writer.take_back(assignment)
            if not taken:
                # Changed or refused: a host event that came meanwhile was not acted on, and
                # a real second host must not wait for the next one; at most once a second.
                await asyncio.sleep(RELOOK_SECONDS)
        finally:
            self._taking_back.discard(key)
        self._one_host_per_user()

    def on_host_deleted(self, name: str) -> None:
        # Sessions on a deleted host are gone: their requests fail (documented), never move.
        for request, host in self.state.drop_host(name):
            self._session_ended(request, host, workload_gone=False)
        self.flusher.forget_host(name)
        self.keeper.forget(name)
        self.plans.forget(host=name)
        self._changed()

    def on_workload(self, host: str, record: WorkloadRecord | None, *, known: bool) -> None:
        """The workload under ``host`` changed (or was first listed). Sessions on a machine
        that is gone are gone too: their requests fail with HostLost, never moved."""
        lost = self.state.observe_workload(host, record, known=known, now=_now())
        if record is not None and record.ready:
            self.keeper.workload_ready(host)
        if lost:
            host_record = self.state.hosts.get(host)
            message = f"the workload is gone; {len(lost)} session(s) on it ended"
            if host_record is not None:
                self.deps.events.post(
                    host_record.body, "SessionHost", "HostLost", message, "Warning"
                )
            log.warning("%s/%s: %s", self.namespace, host, message)
        for request, name in lost:
            self._session_ended(request, name, workload_gone=True)
        self._changed()

    def _on_workload_written(self, host: str, record: WorkloadRecord) -> None:
        """The answer of the operator's own create (or read): known at once, unless the
        watch already told of a newer version."""
        if not record.older_than(self.state.workloads.get(host)):
            self.on_workload(host, record, known=True)

    def on_watch_error(self, message: str | None) -> None:
        if self.keeper.watch_error != message:
            self.keeper.watch_error = message
            self.mark_dirty()
            self.wake()

    def on_request(self, record: RequestRecord) -> None:
        before = self.state.requests.get(record.meta.name)
        if before is not None and record.rest is not None and b'"outcome"' in record.rest:
            self._connects_ended(before, record)
        lost = self.state.put_request(record, _now(), seq=self.deps.next_seq, seen=time.monotonic())
        self.plans.observe_request(record)
        if lost is not None and lost.host is not None:
            self._session_ended(lost, lost.host, workload_gone=False)
        self.flusher.mark_dirty()
        name = record.meta.name
        if name in self.state.arrivals or self.state.capacity_changed:
            self._wake.set()  # to be placed, or a released slot to fill
        elif name in self.state.limit_watch.looks:
            self._wake.set()  # the session limits look at its new version

    def _connects_ended(self, before: RequestRecord, after: RequestRecord) -> None:
        """Logon diagnostics into the metrics: each connect this version ended (counted
        once, by the operator that saw it under way or begun: not again after a restart)."""
        for connect in ended_since(
            connects_of(before.status) if before.rest is not None else [],
            connects_of(after.status),
        ):
            failure = None
            if connect.get("outcome") == "Failed":
                failure = (str(connect.get("failedPhase", "")), str(connect.get("reason", "")))
            phases = {p.value: v for p, v in phases_of(connect).items()}
            outcome = str(connect.get("outcome"))
            self.deps.metrics.connect_ended(self.namespace, self.name, phases, outcome, failure)

    def on_request_deleted(self, name: str) -> None:
        self._ended.pop(name, None)
        self.writer.starting_since.pop(name, None)
        self.state.drop_request(name)
        self.plans.forget(request=name)
        self._changed()

    # -------------------------------------------------------------- the loop

    async def _run(self) -> None:
        while True:
            timeout = self._next_timer()
            if timeout is None or timeout > 0:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel
                # that lands as the wake is set, and stop() then waits for ever.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
            else:
                await asyncio.sleep(0)  # something is due now; still let every other task run
            self._wake.clear()
            try:
                self._pass()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one bad object stop a pool
                log.exception("%s/%s: placement pass failed; retrying", self.namespace, self.name)
                await asyncio.sleep(1)
                self._wake.set()

    def _pass(self) -> None:
        state = self.state
        now = _now()
        if state.expire_connecting(now):
            self.flusher.mark_dirty()
        if state.recheck_metrics(now):
            self.flusher.mark_dirty()
        # Logoffs no agent carried out by their deadline plus the grace: finished here.
        for record, deadline in state.limit_watch.overdue_logoffs(now, self._logoff_grace):
            self.deps.spawn(self.writer.finish_logoff(record, deadline))
        plan = self.plans.evaluate(now)  # first: the phase's algorithm places this pass
        # Hosts the plan drains now take no new session in this very pass.
        state.close_for_plan(plan.drain if plan is not None else (), now)
        # Personal hosts' files: written down as their new user's, or deleted before anyone
        # else is given the host (placement gives neither kind to anyone meanwhile).
        self.data.apply()
        for intent in place_pending(state, now):
            if isinstance(intent, Assign):
                self.flusher.placed()
                write = self.writer.write_assigned(intent.record, intent.placement, intent.claim)
                self.deps.spawn(write)
            elif isinstance(intent, Wait):
                self.writer.wait(intent.record, intent.reason, intent.message)
            elif isinstance(intent, Reject):
                self.deps.spawn(self.writer.write_invalid(intent.record))
        # After placement: a start with every held session to look at must not hold up the
        # first placements (a pass looks at LIMIT_LOOKS_PER_PASS; the next pass follows at once).
        self._apply_limits(now)
        self.power.apply(now)
        # Scaling and the image update change the same hosts: one change at a time.
        if not self.updater.busy:
            self.scaler.scale(now, plan)
        if not self.scaler.busy:
            self.updater.update(now)
        self.plans.apply(plan, now)
        self._report_not_ready(now)
        ended = state.take_sessions_ended()
        if ended:
            self.deps.metrics.sessions_ended(state.namespace, state.name, ended)
        self.flusher.maybe_flush()

    def _apply_limits(self, now: datetime) -> None:
        """The sessions whose session-limit look is due: each step written (the write slots
        bound them), a malformed status reported once (a Warning Event) and left alone."""
        for record, step in self.state.limit_watch.looks_due(now, LIMIT_LOOKS_PER_PASS):
            if isinstance(step, BadFactsError):
                message = f"session limits not applied: {step}"
                log.warning("%s/%s: %s", self.namespace, record.meta.name, message)
                self.deps.events.post(
                    record.meta.reference(),
                    "SessionRequest",
                    "InvalidSessionStatus",
                    message,
                    "Warning",
                    once_per=("limits", self.namespace, record.meta.name, record.meta.uid),
                )
                continue
            self.deps.spawn(self.writer.write_limit(record, step))

    def _report_not_ready(self, now: datetime) -> None:
        """A host whose workload did not become Ready in time: a Warning Event, once per
        workload (its status says so at the next flush)."""
        for name in self.state.workloads:
            host = self.state.hosts.get(name)
            workload = self.state.workload_state(host, now) if host is not None else None
            if host is None or workload is None or not workload.timed_out:
                continue
            record = self.state.workloads.get(host.meta.name)
            self.deps.events.post(
                host.body,
                "SessionHost",
                "HostNotReady",
                workload.message,
                "Warning",
                once_per=(
                    "not-ready",
                    self.namespace,
                    host.meta.name,
                    record.uid if record else "",
                ),
            )

    def _next_timer(self) -> float | None:
        """Seconds until the loop has something to do without being woken; None: nothing."""
        state = self.state
        now = _now()
        timers = self.flusher.due_in(time.monotonic())
        deadline = state.ledger.next_deadline()
        if deadline is not None:
            timers.append((deadline - now).total_seconds())
        logoff = state.limit_watch.next_logoff_due(self._logoff_grace)
        if logoff is not None:
            timers.append((logoff - now).total_seconds() + 0.05)
        look = state.limit_watch.next_look()
        if look is not None:
            timers.append((look - now).total_seconds() + 0.05)
        if reports_metrics(state):
            timers.append(self.deps.settings.metrics_stale_after / 4)
        # While a plan's phase is in force only the plan removes hosts (rule 1).
        scale_down = (
            None if self.plans.decision is not None else pool_scaling.scale_down_due(state, now)
        )
        if scale_down is not None:
            timers.append((scale_down - now).total_seconds() + 0.05)
        stop = self.power.next_due(now)
        if stop is not None:
            timers.append((stop - now).total_seconds() + 0.05)
        phase_change = self.plans.next_change()
        if phase_change is not None:
            timers.append((phase_change - now).total_seconds() + 0.05)
        plan_retry = self.plans.retry_in(now)
        if plan_retry is not None:
            timers.append(plan_retry + 0.05)
        update_due = self.updater.wake_at()
        if update_due is not None:
            timers.append((update_due - now).total_seconds() + 0.05)
        for ready_by in pool_scaling.start_deadlines(state, now):
            timers.append((ready_by - now).total_seconds() + 0.05)
        retry = self.keeper.retry_in(time.monotonic())
        if retry is not None:
            timers.append(retry + 0.05)
        return max(0.0, min(timers)) if timers else None
