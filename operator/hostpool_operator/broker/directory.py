"""What the broker knows of the cluster: pools, hosts and requests of the namespaces it
serves, kept current by one informer per kind and namespace (the operator's own informer
code), and the connects waiting for a request to be placed.

A change to a request wakes the connects waiting on it: no per-request watch, no polling."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from ..access.connect import pool_entry
from ..access.views import HostView, PoolView, RequestView, addressed
from ..api.vocabulary import HOSTS, POOLS, REQUESTS
from ..kube.client import JSON, KubeClient
from ..kube.informer import Informer

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
UserKey = tuple[str, str, str]  # (namespace, pool, user)


def _shown(host: HostView | None) -> tuple[str, str, str | None, str | None] | None:
    """What a user's page shows of a host: whose desktop it is, and its power."""
    if host is None:
        return None
    return host.pool, host.name, host.assigned_user, host.power


@dataclass(frozen=True, slots=True)
class Change:
    """Something ``GET /v1/pools`` may show differently now: a pool (``user`` None; as it
    was and as it is, None where it is not there) or one user's request in a pool."""

    namespace: str
    pool: str
    user: str | None = None
    before: PoolView | None = None
    after: PoolView | None = None


#: Told of each change, synchronously, on the event loop (it must not block).
Listener = Callable[[Change], None]


