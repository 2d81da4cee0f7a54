"""The broker's HTTP application: every wing's routes behind one :class:`~.gate.Gate`.

- the session API (``sessions``): ``/v1/pools``, connect, end a session;
- live updates (``live``): ``/v1/events``;
- sign-in (``signin``), with a portal: ``/auth/...`` and the cookie session;
- pages (``pages``), with a portal: the portal page ``/`` and the desktop page;
- the desktop relay (``relay``): web tickets, the RDCleanPath WebSocket, the web client;
- health on the API's port, metrics on an address of their own."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..access.ratelimit import RateLimit
from .directory import Directory
from .gate import Gate
from .live import LiveUpdates
from .metrics import BrokerMetrics
from .oidc import TokenVerifier
from .pages.desktop import DesktopPage
from .pages.portal import PortalPage
from .relay.routes import WebDesktops, WebSettings
from .sessions import Sessions, SessionSettings
from .signin.flow import Portal
from .signon import SignOn, SignOnSettings
from .uid_records import UidRecords

MAX_BODY = 16 * 1024


@dataclass
class BrokerSettings:
    connect_timeout: float = 30.0
    #: An agent whose figures are older than this (seconds) is not asked to log users off.
    agent_stale_after: float = 120.0
    rate: float = 5.0
    burst: int = 20
    #: Name the user in each connect's log line (--log-users); off, a user's name is not
    #: logged at all.
    log_users: bool = False
    #: Desktops in the browser: the web client's files and the tickets' secret.
    web: WebSettings = field(default_factory=WebSettings)
    #: Single sign-on: the logon key and the credentials' lifetime.
    signon: SignOnSettings = field(default_factory=SignOnSettings)
    #: Where the uids the broker allocates are recorded (None: it allocates none).
    uid_namespace: str | None = None


class Broker:
    """The wings and what they share."""

    def __init__(
        self,
        directory: Directory,
        verifier: TokenVerifier,
        settings: BrokerSettings,
        metrics: BrokerMetrics | None = None,
        portal: Portal | None = None,
    ) -> None:
        self.directory = directory
        self.verifier = verifier
        self.portal = portal
        if portal is not None:
            portal.groups_named = directory.groups_named
        self.settings = settings
        self.metrics = metrics or BrokerMetrics()
        limit = RateLimit(settings.rate, settings.burst)
        self.gate = Gate(directory, verifier, limit, self.metrics, portal)
        records = (
            UidRecords(directory.client, settings.uid_namespace) if settings.uid_namespace else None
        )
        self.signon = SignOn(settings.signon, records, self.metrics)
        self.sessions = Sessions(
            self.gate,
            directory,
            self.signon,
            self.metrics,
            SessionSettings(
                connect_timeout=settings.connect_timeout,
                agent_stale_after=settings.agent_stale_after,
                log_users=settings.log_users,
            ),
        )
        self.live = LiveUpdates(self.gate, directory, self.metrics)
        self.desktops = WebDesktops(self.gate, directory, self.signon, self.metrics, settings.web)
        directory.web_served = self.desktops.client.enabled

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self.gate.errors])
        app.add_routes(self.sessions.routes())
        app.add_routes(
            [web.get("/healthz", self.healthz), web.get("/readyz", self.readyz)],
        )
        # Live updates always: bearer callers use them too.
        app.add_routes(self.live.routes())
        app.on_shutdown.append(self.live.close)
        app.add_routes(self.desktops.routes())
        if self.portal is not None:
            app.add_routes(self.portal.routes())
            app.on_response_prepare.append(self.portal.on_response_prepare)
            app.add_routes(PortalPage(self.directory, self.portal).routes())
            app.add_routes(DesktopPage(self.directory, self.portal, self.desktops.client).routes())
        return app

    def metrics_app(self) -> web.Application:
        """``/metrics``, served on an address of its own (--metrics-listen): not on the
        API's port, where anyone who reaches the broker could read them."""
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self.gate.errors])
        app.add_routes([web.get("/metrics", self.metrics_page)])
        return app

    # ------------------------------------------------------------------ health, metrics

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        ready = self.directory.ready and self.verifier.ready
        return web.json_response(
            {"ready": ready, "watches": self.directory.ready, "issuerKeys": self.verifier.ready},
            status=200 if ready else 503,
        )

    async def metrics_page(self, request: web.Request) -> web.Response:
        self.metrics.waiting.set(self.directory.waiting)
        self.metrics.skipped.set(self.directory.skipped)
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
