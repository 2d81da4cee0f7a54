"""Session limits (``HostPool.spec.sessionLimits``): what a pool's limits do to one session
now, and when that session next needs looking at.

Pure: a function of the pool's limits, the session's facts as its request's status holds
them (:class:`SessionFacts`), the operator's ``now`` and the host's clock offset. The host's
agent measures (state, logon, idle) with the host's clock; the operator decides with its
own, so every host time is moved onto the operator's clock by the offset first.

* **Disconnected** (``disconnectedMinutes``): Disconnected for that long since
  ``stateChangedAt`` → logged off at once, with no warning (nobody is there to read one).
  Each change of state starts the time again; 0 acts at once (no timestamp needed).
* **Idle** (``idleMinutes``): Active with ``idleSince`` set; the idle time counts from
  ``max(idleSince, stateChangedAt)`` (a reconnect starts it again) → ``idleAction``.
* **MaxSession** (``maxSessionMinutes``): from ``logonAt`` → ``maxSessionAction``; a
  Disconnect acts only on an Active session (once per Active stretch).

Active sessions are warned ``warningMinutes`` before an idle or session-time limit acts, once
per limit and period. Nothing is asked twice: no step while ``status.logoff`` is set, no
disconnect while one is pending (``status.disconnect`` without ``doneAt``), no second
disconnect or warning for a limit in a period that already had one. These facts live in the
request's status, so a restarted agent or operator never repeats or loses one.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..api import LimitAction, SessionLimit, SessionLimits, SessionState
from ..api.timestamps import parse_time, rfc3339

ZERO = timedelta(0)
#: A host clock estimated further than this from the operator's is no estimate (a sample seen
#: long after it was taken, e.g. the last one of an agent that died): offset 0.
MAX_HOST_OFFSET = timedelta(hours=1)

#: What each limit is called in Events and messages.
LIMIT_NAMES = {
    SessionLimit.DISCONNECTED: "disconnected",
    SessionLimit.IDLE: "idle",
    SessionLimit.MAX_SESSION: "session time",
}
_DONE = {LimitAction.DISCONNECT: "disconnected", LimitAction.LOGOFF: "logged off"}


def host_clock_offset(sampled_at: datetime | None, seen_at: datetime) -> timedelta:
    """The host's clock minus the operator's, estimated from a metrics sample: the host's
    ``sampledAt`` minus when the operator first saw that sample (its own clock). The sample
    was taken before it was seen, so this is never more than the true offset: a limit timed
    with it acts at its time by the host's clock or a little later, never early. No sample,
    or an absurd estimate (beyond :data:`MAX_HOST_OFFSET`): 0."""
    if sampled_at is None:
        return ZERO
    offset = sampled_at - seen_at
    return offset if abs(offset) <= MAX_HOST_OFFSET else ZERO


# ---------------------------------------------------------------------------- facts


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """What the limits read of one assigned request's status. Times from the agent
    (``state_changed_at``, ``logon_at``, ``idle_since``) are the host's clock; the markers
    the operator wrote (``notice_sent_at``, ``disconnect_requested_at``) its own."""

    state: str | None
    state_changed_at: datetime | None = None
    logon_at: datetime | None = None
    idle_since: datetime | None = None
    #: ``status.notice``: the limit it warned of (None: a person's message) and when it was sent.
    notice_limit: SessionLimit | None = None
    notice_sent_at: datetime | None = None
    #: ``status.disconnect``: the limit that asked (None: a person), when, and whether the
    #: agent has not acted on it yet (no ``doneAt``).
    disconnect_limit: SessionLimit | None = None
    disconnect_requested_at: datetime | None = None
    disconnect_pending: bool = False
    #: ``status.logoff`` is set: the session is ending, nothing more is asked of it.
    logoff: bool = False


class BadFactsError(ValueError):
    """A field the limits read is malformed (the message names it)."""


def _time(status: Mapping[str, Any], key: str, where: str = "status") -> datetime | None:
    value = status.get(key)
    if value is None:
        return None
    moment = parse_time(value)
    if moment is None:
        raise BadFactsError(f"{where}.{key}: not an RFC 3339 timestamp: {str(value)[:64]!r}")
    return moment


def _limit(part: Mapping[str, Any], where: str) -> SessionLimit | None:
    value = part.get("limit")
    if value is None:
        return None
    try:
        return SessionLimit(value)
    except ValueError:
        raise BadFactsError(f"{where}.limit: not a session limit: {str(value)[:64]!r}") from None


def _part(status: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    part = status.get(key)
    if part is None:
        return None
    if not isinstance(part, Mapping):
        raise BadFactsError(f"status.{key}: not an object")
    return part


def facts_of(status: Mapping[str, Any]) -> SessionFacts:
    """The facts of a request's status; :class:`BadFactsError` names a malformed field."""
    notice = _part(status, "notice")
    disconnect = _part(status, "disconnect")
    state = status.get("sessionState")
    return SessionFacts(
        state=state if isinstance(state, str) else None,
        state_changed_at=_time(status, "stateChangedAt"),
        logon_at=_time(status, "logonAt"),
        idle_since=_time(status, "idleSince"),
        notice_limit=None if notice is None else _limit(notice, "status.notice"),
        notice_sent_at=None if notice is None else _time(notice, "sentAt", "status.notice"),
        disconnect_limit=None if disconnect is None else _limit(disconnect, "status.disconnect"),
        disconnect_requested_at=(
            None if disconnect is None else _time(disconnect, "requestedAt", "status.disconnect")
        ),
        disconnect_pending=disconnect is not None and disconnect.get("doneAt") is None,
        logoff=bool(status.get("logoff")),
    )


