"""The informer: list one kind, then watch it from the list's resourceVersion, forever,
reporting every change to a handler (the operator's own, lean replacement for kopf's
per-object watching on the high-volume kinds; see ``handlers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from .api import API_VERSION
from .k8s import JSON, ApiError, ApiTransportError, KubeClient

log = logging.getLogger(__name__)

Handler = Callable[[str, JSON], None]


class Informer:
    """List, then watch one kind from the list's resourceVersion, forever.

    The hot path of a logon storm: every SessionRequest event goes through here, so it is
    kept lean (one JSON decode per event, no per-event copies or tasks). On ``410 Gone`` it
    lists again and reports objects that vanished meanwhile as ``DELETED``; on a dropped
    connection it resumes from the last resourceVersion it saw (bookmarks keep that fresh).
    """

    def __init__(
        self,
        client: KubeClient,
        plural: str,
        namespace: str | None,
        handler: Handler,
        *,
        timeout_seconds: int = 300,
        api_version: str = API_VERSION,
    ) -> None:
        self.client = client
        self.plural = plural
        self.api_version = api_version
        self.namespace = namespace
        self.handler = handler
        self.timeout_seconds = timeout_seconds
        self.resource_version: str | None = None
        self.known: dict[tuple[str, str], JSON] = {}  # key -> minimal metadata, for relists

    def _remember(self, kind: str, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if kind == "DELETED":
            self.known.pop(key, None)
        else:
            self.known[key] = {"metadata": {k: meta.get(k) for k in ("namespace", "name", "uid")}}

    async def list_once(self) -> None:
        """(Re)list: every object is reported; known objects that are gone become DELETED."""
        listing = await self.client.list(self.plural, self.namespace, api_version=self.api_version)
        seen = set()
        for obj in listing["items"]:
            meta = obj.get("metadata") or {}
            seen.add((meta.get("namespace", ""), meta.get("name", "")))
            self._remember("ADDED", obj)
            self.handler("ADDED", obj)
        for key in [k for k in self.known if k not in seen]:
            gone = self.known.pop(key)
            self.handler("DELETED", gone)
        self.resource_version = listing["resourceVersion"]

    async def run(self) -> None:
        backoff = 0.5
        while True:
            try:
                if self.resource_version is None:
                    await self.list_once()
                await self._watch()
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except _GoneError:
                log.info("%s: watch expired (410 Gone); listing again", self.plural)
                self.resource_version = None
            except (ApiTransportError, ApiError) as error:
                log.warning(
                    "%s: watch interrupted (%s); resuming in %.1fs", self.plural, error, backoff
                )
                if isinstance(error, ApiError) and error.status == 410:
                    self.resource_version = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    async def _watch(self) -> None:
        watch = self.client.watch(
            self.plural,
            self.namespace,
            resource_version=self.resource_version,
            timeout_seconds=self.timeout_seconds,
            api_version=self.api_version,
        )
        async with contextlib.aclosing(watch) as events:  # the connection closes on any exit
            async for event in events:
                kind = str(event.get("type"))
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _GoneError()
                    raise ApiError(
                        int(obj.get("code") or 500),
                        str(obj.get("reason")),
                        str(obj.get("message")),
                    )
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if version:
                    self.resource_version = version
                if kind == "BOOKMARK":
                    continue
                self._remember(kind, obj)
                self.handler(kind, obj)


class _GoneError(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""
