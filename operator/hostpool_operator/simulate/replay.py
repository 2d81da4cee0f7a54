"""The run behind the timeline simulator: logons through the engine, the pool's scaling and
a plan's rules, step by step in simulated time (``replay(ReplayInput) -> ReplayResult``).

``timeline.run_timeline`` builds the input from a document (synthetic arrivals or a recorded
history); the plan recommender builds it from a history directly (weeks long, beyond a
document's ``hours``). How a step runs is told in ``timeline``'s docstring. Pure: simulated
time only, no clock, no I/O.
"""

from __future__ import annotations

import heapq
import math
from datetime import timedelta
from typing import Any, ClassVar

from ..api import LoadBalancerType, StopHostsWhen
from ..api.update import UpdatePhase
from ..rollout.step import RolloutHost, UpdateHistory
from ..rollout.step import decide as decide_update
from ..scaling.plans import (
    PhaseInForce,
    PlanHost,
    PlanRequest,
    decide_plan,
    hosts_for,
    minimum_hosts,
    next_phase_start,
    phase_in_force,
)
from ..scaling.rules import decide_scaling, hosts_to_add
from .replay_state import (
    CONNECTED,
    DISCONNECT,
    DISCONNECTED_LIMIT,
    END,
    LOGOFF,
    MAX_SESSION,
    READY,
    UPDATE,
    ReplayInput,
    ReplayResult,
    State,
    UpdateOutcome,
)

#: Passes at one instant while they add capacity (each adds a host at least).
MAX_PASSES = 16


