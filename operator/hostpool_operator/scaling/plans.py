"""Scaling plans' decisions (rules 1-6 of the contract's ScalingPlan section): the phase in
force at an instant, the minimum of hosts, the used capacity, and what a pool's hosts need
now: undrain, add, drain, delete, forced logoffs.

Pure functions (no I/O, no clock: ``now`` is passed in, an aware datetime). The operator
builds ``PlanHost`` and ``PlanRequest`` from its state and carries out the ``PlanDecision``;
the simulator does the same on its own state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from ..api.base import LoadBalancerType
from ..api.plan import WEEKDAYS, PlanPhase, PlanRules, Schedule, StopHostsWhen, zone_of

#: Phases that shrink the pool (rule 5) and take ramp-down's settings (rules 3-4).
SHRINKING = (PlanPhase.RAMP_DOWN, PlanPhase.OFF_PEAK)
#: How far back the phase in force is looked for: a week, so Friday's off-peak lasts
#: through a weekend without a schedule (and any weekly schedule always has a phase).
LOOK_BACK_DAYS = 7


@dataclass(frozen=True, slots=True)
class PhaseInForce:
    """A schedule's phase and the settings it brings (rules 2-4, 6): ramp-up's minimum and
    threshold in RampUp and Peak, ramp-down's in RampDown and OffPeak; the ramp-down
    extras (logoff, wait, message, stopHostsWhen) always come from the ramp-down and act
    only in shrinking phases."""

    schedule: str
    phase: PlanPhase
    #: When the phase started, in the plan's time zone (compare instants in UTC: aware
    #: datetimes of one zone compare by wall time, ignoring ``fold``).
    since: datetime
    load_balancer_type: LoadBalancerType
    minimum_hosts_percent: int
    capacity_threshold_percent: int
    force_logoff_users: bool
    wait_time_minutes: int
    notification_message: str
    stop_hosts_when: StopHostsWhen

    @property
    def shrinks(self) -> bool:
        """RampDown or OffPeak: the only phases in which hosts are drained and removed."""
        return self.phase in SHRINKING


def settings_of(schedule: Schedule, phase: PlanPhase, since: datetime) -> PhaseInForce:
    """A schedule's phase with the settings that apply in it (rules 3-4)."""
    own = {
        PlanPhase.RAMP_UP: schedule.ramp_up,
        PlanPhase.PEAK: schedule.peak,
        PlanPhase.RAMP_DOWN: schedule.ramp_down,
        PlanPhase.OFF_PEAK: schedule.off_peak,
    }[phase]
    capacity = schedule.ramp_down if phase in SHRINKING else schedule.ramp_up
    down = schedule.ramp_down
    return PhaseInForce(
        schedule=schedule.name,
        phase=phase,
        since=since,
        load_balancer_type=own.load_balancer_type,
        minimum_hosts_percent=capacity.minimum_hosts_percent,
        capacity_threshold_percent=capacity.capacity_threshold_percent,
        force_logoff_users=down.force_logoff_users,
        wait_time_minutes=down.wait_time_minutes,
        notification_message=down.notification_message,
        stop_hosts_when=down.stop_hosts_when,
    )


def _start_time(schedule: Schedule, phase: PlanPhase) -> time:
    text = {
        PlanPhase.RAMP_UP: schedule.ramp_up.start_time,
        PlanPhase.PEAK: schedule.peak.start_time,
        PlanPhase.RAMP_DOWN: schedule.ramp_down.start_time,
        PlanPhase.OFF_PEAK: schedule.off_peak.start_time,
    }[phase]
    hours, minutes = text.split(":")
    return time(int(hours), int(minutes))


def _offset_at(instant: int, zone: ZoneInfo) -> timedelta | None:
    return datetime.fromtimestamp(instant, UTC).astimezone(zone).utcoffset()


def local_start(day: date, at: time, zone: ZoneInfo) -> datetime:
    """The instant (UTC) at which local wall time ``at`` of ``day`` starts in ``zone``.

    A time that occurs twice (the fall-back hour) counts once, at its first occurrence. A
    time that does not exist (the spring-forward gap, e.g. 02:30 in Europe/Stockholm on
    2026-03-29) starts at the first instant that exists after it: the transition itself
    (03:00 local that day), so a phase is neither skipped nor started an hour late.
    """
    naive = datetime.combine(day, at)
    first = naive.replace(tzinfo=zone, fold=0)
    if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == naive:
        return first.astimezone(UTC)
    # In a gap: fold=1 reads the wall time with the offset after the transition (an
    # instant before it), fold=0 with the offset before (an instant after it).
    before = int(naive.replace(tzinfo=zone, fold=1).timestamp())
    after = int(first.timestamp())
    later_offset = _offset_at(after, zone)
    while after - before > 1:
        middle = (before + after) // 2
        if _offset_at(middle, zone) == later_offset:
            after = middle
        else:
            before = middle
    return datetime.fromtimestamp(after, UTC)


