"""Timeline simulation: a day (or a week) of logons through the engine and the pool's scaling.

``run_timeline(document) -> result`` (re-exported as ``simulate.run_timeline``) and
``hostpool-operator simulate --timeline FILE`` take the document of the contract's "Timeline
simulation": a pool, optionally a scaling plan, the hosts the operator created at the start,
logons per hour in daily windows and how long a session lasts. Pure: simulated time only, no
clock, no I/O.

How a step ``(t0, t1]`` runs:

* Events up to ``t1`` in time order: a session ends ``sessionMinutes`` after it was placed,
  a new session stops counting as connecting after the pool's ``connectingTimeoutSeconds``,
  and logons arrive, spread evenly over each window (``perHour`` a hour). A logon is placed at
  once unless others wait before it; when a session ends, waiting requests are placed in
  arrival order while there is room. Ties: ends first, then logons.
* At ``t1`` one pass decides, as the operator's would. With a plan and a phase in force
  (``plans.phase_in_force``): the pool places with the phase's algorithm from then on, and
  ``plans.decide_plan`` keeps the minimum, undrains or adds over the capacity threshold,
  drains the emptiest hosts in ramp-down and off-peak and deletes drained hosts once empty
  (simulated users never disconnect, so both stopHostsWhen settings wait for no session);
  with forceLogoffUsers the users of a drained host are logged off at drain +
  waitTimeMinutes. Requests still waiting get hosts from the pool's own scaling (the plan's
  minimum in place of minHosts; it removes nothing while a plan is in force). Without a
  phase, the pool's own algorithm and scaling (``scaling.decide_scaling``, with
  ``scaleDownDelaySeconds`` in simulated time). Every simulated host is the operator's; new
  hosts are ready at once. Then the waiting requests are retried, and the pass runs again
  while it adds capacity (the requests it placed change what the next one sees).
* The step reports the state at ``t1``; ``hostHours`` sums hosts x step length.
  ``peakPending`` is the most requests waiting at any moment: a request that finds no room
  waits for the next pass at a step's end (or a slot set free before it), so it may exceed
  every step's ``pending``; how long the pool takes to react is ``stepMinutes``.

Times: ``start`` and the windows are local wall-clock times of the plan's ``timeZone`` (UTC
without a plan); time runs in UTC underneath, so a DST change makes ``at`` jump like a clock.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from ..api import MAX_HOSTS, ApiModel, HostPoolSpec, LoadBalancerType, describe_validation_error
from ..api.plan import SimulatedPlan
from ..engine.balancing import HostView, PoolBalancer
from ..engine.demand import Demand
from ..scaling.plans import PhaseInForce, PlanHost, PlanRequest, decide_plan, phase_in_force
from ..scaling.rules import ScaleHost, decide_scaling, hosts_to_add

MAX_HOURS = 168
MAX_PER_HOUR = 100_000
MAX_WINDOWS = 48
MAX_SESSION_MINUTES = 7 * 24 * 60
#: Logons in one run, all windows and days together.
MAX_LOGONS = 2_000_000
#: Passes at one instant while they add capacity (each adds a host at least).
MAX_PASSES = 16

_CLOCK = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
_CLOCK_OR_MIDNIGHT = r"^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$"


class TimelineError(ValueError):
    """An invalid timeline document; the message names the offending field."""


def _clock_minutes(value: str) -> int:
    hours, minutes = value.split(":")
    return int(hours) * 60 + int(minutes)


def _must_be_text(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError('must be a string "HH:MM" (quote it in YAML: "07:00")')
    return value


class ArrivalWindow(ApiModel):
    """Logons every simulated day from ``from`` to ``to`` (local "HH:MM"; ``to`` may be
    "24:00", or earlier than ``from`` for a window across midnight), ``perHour`` an hour."""

    start: str = Field(alias="from", pattern=_CLOCK)
    end: str = Field(alias="to", pattern=_CLOCK_OR_MIDNIGHT)
    per_hour: int = Field(ge=0, le=MAX_PER_HOUR)

    _text = field_validator("start", "end", mode="before")(_must_be_text)

    @model_validator(mode="after")
    def _not_empty(self) -> ArrivalWindow:
        if _clock_minutes(self.start) == _clock_minutes(self.end):
            raise ValueError("to must differ from from")
        return self

    @property
    def minutes(self) -> tuple[int, int]:
        """(start, end) in minutes after local midnight; end > start (past 24:00 when the
        window crosses midnight)."""
        begin, end = _clock_minutes(self.start), _clock_minutes(self.end)
        return begin, end if end > begin else end + 24 * 60


class Timeline(ApiModel):
    """The contract's timeline document."""

    seed: int | None = None
    start: datetime
    hours: int = Field(default=24, ge=1, le=MAX_HOURS)
    step_minutes: int = Field(default=5, ge=1, le=60)
    pool: HostPoolSpec
    plan: SimulatedPlan | None = None
    hosts: int = Field(default=0, ge=0, le=MAX_HOSTS)
    arrivals: list[ArrivalWindow] = Field(default_factory=list, max_length=MAX_WINDOWS)
    session_minutes: int = Field(ge=1, le=MAX_SESSION_MINUTES)

    @field_validator("start")
    @classmethod
    def _local(cls, value: datetime) -> datetime:
        if value.tzinfo is not None:
            raise ValueError(
                "must be a local time without an offset, e.g. 2026-12-07T00:00:00 "
                "(the plan's timeZone applies, UTC without a plan)"
            )
        return value

    @model_validator(mode="after")
    def _bounded(self) -> Timeline:
        days = math.ceil(self.hours / 24) + 1
        per_day = sum(w.per_hour * (w.minutes[1] - w.minutes[0]) / 60 for w in self.arrivals)
        if per_day * days > MAX_LOGONS:
            raise ValueError(
                f"arrivals: at most {MAX_LOGONS} logons in a run "
                f"(these windows make about {round(per_day * days)})"
            )
        return self


