"""The relay's traffic once a host link is open: the browser's first message (the
RDCleanPath request), then both ways until either side ends or the browser shows no sign of
life (``liveness``); the auto-logon flag set on the Client Info PDU on the way, and what the
host sends made fit for the web client (``rdcleanpath.HostStream``)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import struct
import termios
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import WSMsgType, web

from . import rdcleanpath as rcp
from .liveness import BrowserLiveness, Due

#: Seconds for the first message.
SETUP_TIMEOUT = 10.0
#: Seconds without a sign of the browser before the relay pings it, and after the ping
#: before it is taken for gone (what counts as a sign: liveness.py).
QUIET_SECONDS = 30.0
ANSWER_SECONDS = 30.0
#: Seconds between the relay's looks at the browser's signs.
LOOK_EVERY = 5.0
#: Bytes read from the host at once.
READ_SIZE = 64 * 1024


async def first_pdu(ws: web.WebSocketResponse) -> bytes | None:
    """The client's RDCleanPath request (whole, possibly over several messages), or None
    (nothing in time, not binary, too large)."""
    buffer = b""
    try:
        async with asyncio.timeout(SETUP_TIMEOUT):
            while True:
                message = await ws.receive()
                if message.type is WSMsgType.PING:
                    await ws.pong(message.data)
                    continue
                if message.type is WSMsgType.PONG:
                    continue
                if message.type is not WSMsgType.BINARY:
                    return None
                buffer += message.data
                size = rcp.total_length(buffer)
                if size is not None and len(buffer) >= size:
                    return buffer if len(buffer) == size else None
    except (TimeoutError, rcp.RdCleanPathError):
        return None


async def pump(
    ws: web.WebSocketResponse,
    sock: socket.socket | None,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    count_up: Callable[[int], None],
    count_down: Callable[[int], None],
    patcher: rcp.ClientInfoPatcher,
) -> str:
    """Both ways until either side ends (or the browser shows no sign of life), the Client
    Info PDU through ``patcher``; the bytes each way counted. Which side ended, and how."""
    liveness = BrowserLiveness(time.monotonic(), QUIET_SECONDS, ANSWER_SECONDS)

    async def browser_to_host() -> None:
        async for message in ws:
            liveness.sign(time.monotonic())
            if message.type is WSMsgType.PING:
                await ws.pong(message.data)
                continue
            if message.type is not WSMsgType.BINARY:
                if message.type is WSMsgType.TEXT:
                    return  # RDP travels as binary only
                continue
            data = patcher.feed(message.data)
            count_up(len(message.data))
            if data:
                writer.write(data)
                await writer.drain()

    # What the host sends, made fit for the web client (rdcleanpath.HostStream: one PDU a
    # message at the start, xrdp's short Deactivate All made whole).
    splitter = rcp.HostStream()

    async def host_to_browser() -> None:
        while data := await reader.read(READ_SIZE):
            count_down(len(data))
            for message in splitter.feed(data):
                await ws.send_bytes(message)
            liveness.sign(time.monotonic())

    async def watch_browser() -> None:
        while True:
            await asyncio.sleep(LOOK_EVERY)
            now = time.monotonic()
            liveness.queue(now, send_queue(sock))
            due = liveness.due(now)
            if due is Due.GONE:
                raise BrowserGoneError(
                    f"no sign of the browser for {now - liveness.last_sign:.0f} s, "
                    "a ping unanswered"
                )
            if due is Due.PING:
                liveness.pinged(now)
                # A ping behind a backed-up stream may wait for room; the answer's clock runs.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(ANSWER_SECONDS):
                        await ws.ping()

    first, error = await _first_ends(browser_to_host, host_to_browser, watch_browser)
    side = "the host" if first == 1 else "the browser"
    close = f", close code {ws.close_code}" if ws.close_code is not None else ""
    problem = error or (repr(ws.exception())[:200] if ws.exception() else "")
    return f"{side} ended{close}" + (f" ({problem})" if problem else "")


class BrowserGoneError(Exception):
    """The browser showed no sign of life (liveness.py)."""


def ws_socket(request: web.Request) -> socket.socket | None:
    """The upgraded request's TCP socket (None where the transport has none)."""
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    return sock if isinstance(sock, socket.socket) else None


def send_queue(sock: socket.socket | None) -> int | None:
    """Bytes in the socket's send queue not yet acknowledged by the other side (Linux's
    SIOCOUTQ), or None where it cannot be read."""
    if sock is None:
        return None
    try:
        answer = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (OSError, ValueError):
        return None
    return int(struct.unpack("i", answer)[0])


async def _first_ends(*parts: Callable[[], Coroutine[Any, Any, None]]) -> tuple[int, str]:
    """Runs the parts until the first ends (or fails); the others are cancelled. Which part
    ended first, and its error ('' when none)."""
    tasks = [asyncio.create_task(part()) for part in parts]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        first = next(i for i, task in enumerate(tasks) if task in done)
        error = tasks[first].exception()
        return first, "" if error is None else repr(error)[:200]
    finally:
        for task in tasks:
            task.cancel()
        # Every part's end collected, the first one's error too (said above, never raised:
        # a refused logon is an outcome, not a failure of the relay).
        await asyncio.gather(*tasks, return_exceptions=True)