class _Run:
    """One run: its passes (the plan's rules or the pool's own scaling) and its loop, over
    the run's ``State`` (the hosts, sessions, waiting requests and events it keeps).

    Counters the state keeps as the run goes (sessions, hosts taking sessions, starting
    hosts, the plan's drained hosts) let most passes of a long run be told without
    building the decisions' inputs for every host: those that decide nothing, or only add
    hosts for waiting requests (``plan_pass_from_counters``, ``scale_from_counters``).
    They are exact; ``skip_quiet_passes`` turns them off to show it.
    """

    skip_quiet_passes: ClassVar[bool] = True

    def __init__(self, given: ReplayInput) -> None:
        self.state = State(given)
        #: What the pool's status would remember of the update (its phase, the canary).
        self.update_history = UpdateHistory()

    # -------------------------------------------------------------- decisions

    def settle(self, now: float) -> None:
        """The passes at the end of a step: decide, place the waiting requests, and again
        while a pass adds capacity (what it added changes what the next one sees, as the
        operator's next pass would, seconds later)."""
        state = self.state
        for _ in range(MAX_PASSES):
            taking = state.taking_count
            self.decide(now)
            self.roll(now)
            state.place_waiting(now)
            if state.taking_count <= taking:
                break

    def decide(self, now: float) -> None:
        """One pass: the plan's phase and rules when one is in force, else the pool's own
        algorithm and scaling."""
        state = self.state
        state.phase = phase = self.phase_at(now)
        if phase is None:
            self.use_algorithm(state.pool.load_balancer.type)
            if not (self.skip_quiet_passes and self.scale_from_counters(now)):
                self.scale(now)
        else:
            self.use_algorithm(phase.load_balancer_type)
            if not (self.skip_quiet_passes and self.plan_pass_from_counters(phase, now)):
                self.follow_plan(phase, now)

    def roll(self, now: float) -> None:
        """The image update's step (``rollout.step.decide``), carried out as the operator
        would: replacements made (ready at once, or after hostStartMinutes), emptied hosts
        removed, ForceLogoff's drains with their users' logoffs."""
        state = self.state
        spec, outcome = state.given.update, state.update
        if spec is None or outcome is None or outcome.completed is not None:
            return
        step = decide_update(spec, "new", self.rollout_hosts(), self.update_history,
                             state.instant(now))  # fmt: skip
        self.update_history = UpdateHistory(step.phase, "new", step.message, step.canary_passed)
        for name in step.delete_first:
            state.remove_host(name, now)
        for name in step.replace:
            made = state.add_host(now)
            if name in state.hosts:
                state.hosts[name].replaced_by = made
        for name in step.delete:
            view = state.balancer.host(name)
            if name in state.hosts and (view is None or view.sessions == 0):
                state.remove_host(name, now)
        for name in step.drain:
            self.drain_for_update(name, now)
        outcome.peak_hosts = max(outcome.peak_hosts, len(state.hosts))
        if step.phase is UpdatePhase.COMPLETE:
            outcome.completed = now

    def drain_for_update(self, name: str, now: float) -> None:
        """ForceLogoff: the host takes no new session, and its users are logged off
        ``logoffDelayMinutes`` from now."""
        state = self.state
        spec = state.given.update
        assert spec is not None
        state.set_drain(name, True, now)
        host = state.hosts[name]
        host.drained_by_plan, host.drained_at = False, None  # the update's, not the plan's
        host.update_drained_at = now
        deadline = now + spec.logoff_delay_minutes * 60.0
        for user in sorted(state.balancer.ledger.users_on(name)):
            state.logoffs[user] = deadline
            state.update_logoffs.add(user)
            state.push(deadline, LOGOFF, user)

    def rollout_hosts(self) -> list[RolloutHost]:
        state = self.state
        hosts = []
        for host in state.hosts.values():
            view = state.balancer.host(host.name)
            ready = None if host.ready_at is None else state.instant(host.ready_at)
            drained = host.update_drained_at
            hosts.append(
                RolloutHost(
                    host.name,
                    "new" if host.revision == state.revision else "old",
                    sessions=view.sessions if view is not None else 0,
                    serving=view is not None and not view.drain_mode,
                    created=state.instant(host.created),
                    not_ready="starting" if host.starting else None,
                    ready_since=ready,
                    replaced_by=host.replaced_by,
                    drained_at=None if drained is None else state.instant(drained),
                )
            )
        return hosts

    def free_slots(self) -> int:
        """Free slots on the hosts not draining, starting ones included (none is ever over
        the limit in a simulation): ``engine.balancing.free_slots`` of ``scale_hosts``."""
        state = self.state
        busy = state.sessions_total - state.sessions_drained
        return state.balancer.limit * (state.taking_count + state.starting) - busy

    def add_for_waiting(self, now: float, min_hosts: int, buffer: int, max_hosts: int) -> None:
        """``rules.hosts_to_add`` from the counters: hosts for the waiting requests and
        the buffer, at least min_hosts, at most max_hosts."""
        state = self.state
        limit = state.balancer.limit
        total = len(state.hosts)
        short = len(state.waiting) + buffer - self.free_slots()
        by_demand = -(-short // limit) if short > 0 else 0
        wanted = max(by_demand, min_hosts - total, 0)
        for _ in range(min(wanted, max(0, max_hosts - total))):
            state.add_host(now)

    def plan_pass_from_counters(self, phase: PhaseInForce, now: float) -> bool:
        """The pass of ``follow_plan`` told from the counters (and, to drain, the hosts'
        session counts) rather than through ``decide_plan``'s inputs for every host; False
        (nothing done) when it must run: logoffs are involved, or the pool must grow while
        the plan has drained hosts (which to undrain first is per host), or a drained host
        holds Disconnected sessions under ZeroActiveSessions (it may go with them). As
        ``decide_plan``: grow (rules 3-4) by adding hosts; else in ramp-down and off-peak
        drain the emptiest hosts while one fewer keeps within the threshold (rule 5, not
        while requests wait; ties: the last in query order) and delete the drained hosts
        that are empty. Then the waiting requests get hosts from the pool's own scaling,
        as ``follow_plan``."""
        state = self.state
        if state.logoffs or phase.force_logoff_users:
            return False
        if phase.stop_hosts_when is StopHostsWhen.ZERO_ACTIVE_SESSIONS and any(
            state.disconnected_on.get(name) for name in state.drained
        ):
            return False
        scaling = state.pool.scaling
        assert scaling is not None
        limit = state.balancer.limit
        threshold = phase.capacity_threshold_percent
        minimum = minimum_hosts(scaling.max_hosts, phase.minimum_hosts_percent)
        capacity = state.taking_count + state.starting
        sessions = state.sessions_total
        if capacity < minimum or 100 * sessions > threshold * capacity * limit:
            # Rules 3-4: grow; undrain first, so only without drained hosts.
            if state.drained:
                return False
            wanted = max(hosts_for(sessions, limit, threshold) - capacity, minimum - capacity)
            for _ in range(min(wanted, max(0, scaling.max_hosts - len(state.hosts)))):
                state.add_host(now)
        elif phase.shrinks:
            view_of = state.balancer.host
            # Seen drained before this pass: the ones drained now go on a later pass.
            empty = [n for n in state.drained if (v := view_of(n)) is not None and v.sessions == 0]
            left = state.taking_count
            if not state.waiting:
                while left > minimum and 100 * sessions <= threshold * (left - 1) * limit:
                    left -= 1
            drain = state.taking_count - left
            if drain:
                emptiest = []
                for order, host in enumerate(state.hosts.values()):
                    if host.starting or host.name in state.drained:
                        continue
                    view = view_of(host.name)
                    assert view is not None
                    emptiest.append((view.sessions, -order, host.name))
                for _, _, name in heapq.nsmallest(drain, emptiest):
                    state.set_drain(name, True, now)
            for name in empty:
                state.remove_host(name, now)
        if state.waiting:
            self.add_for_waiting(now, 0, scaling.buffer_sessions, scaling.max_hosts)
        return True

    def scale_from_counters(self, now: float) -> bool:
        """The pass of ``scale`` (the pool's own scaling) from the counters, when it can be
        told from them; False (nothing done) otherwise. With requests waiting it only adds
        (``rules.decide_scaling`` removes nothing then); else nothing happens while the
        buffer and minHosts are kept and no empty host has been empty for
        scaleDownDelaySeconds."""
        state = self.state
        scaling = state.pool.scaling
        if scaling is None:
            return True
        if state.drained:
            return False
        if state.waiting:
            self.add_for_waiting(now, scaling.min_hosts, scaling.buffer_sessions, scaling.max_hosts)
            return True
        total = len(state.hosts)
        free = self.free_slots()
        if scaling.buffer_sessions > free or scaling.min_hosts > total:
            return False
        if total <= scaling.min_hosts or not state.empty:
            return True
        if free - state.balancer.limit < scaling.buffer_sessions:
            return True  # each removal frees a whole host's slots: the buffer keeps them all
        due = state.instant(now) - timedelta(seconds=scaling.scale_down_delay_seconds)
        return all(
            since is None or since > due
            for since in (state.hosts[name].empty_since for name in state.empty)
        )

    def phase_at(self, now: float) -> PhaseInForce | None:
        """Rule 1, looked up again only at the next phase start: between two starts the
        phase in force cannot change."""
        state = self.state
        if state.plan is None:
            return None
        if now >= state.phase_until:
            instant = state.instant(now)
            state.phase = phase_in_force(state.plan, instant)
            upcoming = next_phase_start(state.plan, instant)
            state.phase_until = (
                math.inf if upcoming is None else (upcoming - state.origin).total_seconds()
            )
        return state.phase

    def use_algorithm(self, algorithm: LoadBalancerType) -> None:
        """Rule 2: the phase's algorithm, the pool's own limit."""
        state = self.state
        if state.balancer.algorithm is algorithm:
            return
        balancer = state.pool.load_balancer.model_copy(update={"type": algorithm})
        state.balancer.set_spec(state.pool.model_copy(update={"load_balancer": balancer}))

    def scale(self, now: float) -> None:
        """The pool's own scaling (no phase in force)."""
        state = self.state
        scaling = state.pool.scaling
        if scaling is None:
            return
        decision = decide_scaling(
            scaling,
            state.balancer.limit,
            state.scale_hosts(),
            len(state.waiting),
            state.instant(now),
        )
        for _ in range(decision.add):
            state.add_host(now)
        for name in decision.remove:
            state.remove_host(name, now)

    def follow_plan(self, phase: PhaseInForce, now: float) -> None:
        """Rules 3-6 (``plans.decide_plan``), then hosts for the requests still waiting
        (the pool's own scaling adds, with the plan's minimum in place of minHosts; it
        removes nothing while a plan is in force)."""
        state = self.state
        scaling = state.pool.scaling
        assert scaling is not None  # validated: a pool that follows a plan has scaling
        requests: list[PlanRequest] = []
        if phase.force_logoff_users or state.logoffs:
            requests = [
                PlanRequest(user, session.host, user in state.logoffs)
                for user, session in state.balancer.ledger.items()
            ]
        decision = decide_plan(
            phase,
            self.plan_hosts(),
            state.balancer.limit,
            scaling.max_hosts,
            state.instant(now),
            requests,
            waiting=len(state.waiting),
        )
        for name in decision.undrain:
            state.set_drain(name, False, now)
        for user in decision.cancel_logoff:
            state.logoffs.pop(user, None)
        for _ in range(decision.add):
            state.add_host(now)
        for name in decision.drain:
            state.set_drain(name, True, now)
        for name in decision.delete:
            state.remove_host(name, now)
        for order in decision.logoff:
            deadline = max(now, (order.deadline - state.origin).total_seconds())
            state.logoffs[order.request] = deadline
            state.push(deadline, LOGOFF, order.request)
        if state.waiting:
            own = scaling.model_copy(update={"min_hosts": 0})
            up = hosts_to_add(own, state.balancer.limit, state.scale_hosts(), len(state.waiting))
            for _ in range(up.add):
                state.add_host(now)

    def plan_hosts(self) -> list[PlanHost]:
        """The hosts as the plan's rules see them, in query order (creation order;
        starting hosts are the newest)."""
        state = self.state
        out: list[PlanHost] = []
        view_of = state.balancer.host
        for host in state.hosts.values():
            if host.starting:
                out.append(PlanHost(host.name, 0, 0, False, False, None, True, False, True))
                continue
            view = view_of(host.name)
            assert view is not None
            # Positional, in PlanHost's field order: this runs for every host on busy passes.
            # Active: all but the Disconnected ones (connecting ones count as active).
            out.append(
                PlanHost(
                    host.name,
                    view.sessions,
                    view.sessions - state.disconnected_on.get(host.name, 0),
                    view.drain_mode,
                    host.drained_by_plan,
                    host.drained_at,
                    True,
                )
            )
        return out

    # -------------------------------------------------------------- the loop

    def run(self) -> ReplayResult:
        state = self.state
        given = state.given
        total = given.total_seconds
        logons = given.logons
        for _ in range(given.hosts):
            state.add_host(0.0, ready=True)
        if given.update is not None:
            state.push(given.update_at, UPDATE, "")
        self.settle(0.0)
        steps: list[dict[str, Any]] = []
        hosts: list[int] = []
        host_seconds = 0.0
        arrived = 0
        begin = 0.0
        while begin < total:
            end = min(begin + given.step_seconds, total)
            arrived = self.events_until(end, arrived)
            self.settle(end)
            if given.record_steps:
                steps.append(state.step(end))
            hosts.append(len(state.hosts))
            host_seconds += len(state.hosts) * (end - begin)
            begin = end
        waits = [
            (placed if placed == placed else total) - logon.at  # NaN: still waiting
            for placed, logon in zip(state.placed_at[:arrived], logons, strict=False)
        ]
        # Requests only start waiting on arrival, so no step's end has more than the peak.
        return ReplayResult(
            steps,
            host_seconds,
            state.placed,
            state.peak_pending,
            waits,
            hosts,
            ended_by=dict(state.ended_by),
            disconnected_by=dict(state.disconnected_by),
            disconnected_seconds=state.disconnected_until(total),
            update=state.update,
        )

    def events_until(self, end: float, arrived: int) -> int:
        """The events and logons up to ``end`` in time order (ties: events first), from
        the logon of index ``arrived`` on; the index of the first logon after ``end``."""
        state = self.state
        logons = state.logons
        events = state.events
        while True:
            arrival = logons[arrived].at if arrived < len(logons) else math.inf
            event = events[0][0] if events else math.inf
            if min(arrival, event) > end:
                return arrived
            if event <= arrival:
                at, kind, _, name = heapq.heappop(events)
                self.event(kind, name, at)
            else:
                arrived += 1
                state.arrive(arrived - 1, arrival)

    def event(self, kind: int, name: str, at: float) -> None:
        """One event of the queue, at its time."""
        state = self.state
        if kind == END:
            state.end(name, at)
        elif kind == LOGOFF:
            state.forced_logoff(name, at)
        elif kind == CONNECTED:
            state.connected(name)
        elif kind == READY:
            state.host_ready(name, at)
        elif kind == DISCONNECT:
            state.disconnect(name, at)
        elif kind == MAX_SESSION:
            state.max_session_reached(name, at)
        elif kind == UPDATE:
            state.start_update()
            state.update = UpdateOutcome(started=at, peak_hosts=len(state.hosts))
        else:
            assert kind == DISCONNECTED_LIMIT
            state.disconnected_limit_reached(name, at)


def replay(given: ReplayInput) -> ReplayResult:
    """Run the logons of ``given`` through the pool (and its plan)."""
    return _Run(given).run()
