"""Writing SessionRequest status, and finding out what happened when a write failed.

An assignment is one write: the request's whole status replaced, conditional on the
resourceVersion (and uid) the decision was made on, so a stale view can never overwrite a
newer state. Three outcomes:

* **written**: the record takes the answer's version;
* **refused** (an API answer, e.g. 409): the slot is released, the request re-read and
  decided again from what the API shows;
* **no answer** (dropped connection, timeout): the write may have applied, so the slot stays
  reserved until a re-read tells which, or another request could take it and the host would
  go over its limit.

Pending and Failed statuses are merge patches; they go through the same write slots.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any, Protocol

from ...api import Phase, Reason
from ...api.timestamps import rfc3339
from ...api.vocabulary import DATA_OF_ANNOTATION, HOSTS, REQUESTS
from ...engine.balancer_view import Placement
from ...engine.personal import Assignment
from ...engine.pool_state import PoolState
from ...engine.records import HostRecord, RequestRecord, newer_or_same
from ...engine.status import assigned_status, failed_status, pending_status, says_pending
from ...engine.time_limits import LimitStep, limit_patch
from ...kube.backoff import Backoff
from ...kube.errors import ApiError, ApiTransportError
from ..deps import Deps

log = logging.getLogger(__name__)

#: Seconds before an overdue logoff whose deletion failed (no answer, or refused) is tried
#: again.
LOGOFF_RETRY = 5.0
#: Tries at giving a personal host to its user while other writes (agents' statuses) race.
CLAIM_ATTEMPTS = 5
#: Seconds before a session limit's write that failed (no answer, or an error other than a
#: conflict) is decided again.
LIMIT_RETRY = 5.0


def claim_patch(host: HostRecord, user: str) -> dict[str, Any] | None:
    """The write that gives a host without a user to ``user`` (None: it may not be theirs).
    A host holding its user's files says they are ``user``'s in the same write, so no
    later change of user misses them; a host keeping a former user's files is theirs only
    (and no longer kept once it is)."""
    patch: dict[str, Any] = {"spec": {"assignedUser": user}}
    if not host.holds_data:
        return patch
    if host.data_of not in (None, user):
        return None
    patch["spec"]["keepData"] = None
    patch["metadata"] = {"annotations": {DATA_OF_ANNOTATION: user}}
    return patch


class RequestRouter(Protocol):
    """What the writer hands observed request versions back to (the pool's worker)."""

    def on_request(self, record: RequestRecord) -> None: ...

    def on_request_deleted(self, name: str) -> None: ...

    def wake(self) -> None: ...

    def mark_dirty(self) -> None: ...


#: Requests whose wait for a host is timed at once (the oldest forgotten past it).
MAX_STARTING = 10_000


class RequestWriter:
    """Writes one pool's request statuses and recovers from failed writes."""

    def __init__(self, state: PoolState, deps: Deps, router: RequestRouter) -> None:
        self.state = state
        self.deps = deps
        self.router = router
        self._key = (state.namespace, state.name)
        self.pending_writes: dict[str, asyncio.Task[None]] = {}  # Pending statuses on their way
        #: Personal pools: the back-off of each (host, user) whose claim the API refused.
        self._claim_backoff: dict[tuple[str, str], Backoff] = {}
        #: Since when (monotonic) each request has waited for a host to start.
        self.starting_since: dict[str, float] = {}

    # -------------------------------------------------------------- assignments

    async def write_assigned(
        self, record: RequestRecord, placement: Placement, claim: bool = False
    ) -> None:
        state = self.state
        name = record.meta.name
        if claim and not await self.claim_host(record, placement):
            return
        earlier = self.pending_writes.get(name)
        if earlier is not None:
            # Our own Pending status for this request is still on its way: wait for it and
            # write on top of the version it produced, instead of conflicting with ourselves.
            await asyncio.wait([earlier])
            current = state.requests.get(name)
            if (
                current is None
                or current.meta.uid != record.meta.uid
                or current.phase in (Phase.ASSIGNED.value, Phase.FAILED.value)
            ):
                # Gone, or decided by someone else meanwhile: the observed state wins.
                state.inflight.discard(name)
                state.release(record)
                if current is not None:
                    self.router.on_request(current)
                return
            record = current
        host = state.hosts.get(placement.host or "")
        address = state.address_of(host) if host is not None else None
        # Read, not taken: a write that does not apply is placed and written again.
        starting = self.starting_since.get(name)
        host_start = time.monotonic() - starting if starting is not None else None
        status = assigned_status(record, placement, address, datetime.now(UTC), host_start)
        try:
            async with self.deps.write_slots.slot(self._key):
                queued = time.monotonic() - record.seen
                obj = await self.deps.client.replace_status(
                    REQUESTS,
                    "SessionRequest",
                    state.namespace,
                    name,
                    status,
                    resource_version=record.meta.resource_version,
                    uid=record.meta.uid,
                )
            self.deps.metrics.observe_assignment(
                state.namespace,
                state.name,
                placement.reason.value,
                time.monotonic() - record.seen,
                queued=queued,
            )
        except ApiError as error:
            # A definite answer: the write did not apply. Free the slot, re-read, go again.
            state.inflight.discard(name)
            state.release(record)
            await self.after_failed_write(record, error)
            return
        except ApiTransportError as error:
            await self.settle_unknown_write(record, placement, error)
            return
        state.inflight.discard(name)
        self.starting_since.pop(name, None)
        state.assignment_written(record, new_session=placement.reason is not Reason.RECONNECTED)
        fresh = RequestRecord.of(obj)
        fresh.seq, fresh.seen = record.seq, record.seen
        current = state.requests.get(name)
        if current is None or current.meta.uid != fresh.meta.uid:
            # Deleted while we wrote: the deletion event already released or will release it.
            state.release(fresh)
            return
        state.requests[name] = fresh
        self.router.mark_dirty()

    async def settle_unknown_write(
        self, record: RequestRecord, placement: Placement, error: BaseException
    ) -> None:
        """The assignment write got no answer: hold the slot, re-read until the API answers,
        and keep the assignment if it applied, else let the observed state decide."""
        state = self.state
        name = record.meta.name
        log.warning(
            "%s/%s: no answer to the assignment write (%s); holding the slot until a re-read "
            "tells whether it applied",
            state.namespace,
            name,
            error,
        )
        backoff = Backoff(first=0.2, cap=5.0)
        while True:
            await asyncio.sleep(backoff.next())
            try:
                obj = await self.deps.client.get(REQUESTS, state.namespace, name)
                break
            except ApiError as again:
                if again.not_found:
                    state.inflight.discard(name)
                    self.router.on_request_deleted(name)
                    return
                log.warning("%s/%s: re-read failed: %s", state.namespace, name, again)
            except ApiTransportError as again:
                log.warning("%s/%s: re-read failed: %s", state.namespace, name, again)
        fresh = RequestRecord.of(obj)
        current = state.requests.get(name)
        state.inflight.discard(name)
        if current is None:
            state.release(record)  # deleted meanwhile: its deletion ended the session
            return
        if current.meta.uid == fresh.meta.uid:
            fresh.seq, fresh.seen = current.seq, current.seen
            if not newer_or_same(fresh.meta.resource_version, current.meta.resource_version):
                fresh = current
        applied = fresh.phase == Phase.ASSIGNED.value and fresh.host == placement.host
        if applied and fresh.meta.uid == record.meta.uid:
            state.requests[name] = fresh  # it did apply: the reservation is that session
            self.router.mark_dirty()
            return
        state.release(record)  # it did not (or someone else decided): observed state wins
        self.router.on_request(fresh)
        self.router.wake()

    async def claim_host(self, record: RequestRecord, placement: Placement) -> bool:
        """Personal pools: write the request's user as the host's ``spec.assignedUser``
        before the assignment. Only onto a host still unassigned (or already theirs): a
        conflict re-reads and looks again. False: the host went to someone else, or the
        write failed; the reservation is undone and the request placed again (after a
        back-off when the API server refused the write: an admission policy or webhook
        that says no says it again if asked at once)."""
        state = self.state
        host = placement.host or ""
        user = record.demand.user if record.demand is not None else ""

        def decide(obj: dict[str, Any]) -> dict[str, Any] | bool:
            found = HostRecord.of(obj)
            owner = found.spec.assigned_user if found.spec is not None else None
            if owner is not None:
                return owner == user  # theirs already, or someone else's since the decision
            patch = claim_patch(found, user)
            return patch if patch is not None else False  # someone else's files since then

        refused: ApiError | None = None
        try:
            # A conflict is an agent's status write, most often: look again.
            answer = await self.deps.client.patch_as_read(
                HOSTS, state.namespace, host, decide, attempts=CLAIM_ATTEMPTS
            )
            if isinstance(answer, dict):
                log.info("%s/%s: host %s is now %s's", state.namespace, state.name, host, user)
            if answer is True or isinstance(answer, dict):
                self._claim_backoff.pop((host, user), None)
                return True
            if answer is None:
                log.info(
                    "%s/%s: host %s changed under each of %d tries to give it to %s; placing again",
                    state.namespace,
                    record.meta.name,
                    host,
                    CLAIM_ATTEMPTS,
                    user,
                )
        except ApiError as error:
            refused = None if error.not_found else error  # gone: placed elsewhere at once
            self._claim_failed(record, host, user, error)
        except ApiTransportError as error:
            self._claim_failed(record, host, user, error)
        state.personal.claims.pop(host, None)
        state.release(record)
        if refused is not None:
            # Still in flight meanwhile, so no pass places it: the refusal is not asked again
            # at once.
            await asyncio.sleep(self._claim_refused(record, host, user, refused))
        state.inflight.discard(record.meta.name)
        if record.meta.name in state.requests:
            state.arrivals[record.meta.name] = None
        state.capacity_changed = True
        self.router.wake()
        return False

    def _claim_failed(
        self, record: RequestRecord, host: str, user: str, error: ApiError | ApiTransportError
    ) -> None:
        log.warning(
            "%s/%s: could not give host %s to %s: %s",
            self.state.namespace,
            record.meta.name,
            host,
            user,
            error,
        )

    def _claim_refused(self, record: RequestRecord, host: str, user: str, error: ApiError) -> float:
        """The API server refused to give ``host`` to ``user``: a Warning Event on the
        request (once per request) says why; the seconds to wait before placing it again."""
        backoff = self._claim_backoff.setdefault((host, user), Backoff(first=1.0, cap=30.0))
        wait = backoff.next()
        message = (
            f"the API server refused to give host {host} to {user} ({error.reason}: "
            f"{error.message[:300]}); placing again in {wait:.0f} s"
        )
        self.deps.events.post(
            record.meta.reference(),
            "SessionRequest",
            "HostNotGiven",
            message,
            "Warning",
            once_per=("claim", self.state.namespace, record.meta.name, record.meta.uid),
        )
        return wait

    async def take_back(self, assignment: Assignment) -> bool:
        """One host per user: ``assignment`` is a second host of its user (administrators
        assigned two at once). Its ``spec.assignedUser`` is removed, only from a version
        that still names that user (the CRD refuses it while a session is on the host); the
        host says why in a Warning Event. Whether it was taken back."""
        state = self.state
        host, user = assignment.host, assignment.user

        def decide(obj: dict[str, Any]) -> dict[str, Any] | bool:
            spec = obj.get("spec")
            if not isinstance(spec, dict) or spec.get("assignedUser") != user:
                return False  # changed meanwhile: the observed state decides again
            return {"spec": {"assignedUser": None}}

        try:
            answer = await self.deps.client.patch_as_read(
                HOSTS, state.namespace, host, decide, attempts=CLAIM_ATTEMPTS
            )
            if not isinstance(answer, dict):
                return False  # changed meanwhile, or under every try: the next look decides
        except (ApiError, ApiTransportError) as error:
            # Refused (a session started on it) or the API away: the next look decides.
            log.info("%s/%s: %s kept for %s: %s", state.namespace, state.name, host, user, error)
            return False
        seen = state.personal.assignment_seen
        kept = next((h for h, (u, _) in seen.items() if u == user and h != host), "?")
        message = (
            f"{user} has host {kept} already (one host per user): this host's assignment to "
            f"them was taken back"
        )
        log.warning("%s/%s: %s: %s", state.namespace, state.name, host, message)
        record = state.hosts.get(host)
        if record is not None:
            self.deps.events.post(
                record.body, "SessionHost", "SecondHostTakenBack", message, "Warning"
            )
        return True

    async def after_failed_write(self, record: RequestRecord, error: ApiError) -> None:
        """Re-read the request and let the observed state decide what happens next."""
        state = self.state
        name = record.meta.name
        if error.not_found:
            self.router.on_request_deleted(name)
            return
        if not error.conflict:
            log.warning("%s/%s: status write failed: %s; retrying", state.namespace, name, error)
            await asyncio.sleep(0.5)
        try:
            obj = await self.deps.client.get(REQUESTS, state.namespace, name)
        except ApiError as again:
            if again.not_found:
                self.router.on_request_deleted(name)
                return
            log.warning("%s/%s: re-read failed: %s", state.namespace, name, again)
            state.arrivals[name] = None
            self.router.wake()
            return
        except ApiTransportError as again:
            log.warning("%s/%s: re-read failed: %s", state.namespace, name, again)
            state.arrivals[name] = None
            self.router.wake()
            return
        fresh = RequestRecord.of(obj)
        current = state.requests.get(name)
        if current is not None and not newer_or_same(
            fresh.meta.resource_version, current.meta.resource_version
        ):
            fresh = current
        said = state.pending_said.get(name)
        if said is not None and not says_pending(fresh, said):
            # The pending reason we last wrote lost to another write (e.g. an older reason
            # of ours written on the same version): decide again, so it is written anew.
            state.pending_said.pop(name, None)
            state.waiting.pop(name, None)
        # Back in line at its old place (same sequence number, same first-seen time).
        self.router.on_request(fresh)
        self.router.wake()

    # -------------------------------------------------------------- waiting and failing

    def wait(self, record: RequestRecord, reason: Reason, message: str) -> None:
        """Start writing that the request waits; an assignment decided meanwhile waits for
        this write to land first."""
        name = record.meta.name
        task = self.deps.spawn(self.write_pending(record, reason, message))
        self.pending_writes[name] = task
        task.add_done_callback(
            lambda done: (
                self.pending_writes.pop(name, None)
                if self.pending_writes.get(name) is done
                else None
            )
        )

    async def write_pending(self, record: RequestRecord, reason: Reason, message: str) -> None:
        state = self.state
        name = record.meta.name
        if reason is Reason.HOSTS_STARTING:
            # Logon diagnostics: from now on the request waits for a host to start (its
            # hostStart, written with its assignment; an operator that restarts meanwhile
            # counts the wait as queue).
            if len(self.starting_since) >= MAX_STARTING:
                self.starting_since.pop(next(iter(self.starting_since)))
            self.starting_since.setdefault(name, time.monotonic())
        await self._patch(record, pending_status(record, reason, message, datetime.now(UTC)))
        said = state.pending_said.get(name)
        current = state.requests.get(name)
        if (
            said is not None
            and said is not reason
            and current is not None
            and not says_pending(current, said)
        ):
            # The reason changed while this write was on its way, and the next decision took
            # the status it read then (still the older one) for written: decide again, so
            # the newer reason is written on top of this one.
            state.pending_said.pop(name, None)
            state.waiting.pop(name, None)
            state.arrivals[name] = None
            self.router.wake()
        self.deps.events.post(
            record.meta.reference(),
            "SessionRequest",
            reason.value,
            f"{message} (pool {state.name}; further requests pending for this reason are "
            "not reported for a while)",
            "Normal" if reason in (Reason.POOL_SATURATED, Reason.HOSTS_STARTING) else "Warning",
            once_per=("pending", state.namespace, state.name, reason.value),
        )

    async def write_host_lost(self, record: RequestRecord, host: str) -> None:
        message = f"SessionHost {host!r} was deleted; the session on it ended"
        await self.fail(record, "HostDeleted", message, conditional=False)

    async def write_workload_lost(self, record: RequestRecord, host: str) -> None:
        """The machine under the session is gone: the session is lost, never moved."""
        message = f"the workload of SessionHost {host!r} is gone; the session on it ended"
        reason = Reason.HOST_LOST.value
        await self.fail(record, reason, message, conditional=False, status_reason=reason)

    async def finish_logoff(self, record: RequestRecord, deadline: datetime) -> None:
        """A logoff nobody carried out by its deadline plus the grace (the host's agent is
        silent, or gone): the operator finishes it, deleting the request (this version
        only: one whose logoff was cancelled or moved meanwhile is decided again), and a
        Warning Event says so. The user's session on the machine, if any is left, is out
        of the operator's reach; the slot in the pool is free again."""
        state = self.state
        name = record.meta.name
        try:
            async with self.deps.write_slots.slot(self._key):
                await self.deps.client.delete(
                    REQUESTS,
                    state.namespace,
                    name,
                    uid=record.meta.uid,
                    resource_version=record.meta.resource_version,
                )
        except (ApiError, ApiTransportError) as error:
            if isinstance(error, ApiError) and (error.not_found or error.conflict):
                # Gone (the agent did it after all), or changed: the watch brings the
                # version that decides, and a logoff still overdue comes back with it.
                return
            log.warning(
                "%s/%s: deleting the request of an overdue logoff failed: %s; trying again",
                state.namespace,
                name,
                error,
            )
            await asyncio.sleep(LOGOFF_RETRY)
            current = state.requests.get(name)
            if current is not None and current.meta.uid == record.meta.uid and current.logoff:
                state.limit_watch.logoffs.note(name, current.logoff_deadline)
                self.router.wake()
            return
        grace = self.deps.settings.logoff_grace
        where = f"on SessionHost {record.host!r}" if record.host else "with no host"
        message = (
            f"the logoff due at {rfc3339(deadline)} was not carried out within {grace:g}s "
            f"of it (no agent acted for the session {where}); the operator deleted the request"
        )
        log.warning("%s/%s: %s", state.namespace, name, message)
        self.deps.events.post(
            record.meta.reference(), "SessionRequest", "LogoffOverdue", message, "Warning"
        )

    async def write_limit(self, record: RequestRecord, step: LimitStep) -> None:
        """Carry a session limit's step out: a merge patch of the request's status (a notice,
        a disconnect or a logoff), on the version it was decided on, so a session that changed
        meanwhile (the user came back) is decided again instead. Then an Event on the request
        (``SessionLimitWarning``, or ``SessionLimitReached`` naming the limit) and, for an
        action, ``hostpool_session_limit_actions_total``."""
        state = self.state
        name = record.meta.name
        now = datetime.now(UTC)
        try:
            async with self.deps.write_slots.slot(self._key):
                obj = await self.deps.client.patch_status(
                    REQUESTS,
                    state.namespace,
                    name,
                    limit_patch(step, now),
                    resource_version=record.meta.resource_version,
                )
        except (ApiError, ApiTransportError) as error:
            if isinstance(error, ApiError) and (error.not_found or error.conflict):
                return  # gone, or changed: the version the watch brings is decided afresh
            log.warning(
                "%s/%s: the %s write failed: %s; deciding again in %.0fs",
                state.namespace,
                name,
                step.event_message(),
                error,
                LIMIT_RETRY,
            )
            await asyncio.sleep(LIMIT_RETRY)
            current = state.requests.get(name)
            if current is not None and current.meta.uid == record.meta.uid:
                state.limit_watch.note_look(current, datetime.now(UTC))
                self.router.wake()
            return
        # Decided afresh on the answer (the step shows in it now): the next step's look.
        self.router.on_request(RequestRecord.of(obj))
        reason = "SessionLimitWarning" if step.warning else "SessionLimitReached"
        self.deps.events.post(
            record.meta.reference(), "SessionRequest", reason, step.event_message(), "Normal"
        )
        if not step.warning:
            self.deps.metrics.session_limit_action(
                state.namespace, state.name, step.limit.value, step.action.value
            )
        log.info("%s/%s: %s", state.namespace, name, step.event_message())

    async def write_invalid(self, record: RequestRecord) -> None:
        if record.phase != Phase.FAILED.value:
            await self.fail(record, "InvalidSpec", f"invalid request: {record.spec_error}")

    async def fail(
        self,
        record: RequestRecord,
        reason: str,
        message: str,
        *,
        conditional: bool = True,
        status_reason: str | None = None,
    ) -> None:
        """Phase Failed, condition Assigned False with the reason, and a Warning Event
        (``status_reason``: also status.reason)."""
        status = failed_status(record, reason, message, datetime.now(UTC))
        if status_reason is not None:
            status["reason"] = status_reason
        await self._patch(record, status, conditional=conditional)
        self.deps.events.post(record.meta.reference(), "SessionRequest", reason, message, "Warning")

    async def _patch(
        self, record: RequestRecord, status: dict[str, Any], *, conditional: bool = True
    ) -> None:
        state = self.state
        name = record.meta.name
        try:
            async with self.deps.write_slots.slot(self._key):
                obj = await self.deps.client.patch_status(
                    REQUESTS,
                    state.namespace,
                    name,
                    status,
                    resource_version=record.meta.resource_version if conditional else None,
                )
        except ApiError as error:
            if error.conflict:
                # The request changed under us; the newer version's event re-decides.
                await self.after_failed_write(record, error)
            elif not error.not_found:
                log.warning("%s/%s: status write failed: %s", state.namespace, name, error)
            return
        except ApiTransportError as error:
            log.warning("%s/%s: status write failed: %s", state.namespace, name, error)
            return
        fresh = RequestRecord.of(obj)
        current = state.requests.get(name)
        if current is not None and current.meta.uid == fresh.meta.uid:
            fresh.seq, fresh.seen = current.seq, current.seen
            if newer_or_same(fresh.meta.resource_version, current.meta.resource_version):
                state.requests[name] = fresh
