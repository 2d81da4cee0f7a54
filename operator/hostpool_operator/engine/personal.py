"""Placement in a personal pool: each user has a host of their own. Pure.

Load balancing does not apply (AVD's personal pools, Horizon's dedicated assignment):

* A user with a host (``spec.assignedUser``, or one this operator has just claimed for
  them and not yet seen written) always goes there, reason ``Personal``; a reconnect to a
  session they still hold is ``Reconnected``. Their host not taking sessions now (stopped,
  starting, in drain mode) makes them wait: ``HostsStarting`` while it is on its way,
  ``NoEligibleHost`` otherwise. They never get a second host.
* With ``Automatic`` assignment a user without one takes the first unassigned, empty host
  that takes sessions, in query order, and the decision claims it for them; else they wait,
  ``HostsStarting`` when an unassigned host is starting or the pool may add one, else
  ``NoHostAssigned``.
* With ``Direct`` assignment only an administrator gives hosts: ``NoHostAssigned``.

A host is claimed by one user only: the claims of earlier decisions (passed in) count as
owners, so two first connects in one pass, of one user or of two, never share or double up.
No assignment is written onto a host seen without a user before the host names the
request's user: a second request riding on a claim still on its way claims too (the write
finds the host theirs, or gives it to them), and so does a reconnect to a session placed on
a claim that then failed. A claim that cannot be made sends the request back to be placed
again. (A reconnect to a session the user holds on another user's host still goes there:
the session is there; the CRD keeps a host's user from changing under a session.)

One host per user holds for administrators' assignments too: two ``kubectl hostpool
assign`` of one user at once each check only the host they write, so both can land.
:func:`second_assignments` names the hosts to take back.

A user's files never reach another user. A host with a workload the operator made holds its
user's files (the workload, its volume claims); :func:`data_step` says what is done with
them when the host's user changes (an unassign, an assign, a host taken back, by any
client): they are deleted before anyone else is given the host, or, with ``spec.keepData``,
kept for that user alone. Placement gives a host only to the user whose files it holds, or
one holding nobody's.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..api import PersonalAssignment, Reason
from .balancer_view import Placement


class DataStep(enum.Enum):
    """What is done with the files a personal host holds, from whose they are, whose host it
    is and ``spec.keepData``."""

    #: They are its user's, or it has no user and holds nobody's (then it is free).
    NONE = "None"
    #: It has a user and holds nobody's files: they are written down as the user's
    #: (``hostpool.io/data-of``) before the user is placed there, so a later change of user
    #: finds them whoever made it and whenever the operator saw it.
    RECORD = "Record"
    #: No user, its former user's files kept (``spec.keepData``): only they may be given it.
    KEEP = "Keep"
    #: Its former user's files (its workload and volume claims) are deleted before anyone
    #: else is given it.
    DELETE = "Delete"
    #: The same, once the sessions still on it end (never from under a session).
    DELETE_WHEN_EMPTY = "DeleteWhenEmpty"
    #: Given to another user while its former user's files are kept for them: the new user
    #: is not placed there (deleting files someone asked to keep cannot be undone; not
    #: placing the new user can, by assigning the host back or unassigning it).
    REFUSE = "Refuse"


#: A host's files in these steps keep it from getting a workload: it would mount a former
#: user's claims while they are being deleted, or for a user they are not kept for.
NO_WORKLOAD = frozenset({DataStep.DELETE, DataStep.DELETE_WHEN_EMPTY, DataStep.REFUSE})

#: Steps after which the host opens to its user (or to anyone) without anyone acting.
_ON_ITS_WAY = frozenset({DataStep.RECORD, DataStep.DELETE, DataStep.DELETE_WHEN_EMPTY})


@dataclass(frozen=True, slots=True)
class PersonalHost:
    """One host of a personal pool, as the placement sees it (query order is the caller's)."""

    name: str
    #: ``spec.assignedUser`` as stored (None: unassigned).
    user: str | None
    #: Ready for a new session now: not in drain mode, its workload (if any) Ready.
    open: bool
    #: Sessions on it, whoever's (an unassigned host with sessions is not given away).
    sessions: int = 0
    #: Its workload is being made or started: it will open without anyone acting.
    starting: bool = False
    #: What is to be done with the files it holds (see :func:`data_step`).
    data: DataStep = DataStep.NONE
    #: Whose files it holds (None: nobody's, or it has no workload the operator made).
    data_of: str | None = None


@dataclass(frozen=True, slots=True)
class PersonalPlacement:
    """The answer: a placement, and whether the host is claimed for the user: it is not
    seen as theirs yet, so the operator makes sure ``spec.assignedUser`` names them (writing
    it onto a host without a user) before the assignment, and places again if it cannot."""

    placement: Placement
    claim: bool = False


def place_personal(
    user: str,
    hosts: Iterable[PersonalHost],
    assignment: PersonalAssignment,
    *,
    claims: Mapping[str, str],
    reconnect: str | None = None,
    can_add: bool = False,
) -> PersonalPlacement:
    """Where ``user``'s request goes in a personal pool. ``claims``: host → user of claims
    decided but not yet seen on the hosts; ``reconnect``: the host of a session the user
    holds; ``can_add``: the pool may add a host (scaling room)."""
    hosts = list(hosts)
    owners = {host.name: claims.get(host.name, host.user) for host in hosts}
    own = next((host for host in hosts if owners[host.name] == user), None)
    if reconnect is not None and (own is None or own.name == reconnect):
        there = next((host for host in hosts if host.name == reconnect), None)
        # Their session is on a host not seen as theirs (a claim on its way, or one that
        # failed after this session was placed on its strength): it is made theirs first.
        claim = (
            there is not None
            and there.user is None
            and owners[there.name] in (None, user)
            and may_take(there, user)
        )
        return PersonalPlacement(Placement(reconnect, Reason.RECONNECTED), claim=claim)
    if own is not None:
        if own.open and own.data is DataStep.NONE:
            # Theirs by a claim not seen written yet: the assignment waits for the claim.
            return PersonalPlacement(Placement(own.name, Reason.PERSONAL), claim=own.user != user)
        # Its files are written as theirs first, or someone else's are deleted first: on
        # its way. Someone else's kept there: never theirs without an administrator.
        on_its_way = own.starting or own.data in _ON_ITS_WAY
        if own.data is DataStep.REFUSE or not on_its_way:
            return PersonalPlacement(Placement(None, Reason.NO_ELIGIBLE_HOST))
        return PersonalPlacement(Placement(None, Reason.HOSTS_STARTING))
    if assignment is PersonalAssignment.DIRECT:
        return PersonalPlacement(Placement(None, Reason.NO_HOST_ASSIGNED))
    free = [
        host
        for host in hosts
        if owners[host.name] is None and host.sessions == 0 and may_take(host, user)
    ]
    free.sort(key=lambda host: host.data is not DataStep.KEEP)  # their own files first
    for host in free:
        if host.open:
            return PersonalPlacement(Placement(host.name, Reason.PERSONAL), claim=True)
    # A host being emptied is free soon; one with its former user's session on it is not.
    freed = any(owners[h.name] is None and h.data is DataStep.DELETE for h in hosts)
    if can_add or freed or any(host.starting for host in free):
        return PersonalPlacement(Placement(None, Reason.HOSTS_STARTING))
    return PersonalPlacement(Placement(None, Reason.NO_HOST_ASSIGNED))


def may_take(host: PersonalHost, user: str) -> bool:
    """May ``user`` be given this host (that has no user) as far as its files go: it holds
    nobody's, or theirs kept for them. A host whose files are being deleted is nobody's
    until they are gone."""
    return host.data is DataStep.NONE or (host.data is DataStep.KEEP and host.data_of == user)


@dataclass(frozen=True, slots=True)
class HostData:
    """A personal host with a workload the operator made, as the rule for its files sees
    it."""

    name: str
    #: ``spec.assignedUser``, or the user of a claim being written (which writes
    #: ``data_of`` in the same write).
    user: str | None
    #: Whose files its workload and volume claims hold (``hostpool.io/data-of``; None:
    #: nobody's).
    data_of: str | None
    #: ``spec.keepData``: keep the files for ``data_of`` while the host has no user.
    keep: bool = False
    #: Sessions on it, whoever's.
    sessions: int = 0
    #: A deletion of its files is under way: it is finished whatever the spec says meanwhile
    #: (the claims going away cannot be called back).
    deleting: bool = False


def data_step(host: HostData) -> DataStep:
    """What is done with the host's files now."""
    if host.deleting:
        return DataStep.DELETE
    if host.data_of is None:
        return DataStep.NONE if host.user is None else DataStep.RECORD
    if host.data_of == host.user:
        return DataStep.NONE
    if host.keep:
        return DataStep.KEEP if host.user is None else DataStep.REFUSE
    return DataStep.DELETE if host.sessions == 0 else DataStep.DELETE_WHEN_EMPTY


def data_condition(host: HostData) -> tuple[str, str] | None:
    """The host's Available condition (reason, message) while its files keep it from being
    given (None: they do not)."""
    step = data_step(host)
    whose = host.data_of or "its former user"
    if step is DataStep.DELETE:
        message = (
            f"deleting {whose}'s files (its workload and volume claims) before anyone else "
            "is given it"
        )
        return "DeletingData", message
    if step is DataStep.DELETE_WHEN_EMPTY:
        message = (
            f"{whose}'s files are deleted once the {host.sessions} session(s) on it end; "
            "nobody else is given it before"
        )
        return "DeletingData", message
    if step is DataStep.KEEP:
        message = f"{whose}'s files are kept for them (spec.keepData): only {whose} may be given it"
        return "DataKept", message
    if step is DataStep.REFUSE:
        message = (
            f"holds {whose}'s files, kept for them (spec.keepData): {host.user} is not placed "
            f"here; assign it to {whose}, or unassign it to delete the files"
        )
        return "DataKept", message
    return None


@dataclass(frozen=True, slots=True)
class Assignment:
    """A host's ``spec.assignedUser`` as the operator saw it."""

    host: str
    user: str
    #: Sessions on the host now.
    sessions: int
    #: When the operator first saw this assignment, in its own order (lower: earlier).
    seen: int


def second_assignments(assignments: Iterable[Assignment]) -> list[Assignment]:
    """The assignments to take back so that each user has one host: of a user's hosts the
    one with sessions is kept (the most), else the one assigned first, else the first by
    name. A host with sessions is never taken back (its user is in it)."""
    by_user: dict[str, list[Assignment]] = {}
    for assignment in assignments:
        by_user.setdefault(assignment.user, []).append(assignment)
    undo: list[Assignment] = []
    for hosts in by_user.values():
        if len(hosts) < 2:
            continue
        kept = min(hosts, key=lambda a: (-a.sessions, a.seen, a.host))
        undo.extend(a for a in hosts if a is not kept and a.sessions == 0)
    return sorted(undo, key=lambda a: a.host)