class Directory:
    """Pools, hosts and requests by name; requests also by (namespace, pool, user)."""

    def __init__(self, client: KubeClient, namespaces: list[str] | None) -> None:
        self.client = client
        self.namespaces = namespaces
        self.pools: dict[Key, PoolView] = {}
        self.hosts: dict[Key, HostView] = {}
        self.requests: dict[Key, RequestView] = {}
        self._mine: dict[UserKey, set[str]] = defaultdict(set)
        #: Personal pools' hosts by their user: (namespace, pool, user) -> host name.
        self._desktops: dict[UserKey, str] = {}
        self._waiters: dict[Key, set[asyncio.Event]] = {}
        self._locks: dict[UserKey, list[Any]] = {}
        #: Objects that could not be read (the metrics and the log say which).
        self.skipped = 0
        #: Told of every change to a pool or a request (the portal's live updates).
        self.listeners: list[Listener] = []
        #: The broker serves the browser's client (the listing offers desktops in the
        #: browser only then).
        self.web_served = False
        self._synced = False
        self.informers: list[Informer] = []
        for namespace in namespaces or [None]:  # type: ignore[list-item]
            for plural, handler in (
                (POOLS, self._on_pool),
                (HOSTS, self._on_host),
                (REQUESTS, self._on_request),
            ):
                self.informers.append(
                    Informer(client, plural, namespace, handler, on_skip=self._on_skip)
                )

    # ------------------------------------------------------------------ state

    @property
    def ready(self) -> bool:
        """Every informer has listed once: the caches hold the cluster as of then.

        It stays so while an informer lists again (its watch expired, 410 Gone): the caches
        keep what they knew until the new list replaces it, and connects are answered from
        them, as they are while a watch event is on its way. Otherwise every replica, its
        watches expiring together (an API server restarted), would answer 503 at once."""
        if not self._synced:
            self._synced = all(i.resource_version is not None for i in self.informers)
        return self._synced

    def serves(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def mine(self, namespace: str, pool: str, user: str) -> list[RequestView]:
        """The user's requests in that pool."""
        names = self._mine.get((namespace, pool, user), ())
        return [
            addressed(self.requests[(namespace, n)], self.hosts)
            for n in names
            if (namespace, n) in self.requests
        ]

    def desktop(self, namespace: str, pool: str, user: str) -> HostView | None:
        """The user's own host in a personal pool (spec.assignedUser), if any."""
        name = self._desktops.get((namespace, pool, user))
        return self.hosts.get((namespace, name)) if name is not None else None

    def listing(self, user: str, groups: frozenset[str]) -> list[dict[str, Any]]:
        """The pools this user may use, each with their session there (and in a personal
        pool their desktop): ``GET /v1/pools``."""
        return [
            pool_entry(
                p,
                self.mine(p.namespace, p.name, user),
                self.desktop(p.namespace, p.name, user) if p.personal else None,
                web_served=self.web_served,
            )
            for p in self.pools_of()
            if p.admits(user, groups)
        ]

    def groups_named(self) -> frozenset[str]:
        """Every group some pool's entitlements name: the only groups a caller's session
        needs to keep (a person in 1,000 groups must not carry them all in a cookie)."""
        return frozenset(
            g
            for p in self.pools.values()
            if p.entitlements is not None
            for g in p.entitlements.groups
        )

    def pools_of(self, namespace: str | None = None) -> list[PoolView]:
        return sorted(
            (p for p in self.pools.values() if namespace is None or p.namespace == namespace),
            key=lambda p: (p.namespace, p.name),
        )

    @contextlib.asynccontextmanager
    async def user_lock(self, key: UserKey) -> AsyncIterator[None]:
        """One decision at a time per user and pool in this broker: concurrent connects of
        one user wait for the first one's create instead of racing it (across replicas the
        request's name settles the race). Dropped when no one holds or waits for it."""
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if not entry[1]:
                self._locks.pop(key, None)

    # ------------------------------------------------------------------ events

    def _on_pool(self, kind: str, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        before = self.pools.get(key)
        if kind == "DELETED":
            self.pools.pop(key, None)
        else:
            try:
                self.pools[key] = PoolView.from_api(obj)
            except ValueError as error:
                # Unreadable: no one may connect to it until it is fixed.
                self.pools.pop(key, None)
                self.skipped += 1
                log.warning("pool %s/%s left out: %s", key[0], key[1], error)
        after = self.pools.get(key)
        if after != before:  # most status writes change nothing the broker keeps
            self._tell(Change(key[0], key[1], None, before, after))

    def _on_host(self, kind: str, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        before = self.hosts.get(key)
        if kind == "DELETED":
            self.hosts.pop(key, None)
        else:
            self.hosts[key] = HostView.from_api(obj)
        after = self.hosts.get(key)
        if before is not None and before.assigned_user is not None:
            desktop = (before.namespace, before.pool, before.assigned_user)
            if self._desktops.get(desktop) == before.name:
                del self._desktops[desktop]
        if after is not None and after.assigned_user is not None:
            self._desktops[(after.namespace, after.pool, after.assigned_user)] = after.name
        # A personal host's user and power are what its user's page shows of it.
        if _shown(before) != _shown(after):
            for view in (before, after):
                if view is not None and view.assigned_user is not None:
                    self._tell(Change(view.namespace, view.pool, view.assigned_user))

    def _on_request(self, kind: str, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        old = self.requests.get(key)
        if kind == "DELETED":
            if old is not None:
                self._forget(old)
        else:
            self.observe_view(RequestView.from_api(obj))
        self._wake(key)

    def _on_skip(self, kind: str, obj: JSON, error: Exception) -> None:
        self.skipped += 1

    def observe(self, obj: JSON) -> RequestView:
        """A request this broker just read or wrote, taken in before its watch event
        arrives (which replaces it)."""
        view = RequestView.from_api(obj)
        if (view.namespace, view.name) not in self.requests:
            self.observe_view(view)
        return self.requests[(view.namespace, view.name)]

    def observe_view(self, view: RequestView) -> None:
        key = (view.namespace, view.name)
        old = self.requests.get(key)
        if old is not None and (old.pool, old.user) != (view.pool, view.user):
            self._forget(old)  # a namesake of another user (deleted and made again)
        self.requests[key] = view
        self._mine[(view.namespace, view.pool, view.user)].add(view.name)
        self._tell(Change(view.namespace, view.pool, view.user))

    def _forget(self, view: RequestView) -> None:
        key = (view.namespace, view.name)
        self.requests.pop(key, None)
        user_key = (view.namespace, view.pool, view.user)
        names = self._mine.get(user_key)
        if names is not None:
            names.discard(view.name)
            if not names:
                del self._mine[user_key]
        self._tell(Change(view.namespace, view.pool, view.user))

    def _tell(self, change: Change) -> None:
        for listener in self.listeners:
            try:
                listener(change)
            except Exception:  # a listener's bug must not end the watch
                log.exception("a listener of the directory failed")

    def _wake(self, key: Key) -> None:
        for event in self._waiters.get(key, ()):
            event.set()

    # ------------------------------------------------------------------ waiting

    async def wait_for(
        self, key: Key, done: Callable[[RequestView | None], bool], timeout: float
    ) -> RequestView | None:
        """The request once ``done(view)`` holds (None: it is gone), or as it stands when
        ``timeout`` seconds have passed."""
        event = asyncio.Event()
        waiters = self._waiters.setdefault(key, set())
        waiters.add(event)
        deadline = time.monotonic() + timeout
        try:
            while True:
                view = self.requests.get(key)
                view = addressed(view, self.hosts) if view is not None else None
                left = deadline - time.monotonic()
                if done(view) or left <= 0:
                    return view
                event.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):  # not wait_for: it can swallow a cancel
                        await event.wait()
        finally:
            waiters.discard(event)
            if not waiters:
                self._waiters.pop(key, None)

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    async def run(self) -> None:
        """Run every informer until cancelled."""
        async with asyncio.TaskGroup() as group:
            for informer in self.informers:
                group.create_task(informer.run())
