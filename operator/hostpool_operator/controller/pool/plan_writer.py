"""The writes a pool's scaling plan needs on its hosts and requests: drain and undrain (a
merge patch of ``spec.drainMode`` and the ``hostpool.io/drained-by-plan`` annotation holding
the drain time), forced logoffs (``status.logoff`` on requests) and, for
``ZeroActiveSessions``, deleting the Disconnected requests of a drained host.

One round at a time; each written object goes back into the pool's state at once, so the
next decision sees it. Only the plan's own marks and logoffs are touched: hosts carrying the
mark and requests carrying a logoff are tracked as they are observed, so a pool without a
plan costs nothing here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ...api.timestamps import rfc3339
from ...api.vocabulary import HOSTS, PLAN_DRAINED_ANNOTATION, REQUESTS
from ...engine.pool_state import PoolState
from ...engine.records import HostRecord, RequestRecord
from ...kube.backoff import Backoff
from ...kube.errors import ApiError, ApiTransportError
from ...scaling.plan_pool import disconnected_on, still_disconnected
from ...scaling.plans import LogoffOrder, PhaseInForce, PlanDecision
from ..deps import Deps

log = logging.getLogger(__name__)

ObjectSink = Callable[[Mapping[str, Any]], None]
#: The first wait before a round of plan writes that failed is tried again (seconds); it
#: doubles with each failure in a row, up to RETRY_MAX (a lasting 403 or 422 must not be
#: retried every two seconds forever).
RETRY_FIRST = 2.0
RETRY_MAX = 300.0
#: Seconds before a round that met a newer version is decided again (the watch brings it).
STALE_RETRY = 0.5
#: What one write came to.
WRITTEN, STALE, FAILED = "written", "stale", "failed"


@dataclass
class PlanWrites:
    """One round of writes a plan's decision needs."""

    undrain: list[str] = field(default_factory=list)
    drain: list[str] = field(default_factory=list)
    unmark: list[str] = field(default_factory=list)  # undrained by someone else: mark goes
    logoff: list[LogoffOrder] = field(default_factory=list)
    cancel_logoff: list[str] = field(default_factory=list)
    end_disconnected: dict[str, list[str]] = field(default_factory=dict)  # host -> requests
    #: The (uid, resourceVersion) each write was decided on, by ("host"|"request", name):
    #: sent as preconditions, so a write never lands on a newer version (an admin's undrain,
    #: a reconnect) or on a namesake created meanwhile.
    versions: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return any(
            (
                self.undrain,
                self.drain,
                self.unmark,
                self.logoff,
                self.cancel_logoff,
                self.end_disconnected,
            )
        )


