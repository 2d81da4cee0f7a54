"""Watching the workloads behind hosts: one informer per workload kind the pools use.

A kind is watched from the moment a pool's template or a host's workloadRef names it: its
resource is found by API discovery, listed in each of the operator's namespaces, then
watched (no polling), with the same lean informer as hosts and requests. Until a kind has
been listed, the workloads of that kind are "not observed yet", never "missing", so a slow
start can never make the operator believe a machine is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..engine.workloads import KindKey, WorkloadKey, WorkloadRecord, kind_key
from ..kube.backoff import Backoff
from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError
from ..kube.informer import Informer, SkipHandler
from .deps import Spawn, Supervise

log = logging.getLogger(__name__)

#: Waits between attempts to discover or list a kind that failed (forbidden, not served).
RETRY_FIRST = 5.0
RETRY_MAX = 300.0


@dataclass
class _Kind:
    api_version: str
    kind: str
    plural: str | None = None
    synced: bool = False
    discovered: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class WorkloadWatch:
    """The workloads of every kind in use, kept current, and who to tell when they change."""

    def __init__(
        self,
        client: KubeClient,
        spawn: Spawn,
        *,
        supervise: Supervise,
        on_skip: SkipHandler | None = None,
        on_event: Callable[[WorkloadKey, WorkloadRecord | None], None],
        on_synced: Callable[[KindKey], None],
        on_error: Callable[[KindKey, str | None], None],
    ) -> None:
        self.client = client
        self.spawn = spawn
        self.supervise = supervise
        self.on_skip = on_skip
        self.scopes: list[str | None] = [None]
        self.on_event = on_event
        self.on_synced = on_synced
        self.on_error = on_error
        self.kinds: dict[KindKey, _Kind] = {}
        self.cache: dict[WorkloadKey, WorkloadRecord] = {}

    def synced(self, key: KindKey) -> bool:
        entry = self.kinds.get(key)
        return entry is not None and entry.synced

    def get(self, key: WorkloadKey) -> WorkloadRecord | None:
        return self.cache.get(key)

    def want(self, api_version: str, kind: str) -> None:
        """Watch this kind from now on (in the background)."""
        key = kind_key(api_version, kind)
        if key not in self.kinds:
            entry = self.kinds[key] = _Kind(api_version, kind)
            entry.task = self.supervise(
                f"workloads {api_version} {kind}", "workload_watch", lambda: self._run(entry)
            )

    async def ensure(self, api_version: str, kind: str, timeout: float = 30.0) -> None:
        """Watch this kind, and wait (at most ``timeout``) until it has been listed."""
        self.want(api_version, kind)
        entry = self.kinds[kind_key(api_version, kind)]
        deadline = asyncio.get_running_loop().time() + timeout
        while not entry.synced and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)

    async def resource(self, api_version: str, kind: str) -> str | None:
        """The plural serving the kind (discovered once; None: not served)."""
        self.want(api_version, kind)
        entry = self.kinds[kind_key(api_version, kind)]
        if entry.plural is None:
            entry.plural = await self._discover(entry)
        return entry.plural

    async def _discover(self, entry: _Kind) -> str | None:
        try:
            resources = await self.client.resources(entry.api_version)
        except ApiError as error:
            if error.not_found:
                return None
            raise
        for resource in resources:
            name = str(resource.get("name", ""))
            if resource.get("kind") == entry.kind and "/" not in name:
                return name if resource.get("namespaced", True) else None
        return None

    async def _run(self, entry: _Kind) -> None:
        key = kind_key(entry.api_version, entry.kind)
        what = f"{entry.api_version} {entry.kind}"
        backoff = Backoff(first=RETRY_FIRST, cap=RETRY_MAX)
        while True:
            try:
                if entry.plural is None:
                    entry.plural = await self._discover(entry)
                if entry.plural is None:
                    raise LookupError(f"{what} is not served by the API server")
                informers = [
                    Informer(
                        self.client,
                        entry.plural,
                        scope,
                        self._handler(entry),
                        api_version=entry.api_version,
                        on_skip=self.on_skip,
                    )
                    for scope in self.scopes
                ]
                for informer in informers:
                    await informer.list_once()
                break
            except asyncio.CancelledError:
                raise
            except (ApiError, ApiTransportError, LookupError) as error:
                message = error.message if isinstance(error, ApiError) else str(error)
                wait = backoff.next()
                log.warning("cannot watch %s (%s); trying again in %.0fs", what, message, wait)
                self.on_error(key, f"cannot watch {what}: {message}")
                await asyncio.sleep(wait)
        entry.synced = True
        log.info("watching %s (%s)", what, entry.plural)
        self.on_error(key, None)
        self.on_synced(key)
        await asyncio.gather(*(informer.run() for informer in informers))

    def _handler(self, entry: _Kind) -> Callable[[str, dict[str, Any]], None]:
        group = kind_key(entry.api_version, entry.kind)[0]

        def handle(event: str, obj: dict[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace", "")), group, entry.kind, str(meta.get("name", "")))
            if event == "DELETED":
                self.cache.pop(key, None)
                self.on_event(key, None)
                return
            record = WorkloadRecord.of(obj, entry.kind)
            self.cache[key] = record
            self.on_event(key, record)

        return handle
