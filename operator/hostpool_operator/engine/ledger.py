"""The session ledger: who has a session on which host, which requests hold it, and which
sessions still count as connecting.

Pure, and the one place sessions are kept. A user has at most one session in a pool; every
SessionRequest of that user assigned to it *holds* it (a reconnect adds a holder), and the
session ends when its last holder lets go. A new session counts as connecting until an
agent reports it Active or Disconnected, or its deadline passes; the deadlines are kept in a
heap so the earliest is known in O(1). The engine (:class:`~.balancing.PoolBalancer`) reads
this ledger for reconnects and keeps only per-host counts of its own, for its indexes.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from .due import DueTimes


@dataclass(slots=True)
class Session:
    host: str
    #: The requests holding the session (mostly one: a tuple is a fifth of a set's size).
    holders: tuple[str, ...] = ()
    #: Until when the session counts as connecting (None: it no longer does).
    connecting_until: datetime | None = None
    assigned_at: datetime | None = None
    #: The session is in the API: its assignment was written, or seen Assigned (False while
    #: it is only a reservation whose write is on its way). Only such a session's end counts
    #: as a session that ended (hostpool_session_ends_total).
    started: bool = False

    @property
    def connecting(self) -> bool:
        return self.connecting_until is not None

    def add_holder(self, request: str) -> None:
        if request not in self.holders:
            self.holders = (*self.holders, request)

    def drop_holder(self, request: str) -> None:
        self.holders = tuple(holder for holder in self.holders if holder != request)


class SessionLedger:
    """Sessions of one pool, by user and by host, with their connecting deadlines."""

    def __init__(self) -> None:
        self._by_user: dict[str, Session] = {}
        self._by_host: dict[str, set[str]] = {}
        self._deadlines: list[tuple[datetime, str]] = []  # (connecting deadline, user)

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._by_user)

    def __contains__(self, user: object) -> bool:
        return user in self._by_user

    def items(self) -> Iterator[tuple[str, Session]]:
        return iter(self._by_user.items())

    def sessions(self) -> Iterator[Session]:
        return iter(self._by_user.values())

    def session_of(self, user: str) -> Session | None:
        return self._by_user.get(user)

    def host_of(self, user: str) -> str | None:
        session = self._by_user.get(user)
        return None if session is None else session.host

    def users_on(self, host: str) -> frozenset[str]:
        return frozenset(self._by_host.get(host, ()))

    def count_on(self, host: str) -> int:
        return len(self._by_host.get(host, ()))

    def connecting_on(self, host: str) -> int:
        return sum(1 for user in self._by_host.get(host, ()) if self._by_user[user].connecting)

    def holds(self, user: str, request: str) -> bool:
        session = self._by_user.get(user)
        return session is not None and request in session.holders

    def next_deadline(self) -> datetime | None:
        """The earliest connecting deadline still in the heap (it may have been settled)."""
        return self._deadlines[0][0] if self._deadlines else None

    # ------------------------------------------------------------------ changes

    def open(
        self,
        user: str,
        host: str,
        *,
        holder: str | None = None,
        assigned_at: datetime | None = None,
        connecting_until: datetime | None = None,
    ) -> Session:
        """A new session for ``user`` on ``host``; the user must not have one yet."""
        if user in self._by_user:
            raise ValueError(f"user {user!r} already has a session on {self._by_user[user].host}")
        session = Session(host=host, assigned_at=assigned_at, connecting_until=connecting_until)
        if holder is not None:
            session.add_holder(holder)
        self._by_user[user] = session
        self._by_host.setdefault(host, set()).add(user)
        if connecting_until is not None:
            heapq.heappush(self._deadlines, (connecting_until, user))
        return session

    def hold(self, user: str, request: str) -> None:
        """``request`` (assigned, or a reconnect) holds the user's session too."""
        self._by_user[user].add_holder(request)

    def release(self, user: str, request: str) -> Session | None:
        """``request`` no longer holds the user's session. Returns the session if that was
        its last holder, so the session ended; None otherwise."""
        session = self._by_user.get(user)
        if session is None or request not in session.holders:
            return None
        session.drop_holder(request)
        if session.holders:
            return None
        return self.end(user)

    def end(self, user: str) -> Session | None:
        """The user's session ends whoever holds it (logoff, host gone)."""
        session = self._by_user.pop(user, None)
        if session is None:
            return None
        users = self._by_host.get(session.host)
        if users is not None:
            users.discard(user)
            if not users:
                del self._by_host[session.host]
        return session

    def end_on(self, host: str) -> list[Session]:
        """Every session on ``host`` ends (the host is gone)."""
        return [s for user in sorted(self._by_host.get(host, ())) if (s := self.end(user))]

    def settle(self, user: str) -> Session | None:
        """The user's session stops counting as connecting. Returns it if it did count."""
        session = self._by_user.get(user)
        if session is None or session.connecting_until is None:
            return None
        session.connecting_until = None
        return session

    def expire(self, now: datetime) -> list[Session]:
        """Settle every session whose connecting deadline is at or before ``now``."""
        settled = []
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, user = heapq.heappop(self._deadlines)
            session = self._by_user.get(user)
            # A deadline that was moved, or a session that ended or settled, is stale.
            if session is not None and session.connecting_until == deadline:
                session.connecting_until = None
                settled.append(session)
        return settled

    def retime(self, timeout: timedelta, now: datetime) -> list[Session]:
        """The connecting timeout changed: sessions still connecting get the new deadline,
        counted from their assignment; those already past it settle (and are returned)."""
        settled = []
        for user, session in self._by_user.items():
            if session.connecting_until is None or session.assigned_at is None:
                continue
            deadline = session.assigned_at + timeout
            if deadline <= now:
                session.connecting_until = None
                settled.append(session)
            else:
                session.connecting_until = deadline
                heapq.heappush(self._deadlines, (deadline, user))
        return settled


# ---------------------------------------------------------------------------- forced logoffs


def logoff_overdue(deadline: datetime, now: datetime, grace: timedelta) -> bool:
    """A logoff nobody carried out: ``grace`` has passed since its deadline. The host's
    agent logs the user off at the deadline and deletes the request; a request still there
    after the grace has no agent acting for it (the agent is silent, or gone with its host),
    and the operator finishes the logoff by deleting it."""
    return now >= deadline + grace


class LogoffDeadlines:
    """The forced logoffs of one pool (``status.logoff``): each request's latest deadline
    (a moved or cancelled one is noted again, as the connecting deadlines)."""

    __slots__ = ("_deadlines",)

    def __init__(self) -> None:
        self._deadlines = DueTimes()

    def __len__(self) -> int:
        return len(self._deadlines)

    def __contains__(self, request: object) -> bool:
        return request in self._deadlines

    def note(self, request: str, deadline: datetime | None) -> None:
        """The request's latest version: its logoff deadline, or None (none, or cancelled)."""
        self._deadlines.note(request, deadline)

    def forget(self, request: str) -> None:
        self._deadlines.forget(request)

    def next_due(self, grace: timedelta) -> datetime | None:
        """When the earliest logoff becomes overdue (None: no logoff)."""
        deadline = self._deadlines.next_due()
        return deadline + grace if deadline is not None else None

    def overdue(self, now: datetime, grace: timedelta) -> list[tuple[str, datetime]]:
        """The logoffs overdue at ``now`` (see :func:`logoff_overdue`), each given once (the
        request and its deadline): they are no longer kept, a later version of the request
        notes them again."""
        return self._deadlines.due(now - grace)