class PlanWriter:
    """One pool's plan writes: what they are for a decision, and the writes."""

    def __init__(
        self,
        state: PoolState,
        deps: Deps,
        *,
        host_changed: ObjectSink,
        request_changed: ObjectSink,
        wake: Callable[[], None],
    ) -> None:
        self.state = state
        self.deps = deps
        self._host_changed = host_changed
        self._request_changed = request_changed
        self._wake = wake
        #: Requests whose logoff this operator wrote and has not seen stored yet.
        self.sent: set[str] = set()
        #: Hosts with the plan's drain mark; requests with a stored logoff.
        self.marked: set[str] = set()
        self.logoffs: set[str] = set()
        self.task: asyncio.Task[None] | None = None
        #: After a round that failed: no new round before this.
        self.retry_at: datetime | None = None
        self._backoff = Backoff(first=RETRY_FIRST, cap=RETRY_MAX)
        #: Why the last round failed (its plan's Ready condition says so); None: it did not.
        self.failure: str | None = None

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def settle_sent(self) -> set[str]:
        """The logoffs written and not yet seen stored (those seen stored are dropped)."""
        state = self.state
        self.sent = {
            name
            for name in self.sent
            if (record := state.requests.get(name)) is not None and not record.logoff
        }
        return self.sent

    def observe_host(self, record: HostRecord) -> None:
        """Hosts carrying the plan's drain mark are tracked, so pools without plans never
        scan their hosts for it."""
        if record.plan_drained_at is not None:
            self.marked.add(record.meta.name)
        else:
            self.marked.discard(record.meta.name)

    def observe_request(self, record: RequestRecord) -> None:
        """Requests carrying a logoff are tracked likewise."""
        if record.logoff:
            self.logoffs.add(record.meta.name)
        else:
            self.logoffs.discard(record.meta.name)

    def forget(self, *, host: str | None = None, request: str | None = None) -> None:
        if host is not None:
            self.marked.discard(host)
        if request is not None:
            self.logoffs.discard(request)
            self.sent.discard(request)

    def writes(self, decision: PlanDecision | None, phase: PhaseInForce | None) -> PlanWrites:
        """What to write for ``decision`` in ``phase`` (None: no plan applies, so the hosts
        the plan drained are handed back, undrained, and its logoffs withdrawn)."""
        out = PlanWrites()
        self._marks(out, decision)
        if decision is not None:
            self._decided(out, decision)
        self._withdrawn_logoffs(out, decision, phase)
        self._preconditions(out)
        return out

    def _marks(self, out: PlanWrites, decision: PlanDecision | None) -> None:
        """The hosts with the plan's mark: undrained by someone else, the mark goes too; with
        no plan, the operator's drained ones are undrained."""
        state = self.state
        draining = set(decision.drain) if decision is not None else set()
        for name in sorted(self.marked):
            record = state.hosts.get(name)
            if record is None or record.spec is None or name in state.removing:
                continue
            if not record.spec.drain_mode:
                if name not in draining:  # drained again now: the drain writes a new mark
                    out.unmark.append(name)
            elif decision is None and record.managed:
                out.undrain.append(name)

    def _decided(self, out: PlanWrites, decision: PlanDecision) -> None:
        out.undrain.extend(decision.undrain)
        out.drain.extend(decision.drain)
        # A host drained in this round gets its logoffs in the next, once its drain
        # time is stored: every deadline counts from the stored mark.
        fresh = set(decision.drain)
        out.logoff.extend(order for order in decision.logoff if order.host not in fresh)
        out.cancel_logoff.extend(decision.cancel_logoff)
        for host in decision.clear_disconnected:
            ending = disconnected_on(self.state, host)
            if ending:
                out.end_disconnected[host] = ending

    def _withdrawn_logoffs(
        self, out: PlanWrites, decision: PlanDecision | None, phase: PhaseInForce | None
    ) -> None:
        """A plan's logoff (one on a host with the plan's mark: anyone else's is left alone)
        stands only while its host stays drained and the phase in force still logs users
        off (RampDown/OffPeak with forceLogoffUsers)."""
        state = self.state
        undrained = set(out.undrain)
        forcing = (
            decision is not None
            and phase is not None
            and phase.shrinks
            and phase.force_logoff_users
        )
        for name in sorted(self.logoffs):
            request = state.requests.get(name)
            on = state.hosts.get(request.host or "") if request is not None else None
            if on is None or on.spec is None or on.meta.name not in self.marked:
                continue  # gone with its host, or not the plan's: nothing to withdraw
            if not forcing or not on.spec.drain_mode or on.meta.name in undrained:
                out.cancel_logoff.append(name)
        out.cancel_logoff = sorted(set(out.cancel_logoff))

    def _preconditions(self, out: PlanWrites) -> None:
        """The version each write was decided on, sent with it."""
        state = self.state
        for name in (*out.undrain, *out.drain, *out.unmark):
            seen_host = state.hosts.get(name)
            if seen_host is not None:
                meta = seen_host.meta
                out.versions[("host", name)] = (meta.uid, meta.resource_version)
        for name in (*out.cancel_logoff, *(order.request for order in out.logoff)):
            seen_request = state.requests.get(name)
            if seen_request is not None:
                meta = seen_request.meta
                out.versions[("request", name)] = (meta.uid, meta.resource_version)

    def apply(
        self, decision: PlanDecision | None, phase: PhaseInForce | None, plan: str, now: datetime
    ) -> None:
        """Start the round of writes ``decision`` needs (for ``plan``, by name), unless one
        is on its way (its result is observed before the next decision) or a failed one waits
        to retry."""
        if self.task is not None and not self.task.done():
            return
        if self.retry_at is not None and now < self.retry_at:
            return
        if decision is None and not self.marked and not self.logoffs:
            return  # nothing of a plan's to hand back (every pool without a plan)
        writes = self.writes(decision, phase)
        if writes:
            self.task = self.deps.spawn(self._carry_out(writes, plan))

    def retry_in(self, now: datetime) -> float | None:
        if self.retry_at is None:
            return None
        return max(0.0, (self.retry_at - now).total_seconds())

    async def _carry_out(self, writes: PlanWrites, plan: str) -> None:
        failed = stale = False
        # What was written: only that is reported (an Event says what happened, not what
        # was tried).
        done = PlanWrites()
        versions = writes.versions

        def tally(result: str) -> bool:
            nonlocal failed, stale
            failed |= result == FAILED
            stale |= result == STALE
            return result == WRITTEN

        try:
            # Withdrawals first: they are decided from marks the writes below may remove.
            for name in writes.cancel_logoff:
                tally(await self._patch_request(name, None, versions.get(("request", name))))
            for name in writes.undrain:
                version = versions.get(("host", name))
                if tally(await self._patch_host(name, None, False, version)):
                    done.undrain.append(name)
            for name in writes.unmark:
                tally(await self._patch_host(name, None, None, versions.get(("host", name))))
            drained_at = rfc3339(_utcnow())
            for name in writes.drain:
                version = versions.get(("host", name))
                if tally(await self._patch_host(name, drained_at, True, version)):
                    done.drain.append(name)
            for order in writes.logoff:
                logoff = {"message": order.message, "deadline": rfc3339(order.deadline)}
                version = versions.get(("request", order.request))
                if tally(await self._patch_request(order.request, logoff, version)):
                    self.sent.add(order.request)
                    done.logoff.append(order)
            for host, requests in writes.end_disconnected.items():
                failed |= not await self._end_disconnected(host, requests, plan)
        finally:
            if failed:
                wait = self._backoff.next()
                self.retry_at = _utcnow() + timedelta(seconds=wait)
                self._report_failure(plan, wait)
                self.failure = (
                    f"HostPool {self.state.name!r}: {self._backoff.failures} round(s) of the "
                    f"plan's writes in a row failed (see the operator's log)"
                )
            elif stale:
                # Decided on a version that changed meanwhile: decide again once the watch
                # has brought the new one (a moment), without counting it as a failure.
                self.retry_at = _utcnow() + timedelta(seconds=STALE_RETRY)
            else:
                self._backoff.reset()
                self.retry_at = None
                self.failure = None
            self._report(done, plan)
            self._wake()

    def _report_failure(self, plan: str, wait: float) -> None:
        """A round failed: one Warning Event per pool and interval, the next round waits."""
        state = self.state
        failures = self._backoff.failures
        message = (
            f"scaling plan {plan!r}: {failures} round(s) of writes in a row failed "
            f"(see the operator's log); next try in {wait:.0f}s"
        )
        log.warning("%s/%s: %s", state.namespace, state.name, message)
        if state.pool is not None:
            self.deps.events.post(
                state.pool.body,
                "HostPool",
                "ScalingPlanWriteFailed",
                message,
                "Warning",
                once_per=(state.namespace, state.name, "ScalingPlanWriteFailed"),
            )

    def _report(self, writes: PlanWrites, plan: str) -> None:
        state = self.state
        body = state.pool.body if state.pool is not None else None
        notes = []
        if writes.drain:
            notes.append(("HostsDrained", f"drained {', '.join(writes.drain)}"))
        if writes.undrain:
            notes.append(("HostsUndrained", f"undrained {', '.join(writes.undrain)}"))
        if writes.logoff:
            deadline = min(order.deadline for order in writes.logoff)
            notes.append(
                (
                    "LogoffRequested",
                    f"asked {len(writes.logoff)} session(s) to log off by {rfc3339(deadline)}",
                )
            )
        for reason, text in notes:
            message = f"scaling plan {plan!r}: {text}"
            log.info("%s/%s: %s", state.namespace, state.name, message)
            if body is not None:
                self.deps.events.post(body, "HostPool", reason, message, "Normal")

    async def _patch_host(
        self,
        name: str,
        drained_at: str | None,
        drain: bool | None,
        version: tuple[str, str] | None,
    ) -> str:
        """Drain (with the plan's mark), undrain (mark removed) or only remove the mark, on
        the version decided on. WRITTEN, STALE (it changed since: decide again) or FAILED."""
        state = self.state
        body: dict[str, Any] = {"metadata": {"annotations": {PLAN_DRAINED_ANNOTATION: drained_at}}}
        if drain is not None:
            body["spec"] = {"drainMode": drain}
        try:
            obj = await self.deps.client.patch(
                HOSTS, state.namespace, name, body, resource_version=_version_of(version)
            )
        except (ApiError, ApiTransportError) as error:
            return self._refused(error, f"patch host {name}")
        self._host_changed(obj)
        return WRITTEN

    async def _patch_request(
        self, name: str, logoff: dict[str, Any] | None, version: tuple[str, str] | None
    ) -> str:
        """Write (or withdraw) a forced logoff, on the version of the request decided on."""
        state = self.state
        try:
            obj = await self.deps.client.patch_status(
                REQUESTS,
                state.namespace,
                name,
                {"logoff": logoff},
                resource_version=_version_of(version),
            )
        except (ApiError, ApiTransportError) as error:
            return self._refused(error, f"write the logoff of {name}")
        self._request_changed(obj)
        return WRITTEN

    def _refused(self, error: ApiError | ApiTransportError, what: str) -> str:
        if isinstance(error, ApiError):
            if error.not_found:
                return WRITTEN  # gone: nothing left to do
            if error.conflict:
                log.info("%s/%s: plan did not %s: it changed since (%s)", *self._key(), what, error)
                return STALE
        log.warning("%s/%s: plan could not %s: %s", *self._key(), what, error)
        return FAILED

    async def _end_disconnected(self, host: str, requests: list[str], plan: str) -> bool:
        """ZeroActiveSessions: the Disconnected sessions of a drained host end (their
        requests are deleted, which logs them off), so the host can go."""
        state = self.state
        # Taken now: once its last session is gone the host may be removed (and forgotten)
        # before the deletes are answered, and the Event still says why they ended.
        host_record = state.hosts.get(host)
        ended = []
        ok = True
        for name in requests:
            # Decided a moment ago, but the writes before this one were awaited: the user may
            # have reconnected since. Only a session still Disconnected ends, and only in the
            # version seen (a newer one, say an agent's Active, makes the delete a 409).
            record = state.requests.get(name)
            if record is None or not still_disconnected(record):
                continue
            try:
                await self.deps.client.delete(
                    REQUESTS,
                    state.namespace,
                    name,
                    uid=record.meta.uid,
                    resource_version=record.meta.resource_version or None,
                )
                ended.append(name)
            except ApiError as error:
                if error.not_found or error.conflict:
                    continue  # gone, or a namesake: nothing of ours to end
                log.warning("%s/%s: plan could not end %s: %s", *self._key(), name, error)
                ok = False
            except ApiTransportError as error:
                log.warning("%s/%s: plan could not end %s: %s", *self._key(), name, error)
                ok = False
        if ended and host_record is not None:
            message = (
                f"scaling plan {plan!r} ended {len(ended)} disconnected session(s) "
                f"({', '.join(ended)}) so the drained host can be removed (ZeroActiveSessions)"
            )
            log.info("%s/%s: %s", state.namespace, host, message)
            self.deps.events.post(
                host_record.body, "SessionHost", "DisconnectedSessionsEnded", message, "Normal"
            )
        return ok

    def _key(self) -> tuple[str, str]:
        return (self.state.namespace, self.state.name)


def _version_of(version: tuple[str, str] | None) -> str | None:
    """The resourceVersion a write was decided on: its precondition (it also keeps the write
    off a namesake, whose versions are all newer)."""
    return version[1] or None if version is not None else None


def _utcnow() -> datetime:
    return datetime.now(UTC)
