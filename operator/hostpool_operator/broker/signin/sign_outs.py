"""Sign-out that holds in every replica: the ended portal sessions, shared through one
ConfigMap, and what waits on them (the browser desktops and event streams a session opened).

Ending a session (``end``) takes effect in this replica at once and is written to the
ConfigMap with a merge patch that adds one key (replicas ending sessions at once never undo
each other's); every replica reads the ConfigMap again each :attr:`SignOuts.interval`
seconds, so a cookie copied before sign-out is refused everywhere within that, and a desktop
the session opened on another replica ends within it too. Records past their session's own
end are dropped (a merge patch of nulls) by whichever replica notices first.

Without a client (tests of one replica) the record is this replica's alone."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ...access import sign_outs
from ...kube.client import KubeClient
from ...kube.errors import ApiError, ApiTransportError

log = logging.getLogger(__name__)

CONFIGMAPS = "configmaps"
LABEL = "hostpool.io/portal-sign-outs"
#: Seconds between two reads of the shared record.
INTERVAL = 3.0
#: Seconds between two clean-ups of records past their session's end.
PRUNE_EVERY = 300.0


@dataclass(frozen=True)
class SharedRecord:
    """Where the replicas keep the ended sessions: a ConfigMap in a namespace."""

    client: KubeClient
    namespace: str
    name: str


@dataclass
class SignOuts:
    """The ended sessions this replica knows of, and the waiters on each live one."""

    shared: SharedRecord | None = None
    interval: float = INTERVAL
    ended: dict[str, int] = field(default_factory=dict)
    _waiters: dict[str, set[Callable[[], None]]] = field(default_factory=dict)
    _pruned: float = 0.0
    _failing: bool = False

    def is_ended(self, sid: str) -> bool:
        return sid in self.ended

    def on_end(self, sid: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (once) when session ``sid`` ends; returns the function that
        stops waiting. Called at once when it has ended already."""
        if sid in self.ended:
            callback()
            return lambda: None
        self._waiters.setdefault(sid, set()).add(callback)

        def forget() -> None:
            waiting = self._waiters.get(sid)
            if waiting is not None:
                waiting.discard(callback)
                if not waiting:
                    del self._waiters[sid]

        return forget

    async def end(self, sid: str, until: float) -> None:
        """Session ``sid`` ended (it would have lasted until ``until``): refused here now, in
        every replica once written."""
        self._ended({sid: int(until) + 1})
        if self.shared is None:
            return
        entry = {sid: str(int(until) + 1)}
        try:
            await self._patch(entry)
        except ApiError as exc:
            if not exc.not_found:
                log.warning("the sign-out is not shared with other replicas: %s", exc.message)
                return
            try:
                await self._create(entry)
            except ApiError as again:
                if again.status != 409:
                    log.warning("the sign-out is not shared: %s", again.message)
                    return
                await self._patch(entry)  # another replica made it meanwhile
        except ApiTransportError as exc:
            log.warning("the sign-out is not shared with other replicas yet: %s", exc)

    async def run(self) -> None:
        """Read the shared record every :attr:`interval` seconds, for ever."""
        if self.shared is None:
            return
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval)

    async def refresh(self) -> None:
        """Take what the shared record holds now (and drop its expired entries, now and
        then)."""
        shared = self.shared
        if shared is None:
            return
        try:
            found = await shared.client.get(
                CONFIGMAPS, shared.namespace, shared.name, api_version="v1"
            )
        except ApiError as exc:
            if not exc.not_found:
                self._failed(exc.message)
            return
        except ApiTransportError as exc:
            self._failed(str(exc))
            return
        if self._failing:
            log.info("reading the shared sign-outs again")
            self._failing = False
        recorded = sign_outs.read(found.get("data"))
        self._ended(recorded)
        now = time.time()
        if now - self._pruned >= PRUNE_EVERY:
            self._pruned = now
            await self._prune(sign_outs.expired(recorded, now))

    def _ended(self, recorded: dict[str, int]) -> None:
        now = time.time()
        for sid in sign_outs.expired(self.ended, now):
            del self.ended[sid]
        for sid, until in recorded.items():
            if until > now and sid not in self.ended:
                self.ended[sid] = until
                for callback in self._waiters.pop(sid, ()):
                    callback()

    def _failed(self, why: str) -> None:
        if not self._failing:
            log.warning("cannot read the shared sign-outs (other replicas' sign-outs): %s", why)
            self._failing = True

    async def _prune(self, gone: list[str]) -> None:
        if not gone:
            return
        try:
            await self._patch(dict.fromkeys(gone))
        except (ApiError, ApiTransportError) as exc:
            log.info("the expired sign-outs were not dropped: %s", exc)

    async def _patch(self, data: Mapping[str, str | None]) -> None:
        shared = self.shared
        assert shared is not None
        await shared.client.patch(
            CONFIGMAPS, shared.namespace, shared.name, {"data": data}, api_version="v1"
        )

    async def _create(self, data: dict[str, str]) -> None:
        shared = self.shared
        assert shared is not None
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": shared.name, "labels": {LABEL: "true"}},
            "data": data,
        }
        await shared.client.create(CONFIGMAPS, shared.namespace, body, api_version="v1")


__all__ = ["INTERVAL", "SharedRecord", "SignOuts"]
