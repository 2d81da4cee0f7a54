"""``GET /v1/events``: the caller's ``/v1/pools`` answer again, as server-sent events, each time
it changes. The portal page listens to it instead of polling.

No watch of its own: the broker's directory already follows every pool and request, and tells
:class:`LiveUpdates` of each change (``Directory.listeners``). A change wakes only the streams
it can concern (a request: its user's streams; a pool: the streams of callers it admits, or
admitted); a woken stream computes its caller's body and sends it only when it differs from the
last one sent, at most one event per :attr:`LiveSettings.coalesce` seconds. A comment every
:attr:`LiveSettings.heartbeat` seconds keeps proxies from closing an idle stream and finds
closed connections. A stream ends after :attr:`LiveSettings.lifetime` seconds, when its
portal session ends or is signed out (in any replica), or when its access token is due: the
browser's EventSource connects again, and that request checks the token or the cookie again
and refreshes the session (a refresh the provider refuses ends the session everywhere, the
page's desktops too)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from ..access.connect import Caller, error
from .directory import Change, Directory
from .gate import Gate, RefusalError
from .metrics import BrokerMetrics
from .signin.flow import REFRESH_MARGIN

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveSettings:
    #: Least seconds between two events of one stream (changes in between are coalesced).
    coalesce: float = 0.5
    #: Seconds between heartbeat comments of an idle stream.
    heartbeat: float = 15.0
    #: Seconds a stream lasts before the browser is asked to connect again.
    lifetime: float = 600.0
    #: Milliseconds the browser waits before connecting again (the stream's retry field).
    retry_ms: int = 2000
    #: Streams open at once per user, and in all (more: 429 / 503).
    per_user: int = 8
    total: int = 10_000


@dataclass(eq=False)
class _Stream:
    caller: Caller
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: Its portal session was signed out.
    signed_out: bool = False

    def sign_out(self) -> None:
        self.signed_out = True
        self.wake.set()


class LiveUpdates:
    """The open streams, by user, and the ``/v1/events`` handler."""

    def __init__(
        self,
        gate: Gate,
        directory: Directory,
        metrics: BrokerMetrics,
        settings: LiveSettings | None = None,
    ) -> None:
        self.gate = gate
        self.directory = directory
        self.metrics = metrics
        self.settings = settings or LiveSettings()
        self.streams: dict[str, set[_Stream]] = {}
        self.open = 0
        self.closing = False
        directory.listeners.append(self.changed)

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/events", self.events)]

    # ------------------------------------------------------------------ changes

    def changed(self, change: Change) -> None:
        """Wake the streams ``change`` may concern (they work out whether it does)."""
        if change.user is not None:
            for stream in self.streams.get(change.user, ()):
                stream.wake.set()
            return
        for streams in self.streams.values():
            for stream in streams:
                caller = stream.caller
                if any(
                    view is not None and view.admits(caller.user, caller.groups)
                    for view in (change.before, change.after)
                ):
                    stream.wake.set()

    async def close(self, app: web.Application | None = None) -> None:
        """End every stream (the broker is stopping: the browsers connect to another
        replica)."""
        self.closing = True
        for streams in self.streams.values():
            for stream in streams:
                stream.wake.set()

    # ------------------------------------------------------------------ the handler

    async def events(self, request: web.Request) -> web.StreamResponse:
        gate = self.gate
        try:
            caller = await gate.caller(request)
            gate.ready()
            self._room_for(caller)
        except RefusalError as refusal:
            return gate.send(request, "events", refusal.answer)
        ends = time.monotonic() + self.settings.lifetime
        stream = _Stream(caller)
        forget = None
        if gate.portal is not None and "Authorization" not in request.headers:
            session = await gate.portal.session(request)
            if session is not None:  # a cookie's stream ends with its session
                now = time.time()
                due = max(5.0, session.access_expires - REFRESH_MARGIN / 2 - now)
                ends = min(ends, time.monotonic() + min(session.expires_at - now, due))
                forget = gate.portal.sign_outs.on_end(session.sid, stream.sign_out)
        self.streams.setdefault(caller.user, set()).add(stream)
        self.open += 1
        self.metrics.event_streams.inc()
        self.metrics.answers.labels("events", "200", "OK").inc()
        try:
            response = web.StreamResponse(
                headers={
                    "Content-Type": "text/event-stream",
                    "Cache-Control": "no-store",
                    # nginx (ingress-nginx) would otherwise buffer the stream.
                    "X-Accel-Buffering": "no",
                }
            )
            # The browser may go before the stream's first byte: nothing failed.
            with contextlib.suppress(ConnectionError):
                await response.prepare(request)
                await self._pump(response, stream, ends)
            return response
        finally:
            if forget is not None:
                forget()
            self.open -= 1
            self.metrics.event_streams.dec()
            mine = self.streams.get(caller.user)
            if mine is not None:
                mine.discard(stream)
                if not mine:
                    del self.streams[caller.user]

    def _room_for(self, caller: Caller) -> None:
        if self.closing:
            raise RefusalError(error(503, "NotReady", "the broker is stopping", 1))
        if len(self.streams.get(caller.user, ())) >= self.settings.per_user:
            raise RefusalError(
                error(429, "TooManyStreams", "close another page of this portal first", 5)
            )
        if self.open >= self.settings.total:
            raise RefusalError(error(503, "TooManyStreams", "the broker is serving its most", 5))

    async def _pump(self, response: web.StreamResponse, stream: _Stream, ends: float) -> None:
        settings = self.settings
        await response.write(f"retry: {settings.retry_ms}\n\n".encode())
        last: bytes | None = None
        woken = True  # the first body is always sent
        while not self.closing and not stream.signed_out:
            if woken:
                stream.wake.clear()
                body = self._body(stream.caller)
                if body != last:
                    await response.write(b"event: pools\ndata: " + body + b"\n\n")
                    self.metrics.events_sent.inc()
                    last = body
                    await asyncio.sleep(settings.coalesce)  # changes meanwhile: one event
                    if stream.wake.is_set():
                        continue
            left = ends - time.monotonic()
            if left <= 0:
                return
            try:
                async with asyncio.timeout(min(settings.heartbeat, left)):
                    await stream.wake.wait()
                woken = True
            except TimeoutError:
                await response.write(b": ping\n\n")
                woken = False

    def _body(self, caller: Caller) -> bytes:
        listed: dict[str, Any] = {"pools": self.directory.listing(caller.user, caller.groups)}
        return orjson.dumps(listed)