def phase_in_force(spec: PlanRules, now: datetime) -> PhaseInForce | None:
    """Rule 1: the most recent phase start at or before ``now`` of any schedule, looking
    back up to seven days in the plan's time zone. None only for a plan without schedules
    (which the API refuses): with one scheduled day a week, some phase is always in force.

    ``now`` must be aware; ValueError when the plan's zone is unknown (``zone_of``). DST in
    the plan's zone: see ``local_start`` (a missing start time starts at the transition; a
    repeated one at its first occurrence). Should two starts fall on one instant (two
    start times inside one spring-forward gap), the later phase of the day wins.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be an aware datetime")
    zone = zone_of(spec.time_zone)
    instant = now.astimezone(UTC)
    today = instant.astimezone(zone).date()
    best: tuple[datetime, int, Schedule, PlanPhase] | None = None
    for back in range(LOOK_BACK_DAYS + 1):
        day = today - timedelta(days=back)
        weekday = WEEKDAYS[day.weekday()]
        for schedule in spec.schedules:
            if weekday not in schedule.days_of_week:
                continue
            for order, phase in enumerate(PlanPhase):
                start = local_start(day, _start_time(schedule, phase), zone)
                if start > instant:
                    continue
                if best is None or (start, order) > (best[0], best[1]):
                    best = (start, order, schedule, phase)
    if best is None:
        return None
    start, _, schedule, phase = best
    return settings_of(schedule, phase, start.astimezone(zone))


def next_phase_start(spec: PlanRules, now: datetime) -> datetime | None:
    """The first phase start of any schedule after ``now`` (UTC), within the next eight
    days: when the phase in force changes next, so the operator wakes up then. None for a
    plan without schedules. ValueError as ``phase_in_force``."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be an aware datetime")
    zone = zone_of(spec.time_zone)
    instant = now.astimezone(UTC)
    today = instant.astimezone(zone).date()
    found: datetime | None = None
    for ahead in range(LOOK_BACK_DAYS + 1):
        day = today + timedelta(days=ahead)
        weekday = WEEKDAYS[day.weekday()]
        for schedule in spec.schedules:
            if weekday not in schedule.days_of_week:
                continue
            for phase in PlanPhase:
                start = local_start(day, _start_time(schedule, phase), zone)
                if start > instant and (found is None or start < found):
                    found = start
        if found is not None:
            return found
    return found


# ---------------------------------------------------------------------------------------
# Capacity (rules 3-5)