# ---------------------------------------------------------------------------- decisions


class StepKind(enum.StrEnum):
    WARNING = "Warning"
    DISCONNECT = "Disconnect"
    LOGOFF = "Logoff"


#: When several steps are due at once, the strongest is taken.
_STRENGTH = {StepKind.WARNING: 0, StepKind.DISCONNECT: 1, StepKind.LOGOFF: 2}


@dataclass(frozen=True, slots=True)
class LimitStep:
    """One thing a limit asks of a session: a warning of ``action``, or ``action`` itself."""

    kind: StepKind
    limit: SessionLimit
    #: The limit's minutes (for the Event and the message).
    minutes: int
    #: What the limit does (for a warning: what it will do).
    action: LimitAction
    #: When the limit acts (operator clock; for a warning, a time to come).
    acts_at: datetime
    #: The text for the user: the warning's, or the logoff's.
    message: str

    @property
    def warning(self) -> bool:
        return self.kind is StepKind.WARNING

    def event_message(self) -> str:
        """``idle limit (30 min): disconnected``; a warning says what comes, and when."""
        head = f"{LIMIT_NAMES[self.limit]} limit ({self.minutes} min)"
        if self.warning:
            verb = "disconnect" if self.action is LimitAction.DISCONNECT else "logoff"
            return f"{head}: warned; {verb} due at {rfc3339(self.acts_at)}"
        return f"{head}: {_DONE[self.action]}"


@dataclass(frozen=True, slots=True)
class LimitDecision:
    """What to do now (None: nothing), and when to look at the session again if nothing
    changes (None: only when its request changes). After a step, the step's own write brings
    the request's next version, which is decided afresh: ``next_look`` is for the steps
    that remain."""

    step: LimitStep | None
    next_look: datetime | None


NOTHING = LimitDecision(None, None)


def _minutes_text(minutes: int) -> str:
    return "1 minute" if minutes == 1 else f"{minutes} minutes"


def warning_text(limits: SessionLimits, limit: SessionLimit, action: LimitAction, left: int) -> str:
    """The pool's ``message``, or what will happen, when, and why."""
    if limits.message:
        return limits.message
    verb = _DONE[action]
    why = (
        "it has been idle"
        if limit is SessionLimit.IDLE
        else f"it has reached its time limit of {_minutes_text(limits.max_session_minutes or 0)}"
    )
    return f"This session will be {verb} in {_minutes_text(left)} because {why}."


