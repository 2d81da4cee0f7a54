"""The host agent's session decisions: what the machine says about its users, what that
changes in the requests assigned to the host (state, logon, idle time), when a forced logoff
is due, and what to do of an administrator's or a session limit's disconnect and notice.

Pure: the agent runs the commands and writes; these functions take their output, the
requests and ``now``, and say what to write, delete or run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..api.base import SessionLimit, SessionState
from ..api.request import ConnectOutcome, ConnectPhase
from ..api.timestamps import parse_time, rfc3339
from ..diagnostics import connects as diagnostics

#: Samples in a row a reported user must be missing before the request is deleted (logoff):
#: one missed sample may be a command that raced a reconnect.
MISSES_FOR_LOGOFF = 2

REPORTED_STATES = {SessionState.ACTIVE.value, SessionState.DISCONNECTED.value}
#: A session with no input this long has ``status.idleSince`` (the limits count whole
#: minutes; a shorter pause is nobody's business).
IDLE_REPORT_SECONDS = 60.0
#: A new idleSince is written only when it moves by more than this (the samples' own jitter
#: and the timestamps' whole seconds are not a new idle period).
IDLE_REWRITE_SECONDS = 5.0
#: How much shorter than the stored idle period the measured idle time must be before an
#: Idle disconnect or logoff is taken back (sampling, rounding and the clocks' difference).
IDLE_SLACK_SECONDS = 10.0
#: Titles of the message window.
NOTICE_TITLE = "Message from your administrator"
WARNING_TITLE = "Session time limit"
LOGOFF_TITLE = "Your session will end"


@dataclass(frozen=True, slots=True)
class SessionLines:
    """The sessions command's output read: state and idle seconds by user, and what was
    wrong with the lines that were skipped."""

    states: dict[str, str]
    idle: dict[str, float]
    problems: list[str]


def parse_session_lines(text: str) -> SessionLines:
    """The sessions command's output: one JSON object a line, {"user": ..., "state":
    "Active"|"Disconnected", "idleSeconds": N (optional, a number >= 0)}. Blank lines are
    ignored; a malformed line is skipped and named. A user listed twice is Active if any line
    says so, and idle the least of the lines' idle times."""
    states: dict[str, str] = {}
    idle: dict[str, float] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        entry, problem = _session_line(line)
        if entry is None:
            problems.append(f"line {number}: {problem}")
            continue
        user, state, seconds = entry
        if states.get(user) != SessionState.ACTIVE.value:
            states[user] = state
        if seconds is not None:
            idle[user] = min(seconds, idle.get(user, seconds))
    return SessionLines(states, idle, problems)


def _session_line(line: str) -> tuple[tuple[str, str, float | None] | None, str]:
    try:
        entry = json.loads(line)
    except ValueError:
        return None, "not JSON"
    if not isinstance(entry, dict):
        return None, "not an object"
    user, state = entry.get("user"), entry.get("state")
    if not isinstance(user, str) or not user:
        return None, "no user"
    if state not in REPORTED_STATES:
        return None, f"state {state!r} is not Active or Disconnected"
    seconds = entry.get("idleSeconds")
    if seconds is not None:
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            return None, f"idleSeconds {str(seconds)[:40]!r} is not a number >= 0"
        seconds = float(seconds)
    return (user, str(state), seconds), ""


def parse_sessions(text: str) -> tuple[dict[str, str], list[str]]:
    """The states of ``parse_session_lines`` and its problems."""
    lines = parse_session_lines(text)
    return lines.states, lines.problems


@dataclass(frozen=True, slots=True)
class DisconnectAsk:
    """``status.disconnect``: when asked (the raw timestamp too, to tell one ask from the
    next), the limit that asked, and when the agent acted (None: to do)."""

    requested: str
    requested_at: datetime | None
    limit: str | None
    done_at: datetime | None


@dataclass(frozen=True, slots=True)
class NoticeAsk:
    """``status.notice``: the message, when sent (raw and read), the limit it warns of, and
    when the agent showed it (None: to show)."""

    message: str
    sent: str
    limit: str | None
    shown_at: datetime | None


def _disconnect_ask(value: object) -> DisconnectAsk | None:
    if not isinstance(value, Mapping):
        return None
    requested = value.get("requestedAt")
    limit = value.get("limit")
    return DisconnectAsk(
        requested=requested if isinstance(requested, str) else "",
        requested_at=parse_time(requested),
        limit=limit if isinstance(limit, str) else None,
        done_at=parse_time(value.get("doneAt")),
    )


