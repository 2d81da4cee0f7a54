"""What falls due on a pool's sessions with time alone: the session limits' next look at each
session, and the forced logoffs nobody carried out by their deadline. Pure.

:class:`LimitWatch` belongs to a :class:`~.pool_state.PoolState` (its ``limit_watch``). It
owns the times (a heap each, so the earliest is known in O(1)) and the limits they follow,
and reads the pool's requests through :class:`PoolRequests`; what a limit does to a session
is :mod:`.time_limits`' to decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from datetime import datetime, timedelta
from typing import Protocol

from ..api import Phase, SessionLimits, SessionState
from .due import DueTimes
from .host_views import HostViews
from .ledger import LogoffDeadlines
from .records import RequestRecord
from .time_limits import BadFactsError, LimitStep, decide, facts_of

#: The session states an agent reports (the limits act on those only).
_REPORTED = (SessionState.ACTIVE.value, SessionState.DISCONNECTED.value)


class PoolRequests(Protocol):
    """What the watch reads of the pool's state (which owns it)."""

    @property
    def requests(self) -> Mapping[str, RequestRecord]: ...
    @property
    def inflight(self) -> AbstractSet[str]: ...
    @property
    def views(self) -> HostViews: ...


class LimitWatch:
    """One pool's session limits and forced logoffs, by when each falls due."""

    __slots__ = ("_pool", "logoffs", "looks", "session_limits")

    def __init__(self, pool: PoolRequests) -> None:
        self._pool = pool
        #: The pool's spec.sessionLimits (None: no pool, or no limits).
        self.session_limits: SessionLimits | None = None
        #: The requests' forced logoffs by deadline (those nobody carries out are finished).
        self.logoffs = LogoffDeadlines()
        #: When each session the limits may act on is looked at next (empty while the pool
        #: has no sessionLimits: such a pool costs nothing per request).
        self.looks = DueTimes()

    def set_limits(self, limits: SessionLimits | None, now: datetime) -> None:
        """The pool's spec was seen: with other limits every session is looked at afresh."""
        if limits == self.session_limits:
            return
        self.session_limits = limits
        self.looks.clear()
        for request in self._pool.requests.values():
            self.note_look(request, now)

    def observe(self, record: RequestRecord, now: datetime) -> None:
        """A request's version is new: its logoff deadline (moved or cancelled ones too), and
        whether the limits look at it."""
        name = record.meta.name
        if record.logoff or name in self.logoffs:
            self.logoffs.note(name, record.logoff_deadline)
        self.note_look(record, now)

    def forget(self, name: str) -> None:
        """The request is gone: nothing of it falls due."""
        self.logoffs.forget(name)
        self.looks.forget(name)

    # -------------------------------------------------------------- session limits

    def note_look(self, record: RequestRecord, now: datetime) -> bool:
        """The limits look at this version of the request in the next pass if they can act
        on it (an Assigned session its host reported, not ending). Read from the record's own
        fields, so a request no limit can act on costs no decoding. True if it is to be
        looked at."""
        name = record.meta.name
        if (
            self.session_limits is None
            or record.phase != Phase.ASSIGNED.value
            or record.session_state not in _REPORTED
            or record.logoff
        ):
            self.looks.forget(name)
            return False
        self.looks.note(name, now)
        return True

    def looks_due(
        self, now: datetime, most: int | None = None
    ) -> list[tuple[RequestRecord, LimitStep | BadFactsError]]:
        """The sessions whose look is due (at most ``most``, the earliest; the rest stay due):
        what the limits do to each now (or the malformed field that keeps them from
        deciding); the others are looked at again when their next step is due. A request
        given a step is not looked at again until its next version (the step's own write
        brings it)."""
        limits = self.session_limits
        pool = self._pool
        found: list[tuple[RequestRecord, LimitStep | BadFactsError]] = []
        for name, _ in self.looks.due(now, most):
            record = pool.requests.get(name)
            if limits is None or record is None or name in pool.inflight:
                continue
            try:
                facts = facts_of(record.status)
            except BadFactsError as bad:
                found.append((record, bad))
                continue
            decision = decide(limits, facts, now, pool.views.clock_offset(record.host or ""))
            if decision.step is not None:
                found.append((record, decision.step))
            else:
                self.looks.note(name, decision.next_look)
        return found

    def next_look(self) -> datetime | None:
        """When the earliest look is due (None: no session to look at)."""
        return self.looks.next_due()

    # -------------------------------------------------------------- forced logoffs

    def overdue_logoffs(
        self, now: datetime, grace: timedelta
    ) -> list[tuple[RequestRecord, datetime]]:
        """The requests whose logoff is ``grace`` past its deadline (with the deadline):
        nobody carried it out, the operator finishes it. Each is given once; a later
        version of the request (the finish failed and it was read again) gives it again."""
        due = []
        for name, deadline in self.logoffs.overdue(now, grace):
            record = self._pool.requests.get(name)
            if record is not None and record.logoff:
                due.append((record, deadline))
        return due

    def next_logoff_due(self, grace: timedelta) -> datetime | None:
        """When the earliest logoff becomes overdue (None: no logoff in the pool)."""
        return self.logoffs.next_due(grace)
