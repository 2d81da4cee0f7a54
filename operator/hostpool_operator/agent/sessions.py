"""The host agent's session decisions: what the machine says about its users, what that
changes in the requests assigned to the host, and when a forced logoff is due.

Pure: the agent runs the commands and writes; these functions take their output, the
requests and ``now``, and say what to write, delete or run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..api.base import SessionState
from ..api.timestamps import parse_time

#: Samples in a row a reported user must be missing before the request is deleted (logoff):
#: one missed sample may be a command that raced a reconnect.
MISSES_FOR_LOGOFF = 2

REPORTED_STATES = {SessionState.ACTIVE.value, SessionState.DISCONNECTED.value}


def parse_sessions(text: str) -> tuple[dict[str, str], list[str]]:
    """The sessions command's output: one JSON object a line, {"user": ..., "state":
    "Active"|"Disconnected"}. Returns the sessions by user and what was wrong with the other
    lines (blank lines are ignored). A user listed twice is Active if any line says so."""
    sessions: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            problems.append(f"line {number}: not JSON")
            continue
        if not isinstance(entry, dict):
            problems.append(f"line {number}: not an object")
            continue
        user, state = entry.get("user"), entry.get("state")
        if not isinstance(user, str) or not user:
            problems.append(f"line {number}: no user")
            continue
        if state not in REPORTED_STATES:
            problems.append(f"line {number}: state {state!r} is not Active or Disconnected")
            continue
        if sessions.get(user) != SessionState.ACTIVE.value:
            sessions[user] = str(state)
    return sessions, problems


@dataclass(frozen=True, slots=True)
class HostRequest:
    """A SessionRequest assigned to the agent's host, as the agent reads it."""

    name: str
    uid: str
    user: str
    session_state: str | None
    logoff_message: str | None = None
    logoff_deadline: datetime | None = None

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
        message = deadline = None
        if isinstance(logoff, Mapping):
            message = str(logoff.get("message") or "")
            deadline = parse_time(logoff.get("deadline"))
        state = status.get("sessionState")
        return cls(
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            user=user,
            session_state=state if isinstance(state, str) else None,
            logoff_message=message,
            logoff_deadline=deadline,
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