def _notice_ask(value: object) -> NoticeAsk | None:
    if not isinstance(value, Mapping):
        return None
    message, sent, limit = value.get("message"), value.get("sentAt"), value.get("limit")
    if not isinstance(message, str) or not message:
        return None
    return NoticeAsk(
        message=message,
        sent=sent if isinstance(sent, str) else "",
        limit=limit if isinstance(limit, str) else None,
        shown_at=parse_time(value.get("shownAt")),
    )


@dataclass(frozen=True, slots=True)
class HostRequest:
    """A SessionRequest assigned to the agent's host, as the agent reads it."""

    name: str
    uid: str
    user: str
    session_state: str | None
    logoff_message: str | None = None
    logoff_deadline: datetime | None = None
    logoff_limit: str | None = None
    #: ``status.logoff.shownAt`` is set: the user was told of this logoff already.
    logoff_shown: bool = False
    logon_at: datetime | None = None
    idle_since: datetime | None = None
    disconnect: DisconnectAsk | None = None
    notice: NoticeAsk | None = None
    resource_version: str = ""
    assigned_at: datetime | None = None
    #: status.connects as stored (JSON text: the record stays hashable); "" when none.
    connects_json: str = ""

    @property
    def connect_under_way(self) -> bool:
        """A connect on it has not ended yet (logon diagnostics)."""
        return bool(self.connects_json) and diagnostics.under_way(self.connects) is not None

    @property
    def connects(self) -> list[dict[str, Any]]:
        if not self.connects_json:
            return []
        found = json.loads(self.connects_json)
        return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> HostRequest | None:
        """None when the object is not a usable assigned request."""
        meta, spec, status = (obj.get(k) for k in ("metadata", "spec", "status"))
        if not (isinstance(meta, Mapping) and isinstance(spec, Mapping)):
            return None
        status = status if isinstance(status, Mapping) else {}
        user = spec.get("user")
        if not isinstance(user, str) or status.get("phase") != "Assigned":
            return None
        logoff = status.get("logoff")
        message = deadline = limit = None
        shown = False
        if isinstance(logoff, Mapping):
            shown = logoff.get("shownAt") is not None
            message = str(logoff.get("message") or "")
            deadline = parse_time(logoff.get("deadline"))
            limit = logoff.get("limit") if isinstance(logoff.get("limit"), str) else None
        state = status.get("sessionState")
        return cls(
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            user=user,
            session_state=state if isinstance(state, str) else None,
            logoff_message=message,
            logoff_deadline=deadline,
            logoff_limit=limit,
            logoff_shown=shown,
            logon_at=parse_time(status.get("logonAt")),
            idle_since=parse_time(status.get("idleSince")),
            disconnect=_disconnect_ask(status.get("disconnect")),
            notice=_notice_ask(status.get("notice")),
            resource_version=str(meta.get("resourceVersion", "")),
            assigned_at=parse_time(status.get("assignedAt")),
            connects_json=json.dumps(status["connects"])
            if isinstance(status.get("connects"), list)
            else "",
        )


@dataclass
class SessionTracker:
    """What the agent remembers between samples: users it has seen, and how many samples
    in a row each has been missing."""

    seen: set[str] = field(default_factory=set)
    misses: dict[str, int] = field(default_factory=dict)

    def sample(
        self, requests: Iterable[HostRequest], reported: Mapping[str, str]
    ) -> tuple[list[tuple[HostRequest, str]], list[HostRequest]]:
        """One sample of the machine's sessions against the requests on this host.

        Returns the sessionState writes (a request whose stored state differs from what the
        machine reports) and the requests to delete (their user was seen, then missing
        ``MISSES_FOR_LOGOFF`` samples in a row: logged off). A user never seen is left
        alone: the session may still be logging on (Connecting)."""
        writes: list[tuple[HostRequest, str]] = []
        deletes: list[HostRequest] = []
        users_on_host: set[str] = set()
        for request in requests:
            users_on_host.add(request.user)
            state = reported.get(request.user)
            if state is not None:
                self.seen.add(request.user)
                self.misses.pop(request.user, None)
                if request.session_state != state:
                    writes.append((request, state))
            elif request.user in self.seen:
                misses = self.misses.get(request.user, 0) + 1
                self.misses[request.user] = misses
                if misses >= MISSES_FOR_LOGOFF:
                    deletes.append(request)
        for request in deletes:
            self.forget(request.user)
        # Users with no request on this host any more need no memory.
        for user in list(self.seen):
            if user not in users_on_host:
                self.forget(user)
        return writes, deletes

    def forget(self, user: str) -> None:
        self.seen.discard(user)
        self.misses.pop(user, None)


