"""The state of a replay (``replay``): its input and result, the hosts, the sessions, the
waiting requests and the event queue, and the bookkeeping that keeps them and the counters
in step (sessions, hosts taking sessions, starting hosts, the plan's drained hosts, the
Disconnected sessions). The passes that decide (the plan's rules, the pool's own scaling)
are ``replay``'s. Pure.

A session's life once placed: it ends ``Logon.seconds`` later; with ``disconnect_after``
it is Disconnected from that long after its placement until then (it keeps its slot, as
on a real host). The pool's session limits, when the input gives them, act as the
operator's would: ``maxSessionMinutes`` after the placement (the logon) the session is
logged off, or (``maxSessionAction: Disconnect``) disconnected if it is not already; a
session Disconnected ``disconnectedMinutes`` is logged off. Only what ends a session
before its own end counts as a limit's doing. ``idleMinutes`` is not replayed: a history
says nothing of a user's input.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any

from ..api import HostPoolSpec, LoadBalancerType
from ..api.base import LimitAction, SessionLimit
from ..api.plan import PlanRules
from ..api.pool import SessionLimits
from ..api.update import UpdateSpec
from ..engine.balancer_view import BalancerHost
from ..engine.balancing import PoolBalancer
from ..engine.demand import Demand
from ..scaling.plans import PhaseInForce
from ..scaling.rules import ScaleHost

# Event kinds; the order breaks ties at one instant (slots free up before logons).
END = 0
LOGOFF = 1
CONNECTED = 2
READY = 3
#: A recorded session is left Disconnected; a session limit acts.
DISCONNECT = 4
MAX_SESSION = 5
DISCONNECTED_LIMIT = 6
#: The pool's host template changes (an image update starts).
UPDATE = 7


@dataclass(frozen=True, slots=True)
class Logon:
    """One logon: when (seconds after the origin), how long its session lasts once placed,
    whose it is (for reports; the engine knows each logon by its index), and how long
    after its placement the session is left Disconnected (None: never; it stays
    Disconnected until its end)."""

    at: float
    seconds: float
    user: str = ""
    disconnect_after: float | None = None


@dataclass(frozen=True, slots=True)
class ReplayInput:
    """What a run needs: the pool, an optional plan, the time frame (``origin`` is the
    UTC instant of the start, ``zone`` the plan's time zone or UTC), the hosts at the start
    (ready), the logons in time order, and how long an added host takes to start."""

    pool: HostPoolSpec
    plan: PlanRules | None
    zone: tzinfo
    origin: datetime
    total_seconds: float
    step_seconds: float
    logons: Sequence[Logon]
    hosts: int = 0
    seed: int | None = None
    host_start_seconds: float = 0.0
    #: False: no step objects, only the hosts at each step's end (weeks of minutes).
    record_steps: bool = True
    #: The pool's session limits to replay (None: sessions end only when they end).
    session_limits: SessionLimits | None = None
    #: An image update, and when it starts (seconds after the origin).
    update: UpdateSpec | None = None
    update_at: float = 0.0


@dataclass(slots=True)
class ReplayResult:
    """The steps (the contract's step objects), host-seconds, logons placed, the most
    requests waiting at once, and each logon's wait in seconds (in the input's order; a
    logon still waiting at the end waited until the end)."""

    steps: list[dict[str, Any]]
    host_seconds: float
    placed: int
    peak_pending: int
    waits: list[float]
    #: Hosts (all, starting ones included) at the end of each step.
    hosts: list[int] = field(default_factory=list)
    #: Sessions logged off by a session limit before their own end, by limit.
    ended_by: dict[SessionLimit, int] = field(default_factory=dict)
    #: Sessions a limit disconnected (maxSessionAction: Disconnect), by limit.
    disconnected_by: dict[SessionLimit, int] = field(default_factory=dict)
    #: Session-seconds spent Disconnected within the run (each holding a slot).
    disconnected_seconds: float = 0.0
    #: The image update: when it started and completed (offsets; None: not in the run),
    #: the sessions its forced logoffs ended, and the most hosts at once meanwhile.
    update: UpdateOutcome | None = None


@dataclass(slots=True)
class UpdateOutcome:
    """What an image update did in a run."""

    started: float
    completed: float | None = None
    sessions_ended: int = 0
    peak_hosts: int = 0


def _key(index: int) -> str:
    """The engine's name for the logon of this index (also the request a plan logs off)."""
    return f"u{index + 1:07d}"


@dataclass(slots=True)
class Host:
    """What the simulation keeps of one host beyond the engine's view."""

    name: str
    empty_since: datetime | None
    #: Drained by the plan's rule 5, and when.
    drained_by_plan: bool = False
    drained_at: datetime | None = None
    #: Added and not yet taking sessions (hostStartMinutes): not in the engine until ready.
    starting: bool = False
    #: The template revision it was made from (0 before any update), when it was made and
    #: became ready (offsets), its replacement, and when the update drained it.
    revision: int = 0
    created: float = 0.0
    ready_at: float | None = None
    replaced_by: str | None = None
    update_drained_at: float | None = None


class State:
    """One run's state: the engine, the hosts, the waiting requests and the event queue,
    with counters kept as the run goes (sessions, hosts taking sessions, starting hosts,
    the plan's drained hosts, empty hosts) for the passes to read."""

    def __init__(self, given: ReplayInput) -> None:
        self.given = given
        self.zone = given.zone
        self.pool = given.pool
        self.plan = given.plan
        self.phase: PhaseInForce | None = None
        #: The phase stays in force until the next phase start (offset), found once.
        self.phase_until = -math.inf
        self.origin = given.origin
        self.balancer = PoolBalancer(self.pool, seed=given.seed)
        #: Every host in query order: ready ones (the engine's order), then starting ones.
        self.hosts: dict[str, Host] = {}
        self.starting = 0
        #: Ready hosts not draining ("taking"), all sessions, and the hosts the plan drained.
        self.taking_count = 0
        self.sessions_total = 0
        self.drained: set[str] = set()
        self.sessions_drained = 0
        #: Ready hosts without a session (the pool's own scaling removes such hosts).
        self.empty: set[str] = set()
        self.created = 0
        self.waiting: deque[int] = deque()
        self.connecting: set[str] = set()
        #: Forced logoffs ordered by the plan (rule 6): request -> deadline.
        self.logoffs: dict[str, float] = {}
        self.events: list[tuple[float, int, int, str]] = []
        self.sequence = 0
        self.placed = 0
        self.peak_pending = 0
        self.logons = given.logons
        self.placed_at: list[float] = [math.nan] * len(given.logons)
        self.connecting_seconds = float(self.pool.connecting_timeout_seconds)
        # Only Horizon's logon-storm thresholds look at connecting sessions (a plan's
        # phases are never Horizon): other pools skip their bookkeeping.
        self.track_connecting = self.pool.load_balancer.type is LoadBalancerType.HORIZON
        self.start_seconds = given.host_start_seconds
        #: Disconnected sessions: user -> since (offset), and how many on each host.
        self.disconnected: dict[str, float] = {}
        self.disconnected_on: dict[str, int] = {}
        self.disconnected_seconds = 0.0
        self.ended_by: dict[SessionLimit, int] = {}
        self.disconnected_by: dict[SessionLimit, int] = {}
        #: The pool's template revision (0 until an update) and the update's outcome.
        self.revision = 0
        self.update: UpdateOutcome | None = None
        #: Sessions the update's ForceLogoff logs off.
        self.update_logoffs: set[str] = set()
        limits = given.session_limits
        self.max_session_seconds: float | None = None
        self.disconnected_limit_seconds: float | None = None
        self.max_session_logs_off = True
        if limits is not None:
            if limits.max_session_minutes is not None:
                self.max_session_seconds = limits.max_session_minutes * 60.0
                self.max_session_logs_off = limits.max_session_action is LimitAction.LOGOFF
            if limits.disconnected_minutes is not None:
                self.disconnected_limit_seconds = limits.disconnected_minutes * 60.0

    # -------------------------------------------------------------- time

    def instant(self, offset: float) -> datetime:
        return self.origin + timedelta(seconds=offset)

    def local(self, offset: float) -> str:
        at = self.instant(offset).astimezone(self.zone).replace(tzinfo=None)
        return at.isoformat(timespec="seconds")

    # -------------------------------------------------------------- hosts

    def add_host(self, now: float, *, ready: bool = False) -> str:
        self.created += 1
        name = f"host-{self.created:04d}"
        if ready or self.start_seconds <= 0:
            self.balancer.upsert_host(BalancerHost(name=name))
            self.hosts[name] = Host(
                name, empty_since=self.instant(now), revision=self.revision, created=now,
                ready_at=now,
            )  # fmt: skip
            self.taking_count += 1
            self.empty.add(name)
            return name
        self.hosts[name] = Host(
            name, empty_since=None, starting=True, revision=self.revision, created=now
        )
        self.starting += 1
        self.push(now + self.start_seconds, READY, name)
        return name

    def host_ready(self, name: str, now: float) -> None:
        host = self.hosts.get(name)
        if host is None or not host.starting:
            return
        host.starting = False
        host.empty_since = self.instant(now)
        host.ready_at = now
        self.starting -= 1
        self.balancer.upsert_host(BalancerHost(name=name, outdated=host.revision < self.revision))
        self.taking_count += 1
        self.empty.add(name)
        self.place_waiting(now)

    def remove_host(self, name: str, now: float) -> None:
        host = self.hosts.pop(name)
        if host.starting:
            self.starting -= 1  # never in practice: only empty, ready hosts are removed
            return
        for user in sorted(self.balancer.ledger.users_on(name)):
            # Only empty hosts are removed, but for a plan's ZeroActiveSessions: its host
            # goes with its Disconnected sessions.
            self.end(user, now)
        view = self.balancer.host(name)
        if view is not None and not view.drain_mode:
            self.taking_count -= 1
        if name in self.drained and view is not None:
            self.sessions_drained -= view.sessions
        self.drained.discard(name)
        self.empty.discard(name)
        self.balancer.remove_host(name)

    def set_drain(self, name: str, drain: bool, now: float) -> None:
        """The plan drains a host (rule 5) or undrains one it drained (rule 4)."""
        view = self.balancer.host(name)
        if view is None:
            return
        if drain != view.drain_mode:
            self.taking_count += -1 if drain else 1
            self.sessions_drained += view.sessions if drain else -view.sessions
        if drain:
            self.drained.add(name)
        else:
            self.drained.discard(name)
        self.balancer.upsert_host(
            BalancerHost(
                name=name,
                drain_mode=drain,
                sessions=view.sessions,
                connecting=view.connecting,
                order=view.order,
                outdated=view.outdated,
            )
        )
        host = self.hosts[name]
        host.drained_by_plan = drain
        host.drained_at = self.instant(now) if drain else None

    def start_update(self) -> None:
        """The template changes: every host made so far is outdated (placed last)."""
        self.revision += 1
        for view in list(self.balancer.hosts()):
            view_now = BalancerHost(
                name=view.name, drain_mode=view.drain_mode, sessions=view.sessions,
                connecting=view.connecting, order=view.order, metrics=view.metrics,
                outdated=True,
            )  # fmt: skip
            self.balancer.upsert_host(view_now)

    def starting_hosts(self) -> list[Host]:
        if not self.starting:
            return []
        return [h for h in self.hosts.values() if h.starting]

    def scale_hosts(self) -> list[ScaleHost]:
        """The hosts as scaling sees them; starting ones have free slots (so the same
        demand never adds twice) and are never empty long enough to go."""
        ready = [
            ScaleHost(
                name=view.name,
                sessions=view.sessions,
                drain_mode=view.drain_mode,
                managed=True,
                empty_since=self.hosts[view.name].empty_since if view.sessions == 0 else None,
            )
            for view in self.balancer.hosts()
        ]
        return ready + [ScaleHost(name=h.name, managed=True) for h in self.starting_hosts()]

    # -------------------------------------------------------------- sessions

    def push(self, at: float, kind: int, name: str) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (at, kind, self.sequence, name))

    def has_room(self) -> bool:
        """Some host taking sessions is below the limit (else no placement can succeed,
        and the engine need not be asked)."""
        busy = self.sessions_total - self.sessions_drained
        return self.taking_count * self.balancer.limit > busy

    def try_place(self, index: int, now: float) -> bool:
        if not self.has_room():
            return False
        user = _key(index)
        demand = Demand(user)
        placement = self.balancer.place(demand)
        if placement.host is None:
            return False
        self.balancer.commit(demand, placement)
        self.hosts[placement.host].empty_since = None
        self.empty.discard(placement.host)
        self.sessions_total += 1
        self.placed += 1
        self.placed_at[index] = now
        logon = self.logons[index]
        seconds = logon.seconds
        self.push(now + seconds, END, user)
        if logon.disconnect_after is not None and logon.disconnect_after < seconds:
            self.push(now + logon.disconnect_after, DISCONNECT, user)
        if self.max_session_seconds is not None and self.max_session_seconds < seconds:
            self.push(now + self.max_session_seconds, MAX_SESSION, user)
        if self.track_connecting:
            self.connecting.add(user)
            if self.connecting_seconds < seconds:
                self.push(now + self.connecting_seconds, CONNECTED, user)
        return True

    def place_waiting(self, now: float) -> None:
        while self.waiting and self.try_place(self.waiting[0], now):
            self.waiting.popleft()

    def arrive(self, index: int, now: float) -> None:
        if self.waiting or not self.try_place(index, now):
            self.waiting.append(index)
            self.peak_pending = max(self.peak_pending, len(self.waiting))

    def end(self, user: str, now: float) -> None:
        host = self.balancer.end_session(user, was_connecting=user in self.connecting)
        self.connecting.discard(user)
        self.logoffs.pop(user, None)
        if host is None:
            return
        since = self.disconnected.pop(user, None)
        if since is not None:
            self.disconnected_seconds += now - since
            self.disconnected_on[host] -= 1
        self.sessions_total -= 1
        if host in self.drained:
            self.sessions_drained -= 1
        view = self.balancer.host(host)
        if view is not None and view.sessions == 0 and host in self.hosts:
            self.hosts[host].empty_since = self.instant(now)
            self.empty.add(host)
        self.place_waiting(now)

    def forced_logoff(self, user: str, now: float) -> None:
        if self.logoffs.get(user) == now:
            if user in self.update_logoffs and self.update is not None:
                self.update.sessions_ended += 1
            self.update_logoffs.discard(user)
            self.end(user, now)

    def disconnect(self, user: str, now: float, limit: SessionLimit | None = None) -> None:
        """The session is left Disconnected (by its user, or by ``limit``); it keeps its
        slot, and the disconnected limit, if any, counts from now. One already
        Disconnected, or ended, is left as it is."""
        host = self.balancer.session_host(user)
        if host is None or user in self.disconnected:
            return
        self.disconnected[user] = now
        self.disconnected_on[host] = self.disconnected_on.get(host, 0) + 1
        if limit is not None:
            self.disconnected_by[limit] = self.disconnected_by.get(limit, 0) + 1
        if self.disconnected_limit_seconds is not None:
            self.push(now + self.disconnected_limit_seconds, DISCONNECTED_LIMIT, user)

    def max_session_reached(self, user: str, now: float) -> None:
        """maxSessionMinutes since the logon: logged off, or disconnected."""
        if self.balancer.session_host(user) is None:
            return
        if self.max_session_logs_off:
            self.logged_off_by(SessionLimit.MAX_SESSION, user, now)
        else:
            self.disconnect(user, now, SessionLimit.MAX_SESSION)

    def disconnected_limit_reached(self, user: str, now: float) -> None:
        """disconnectedMinutes since the session was left: logged off (a session is only
        ever disconnected once here: nobody reconnects in a replay)."""
        if user in self.disconnected:
            self.logged_off_by(SessionLimit.DISCONNECTED, user, now)

    def logged_off_by(self, limit: SessionLimit, user: str, now: float) -> None:
        self.ended_by[limit] = self.ended_by.get(limit, 0) + 1
        self.end(user, now)

    def disconnected_until(self, now: float) -> float:
        """Session-seconds spent Disconnected up to ``now``, the sessions still
        Disconnected included."""
        still = sum(now - since for since in self.disconnected.values())
        return self.disconnected_seconds + still

    def connected(self, user: str) -> None:
        if user not in self.connecting:
            return
        self.connecting.discard(user)
        host = self.balancer.session_host(user)
        if host is not None:
            self.balancer.adjust_connecting(host, -1)

    # -------------------------------------------------------------- figures

    def used_capacity_percent(self) -> int:
        """100 x sessions / (taking x maxSessionLimit), rounded up; taking = hosts ready
        and not draining; 100 with sessions and no such host."""
        sessions = self.sessions_total
        taking = self.taking_count
        if taking == 0:
            return 100 if sessions else 0
        return -(-100 * sessions // (taking * self.balancer.limit))

    def step(self, now: float) -> dict[str, Any]:
        algorithm: LoadBalancerType = self.balancer.algorithm
        return {
            "at": self.local(now),
            "phase": None if self.phase is None else self.phase.phase.value,
            "loadBalancerType": algorithm.value,
            "hosts": len(self.hosts),
            "sessions": self.sessions_total,
            "pending": len(self.waiting),
            "usedCapacityPercent": self.used_capacity_percent(),
            "disconnected": len(self.disconnected),
        }
