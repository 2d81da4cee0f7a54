"""One pool's scaling plan: which plan and phase it follows, what the plan says of it, and
the writes the plan's decisions need on hosts and requests.

Each placement pass asks :meth:`PlanKeeper.evaluate` first (the phase's algorithm is set
before anything is placed), hands the decision's adds and removals to the pool's
``HostScaler``, and lets :meth:`PlanKeeper.apply` do the rest: drain and undrain (a merge
patch of ``spec.drainMode`` and the ``hostpool.io/drained-by-plan`` annotation), forced
logoffs (``status.logoff`` on requests) and, for ``ZeroActiveSessions``, deleting the
Disconnected requests of a drained host. One round of writes at a time; each written object
goes back into the pool's state at once, so the next decision sees it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .api_plan import PlanConditionReason
from .conditions import rfc3339
from .k8s import ApiError, ApiTransportError
from .plan_pool import decide_for_pool, disconnected_on, scaling_required
from .plans import (
    LogoffOrder,
    PhaseInForce,
    PlanDecision,
    next_phase_start,
    phase_in_force,
)
from .pool_state import PoolState
from .records import PLAN_DRAINED_ANNOTATION, HostRecord, PlanRecord, RequestRecord
from .services import HOSTS, REQUESTS, Services

log = logging.getLogger(__name__)

ObjectSink = Callable[[Mapping[str, Any]], None]
#: Seconds before a round of plan writes that failed is tried again.
RETRY_SECONDS = 2.0


@dataclass
class PlanWrites:
    """One round of writes a plan's decision needs."""

    undrain: list[str] = field(default_factory=list)
    drain: list[str] = field(default_factory=list)
    unmark: list[str] = field(default_factory=list)  # undrained by someone else: mark goes
    logoff: list[LogoffOrder] = field(default_factory=list)
    cancel_logoff: list[str] = field(default_factory=list)
    end_disconnected: dict[str, list[str]] = field(default_factory=dict)  # host -> requests

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


