"""Watching the workloads behind hosts: only the ones hosts stand on.

A kind is watched from the moment a pool's template or a host's workloadRef names it: its
resource is found by API discovery, then the operator lists and watches (no polling), with
the same lean informer as hosts and requests, only

* the workloads it created itself, by their label ``hostpool.io/managed-by`` (one watch per
  namespace scope), and
* each workload a user's own host refers to, by name (one watch each).

So it never keeps every Pod of its namespaces with its whole status; a kind nobody uses any
more is no longer watched and its records go. Until a watch has listed, its workloads are
"not observed yet", never "missing", so a slow start can never make the operator believe a
machine is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..api.vocabulary import MANAGED_LABEL, MANAGER
from ..engine.workloads import KindKey, WorkloadKey, WorkloadRecord, kind_key
from ..kube.backoff import Backoff
from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError
from ..kube.informer import Informer, SkipHandler
from .deps import Supervise

log = logging.getLogger(__name__)

#: Waits between attempts to discover or list a kind that failed (forbidden, not served).
RETRY_FIRST = 5.0
RETRY_MAX = 300.0


#: The label selector of the workloads the operator created.
MANAGED_SELECTOR = f"{MANAGED_LABEL}={MANAGER}"


@dataclass
class _Named:
    """The watch on one workload a user's host refers to."""

    task: asyncio.Task[None] | None = None
    synced: bool = False


@dataclass
class _Kind:
    api_version: str
    kind: str
    plural: str | None = None
    #: The operator's own workloads of this kind are watched (a template or a managed host
    #: uses the kind), and have been listed.
    labeled: bool = False
    synced: bool = False
    task: asyncio.Task[None] | None = None
    named: dict[tuple[str, str], _Named] = field(default_factory=dict)


