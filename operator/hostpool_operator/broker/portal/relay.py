"""Desktops in the browser: the broker relays IronRDP's web client to the caller's own
assigned xrdp host (RDCleanPath over a WebSocket), hands out the one-use tickets the relay
takes, serves the web client's files and takes the page's first-frame timing.

Everything is checked before any connection to a host: the caller (cookie with the public
origin, or bearer), the pool (entitled, ``connection.web``), the ticket (this caller, this
pool, the caller's current assigned request by name and uid, unexpired, unused) and the
destination the client names (the assigned address and port, else refused). The host and
port come from the request, never from the client."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import re
import secrets
import socket
import ssl
import struct
import termios
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import WSMsgType, web

from ...access import rdcleanpath as rcp
from ...access import tickets
from ...access.connect import Answer, Caller, error, not_found
from ...access.views import PoolView, RequestView
from ...api import Phase
from .desktop import DesktopPage
from .liveness import BrowserLiveness, Due

if TYPE_CHECKING:
    from ..app import Broker

log = logging.getLogger(__name__)

#: The two npm packages served at /web-client/ (their top-level .js and .wasm files only).
PACKAGES = ("iron-remote-desktop", "iron-remote-desktop-rdp")
#: The largest WebSocket message taken from the browser (RDP PDUs are at most ~16 KiB).
MAX_MESSAGE = 1024 * 1024
#: Seconds for the first message, the host's TCP connect, its X.224 answer and TLS.
SETUP_TIMEOUT = 10.0
#: Seconds without a sign of the browser before the relay pings it, and after the ping
#: before it is taken for gone (what counts as a sign: liveness.py).
QUIET_SECONDS = 30.0
ANSWER_SECONDS = 30.0
#: Seconds between the relay's looks at the browser's signs.
LOOK_EVERY = 5.0
#: Bytes read from the host at once.
READ_SIZE = 64 * 1024
#: The first frame's timing the page may report (milliseconds), clamped to this.
MAX_FIRST_FRAME_MS = 120_000
_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.(?:js|wasm)$")
_CONTENT_TYPES = {".js": "text/javascript", ".wasm": "application/wasm"}


@dataclass(frozen=True)
class WebSettings:
    """``--web-client-dir`` (None: no browser desktops) and the tickets' secret."""

    client_dir: Path | None = None
    ticket_secret: bytes | None = None


