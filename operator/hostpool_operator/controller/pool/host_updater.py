"""Carrying out a pool's image update (``rollout``): the hosts made before revisions were
labelled are adopted, outdated hosts get their replacements (the ``replaced-by`` mark first,
then the new host from the pool's HostScaler), empty ones are deleted, ForceLogoff drains
and logs off, and a failed canary's hosts are closed. The Events say what happened.

Like scaling, one change at a time per pool, and every decision is read back from the
cluster, so an operator that restarts (or a standby that takes over) carries on from there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ...api.timestamps import rfc3339
from ...api.update import UpdatePhase
from ...api.vocabulary import (
    HOSTS,
    POOL_LABEL,
    REPLACED_BY_ANNOTATION,
    REPLACED_FOR_ANNOTATION,
    REQUESTS,
    TEMPLATE_REVISION_LABEL,
    UPDATE_DRAINED_ANNOTATION,
)
from ...engine.pool_state import PoolState
from ...kube.errors import ApiError, ApiTransportError
from ...rollout import history as kept
from ...rollout import pool as rollout_pool
from ...rollout.step import RolloutStep
from ..deps import Deps
from .host_scaler import HostScaler, host_name

log = logging.getLogger(__name__)

#: The Event each phase an update enters is announced with (Normal, except Failed).
PHASE_EVENTS = {
    UpdatePhase.PROGRESSING: "UpdateStarted",
    UpdatePhase.PAUSED: "UpdatePaused",
    UpdatePhase.COMPLETE: "UpdateComplete",
    UpdatePhase.FAILED: "UpdateFailed",
}


class HostUpdater:
    """One pool's update actuator, and what its status.update says."""

    def __init__(
        self,
        state: PoolState,
        deps: Deps,
        scaler: HostScaler,
        host_changed: Callable[[Mapping[str, Any]], None],
        request_changed: Callable[[Mapping[str, Any]], None],
        wake: Callable[[], None],
        mark_dirty: Callable[[], None],
    ) -> None:
        self.state = state
        self.deps = deps
        self.scaler = scaler
        self._host_changed = host_changed
        self._request_changed = request_changed
        self._wake = wake
        self._mark_dirty = mark_dirty
        self.task: asyncio.Task[None] | None = None
        #: The last step decided (None: the pool has no template).
        self.step: RolloutStep | None = None
        #: (phase, revision) last announced with an Event.
        self._announced: tuple[UpdatePhase | None, str | None] | None = None
        #: Logoffs written and not seen stored yet.
        self._logoffs_sent: set[str] = set()
        #: The revision last kept as a ControllerRevision by this operator.
        self._recorded: str | None = None
        #: The replacement names marked in this step (a host deleted first keeps its own).
        self._marked: dict[str, str] = {}
        #: (revision, the API server's words) when it refused that revision's host or workload.
        self.refused: tuple[str | None, str] | None = None

    @property
    def busy(self) -> bool:
        return self.task is not None and not self.task.done()

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def wake_at(self) -> datetime | None:
        return self.step.wake_at if self.step is not None else None

    # -------------------------------------------------------------- deciding

    def update(self, now: datetime) -> None:
        """Decide the update's step and start its writes (in a task of their own)."""
        state = self.state
        if self.busy or state.views.balancer is None:
            return
        step = rollout_pool.step(state, now)
        if step is not None and self.refused is not None and self.refused[0] == state.revision:
            step = RolloutStep(
                UpdatePhase.FAILED, step.updated, step.outdated, self.refused[1],
                bounds=step.bounds,
            )  # fmt: skip
        if step != self.step:
            self.step = step
            self._mark_dirty()
        self._announce(step)
        record = self._unrecorded()
        if step is None or (step.phase is None and not record and not self._unlabelled()):
            return
        logoffs: list[rollout_pool.UpdateLogoff] = []
        if self._logoffs_sent or step.phase is UpdatePhase.PROGRESSING:
            # Those seen stored are dropped (a scan of the requests: only while it matters).
            self._logoffs_sent = {
                n for n in self._logoffs_sent if (r := state.requests.get(n)) and not r.logoff
            }
            logoffs = rollout_pool.update_logoffs(state, self._logoffs_sent)
        acts = (
            step.replace or step.delete or step.drain or step.close or step.remake
            or step.relabel or logoffs
        )  # fmt: skip
        if acts or record or self._unlabelled():
            self.task = self.deps.spawn(self._apply(step, logoffs, record))

    def status(self) -> dict[str, Any] | None:
        """``status.update`` (None: nothing to say, the pool has no template)."""
        step = self.step
        if step is None or self.state.revision is None:
            return None
        # The revision is named once it is kept as a ControllerRevision (so a restart that
        # reads it there knows it is kept); until then, for a moment, the one before.
        stored = rollout_pool.history(self.state).revision
        revision = self.state.revision if self._recorded == self.state.revision else stored
        body: dict[str, Any] = {
            "updatedHosts": step.updated,
            "outdatedHosts": step.outdated,
            "message": step.message,
        }
        if revision is not None:
            body["revision"] = revision
        if step.phase is not None:
            body["phase"] = step.phase.value
        if step.canary_passed:
            body["canaryPassed"] = True
        return body

    def _announce(self, step: RolloutStep | None) -> None:
        """An Event when the update enters a phase (a new revision starts over)."""
        key = (step.phase, self.state.revision) if step is not None else (None, None)
        if key == self._announced:
            return
        first = self._announced is None
        self._announced = key
        if step is None or step.phase is None:
            return
        stored = rollout_pool.history(self.state)
        if first and (stored.phase, stored.revision) == key:
            return  # a restart (or a new leader) finding the phase announced already
        reason = PHASE_EVENTS[step.phase]
        kind = "Warning" if step.phase is UpdatePhase.FAILED else "Normal"
        message = f"revision {self.state.revision}: {step.message}"
        if step.failure is not None:
            message = f"revision {self.state.revision}: {step.failure.cause}"
        log.info("%s/%s: %s: %s", self.state.namespace, self.state.name, reason, message)
        self.deps.events.post(self._pool_body(), "HostPool", reason, message, kind)

    def _unlabelled(self) -> list[str]:
        """The operator's hosts made before revisions were labelled: adopted as the current
        revision's (so only a later template change makes them outdated)."""
        return sorted(
            name
            for name, host in self.state.hosts.items()
            if host.managed and TEMPLATE_REVISION_LABEL not in host.meta.labels
        )

    def _pool_body(self) -> dict[str, Any]:
        return self.state.pool.body if self.state.pool is not None else {}

    # -------------------------------------------------------------- writing

    def _unrecorded(self) -> bool:
        """The current template is not kept as a ControllerRevision yet, as far as the pool's
        status says (it names the revision once it is)."""
        state = self.state
        stored = rollout_pool.history(state).revision
        return state.revision is not None and state.revision not in (stored, self._recorded)

    async def _record(self) -> None:
        """Keep the current template as a ControllerRevision (an existing one of the same
        revision is kept as it is: an undo brings back its number), then prune past ten."""
        state = self.state
        spec, pool = state.spec, state.pool
        if spec is None or spec.scaling is None or pool is None or state.revision is None:
            return
        body = kept.revision_manifest(
            pool=state.name, pool_uid=pool.meta.uid, namespace=state.namespace,
            revision=state.revision, template=spec.scaling.host_template.to_api(),
            number=pool.meta.generation,
        )  # fmt: skip
        # Tried once per revision: a refusal (no RBAC for it, say) is logged, not retried
        # every pass; the update itself does not depend on it.
        self._recorded = state.revision
        self._mark_dirty()  # status.update names the revision from now on
        try:
            await self.deps.client.create(
                kept.CONTROLLER_REVISIONS, state.namespace, body, api_version=kept.APPS_V1
            )
            listing = await self.deps.client.list(
                kept.CONTROLLER_REVISIONS, state.namespace, api_version=kept.APPS_V1,
                label_selector=f"{POOL_LABEL}={state.name}",
            )  # fmt: skip
        except (ApiError, ApiTransportError) as error:
            if not (isinstance(error, ApiError) and error.conflict):  # 409: kept already
                log.warning("%s/%s: could not keep revision %s as a ControllerRevision: %s",
                            *self._key(), state.revision, error)  # fmt: skip
            return
        found = [k for obj in listing["items"] if (k := kept.KeptRevision.of(obj)) is not None]
        for name in kept.to_prune(found, state.revision):
            try:
                await self.deps.client.delete(
                    kept.CONTROLLER_REVISIONS, state.namespace, name, api_version=kept.APPS_V1
                )
            except (ApiError, ApiTransportError) as error:
                log.info("%s/%s: could not prune revision %s: %s", *self._key(), name, error)

    async def _apply(
        self, step: RolloutStep, logoffs: list[rollout_pool.UpdateLogoff], record: bool
    ) -> None:
        log.debug(
            "%s/%s: update step: replace %s, delete %s (first %s), drain %s, close %s",
            *self._key(), step.replace, step.delete, step.delete_first, step.drain, step.close,
        )  # fmt: skip
        self._marked.clear()
        try:
            if record:
                await self._record()
            for name in self._unlabelled():
                await self._patch_host(name, {"metadata": {"labels": {
                    TEMPLATE_REVISION_LABEL: self.state.revision}}})  # fmt: skip
            now = datetime.now(UTC)
            for name in (*step.drain, *step.close):
                await self._patch_host(name, {
                    "metadata": {"annotations": {UPDATE_DRAINED_ANNOTATION: rfc3339(now)}},
                    "spec": {"drainMode": True},
                })  # fmt: skip
            # Replaced at once with no room for both: the mark, the delete, then the new host.
            gone = set()
            for name in step.delete_first:
                if await self._mark(name) is not None and await self._delete(name, None):
                    gone.add(name)
            made = {}
            for name in step.replace:
                if name in step.delete_first and name not in gone:
                    continue  # it could not go first: no new host beside it
                new = await self._replace(name)
                if new is not None:
                    made[name] = new
            for name in step.delete:
                if name in gone or (name in step.replace and name not in made):
                    continue  # gone already, or its replacement was not made: it serves on
                await self._delete(name, made.get(name))
            for order in logoffs:
                await self._logoff(order)
            for name in step.relabel:
                await self._relabel(name)
            for name in step.remake:
                await self._remake(name)
        finally:
            self._wake()

    async def _patch_host(self, name: str, body: Mapping[str, Any]) -> bool:
        state = self.state
        record = state.hosts.get(name)
        if record is None:
            return False
        try:
            # No precondition: these merge patches touch only the update's own fields, and
            # the agent's status writes would make every one a conflict.
            obj = await self.deps.client.patch(HOSTS, state.namespace, name, body)
        except (ApiError, ApiTransportError) as error:
            log.warning("%s/%s: update could not patch %s: %s", *self._key(), name, error)
            return False
        self._host_changed(obj)
        return True

    async def _mark(self, name: str) -> str | None:
        """The name of the outdated host's replacement, written on it before the new host is
        made: a restart in between finds the mark and makes that host (same name), or counts
        it made. A mark naming a host of another revision (a failed one) is written anew.
        None when the mark could not be written."""
        if name in self._marked:
            return self._marked[name]
        state = self.state
        record = state.hosts.get(name)
        if record is None:
            return None
        new = rollout_pool.annotation(record, REPLACED_BY_ANNOTATION)
        made = state.hosts.get(new) if new is not None else None
        stale = (
            made.meta.labels.get(TEMPLATE_REVISION_LABEL) != state.revision
            if made is not None
            # Not made (yet): the mark holds only if it was written for this revision.
            else rollout_pool.annotation(record, REPLACED_FOR_ANNOTATION) != state.revision
        )
        if new is None or stale:
            new = host_name(state.name)
            body = {"metadata": {"annotations": {
                REPLACED_BY_ANNOTATION: new, REPLACED_FOR_ANNOTATION: state.revision}}}  # fmt: skip
            if not await self._patch_host(name, body):
                return None
        self._marked[name] = new
        return new

    async def _replace(self, name: str) -> str | None:
        """The outdated host's replacement made (after its mark)."""
        new = await self._mark(name)
        self._marked.pop(name, None)
        if new is None:
            return None
        if new in self.state.hosts:
            return new
        made = await self.scaler.create_one(time.monotonic(), name=new)
        refused = self.scaler.last_error if not made else self.scaler.workloads.refused
        if refused is not None:
            self._refuse(f"the replacement {new} of {name} was refused: {refused}")
            return new if made else None
        return new

    async def _delete(self, name: str, replacement: str | None) -> bool:
        """Delete an emptied outdated host (True once it is gone)."""
        state = self.state
        record = state.hosts.get(name)
        if record is None or state.ledger.count_on(name):
            return False  # gone already, or a session arrived since the step was decided
        state.begin_removal([name])
        try:
            await self.deps.client.delete(
                HOSTS, state.namespace, name, uid=record.meta.uid,
                resource_version=record.meta.resource_version or None,
            )  # fmt: skip
        except (ApiError, ApiTransportError) as error:
            if isinstance(error, ApiError) and error.not_found:
                return True
            log.warning("%s/%s: update could not delete %s: %s", *self._key(), name, error)
            state.abort_removal(name, datetime.now(UTC))
            return False
        replaced_by = replacement or rollout_pool.annotation(record, REPLACED_BY_ANNOTATION)
        self.deps.metrics.scaled(state.namespace, state.name, "update", 1)
        if replaced_by is None:  # an extra host an earlier update made (a failed canary)
            self._updated(f"outdated host {name} removed: an extra host of an earlier update")
        else:
            self._updated(
                f"outdated host {name} replaced by {replaced_by} (revision {state.revision})"
            )
        return True

    async def _relabel(self, name: str) -> None:
        """A stopped personal host: its workload is made from the current template when it
        starts, so it is the current revision's from now on."""
        state = self.state
        if name not in state.power_off:
            return  # started since the step was decided: made from the current template
        body = {"metadata": {"labels": {TEMPLATE_REVISION_LABEL: state.revision}}}
        if await self._patch_host(name, body):
            self._updated(f"stopped personal host {name} starts on revision {state.revision}")

    async def _remake(self, name: str) -> None:
        """An idle personal host's workload made again from the current template (its
        volume claims, its user's files, kept)."""
        state = self.state
        record = state.hosts.get(name)
        if record is None or state.ledger.count_on(name) or name in state.power_off:
            return  # a session arrived, or it stopped, since the step was decided
        workload = state.workloads.get(name)
        if workload is None or not workload.ready:
            return
        if await self.scaler.workloads.remake(record, workload):
            self._updated(
                f"idle personal host {name} made again from revision {state.revision} "
                "(its volumes kept)"
            )

    def _updated(self, message: str) -> None:
        log.info("%s/%s: %s", *self._key(), message)
        self.deps.events.post(self._pool_body(), "HostPool", "HostUpdated", message, "Normal")

    async def _logoff(self, order: rollout_pool.UpdateLogoff) -> None:
        state = self.state
        record = state.requests.get(order.request)
        if record is None:
            return
        logoff = {"message": order.message, "deadline": rfc3339(order.deadline)}
        try:
            obj = await self.deps.client.patch_status(
                REQUESTS, state.namespace, order.request, {"logoff": logoff},
                resource_version=record.meta.resource_version or None,
            )  # fmt: skip
        except (ApiError, ApiTransportError) as error:
            log.warning(
                "%s/%s: update could not log off %s: %s", *self._key(), order.request, error
            )
            return
        self._logoffs_sent.add(order.request)
        self._request_changed(obj)

    def _refuse(self, message: str) -> None:
        """The API server refused the new template (its host or its workload): the update
        stops for this revision, the outdated hosts as they are."""
        self.refused = (self.state.revision, message)
        self._mark_dirty()

    def _key(self) -> tuple[str, str]:
        return (self.state.namespace, self.state.name)
