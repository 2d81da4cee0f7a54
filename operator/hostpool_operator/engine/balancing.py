"""The load-balancing engine: where does a new session go?

Pure decision code. A :class:`PoolBalancer` holds the observed state of one pool (its spec,
its hosts in query order with their session counts) and answers :meth:`~PoolBalancer.place`
for a request; :meth:`~PoolBalancer.commit` records the decision so the next request sees it.
Which user has a session where lives in a :class:`~.ledger.SessionLedger`, which the engine
reads for reconnects: its own (the simulator) or the operator's, shared.
Nothing here does I/O or knows about Kubernetes; the operator and the simulator both drive it.

Rules common to every algorithm:

* **Reconnect first.** A user who already has a session in the pool goes back to that host,
  even if it is draining or at/over the limit; no second session is created.
* A host in **drain mode** takes no new session.
* A host takes a new session only while ``sessions < maxSessionLimit`` (absent: 999999);
  lowering the limit evicts nobody.
* A request asking for a protocol, or unauthenticated access, only goes to hosts that
  support it.
* While the pool's hosts are being **updated** to a new template, the algorithm chooses among
  the updated hosts first; an outdated host gets a new session only when no updated host can
  take it (so no logon waits for an update, and outdated hosts empty as their users leave).

Algorithms:

* **BreadthFirst**: of the hosts that may take a new session, the ``ceil(n/2)`` with the fewest
  sessions (ties in query order), then one of those at random (seedable).
* **DepthFirst**: of the hosts that may take a new session, the one with the most sessions;
  ties go to the first in query order.
* **Horizon**: load index per host, per-host logon-storm thresholds (the host's own
  ``spec.logonStorm`` field by field, else the pool's), then Connection-Server buckets 1/2/3
  (see :meth:`PoolBalancer._horizon_choice`).

Query order is ``metadata.creationTimestamp``, then name; the caller passes hosts in that order
(or gives each an explicit ``order`` key).

Cost per decision: breadth- and depth-first keep the hosts that may take a session in a
sorted list updated incrementally, so a decision is O(log n) when the request can go to any
of them (the usual case); a request that needs a feature only some hosts have scans the
sorted list from its best end. Horizon keeps its bucket-1 candidates sorted by load index
(so the dynamic threshold raise is a lookup) and grouped by connecting count (so the fair
share is the first host of the lowest group under the threshold): O(log n + k) per decision,
k being the number of distinct connecting counts (at most 150).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import Any

from sortedcontainers import SortedList

from ..api import (
    ALL_PROTOCOLS,
    HorizonSettings,
    HostPoolSpec,
    LoadBalancerType,
    Reason,
)
from .balancer_view import BalancerHost, Placement, breadth_first_candidates, free_slots
from .demand import Demand
from .horizon import NO_LOAD_INDEX, HorizonEntry, HorizonIndex, load_index, logon_storm_block
from .ledger import SessionLedger


class _Candidates:
    """The hosts of one tier that may take a new session, indexed for the algorithm."""

    __slots__ = ("hz", "index", "lacking")

    def __init__(self) -> None:
        self.index: SortedList = SortedList()
        # How many indexed hosts lack each feature: a request needing a feature no indexed
        # host lacks may take the O(log n) path.
        self.lacking: dict[str, int] = {}
        self.hz = HorizonIndex()


class PoolBalancer:
    """Observed state of one pool plus the indexes that make each decision cheap."""

    def __init__(
        self,
        spec: HostPoolSpec,
        hosts: Iterable[BalancerHost] = (),
        sessions: Iterable[tuple[str, str]] = (),
        *,
        ledger: SessionLedger | None = None,
        seed: int | None = None,
    ) -> None:
        """``hosts`` carry their session counts (known users and anonymous sessions alike);
        ``sessions`` name the users among them (user, host), for reconnects. With a shared
        ``ledger`` its sessions are the known ones and the counts must agree with it."""
        self._rng = random.Random(seed)
        self._hosts: dict[str, BalancerHost] = {}
        self._ledger = ledger if ledger is not None else SessionLedger()
        self._next_order = 0
        # The hosts that may take a new session: the preferred tier (hosts of the pool's
        # current template), then the outdated ones, each with the algorithm's own index.
        self._tiers = (_Candidates(), _Candidates())
        self._configure(spec)
        for host in hosts:
            self._add(host)
        for user, host_name in sessions:
            if host_name not in self._hosts:
                raise KeyError(f"session of {user!r} on unknown host {host_name!r}")
            self._ledger.open(user, host_name)
        self._rebuild_index()

    def _configure(self, spec: HostPoolSpec) -> None:
        # Read the settings once: the hot path must not touch pydantic.
        self._spec = spec
        self._limit = spec.load_balancer.session_limit
        self._algorithm = spec.load_balancer.type
        self._horizon = spec.horizon_settings
        self._is_horizon = self._algorithm is LoadBalancerType.HORIZON
        self._depth_first = self._algorithm is LoadBalancerType.DEPTH_FIRST

    # ------------------------------------------------------------------ observed state

    @property
    def spec(self) -> HostPoolSpec:
        return self._spec

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def algorithm(self) -> LoadBalancerType:
        return self._algorithm

    @property
    def horizon(self) -> HorizonSettings:
        return self._horizon

    def hosts(self) -> Iterator[BalancerHost]:
        """Hosts in query order."""
        return iter(sorted(self._hosts.values(), key=lambda h: (h.order, h.name)))

    def host(self, name: str) -> BalancerHost | None:
        return self._hosts.get(name)

    @property
    def ledger(self) -> SessionLedger:
        return self._ledger

    def session_host(self, user: str) -> str | None:
        """The host where this user has a session in the pool, if any."""
        return self._ledger.host_of(user)

    def __len__(self) -> int:
        return len(self._hosts)

    def set_spec(self, spec: HostPoolSpec) -> None:
        """The pool changed (algorithm, limit, thresholds): keep state, rebuild indexes."""
        self._configure(spec)
        self._rebuild_index()

    def upsert_host(self, host: BalancerHost) -> None:
        """A host appeared or changed (drain, features, metrics, counts)."""
        old = self._hosts.get(host.name)
        if old is not None:
            self._unindex(old)
            if host.order < 0:
                host.order = old.order
        self._add(host)
        self._index_host(self._hosts[host.name])

    def remove_host(self, name: str) -> frozenset[str]:
        """A host is gone. Returns the users whose sessions were on it (they lose them)."""
        users = self._ledger.users_on(name)
        self.withdraw_host(name)
        self._ledger.end_on(name)
        return users

    def withdraw_host(self, name: str) -> None:
        """The host takes no part in placement (invalid spec, being removed); its sessions
        stay in the ledger: they exist, and their users still reconnect to them."""
        host = self._hosts.pop(name, None)
        if host is not None:
            self._unindex(host)

    def set_connecting(self, name: str, connecting: int) -> None:
        """Sessions stop counting as connecting when agents report them or time runs out."""
        host = self._hosts[name]
        if host.connecting != connecting:
            self._unindex(host)
            host.connecting = max(0, connecting)
            self._index_host(host)

    # ------------------------------------------------------------------ decisions

    def place(self, demand: Demand) -> Placement:
        """Where this request goes, without changing any state."""
        existing = self._ledger.host_of(demand.user)
        if existing is not None:
            return Placement(existing, Reason.RECONNECTED)
        chosen = self._horizon_choice(demand) if self._is_horizon else self._indexed_choice(demand)
        if chosen is not None:
            return Placement(chosen.name, Reason.NEW_SESSION)
        return Placement(None, self._pending_reason(demand))

    def commit(self, demand: Demand, placement: Placement) -> None:
        """Record a placement: a new session adds one session and one connecting session.
        (The operator opens the session in its ledger itself, with its holder and deadline,
        then calls :meth:`session_started`.)"""
        if placement.host is None or placement.reason is Reason.RECONNECTED:
            return
        self._ledger.open(demand.user, placement.host)
        self.session_started(placement.host, connecting=True)

    def session_started(self, host_name: str, *, connecting: bool) -> None:
        """A session the ledger has on this host counts here (no limit applies: it exists)."""
        host = self._hosts.get(host_name)
        if host is None:
            return
        self._unindex(host)
        host.sessions += 1
        host.connecting += int(connecting)
        self._index_host(host)

    def session_ended(self, host_name: str, *, was_connecting: bool) -> None:
        """A session on this host ended: its slot is free again."""
        host = self._hosts.get(host_name)
        if host is None:
            return
        self._unindex(host)
        host.sessions = max(0, host.sessions - 1)
        if was_connecting:
            host.connecting = max(0, host.connecting - 1)
        self._index_host(host)

    def assign(self, demand: Demand) -> Placement:
        """place() then commit(): what the simulator does for each request in turn."""
        placement = self.place(demand)
        self.commit(demand, placement)
        return placement

    def adjust_connecting(self, host_name: str, delta: int) -> None:
        """A session stopped (or started) counting as connecting."""
        host = self._hosts.get(host_name)
        if host is not None:
            self.set_connecting(host_name, host.connecting + delta)

    def end_session(self, user: str, *, was_connecting: bool = False) -> str | None:
        """The user logged off (their SessionRequest was deleted). Frees the slot."""
        session = self._ledger.end(user)
        if session is None:
            return None
        self.session_ended(session.host, was_connecting=was_connecting)
        return session.host

    # ------------------------------------------------------------------ per-host facts

    def load_index_of(self, name: str) -> int:
        host = self._hosts[name]
        return load_index(self._horizon.load_index, host.metrics, host.sessions, self._limit)

    def availability(self, name: str) -> tuple[bool, str]:
        """(available, reason) for the host's Available condition."""
        host = self._hosts[name]
        if host.drain_mode:
            return False, "Draining"
        if host.sessions >= self._limit:
            return False, "SessionLimitReached"
        if self._is_horizon and self._logon_storm_blocks(host, self.load_index_of(name)):
            return False, "LogonStormThreshold"
        return True, "AcceptingSessions"

    def buckets(self) -> dict[str, int]:
        """Horizon bucket (1, 2 or 3) of every host, by name.

        Bucket 1: every default feature (multi-session, unauthenticated access, RDP, PCOIP and
        BLAST), a load index below the (raised) Connection Server threshold and fewer
        connecting sessions than its connecting threshold. The raise: when fewer than
        ``minRdsServersInLbQueue`` hosts in the load-balancing queue (those accepting new
        sessions) qualify, the threshold rises to one above the load index of the
        minimum-th least-loaded of them. Bucket 2: the other hosts under both configured
        thresholds. Bucket 3: everything else, including hosts with no load index.
        """
        threshold = self._threshold()
        server = self._horizon.connection_server
        out = {}
        for host in self._hosts.values():
            load = self.load_index_of(host.name)
            if load == NO_LOAD_INDEX or host.connecting >= server.rds_connecting_session_threshold:
                out[host.name] = 3
            elif host.features.all_default:
                out[host.name] = 1 if load < threshold else 3
            else:
                out[host.name] = 2 if load < server.rds_load_index_threshold else 3
        return out

    # ------------------------------------------------------------------ indexes

    def _tier(self, host: BalancerHost) -> _Candidates:
        return self._tiers[1 if host.outdated else 0]

    def _index_host(self, host: BalancerHost) -> None:
        if self._is_horizon:
            self._hz_index(host)
            return
        if host.drain_mode or host.sessions >= self._limit:
            return
        tier = self._tier(host)
        tier.index.add(self._key(host))
        for feature in self._lacks(host):
            tier.lacking[feature] = tier.lacking.get(feature, 0) + 1

    def _unindex(self, host: BalancerHost) -> None:
        tier = self._tier(host)
        if self._is_horizon:
            tier.hz.discard(host.name)
            return
        if host.drain_mode or host.sessions >= self._limit:
            return
        tier.index.remove(self._key(host))
        for feature in self._lacks(host):
            tier.lacking[feature] -= 1

    def _rebuild_index(self) -> None:
        self._tiers = (_Candidates(), _Candidates())
        for host in self._hosts.values():
            self._index_host(host)

    # ------------------------------------------------------------------ breadth/depth-first

    def _key(self, host: BalancerHost) -> tuple[int, int, str]:
        if self._depth_first:
            return (-host.sessions, host.order, host.name)
        return (host.sessions, host.order, host.name)

    @staticmethod
    def _lacks(host: BalancerHost) -> Iterator[str]:
        for protocol in ALL_PROTOCOLS:
            if protocol not in host.features.protocols:
                yield protocol.value
        if not host.features.unauthenticated_access:
            yield "unauthenticated"

    @staticmethod
    def _universal(tier: _Candidates, demand: Demand) -> bool:
        """Can every host indexed in this tier serve this request?"""
        if demand.protocol is not None and tier.lacking.get(demand.protocol.value, 0):
            return False
        return not (demand.unauthenticated and tier.lacking.get("unauthenticated", 0))

    def _indexed_choice(self, demand: Demand) -> BalancerHost | None:
        for tier in self._tiers:
            chosen = self._choice_in(tier, demand)
            if chosen is not None:
                return chosen
        return None

    def _choice_in(self, tier: _Candidates, demand: Demand) -> BalancerHost | None:
        index = tier.index
        if self._universal(tier, demand):
            if not index:
                return None
            if self._depth_first:
                return self._hosts[index[0][2]]
            pick = self._rng.randrange(breadth_first_candidates(len(index)))
            return self._hosts[index[pick][2]]
        # Some hosts lack what this request needs: walk the index from its best end.
        if self._depth_first:
            for key in index:
                host = self._hosts[key[2]]
                if host.supports(demand):
                    return host
            return None
        eligible = [self._hosts[key[2]] for key in index if self._hosts[key[2]].supports(demand)]
        if not eligible:
            return None
        return eligible[self._rng.randrange(breadth_first_candidates(len(eligible)))]

    # ------------------------------------------------------------------ Horizon

    def _logon_storm_blocks(self, host: BalancerHost, load: int) -> bool:
        """The logon-storm thresholds in force on the host: its own, else the pool's
        (reconnects never get here)."""
        storm = self._horizon.logon_storm
        return logon_storm_block(storm, host.logon_storm, host.connecting, load) is not None

    def _hz_index(self, host: BalancerHost) -> None:
        if host.drain_mode or host.sessions >= self._limit:
            return
        load = load_index(self._horizon.load_index, host.metrics, host.sessions, self._limit)
        if self._logon_storm_blocks(host, load):
            return
        hz = self._tier(host).hz
        server = self._horizon.connection_server
        under_connecting = host.connecting < server.rds_connecting_session_threshold
        ranked = load != NO_LOAD_INDEX and under_connecting
        candidate = ranked and host.features.all_default
        bucket2 = (
            ranked and not host.features.all_default and load < server.rds_load_index_threshold
        )
        hz.add(HorizonEntry(host.name, host.order, load, candidate, bucket2, host.connecting))

    def _threshold(self, hz: HorizonIndex | None = None) -> int:
        """The raised bucket-1 threshold among these hosts (default: the preferred tier's,
        which holds every host while no update runs)."""
        server = self._horizon.connection_server
        return (hz or self._tiers[0].hz).raised_threshold(
            server.rds_load_index_threshold, server.min_rds_servers_in_lb_queue
        )

    def _horizon_choice(self, demand: Demand) -> BalancerHost | None:
        """Bucket 1 first, then 2, then 3 (the last resort).

        In bucket 1 every host gets an equal share of new sessions: the one with the fewest
        sessions still connecting goes first (then the lower load index, then query order), so
        a logon storm is dealt round the bucket instead of flooding the least-loaded host.
        Every bucket-1 host has every default feature, so it can serve any request.
        Buckets 2 and 3 take the lowest load index (then fewest connecting, query order)
        among the hosts that support the request.
        """
        for tier in self._tiers:
            hz = tier.hz
            name = hz.bucket_one_choice(self._threshold(hz))
            if name is not None:
                return self._hosts[name]
            for pool in (hz.bucket2, hz.queue):
                for key in pool:
                    host = self._hosts[key[3]]
                    if host.supports(demand):
                        return host
        return None

    # ------------------------------------------------------------------ pending reasons

    def _pending_reason(self, demand: Demand) -> Reason:
        """Why no host was chosen.

        PoolSaturated: lack of capacity — the pool has no host, or every host that could serve
        the request (features, not draining) is at its session limit. Adding hosts helps.
        NoEligibleHost: otherwise — every host is draining, lacks a needed feature, or is
        turning logons away (Horizon logon-storm thresholds).
        """
        if not self._hosts:
            return Reason.POOL_SATURATED
        serving = [h for h in self._hosts.values() if h.supports(demand) and not h.drain_mode]
        if serving and all(h.sessions >= self._limit for h in serving):
            return Reason.POOL_SATURATED
        return Reason.NO_ELIGIBLE_HOST

    # ------------------------------------------------------------------ bookkeeping

    def _add(self, host: BalancerHost) -> None:
        if host.order < 0:
            host.order = self._next_order
        self._next_order = max(self._next_order, host.order + 1)
        self._hosts[host.name] = host

    # ------------------------------------------------------------------ summaries

    def free_slots(self) -> int:
        """Session slots left on hosts not in drain mode."""
        return free_slots(self._limit, self._hosts.values())

    def snapshot(self) -> list[dict[str, Any]]:
        """Each host's sessions, connecting, load index and bucket, in query order."""
        buckets = self.buckets() if self._is_horizon else {}
        return [
            {
                "name": h.name,
                "sessions": h.sessions,
                "connecting": h.connecting,
                "loadIndex": self.load_index_of(h.name),
                "bucket": buckets.get(h.name),
            }
            for h in self.hosts()
        ]