def web_client_files(client_dir: Path) -> dict[str, Path]:
    """``package@version/file`` → the file, for the served packages' top-level .js and
    .wasm files (the web client's install, ``hack/portal/web-client.sh``)."""
    files: dict[str, Path] = {}
    for package in PACKAGES:
        root = client_dir / "node_modules" / "@devolutions" / package
        try:
            version = orjson.loads((root / "package.json").read_bytes())["version"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not isinstance(version, str) or not re.fullmatch(r"[0-9A-Za-z.+-]{1,40}", version):
            continue
        for path in sorted(root.iterdir()):
            if _FILE.match(path.name) and path.is_file():
                files[f"{package}@{version}/{path.name}"] = path
    return files


class WebDesktops:
    """The routes of browser desktops, sharing the broker's caller checks and caches."""

    def __init__(self, broker: Broker, settings: WebSettings) -> None:
        self.broker = broker
        self.metrics = broker.metrics
        self.files = web_client_files(settings.client_dir) if settings.client_dir else {}
        secret = settings.ticket_secret
        if secret is None:
            # One replica's own key: its tickets are good only on itself.
            secret = secrets.token_bytes(32)
        self.key = tickets.ticket_key(secret)
        self.used = tickets.UsedTickets()

    @property
    def enabled(self) -> bool:
        """Whether the web client is there to be served (else no browser desktops)."""
        return any(name.startswith(f"{PACKAGES[1]}@") for name in self.files)

    def module_url(self, package: str) -> str | None:
        """The URL of a package's main ES module (None when it is not served)."""
        for name in self.files:
            if name.startswith(f"{package}@") and name.endswith(f"/{package}.js"):
                return f"/web-client/{name}"
        return None

    def routes(self) -> list[web.RouteDef]:
        base = "/v1/namespaces/{namespace}/pools/{pool}/session"
        return [
            web.post(f"{base}/web-ticket", self.ticket),
            web.get(f"{base}/web", self.relay),
            web.post(f"{base}/web/first-frame", self.first_frame),
            web.get("/web-client/{package}/{file}", self.web_client),
            *DesktopPage(self).routes(),
        ]

    # ------------------------------------------------------------------ checks

    async def _checked(
        self, request: web.Request
    ) -> tuple[Caller, str, PoolView, RequestView | None]:
        """The caller, the namespace, the pool (entitled, web on, the client served) and
        the caller's placed request there (None: none); refusals raise."""
        from ..app import _RefusalError

        broker = self.broker
        caller = await broker._caller(request)
        namespace, pool_name = broker._names(request)
        broker._ready()
        pool = broker.directory.pools.get((namespace, pool_name))
        if pool is None or not pool.admits(caller.user, caller.groups):
            raise _RefusalError(not_found(namespace, pool_name))
        if not pool.connection.web:
            raise _RefusalError(
                error(404, "WebNotEnabled", f"{namespace}/{pool_name} is not opened in a browser")
            )
        if not self.enabled:
            raise _RefusalError(
                error(404, "WebClientMissing", "this broker does not serve the browser's client")
            )
        return caller, namespace, pool, self._placed(namespace, pool_name, caller)

    def _placed(self, namespace: str, pool: str, caller: Caller) -> RequestView | None:
        for view in self.broker.directory.mine(namespace, pool, caller.user):
            if view.live and view.phase is Phase.ASSIGNED and view.host and view.address:
                return view
        return None

    def _cross_site(self, request: web.Request) -> bool:
        """A cookie-authenticated WebSocket upgrade from another origin (cross-site
        WebSocket hijacking): the browser sends the cookie along whatever page opens it."""
        if request.headers.get("Authorization"):
            return False
        origin = request.headers.get("Origin")
        public = _public_origin(self.broker)
        return origin is None or public is None or origin != public

    # ------------------------------------------------------------------ tickets

    async def ticket(self, request: web.Request) -> web.Response:
        from ..app import _RefusalError

        try:
            caller, namespace, pool, placed = await self._checked(request)
        except _RefusalError as refusal:
            return self.broker._send(request, "web-ticket", refusal.answer)
        if placed is None:
            message = f"you have no placed session in {namespace}/{pool.name}"
            answer = error(409, "NoSession", message)
            return self.broker._send(request, "web-ticket", answer)
        ticket = tickets.Ticket(
            user=caller.user,
            namespace=namespace,
            pool=pool.name,
            request=placed.name,
            uid=placed.uid,
            expires=int(time.time()) + tickets.LIFETIME,
            id=secrets.token_urlsafe(16),
        )
        body = {
            "ticket": tickets.mint(self.key, ticket),
            "expiresIn": tickets.LIFETIME,
            "destination": f"{placed.address}:{pool.connection.port}",
            "user": caller.user,
        }
        answer = Answer(200, "OK", body, headers={"Cache-Control": "no-store"})
        return self.broker._send(request, "web-ticket", answer)

    def _take(
        self, pdu: rcp.Pdu, caller: Caller, namespace: str, pool: PoolView
    ) -> RequestView | str:
        """The caller's placed request to relay to, or why not (a refusal's reason). A
        ticket is used up once it is known to be this caller's, whatever comes after."""
        try:
            ticket = tickets.read(self.key, pdu.proxy_auth or "", time.time())
        except tickets.TicketError:
            return "TicketInvalid"
        if (ticket.user, ticket.namespace, ticket.pool) != (caller.user, namespace, pool.name):
            return "TicketNotYours"
        if not self.used.take(ticket, time.time()):
            return "TicketUsed"
        placed = self._placed(namespace, pool.name, caller)
        if placed is None or (placed.name, placed.uid) != (ticket.request, ticket.uid):
            return "SessionChanged"
        allowed = (f"{placed.address}:{pool.connection.port}", str(placed.address))
        if pdu.destination is not None and pdu.destination not in allowed:
            return "DestinationRefused"
        return placed

    # ------------------------------------------------------------------ the relay

    async def relay(self, request: web.Request) -> web.StreamResponse:
        from ..app import _RefusalError

        try:
            if self._cross_site(request):
                raise _RefusalError(
                    error(403, "CsrfRefused", "a WebSocket from another origin is refused")
                )
            caller, namespace, pool, _ = await self._checked(request)
        except _RefusalError as refusal:
            return self.broker._send(request, "web", refusal.answer)
        # No aiohttp heartbeat: its pong deadline misjudges a busy browser (liveness.py);
        # pump() pings and answers pings itself.
        ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE, autoping=False, autoclose=True)
        await ws.prepare(request)
        self.metrics.web_open.inc()
        started = time.perf_counter()
        outcome = "Closed"
        try:
            outcome = await self._serve(ws, ws_socket(request), caller, namespace, pool)
        except Exception:
            outcome = "Failed"
            log.exception("the desktop relay for %s failed", f"{namespace}/{pool.name}")
        finally:
            self.metrics.web_open.dec()
            self.metrics.web_relays.labels(outcome).inc()
            if not ws.closed:
                await ws.close()
        log.info(
            "web desktop %s/%s: %s after %.1fs",
            namespace,
            pool.name,
            outcome,
            time.perf_counter() - started,
        )
        return ws

    async def _serve(
        self,
        ws: web.WebSocketResponse,
        sock: socket.socket | None,
        caller: Caller,
        namespace: str,
        pool: PoolView,
    ) -> str:
        """The relay on an open WebSocket; its outcome (for the metrics and the log)."""
        first = await _first_pdu(ws)
        if first is None:
            return "NoRequest"
        try:
            pdu = rcp.decode(first)
            problem = rcp.request_problem(pdu)
        except rcp.RdCleanPathError:
            problem = "not an RDCleanPath request"
        if problem:
            await ws.send_bytes(rcp.error_response(400))
            return "BadRequest"
        placed = self._take(pdu, caller, namespace, pool)
        if isinstance(placed, str):
            status = 404 if placed == "SessionChanged" else 403
            await ws.send_bytes(rcp.error_response(status))
            return placed
        assert placed.address
        assert pdu.x224 is not None
        host = await _open_host(placed.address, pool.connection.port, pdu.x224)
        if isinstance(host, bytes):
            await ws.send_bytes(host)
            return "HostRefused"
        reader, writer, confirm, certs = host
        try:
            await ws.send_bytes(rcp.response(confirm, certs, placed.address))
            up = self.metrics.web_bytes.labels("to_host").inc
            down = self.metrics.web_bytes.labels("to_browser").inc
            ended = await pump(ws, sock, reader, writer, up, down)
        finally:
            writer.close()
        log.info("web desktop %s/%s: %s", namespace, pool.name, ended)
        return "Closed"

    # ------------------------------------------------------------------ first frame, files

    async def first_frame(self, request: web.Request) -> web.Response:
        from ..app import _RefusalError

        try:
            await self._checked(request)
            body = orjson.loads(await request.read())
            ms = body.get("ms") if isinstance(body, dict) else None
            if not isinstance(ms, int | float) or isinstance(ms, bool) or ms != ms:
                raise _RefusalError(error(400, "InvalidBody", 'the body must be {"ms": N}'))
        except _RefusalError as refusal:
            return self.broker._send(request, "web-first-frame", refusal.answer)
        except orjson.JSONDecodeError:
            answer = error(400, "InvalidBody", "the body is not JSON")
            return self.broker._send(request, "web-first-frame", answer)
        seconds = min(max(float(ms), 0.0), MAX_FIRST_FRAME_MS) / 1000
        self.metrics.web_first_frame.observe(seconds)
        return self.broker._send(request, "web-first-frame", Answer(200, "OK", {"ok": True}))

    async def web_client(self, request: web.Request) -> web.StreamResponse:
        name = f"{request.match_info['package']}/{request.match_info['file']}"
        path = self.files.get(name)
        if path is None:
            return self.broker._send(request, "other", error(404, "NotFound", "no such file"))
        headers = {
            # The version is in the URL: a new client is a new URL.
            "Cache-Control": "public, max-age=31536000, immutable",
            "Content-Type": _CONTENT_TYPES[path.suffix],
            "X-Content-Type-Options": "nosniff",
        }
        return web.FileResponse(path, headers=headers)