def parse_timeline(document: Any) -> Timeline:
    """Validate a timeline document; raises TimelineError naming the field."""
    if not isinstance(document, dict):
        raise TimelineError(
            "timeline: must be a mapping with start, pool, hosts, arrivals and sessionMinutes"
        )
    try:
        timeline = Timeline.model_validate(document)
    except ValidationError as error:
        raise TimelineError(describe_validation_error(error, whole="timeline")) from None
    if timeline.plan is not None:
        # What the operator reports as ScalingRequired on the plan.
        if timeline.pool.scaling is None:
            raise TimelineError("pool.scaling: a pool that follows a plan needs scaling")
        if timeline.pool.load_balancer.max_session_limit is None:
            raise TimelineError(
                "pool.loadBalancer.maxSessionLimit: a pool that follows a plan needs it set"
            )
    return timeline


# ------------------------------------------------------------------------------ the run

# Event kinds; the order breaks ties at one instant (slots free up before logons).
_END = 0
_LOGOFF = 1
_CONNECTED = 2


@dataclass(slots=True)
class _Host:
    """What the simulation keeps of one host beyond the engine's view."""

    name: str
    empty_since: datetime | None
    #: Drained by the plan's rule 5, and when.
    drained_by_plan: bool = False
    drained_at: datetime | None = None


def _arrival_offsets(
    timeline: Timeline, zone: tzinfo, origin: datetime, total: float
) -> list[float]:
    """Seconds after ``origin`` (UTC) of every logon in ``(0, total]``, sorted: each window
    repeated on every local day the run touches, its logons spread evenly over the window
    (the k-th of n at the middle of the k-th n-th of it)."""
    first = timeline.start.date() - timedelta(days=1)
    last = (timeline.start + timedelta(hours=timeline.hours)).date()
    out: list[float] = []
    day = first
    while day <= last:
        for window in timeline.arrivals:
            begin, end = window.minutes
            count = round(window.per_hour * (end - begin) / 60)
            if count == 0:
                continue
            opened = _utc_offset(day, begin, zone, origin)
            closed = _utc_offset(day, end, zone, origin)
            span = closed - opened
            for k in range(count):
                at = opened + (k + 0.5) * span / count
                if 0 < at <= total:
                    out.append(at)
        day += timedelta(days=1)
    out.sort()
    return out


