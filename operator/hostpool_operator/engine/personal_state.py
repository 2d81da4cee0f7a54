"""A personal pool's hosts as their users hold them: whose each host is (a claim being written,
or ``spec.assignedUser`` as seen), which user has a second one to take back, and what is done
with the files each holds. Pure.

:class:`PersonalState` belongs to a :class:`~.pool_state.PoolState` (its ``personal``). It
owns what only it changes (the claims, the assignments in the order they were seen, the
deletions of files under way) and reads the pool's hosts and sessions through
:class:`PoolHosts`; the rules it applies are :mod:`.personal`'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from ..api import HostPoolSpec
from .host_views import HostViews
from .ledger import SessionLedger
from .personal import Assignment, DataStep, HostData, data_step, second_assignments
from .records import HostRecord


class PoolHosts(Protocol):
    """What the personal state reads of the pool's state (which owns it)."""

    @property
    def spec(self) -> HostPoolSpec | None: ...
    @property
    def hosts(self) -> Mapping[str, HostRecord]: ...
    @property
    def ledger(self) -> SessionLedger: ...
    @property
    def views(self) -> HostViews: ...


class PersonalState:
    """Personal pools: whose each host is, and whose files it holds."""

    __slots__ = (
        "_pool",
        "assignment_seen",
        "assignments_seen",
        "claims",
        "deleting",
        "hosts_of_user",
    )

    def __init__(self, pool: PoolHosts) -> None:
        self._pool = pool
        #: Hosts claimed for a user (host -> user) whose spec.assignedUser is not seen written
        #: yet; they count as that user's in every decision meanwhile.
        self.claims: dict[str, str] = {}
        #: Each host's spec.assignedUser and when this operator first saw it (a counter): of
        #: two hosts given one user at once, the one seen first is kept.
        self.assignment_seen: dict[str, tuple[str, int]] = {}
        self.assignments_seen = 0
        #: How many hosts each user is assigned (from ``assignment_seen``), so a host event
        #: tells in O(1) whether its user has a second host to take back.
        self.hosts_of_user: Counter[str] = Counter()
        #: Hosts whose former user's files (workload, volume claims) are being deleted now;
        #: none is given to anyone, nor gets a workload, until that is done.
        self.deleting: set[str] = set()

    # -------------------------------------------------------------- observations

    def observe_host(self, record: HostRecord) -> None:
        """A host's version was seen: its spec.assignedUser (a claim it shows is written)."""
        name = record.meta.name
        user = record.spec.assigned_user if record.spec is not None else None
        if user is None:
            self._unassigned(name)
            return
        self.claims.pop(name, None)  # written: the host says it now
        if self.assignment_seen.get(name, ("",))[0] != user:
            self._unassigned(name)
            self.assignments_seen += 1
            self.assignment_seen[name] = (user, self.assignments_seen)
            self.hosts_of_user[user] += 1

    def forget_host(self, name: str) -> None:
        """The host is gone: no claim, assignment or deletion of it is kept."""
        self.claims.pop(name, None)
        self._unassigned(name)
        self.deleting.discard(name)

    def _unassigned(self, name: str) -> None:
        """Host ``name`` is no longer seen assigned to the user it was."""
        previous = self.assignment_seen.pop(name, None)
        if previous is not None:
            self.hosts_of_user[previous[0]] -= 1
            if self.hosts_of_user[previous[0]] <= 0:
                del self.hosts_of_user[previous[0]]

    # -------------------------------------------------------------- whose each host is

    def owners(self) -> dict[str, str]:
        """Host -> its user. A claim not yet seen on the host comes first (it is the newer
        word), then spec.assignedUser."""
        owners = dict(self.claims)
        for name, host in self._pool.hosts.items():
            if name not in owners and host.spec is not None and host.spec.assigned_user:
                owners[name] = host.spec.assigned_user
        return owners

    def has_second_host(self, user: str) -> bool:
        """The user is assigned more than one host of this pool (see second_assignments)."""
        return self.hosts_of_user.get(user, 0) > 1

    def second_assignments(self, now: datetime) -> list[Assignment]:
        """Hosts given to a user who has another (administrators' assigns at once), to be
        taken back; see ``personal.second_assignments``."""
        pool = self._pool
        found = []
        for name, (user, seen) in self.assignment_seen.items():
            host = pool.hosts.get(name)
            if host is None:
                continue
            view = pool.views.view(host, now)
            sessions = max(view.sessions if view is not None else 0, pool.ledger.count_on(name))
            found.append(Assignment(name, user, sessions, seen))
        return second_assignments(found)

    # -------------------------------------------------------------- their files

    def host_data(self, host: HostRecord) -> HostData | None:
        """The host as the rule for its user's files sees it (None: it holds none the
        operator looks after: not a personal pool's, or no workload the operator made). A
        claim being written counts as written: its write says whose the files are too."""
        spec = self._pool.spec
        if host.spec is None or not host.holds_data or spec is None or not spec.is_personal:
            return None
        name = host.meta.name
        claimed = self.claims.get(name)
        return HostData(
            name=name,
            user=claimed or host.spec.assigned_user,
            data_of=claimed or host.data_of,
            keep=bool(host.spec.keep_data),
            sessions=self._pool.ledger.count_on(name),
            deleting=name in self.deleting,
        )

    def data_step(self, name: str) -> DataStep:
        """What is done with the host's files now (NONE: nothing, or it has none)."""
        host = self._pool.hosts.get(name)
        data = self.host_data(host) if host is not None else None
        return DataStep.NONE if data is None else data_step(data)

    def kept(self) -> dict[str, str]:
        """Host -> the former user whose files it keeps for them (no user now; only they may
        be given it): as good as theirs for scaling."""
        kept = {}
        for host in self._pool.hosts.values():
            data = self.host_data(host)
            if data is not None and data.data_of and data_step(data) is DataStep.KEEP:
                kept[host.meta.name] = data.data_of
        return kept
