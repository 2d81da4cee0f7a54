"""Keeping a workload under every host the operator created: creating it with the host,
creating it again when it is lost, and reporting (with back-off) when the API server refuses
it.

A workload the API server refuses (a bad template, a kind it does not serve, a forbidden
resource) is reported on the pool (condition WorkloadFailure, a Warning Event) and tried
again after 5 s, 10 s, ... up to 5 minutes, never in a tight loop. The operator only ever
deletes a workload it created, and only one that has ended (a failed Pod), to make it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...api import Clipboard
from ...api.vocabulary import HOST_LABEL, HOSTS, TEMPLATE_REVISION_LABEL
from ...api.workload import VolumeClaimTemplate, WorkloadTemplate
from ...engine.personal import NO_WORKLOAD
from ...engine.pool_state import PoolState
from ...engine.records import HostRecord
from ...engine.workloads import (
    CLIPBOARD_ENV,
    WorkloadRecord,
    claim_manifests,
    workload_manifest,
)
from ...kube.backoff import Backoff
from ...kube.errors import ApiError, ApiTransportError
from ..deps import Deps

log = logging.getLogger(__name__)

#: Where a host's PersistentVolumeClaims are made (the core group's plural).
CLAIMS = "persistentvolumeclaims"

#: Back-off of workload creation after a refusal: first wait, then doubled up to the max.
RETRY_FIRST = 5.0
RETRY_MAX = 300.0


class WorkloadKeeper:
    """One pool's workloads: what is missing, creating it, and the WorkloadFailure state."""

    def __init__(
        self,
        state: PoolState,
        deps: Deps,
        workload_created: Callable[[str, WorkloadRecord], None],
        wake: Callable[[], None],
        mark_dirty: Callable[[], None],
        host_changed: Callable[[Mapping[str, Any]], None] = lambda obj: None,
    ) -> None:
        self.state = state
        self.deps = deps
        self._workload_created = workload_created
        self._host_changed = host_changed
        self._wake = wake
        self._mark_dirty = mark_dirty
        #: Why workloads cannot be created (reason, message); None: they can.
        self.refused: tuple[str, str] | None = None
        #: Why the workload kind cannot be watched (set by the controller); None: it can.
        self.watch_error: str | None = None
        self._retry_at = 0.0  # monotonic: no workload creation before this
        self._backoff = Backoff(first=RETRY_FIRST, cap=RETRY_MAX)
        #: Hosts added and not Ready yet: the monotonic time of the decision that made them.
        self.decided_at: dict[str, float] = {}
        #: The uid of the ended workload deleted for each host (until the watch says so).
        self._deleted: dict[str, str] = {}

    def _pool_body(self) -> dict[str, Any]:
        return self.state.pool.body if self.state.pool is not None else {}

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
                or host.meta.name in state.power_off  # stopped on purpose
                or state.personal.data_step(host.meta.name) in NO_WORKLOAD
                or host.meta.name not in state.workloads
                or (ref.api_version, ref.kind) != (template.api_version, template.kind)
            ):
                continue
            workload = state.workloads[host.meta.name]
            if workload is None or (
                workload.terminal
                and workload.owner_host_uid == host.meta.uid
                and self._deleted.get(host.meta.name) != workload.uid
            ):
                missing.append(host)
        return missing

    async def keep(self, hosts: list[HostRecord]) -> None:
        """Make the workloads of these hosts again (an ended one of ours is removed first)."""
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
                    await self.deps.client.delete(
                        await self._plural(template),
                        state.namespace,
                        workload.name,
                        uid=workload.uid,
                        api_version=template.api_version,
                    )
                    self._deleted[host.meta.name] = workload.uid
                except ApiError as error:
                    if error.not_found:
                        self._deleted[host.meta.name] = workload.uid  # gone already
                    else:
                        log.warning(
                            "%s: could not remove ended workload: %s", host.meta.name, error
                        )
                except ApiTransportError as error:
                    log.warning("%s: could not remove ended workload: %s", host.meta.name, error)
                continue
            if await self._create_workload(template, host):
                message = f"created {template.kind} {host.meta.name!r} again (it was missing)"
                log.info("%s/%s: %s", state.namespace, host.meta.name, message)
                self.deps.events.post(
                    host.body, "SessionHost", "WorkloadRecreated", message, "Normal"
                )
            else:
                break
        self._wake()

    def _clipboard(self) -> Clipboard:
        """The pool's clipboard, for the host to follow (its properties' off counts too)."""
        spec = self.state.spec
        connection = spec.connection if spec is not None else None
        on = connection is None or connection.clipboard_allowed
        return Clipboard.ENABLED if on else Clipboard.DISABLED

    async def _plural(self, template: WorkloadTemplate) -> str:
        try:
            found = await self.deps.workload_resource(template.api_version, template.kind)
        except (ApiError, ApiTransportError) as error:
            log.warning("discovery of %s %s failed: %s", template.api_version, template.kind, error)
            return ""
        return found or ""

    async def create_for(
        self, template: WorkloadTemplate, host: HostRecord, decided: float
    ) -> None:
        """The workload of a host just added by a scale-up decision made at ``decided``."""
        self.decided_at[host.meta.name] = decided
        await self._create_workload(template, host)

    async def _create_workload(self, template: WorkloadTemplate, host: HostRecord) -> bool:
        """Create the host's workload. False when it was refused (reported, backing off)."""
        state = self.state
        plural = await self._plural(template)
        if not plural:
            served = f"{template.api_version} {template.kind} is not served by the API server"
            self._refuse("KindNotServed", served)
            return False
        claims = self.claim_templates()
        if claims and not await self._make_claims(claims, host):
            return False
        manifest = workload_manifest(
            template,
            host=host.meta.name,
            host_uid=host.meta.uid,
            namespace=state.namespace,
            pool=state.name,
            claims=claims,
            env={CLIPBOARD_ENV: str(self._clipboard())},
        )
        try:
            obj = await self.deps.client.create(
                plural, state.namespace, manifest, api_version=template.api_version
            )
        except ApiError as error:
            found = await self._existing(template, plural, host) if error.conflict else None
            if found == "ours":
                return True  # created by an earlier try whose answer was lost
            if found == "leaving":
                # A former host's workload of the same name, still being deleted: it goes,
                # then this one is made (not a refusal of the template).
                log.info("%s/%s: waiting for the former %s of this name to go",
                         state.namespace, host.meta.name, template.kind)  # fmt: skip
                self._retry_at = time.monotonic() + self._backoff.next()
                return False
            self._refuse("FailedCreate", f"{template.kind} {host.meta.name!r}: {error.message}")
            return False
        except ApiTransportError as error:
            log.warning("%s/%s: workload not created: %s", state.namespace, host.meta.name, error)
            self._retry_at = time.monotonic() + self._backoff.next()
            return False
        # Known at once, so no pass takes it for missing before the watch event arrives.
        self._workload_created(host.meta.name, WorkloadRecord.of(obj, template.kind))
        await self._made_from_current(host)
        if self.refused is not None:
            self.refused = None
            self._mark_dirty()
        self._backoff.reset()
        self._retry_at = 0.0
        return True

    async def _made_from_current(self, host: HostRecord) -> None:
        """A workload made (again) from the current template makes its host the current
        revision's: an image update has nothing left to replace there (a Pod that was
        missing, a personal host started again)."""
        state = self.state
        revision = state.revision
        if revision is None or host.meta.labels.get(TEMPLATE_REVISION_LABEL) == revision:
            return
        body = {"metadata": {"labels": {TEMPLATE_REVISION_LABEL: revision}}}
        try:
            obj = await self.deps.client.patch(HOSTS, state.namespace, host.meta.name, body)
        except (ApiError, ApiTransportError) as error:
            log.warning("%s/%s: revision label not written: %s", state.namespace,
                        host.meta.name, error)  # fmt: skip
            return
        self._host_changed(obj)

    def claim_templates(self) -> list[VolumeClaimTemplate]:
        spec = self.state.spec
        if spec is None or spec.scaling is None:
            return []
        return spec.scaling.host_template.volume_claim_templates or []

    async def _make_claims(self, claims: list[VolumeClaimTemplate], host: HostRecord) -> bool:
        """The host's claims, before its workload: made once, found again after a stop (a
        claim of that name is the host's; False when one was refused, reported)."""
        state = self.state
        for manifest in claim_manifests(
            claims,
            host=host.meta.name,
            host_uid=host.meta.uid,
            namespace=state.namespace,
            pool=state.name,
        ):
            name = manifest["metadata"]["name"]
            try:
                await self.deps.client.create(CLAIMS, state.namespace, manifest, api_version="v1")
            except ApiError as error:
                if not error.conflict:
                    self._refuse("FailedCreate", f"PersistentVolumeClaim {name!r}: {error.message}")
                    return False
                # Made before (a stopped host's, kept: its data is there), but only if this
                # host controls it: a namesake of anyone else's is never mounted.
                try:
                    holder = await self._claim_holder(name)
                except (ApiError, ApiTransportError) as unread:
                    # Not known whose it is (the API away, or it went meanwhile): asked
                    # again later, never called someone else's.
                    log.warning(
                        "%s/%s: the existing claim was not read: %s", state.namespace, name, unread
                    )
                    self._retry_at = time.monotonic() + self._backoff.next()
                    return False
                if holder != host.meta.uid:
                    whose = "no SessionHost" if holder is None else f"SessionHost uid {holder}"
                    self._refuse(
                        "ClaimNotOwned",
                        f"PersistentVolumeClaim {name!r} exists and is controlled by {whose}, "
                        f"not by host {host.meta.name}: it is not mounted",
                    )
                    return False
                continue
            except ApiTransportError as error:
                log.warning("%s/%s: claim not created: %s", state.namespace, name, error)
                self._retry_at = time.monotonic() + self._backoff.next()
                return False
            log.info("%s/%s: created PersistentVolumeClaim %s", state.namespace, state.name, name)
        return True

    async def _claim_holder(self, name: str) -> str | None:
        """The uid of the SessionHost that controls claim ``name`` (None: none does); raises
        when it cannot be read."""
        obj = await self.deps.client.get(CLAIMS, self.state.namespace, name, api_version="v1")
        return WorkloadRecord.of(obj, "PersistentVolumeClaim").owner_host_uid

    async def _existing(
        self, template: WorkloadTemplate, plural: str, host: HostRecord
    ) -> str | None:
        """A workload of the host's name exists: "ours" (the one this host controls),
        "leaving" (another's, being deleted) or None (another's, staying)."""
        try:
            obj = await self.deps.client.get(
                plural, self.state.namespace, host.meta.name, api_version=template.api_version
            )
        except (ApiError, ApiTransportError):
            return None
        record = WorkloadRecord.of(obj, template.kind)
        if record.owner_host_uid != host.meta.uid:
            leaving = (obj.get("metadata") or {}).get("deletionTimestamp")
            return "leaving" if leaving else None
        self._workload_created(host.meta.name, record)
        return "ours"

    async def start(self, host: HostRecord) -> None:
        """Make a stopped personal host's workload again (its volumes are there)."""
        template = self.template()
        if template is None or self.state.personal.data_step(host.meta.name) in NO_WORKLOAD:
            return
        self.decided_at[host.meta.name] = time.monotonic()
        await self._create_workload(template, host)
        self._wake()

    async def delete_files(self, host: HostRecord, deleted: set[str]) -> list[str]:
        """One round of deleting a personal host's files: its workload and its volume claims,
        only those this host controls (by uid), each deleted once. Returns those still there
        (being deleted; empty: all gone); adds what it deleted to ``deleted``. API errors
        are raised: the caller tries again."""
        left = []
        ref = host.spec.workload_ref if host.spec is not None else None
        if ref is not None:
            plural = await self.deps.workload_resource(ref.api_version, ref.kind)
            if plural and await self._delete_own(plural, ref.name, host, ref.api_version, ref.kind):
                left.append(f"{ref.kind} {ref.name}")
                deleted.add(f"{ref.kind} {ref.name}")
        # Every claim of this host, whatever the template makes now: one made by a template
        # since removed holds the former user's files too.
        claims = await self.deps.client.list(
            CLAIMS,
            self.state.namespace,
            api_version="v1",
            label_selector=f"{HOST_LABEL}={host.meta.name}",
        )
        for claim in claims["items"]:
            name = str(claim.get("metadata", {}).get("name", ""))
            if await self._delete_own(CLAIMS, name, host, "v1", "PersistentVolumeClaim", claim):
                left.append(f"PersistentVolumeClaim {name}")
                deleted.add(f"PersistentVolumeClaim {name}")
        return left

    async def _delete_own(
        self,
        plural: str,
        name: str,
        host: HostRecord,
        api_version: str,
        kind: str,
        obj: dict[str, Any] | None = None,
    ) -> bool:
        """Delete the object if this host controls it and its deletion has not begun. True
        while it is still there (a claim stays until no Pod uses it)."""
        if obj is None:
            try:
                obj = await self.deps.client.get(
                    plural, self.state.namespace, name, api_version=api_version
                )
            except ApiError as error:
                if error.not_found:
                    return False
                raise
        record = WorkloadRecord.of(obj, kind)
        if record.owner_host_uid != host.meta.uid:
            return False  # not this host's: not its user's files, and never ours to delete
        if not obj.get("metadata", {}).get("deletionTimestamp"):
            try:
                await self.deps.client.delete(
                    plural, self.state.namespace, name, uid=record.uid, api_version=api_version
                )
            except ApiError as error:
                if error.not_found:
                    return False
                raise
            log.info("%s/%s: deleting %s %s", self.state.namespace, host.meta.name, kind, name)
        return True

    async def stop(self, host: HostRecord, workload: WorkloadRecord | None) -> None:
        """Delete a personal host's workload (the operator's own, by uid); its volumes,
        owned by the host, stay."""
        await self._delete_workload(host, workload, "stop")

    async def remake(self, host: HostRecord, workload: WorkloadRecord | None) -> bool:
        """An image update of a personal host: its workload deleted (its volumes stay) and,
        as for any missing workload of a running host, made again from the current template.
        True when the deletion was accepted."""
        return await self._delete_workload(host, workload, "make again")

    async def _delete_workload(
        self, host: HostRecord, workload: WorkloadRecord | None, why: str
    ) -> bool:
        template = self.template()
        if template is None or workload is None or workload.owner_host_uid != host.meta.uid:
            return False
        try:
            await self.deps.client.delete(
                await self._plural(template),
                self.state.namespace,
                workload.name,
                uid=workload.uid,
                api_version=template.api_version,
            )
        except ApiError as error:
            if not error.not_found:
                log.warning("%s: could not %s: %s", host.meta.name, why, error)
            return False
        except ApiTransportError as error:
            log.warning("%s: could not %s: %s", host.meta.name, why, error)
            return False
        return True

    def _refuse(self, reason: str, message: str) -> None:
        """The API server refused a workload: the pool says so, and the next try waits."""
        state = self.state
        wait = self._backoff.next()
        self._retry_at = time.monotonic() + wait
        log.warning("%s/%s: %s; next try in %.0fs", state.namespace, state.name, message, wait)
        if self.refused != (reason, message):
            self.refused = (reason, message)
            self.deps.events.post(
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
        self.deps.metrics.host_started(state.namespace, state.name, seconds)
        log.info(
            "%s/%s: host %s ready %.2fs after the scale-up decision",
            state.namespace,
            state.name,
            host,
            seconds,
        )

    def forget(self, host: str) -> None:
        self.decided_at.pop(host, None)
        self._deleted.pop(host, None)

    def template_changed(self) -> None:
        """A new template may be good: try again at once."""
        self.refused = None
        self._retry_at = 0.0
        self._backoff.reset()

    def may_try(self, clock: float) -> bool:
        """Workload creation is not held back by a refusal's back-off."""
        return clock >= self._retry_at

    def retry_in(self, clock: float) -> float | None:
        """Seconds until a held-back workload creation may be tried (for the loop's timer)."""
        if self.hosts_without_workload() or self.refused is not None:
            return max(0.0, self._retry_at - clock)
        return None
