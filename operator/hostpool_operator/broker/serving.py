"""How the broker serves HTTP before a request reaches its handlers: what a client may send
before it is authenticated, and the TLS certificate, read again when its files change.

Request heads are bounded as Go's ``net/http`` bounds them (a total size and a read-header
timeout), plus a count of headers and a budget for all connections' unfinished heads
together: without them six connections sending 126 headers of 255 KB, and never ending the
request, grew the broker by ~380 MB (docs/reliability.md). Each refusal is a JSON answer
like the broker's own (``{"reason", "message"}``), and the connection is closed."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

log = logging.getLogger(__name__)

#: A request's line and headers together (Go's net/http allows 1 MiB). Room for a token of
#: MAX_TOKEN (64 KiB) and more besides: a longer token still gets the broker's own 401.
MAX_HEAD = 256 * 1024
#: Headers in one request (aiohttp's own limit is 128; browsers send about 20).
MAX_HEADERS = 100
#: Seconds from a connection's start (or a request's first byte) to the end of its head.
HEAD_TIMEOUT = 10.0
#: Bytes of unfinished heads of all connections together: 64 heads of the largest size.
HEAD_BUDGET = 16 * 1024 * 1024
#: Seconds a refused connection's further input is read and dropped before it is closed, so
#: that the client reads the refusal rather than a reset.
LINGER = 1.0

#: Told of each refusal: (HTTP status, reason).
OnRefusal = Callable[[int, str], None]


@dataclass(frozen=True)
class HeadLimits:
    max_bytes: int = MAX_HEAD
    max_headers: int = MAX_HEADERS
    timeout: float = HEAD_TIMEOUT
    budget: int = HEAD_BUDGET


class _Budget:
    """Bytes of unfinished heads, all connections together."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used = max(0, self.used - size)


