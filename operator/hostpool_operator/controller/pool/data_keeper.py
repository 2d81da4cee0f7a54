"""A personal host's files when its user changes, by whatever client: written down as the
new user's (annotation ``hostpool.io/data-of``) before they are placed there; deleted (the
workload and the volume claims the operator made) before anyone else is given the host;
or kept for their user alone (``spec.keepData``). Decisions are ``engine.personal``'s
(``data_step``); this carries them out and tells: Event ``HostDataDeleted`` once the files
are gone, a ``HostDataKept`` Warning when a host keeping one user's files was given to
another (who is not placed there), a ``HostDataNotDeleted`` Warning while the API refuses
a deletion (the host stays held, and it is tried again)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ...api.vocabulary import DATA_OF_ANNOTATION, HOSTS
from ...engine.personal import DataStep, HostData, data_step
from ...engine.pool_state import PoolState
from ...engine.records import HostRecord
from ...kube.backoff import Backoff
from ...kube.errors import ApiError, ApiTransportError
from ..deps import Deps
from .workload_keeper import WorkloadKeeper

log = logging.getLogger(__name__)

#: Tries at one conditional write of a host while other writes (agents' statuses) race.
WRITE_ATTEMPTS = 5
#: Seconds before a write of whose the files are, that failed, is tried again.
RECORD_RETRY = 5.0


class DataKeeper:
    """One pool's personal hosts' files: the writes and deletions their steps call for."""

    def __init__(
        self,
        state: PoolState,
        deps: Deps,
        keeper: WorkloadKeeper,
        host_changed: Callable[[Mapping[str, Any]], None],
        wake: Callable[[], None],
        mark_dirty: Callable[[], None],
    ) -> None:
        self.state = state
        self.deps = deps
        self.keeper = keeper
        self._host_changed = host_changed
        self._wake = wake
        self._mark_dirty = mark_dirty
        #: Hosts with a write or a deletion of theirs on its way: one at a time each.
        self._busy: set[str] = set()

    def apply(self) -> None:
        state = self.state
        if state.spec is None or not state.spec.is_personal:
            return
        for name, host in list(state.hosts.items()):
            data = state.personal.host_data(host)
            if data is None or name in self._busy:
                continue
            step = data_step(data)
            if step is DataStep.RECORD and data.user is not None:
                self._busy.add(name)
                self.deps.spawn(self._record(host, data.user))
            elif step is DataStep.DELETE:
                self._busy.add(name)
                state.personal.deleting.add(name)
                self._mark_dirty()
                self.deps.spawn(self._delete(host, data.data_of))
            elif step is DataStep.REFUSE:
                self._refused(host, data)

    # -------------------------------------------------------------- whose the files are

    async def _record(self, host: HostRecord, user: str) -> None:
        """The host's files are ``user``'s from now on: written onto a version that still
        gives the host to them and says nothing of whose its files are."""
        name = host.meta.name
        try:
            written = await self._write(
                host, {"metadata": {"annotations": {DATA_OF_ANNOTATION: user}}}, expect=user
            )
            if not written:
                await asyncio.sleep(RECORD_RETRY)  # refused or changed under every try
        finally:
            self._busy.discard(name)
            self._wake()

    async def _write(self, host: HostRecord, patch: dict[str, Any], *, expect: str | None) -> bool:
        """A merge patch of the host onto the version just read, of the same host (by uid);
        with ``expect``, only while its user is ``expect`` and its files are nobody's. The
        answer goes back into the pool's state. True: nothing is left to write (written,
        changed meanwhile, or the host is gone); False: to be tried again."""
        state = self.state
        name = host.meta.name

        def decide(obj: dict[str, Any]) -> dict[str, Any] | bool:
            found = HostRecord.of(obj)
            if found.meta.uid != host.meta.uid:
                return True  # another host of that name: this one is gone, files and all
            user = found.spec.assigned_user if found.spec is not None else None
            if expect is not None and (user != expect or found.data_of is not None):
                return True  # changed meanwhile: the observed state decides again
            return patch

        try:
            answer = await self.deps.client.patch_as_read(
                HOSTS, state.namespace, name, decide, attempts=WRITE_ATTEMPTS
            )
            if isinstance(answer, dict):
                self._host_changed(answer)
            return answer is not None
        except ApiError as error:
            if error.not_found:
                return True  # the host is gone, and its claims with it
            log.warning("%s/%s: host %s not written: %s", state.namespace, state.name, name, error)
        except ApiTransportError as error:
            log.warning("%s/%s: host %s not written: %s", state.namespace, state.name, name, error)
        return False

    # -------------------------------------------------------------- deletion

    async def _delete(self, host: HostRecord, former: str | None) -> None:
        """Delete the host's workload and volume claims, wait until they are gone, then say
        the host holds nobody's files (and may be given to anyone). Tried until done, or
        until the host itself is gone; nothing else makes its workload meanwhile."""
        state = self.state
        name = host.meta.name
        whose = former or "its former user"
        log.info("%s/%s: deleting %s's files on host %s", state.namespace, state.name, whose, name)
        backoff = Backoff(first=0.2, cap=5.0)
        deleted: set[str] = set()
        done = False
        try:
            while not done:
                current = state.hosts.get(name)
                if current is None or current.meta.uid != host.meta.uid:
                    return  # the host was deleted: its claims go with it
                try:
                    left = await self.keeper.delete_files(current, deleted)
                except (ApiError, ApiTransportError) as error:
                    self._not_deleted(current, whose, error)
                    left = ["?"]
                if not left:
                    forget = {"metadata": {"annotations": {DATA_OF_ANNOTATION: None}}}
                    done = await self._write(current, forget, expect=None)
                if not done:
                    await asyncio.sleep(backoff.next())
            state.power_off.discard(name)  # a stopped host comes back empty, for anyone
            objects = ", ".join(sorted(deleted)) or "nothing left to delete"
            message = f"{whose}'s files deleted ({objects}): the host may be given to anyone"
            log.info("%s/%s: host %s: %s", state.namespace, state.name, name, message)
            self.deps.events.post(host.body, "SessionHost", "HostDataDeleted", message, "Normal")
        finally:
            state.personal.deleting.discard(name)
            state.capacity_changed = True
            self._busy.discard(name)
            self._mark_dirty()
            self._wake()

    def _not_deleted(self, host: HostRecord, whose: str, error: Exception) -> None:
        message = (
            f"{whose}'s files not deleted yet ({error}); the host is given to nobody until "
            "they are, and the deletion is tried again"
        )
        log.warning(
            "%s/%s: host %s: %s", self.state.namespace, self.state.name, host.meta.name, message
        )
        self.deps.events.post(
            host.body,
            "SessionHost",
            "HostDataNotDeleted",
            message,
            "Warning",
            once_per=("data-not-deleted", self.state.namespace, host.meta.name, str(error)),
        )

    # -------------------------------------------------------------- refusal

    def _refused(self, host: HostRecord, data: HostData) -> None:
        """Given to another user while its files are kept for their user: the new user is
        not placed there (the placement says so), and the host says why, once."""
        message = (
            f"assigned to {data.user}, but it keeps {data.data_of}'s files for them "
            f"(spec.keepData): {data.user} is not placed on it. Assign it to {data.data_of} "
            "again, or unassign it to delete the files"
        )
        self.deps.events.post(
            host.body,
            "SessionHost",
            "HostDataKept",
            message,
            "Warning",
            once_per=(
                "data-kept",
                self.state.namespace,
                host.meta.name,
                data.user or "",
                data.data_of or "",
            ),
        )