class WorkloadWatch:
    """The workloads hosts stand on, kept current, and who to tell when they change."""

    def __init__(
        self,
        client: KubeClient,
        *,
        supervise: Supervise,
        on_skip: SkipHandler | None = None,
        on_event: Callable[[WorkloadKey, WorkloadRecord | None], None],
        on_synced: Callable[[KindKey], None],
        on_error: Callable[[KindKey, str | None], None],
        on_named_synced: Callable[[WorkloadKey], None] | None = None,
    ) -> None:
        self.client = client
        self.supervise = supervise
        self.on_skip = on_skip
        self.scopes: list[str | None] = [None]
        self.on_event = on_event
        self.on_synced = on_synced
        self.on_error = on_error
        self.on_named_synced = on_named_synced
        self.kinds: dict[KindKey, _Kind] = {}
        self.cache: dict[WorkloadKey, WorkloadRecord] = {}

    def synced(self, key: KindKey) -> bool:
        """The operator's own workloads of this kind have been listed."""
        entry = self.kinds.get(key)
        return entry is not None and entry.synced

    def named_synced(self, key: WorkloadKey) -> bool:
        """The workload of this name (a user's host refers to it) has been listed."""
        entry = self.kinds.get((key[1], key[2]))
        named = entry.named.get((key[0], key[3])) if entry is not None else None
        return named is not None and named.synced

    def get(self, key: WorkloadKey) -> WorkloadRecord | None:
        return self.cache.get(key)

    def _entry(self, api_version: str, kind: str) -> _Kind:
        key = kind_key(api_version, kind)
        entry = self.kinds.get(key)
        if entry is None:
            entry = self.kinds[key] = _Kind(api_version, kind)
        return entry

    def want(self, api_version: str, kind: str) -> None:
        """Watch the operator's own workloads of this kind from now on (in the background)."""
        entry = self._entry(api_version, kind)
        if not entry.labeled:
            entry.labeled = True
            entry.task = self.supervise(
                f"workloads {api_version} {kind}", "workload_watch", lambda: self._run(entry)
            )

    def want_named(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Watch the workload ``namespace/name`` of this kind (a user's host refers to it)."""
        entry = self._entry(api_version, kind)
        if (namespace, name) in entry.named:
            return
        named = entry.named[(namespace, name)] = _Named()
        named.task = self.supervise(
            f"workload {api_version} {kind} {namespace}/{name}",
            "workload_watch",
            lambda: self._run_named(entry, namespace, name, named),
        )

    def unwant_named(self, key: KindKey, namespace: str, name: str) -> None:
        """No host refers to that workload any more: its watch and its record go."""
        entry = self.kinds.get(key)
        named = entry.named.pop((namespace, name), None) if entry is not None else None
        if entry is None or named is None:
            return
        if named.task is not None:
            named.task.cancel()
        # Kept for that host alone (a user's workload is not the label watch's business).
        self.cache.pop((namespace, key[0], key[1], name), None)
        self._drop_if_unused(key)

    def unwant(self, key: KindKey) -> None:
        """No template or managed host uses the kind any more: its label watch goes, and so
        do the records only it kept."""
        entry = self.kinds.get(key)
        if entry is None or not entry.labeled:
            return
        entry.labeled = entry.synced = False
        if entry.task is not None:
            entry.task.cancel()
            entry.task = None
        named = {(ns, name) for ns, name in entry.named}
        for wkey in [k for k in self.cache if (k[1], k[2]) == key and (k[0], k[3]) not in named]:
            del self.cache[wkey]
        self._drop_if_unused(key)
        log.info("no longer watching %s %s: nothing uses it", entry.api_version, entry.kind)

    def _drop_if_unused(self, key: KindKey) -> None:
        entry = self.kinds.get(key)
        if entry is not None and not entry.labeled and not entry.named:
            del self.kinds[key]

    async def ensure(self, api_version: str, kind: str, timeout: float = 30.0) -> None:
        """Wait (at most ``timeout``) until every watch of this kind has listed."""
        entry = self.kinds.get(kind_key(api_version, kind))
        if entry is None:
            return
        deadline = asyncio.get_running_loop().time() + timeout

        def listed() -> bool:
            return (not entry.labeled or entry.synced) and all(
                named.synced for named in entry.named.values()
            )

        while not listed() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)

    async def resource(self, api_version: str, kind: str) -> str | None:
        """The plural serving the kind (discovered once; None: not served)."""
        entry = self._entry(api_version, kind)
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

    async def _listed(
        self, entry: _Kind, informers: Callable[[str], list[Informer]], what: str
    ) -> list[Informer]:
        """Discover the kind and list it with ``informers(plural)``, retrying with back-off
        (the kind not served, forbidden, no answer) and saying why meanwhile."""
        key = kind_key(entry.api_version, entry.kind)
        backoff = Backoff(first=RETRY_FIRST, cap=RETRY_MAX)
        while True:
            try:
                if entry.plural is None:
                    entry.plural = await self._discover(entry)
                if entry.plural is None:
                    raise LookupError(f"{entry.api_version} {entry.kind} is not served")
                made = informers(entry.plural)
                for informer in made:
                    await informer.list_once()
                return made
            except asyncio.CancelledError:
                raise
            except (ApiError, ApiTransportError, LookupError) as error:
                message = error.message if isinstance(error, ApiError) else str(error)
                wait = backoff.next()
                log.warning("cannot watch %s (%s); trying again in %.0fs", what, message, wait)
                self.on_error(key, f"cannot watch {what}: {message}")
                await asyncio.sleep(wait)

    def _informer(
        self,
        entry: _Kind,
        plural: str,
        namespace: str | None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> Informer:
        return Informer(
            self.client,
            plural,
            namespace,
            self._handler(entry),
            api_version=entry.api_version,
            on_skip=self.on_skip,
            field_selector=field_selector,
            label_selector=label_selector,
        )

    async def _run(self, entry: _Kind) -> None:
        key = kind_key(entry.api_version, entry.kind)
        what = f"{entry.api_version} {entry.kind}"
        informers = await self._listed(
            entry,
            lambda plural: [
                self._informer(entry, plural, scope, label_selector=MANAGED_SELECTOR)
                for scope in self.scopes
            ],
            what,
        )
        entry.synced = True
        log.info("watching %s (%s, the operator's own)", what, entry.plural)
        self.on_error(key, None)
        self.on_synced(key)
        await asyncio.gather(*(informer.run() for informer in informers))

    async def _run_named(self, entry: _Kind, namespace: str, name: str, named: _Named) -> None:
        key = kind_key(entry.api_version, entry.kind)
        what = f"{entry.api_version} {entry.kind} {namespace}/{name}"
        (informer,) = await self._listed(
            entry,
            lambda plural: [
                self._informer(entry, plural, namespace, field_selector=f"metadata.name={name}")
            ],
            what,
        )
        named.synced = True
        if self.on_named_synced is not None:
            self.on_named_synced((namespace, key[0], key[1], name))
        await informer.run()

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