class PlanKeeper:
    """The plan one pool follows (if any), its phase, and the writes it needs."""

    def __init__(
        self,
        state: PoolState,
        services: Services,
        *,
        host_changed: ObjectSink,
        request_changed: ObjectSink,
        wake: Callable[[], None],
        mark_dirty: Callable[[], None],
        reported: Callable[[str], None],
    ) -> None:
        self.state = state
        self.services = services
        self._host_changed = host_changed
        self._request_changed = request_changed
        self._wake = wake
        self._mark_dirty = mark_dirty
        self._reported = reported
        self.plan: PlanRecord | None = None
        self.phase: PhaseInForce | None = None
        #: The phase is computed again at this instant (the next phase start) or when the
        #: plan changes.
        self.valid_until: datetime | None = None
        self._phase_of: tuple[str, str] | None = None  # (uid, resourceVersion) it was for
        self.zone_error: str | None = None
        self.decision: PlanDecision | None = None
        #: Requests whose logoff this operator wrote and has not seen stored yet.
        self.sent: set[str] = set()
        #: Hosts with the plan's drain mark; requests with a stored logoff.
        self.marked: set[str] = set()
        self.logoffs: set[str] = set()
        self.task: asyncio.Task[None] | None = None
        self.failed_at: datetime | None = None
        #: The pool's entry in the plan's status, and why the plan cannot manage the pool.
        self.entry: dict[str, Any] | None = None
        self.problem: tuple[PlanConditionReason, str] | None = None
        self._announced: tuple[str, str, str] | None = None
        #: The name of the last plan followed (Events about handing its hosts back).
        self.last_plan = "the scaling plan"

    # -------------------------------------------------------------- which plan

    def set_plan(self, plan: PlanRecord | None) -> bool:
        """The plan this pool follows changed (None: no plan). True if it did."""
        old = self.plan
        if (old is None) == (plan is None) and (
            old is None
            or plan is None
            or (old.meta.uid, old.meta.resource_version)
            == (plan.meta.uid, plan.meta.resource_version)
        ):
            return False
        self.plan = plan
        self.valid_until = None
        if plan is not None:
            self.last_plan = plan.meta.name
        if plan is None:
            self.entry = None
            self.problem = None
        return True

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    # -------------------------------------------------------------- deciding

    def _phase(self, now: datetime) -> PhaseInForce | None:
        plan = self.plan
        if plan is None or plan.spec is None:
            self.phase, self.zone_error = None, None
            return None
        version = (plan.meta.uid, plan.meta.resource_version)
        if self._phase_of == version and self.valid_until is not None and now < self.valid_until:
            return self.phase
        try:
            self.phase = phase_in_force(plan.spec, now)
            self.valid_until = next_phase_start(plan.spec, now)
            self.zone_error = None
        except ValueError as error:
            self.phase, self.valid_until, self.zone_error = None, None, str(error)
        self._phase_of = version
        return self.phase

    def evaluate(self, now: datetime) -> PlanDecision | None:
        """The phase in force and the plan's decision for the pool now (None: no plan
        applies, and the pool follows its own settings). Sets the phase's algorithm."""
        state = self.state
        phase = self._phase(now)
        spec = state.spec
        why = scaling_required(spec) if self.plan is not None and spec is not None else None
        applies = phase is not None and spec is not None and why is None
        algorithm = phase.load_balancer_type if applies and phase is not None else None
        if state.set_algorithm(algorithm):
            self._mark_dirty()
        self.sent = {
            name
            for name in self.sent
            if (record := state.requests.get(name)) is not None and not record.status.get("logoff")
        }
        self.decision = (
            decide_for_pool(state, phase, now, self.sent) if applies and phase is not None else None
        )
        self._announce(phase if applies else None)
        problem = (
            (PlanConditionReason.SCALING_REQUIRED, f"HostPool {state.name!r} {why}")
            if why
            else None
        )
        entry = self._entry(phase if applies else None)
        if (entry, problem) != (self.entry, self.problem):
            self.entry, self.problem = entry, problem
            self._mark_dirty()
            if self.plan is not None:
                self._reported(self.plan.meta.name)
        return self.decision

    def _entry(self, phase: PhaseInForce | None) -> dict[str, Any] | None:
        """The pool's entry in the plan's status.pools."""
        if self.plan is None:
            return None
        entry: dict[str, Any] = {"name": self.state.name}
        decision = self.decision
        if phase is None or decision is None:
            return entry
        entry.update(
            schedule=phase.schedule,
            phase=phase.phase.value,
            loadBalancerType=phase.load_balancer_type.value,
            minimumHosts=decision.minimum_hosts,
            capacityThresholdPercent=phase.capacity_threshold_percent,
            usedCapacityPercent=_rounded_up(decision.used_capacity_percent),
        )
        return entry

    def pool_status(self) -> dict[str, Any] | None:
        """``HostPool.status.scalingPlan``: the plan, and the phase and algorithm in force."""
        if self.plan is None:
            return None
        status: dict[str, Any] = {"name": self.plan.meta.name}
        if self.entry is not None and "phase" in self.entry:
            status.update(
                schedule=self.entry["schedule"],
                phase=self.entry["phase"],
                loadBalancerType=self.entry["loadBalancerType"],
            )
        return status

    def next_change(self) -> datetime | None:
        """When the phase changes next (the pool's loop wakes up then)."""
        return self.valid_until if self.plan is not None else None

    def _announce(self, phase: PhaseInForce | None) -> None:
        """An Event on the pool whenever the phase it places with changes."""
        state = self.state
        plan = self.plan
        key = (plan.meta.name, phase.schedule, phase.phase.value) if plan and phase else None
        if key == self._announced:
            return
        before = self._announced
        self._announced = key
        if state.pool is None:
            return
        stored = state.pool.status.get("scalingPlan")
        if (
            before is None
            and isinstance(stored, Mapping)
            and (stored.get("name"), stored.get("schedule"), stored.get("phase")) == key
        ):
            return  # announced before a restart already
        if key is not None and phase is not None and plan is not None:
            message = (
                f"scaling plan {plan.meta.name!r}: {phase.phase.value} of schedule "
                f"{phase.schedule!r} since {rfc3339(phase.since)}; placing with "
                f"{phase.load_balancer_type.value}, minimum {phase.minimum_hosts_percent}% of "
                f"maxHosts, capacity threshold {phase.capacity_threshold_percent}%"
            )
            reason = "ScalingPlanPhase"
        elif before is not None:
            message = f"scaling plan {before[0]!r} no longer applies: the pool's own settings do"
            reason = "ScalingPlanReleased"
        else:
            return
        log.info("%s/%s: %s", state.namespace, state.name, message)
        self.services.events.post(state.pool.body, "HostPool", reason, message, "Normal")

    # -------------------------------------------------------------- carrying out

    def observe_host(self, record: HostRecord) -> None:
        """Hosts carrying the plan's drain mark are tracked, so pools without plans never
        scan their hosts for it."""
        if record.plan_drained_at is not None:
            self.marked.add(record.meta.name)
        else:
            self.marked.discard(record.meta.name)

    def observe_request(self, record: RequestRecord) -> None:
        """Requests carrying a logoff are tracked likewise."""
        if record.status.get("logoff"):
            self.logoffs.add(record.meta.name)
        else:
            self.logoffs.discard(record.meta.name)

    def forget(self, *, host: str | None = None, request: str | None = None) -> None:
        if host is not None:
            self.marked.discard(host)
        if request is not None:
            self.logoffs.discard(request)
            self.sent.discard(request)

    def writes(self, decision: PlanDecision | None) -> PlanWrites:
        """What to write for ``decision`` (None: no plan applies, so the hosts the plan
        drained are handed back, undrained, and its logoffs withdrawn)."""
        state = self.state
        out = PlanWrites()
        draining = set(decision.drain) if decision is not None else set()
        for name in sorted(self.marked):
            record = state.hosts.get(name)
            if record is None or record.spec is None or name in state.removing:
                continue
            if not record.spec.drain_mode:
                if name not in draining:  # drained again now: the drain writes a new mark
                    out.unmark.append(name)  # undrained by someone else: the mark goes too
            elif decision is None and record.managed:
                out.undrain.append(name)
        if decision is not None:
            out.undrain.extend(decision.undrain)
            out.drain.extend(decision.drain)
            # A host drained in this round gets its logoffs in the next, once its drain
            # time is stored: every deadline counts from the stored mark.
            fresh = set(decision.drain)
            out.logoff.extend(order for order in decision.logoff if order.host not in fresh)
            out.cancel_logoff.extend(decision.cancel_logoff)
            for host in decision.clear_disconnected:
                ending = disconnected_on(state, host)
                if ending:
                    out.end_disconnected[host] = ending
        # A plan's logoff (one on a host with the plan's mark: anyone else's is left alone)
        # stands only while its host stays drained and the phase in force still logs users
        # off (RampDown/OffPeak with forceLogoffUsers).
        undrained = set(out.undrain)
        phase = self.phase
        forcing = decision is not None and phase is not None and phase.shrinks
        forcing = forcing and phase is not None and phase.force_logoff_users
        for name in sorted(self.logoffs):
            request = state.requests.get(name)
            on = state.hosts.get(request.host or "") if request is not None else None
            if on is None or on.spec is None or on.meta.name not in self.marked:
                continue  # gone with its host, or not the plan's: nothing to withdraw
            if not forcing or not on.spec.drain_mode or on.meta.name in undrained:
                out.cancel_logoff.append(name)
        out.cancel_logoff = sorted(set(out.cancel_logoff))
        return out

    def apply(self, decision: PlanDecision | None, now: datetime) -> None:
        """Start the round of writes ``decision`` needs, unless one is on its way (its
        result is observed before the next decision) or a failed one waits to retry."""
        if self.task is not None and not self.task.done():
            return
        if self.failed_at is not None and (now - self.failed_at).total_seconds() < RETRY_SECONDS:
            return
        if decision is None and not self.marked and not self.logoffs:
            return  # nothing of a plan's to hand back (every pool without a plan)
        writes = self.writes(decision)
        if writes:
            self.task = self.services.spawn(self._carry_out(writes))

    def retry_in(self, now: datetime) -> float | None:
        if self.failed_at is None:
            return None
        return max(0.0, RETRY_SECONDS - (now - self.failed_at).total_seconds())

    async def _carry_out(self, writes: PlanWrites) -> None:
        failed = False
        plan = self.plan.meta.name if self.plan is not None else self.last_plan
        try:
            # Withdrawals first: they are decided from marks the writes below may remove.
            for name in writes.cancel_logoff:
                failed |= not await self._patch_request(name, None)
            for name in writes.undrain:
                failed |= not await self._patch_host(name, drained_at=None, drain=False)
            for name in writes.unmark:
                failed |= not await self._patch_host(name, drained_at=None, drain=None)
            drained_at = rfc3339(_utcnow())
            for name in writes.drain:
                failed |= not await self._patch_host(name, drained_at=drained_at, drain=True)
            for order in writes.logoff:
                logoff = {"message": order.message, "deadline": rfc3339(order.deadline)}
                if await self._patch_request(order.request, logoff):
                    self.sent.add(order.request)
                else:
                    failed = True
            for host, requests in writes.end_disconnected.items():
                failed |= not await self._end_disconnected(host, requests, plan)
        finally:
            self.failed_at = _utcnow() if failed else None
            self._report(writes, plan)
            self._wake()

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
                self.services.events.post(body, "HostPool", reason, message, "Normal")

    async def _patch_host(self, name: str, *, drained_at: str | None, drain: bool | None) -> bool:
        """Drain (with the plan's mark), undrain (mark removed) or only remove the mark."""
        state = self.state
        body: dict[str, Any] = {"metadata": {"annotations": {PLAN_DRAINED_ANNOTATION: drained_at}}}
        if drain is not None:
            body["spec"] = {"drainMode": drain}
        try:
            obj = await self.services.client.patch(HOSTS, state.namespace, name, body)
        except ApiError as error:
            if error.not_found:
                return True
            log.warning("%s/%s: plan could not patch host %s: %s", *self._key(), name, error)
            return False
        except ApiTransportError as error:
            log.warning("%s/%s: plan could not patch host %s: %s", *self._key(), name, error)
            return False
        self._host_changed(obj)
        return True

    async def _patch_request(self, name: str, logoff: dict[str, Any] | None) -> bool:
        state = self.state
        try:
            obj = await self.services.client.patch_status(
                REQUESTS, state.namespace, name, {"logoff": logoff}
            )
        except ApiError as error:
            if error.not_found:
                return True
            log.warning("%s/%s: plan could not write logoff of %s: %s", *self._key(), name, error)
            return False
        except ApiTransportError as error:
            log.warning("%s/%s: plan could not write logoff of %s: %s", *self._key(), name, error)
            return False
        self._request_changed(obj)
        return True

    async def _end_disconnected(self, host: str, requests: list[str], plan: str) -> bool:
        """ZeroActiveSessions: the Disconnected sessions of a drained host end (their
        requests are deleted, which logs them off), so the host can go."""
        state = self.state
        ended = []
        ok = True
        for name in requests:
            record = state.requests.get(name)
            if record is None:
                continue
            try:
                await self.services.client.delete(
                    REQUESTS, state.namespace, name, uid=record.meta.uid
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
        host_record = state.hosts.get(host)
        if ended and host_record is not None:
            message = (
                f"scaling plan {plan!r} ended {len(ended)} disconnected session(s) "
                f"({', '.join(ended)}) so the drained host can be removed (ZeroActiveSessions)"
            )
            log.info("%s/%s: %s", state.namespace, host, message)
            self.services.events.post(
                host_record.body, "SessionHost", "DisconnectedSessionsEnded", message, "Normal"
            )
        return ok

    def _key(self) -> tuple[str, str]:
        return (self.state.namespace, self.state.name)


def _rounded_up(percent: float) -> int:
    """Used capacity as the status shows it: a whole percent, rounded up (so "100" means
    full, never "just under")."""
    whole = int(percent)
    return whole if whole == percent else whole + 1


def _utcnow() -> datetime:
    return datetime.now(UTC)
