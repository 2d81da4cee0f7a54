"""Desktops in the browser: the broker relays IronRDP's web client to the caller's own
assigned xrdp host (RDCleanPath over a WebSocket), hands out the one-use tickets the relay
takes, serves the web client's files and takes the page's first-frame timing.

Everything is checked before any connection to a host: the caller (cookie with the public
origin, or bearer), the pool (entitled, ``connection.web``), the ticket (``access.tickets``:
this caller, this pool, the caller's current assigned request by name and uid, unexpired,
unused in this replica and, recorded in the cluster, in any other) and the destination the
client names (the assigned address and port, else refused). The host and port come from the
request, never from the client. A relay opened with a portal session ends with it: at its
end, or when it is signed out or its refresh refused in any replica."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import socket
import time
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
from aiohttp import WSCloseCode, web

from ...access import tickets
from ...access.connect import Answer, Caller, error
from ...access.views import PoolView, RequestView
from ...api import Phase
from ...api.request import ConnectOutcome, ConnectPhase
from ...diagnostics import connects
from .. import connect_records
from ..directory import Directory
from ..gate import Gate, RefusalError
from ..metrics import BrokerMetrics
from ..signin.flow import PortalSession
from ..signin.sign_outs import SignOuts
from ..signon import SignOn
from . import channels
from . import rdcleanpath as rcp
from .client_files import WebClient
from .host import HostLink, HostRefused, not_trusted, open_host
from .open_desktops import PER_USER, TOTAL, OpenDesktops
from .pump import first_pdu, pump, ws_socket
from .ticket_ledger import TicketLedger

log = logging.getLogger(__name__)

#: The largest WebSocket message taken from the browser (RDP PDUs are at most ~16 KiB).
MAX_MESSAGE = 1024 * 1024
#: The first frame's timing the page may report (milliseconds), clamped to this.
MAX_FIRST_FRAME_MS = 120_000
#: The relay's ``keyboardLayout`` query parameter: an input locale identifier in hex (041D,
#: 0x0000041D), sent to the host in the Client Core Data.
_LAYOUT = re.compile(r"(?:0[xX])?([0-9a-fA-F]{1,8})")


@dataclass(frozen=True)
class WebSettings:
    """``--web-client-dir`` (None: no browser desktops) and the tickets' secret."""

    client_dir: Path | None = None
    ticket_secret: bytes | None = None
    #: Browser desktops open at once through this replica: per user, and in all.
    max_per_user: int = PER_USER
    max_total: int = TOTAL


@dataclass(frozen=True)
class _Opened:
    """A checked call on a pool's desktop: who, where, their placed request (None: none)
    and the portal session it came with (None: a bearer token)."""

    caller: Caller
    namespace: str
    pool: PoolView
    placed: RequestView | None
    session: PortalSession | None = None
    #: The keyboard layout the browser asks for (None: the client's own, 0).
    keyboard_layout: int | None = None


def keyboard_layout(request: web.Request) -> int | None:
    """The keyboard layout the relay's URL asks for (``?keyboardLayout=041D``); None when it
    names none, or not in hex (then the client's own goes on)."""
    match = _LAYOUT.fullmatch(request.query.get("keyboardLayout", ""))
    return int(match.group(1), 16) if match else None


