"""Carrying out a pool's scaling decisions: creating hosts (and their workloads) from its
template, deleting the operator's empty ones, and keeping a workload under every host the
operator created.

One change at a time per pool: its result is observed before the next decision, and every
decision is derived from the hosts the API shows, so a restart never creates a host twice.
A workload the API server refuses (a bad template, a kind it does not serve, a forbidden
resource) is reported on the pool and tried again with back-off, never in a tight loop;
meanwhile no further host is added for the same template.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from .api_workload import WorkloadTemplate
from .k8s import ApiError, ApiTransportError
from .pool_scaling import decide
from .pool_state import PoolState
from .records import MANAGED_LABEL, MANAGER, POOL_LABEL, HostRecord
from .scaling import host_manifest
from .services import HOSTS, Services
from .workloads import WorkloadRecord, workload_manifest

#: Characters of generated host names (as the API server's generateName uses: no vowels,
#: no look-alike digits).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
#: Back-off of workload creation after a refusal: first wait, then doubled up to the max.
RETRY_FIRST = 5.0
#: Hosts created at once in one scale-up round.
CREATE_BATCH = 8
RETRY_MAX = 300.0


def host_name(pool: str) -> str:
    """A new host's name: the pool's, a dash and five random characters."""
    return f"{pool[:57]}-{''.join(secrets.choice(NAME_ALPHABET) for _ in range(5))}"


log = logging.getLogger(__name__)


class HostScaler:
    """One pool's scaling actuator, and what its ScalingLimited condition says."""

    def __init__(
        self,
        state: PoolState,
        services: Services,
        host_created: Callable[[Mapping[str, Any]], None],
        workload_created: Callable[[str, WorkloadRecord], None],
        wake: Callable[[], None],
        mark_dirty: Callable[[], None],
    ) -> None:
        self.state = state
        self.services = services
        self._host_created = host_created
        self._workload_created = workload_created
        self._wake = wake
        self._mark_dirty = mark_dirty
        self.task: asyncio.Task[None] | None = None
        #: The ScalingLimited condition (status, message); None without a scaling spec.
        self.limited: tuple[bool, str] | None = None
        #: Why workloads cannot be created or watched (reason, message); None: they can.
        self.refused: tuple[str, str] | None = None
        #: Why the workload kind cannot be watched (set by the controller); None: it can.
        self.watch_error: str | None = None
        self._retry_at = 0.0  # monotonic: no workload creation before this
        #: Hosts added and not Ready yet: the monotonic time of the decision that made them.
        self.decided_at: dict[str, float] = {}
        self._backoff = RETRY_FIRST

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
        missing = self.hosts_without_workload()
        if missing and time.monotonic() >= self._retry_at:
            self.task = self.services.spawn(self._keep_workloads(missing))
            return
        decision = decide(state, now)
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
        if decision.add > 0 and self.refused is None:
            self.task = self.services.spawn(self._create(decision.add, time.monotonic()))
        elif decision.remove:
            state.begin_removal(decision.remove)
            self.task = self.services.spawn(self._remove(decision.remove))

    async def _create(self, count: int, decided: float) -> None:
        """Create ``count`` hosts (and their workloads), a batch at a time: a logon storm on
        an empty pool needs many at once, and each one waits for its own two writes only.
        A failure ends the round; the next decision sees what was made."""
        created = 0
        remaining = count
        while remaining > 0:
            batch = min(remaining, CREATE_BATCH)
            results = await asyncio.gather(*(self._create_one(decided) for _ in range(batch)))
            created += sum(1 for made in results if made)
            remaining -= batch
            if not all(results) or self.refused is not None:
                break
        if created:
            self._report(
                "up", created, "HostsAdded", f"added {created} SessionHost(s) from the template"
            )
        self._wake()

    async def _create_one(self, decided: float) -> bool:
        """One host from the template, then its workload. False when either failed."""
        state = self.state
        spec = state.spec
        if spec is None or spec.scaling is None or state.pool is None:
            return False  # the pool went away or became invalid meanwhile
        template = spec.scaling.host_template
        manifest = host_manifest(
            template,
            pool=state.name,
            namespace=state.namespace,
            pool_uid=state.pool.meta.uid,
            labels={POOL_LABEL: state.name, MANAGED_LABEL: MANAGER},
            # Named here, so the host's workloadRef is in the one write that creates it.
            name=host_name(state.name) if template.workload is not None else None,
        )
        try:
            obj = await self.services.client.create(HOSTS, state.namespace, manifest)
        except (ApiError, ApiTransportError) as error:
            # A namesake (a one-in-14-million draw) included: the next decision tries again.
            await self._create_failed(error)
            return False
        # Known at once, so the next decision counts it (the watch event follows).
        self._host_created(obj)
        if template.workload is None:
            return True
        host = HostRecord.of(obj)
        self.decided_at[host.meta.name] = decided
        await self._create_workload(template.workload, host)
        return True  # the host exists either way; a refused workload is retried with back-off

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

    async def _create_failed(self, error: BaseException) -> None:
        state = self.state
        log.warning("%s/%s: could not create a host: %s", state.namespace, state.name, error)
        self.services.events.post(
            self._pool_body(), "HostPool", "ScaleUpFailed", str(error), "Warning"
        )
        await asyncio.sleep(2)

    # -------------------------------------------------------------- workloads

    def template(self) -> WorkloadTemplate | None:
        spec = self.state.spec
        if spec is None or spec.scaling is None:
            return None
        return spec.scaling.host_template.workload

    def workload_failure(self) -> tuple[bool, str, str] | None:
        """The pool's WorkloadFailure condition (failing, reason, message); None without a
        workload template."""
        template = self.template()
        if template is None:
            return None
        if self.watch_error is not None:
            return True, "WatchFailed", self.watch_error
        if self.refused is not None:
            return True, *self.refused
        return False, "WorkloadsCreated", f"{template.kind} workloads are created with new hosts"

    def hosts_without_workload(self) -> list[HostRecord]:
        """Hosts the operator created whose workload (of the template's kind) is known not
        to exist, or has ended and is the operator's own: it makes them again."""
        template = self.template()
        if template is None:
            return []
        state = self.state
        missing = []
        for host in state.hosts.values():
            ref = host.spec.workload_ref if host.spec is not None else None
            if (
                ref is None
                or not host.managed
                or host.meta.name in state.removing
                or host.meta.name not in state.workloads
                or (ref.api_version, ref.kind) != (template.api_version, template.kind)
            ):
                continue
            workload = state.workloads[host.meta.name]
            if workload is None or (workload.terminal and workload.owner_host_uid == host.meta.uid):
                missing.append(host)
        return missing

    async def _keep_workloads(self, hosts: list[HostRecord]) -> None:
        template = self.template()
        state = self.state
        if template is None:
            return
        for host in hosts:
            workload = state.workloads.get(host.meta.name)
            if workload is not None:
                # Ended for good (a failed pod): ours to remove; the watch reports it gone,
                # and the next pass creates the new one.
                try:
                    await self.services.client.delete(
                        await self._plural(template),
                        state.namespace,
                        workload.name,
                        uid=workload.uid,
                        api_version=template.api_version,
                    )
                except (ApiError, ApiTransportError) as error:
                    log.warning("%s: could not remove ended workload: %s", host.meta.name, error)
                continue
            if await self._create_workload(template, host):
                message = f"created {template.kind} {host.meta.name!r} again (it was missing)"
                log.info("%s/%s: %s", state.namespace, host.meta.name, message)
                self.services.events.post(
                    host.body, "SessionHost", "WorkloadRecreated", message, "Normal"
                )
            else:
                break
        self._wake()

    async def _plural(self, template: WorkloadTemplate) -> str:
        try:
            found = await self.services.workload_resource(template.api_version, template.kind)
        except (ApiError, ApiTransportError) as error:
            log.warning("discovery of %s %s failed: %s", template.api_version, template.kind, error)
            return ""
        return found or ""

    async def _create_workload(self, template: WorkloadTemplate, host: HostRecord) -> bool:
        """Create the host's workload. False when it was refused (reported, backing off)."""
        state = self.state
        plural = await self._plural(template)
        if not plural:
            served = f"{template.api_version} {template.kind} is not served by the API server"
            self._refuse("KindNotServed", served)
            return False
        manifest = workload_manifest(
            template,
            host=host.meta.name,
            host_uid=host.meta.uid,
            namespace=state.namespace,
            pool=state.name,
        )
        try:
            obj = await self.services.client.create(
                plural, state.namespace, manifest, api_version=template.api_version
            )
        except ApiError as error:
            if error.conflict and await self._ours_already(template, plural, host):
                return True  # created by an earlier try whose answer was lost
            self._refuse("FailedCreate", f"{template.kind} {host.meta.name!r}: {error.message}")
            return False
        except ApiTransportError as error:
            log.warning("%s/%s: workload not created: %s", state.namespace, host.meta.name, error)
            self._retry_at = time.monotonic() + RETRY_FIRST
            return False
        # Known at once, so no pass takes it for missing before the watch event arrives.
        self._workload_created(host.meta.name, WorkloadRecord.of(obj, template.kind))
        if self.refused is not None:
            self.refused = None
            self._mark_dirty()
        self._backoff = RETRY_FIRST
        self._retry_at = 0.0
        return True

    async def _ours_already(
        self, template: WorkloadTemplate, plural: str, host: HostRecord
    ) -> bool:
        """A workload of the host's name exists: is it the one this host controls?"""
        try:
            obj = await self.services.client.get(
                plural, self.state.namespace, host.meta.name, api_version=template.api_version
            )
        except (ApiError, ApiTransportError):
            return False
        record = WorkloadRecord.of(obj, template.kind)
        if record.owner_host_uid != host.meta.uid:
            return False
        self._workload_created(host.meta.name, record)
        return True

    def _refuse(self, reason: str, message: str) -> None:
        """The API server refused a workload: the pool says so, and the next try waits."""
        state = self.state
        self._retry_at = time.monotonic() + self._backoff
        log.warning(
            "%s/%s: %s; next try in %.0fs", state.namespace, state.name, message, self._backoff
        )
        self._backoff = min(self._backoff * 2, RETRY_MAX)
        if self.refused != (reason, message):
            self.refused = (reason, message)
            self.services.events.post(
                self._pool_body(), "HostPool", "WorkloadCreateFailed", message, "Warning"
            )
            self._mark_dirty()

    def workload_ready(self, host: str) -> None:
        """A host's workload is Ready: if the operator added the host, how long it took."""
        decided = self.decided_at.pop(host, None)
        if decided is None:
            return
        seconds = time.monotonic() - decided
        state = self.state
        self.services.metrics.host_started(state.namespace, state.name, seconds)
        log.info(
            "%s/%s: host %s ready %.2fs after the scale-up decision",
            state.namespace,
            state.name,
            host,
            seconds,
        )

    def forget(self, host: str) -> None:
        self.decided_at.pop(host, None)

    def template_changed(self) -> None:
        """A new template may be good: try again at once."""
        self.refused = None
        self._retry_at = 0.0
        self._backoff = RETRY_FIRST

    def retry_in(self, clock: float) -> float | None:
        """Seconds until a held-back workload creation may be tried (for the loop's timer)."""
        if self.hosts_without_workload() or self.refused is not None:
            return max(0.0, self._retry_at - clock)
        return None

    def _report(self, direction: str, hosts: int, reason: str, message: str) -> None:
        """Hosts were added or removed: the metric, a log line and an Event on the pool."""
        state = self.state
        self.services.metrics.scaled(state.namespace, state.name, direction, hosts)
        log.info("%s/%s: %s", state.namespace, state.name, message)
        self.services.events.post(self._pool_body(), "HostPool", reason, message, "Normal")
