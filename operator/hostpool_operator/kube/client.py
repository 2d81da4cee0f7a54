"""The only code that talks to the Kubernetes API (besides kopf's own watching).

A small asynchronous client on aiohttp (which kopf already uses): it logs in the way kopf
does (kubeconfig or in-cluster service account; see ``kube.auth``), keeps one connection
pool, and speaks JSON
for the handful of calls the operator makes. Decisions are written conditional on
``metadata.resourceVersion``, so the API server applies them only to the version the
decision was made on (409 Conflict otherwise): a stale view can never overwrite another
decision. An assignment replaces the whole status (PUT); the API server does about a fifth
less work for that than for a merge patch, which it has to apply to the stored object.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypedDict, Unpack
from urllib.parse import quote

import aiohttp
import kopf
import orjson

from ..api import API_VERSION
from .auth import (
    TOKEN_REREAD,
    Credentials,
    ssl_context,
)
from .errors import ApiError, ApiTransportError, NotLeaderError
from .lists import LIST_PAGE, ListPage, ListTiming, event_lines, initial_events_end, selectors
from .sinks import MetricsSink

log = logging.getLogger(__name__)

#: Seconds without a byte after which a streamed list is given up (a watch: its own
#: timeoutSeconds + 30).
STREAMED_LIST_SILENCE = 30.0

JSON = dict[str, Any]
#: Methods that change something: the write gate is asked before each try of one.
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: The leader-election Lease is written to win and keep the right to write: never gated.
LEASES_PATH = "/apis/coordination.k8s.io/"
MERGE_PATCH = "application/merge-patch+json"


class Selectors(TypedDict, total=False):
    """Which objects a list or a watch reads (``fieldSelector``, ``labelSelector``); each
    optional and given as a keyword, so the two travel as one record."""

    field_selector: str | None
    label_selector: str | None


#: How often a request the API server turned away with 429 Too Many Requests (API Priority
#: and Fairness, or the max-in-flight limits) is sent again before its caller sees the error.
#: Such a request was never processed, so sending it again is safe for every verb; client-go
#: does the same, also ten times.
THROTTLE_RETRIES = 10
#: Longest wait between those tries, whatever Retry-After asks for.
THROTTLE_MAX_WAIT = 10.0


def _retry_after_seconds(header: str | None) -> float:
    """The wait a 429 asks for (whole seconds, 1 s when it names none), plus up to as much
    again at random: a burst refused together must not come back together, or the same few
    seats turn most of it away again. Never longer than THROTTLE_MAX_WAIT."""
    try:
        seconds = float(header) if header is not None else 1.0
    except ValueError:
        seconds = 1.0
    seconds = max(seconds, 0.1)
    return min(seconds + random.uniform(0, seconds), THROTTLE_MAX_WAIT)


def group_version_path(api_version: str) -> str:
    """The URL path of an API group/version: the core group lives under /api."""
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


class KubeClient:
    """A minimal asynchronous Kubernetes API client: hostpool.io objects, the workloads
    behind hosts, and Events."""

    def __init__(
        self,
        info: kopf.ConnectionInfo,
        *,
        max_connections: int = 256,
        throttle_retries: int = THROTTLE_RETRIES,
        token_file: str | None = None,
        token_reread: float = TOKEN_REREAD,
        metrics: MetricsSink | None = None,
    ) -> None:
        self._info = info
        self._throttle_retries = throttle_retries
        self._metrics = metrics or MetricsSink()
        #: Requests sent again after a 429 (the live throttling test reads it).
        self.throttled = 0
        self._server = info.server.rstrip("/")
        self._headers = {"Accept": "application/json", "User-Agent": "hostpool-operator"}
        # Also sent with each request, over the session's default: a rotated token replaces
        # it without a new connection pool.
        self._credentials = Credentials(info, token_file=token_file, reread_every=token_reread)
        self._headers.update(self._credentials.header())
        self._ssl = ssl_context(info)
        self._limit = max_connections
        self._session: aiohttp.ClientSession | None = None
        self.list_timing = ListTiming()
        #: Awaited right before each try of a write (not a Lease's): False refuses it with
        #: NotLeaderError, unsent. The operator sets it to "this instance holds the Lease and
        #: its last renewal is within the renew deadline" (waiting out a late renewal), so a
        #: leader that was paused or cut off past its deadline sends nothing once it runs
        #: again (None: always write).
        self.write_gate: Callable[[], Awaitable[bool]] | None = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl, limit=self._limit)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=60),
            )
        return self._session

    def reread_token(self) -> bool:
        """Read the token file again; True when it holds a new token (used from now on)."""
        return self._credentials.reread()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | Sequence[Any] | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        text = await self._exchange(
            method, path, body=body, params=params, content_type=content_type
        )
        parsed: JSON = orjson.loads(text) if text else {}
        return parsed

    async def _exchange(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | Sequence[Any] | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> bytes:
        """Send one request and read the whole answer's body (not decoded); ApiError for
        an error status."""
        data = None if body is None else orjson.dumps(body)
        extra = {"Content-Type": content_type} if body is not None else {}
        attempt = 0
        reauthenticated = False
        gated = self.write_gate is not None and method in WRITES
        gated = gated and not path.startswith(LEASES_PATH)
        while True:
            headers = {**self._credentials.header(), **extra}
            if gated and self.write_gate is not None and not await self.write_gate():
                raise NotLeaderError(f"{method} {path}: not sent, this instance does not lead")
            if method in WRITES:
                self._metrics.api_write(method)
            try:
                async with self._http().request(
                    method, self._server + path, data=data, params=params, headers=headers
                ) as response:
                    text = await response.read()
                    status_code, reason_phrase = response.status, response.reason or ""
                    retry_after = response.headers.get("Retry-After")
            except (aiohttp.ClientError, TimeoutError, OSError) as error:
                # No answer: one error type for every way of not getting one (aiohttp's
                # disconnect errors are not OSErrors, its timeouts are TimeoutErrors).
                self._metrics.api_error("transport")
                raise ApiTransportError(f"{method} {path}: {error!r}") from error
            if status_code >= 400:
                self._metrics.api_error(str(status_code))
            if status_code == 401 and not reauthenticated:
                self._credentials.reread()
                if self._credentials.authorization != headers.get("Authorization"):
                    # A new token (this re-read, or another request's since this one was
                    # sent): a 401 means the request was not processed, so sending it again
                    # is safe.
                    reauthenticated = True
                    continue
            if status_code != 429 or attempt >= self._throttle_retries:
                break
            attempt += 1
            self.throttled += 1
            wait = _retry_after_seconds(retry_after)
            log.debug("%s %s: throttled (429), try %d in %.1fs", method, path, attempt + 1, wait)
            await asyncio.sleep(wait)
        if status_code >= 400:
            try:
                status = orjson.loads(text)
                message = status.get("message", text.decode(errors="replace"))
                reason = status.get("reason", reason_phrase)
            except (ValueError, AttributeError):
                message, reason = text.decode(errors="replace"), reason_phrase
            raise ApiError(status_code, reason, message)
        return text

    # ------------------------------------------------------------------ objects
    # Every call is about hostpool.io unless ``api_version`` names another group/version
    # (the workloads behind session hosts: Pods, VirtualMachines...).

    @staticmethod
    def path(
        plural: str,
        namespace: str | None = None,
        name: str | None = None,
        *,
        api_version: str = API_VERSION,
    ) -> str:
        base = group_version_path(api_version)
        if namespace is not None:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{plural}"
        if name is not None:
            base += f"/{quote(name)}"
        return base

    async def list(
        self,
        plural: str,
        namespace: str | None = None,
        *,
        api_version: str = API_VERSION,
        **selected: Unpack[Selectors],
    ) -> JSON:
        """Every object of a kind (paged), with the list's resourceVersion."""
        items: list[JSON] = []
        version: str | None = None
        pages = self.list_pages(plural, namespace, api_version=api_version, **selected)
        async for page in pages:
            if page.restarted:
                items = []
            items.extend(page.items)
            version = page.resource_version
        return {"items": items, "resourceVersion": version}

    async def list_pages(
        self,
        plural: str,
        namespace: str | None = None,
        *,
        api_version: str = API_VERSION,
        limit: int = LIST_PAGE,
        **selected: Unpack[Selectors],
    ) -> AsyncIterator[ListPage]:
        """Every object of a kind, ``limit`` per page (one consistent snapshot: the pages
        after the first are read at its resourceVersion). A continue token that expired
        meanwhile (410) starts the list again from the first page, marked ``restarted``:
        what earlier pages yielded belongs to the older snapshot. The next page is requested
        as soon as a page arrives, so it is on its way while the caller handles this one.
        The time spent waiting for the answers (what the caller's handling did not hide) and
        decoding them is added to :attr:`list_timing`."""
        first: dict[str, str] = {"limit": str(limit)}
        first |= selectors(selected.get("field_selector"), selected.get("label_selector"))
        path = self.path(plural, namespace, api_version=api_version)
        restarted = False
        timing = self.list_timing

        def fetch(params: dict[str, str]) -> asyncio.Task[bytes]:
            return asyncio.ensure_future(self._exchange("GET", path, params=params))

        params = first
        pending = fetch(params)
        try:
            while True:
                started = time.perf_counter()
                try:
                    text = await pending
                except ApiError as error:
                    if error.status != 410 or "continue" not in params:
                        raise
                    log.info("%s: list continue token expired (410); listing again", plural)
                    params, restarted = first, True
                    timing.restarts += 1
                    pending = fetch(params)
                    continue
                read = time.perf_counter()
                page = orjson.loads(text)
                del text
                timing.wait += read - started
                timing.decode += time.perf_counter() - read
                items = page.get("items") or []
                timing.objects += len(items)
                metadata = page.get("metadata") or {}
                token = metadata.get("continue")
                if token:
                    # The next page is read while the caller works on this one.
                    params = {**first, "continue": token}
                    pending = fetch(params)
                yield ListPage(items, metadata.get("resourceVersion"), restarted, not token)
                if not token:
                    return
                restarted = False
        finally:
            if not pending.done():
                pending.cancel()
            elif not pending.cancelled():
                pending.exception()  # retrieved: a page nobody reads fails silently

    async def get(
        self, plural: str, namespace: str, name: str, *, api_version: str = API_VERSION
    ) -> JSON:
        return await self.request(
            "GET", self.path(plural, namespace, name, api_version=api_version)
        )

    async def patch_as_read(
        self,
        plural: str,
        namespace: str,
        name: str,
        decide: Callable[[JSON], Mapping[str, Any] | bool],
        *,
        attempts: int,
    ) -> JSON | bool | None:
        """Read the object, let ``decide`` look at it, and merge-patch what it returns onto
        exactly the version read; a conflict (the object changed meanwhile) reads it again,
        up to ``attempts`` times. ``decide`` returns the patch, or True/False to write
        nothing and end with that. Returns the patch's answer, what ``decide`` ended with,
        or None when every try met a conflict. Other API errors are raised."""
        for _ in range(attempts):
            obj = await self.get(plural, namespace, name)
            decided = decide(obj)
            if isinstance(decided, bool):
                return decided
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            try:
                return await self.patch(
                    plural, namespace, name, decided, resource_version=version or None
                )
            except ApiError as error:
                if not error.conflict:
                    raise
        return None

    async def resources(self, api_version: str) -> builtins.list[JSON]:
        """The resources the API server serves in ``api_version`` (discovery)."""
        listing = await self.request("GET", group_version_path(api_version))
        return [r for r in listing.get("resources") or [] if isinstance(r, dict)]

    async def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> JSON:
        """Merge-patch ``status``; with a resourceVersion, only onto exactly that version
        (409 Conflict otherwise). That also keeps it off a namesake created meanwhile: a
        resourceVersion is an etcd revision, never shared by two objects. (A uid in a patch
        is no precondition: the API server answered 200 to a status patch naming another
        incarnation's uid.)"""
        body: JSON = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self.request(
            "PATCH",
            self.path(plural, namespace, name) + "/status",
            body=body,
            content_type=MERGE_PATCH,
        )

    async def patch(
        self,
        plural: str,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        *,
        resource_version: str | None = None,
        api_version: str = API_VERSION,
    ) -> JSON:
        """Merge-patch the object itself (spec, labels, annotations); with a resourceVersion,
        only onto exactly that version, never a newer one or a namesake (see
        :meth:`patch_status`)."""
        if resource_version:
            meta = {**(body.get("metadata") or {}), "resourceVersion": resource_version}
            body = {**body, "metadata": meta}
        return await self.request(
            "PATCH",
            self.path(plural, namespace, name, api_version=api_version),
            body=body,
            content_type=MERGE_PATCH,
        )

    async def replace_status(
        self,
        plural: str,
        kind: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        resource_version: str,
        uid: str | None = None,
    ) -> JSON:
        """Replace the whole ``status`` of exactly that version of the object (PUT).

        The body carries only what identifies the object: on the status subresource the API
        server keeps the stored spec, labels, annotations and managedFields.
        """
        metadata: JSON = {"name": name, "namespace": namespace, "resourceVersion": resource_version}
        if uid:
            metadata["uid"] = uid
        body = {
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": metadata,
            "status": status,
        }
        return await self.request("PUT", self.path(plural, namespace, name) + "/status", body=body)

    async def create(
        self,
        plural: str,
        namespace: str,
        body: Mapping[str, Any],
        *,
        api_version: str = API_VERSION,
    ) -> JSON:
        return await self.request(
            "POST", self.path(plural, namespace, api_version=api_version), body=body
        )

    async def delete(
        self,
        plural: str,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        api_version: str = API_VERSION,
    ) -> JSON:
        """Delete; with a uid, only that incarnation of the object (never a namesake); with
        a resourceVersion, only that version (409 Conflict if it changed since)."""
        body: JSON = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        preconditions = {}
        if uid is not None:
            preconditions["uid"] = uid
        if resource_version is not None:
            preconditions["resourceVersion"] = resource_version
        if preconditions:
            body["preconditions"] = preconditions
        return await self.request(
            "DELETE", self.path(plural, namespace, name, api_version=api_version), body=body
        )

    async def watch(
        self,
        plural: str,
        namespace: str | None,
        *,
        resource_version: str | None,
        timeout_seconds: int,
        api_version: str = API_VERSION,
        initial_events: bool = False,
        **selected: Unpack[Selectors],
    ) -> AsyncGenerator[JSON, None]:
        """The events of one watch from ``resource_version`` (bookmarks included), until the
        server ends it after ``timeout_seconds``. An HTTP error raises ApiError; a dropped
        connection ApiTransportError.

        ``initial_events``: a streamed list (the API server's WatchList): every object that
        exists now comes first as ADDED, then a BOOKMARK annotated
        ``k8s.io/initial-events-end``; the time waiting for and decoding those events is added
        to :attr:`list_timing` like a LIST's."""
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
            "resourceVersion": resource_version or "",
        }
        params |= selectors(selected.get("field_selector"), selected.get("label_selector"))
        if initial_events:
            params |= {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
        timing = self.list_timing if initial_events else None
        url = self._server + self.path(plural, namespace, api_version=api_version)
        # A streamed list sends its objects one after another and then its bookmark: this
        # long a silence means it will not (it is then listed page by page, see Informer).
        silence = STREAMED_LIST_SILENCE if initial_events else timeout_seconds + 30
        timeout = aiohttp.ClientTimeout(total=None, sock_read=silence)
        headers = self._credentials.header()
        try:
            async with self._http().get(
                url, params=params, timeout=timeout, headers=headers
            ) as response:
                if response.status >= 400:
                    self._metrics.api_error(str(response.status))
                    if response.status == 401:
                        self.reread_token()  # the informer's next try uses the new one
                    body = await response.read()
                    raise ApiError(
                        response.status, response.reason or "", body.decode(errors="replace")
                    )
                lines = event_lines(response.content)
                while timing is not None:  # the streamed list: timed
                    started = time.perf_counter()
                    line = await anext(lines, None)
                    if line is None:
                        return
                    read = time.perf_counter()
                    event = orjson.loads(line)
                    timing.wait += read - started
                    timing.decode += time.perf_counter() - read
                    if event.get("type") == "ADDED":
                        timing.objects += 1
                    elif initial_events_end(event):
                        timing = None
                    yield event
                async for line in lines:
                    yield orjson.loads(line)
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            self._metrics.api_error("transport")
            raise ApiTransportError(f"watch {plural}: {error!r}") from error
