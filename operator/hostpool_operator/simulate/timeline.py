"""Timeline simulation: a day (or a week) of logons through the engine and the pool's scaling.

``run_timeline(document) -> result`` (re-exported as ``simulate.run_timeline``) and
``hostpool-operator simulate --timeline FILE`` take the document of the contract's "Timeline
simulation": a pool, optionally a scaling plan, the hosts the operator created at the start,
logons per hour in daily windows and how long a session lasts, or a recorded history of
sessions replayed as it happened. Pure: simulated time only, no clock, no I/O. The document
is ``timeline_document``, the run ``replay``.

How a step ``(t0, t1]`` runs:

* Events up to ``t1`` in time order: a session ends ``sessionMinutes`` after it was placed
  (a recorded one, of ``sessions``, as long after as it lasted in the history),
  a new session stops counting as connecting after the pool's ``connectingTimeoutSeconds``,
  and logons arrive, spread evenly over each window (``perHour`` a hour). A logon is placed at
  once unless others wait before it; when a session ends, waiting requests are placed in
  arrival order while there is room. Ties: ends first, then logons.
* At ``t1`` one pass decides, as the operator's would. With a plan and a phase in force
  (``plans.phase_in_force``): the pool places with the phase's algorithm from then on, and
  ``plans.decide_plan`` keeps the minimum, undrains or adds over the capacity threshold,
  drains the emptiest hosts in ramp-down and off-peak and deletes drained hosts once empty
  (with ZeroActiveSessions, once only Disconnected sessions are left: they go with it);
  with forceLogoffUsers the users of a drained host are logged off at drain +
  waitTimeMinutes. Requests still waiting get hosts from the pool's own scaling (the plan's
  minimum in place of minHosts; it removes nothing while a plan is in force). Without a
  phase, the pool's own algorithm and scaling (``scaling.decide_scaling``, with
  ``scaleDownDelaySeconds`` in simulated time). Every simulated host is the operator's; new
  hosts take sessions ``hostStartMinutes`` after they were added (0: at once; meanwhile
  they count as capacity on its way, so the same demand never adds twice, and cost
  host-hours). Then the waiting requests are retried, and the pass runs again while it adds
  capacity (the requests it placed change what the next one sees).
* Session limits (the pool's ``sessionLimits``): a recorded session with ``disconnectedAt``
  is Disconnected from then (counted from its placement, as its end is) until its end,
  holding its slot; ``disconnectedMinutes`` logs it off that long after it was left.
  ``maxSessionMinutes`` after its placement a session is logged off, or with
  ``maxSessionAction: Disconnect`` disconnected (nobody reconnects in a replay: it stays
  Disconnected until its end, or until the disconnected limit logs it off). Synthetic
  arrivals are never left Disconnected. ``idleMinutes`` is not replayed: neither form says
  when a user last typed; ``notes`` says so. ``sessionsEndedByLimits`` counts the sessions
  a limit ended before their own end, ``sessionsDisconnectedByLimits`` those it
  disconnected, ``disconnectedSessionHours`` the session-hours spent Disconnected.
* The step reports the state at ``t1``; ``hostHours`` sums hosts x step length.
  ``peakPending`` is the most requests waiting at any moment: a request that finds no room
  waits for the next pass at a step's end (or a slot set free before it), so it may exceed
  every step's ``pending``; how long the pool takes to react is ``stepMinutes``.
* Each logon's wait (from its arrival to its placement; one still waiting at the end waited
  until the end) makes ``waitMinutes`` (p50, p90, p95, p99, max) and, with
  ``maxWaitMinutes``, ``waitedOverMaxPercent``: the share of logons that waited longer.

Times: ``start`` and the windows are local wall-clock times of the plan's ``timeZone`` (UTC
without a plan); time runs in UTC underneath, so a DST change makes ``at`` jump like a clock.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any

from ..api.base import LimitAction, SessionLimit
from .replay import replay
from .replay_state import Logon, ReplayInput, ReplayResult
from .timeline_document import Timeline, parse_timeline
from .waits import wait_table, waited_over_percent

#: The limits a replay can act on (``idleMinutes`` needs input times no document has).
_REPLAYED_LIMITS = (SessionLimit.DISCONNECTED, SessionLimit.MAX_SESSION)


def _utc_offset(day: date, minutes: int, zone: tzinfo, origin: datetime) -> float:
    """Seconds from ``origin`` to local ``day`` + ``minutes`` (may pass midnight)."""
    local = datetime.combine(day, time()) + timedelta(minutes=minutes)
    return (local.replace(tzinfo=zone) - origin).total_seconds()


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


def _recorded_logons(
    timeline: Timeline, zone: tzinfo, origin: datetime, total: float
) -> list[Logon]:
    """The recorded sessions that start within the run, in start order (a time without an
    offset is local), each lasting as long as it did."""
    assert timeline.sessions is not None
    out: list[Logon] = []
    for session in timeline.sessions:
        start, end, left = session.start, session.end, session.disconnected_at
        if start.tzinfo is None:
            start, end = start.replace(tzinfo=zone), end.replace(tzinfo=zone)
            left = None if left is None else left.replace(tzinfo=zone)
        at = (start - origin).total_seconds()
        if 0 <= at <= total:
            after = None if left is None else (left - start).total_seconds()
            out.append(Logon(at, (end - start).total_seconds(), session.user, after))
    out.sort(key=lambda logon: logon.at)
    return out


def update_offset(timeline: Timeline, zone: tzinfo, origin: datetime) -> float:
    """Seconds from the origin to the update (0 without one)."""
    if timeline.update is None:
        return 0.0
    return (timeline.update.at.replace(tzinfo=zone).astimezone(UTC) - origin).total_seconds()


def replay_input(timeline: Timeline) -> ReplayInput:
    """The run a validated document describes."""
    zone: tzinfo = UTC if timeline.plan is None else timeline.plan.zone
    origin = timeline.start.replace(tzinfo=zone).astimezone(UTC)
    total = timeline.hours * 3600.0
    if timeline.sessions is not None:
        logons = _recorded_logons(timeline, zone, origin, total)
    else:
        assert timeline.session_minutes is not None  # parse_timeline requires it
        seconds = timeline.session_minutes * 60.0
        logons = [Logon(at, seconds) for at in _arrival_offsets(timeline, zone, origin, total)]
    return ReplayInput(
        pool=timeline.pool,
        plan=timeline.plan,
        zone=zone,
        origin=origin,
        total_seconds=total,
        step_seconds=timeline.step_minutes * 60.0,
        logons=logons,
        hosts=timeline.hosts,
        seed=timeline.seed,
        host_start_seconds=timeline.host_start_minutes * 60.0,
        session_limits=timeline.pool.session_limits,
        update=timeline.update,
        update_at=update_offset(timeline, zone, origin),
    )


def limit_notes(timeline: Timeline) -> list[str]:
    """What the run could not replay of the pool's session limits, or where a limit can
    change nothing, in words."""
    limits = timeline.pool.session_limits
    if limits is None:
        return []
    notes: list[str] = []
    if limits.idle_minutes is not None:
        notes.append(
            "idleMinutes: not replayed: neither a recorded history nor arrivals say when a "
            "user last gave input, so no session here is disconnected or logged off for "
            "being idle"
        )
    disconnects_by_limit = (
        limits.max_session_minutes is not None
        and limits.max_session_action is LimitAction.DISCONNECT
    )
    if disconnects_by_limit:
        notes.append(
            "maxSessionAction Disconnect: nobody reconnects in a replay; a session it "
            "disconnects stays Disconnected, holding its slot, until its own end or "
            "disconnectedMinutes"
        )
    if limits.disconnected_minutes is not None and not disconnects_by_limit:
        if timeline.sessions is None:
            notes.append(
                "disconnectedMinutes: arrivals are never left Disconnected, so it changes "
                "nothing here; replay sessions with disconnectedAt to see its effect"
            )
        elif all(s.disconnected_at is None for s in timeline.sessions):
            notes.append(
                "disconnectedMinutes: no session has disconnectedAt, so it changes nothing here"
            )
    return notes


def timeline_result(
    run: ReplayResult, max_wait_minutes: float | None, notes: list[str] | None = None
) -> dict[str, Any]:
    """The contract's result of a run: steps, hostHours, placed, peakPending, the waits
    (``waitMinutes``; ``waitedOverMaxPercent``, null without a bound), and what the
    session limits did (``sessionsEndedByLimits``, ``sessionsDisconnectedByLimits``,
    ``disconnectedSessionHours``; ``notes``: what was not replayed)."""
    ended = {limit.value: run.ended_by.get(limit, 0) for limit in _REPLAYED_LIMITS}
    disconnected = {
        SessionLimit.MAX_SESSION.value: run.disconnected_by.get(SessionLimit.MAX_SESSION, 0)
    }
    return {
        "steps": run.steps,
        "hostHours": round(run.host_seconds / 3600, 4),
        "placed": run.placed,
        "peakPending": run.peak_pending,
        "waitMinutes": wait_table(run.waits),
        "waitedOverMaxPercent": (
            None if max_wait_minutes is None else waited_over_percent(run.waits, max_wait_minutes)
        ),
        "sessionsEndedByLimits": ended,
        "sessionsDisconnectedByLimits": disconnected,
        "disconnectedSessionHours": round(run.disconnected_seconds / 3600, 4),
        "notes": list(notes or []),
        **({} if run.update is None else {"update": update_result(run)}),
    }


def update_result(run: ReplayResult) -> dict[str, Any]:
    """``update``: when it started and completed (minutes after the start; completed null
    when it did not within the run), how long it took, the sessions ForceLogoff ended and
    the most hosts at once."""
    outcome = run.update
    assert outcome is not None
    done = outcome.completed
    return {
        "startedMinutes": round(outcome.started / 60, 2),
        "completedMinutes": None if done is None else round(done / 60, 2),
        "tookMinutes": None if done is None else round((done - outcome.started) / 60, 2),
        "sessionsEnded": outcome.sessions_ended,
        "peakHosts": outcome.peak_hosts,
    }


def run_timeline(document: dict[str, Any]) -> dict[str, Any]:
    """Run a timeline document; return its steps, hostHours, placed, peakPending,
    waitMinutes, waitedOverMaxPercent and what the session limits did."""
    timeline = parse_timeline(document)
    run = replay(replay_input(timeline))
    return timeline_result(run, timeline.max_wait_minutes, limit_notes(timeline))
