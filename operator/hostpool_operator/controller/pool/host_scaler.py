"""Carrying out a pool's scaling decisions: creating hosts from its template (each with its
workload, through the pool's ``WorkloadKeeper``) and deleting the operator's empty ones.

One change at a time per pool: its result is observed before the next decision, and every
decision is derived from the hosts the API shows, so a restart never creates a host twice.
While the API server refuses the template's workload, no further host is added.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ...api.vocabulary import (
    HOSTS,
    MANAGED_LABEL,
    MANAGER,
    POOL_LABEL,
    TEMPLATE_REVISION_LABEL,
)
from ...engine.pool_state import PoolState
from ...engine.records import HostRecord
from ...kube.backoff import Backoff
from ...kube.errors import ApiError, ApiTransportError
from ...scaling.plans import PlanDecision
from ...scaling.pool import decide
from ...scaling.rules import host_manifest
from ..deps import Deps
from .workload_keeper import WorkloadKeeper

#: Characters of generated host names (as the API server's generateName uses: no vowels,
#: no look-alike digits).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
#: Hosts created at once in one scale-up round.
CREATE_BATCH = 8


def host_name(pool: str) -> str:
    """A new host's name: the pool's, a dash and five random characters."""
    return f"{pool[:57]}-{''.join(secrets.choice(NAME_ALPHABET) for _ in range(5))}"


log = logging.getLogger(__name__)


class HostScaler:
    """One pool's scaling actuator, and what its ScalingLimited condition says."""

    def __init__(
        self,
        state: PoolState,
        deps: Deps,
        workloads: WorkloadKeeper,
        host_created: Callable[[Mapping[str, Any]], None],
        wake: Callable[[], None],
        mark_dirty: Callable[[], None],
    ) -> None:
        self.state = state
        self.deps = deps
        self.workloads = workloads
        self._host_created = host_created
        self._wake = wake
        self._mark_dirty = mark_dirty
        self.task: asyncio.Task[None] | None = None
        self._backoff = Backoff(first=2.0, cap=60.0)
        self._create_refused = False
        #: The ScalingLimited condition (status, message); None without a scaling spec.
        self.limited: tuple[bool, str] | None = None
        #: Why the last host could not be created (the API server's words).
        self.last_error: str | None = None

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def _pool_body(self) -> dict[str, Any]:
        return self.state.pool.body if self.state.pool is not None else {}

    def scale(self, now: datetime, plan: PlanDecision | None = None) -> None:
        """Decide (with the scaling plan's decision, if a phase is in force), and start the
        change (in a task of its own) if there is one."""
        state = self.state
        if state.spec is None or state.views.balancer is None:
            return
        if self.task is not None and not self.task.done():
            return  # one change at a time; its result is observed before the next decision
        decision = decide(state, now, plan)
        # A host about to be removed needs no new workload (it would start for nothing and
        # go with its host a moment later).
        going = set(decision.remove) if decision is not None and decision.add == 0 else set()
        missing = [h for h in self.workloads.hosts_without_workload() if h.meta.name not in going]
        if missing and self.workloads.may_try(time.monotonic()):
            self.task = self.deps.spawn(self.workloads.keep(missing))
            return
        if decision is None:
            if self.limited is not None:
                self.limited = None
                self._mark_dirty()
            return
        limited = (decision.limited, decision.message)
        if limited != self.limited:
            if decision.limited:
                self.deps.events.post(
                    self._pool_body(),
                    "HostPool",
                    "ScalingLimited",
                    decision.message,
                    "Warning",
                    once_per=("limited", state.namespace, state.name),
                )
            self.limited = limited
            self._mark_dirty()
        if decision.add > 0 and self.workloads.refused is None:
            self.task = self.deps.spawn(self._create(decision.add, time.monotonic()))
        elif decision.remove:
            state.begin_removal(decision.remove)
            self.task = self.deps.spawn(self._remove(decision.remove))

    async def _create(self, count: int, decided: float) -> None:
        """Create ``count`` hosts (and their workloads), a batch at a time: a logon storm on
        an empty pool needs many at once, and each one waits for its own two writes only.
        A failure ends the round; the next decision sees what was made."""
        created = 0
        remaining = count
        self._create_refused = False
        while remaining > 0:
            batch = min(remaining, CREATE_BATCH)
            results = await asyncio.gather(*(self.create_one(decided) for _ in range(batch)))
            created += sum(1 for made in results if made)
            remaining -= batch
            if not all(results) or self.workloads.refused is not None:
                break
        if self._create_refused:
            # The round ends here and the next decision tries again; a lasting refusal
            # waits longer each time (the task stays busy meanwhile).
            await asyncio.sleep(self._backoff.next())
        elif created:
            self._backoff.reset()
        if created:
            self._report(
                "up", created, "HostsAdded", f"added {created} SessionHost(s) from the template"
            )
        self._wake()

    async def create_one(self, decided: float, name: str | None = None) -> bool:
        """One host from the template (named ``name``, else a fresh name), then its
        workload. False when either failed."""
        state = self.state
        spec = state.spec
        if spec is None or spec.scaling is None or state.pool is None or state.revision is None:
            return False  # the pool went away or became invalid meanwhile
        template = spec.scaling.host_template
        if name is None and template.workload is not None:
            # Named here, so the host's workloadRef is in the one write that creates it.
            name = host_name(state.name)
        labels = {
            POOL_LABEL: state.name,
            MANAGED_LABEL: MANAGER,
            TEMPLATE_REVISION_LABEL: state.revision,
        }
        manifest = host_manifest(
            template,
            pool=state.name,
            namespace=state.namespace,
            pool_uid=state.pool.meta.uid,
            labels=labels,
            name=name,
        )
        try:
            obj = await self.deps.client.create(HOSTS, state.namespace, manifest)
        except (ApiError, ApiTransportError) as error:
            # A namesake (a one-in-14-million draw) included: the next decision tries again.
            self._create_failed(error)
            return False
        # Known at once, so the next decision counts it (the watch event follows).
        self.last_error = None
        self._host_created(obj)
        if template.workload is None:
            return True
        await self.workloads.create_for(template.workload, HostRecord.of(obj), decided)
        return True  # the host exists either way; a refused workload is retried with back-off

    async def _remove(self, names: list[str]) -> None:
        state = self.state
        removed = 0
        for name in names:
            record = state.hosts.get(name)
            if record is None:
                continue
            try:
                await self.deps.client.delete(HOSTS, state.namespace, name, uid=record.meta.uid)
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

    @property
    def busy(self) -> bool:
        """A change is on its way: its result is observed before the next decision."""
        return self.task is not None and not self.task.done()

    def _create_failed(self, error: BaseException) -> None:
        state = self.state
        self._create_refused = True
        self.last_error = str(error)
        log.warning("%s/%s: could not create a host: %s", state.namespace, state.name, error)
        self.deps.events.post(
            self._pool_body(),
            "HostPool",
            "ScaleUpFailed",
            str(error),
            "Warning",
            once_per=(state.namespace, state.name, "ScaleUpFailed"),
        )

    def _report(self, direction: str, hosts: int, reason: str, message: str) -> None:
        """Hosts were added or removed: the metric, a log line and an Event on the pool."""
        state = self.state
        self.deps.metrics.scaled(state.namespace, state.name, direction, hosts)
        log.info("%s/%s: %s", state.namespace, state.name, message)
        self.deps.events.post(self._pool_body(), "HostPool", reason, message, "Normal")
