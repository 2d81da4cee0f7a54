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

One host per user holds for administrators' assignments too: two ``kubectl hostpool
assign`` of one user at once each check only the host they write, so both can land.
:func:`second_assignments` names the hosts to take back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..api import PersonalAssignment, Reason
from .balancer_view import Placement


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


@dataclass(frozen=True, slots=True)
class PersonalPlacement:
    """The answer: a placement, and whether the host is newly claimed for the user (the
    operator writes ``spec.assignedUser`` before the assignment)."""

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
        return PersonalPlacement(Placement(reconnect, Reason.RECONNECTED))
    if own is not None:
        if own.open:
            return PersonalPlacement(Placement(own.name, Reason.PERSONAL))
        reason = Reason.HOSTS_STARTING if own.starting else Reason.NO_ELIGIBLE_HOST
        return PersonalPlacement(Placement(None, reason))
    if assignment is PersonalAssignment.DIRECT:
        return PersonalPlacement(Placement(None, Reason.NO_HOST_ASSIGNED))
    free = [host for host in hosts if owners[host.name] is None and host.sessions == 0]
    for host in free:
        if host.open:
            return PersonalPlacement(Placement(host.name, Reason.PERSONAL), claim=True)
    if can_add or any(host.starting for host in free):
        return PersonalPlacement(Placement(None, Reason.HOSTS_STARTING))
    return PersonalPlacement(Placement(None, Reason.NO_HOST_ASSIGNED))


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
