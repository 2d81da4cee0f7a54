"""How the engine sees one pool's hosts: metrics freshness, each host's view (its sessions,
its drain mode or closed workload, its address) and the balancer built from them. Pure.

A base of :class:`~.pool_state.PoolState`, which holds the attributes declared here; kept
apart so that what a host *looks like* to the engine reads in one place, and the
observations that change it (``pool_state``) in another.
"""

from __future__ import annotations

from datetime import datetime

from ..api import HostMetrics, HostPoolSpec
from ..api.timestamps import parse_time
from .balancing import PoolBalancer
from .host_view import HostView
from .ledger import SessionLedger
from .records import HostRecord, query_order
from .workloads import Gate, WorkloadRecord, WorkloadState, host_address, workload_state


class PoolView:
    """The engine's view of a pool's hosts (the attributes are PoolState's fields)."""

    metrics_stale_after: float
    hosts: dict[str, HostRecord]
    ledger: SessionLedger
    balancer: PoolBalancer | None
    stale_hosts: set[str]
    removing: set[str]
    workloads: dict[str, WorkloadRecord | None]
    capacity_changed: bool
    plan_closed: frozenset[str]
    samples_seen: dict[str, tuple[datetime, datetime]]

    @property
    def spec(self) -> HostPoolSpec | None:
        raise NotImplementedError

    def placement_spec(self) -> HostPoolSpec | None:
        raise NotImplementedError

    def _note_sample(self, host: HostRecord, now: datetime) -> None:
        """A host's agent may have reported again: a new sampledAt is seen now. At first
        sight of a host the agent's own time is taken if it is in the past (an agent dead
        for an hour is stale at once), never one in the future."""
        sampled = host.metrics.sampled_at if host.metrics is not None else None
        name = host.meta.name
        if sampled is None:
            self.samples_seen.pop(name, None)
            return
        known = self.samples_seen.get(name)
        if known is not None and known[0] == sampled:
            return
        self.samples_seen[name] = (sampled, now if known is not None else min(now, sampled))

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

    def view(self, host: HostRecord, now: datetime) -> HostView | None:
        """The host as the engine sees it (None: its spec is invalid)."""
        if host.spec is None:
            return None
        name = host.meta.name
        workload = self.workload_state(host, now)
        # A host whose workload is not Ready is closed like a draining one: reconnects only.
        closed = workload is not None and workload.gate is not Gate.OPEN
        return HostView(
            name=name,
            drain_mode=host.spec.drain_mode or closed or name in self.plan_closed,
            features=host.spec.features,
            address=self.address_of(host),
            sessions=self.ledger.count_on(name),
            connecting=self.ledger.connecting_on(name),
            metrics=self._metrics_for(host, now),
            order=query_order(host.meta.created),
            logon_storm=host.spec.logon_storm,
        )

    def rebuild_balancer(self, now: datetime) -> None:
        """(Re)build the engine from the records, after the pool appears or becomes valid."""
        spec = self.placement_spec()
        if spec is None:
            self.balancer = None
            return
        views = [
            view
            for host in self.hosts.values()
            if host.meta.name not in self.removing and (view := self.view(host, now)) is not None
        ]
        self.balancer = PoolBalancer(spec, views, ledger=self.ledger)
        self.capacity_changed = True

    def refresh_host(self, host: HostRecord, now: datetime) -> None:
        """Put the host's current view into the engine, or take it out if it cannot serve."""
        if self.balancer is None or host.meta.name in self.removing:
            return
        view = self.view(host, now)
        if view is None:
            self.balancer.withdraw_host(host.meta.name)
        else:
            self.balancer.upsert_host(view)

    def recheck_metrics(self, now: datetime) -> bool:
        """Metrics go stale with time alone: re-evaluate hosts that report sampledAt. True if
        a host's staleness changed."""
        if self.balancer is None:
            return False
        changed = False
        for host in self.hosts.values():
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
        if changed:
            self.capacity_changed = True
        return changed

    def workload_state(self, host: HostRecord, now: datetime) -> WorkloadState | None:
        """The host's workload as decisions see it (None: the host has no workloadRef)."""
        if host.spec is None or host.spec.workload_ref is None:
            return None
        spec = self.spec
        scaling = spec.scaling if spec is not None else None
        timeout = scaling.host_ready_timeout_seconds if scaling is not None else 600
        return workload_state(
            host.spec.workload_ref,
            self.workloads.get(host.meta.name),
            known=host.meta.name in self.workloads,
            managed=host.managed,
            host_created=parse_time(host.meta.created),
            ready_timeout=timeout,
            now=now,
        )

    def address_of(self, host: HostRecord) -> str | None:
        return host_address(host, self.workloads.get(host.meta.name))