def minimum_hosts(max_hosts: int, percent: int) -> int:
    """Rule 3: ceil(maxHosts x percent / 100), in integers (no float rounding)."""
    return -(-max_hosts * percent // 100)


def used_capacity_percent(sessions: int, taking: int, limit: int) -> float:
    """Rule 4: 100 x sessions / (taking x limit). With no host taking sessions: 100 when
    there are sessions (on draining or not-ready hosts), else 0."""
    if taking <= 0:
        return 100.0 if sessions > 0 else 0.0
    return 100.0 * sessions / (taking * limit)


def _fits(sessions: int, taking: int, limit: int, threshold: int) -> bool:
    """Used % <= threshold with ``taking`` hosts, in exact integers (0 hosts fit 0
    sessions only)."""
    return 100 * sessions <= threshold * taking * limit


def hosts_for(sessions: int, limit: int, threshold: int) -> int:
    """The fewest hosts taking sessions that keep used % at or below ``threshold``."""
    return math.ceil(100 * sessions / (threshold * limit)) if sessions > 0 else 0


@dataclass(frozen=True, slots=True)
class PlanHost:
    """What the plan's rules need to know of one host (in query order)."""

    name: str
    #: All its sessions (Connecting, Active, Disconnected).
    sessions: int = 0
    #: Its Connecting and Active sessions (ZeroActiveSessions waits for none).
    active: int = 0
    drain_mode: bool = False
    #: Drained by a plan's rule 5 (the operator marks the hosts it drains).
    drained_by_plan: bool = False
    #: When the plan drained it (the logoff deadline counts from it); None: unknown.
    drained_at: datetime | None = None
    #: Created by the operator (only those are ever drained, undrained or removed).
    managed: bool = False
    #: Takes sessions when not draining and below the limit (its workload, if any, is
    #: Ready); "taking" = ready and not draining, full hosts included.
    ready: bool = True
    #: Added by the operator and still starting: capacity on its way, counted when adding
    #: (so the same demand never adds twice), never drained.
    starting: bool = False

    @property
    def taking(self) -> bool:
        return self.ready and not self.drain_mode

    @property
    def on_the_way(self) -> bool:
        return self.starting and not self.ready and not self.drain_mode

    @property
    def plan_drained(self) -> bool:
        return self.drained_by_plan and self.drain_mode and self.managed


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """An assigned request: its name, its host, and whether it carries status.logoff."""

    name: str
    host: str
    has_logoff: bool = False


@dataclass(frozen=True, slots=True)
class LogoffOrder:
    """Rule 6: set ``status.logoff: {message, deadline}`` on the request."""

    request: str
    host: str
    message: str
    deadline: datetime


@dataclass(frozen=True, slots=True)
class PlanDecision:
    """What the plan wants of a pool now. The operator undrains, creates ``add`` hosts,
    drains, sets logoffs, deletes the Disconnected requests of ``clear_disconnected`` and
    then the hosts of ``delete`` (which includes them)."""

    minimum_hosts: int
    used_capacity_percent: float
    undrain: tuple[str, ...] = ()
    add: int = 0
    #: maxHosts kept it from adding all it wanted (rules 3-4).
    limited: bool = False
    drain: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()
    #: Hosts of ``delete`` (ZeroActiveSessions) whose Disconnected requests go first.
    clear_disconnected: tuple[str, ...] = ()
    logoff: tuple[LogoffOrder, ...] = ()
    #: Requests whose logoff is withdrawn: their host was undrained.
    cancel_logoff: tuple[str, ...] = ()


def decide_plan(
    phase: PhaseInForce,
    pool_hosts: Sequence[PlanHost],
    limit: int,
    max_hosts: int,
    now: datetime,
    requests: Iterable[PlanRequest] = (),
    waiting: int = 0,
) -> PlanDecision:
    """Rules 3-6 for one pool: ``limit`` is its maxSessionLimit, ``max_hosts`` its
    scaling.maxHosts (every host counts toward it, whoever created it).

    - Used % counts every session of the pool (a drained host's users too) over the
      hosts taking sessions, so draining a host never raises it above T by itself and the
      next pass does not undo a drain.
    - Grow (any phase), when used % > T or fewer than the minimum hosts take sessions
      (starting hosts count): first undrain hosts the plan drained (most sessions first,
      then query order; ready ones only), then add the fewest hosts that reach both.
    - Shrink (RampDown, OffPeak only), when nothing needs to grow and no request waits for
      a host (``waiting``: the pool's own scaling is adding one for it, which the plan must
      not drain before the request is on it): while more than the minimum take sessions
      and one fewer keeps used % <= T, drain the operator's taking host with the fewest
      sessions (ties: the last in query order).
    - Delete (RampDown, OffPeak only) hosts the plan drained (seen drained, so placement
      saw it first) once they have no session (ZeroSessions) or no Connecting/Active one
      (ZeroActiveSessions: their Disconnected requests are deleted first).
    - Logoff (RampDown, OffPeak, forceLogoffUsers): every request without one on a host
      drained by the plan that stays drained and is not being deleted; deadline = drain
      time (now for hosts drained by this decision, else ``drained_at``, else now) + wait.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    minimum = minimum_hosts(max_hosts, phase.minimum_hosts_percent)
    sessions = sum(h.sessions for h in pool_hosts)
    taking = sum(h.taking for h in pool_hosts)
    used = used_capacity_percent(sessions, taking, limit)
    rule = _Capacity(sessions, limit, phase.capacity_threshold_percent, minimum)

    # Rules 3-4: grow.
    capacity = taking + sum(h.on_the_way for h in pool_hosts)
    undrain = _undrain(pool_hosts, rule, capacity)
    capacity += len(undrain)
    wanted = max(hosts_for(sessions, limit, rule.threshold) - capacity, minimum - capacity, 0)
    room = max(0, max_hosts - len(pool_hosts))
    add = min(wanted, room)
    undrained = set(undrain)
    by_host = _by_host(requests)
    cancel = tuple(r.name for name in undrain for r in by_host.get(name, ()) if r.has_logoff)
    if not phase.shrinks:
        return PlanDecision(minimum, used, undrain, add, wanted > room, cancel_logoff=cancel)

    # Rule 5: shrink, only when nothing needs to grow.
    grows = bool(undrain) or wanted > 0 or waiting > 0
    drain = () if grows else _drain(pool_hosts, rule, taking)
    delete, clear = _deletions(pool_hosts, phase.stop_hosts_when, undrained)

    # Rule 6: forced logoff.
    logoff: tuple[LogoffOrder, ...] = ()
    if phase.force_logoff_users:
        since = _drained_since(
            pool_hosts, now, drained_now=set(drain), undrained=undrained, deleting=set(delete)
        )
        logoff = _logoffs(phase, pool_hosts, by_host, since)
    return PlanDecision(
        minimum, used, undrain, add, wanted > room, drain, delete, clear, logoff, cancel
    )


@dataclass(frozen=True, slots=True)
class _Capacity:
    """Rules 3-4 at one pass: the pool's sessions, its limit per host, the threshold in
    force and the minimum of hosts taking sessions."""

    sessions: int
    limit: int
    threshold: int
    minimum: int

    def enough(self, taking: int) -> bool:
        """``taking`` hosts are at least the minimum and keep used % <= the threshold."""
        return taking >= self.minimum and _fits(self.sessions, taking, self.limit, self.threshold)


def _undrain(pool_hosts: Sequence[PlanHost], rule: _Capacity, capacity: int) -> tuple[str, ...]:
    """Hosts the plan drained to take back, most sessions first, then query order (ready
    ones only), until ``capacity`` plus them is enough."""
    candidates = sorted(
        (i for i, h in enumerate(pool_hosts) if h.plan_drained and h.ready),
        key=lambda i: (-pool_hosts[i].sessions, i),
    )
    undrain: list[str] = []
    for i in candidates:
        if rule.enough(capacity + len(undrain)):
            break
        undrain.append(pool_hosts[i].name)
    return tuple(undrain)


def _drain(pool_hosts: Sequence[PlanHost], rule: _Capacity, taking: int) -> tuple[str, ...]:
    """The operator's taking hosts to drain, fewest sessions first (ties: the last in query
    order), while one fewer is still enough."""
    emptiest = sorted(
        (i for i, h in enumerate(pool_hosts) if h.taking and h.managed),
        key=lambda i: (pool_hosts[i].sessions, -i),
    )
    drain: list[str] = []
    for i in emptiest:
        if not rule.enough(taking - len(drain) - 1):
            break
        drain.append(pool_hosts[i].name)
    return tuple(drain)


def _deletions(
    pool_hosts: Sequence[PlanHost], stop_when: StopHostsWhen, undrained: set[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The hosts the plan drained that can go, and those of them whose Disconnected
    requests are deleted first (ZeroActiveSessions)."""
    delete: list[str] = []
    clear: list[str] = []
    for host in pool_hosts:
        if not host.plan_drained or host.name in undrained:
            continue
        if stop_when is StopHostsWhen.ZERO_SESSIONS:
            if host.sessions == 0:
                delete.append(host.name)
        elif host.active == 0:
            delete.append(host.name)
            if host.sessions > 0:
                clear.append(host.name)
    return tuple(delete), tuple(clear)