class GuardedHandler(web.RequestHandler):
    """aiohttp's connection handler, counting each request's head as it arrives: past the
    total size, the count of headers, the budget or the deadline, the connection is
    answered with a JSON refusal and closed before aiohttp has kept any more of it.

    A head runs from a connection's start (or the end of the previous request's body) to
    the request aiohttp parsed from it; its body is not counted."""

    def __init__(
        self,
        manager: web.Server,
        *,
        limits: HeadLimits,
        budget: _Budget,
        on_refusal: OnRefusal,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        self._limits = limits
        self._budget = budget
        self._on_refusal = on_refusal
        self._head_bytes = 0  # of the unfinished head (taken from the budget)
        self._head_lines = 0
        self._body: Any = None  # the last request's payload: its end starts the next head
        self._deadline: asyncio.TimerHandle | None = None
        self._refused = False

    # ------------------------------------------------------------------ protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._start_deadline()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._end_head()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # read and dropped until the connection closes
        if self._upgraded:
            # A WebSocket (the desktop relay): its frames are no request heads.
            super().data_received(data)
            return
        if (self._body is None or self._body.is_eof()) and data:
            if self._deadline is None:
                self._start_deadline()
            if not self._count(data):
                return
        before = self._request_count
        super().data_received(data)
        if self._request_count != before and self._messages:
            self._body = self._messages[-1][1]
            self._end_head()

    # ------------------------------------------------------------------ the head

    def _count(self, data: bytes) -> bool:
        end = data.find(b"\r\n\r\n")
        size = len(data) if end < 0 else end + 4
        lines = self._head_lines + data.count(b"\n", 0, size)
        limits = self._limits
        if self._head_bytes + size > limits.max_bytes:
            self._refuse(
                431,
                "HeadersTooLarge",
                f"the request's headers are over {limits.max_bytes // 1024} KiB together",
            )
            return False
        if lines > limits.max_headers + 2:  # the request line and the blank line end it
            self._refuse(
                431, "TooManyHeaders", f"the request has over {limits.max_headers} headers"
            )
            return False
        if not self._budget.take(size):
            self._refuse(503, "Busy", "too many requests are arriving at once; try again", 1)
            return False
        self._head_bytes += size
        self._head_lines = lines
        return True

    def _start_deadline(self) -> None:
        self._deadline = self._loop.call_later(self._limits.timeout, self._too_slow)

    def _end_head(self) -> None:
        """The head is complete (or the connection is done with): the deadline is off and
        its bytes are given back to the budget."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._budget.give(self._head_bytes)
        self._head_bytes = self._head_lines = 0

    def _too_slow(self) -> None:
        self._deadline = None
        if not self._refused and self.transport is not None:
            self._refuse(
                408,
                "HeaderTimeout",
                f"the request's headers did not arrive within {self._limits.timeout:g} s",
            )

    def _refuse(self, status: int, reason: str, message: str, retry_after: int = 0) -> None:
        """Answer with a JSON refusal and close. Not while an earlier request of the
        connection is still being answered: that connection is closed without a word."""
        self._refused = True
        self._end_head()
        self._on_refusal(status, reason)
        log.debug("refused a request's head: %d %s", status, reason)
        transport = self.transport
        if transport is None:
            return
        if self._request_in_progress or self._messages:
            self.force_close()
            return
        body = orjson.dumps({"reason": reason, "message": message})
        retry = f"Retry-After: {retry_after}\r\n" if retry_after else ""
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{retry}Connection: close\r\n\r\n"
        )
        transport.write(head.encode() + body)
        if transport.can_write_eof():
            transport.write_eof()
        self._loop.call_later(LINGER, self.force_close)


async def serve(
    runner: web.AppRunner,
    host: str,
    port: int,
    *,
    tls: ssl.SSLContext | None,
    limits: HeadLimits,
    on_refusal: OnRefusal,
) -> asyncio.AbstractServer:
    """Listen for ``runner``'s application (set up already) with the head limits. Close the
    returned server before the runner's cleanup."""
    loop = asyncio.get_running_loop()
    budget = _Budget(limits.budget)
    manager = runner.server
    assert manager is not None, "runner.setup() first"

    def connection() -> GuardedHandler:
        return GuardedHandler(
            manager,
            loop=loop,
            limits=limits,
            budget=budget,
            on_refusal=on_refusal,
            access_log=None,
            # The guard refuses first: aiohttp's own limits only back it up.
            max_line_size=limits.max_bytes,
            max_field_size=limits.max_bytes,
            max_headers=limits.max_headers + 10,
        )

    return await loop.create_server(
        connection,
        host,
        port,
        ssl=tls,
        ssl_handshake_timeout=limits.timeout if tls is not None else None,
        reuse_address=True,
        backlog=128,
    )


# ---------------------------------------------------------------------------------------
# TLS


def _stamp(path: str) -> tuple[int, int, int, int]:
    found = os.stat(path)
    return (found.st_dev, found.st_ino, found.st_mtime_ns, found.st_size)


class ReloadingCertificate:
    """The broker's TLS context, whose certificate and key are read again when their files
    change (cert-manager renews the certificate, the kubelet swaps the Secret volume's
    files): new connections get the new pair, open ones keep theirs. The files are looked
    at during a handshake, at most every ``check_every`` seconds; a pair that does not load
    (e.g. caught half-written) is logged and the last good one kept."""

    def __init__(self, cert: str, key: str, check_every: float = 1.0) -> None:
        self.cert, self.key = cert, key
        self.check_every = check_every
        self._stamps = (_stamp(cert), _stamp(key))
        self._checked = time.monotonic()
        self._failed: tuple[object, ...] | None = None
        self.current = self._load()
        #: The context to listen with: each handshake is moved to the current pair.
        self.context = self.current
        self.context.sni_callback = self._handshake

    def _load(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context

    def _handshake(
        self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
    ) -> None:
        try:
            self.check()
        except Exception:  # never fail a handshake over the check itself
            log.exception("checking the TLS certificate files failed")
        if connection.context is not self.current:
            connection.context = self.current

    def check(self) -> bool:
        """Reload when the files changed since the last load; True if it did."""
        now = time.monotonic()
        if now - self._checked < self.check_every:
            return False
        self._checked = now
        try:
            stamps = (_stamp(self.cert), _stamp(self.key))
        except OSError as error:
            log.warning("TLS certificate files not readable (%s); keeping the loaded one", error)
            return False
        if stamps == self._stamps:
            return False
        try:
            fresh = self._load()
        except (OSError, ssl.SSLError) as error:
            if self._failed != stamps:
                self._failed = stamps
                log.warning(
                    "TLS certificate %s changed but does not load (%s); keeping the loaded one",
                    self.cert,
                    error,
                )
            return False
        self.current, self._stamps, self._failed = fresh, stamps, None
        log.info("TLS certificate reloaded from %s", self.cert)
        return True