class WebDesktops:
    """The routes of browser desktops, behind the broker's gate."""

    def __init__(
        self,
        gate: Gate,
        directory: Directory,
        signon: SignOn,
        metrics: BrokerMetrics,
        settings: WebSettings,
    ) -> None:
        self.gate = gate
        self.directory = directory
        self.signon = signon
        self.metrics = metrics
        self.client = WebClient(settings.client_dir)
        secret = settings.ticket_secret
        if secret is None:
            # One replica's own key: its tickets are good only on itself.
            secret = secrets.token_bytes(32)
        self.key = tickets.ticket_key(secret)
        self.used = tickets.UsedTickets()
        self.ledger = TicketLedger(directory.client)
        self.open = OpenDesktops(settings.max_per_user, settings.max_total)
        #: Connect figures being written (kept so the tasks are not collected mid-write).
        self._figures: set[asyncio.Task[bool]] = set()

    def routes(self) -> list[web.RouteDef]:
        base = "/v1/namespaces/{namespace}/pools/{pool}/session"
        return [
            web.post(f"{base}/web-ticket", self.ticket),
            web.get(f"{base}/web", self.relay),
            web.post(f"{base}/web/first-frame", self.first_frame),
            *self.client.routes(self.gate),
        ]

    # ------------------------------------------------------------------ checks

    async def _opened(self, request: web.Request) -> _Opened:
        """The caller, the namespace, the pool (entitled, web on, the client served) and
        the caller's placed request there; refusals raise."""
        gate = self.gate
        caller = await gate.caller(request)
        namespace, pool_name = gate.names(request)
        gate.ready()
        pool = gate.entitled(namespace, pool_name, caller)
        if not pool.connection.web:
            raise RefusalError(
                error(404, "WebNotEnabled", f"{namespace}/{pool_name} is not opened in a browser")
            )
        if not self.client.enabled:
            raise RefusalError(
                error(404, "WebClientMissing", "this broker does not serve the browser's client")
            )
        session = None
        if gate.portal is not None and "Authorization" not in request.headers:
            session = await gate.portal.session(request)  # the one gate.caller read
        placed = self._placed(namespace, pool_name, caller)
        return _Opened(caller, namespace, pool, placed, session)

    def _placed(self, namespace: str, pool: str, caller: Caller) -> RequestView | None:
        for view in self.directory.mine(namespace, pool, caller.user):
            if view.live and view.phase is Phase.ASSIGNED and view.host and view.address:
                return view
        return None

    def _cross_site(self, request: web.Request) -> bool:
        """A cookie-authenticated WebSocket upgrade from another origin (cross-site
        WebSocket hijacking): the browser sends the cookie along whatever page opens it."""
        if request.headers.get("Authorization"):
            return False
        origin = request.headers.get("Origin")
        portal = self.gate.portal
        public = portal.public_origin if portal is not None else None
        return origin is None or public is None or origin != public

    # ------------------------------------------------------------------ tickets

    async def ticket(self, request: web.Request) -> web.Response:
        async def minted() -> Answer:
            opened = await self._opened(request)
            placed, pool = opened.placed, opened.pool
            if placed is None:
                message = f"you have no placed session in {opened.namespace}/{pool.name}"
                return error(409, "NoSession", message)
            ticket = tickets.Ticket(
                user=opened.caller.user,
                namespace=opened.namespace,
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
                "user": opened.caller.user,
            }
            return Answer(200, "OK", body, headers={"Cache-Control": "no-store"})

        return await self.gate.answer(request, "web-ticket", minted)

    # ------------------------------------------------------------------ the relay

    async def relay(self, request: web.Request) -> web.StreamResponse:
        try:
            if self._cross_site(request):
                raise RefusalError(
                    error(403, "CsrfRefused", "a WebSocket from another origin is refused")
                )
            opened = replace(await self._opened(request), keyboard_layout=keyboard_layout(request))
            self._room_for(opened.caller.user)
        except RefusalError as refusal:
            return self.gate.send(request, "web", refusal.answer)
        where = f"{opened.namespace}/{opened.pool.name}"
        user = opened.caller.user
        self.open.opened(user)
        try:
            return await self._relay(request, opened, where)
        finally:
            self.open.closed(user)

    def _room_for(self, user: str) -> None:
        """Refuses (before the WebSocket opens) a desktop over this replica's limits."""
        why = self.open.refusal(user)
        if why == "TooManyDesktops":
            message = (
                f"you have {self.open.per_user} desktops open in the browser already: "
                "close one first"
            )
            raise RefusalError(error(429, why, message, 5))
        if why is not None:
            message = "this broker relays as many desktops as it may: try again shortly"
            raise RefusalError(error(503, why, message, 5))

    async def _relay(self, request: web.Request, opened: _Opened, where: str) -> web.StreamResponse:
        # No aiohttp heartbeat: its pong deadline misjudges a busy browser (liveness.py);
        # pump() pings and answers pings itself.
        ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE, autoping=False, autoclose=True)
        await ws.prepare(request)
        self.metrics.web_open.inc()
        started = time.perf_counter()
        outcome = "Closed"
        try:
            serving = self._serve(ws, ws_socket(request), opened)
            outcome = await self._while_signed_in(serving, opened.session)
        except Exception:
            outcome = "Failed"
            log.exception("the desktop relay for %s failed", where)
        finally:
            self.metrics.web_open.dec()
            self.metrics.web_relays.labels(outcome).inc()
            if not ws.closed:
                ended = outcome in ("SignedOut", "SessionExpired")
                code = WSCloseCode.POLICY_VIOLATION if ended else WSCloseCode.OK
                await ws.close(code=code, message=outcome.encode() if ended else b"")
        log.info("web desktop %s: %s after %.1fs", where, outcome, time.perf_counter() - started)
        return ws

    @property
    def _sign_outs(self) -> SignOuts | None:
        portal = self.gate.portal
        return portal.sign_outs if portal is not None else None

    async def _while_signed_in(
        self, serving: Coroutine[Any, Any, str], session: PortalSession | None
    ) -> str:
        """The relay's outcome, or ``SignedOut``/``SessionExpired`` when the portal session
        that opened it ended first (then the relay is stopped: no byte more either way)."""
        sign_outs = self._sign_outs
        if session is None or sign_outs is None:
            return await serving
        relay = asyncio.ensure_future(serving)
        signed_out = asyncio.Event()
        forget = sign_outs.on_end(session.sid, signed_out.set)
        waiting = asyncio.ensure_future(signed_out.wait())
        try:
            left = max(0.0, session.expires_at - time.time())
            done, _ = await asyncio.wait(
                {relay, waiting}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            if relay in done:
                return relay.result()
            return "SignedOut" if signed_out.is_set() else "SessionExpired"
        finally:
            forget()
            waiting.cancel()
            if not relay.done():
                relay.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await relay

    async def _admit(
        self, ws: web.WebSocketResponse, opened: _Opened
    ) -> tuple[tickets.Admitted, bytes] | str:
        """The browser's first PDU read and its ticket admitted and taken: the admission and
        the X.224 request to pass on, or the outcome of a refusal (answered already)."""
        first = await first_pdu(ws)
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
        pool = opened.pool
        presented = tickets.Presented(
            text=pdu.proxy_auth or "",
            user=opened.caller.user,
            namespace=opened.namespace,
            pool=pool.name,
            port=pool.connection.port,
            # Looked up again: the request may have changed since the upgrade.
            placed=self._placed(opened.namespace, pool.name, opened.caller),
            destination=pdu.destination,
        )
        admitted = tickets.admit(self.key, presented, time.time(), self.used)
        if isinstance(admitted, str):
            status = 404 if admitted == "SessionChanged" else 403
            await ws.send_bytes(rcp.error_response(status))
            return admitted
        taken = await self.ledger.take(admitted.ticket, admitted.placed)
        if taken != "Taken":  # used on another replica, or its use cannot be recorded
            await ws.send_bytes(rcp.error_response(403 if taken == "TicketUsed" else 503))
            if taken == "TicketUsed":
                used = "the one-time ticket of this desktop had been used already"
                self._failed(opened, admitted.placed, ConnectPhase.BROKER, taken, used)
            return taken
        assert pdu.x224 is not None
        return admitted, pdu.x224

    async def _serve(
        self, ws: web.WebSocketResponse, sock: socket.socket | None, opened: _Opened
    ) -> str:
        """The relay on an open WebSocket; its outcome (for the metrics and the log)."""
        admission = await self._admit(ws, opened)
        if isinstance(admission, str):
            return admission
        admitted, x224 = admission
        pool = opened.pool
        placed = admitted.placed
        assert placed.address
        # The host proves who it is before a single sign-on credential is made for it.
        linking = time.perf_counter()
        host = await self._trusted_host(opened.namespace, placed, pool.connection.port, x224)
        if isinstance(host, HostRefused):
            await ws.send_bytes(host.pdu)
            refused = f"the relay did not take host {placed.host}"
            self._failed(opened, placed, ConnectPhase.TRANSPORT, host.outcome, refused)
            return host.outcome
        transport = time.perf_counter() - linking
        self._keep(opened.namespace, placed.name, {ConnectPhase.TRANSPORT: transport})
        reader, writer, confirm, certs = host
        try:
            patcher = await self._patcher(opened, placed)
            if isinstance(patcher, Answer):
                await ws.send_bytes(rcp.error_response(patcher.status))
                return patcher.reason
            if not pool.connection.clipboard_allowed:
                # Whatever the page asks for: a changed page cannot open the clipboard either.
                patcher.withheld = frozenset({channels.CLIPBOARD})
            await ws.send_bytes(rcp.response(confirm, certs, placed.address))
            up = self.metrics.web_bytes.labels("to_host").inc
            down = self.metrics.web_bytes.labels("to_browser").inc
            ended = await pump(ws, sock, reader, writer, up, down, patcher)
        finally:
            writer.close()
        if patcher.refusal is not None:
            # Before the host saw a logon: the browser's client is not the page's own.
            log.warning(
                "web desktop %s/%s: logon refused for %s: %s",
                opened.namespace,
                pool.name,
                opened.caller.user,
                patcher.refusal,
            )
            return "LogonRefused"
        if patcher.withheld_asked:
            log.warning(
                "web desktop %s/%s: %s's client asked for the clipboard, which the pool does "
                "not allow: withheld",
                opened.namespace,
                pool.name,
                opened.caller.user,
            )
        log.info("web desktop %s/%s: %s", opened.namespace, pool.name, ended)
        return "Closed"

    async def _trusted_host(
        self, namespace: str, placed: RequestView, port: int, x224: bytes
    ) -> HostLink | HostRefused:
        """The link to the placed request's host, which must present the certificate its
        SessionHost publishes; a host that publishes none is refused before any connection."""
        assert placed.address
        name = f"{namespace}/{placed.host}"
        view = self.directory.hosts.get((namespace, placed.host or ""))
        sha256 = view.rdp_certificate_sha256 if view is not None else None
        if sha256 is None:
            why = "its SessionHost publishes no RDP certificate (status.agent.rdpCertificateSha256)"
            return not_trusted(name, why)
        return await open_host(placed.address, port, x224, host=name, sha256=sha256)

    async def _patcher(
        self, opened: _Opened, placed: RequestView
    ) -> rcp.ClientInfoPatcher | Answer:
        """What the browser's logon becomes: on a single sign-on pool the caller's own, with a
        fresh one-time credential (or the refusal); elsewhere the browser's, as long as it
        names the caller."""
        user, layout = opened.caller.user, opened.keyboard_layout
        if not opened.pool.connection.single_sign_on:
            return rcp.ClientInfoPatcher(user=user, keyboard_layout=layout)
        grant = await self.signon.grant(opened.caller, placed)
        if isinstance(grant, Answer):
            return grant
        password, _ = self.signon.mint(grant)
        return rcp.ClientInfoPatcher(logon=(user, password), keyboard_layout=layout)

    # ------------------------------------------------------------------ first frame

    def _failed(
        self, opened: _Opened, placed: RequestView, phase: ConnectPhase, reason: str, message: str
    ) -> None:
        """The connect under way on the request failed here (written off the answer's path)."""
        ending = connects.Ending(ConnectOutcome.FAILED, phase, reason, message)
        client = self.directory.client
        self._spawn(connect_records.fail(client, opened.namespace, placed.name, ending))

    def _spawn(self, write: Coroutine[Any, Any, bool]) -> None:
        task = asyncio.create_task(write)
        self._figures.add(task)
        task.add_done_callback(self._figures.discard)

    def _keep(self, namespace: str, request: str, phases: dict[ConnectPhase, float]) -> None:
        """Write the broker's phases on the request's connect under way, off the desktop's
        path (a write is never waited for before the desktop's next byte)."""
        self._spawn(connect_records.record(self.directory.client, namespace, request, phases))

    async def first_frame(self, request: web.Request) -> web.Response:
        async def taken() -> Answer:
            opened = await self._opened(request)
            try:
                body = orjson.loads(await request.read())
            except orjson.JSONDecodeError:
                return error(400, "InvalidBody", "the body is not JSON")
            ms = body.get("ms") if isinstance(body, dict) else None
            if not isinstance(ms, int | float) or isinstance(ms, bool) or ms != ms:
                return error(400, "InvalidBody", 'the body must be {"ms": N}')
            seconds = min(max(float(ms), 0.0), MAX_FIRST_FRAME_MS) / 1000
            self.metrics.web_first_frame.observe(seconds)
            if opened.placed is not None:
                # The page's own figure, bounded, and only ever its own phase.
                self._keep(
                    opened.namespace, opened.placed.name, {ConnectPhase.FIRST_FRAME: seconds}
                )
            return Answer(200, "OK", {"ok": True})

        return await self.gate.answer(request, "web-first-frame", taken)