def _by_host(requests: Iterable[PlanRequest]) -> dict[str, list[PlanRequest]]:
    by_host: dict[str, list[PlanRequest]] = {}
    for request in requests:
        by_host.setdefault(request.host, []).append(request)
    return by_host


def _drained_since(
    pool_hosts: Sequence[PlanHost],
    now: datetime,
    *,
    drained_now: set[str],
    undrained: set[str],
    deleting: set[str],
) -> dict[str, datetime]:
    """When each host whose users are logged off was drained: now for those this decision
    drains, else the stored time (now if unknown). Hosts being deleted or undrained have
    none."""
    since: dict[str, datetime] = {}
    for host in pool_hosts:
        if host.name in deleting:
            continue
        if host.name in drained_now:
            since[host.name] = now
        elif host.plan_drained and host.name not in undrained:
            since[host.name] = host.drained_at if host.drained_at is not None else now
    return since


def _logoffs(
    phase: PhaseInForce,
    pool_hosts: Sequence[PlanHost],
    by_host: Mapping[str, list[PlanRequest]],
    since: Mapping[str, datetime],
) -> tuple[LogoffOrder, ...]:
    """A logoff for every request without one on the hosts of ``since``, due the wait time
    after the host's drain."""
    wait = timedelta(minutes=phase.wait_time_minutes)
    return tuple(
        LogoffOrder(r.name, host.name, phase.notification_message, drained + wait)
        for host in pool_hosts
        if (drained := since.get(host.name)) is not None
        for r in by_host.get(host.name, ())
        if not r.has_logoff
    )