@dataclass
class LogoffTracker:
    """Forced logoffs: which requests were notified (once each), which are due."""

    notified: set[str] = field(default_factory=set)  # request uids

    def due(
        self, requests: Iterable[HostRequest], now: datetime
    ) -> tuple[list[HostRequest], list[HostRequest]]:
        """(to notify now, to log off now). A request is notified once; at its deadline it
        is logged off (also when the notice was never given: the deadline rules)."""
        notify: list[HostRequest] = []
        logoff: list[HostRequest] = []
        live: set[str] = set()
        for request in requests:
            if request.logoff_deadline is None:
                continue
            live.add(request.uid)
            if request.logoff_deadline <= now:
                logoff.append(request)
            elif request.uid not in self.notified:
                notify.append(request)
                self.notified.add(request.uid)
        self.notified &= live | {r.uid for r in notify}
        return notify, logoff

    @staticmethod
    def next_deadline(requests: Iterable[HostRequest]) -> datetime | None:
        deadlines = [r.logoff_deadline for r in requests if r.logoff_deadline is not None]
        return min(deadlines) if deadlines else None


# ------------------------------------------------------------------ what the agent writes


def state_fields(request: HostRequest, state: str, now: datetime) -> dict[str, Any]:
    """The status fields a sample of the session in ``state`` changes: sessionState with
    stateChangedAt when the state is new, logonAt the first time the session is reported
    (never again). Empty: nothing to write."""
    fields: dict[str, Any] = {}
    if request.session_state != state:
        fields["sessionState"] = state
        fields["stateChangedAt"] = rfc3339(now)
    if request.logon_at is None:
        fields["logonAt"] = rfc3339(now)
    return fields


def connect_fields(
    request: HostRequest, state: str, now: datetime, logon: tuple[float, float] | None
) -> dict[str, Any]:
    """The connect under way, ended as the agent sees it: once the session runs (Active;
    a connect begun while it ran, a takeover from another device, ends at the next look),
    its authentication (``logon``: the verifier's last logon of the user, when it ended in
    epoch seconds and how long it took, if it came after the assignment) and its session's
    start (from that logon, else from the assignment, until now), Succeeded. Empty: nothing
    to write."""
    if state != SessionState.ACTIVE.value:
        return {}
    stored = request.connects
    current = diagnostics.under_way(stored)
    if current is None or request.assigned_at is None:
        return {}
    phases: dict[ConnectPhase, float] = {}
    # From the assignment, or from the connect's own start when it came later (a reconnect
    # to a session placed long before).
    began = max(request.assigned_at, diagnostics.started_at(current) or request.assigned_at)
    if logon is not None and logon[0] >= began.timestamp():
        phases[ConnectPhase.AUTHENTICATION] = logon[1]
        began = datetime.fromtimestamp(logon[0], UTC)
    phases[ConnectPhase.SESSION_START] = max(0.0, (now - began).total_seconds())
    written = diagnostics.record(
        stored, phases, owner=diagnostics.AGENT_PHASES, ending=diagnostics.SUCCEEDED
    )
    return {"connects": written}


def refused_fields(request: HostRequest, reason: str, message: str) -> dict[str, Any]:
    """The connect under way, Failed in authentication: the host refused the logon."""
    stored = request.connects
    if diagnostics.under_way(stored) is None:
        return {}
    ending = diagnostics.Ending(ConnectOutcome.FAILED, ConnectPhase.AUTHENTICATION, reason, message)
    written = diagnostics.record(stored, {}, owner=diagnostics.AGENT_PHASES, ending=ending)
    return {"connects": written}


def idle_fields(stored: datetime | None, idle: float | None, now: datetime) -> dict[str, Any]:
    """idleSince from a sample of the session's idle seconds: ``now - idle`` once that is
    ``IDLE_REPORT_SECONDS`` or more, null when the user is active again; written only when
    that changes (set or cleared, or a new idle period: the new value moved by more than
    ``IDLE_REWRITE_SECONDS``). Empty: nothing to write (also when idle is unknown)."""
    if idle is None:
        return {}
    if idle < IDLE_REPORT_SECONDS:
        return {} if stored is None else {"idleSince": None}
    since = now - timedelta(seconds=idle)
    if stored is not None and abs((since - stored).total_seconds()) <= IDLE_REWRITE_SECONDS:
        return {}
    return {"idleSince": rfc3339(since)}