def logoff_text(limit: SessionLimit, minutes: int) -> str:
    """The text of a limit's logoff (the agent shows it as it logs the user off)."""
    if limit is SessionLimit.DISCONNECTED:
        return "This session was logged off because it was left disconnected" + (
            f" for {_minutes_text(minutes)}." if minutes else "."
        )
    if limit is SessionLimit.IDLE:
        return f"This session was logged off because it was idle for {_minutes_text(minutes)}."
    limit_text = _minutes_text(minutes)
    return f"This session was logged off because it reached its time limit of {limit_text}."


@dataclass(frozen=True, slots=True)
class _Clock:
    now: datetime
    offset: timedelta  # host clock minus operator clock

    def op(self, host_time: datetime) -> datetime:
        """A host time on the operator's clock."""
        return host_time - self.offset

    def acts_at(self, start: datetime, minutes: int) -> datetime:
        """When ``minutes`` have passed since ``start`` (a host time), operator clock. The
        elapsed time is never negative: a limit of 0 acts now whatever the times say."""
        return self.now if minutes == 0 else self.op(start) + timedelta(minutes=minutes)


@dataclass(frozen=True, slots=True)
class _Candidate:
    at: datetime
    step: LimitStep


def _warned(
    facts: SessionFacts, period_start: datetime, warn_at: datetime, limit: SessionLimit
) -> bool:
    """A warning of ``limit`` was given in the period starting at ``period_start`` (operator
    clock): the notice is this limit's and was sent in the period, or is another limit's sent
    after this one's warning was due (it replaced this one's, or was the one given for both)."""
    sent = facts.notice_sent_at
    if sent is None or facts.notice_limit is None or sent < period_start:
        return False
    return facts.notice_limit is limit or sent >= warn_at


def _disconnected_in(facts: SessionFacts, limit: SessionLimit, since: datetime) -> bool:
    """This limit asked for a disconnect at or after ``since`` (operator clock)."""
    requested = facts.disconnect_requested_at
    return _disconnect_asked(facts, limit) and requested is not None and requested >= since


def _disconnect_asked(facts: SessionFacts, limit: SessionLimit) -> bool:
    """This limit asked for a disconnect, at any time."""
    return facts.disconnect_limit is limit and facts.disconnect_requested_at is not None


def _limit_steps(
    limits: SessionLimits,
    facts: SessionFacts,
    clock: _Clock,
    rule: tuple[SessionLimit, int, LimitAction, datetime, datetime],
) -> list[_Candidate]:
    """The action of one timed limit, and its warning while the action is still to come.
    ``rule``: (limit, minutes, action, start of the time, start of the period) in host time."""
    limit, minutes, action, start, period = rule
    active = facts.state == SessionState.ACTIVE.value
    acts_at = clock.acts_at(start, minutes)
    due_at = acts_at
    if action is LimitAction.DISCONNECT:
        if not active or facts.disconnect_pending:
            return []  # disconnecting a session nobody uses, or twice, is nothing
        since = clock.op(period)
        if _disconnected_in(facts, limit, since):
            return []  # done in this period already
        if since > clock.now and _disconnect_asked(facts, limit):
            # The host dates this period after now (its clock a little ahead of the offset):
            # a disconnect this limit asked for is taken as this period's until the
            # operator's clock gets there (whatever the time now, so that the next look
            # holds); from then on only one asked in the period counts.
            due_at = max(acts_at, since)
    message = logoff_text(limit, minutes) if action is LimitAction.LOGOFF else ""
    kind = StepKind.LOGOFF if action is LimitAction.LOGOFF else StepKind.DISCONNECT
    found = [_Candidate(due_at, LimitStep(kind, limit, minutes, action, acts_at, message))]
    if due_at != acts_at:
        return found  # asked for already: no warning of it
    warning = limits.warning()
    if not active or warning == 0 or acts_at <= clock.now:
        return found
    warn_at = acts_at - timedelta(minutes=warning)
    if _warned(facts, clock.op(start), warn_at, limit):
        return found
    left = math.ceil((acts_at - max(warn_at, clock.now)).total_seconds() / 60)
    text = warning_text(limits, limit, action, max(1, left))
    found.append(
        _Candidate(warn_at, LimitStep(StepKind.WARNING, limit, minutes, action, acts_at, text))
    )
    return found