def _utc_offset(day: date, minutes: int, zone: tzinfo, origin: datetime) -> float:
    """Seconds from ``origin`` to local ``day`` + ``minutes`` (may pass midnight)."""
    local = datetime.combine(day, time()) + timedelta(minutes=minutes)
    return (local.replace(tzinfo=zone) - origin).total_seconds()


class _Run:
    """One timeline run: the engine, the hosts, the waiting requests and the event queue."""

    def __init__(self, timeline: Timeline, zone: tzinfo) -> None:
        self.timeline = timeline
        self.zone = zone
        self.pool = timeline.pool
        self.plan = timeline.plan
        self.phase: PhaseInForce | None = None
        self.origin = timeline.start.replace(tzinfo=zone).astimezone(UTC)
        self.balancer = PoolBalancer(self.pool, seed=timeline.seed)
        self.hosts: dict[str, _Host] = {}
        self.created = 0
        self.waiting: deque[str] = deque()
        self.connecting: set[str] = set()
        #: Forced logoffs ordered by the plan (rule 6): user -> deadline.
        self.logoffs: dict[str, float] = {}
        self.events: list[tuple[float, int, int, str]] = []
        self.sequence = 0
        self.placed = 0
        self.peak_pending = 0
        self.session_seconds = timeline.session_minutes * 60.0
        self.connecting_seconds = float(self.pool.connecting_timeout_seconds)

    # -------------------------------------------------------------- time

    def instant(self, offset: float) -> datetime:
        return self.origin + timedelta(seconds=offset)

    def local(self, offset: float) -> str:
        at = self.instant(offset).astimezone(self.zone).replace(tzinfo=None)
        return at.isoformat(timespec="seconds")

    # -------------------------------------------------------------- hosts

    def add_host(self, now: float) -> None:
        self.created += 1
        name = f"host-{self.created:04d}"
        self.balancer.upsert_host(HostView(name=name))
        self.hosts[name] = _Host(name, empty_since=self.instant(now))

    def remove_host(self, name: str, now: float) -> None:
        for user in sorted(self.balancer.ledger.users_on(name)):
            self.end(user, now)  # none in practice: only empty hosts are removed
        self.balancer.remove_host(name)
        del self.hosts[name]

    def set_drain(self, name: str, drain: bool, now: float) -> None:
        """The plan drains a host (rule 5) or undrains one it drained (rule 4)."""
        view = self.balancer.host(name)
        if view is None:
            return
        self.balancer.upsert_host(
            HostView(
                name=name,
                drain_mode=drain,
                sessions=view.sessions,
                connecting=view.connecting,
                order=view.order,
            )
        )
        host = self.hosts[name]
        host.drained_by_plan = drain
        host.drained_at = self.instant(now) if drain else None

    def scale_hosts(self) -> list[ScaleHost]:
        return [
            ScaleHost(
                name=view.name,
                sessions=view.sessions,
                drain_mode=view.drain_mode,
                managed=True,
                empty_since=self.hosts[view.name].empty_since if view.sessions == 0 else None,
            )
            for view in self.balancer.hosts()
        ]

    # -------------------------------------------------------------- sessions

    def push(self, at: float, kind: int, user: str) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (at, kind, self.sequence, user))

    def try_place(self, user: str, now: float) -> bool:
        demand = Demand(user)
        placement = self.balancer.place(demand)
        if placement.host is None:
            return False
        self.balancer.commit(demand, placement)
        self.hosts[placement.host].empty_since = None
        self.placed += 1
        self.connecting.add(user)
        self.push(now + self.session_seconds, _END, user)
        if self.connecting_seconds < self.session_seconds:
            self.push(now + self.connecting_seconds, _CONNECTED, user)
        return True

    def place_waiting(self, now: float) -> None:
        while self.waiting and self.try_place(self.waiting[0], now):
            self.waiting.popleft()

    def arrive(self, user: str, now: float) -> None:
        if self.waiting or not self.try_place(user, now):
            self.waiting.append(user)
            self.peak_pending = max(self.peak_pending, len(self.waiting))

    def end(self, user: str, now: float) -> None:
        host = self.balancer.end_session(user, was_connecting=user in self.connecting)
        self.connecting.discard(user)
        self.logoffs.pop(user, None)
        if host is None:
            return
        view = self.balancer.host(host)
        if view is not None and view.sessions == 0 and host in self.hosts:
            self.hosts[host].empty_since = self.instant(now)
        self.place_waiting(now)

    def forced_logoff(self, user: str, now: float) -> None:
        if self.logoffs.get(user) == now:
            self.end(user, now)

    def connected(self, user: str) -> None:
        if user not in self.connecting:
            return
        self.connecting.discard(user)
        host = self.balancer.session_host(user)
        if host is not None:
            self.balancer.adjust_connecting(host, -1)

    # -------------------------------------------------------------- decisions

    def settle(self, now: float) -> None:
        """The passes at the end of a step: decide, place the waiting requests, and again
        while a pass adds capacity (what it added changes what the next one sees, as the
        operator's next pass would, seconds later)."""
        for _ in range(MAX_PASSES):
            taking = self.taking()
            self.decide(now)
            self.place_waiting(now)
            if self.taking() <= taking:
                break

    def taking(self) -> int:
        return sum(1 for view in self.balancer.hosts() if not view.drain_mode)

    def decide(self, now: float) -> None:
        """One pass: the plan's phase and rules when one is in force, else the pool's own
        algorithm and scaling."""
        self.phase = None if self.plan is None else phase_in_force(self.plan, self.instant(now))
        if self.phase is None:
            self.use_algorithm(self.pool.load_balancer.type)
            self.scale(now)
        else:
            self.use_algorithm(self.phase.load_balancer_type)
            self.follow_plan(self.phase, now)

    def use_algorithm(self, algorithm: LoadBalancerType) -> None:
        """Rule 2: the phase's algorithm, the pool's own limit."""
        if self.balancer.algorithm is algorithm:
            return
        balancer = self.pool.load_balancer.model_copy(update={"type": algorithm})
        self.balancer.set_spec(self.pool.model_copy(update={"load_balancer": balancer}))

    def scale(self, now: float) -> None:
        """The pool's own scaling (no phase in force)."""
        scaling = self.pool.scaling
        if scaling is None:
            return
        decision = decide_scaling(
            scaling, self.balancer.limit, self.scale_hosts(), len(self.waiting), self.instant(now)
        )
        for _ in range(decision.add):
            self.add_host(now)
        for name in decision.remove:
            self.remove_host(name, now)

    def follow_plan(self, phase: PhaseInForce, now: float) -> None:
        """Rules 3-6 (``plans.decide_plan``), then hosts for the requests still waiting
        (the pool's own scaling adds, with the plan's minimum in place of minHosts; it
        removes nothing while a plan is in force)."""
        scaling = self.pool.scaling
        assert scaling is not None  # validated: a pool that follows a plan has scaling
        instant = self.instant(now)
        views = list(self.balancer.hosts())
        plan_hosts = [
            PlanHost(
                name=v.name,
                sessions=v.sessions,
                active=v.sessions,  # simulated users never disconnect
                drain_mode=v.drain_mode,
                drained_by_plan=self.hosts[v.name].drained_by_plan,
                drained_at=self.hosts[v.name].drained_at,
                managed=True,
            )
            for v in views
        ]
        requests: list[PlanRequest] = []
        if phase.force_logoff_users or self.logoffs:
            requests = [
                PlanRequest(user, session.host, user in self.logoffs)
                for user, session in self.balancer.ledger.items()
            ]
        decision = decide_plan(
            phase,
            plan_hosts,
            self.balancer.limit,
            scaling.max_hosts,
            instant,
            requests,
            waiting=len(self.waiting),
        )
        for name in decision.undrain:
            self.set_drain(name, False, now)
        for user in decision.cancel_logoff:
            self.logoffs.pop(user, None)
        for _ in range(decision.add):
            self.add_host(now)
        for name in decision.drain:
            self.set_drain(name, True, now)
        for name in decision.delete:
            self.remove_host(name, now)
        for order in decision.logoff:
            deadline = max(now, (order.deadline - self.origin).total_seconds())
            self.logoffs[order.request] = deadline
            self.push(deadline, _LOGOFF, order.request)
        if self.waiting:
            own = scaling.model_copy(update={"min_hosts": 0})
            up = hosts_to_add(own, self.balancer.limit, self.scale_hosts(), len(self.waiting))
            for _ in range(up.add):
                self.add_host(now)

    # -------------------------------------------------------------- figures

    def used_capacity_percent(self) -> int:
        """100 x sessions / (taking x maxSessionLimit), rounded up; taking = hosts not
        draining (all simulated hosts are ready); 100 with sessions and no such host."""
        views = list(self.balancer.hosts())
        sessions = sum(v.sessions for v in views)
        taking = sum(1 for v in views if not v.drain_mode)
        if taking == 0:
            return 100 if sessions else 0
        return -(-100 * sessions // (taking * self.balancer.limit))

    def step(self, now: float) -> dict[str, Any]:
        views = list(self.balancer.hosts())
        algorithm: LoadBalancerType = self.balancer.algorithm
        return {
            "at": self.local(now),
            "phase": None if self.phase is None else self.phase.phase.value,
            "loadBalancerType": algorithm.value,
            "hosts": len(views),
            "sessions": sum(v.sessions for v in views),
            "pending": len(self.waiting),
            "usedCapacityPercent": self.used_capacity_percent(),
        }

    # -------------------------------------------------------------- the loop

    def run(self) -> dict[str, Any]:
        timeline = self.timeline
        total = timeline.hours * 3600.0
        step_seconds = timeline.step_minutes * 60.0
        arrivals = _arrival_offsets(timeline, self.zone, self.origin, total)
        for _ in range(timeline.hosts):
            self.add_host(0.0)
        self.settle(0.0)
        steps: list[dict[str, Any]] = []
        host_seconds = 0.0
        next_arrival = 0
        begin = 0.0
        while begin < total:
            end = min(begin + step_seconds, total)
            while True:
                arrival = arrivals[next_arrival] if next_arrival < len(arrivals) else math.inf
                event = self.events[0][0] if self.events else math.inf
                if min(arrival, event) > end:
                    break
                if event <= arrival:
                    at, kind, _, user = heapq.heappop(self.events)
                    if kind == _END:
                        self.end(user, at)
                    elif kind == _LOGOFF:
                        self.forced_logoff(user, at)
                    else:
                        self.connected(user)
                else:
                    next_arrival += 1
                    self.arrive(f"u{next_arrival:07d}", arrival)
            self.settle(end)
            step = self.step(end)
            steps.append(step)
            host_seconds += step["hosts"] * (end - begin)
            begin = end
        return {
            "steps": steps,
            "hostHours": round(host_seconds / 3600, 4),
            "placed": self.placed,
            "peakPending": max(self.peak_pending, *(s["pending"] for s in steps)),
        }


def run_timeline(document: dict[str, Any]) -> dict[str, Any]:
    """Run a timeline document; return its steps, hostHours, placed and peakPending."""
    timeline = parse_timeline(document)
    zone = UTC if timeline.plan is None else timeline.plan.zone
    return _Run(timeline, zone).run()
