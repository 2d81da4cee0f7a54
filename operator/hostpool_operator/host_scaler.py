"""Carrying out a pool's scaling decisions: creating hosts from its template, deleting the
operator's empty ones.

One change at a time per pool: its result is observed before the next decision, and every
decision is derived from the hosts the API shows, so a restart never creates a host twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from .k8s import ApiError, ApiTransportError
from .pool_state import PoolState
from .records import MANAGED_LABEL, MANAGER, POOL_LABEL
from .scaling import host_manifest
from .services import HOSTS, Services

log = logging.getLogger(__name__)


class HostScaler:
    """One pool's scaling actuator, and what its ScalingLimited condition says."""

    def __init__(
        self,
        state: PoolState,
        services: Services,
        host_created: Callable[[Mapping[str, Any]], None],
        wake: Callable[[], None],
        mark_dirty: Callable[[], None],
    ) -> None:
        self.state = state
        self.services = services
        self._host_created = host_created
        self._wake = wake
        self._mark_dirty = mark_dirty
        self.task: asyncio.Task[None] | None = None
        #: The ScalingLimited condition (status, message); None without a scaling spec.
        self.limited: tuple[bool, str] | None = None

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def _pool_body(self) -> dict[str, Any]:
        return self.state.pool.body if self.state.pool is not None else {}

    def scale(self, now: datetime) -> None:
        """Decide, and start the change (in a task of its own) if there is one."""
        state = self.state
        if state.spec is None or state.balancer is None:
            return
        if self.task is not None and not self.task.done():
            return  # one change at a time; its result is observed before the next decision
        decision = state.decide_scaling(now)
        if decision is None:
            if self.limited is not None:
                self.limited = None
                self._mark_dirty()
            return
        limited = (decision.limited, decision.message)
        if limited != self.limited:
            if decision.limited:
                self.services.events.post(
                    self._pool_body(),
                    "HostPool",
                    "ScalingLimited",
                    decision.message,
                    "Warning",
                    once_per=("limited", state.namespace, state.name),
                )
            self.limited = limited
            self._mark_dirty()
        if decision.add > 0:
            self.task = self.services.spawn(self._create(decision.add))
        elif decision.remove:
            state.begin_removal(decision.remove)
            self.task = self.services.spawn(self._remove(decision.remove))

    async def _create(self, count: int) -> None:
        state = self.state
        spec = state.spec
        assert spec is not None
        assert spec.scaling is not None
        assert state.pool is not None
        manifest = host_manifest(
            spec.scaling.host_template,
            pool=state.name,
            namespace=state.namespace,
            pool_uid=state.pool.meta.uid,
            labels={POOL_LABEL: state.name, MANAGED_LABEL: MANAGER},
        )
        created = 0
        for _ in range(count):
            try:
                obj = await self.services.client.create(HOSTS, state.namespace, manifest)
            except (ApiError, ApiTransportError) as error:
                log.warning(
                    "%s/%s: could not create a host: %s", state.namespace, state.name, error
                )
                self.services.events.post(
                    self._pool_body(), "HostPool", "ScaleUpFailed", str(error), "Warning"
                )
                await asyncio.sleep(2)
                break
            # Known at once, so the next decision counts it (the watch event follows).
            self._host_created(obj)
            created += 1
        if created:
            self._report(
                "up", created, "HostsAdded", f"added {created} SessionHost(s) from the template"
            )
        self._wake()

    async def _remove(self, names: list[str]) -> None:
        state = self.state
        removed = 0
        for name in names:
            record = state.hosts.get(name)
            if record is None:
                continue
            try:
                await self.services.client.delete(HOSTS, state.namespace, name, uid=record.meta.uid)
                removed += 1
            except (ApiError, ApiTransportError) as error:
                if isinstance(error, ApiError) and error.not_found:
                    continue
                log.warning(
                    "%s/%s: could not remove %s: %s", state.namespace, state.name, name, error
                )
                state.abort_removal(name, datetime.now(UTC))
        if removed:
            self._report(
                "down", removed, "HostsRemoved", f"removed empty SessionHost(s): {', '.join(names)}"
            )
        self._wake()

    def _report(self, direction: str, hosts: int, reason: str, message: str) -> None:
        """Hosts were added or removed: the metric, a log line and an Event on the pool."""
        state = self.state
        self.services.metrics.scaled(state.namespace, state.name, direction, hosts)
        log.info("%s/%s: %s", state.namespace, state.name, message)
        self.services.events.post(self._pool_body(), "HostPool", reason, message, "Normal")
