"""One pool's scaling plan: which plan and phase it follows, and what the plan says of it
(its decision, the pool's entry in the plan's status, ``status.scalingPlan``, the phase
Events).

Each placement pass asks :meth:`PlanKeeper.evaluate` first (the phase's algorithm is set
before anything is placed), hands the decision's adds and removals to the pool's
``HostScaler``, and lets :meth:`PlanKeeper.apply` start the rest through its
``PlanWriter``: drains, undrains, forced logoffs, ending Disconnected sessions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ...api.plan import PlanConditionReason
from ...api.timestamps import rfc3339
from ...engine.pool_state import PoolState
from ...engine.records import HostRecord, PlanRecord, RequestRecord
from ...scaling.plan_pool import decide_for_pool, scaling_required
from ...scaling.plans import PhaseInForce, PlanDecision, next_phase_start, phase_in_force
from ..deps import Deps
from .plan_writer import ObjectSink, PlanWriter

log = logging.getLogger(__name__)


class PlanKeeper:
    """The plan one pool follows (if any), its phase, and the writes it needs."""

    def __init__(
        self,
        state: PoolState,
        deps: Deps,
        *,
        host_changed: ObjectSink,
        request_changed: ObjectSink,
        wake: Callable[[], None],
        mark_dirty: Callable[[], None],
        reported: Callable[[str], None],
    ) -> None:
        self.state = state
        self.deps = deps
        self._mark_dirty = mark_dirty
        self._reported = reported
        self.plan: PlanRecord | None = None
        self.phase: PhaseInForce | None = None
        #: The phase is computed again at this instant (the next phase start) or when the
        #: plan changes.
        self.valid_until: datetime | None = None
        self._phase_of: tuple[str, int] | None = None  # (uid, generation) it was for
        self.zone_error: str | None = None
        self.decision: PlanDecision | None = None
        self.writer = PlanWriter(
            state, deps, host_changed=host_changed, request_changed=request_changed, wake=wake
        )
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
            or (old.meta.uid, old.meta.generation) == (plan.meta.uid, plan.meta.generation)
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
        self.writer.stop()

    # -------------------------------------------------------------- deciding

    def _phase(self, now: datetime) -> PhaseInForce | None:
        plan = self.plan
        if plan is None or plan.spec is None:
            self.phase, self.zone_error = None, None
            return None
        version = (plan.meta.uid, plan.meta.generation)
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
        sent = self.writer.settle_sent()
        self.decision = (
            decide_for_pool(state, phase, now, sent) if applies and phase is not None else None
        )
        self._announce(phase if applies else None)
        problem: tuple[PlanConditionReason, str] | None = None
        if why:
            problem = (PlanConditionReason.SCALING_REQUIRED, f"HostPool {state.name!r} {why}")
        elif applies and self.writer.failure is not None:
            problem = (PlanConditionReason.WRITES_FAILED, self.writer.failure)
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
        self.deps.events.post(state.pool.body, "HostPool", reason, message, "Normal")

    # -------------------------------------------------------------- carrying out

    def observe_host(self, record: HostRecord) -> None:
        self.writer.observe_host(record)

    def observe_request(self, record: RequestRecord) -> None:
        self.writer.observe_request(record)

    def forget(self, *, host: str | None = None, request: str | None = None) -> None:
        self.writer.forget(host=host, request=request)

    def apply(self, decision: PlanDecision | None, now: datetime) -> None:
        """Start the writes the decision needs (see ``plan_writer``)."""
        plan = self.plan.meta.name if self.plan is not None else self.last_plan
        self.writer.apply(decision, self.phase, plan, now)

    def retry_in(self, now: datetime) -> float | None:
        return self.writer.retry_in(now)


def _rounded_up(percent: float) -> int:
    """Used capacity as the status shows it: a whole percent, rounded up (so "100" means
    full, never "just under")."""
    whole = int(percent)
    return whole if whole == percent else whole + 1


def _utcnow() -> datetime:
    return datetime.now(UTC)
