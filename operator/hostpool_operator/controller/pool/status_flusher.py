"""Writing a pool's status and its hosts' statuses: debounced, and only when they changed.

Pool and host status are written by tasks of their own, so decisions never wait for them and
a long round of host writes (1,000 hosts) never holds the pool's status back. Each is written
at most once per ``status_interval``. While placements go on, host status waits for a pause
of ``pool_quiet`` (at the latest ``host_status_max_delay``): every assignment changes some
host's counts, and a write per host per second would cost as much as the assignments
themselves. A pool status whose counts alone changed waits likewise
(``status.pool_status_due``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ...api.vocabulary import HOSTS, POOLS
from ...engine.personal import data_condition
from ...engine.pool_state import PoolState, pending_count, waiting_reasons
from ...engine.power import power_of
from ...engine.records import HostRecord
from ...engine.status import (
    PoolFacts,
    PoolForHosts,
    SessionCounts,
    host_status,
    is_saturated,
    ours,
    pool_status,
    pool_status_due,
    same_status,
    session_counts,
)
from ...engine.workloads import Gate
from ...kube.errors import ApiError, ApiTransportError, NotLeaderError
from ..deps import Deps

log = logging.getLogger(__name__)


def _idle(task: asyncio.Task[None] | None) -> bool:
    return task is None or task.done()


class StatusFlusher:
    """One pool's status writes: what is dirty, when it is due, and the writes."""

    def __init__(
        self,
        state: PoolState,
        deps: Deps,
        scaling_limited: Callable[[], tuple[bool, str] | None],
        wake: Callable[[], None],
        workload_failure: Callable[[], tuple[bool, str, str] | None] = lambda: None,
        scaling_plan: Callable[[], dict[str, Any] | None] = lambda: None,
        update: Callable[[], dict[str, Any] | None] = lambda: None,
    ) -> None:
        self.state = state
        self.deps = deps
        self._scaling_limited = scaling_limited
        self._workload_failure = workload_failure
        self._scaling_plan = scaling_plan
        self._update = update
        self._wake = wake
        self.pool_dirty = True
        self.hosts_dirty = True
        self.pool_task: asyncio.Task[None] | None = None
        self.hosts_task: asyncio.Task[None] | None = None
        self._key = (state.namespace, state.name)
        self.last_pool_write = 0.0  # monotonic, when the last pool flush started
        self.last_host_write = 0.0
        self.last_activity = 0.0  # monotonic time of the latest placement
        self.written_hosts: dict[str, dict[str, Any]] = {}
        self.written_pool: dict[str, Any] | None = None
        self.pool_written_at = 0.0  # monotonic, when the pool status last landed
        self.was_saturated: bool | None = None

    def mark_dirty(self) -> None:
        self.pool_dirty = self.hosts_dirty = True

    def placed(self) -> None:
        """A placement happened: counts changed, and host status waits for the pause."""
        self.last_activity = time.monotonic()
        self.mark_dirty()

    def forget_host(self, name: str) -> None:
        self.written_hosts.pop(name, None)

    def stop(self) -> None:
        for task in (self.pool_task, self.hosts_task):
            if task is not None:
                task.cancel()

    # -------------------------------------------------------------- timing

    def due_in(self, clock: float) -> list[float]:
        """Seconds until each pending flush is due (for the pool loop's timer)."""
        interval = self.deps.settings.status_interval
        due = []
        if self.pool_dirty and _idle(self.pool_task):
            due.append(interval - (clock - self.last_pool_write))
        if self.hosts_dirty and _idle(self.hosts_task):
            at = min(
                self.last_activity + self.deps.settings.pool_quiet,
                self.last_host_write + self.deps.settings.host_status_max_delay,
            )
            due.append(at - clock)
        return due

    def maybe_flush(self) -> None:
        """Start a status write when the interval has passed and something changed; pool
        and host status independently. Otherwise the loop wakes again when one is due."""
        clock = time.monotonic()
        settings = self.deps.settings
        if (
            self.pool_dirty
            and _idle(self.pool_task)
            and clock - self.last_pool_write >= settings.status_interval
        ):
            self.pool_dirty = False
            self.last_pool_write = clock
            self.pool_task = self.deps.spawn(self._flush_pool())
        if (
            self.hosts_dirty
            and _idle(self.hosts_task)
            and (
                clock - self.last_activity >= settings.pool_quiet
                or clock - self.last_host_write >= settings.host_status_max_delay
            )
        ):
            self.hosts_dirty = False
            self.last_host_write = clock
            self.hosts_task = self.deps.spawn(self._flush_hosts())

    async def _flush_pool(self) -> None:
        try:
            await self._write_pool_status(session_counts(self.state.ledger, self.state.requests))
        except Exception:
            log.exception("%s/%s: pool status write failed", self.state.namespace, self.state.name)
            self.pool_dirty = True
        finally:
            self._wake()  # re-check: more may have changed meanwhile

    async def _flush_hosts(self) -> None:
        try:
            await self._write_host_statuses(session_counts(self.state.ledger, self.state.requests))
        except Exception:
            log.exception("%s/%s: host status write failed", self.state.namespace, self.state.name)
            self.hosts_dirty = True
        finally:
            self._wake()

    # -------------------------------------------------------------- hosts

    async def _write_host_statuses(self, counts: SessionCounts) -> None:
        state = self.state
        balancer = state.views.balancer
        horizon = balancer is not None and balancer.algorithm.value == "Horizon"
        buckets = balancer.buckets() if balancer is not None and horizon else {}
        now = datetime.now(UTC)
        pool = PoolForHosts(
            pool_name=state.name,
            pool_exists=state.pool is not None,
            balancer=balancer,
            counts=counts,
            buckets=buckets,
            metrics_stale_after=self.deps.settings.metrics_stale_after,
            now=now,
        )
        changed = []
        for host in list(state.hosts.values()):
            status = host_status(
                host,
                pool,
                metrics_stale=host.meta.name in state.views.stale_hosts,
                workload=state.workload_state(host, now),
                address=state.address_of(host),
                power=power_of(state, host, now),
                data=data_condition(data) if (data := state.personal.host_data(host)) else None,
            )
            previous = self.written_hosts.get(host.meta.name)
            if previous is not None and same_status(previous, status):
                continue
            if previous is None and same_status(ours(host.status, status), status):
                self.written_hosts[host.meta.name] = status
                continue
            changed.append((host, status))
        await asyncio.gather(*(self._write_host_status(h, st) for h, st in changed))

    async def _write_host_status(self, host: HostRecord, status: dict[str, Any]) -> None:
        namespace = self.state.namespace
        # Status writes have slots of their own: they must never hold up assignments.
        async with self.deps.status_slots.slot(self._key):
            try:
                await self.deps.client.patch_status(HOSTS, namespace, host.meta.name, status)
                self.written_hosts[host.meta.name] = status
                host.status.update(status)
            except ApiError as error:
                if not error.not_found:
                    log.warning("%s/%s: host status: %s", namespace, host.meta.name, error)
                    self.mark_dirty()
            except NotLeaderError:
                pass  # unsent: no longer the leader, whose writes these are (not retried)
            except ApiTransportError as error:
                log.warning("%s/%s: host status: %s", namespace, host.meta.name, error)
                self.mark_dirty()

    # -------------------------------------------------------------- the pool

    async def _write_pool_status(self, counts: SessionCounts) -> None:
        state = self.state
        pool = state.pool
        if pool is None:
            return
        now = datetime.now(UTC)
        not_ready = {
            host.meta.name
            for host in state.hosts.values()
            if (workload := state.workload_state(host, now)) is not None
            and workload.gate is not Gate.OPEN
        }
        facts = PoolFacts(
            host_count=len(state.hosts),
            balancer=state.views.balancer,
            pending=pending_count(state),
            waiting_reasons=waiting_reasons(state),
            scaling_limited=self._scaling_limited(),
            counts=counts,
            not_ready=not_ready,
            workload_failure=self._workload_failure(),
            agent_silent=len(state.views.stale_hosts & state.hosts.keys()),
            scaling_plan=self._scaling_plan(),
            update=self._update(),
        )
        status = pool_status(pool, facts, now=now)
        self.deps.metrics.pool_state(state.namespace, state.name, status)
        previous = self.written_pool
        clock = time.monotonic()
        settings = self.deps.settings
        if not pool_status_due(
            previous,
            status,
            busy=clock - self.last_activity < settings.pool_quiet,
            since_written=clock - self.pool_written_at,
            max_delay=settings.pool_status_max_delay,
        ):
            if previous is not None and not same_status(previous, status):
                self.pool_dirty = True  # counts only, mid-storm: at the pause or the max delay
            return
        saturated, message = is_saturated(status)
        if self.was_saturated is not None and saturated != self.was_saturated:
            reason = "PoolSaturated" if saturated else "PoolRecovered"
            self.deps.events.post(pool.body, "HostPool", reason, message, "Normal")
        self.was_saturated = saturated
        try:
            # Ahead of host status writes: the pool's conditions are what people read.
            async with self.deps.status_slots.slot(self._key, urgent=True):
                await self.deps.client.patch_status(POOLS, state.namespace, state.name, status)
            self.written_pool = status
            self.pool_written_at = time.monotonic()
            pool.status.update(status)
        except ApiError as error:
            if not error.not_found:
                log.warning(
                    "%s/%s: pool status write failed: %s", state.namespace, state.name, error
                )
                self.mark_dirty()
        except NotLeaderError:
            pass  # unsent: no longer the leader, whose write this is (not retried)
        except ApiTransportError as error:
            log.warning("%s/%s: pool status write failed: %s", state.namespace, state.name, error)
            self.mark_dirty()
