"""The informer: list one kind, then watch it from the list's resourceVersion, forever,
reporting every change to a handler (the operator's own, lean replacement for kopf's
per-object watching on the high-volume kinds; see ``handlers``).

The list is streamed when the API server can (WatchList: a watch that starts with every
existing object, served from the API server's cache), else read page by page. A paged list
is served from that cache too only while it holds a snapshot at the list's revision; after
a quiet spell and an etcd compaction it has none, and every page after the first comes
from etcd. 104,002 requests: 52.6-61.4 s paged that way, 16.8 s paged from the cache,
11.0-14.3 s streamed (docs/performance.md, "Scale").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypedDict, Unpack

from ..api import API_VERSION
from .backoff import Backoff
from .client import JSON, KubeClient
from .errors import ApiError, ApiTransportError
from .lists import LIST_PAGE, initial_events_end

log = logging.getLogger(__name__)

Handler = Callable[[str, JSON], None]
#: Told of an event whose handler raised: (event type, object, the exception).
SkipHandler = Callable[[str, JSON, Exception], None]


class InformerOptions(TypedDict, total=False):
    """How an informer lists and watches, beyond its kind, namespace and handler: each
    optional, given as keywords (one typed record rather than a long parameter list)."""

    #: Told of each event the handler raised on (see ``Informer._deliver``).
    on_skip: SkipHandler | None
    api_version: str  # default: hostpool.io's
    field_selector: str | None
    label_selector: str | None
    timeout_seconds: int  # of each watch request (default 300)
    page_size: int  # of a paged list (default LIST_PAGE)
    stream: bool  # stream lists when the API server can (default True)


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
        **options: Unpack[InformerOptions],
    ) -> None:
        self.client = client
        self.plural = plural
        self.namespace = namespace
        self.handler = handler
        self.on_skip = options.get("on_skip")
        self.api_version = options.get("api_version", API_VERSION)
        #: Only the objects these select are listed and watched.
        self.field_selector = options.get("field_selector")
        self.label_selector = options.get("label_selector")
        self.timeout_seconds = options.get("timeout_seconds", 300)
        self.page_size = options.get("page_size", LIST_PAGE)
        #: Stream the lists (turned off for good when the API server refuses to).
        self.stream = options.get("stream", True)
        self.resource_version: str | None = None
        self.known: dict[tuple[str, str], str | None] = {}  # key -> uid, for relists
        self.feed_seconds = 0.0  # spent reporting listed objects to the handler
        self.listed = 0  # objects listed

    def _deliver(self, kind: str, obj: JSON) -> None:
        """Hand one event to the handler. One object the handler cannot take is skipped,
        logged by name and reported to ``on_skip``: it never ends the watch, which would
        leave every later event of the kind unseen."""
        try:
            self.handler(kind, obj)
        except Exception as error:
            found = obj.get("metadata")
            meta: JSON = found if isinstance(found, dict) else {}
            log.error(
                "%s: skipped %s event of %s/%s: %s: %s",
                self.plural,
                kind,
                meta.get("namespace", ""),
                meta.get("name", ""),
                type(error).__name__,
                error,
                exc_info=error,
            )
            if self.on_skip is not None:
                try:
                    self.on_skip(kind, obj, error)
                except Exception:
                    log.exception("%s: reporting a skipped event failed", self.plural)

    def _remember(self, kind: str, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if kind == "DELETED":
            self.known.pop(key, None)
        else:
            self.known[key] = meta.get("uid")

    async def list_once(self) -> None:
        """(Re)list: every object is reported; known objects that are gone become DELETED.
        Streamed (one object at a time), or page by page when the API server cannot stream
        (see ``KubeClient.list_pages``): each page is reported before the next is read, so
        only one page's JSON is in memory at a time. The seconds spent reporting are added
        to :attr:`feed_seconds`, the objects to :attr:`listed`."""
        if self.stream:
            try:
                if await self._stream_once():
                    return
                log.info("%s: the streamed list ended early; listing page by page", self.plural)
            except ApiError as error:
                if error.status in (400, 403, 422):
                    log.info(
                        "%s: the API server does not stream lists (%s); listing page by page",
                        self.plural,
                        error,
                    )
                    self.stream = False
                elif error.status == 429 or error.status >= 500:
                    # E.g. 429 "storage is (re)initializing": a watch needs the API server's
                    # cache, a paged list is served from etcd meanwhile. Streamed next time.
                    log.info(
                        "%s: streamed list refused (%s); listing page by page", self.plural, error
                    )
                else:
                    raise
            except ApiTransportError as error:
                # No answer, or silence where the objects should come: a paged list this
                # time (it is answered or fails on its own), streamed again next time.
                log.info(
                    "%s: streamed list broke off (%s); listing page by page", self.plural, error
                )
        await self._page_once()

    async def _stream_once(self) -> bool:
        """A streamed list; False when the stream ended before its last object."""
        seen: set[tuple[str, str]] = set()
        watch = self.client.watch(
            self.plural,
            self.namespace,
            resource_version=None,
            timeout_seconds=self.timeout_seconds,
            api_version=self.api_version,
            field_selector=self.field_selector,
            label_selector=self.label_selector,
            initial_events=True,
        )
        async with contextlib.aclosing(watch) as events:
            async for event in events:
                started = time.perf_counter()
                kind = str(event.get("type"))
                obj = event.get("object") or {}
                if kind == "ERROR":
                    raise ApiError(
                        int(obj.get("code") or 500),
                        str(obj.get("reason")),
                        str(obj.get("message")),
                    )
                if initial_events_end(event):
                    self._forget_unseen(seen)
                    self.resource_version = obj["metadata"]["resourceVersion"]
                    self.feed_seconds += time.perf_counter() - started
                    return True
                if kind == "ADDED":
                    meta = obj.get("metadata") or {}
                    seen.add((meta.get("namespace", ""), meta.get("name", "")))
                    self._remember(kind, obj)
                    self._deliver(kind, obj)
                    self.listed += 1
                self.feed_seconds += time.perf_counter() - started
        return False

    def _forget_unseen(self, seen: set[tuple[str, str]]) -> None:
        """Known objects a relist did not see were deleted meanwhile."""
        for key in [k for k in self.known if k not in seen]:
            uid = self.known.pop(key)
            self._deliver(
                "DELETED", {"metadata": {"namespace": key[0], "name": key[1], "uid": uid}}
            )

    async def _page_once(self) -> None:
        seen: set[tuple[str, str]] = set()
        version: str | None = None
        pages = self.client.list_pages(
            self.plural,
            self.namespace,
            api_version=self.api_version,
            field_selector=self.field_selector,
            label_selector=self.label_selector,
            limit=self.page_size,
        )
        async for page in pages:
            started = time.perf_counter()
            if page.restarted:
                seen = set()
            for obj in page.items:
                meta = obj.get("metadata") or {}
                seen.add((meta.get("namespace", ""), meta.get("name", "")))
                self._remember("ADDED", obj)
                self._deliver("ADDED", obj)
            self.listed += len(page.items)
            version = page.resource_version
            self.feed_seconds += time.perf_counter() - started
        started = time.perf_counter()
        self._forget_unseen(seen)
        self.feed_seconds += time.perf_counter() - started
        self.resource_version = version

    async def run(self) -> None:
        backoff = Backoff(first=0.5, cap=10.0)
        while True:
            try:
                if self.resource_version is None:
                    await self.list_once()
                await self._watch()
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except _GoneError:
                log.info("%s: watch expired (410 Gone); listing again", self.plural)
                self.resource_version = None
            except (ApiTransportError, ApiError) as error:
                wait = backoff.next()
                log.warning(
                    "%s: watch interrupted (%s); resuming in %.1fs", self.plural, error, wait
                )
                if isinstance(error, ApiError) and error.status == 410:
                    self.resource_version = None
                await asyncio.sleep(wait)

    async def _watch(self) -> None:
        watch = self.client.watch(
            self.plural,
            self.namespace,
            resource_version=self.resource_version,
            timeout_seconds=self.timeout_seconds,
            api_version=self.api_version,
            field_selector=self.field_selector,
            label_selector=self.label_selector,
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
                self._deliver(kind, obj)


class _GoneError(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""