#: Seconds a user's idle time may stay unknown before it is worth a warning (a new session's
#: X server does not answer until its screen is set up: seconds on a busy host).
IDLE_UNKNOWN_GRACE = 30.0


@dataclass
class UnknownIdle:
    """Since when each user's idle time could not be read, without a break."""

    since: dict[str, float] = field(default_factory=dict)

    def persisting(
        self, problems: Mapping[str, str], now: float, grace: float = IDLE_UNKNOWN_GRACE
    ) -> dict[str, str]:
        """Take this step's problems (by user); those unknown ``grace`` seconds on end.
        A user read again, or gone, starts afresh."""
        self.since = {user: self.since.get(user, now) for user in problems}
        return {u: why for u, why in problems.items() if now - self.since[u] >= grace}


def active_since(
    idle_since: datetime | None, decided_at: datetime | None, idle: float | None, now: datetime
) -> bool:
    """Was the user active since an Idle limit was decided? The decision rested on the
    stored idle period (``idle_since``; the agent clears it when the user is active again)
    and was made at ``decided_at`` (the disconnect's requestedAt, the logoff's deadline):
    any input since the earlier of the two makes the measured ``idle`` shorter than the time
    since then, by more than ``IDLE_SLACK_SECONDS``. Unknown idle time: no evidence of
    activity (the decision stands)."""
    if idle_since is None:
        return True
    if idle is None:
        return False
    start = idle_since if decided_at is None else min(idle_since, decided_at)
    return idle < (now - start).total_seconds() - IDLE_SLACK_SECONDS


@dataclass(frozen=True, slots=True)
class DisconnectStep:
    """A pending disconnect: do it (``act``), or mark it done without acting, and why."""

    request: HostRequest
    act: bool
    why: str


def pending_disconnects(
    requests: Iterable[HostRequest], idle: Mapping[str, float], now: datetime
) -> list[DisconnectStep]:
    """What to do of each disconnect not done yet: an Idle one whose user was active since
    it was decided is not carried out."""
    steps = []
    for request in requests:
        ask = request.disconnect
        if ask is None or ask.done_at is not None:
            continue
        if ask.limit == SessionLimit.IDLE.value and active_since(
            request.idle_since, ask.requested_at, idle.get(request.user), now
        ):
            steps.append(DisconnectStep(request, False, _active_why(request, idle)))
        else:
            steps.append(DisconnectStep(request, True, ""))
    return steps


def idle_logoff_withdrawn(request: HostRequest, idle: float | None, now: datetime) -> bool:
    """A forced logoff the Idle limit asked for, whose user was active since: not done."""
    return request.logoff_limit == SessionLimit.IDLE.value and active_since(
        request.idle_since, request.logoff_deadline, idle, now
    )


def _active_why(request: HostRequest, idle: Mapping[str, float]) -> str:
    seconds = idle.get(request.user)
    if request.idle_since is None or seconds is None:
        return "the user has been active since"
    return f"the user's last input was {seconds:.0f}s ago"


def pending_notices(requests: Iterable[HostRequest]) -> list[HostRequest]:
    """Requests whose notice has not been shown yet."""
    return [r for r in requests if r.notice is not None and r.notice.shown_at is None]


@dataclass(frozen=True, slots=True)
class Shown:
    """What a message window says, and the message alone (what a notify command is given
    as HOSTPOOL_MESSAGE, with the deadline apart)."""

    title: str
    text: str
    message: str


def notice_message(notice: NoticeAsk) -> Shown:
    return Shown(WARNING_TITLE if notice.limit else NOTICE_TITLE, notice.message, notice.message)


def logoff_message(request: HostRequest) -> Shown:
    """The forced logoff's message, with its deadline (UTC)."""
    deadline = request.logoff_deadline
    when = f"Your session ends at {deadline:%H:%M} UTC." if deadline else ""
    text = "\n\n".join(part for part in (request.logoff_message or "", when) if part)
    return Shown(LOGOFF_TITLE, text or "Your session will end.", request.logoff_message or "")