def _candidates(limits: SessionLimits, facts: SessionFacts, clock: _Clock) -> list[_Candidate]:
    found: list[_Candidate] = []
    state = facts.state
    minutes = limits.disconnected_minutes
    if state == SessionState.DISCONNECTED.value and minutes is not None:
        start = facts.state_changed_at
        if minutes == 0 or start is not None:
            acts_at = clock.now if start is None else clock.acts_at(start, minutes)
            step = LimitStep(
                StepKind.LOGOFF,
                SessionLimit.DISCONNECTED,
                minutes,
                LimitAction.LOGOFF,
                acts_at,
                logoff_text(SessionLimit.DISCONNECTED, minutes),
            )
            found.append(_Candidate(acts_at, step))
    idle = facts.idle_since
    if state == SessionState.ACTIVE.value and idle is not None and limits.idle_minutes:
        start = max(idle, facts.state_changed_at or idle)
        rule = (SessionLimit.IDLE, limits.idle_minutes, limits.idle_action, start, start)
        found += _limit_steps(limits, facts, clock, rule)
    logon = facts.logon_at
    if logon is not None and limits.max_session_minutes and state in _REPORTED:
        # A Disconnect acts once per Active stretch: a reconnect after it is disconnected again.
        stretch = max(logon, facts.state_changed_at or logon)
        rule = (
            SessionLimit.MAX_SESSION,
            limits.max_session_minutes,
            limits.max_session_action,
            logon,
            stretch if limits.max_session_action is LimitAction.DISCONNECT else logon,
        )
        found += _limit_steps(limits, facts, clock, rule)
    return found


_REPORTED = (SessionState.ACTIVE.value, SessionState.DISCONNECTED.value)


def decide(
    limits: SessionLimits, facts: SessionFacts, now: datetime, host_offset: timedelta = ZERO
) -> LimitDecision:
    """What the pool's limits do to this session at ``now`` (operator clock), given the
    host's clock offset (host minus operator), and when to look again."""
    if facts.logoff or facts.state not in _REPORTED:
        return NOTHING  # ending already, or not reported by its host yet
    clock = _Clock(now, host_offset)
    candidates = _candidates(limits, facts, clock)
    due = [c for c in candidates if c.at <= now]
    step = None
    if due:
        # The strongest step due; among equals, the one whose limit acts first.
        step = max(due, key=lambda c: (_STRENGTH[c.step.kind], -c.step.acts_at.timestamp())).step
    later = [c.at for c in candidates if c.at > now]
    return LimitDecision(step, min(later) if later else None)


def limit_patch(step: LimitStep, now: datetime) -> dict[str, Any]:
    """The merge patch of a request's status that carries ``step`` out: a notice, a
    disconnect or a logoff (deadline now), each naming the limit and replacing any earlier
    one whole (its ``shownAt`` or ``doneAt`` cleared)."""
    at = rfc3339(now)
    limit = step.limit.value
    if step.warning:
        return {"notice": {"message": step.message, "sentAt": at, "limit": limit, "shownAt": None}}
    if step.kind is StepKind.DISCONNECT:
        return {"disconnect": {"requestedAt": at, "limit": limit, "doneAt": None}}
    return {"logoff": {"message": step.message, "deadline": at, "limit": limit, "shownAt": None}}


# ---------------------------------------------------------------------------- looks
