"""Stopping and starting a personal pool's hosts: a workload-backed host unused for
``personal.stopAfterMinutes`` has its workload deleted (its volumes, owned by the host,
stay) and says ``power: Stopped``; its user's next connect makes the workload again (Start
on Connect) while the request waits ``HostsStarting``. Decisions are ``engine.power``'s;
this carries them out and tells (Events ``HostStopped`` and
``HostStarting`` on the host)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from ...engine import power
from ...engine.pool_state import PoolState
from ..deps import Deps
from .workload_keeper import WorkloadKeeper

log = logging.getLogger(__name__)


class PowerKeeper:
    """One pool's host power: the stops that are due, the starts a connect asked for."""

    def __init__(
        self,
        state: PoolState,
        deps: Deps,
        keeper: WorkloadKeeper,
        mark_dirty: Callable[[], None],
    ) -> None:
        self.state = state
        self.deps = deps
        self.keeper = keeper
        self._mark_dirty = mark_dirty

    def apply(self, now: datetime) -> None:
        state = self.state
        for name in sorted(state.starts):
            state.starts.discard(name)
            host = state.hosts.get(name)
            if host is None or name not in state.power_off:
                continue
            state.power_off.discard(name)
            state.unused_since.pop(name, None)
            self._tell(name, "HostStarting", "its user connected: starting it again")
            self.deps.spawn(self.keeper.start(host))
            self._mark_dirty()
        if not power.personal(state):
            return
        stop_after = power.stop_after(state)
        for name in power.hosts_to_stop(power.power_views(state, now), stop_after, now):
            host = state.hosts[name]
            state.power_off.add(name)
            # Gone for every decision from now on, not when the watch says so: a connect
            # right after must wait for a new workload, never land on the one going away.
            workload = state.workloads.get(name)
            state.workloads[name] = None
            minutes = stop_after.total_seconds() / 60 if stop_after is not None else 0
            self._tell(name, "HostStopped", f"unused for {minutes:g} min: stopped, volumes kept")
            self.deps.spawn(self.keeper.stop(host, workload))
            self._mark_dirty()

    def next_due(self, now: datetime) -> datetime | None:
        """When the next stop is due (None: none is coming)."""
        state = self.state
        if not power.personal(state):
            return None
        return power.next_stop(power.power_views(state, now), power.stop_after(state), now)

    def _tell(self, name: str, reason: str, message: str) -> None:
        state = self.state
        host = state.hosts.get(name)
        log.info("%s/%s: host %s %s", state.namespace, state.name, name, message)
        if host is not None:
            self.deps.events.post(host.body, "SessionHost", reason, message, "Normal")
