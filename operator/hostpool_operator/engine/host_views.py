"""How the engine sees one pool's hosts: metrics freshness, each host's view (its sessions,
its drain mode or closed workload, its address) and the balancer built from them. Pure.

:class:`HostViews` belongs to a :class:`~.pool_state.PoolState` (its ``views``). It owns
what only it changes (when each host's sample was seen, which hosts' metrics are stale, the
balancer) and reads the pool's records through :class:`PoolRecords`: what a host *looks like*
to the engine reads here, the observations that change it in ``pool_state``.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from datetime import datetime, timedelta
from typing import Protocol

from ..api import HostMetrics, HostPoolSpec
from .balancer_view import BalancerHost
from .balancing import PoolBalancer
from .ledger import SessionLedger
from .records import HostRecord, query_order
from .time_limits import ZERO, host_clock_offset
from .workloads import Gate, WorkloadState


class PoolRecords(Protocol):
    """What a host's view is built from, read from the pool's state (which owns it)."""

    @property
    def hosts(self) -> Mapping[str, HostRecord]: ...
    @property
    def ledger(self) -> SessionLedger: ...
    @property
    def removing(self) -> AbstractSet[str]: ...
    @property
    def plan_closed(self) -> AbstractSet[str]: ...
    def workload_state(self, host: HostRecord, now: datetime) -> WorkloadState | None: ...
    def address_of(self, host: HostRecord) -> str | None: ...
    def placed_last(self, host: HostRecord) -> bool: ...


class HostViews:
    """Each host of one pool as the engine sees it, and the balancer holding those views."""

    __slots__ = (
        "_pool",
        "balancer",
        "clock_offsets",
        "metrics_stale_after",
        "samples_seen",
        "stale_hosts",
    )

    def __init__(self, pool: PoolRecords, *, metrics_stale_after: float) -> None:
        self._pool = pool
        #: Host metrics sampled longer ago than this (seconds) are treated as never reported.
        self.metrics_stale_after = metrics_stale_after
        #: Per host: the last sampledAt its agent reported, and when this operator first saw
        #: that value (its own clock). Staleness counts from the latter: an agent whose clock
        #: is behind is not always stale, one whose clock is ahead does not look alive after
        #: it died.
        self.samples_seen: dict[str, tuple[datetime, datetime]] = {}
        self.stale_hosts: set[str] = set()
        #: Per host whose clock is estimated off the operator's: host minus operator (see
        #: ``limits.host_clock_offset``); a host missing here is taken as on time.
        self.clock_offsets: dict[str, timedelta] = {}
        #: None while the pool is missing or its spec invalid.
        self.balancer: PoolBalancer | None = None

    # -------------------------------------------------------------- metrics freshness

    def note_sample(self, host: HostRecord, now: datetime) -> None:
        """A host's agent may have reported again: a new sampledAt is seen now. At first
        sight of a host the agent's own time is taken if it is in the past (an agent dead
        for an hour is stale at once), never one in the future."""
        sampled = host.metrics.sampled_at if host.metrics is not None else None
        name = host.meta.name
        if sampled is None:
            self.samples_seen.pop(name, None)
            self.clock_offsets.pop(name, None)
            return
        known = self.samples_seen.get(name)
        if known is not None and known[0] == sampled:
            return
        self.samples_seen[name] = (sampled, now if known is not None else min(now, sampled))
        offset = host_clock_offset(sampled, now)
        if offset:
            self.clock_offsets[name] = offset
        else:
            self.clock_offsets.pop(name, None)

    def clock_offset(self, name: str) -> timedelta:
        """The host's clock minus the operator's, as last estimated (0: no estimate)."""
        return self.clock_offsets.get(name, ZERO)

    def sample_age(self, name: str, now: datetime) -> float | None:
        """Seconds since this operator saw the host's latest sample (None: none reported)."""
        seen = self.samples_seen.get(name)
        return None if seen is None else (now - seen[1]).total_seconds()

    def _metrics_for(self, host: HostRecord, now: datetime) -> HostMetrics | None:
        metrics = host.metrics
        if metrics is None:
            return None
        age = self.sample_age(host.meta.name, now)
        if age is not None and age > self.metrics_stale_after:
            self.stale_hosts.add(host.meta.name)
            return None
        self.stale_hosts.discard(host.meta.name)
        return metrics

    def recheck_metrics(self, now: datetime) -> bool:
        """Metrics go stale with time alone: re-evaluate hosts that report sampledAt. True if
        a host's staleness changed."""
        if self.balancer is None:
            return False
        changed = False
        for host in self._pool.hosts.values():
            age = self.sample_age(host.meta.name, now)
            if age is None:
                continue
            stale = age > self.metrics_stale_after
            if stale != (host.meta.name in self.stale_hosts):
                # Noted here too: a host outside the engine (invalid spec, being removed) is
                # not refreshed, and would otherwise count as changed on every pass.
                (self.stale_hosts.add if stale else self.stale_hosts.discard)(host.meta.name)
                self.refresh_host(host, now)
                changed = True
        return changed

    # -------------------------------------------------------------- views and the balancer

    def view(self, host: HostRecord, now: datetime) -> BalancerHost | None:
        """The host as the engine sees it (None: its spec is invalid)."""
        if host.spec is None:
            return None
        pool = self._pool
        name = host.meta.name
        workload = pool.workload_state(host, now)
        # A host whose workload is not Ready is closed like a draining one: reconnects only.
        closed = workload is not None and workload.gate is not Gate.OPEN
        return BalancerHost(
            name=name,
            drain_mode=host.spec.drain_mode or closed or name in pool.plan_closed,
            features=host.spec.features,
            address=pool.address_of(host),
            sessions=pool.ledger.count_on(name),
            connecting=pool.ledger.connecting_on(name),
            metrics=self._metrics_for(host, now),
            order=query_order(host.meta.created),
            logon_storm=host.spec.logon_storm,
            outdated=pool.placed_last(host),
        )

    def rebuild(self, spec: HostPoolSpec | None, now: datetime) -> bool:
        """(Re)build the balancer from the records with ``spec`` (None: there is none). True
        if one was built."""
        if spec is None:
            self.balancer = None
            return False
        pool = self._pool
        views = [
            view
            for host in pool.hosts.values()
            if host.meta.name not in pool.removing and (view := self.view(host, now)) is not None
        ]
        self.balancer = PoolBalancer(spec, views, ledger=pool.ledger)
        return True

    def refresh_host(self, host: HostRecord, now: datetime) -> None:
        """Put the host's current view into the balancer, or take it out if it cannot serve."""
        if self.balancer is None or host.meta.name in self._pool.removing:
            return
        view = self.view(host, now)
        if view is None:
            self.balancer.withdraw_host(host.meta.name)
        else:
            self.balancer.upsert_host(view)

    def withdraw(self, name: str) -> None:
        """Out of the balancer (a host being removed); its freshness is kept."""
        if self.balancer is not None:
            self.balancer.withdraw_host(name)

    def forget(self, name: str) -> None:
        """The host is gone: out of the balancer, and its freshness forgotten."""
        self.samples_seen.pop(name, None)
        self.clock_offsets.pop(name, None)
        self.stale_hosts.discard(name)
        self.withdraw(name)