def _public_origin(broker: Broker) -> str | None:
    """The portal's public origin (scheme://host[:port]); None without a portal."""
    return broker.portal.public_origin if broker.portal is not None else None


async def _first_pdu(ws: web.WebSocketResponse) -> bytes | None:
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
) -> str:
    """Both ways until either side ends (or the browser shows no sign of life), auto-logon
    set on the Client Info PDU; the bytes each way counted. Which side ended, and how."""
    patcher = rcp.ClientInfoPatcher()
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

    async def host_to_browser() -> None:
        while data := await reader.read(READ_SIZE):
            count_down(len(data))
            await ws.send_bytes(data)
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


HostLink = tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes, tuple[bytes, ...]]


async def _open_host(address: str, port: int, x224: bytes) -> HostLink | bytes:
    """TCP to the host, the client's X.224 request, the host's confirm, then TLS with the
    host (its certificate is not checked here: it goes to the client, as RDCleanPath
    intends); or the RDCleanPath error PDU to answer."""
    try:
        async with asyncio.timeout(SETUP_TIMEOUT):
            reader, writer = await asyncio.open_connection(address, port)
    except (OSError, TimeoutError) as exc:
        log.warning("the relay could not reach %s:%d: %s", address, port, exc)
        return rcp.error_response(502)
    try:
        async with asyncio.timeout(SETUP_TIMEOUT):
            writer.write(x224)
            header = await reader.readexactly(4)
            length = rcp.tpkt_length(header)
            if length is None or length > 1024:
                raise rcp.RdCleanPathError("bad X.224 answer")
            confirm = header + await reader.readexactly(length - 4)
            if rcp.selected_protocol(confirm) != rcp.PROTOCOL_SSL:
                writer.close()
                return rcp.error_response(x224=confirm)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            await writer.start_tls(context)
    except (OSError, TimeoutError, asyncio.IncompleteReadError, rcp.RdCleanPathError) as exc:
        log.warning("the relay's set-up with %s:%d failed: %r", address, port, exc)
        writer.close()
        return rcp.error_response(502)
    tls = writer.get_extra_info("ssl_object")
    cert = tls.getpeercert(binary_form=True) if tls is not None else None
    return reader, writer, confirm, (cert,) if cert else ()


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
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await task
