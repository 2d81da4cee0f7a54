"""The broker's HTTP API (aiohttp): ``/v1/pools``, connect, end a session; health and
metrics. Each handler gathers (token, caches), asks the pure decisions in
``hostpool_operator.access`` and applies the answer (a request created, deleted or told to
log off). Every error is JSON ``{"reason", "message"}``; nothing unexpected reaches a caller
as a stack trace, and no token reaches the log."""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..access import connect as decisions
from ..access.connect import Answer, Caller, error
from ..access.names import is_namespace, is_object_name
from ..access.ratelimit import RateLimit
from ..access.views import RequestView
from ..api.timestamps import rfc3339
from ..api.vocabulary import REQUESTS
from ..kube.errors import ApiError, ApiTransportError
from .directory import Directory
from .metrics import BrokerMetrics
from .oidc import InvalidTokenError, TokenVerifier
from .portal.page import PortalPage
from .portal.relay import WebDesktops, WebSettings
from .portal.signin import SAFE_METHODS, Portal

log = logging.getLogger(__name__)

#: Label on every request the broker creates.
BROKER_LABEL = "hostpool.io/broker"
MAX_BODY = 16 * 1024
CONNECT_FIELDS = frozenset({"protocol"})


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


class _RefusalError(Exception):
    """Ends a handler early with this answer."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.reason)
        self.answer = answer


class Broker:
    """The handlers and what they share."""

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
        #: The portal's sign-in and cookie sessions (None: bearer tokens only).
        self.portal = portal
        self.settings = settings
        self.metrics = metrics or BrokerMetrics()
        self.limit = RateLimit(settings.rate, settings.burst)
        self.desktops = WebDesktops(self, settings.web)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._errors])
        app.add_routes(
            [
                web.get("/v1/pools", self.pools),
                web.post("/v1/namespaces/{namespace}/pools/{pool}/connect", self.connect),
                web.delete("/v1/namespaces/{namespace}/pools/{pool}/session", self.end_session),
                web.get("/healthz", self.healthz),
                web.get("/readyz", self.readyz),
            ]
        )
        app.add_routes(self.desktops.routes())
        if self.portal is not None:
            app.add_routes(self.portal.routes())
            app.on_response_prepare.append(self.portal.on_response_prepare)
        PortalPage(self).install(app)
        return app

    def metrics_app(self) -> web.Application:
        """``/metrics``, served on an address of its own (--metrics-listen): not on the
        API's port, where anyone who reaches the broker could read them."""
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._errors])
        app.add_routes([web.get("/metrics", self.metrics_page)])
        return app

    # ------------------------------------------------------------------ plumbing

    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """aiohttp's own refusals (unknown path, wrong method, body too large) and anything
        unexpected become JSON answers; the unexpected is logged with its traceback, never
        sent."""
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except web.HTTPException as exc:
            reason = {
                404: "NotFound",
                405: "MethodNotAllowed",
                413: "BodyTooLarge",
            }.get(exc.status, exc.reason.replace(" ", ""))
            answer = error(exc.status, reason, exc.reason)
            return self._send(request, "other", answer)
        except Exception:
            log.exception("%s %s failed", request.method, printable(request.path))
            return self._send(request, "other", error(500, "InternalError", "the broker failed"))

    def _send(self, request: web.Request, endpoint: str, answer: Answer) -> web.Response:
        self.metrics.answers.labels(endpoint, str(answer.status), answer.reason).inc()
        headers = dict(answer.headers)
        if answer.retry_after is not None:
            headers["Retry-After"] = str(jittered(answer.retry_after, random.random()))
        if answer.status == 401:
            headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
        if answer.rdp is not None and "application/x-rdp" in request.headers.get("Accept", ""):
            pool = request.match_info.get("pool", "pool")
            headers["Content-Disposition"] = f'attachment; filename="{pool}.rdp"'
            return web.Response(
                status=answer.status,
                body=answer.rdp.encode(),
                content_type="application/x-rdp",
                headers=headers,
            )
        return web.Response(
            status=answer.status,
            body=orjson.dumps(answer.body),
            content_type="application/json",
            headers=headers,
        )

    async def _caller(self, request: web.Request) -> Caller:
        if self.portal is not None and "Authorization" not in request.headers:
            caller = await self._cookie_caller(request, self.portal)
        else:
            try:
                caller = await self.verifier.verify(request.headers.get("Authorization"))
            except InvalidTokenError as exc:
                raise _RefusalError(error(401, "Unauthorized", str(exc))) from None
        wait = self.limit.take(caller.user, time.monotonic())
        if wait > 0:
            raise _RefusalError(
                error(429, "TooManyRequests", "too many calls; slow down", max(1, round(wait)))
            )
        return caller

    async def _cookie_caller(self, request: web.Request, portal: Portal) -> Caller:
        """The caller of the portal's session cookie; a change (any method but GET/HEAD)
        also needs the session's CSRF token and the portal's own origin."""
        session = await portal.session(request)
        if session is None:
            raise _RefusalError(error(401, "Unauthorized", "no bearer token or portal session"))
        if request.method not in SAFE_METHODS and not portal.csrf_ok(request, session):
            raise _RefusalError(
                error(403, "CsrfRefused", "a change needs the page's CSRF token and origin")
            )
        return session.caller

    def _names(self, request: web.Request) -> tuple[str, str]:
        namespace, pool = request.match_info["namespace"], request.match_info["pool"]
        if not is_namespace(namespace):
            raise _RefusalError(error(400, "InvalidName", "namespace: not a valid namespace name"))
        if not is_object_name(pool):
            raise _RefusalError(error(400, "InvalidName", "pool: not a valid object name"))
        if not self.directory.serves(namespace):
            raise _RefusalError(decisions.not_found(namespace, pool))
        return namespace, pool

    def _ready(self) -> None:
        if not self.directory.ready:
            raise _RefusalError(error(503, "NotReady", "the broker is still starting", 1))

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

    # ------------------------------------------------------------------ /v1/pools

    async def pools(self, request: web.Request) -> web.Response:
        try:
            caller = await self._caller(request)
            self._ready()
        except _RefusalError as refusal:
            return self._send(request, "pools", refusal.answer)
        listed = self.directory.listing(caller.user, caller.groups)
        return self._send(request, "pools", Answer(200, "OK", {"pools": listed}))

    # ------------------------------------------------------------------ connect

    async def connect(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        user = "-"
        try:
            caller = await self._caller(request)
            user = caller.user
            namespace, pool_name = self._names(request)
            await self._connect_body(request)
            self._ready()
            answer = await self._connect(namespace, pool_name, caller)
        except _RefusalError as refusal:
            answer = refusal.answer
        elapsed = time.perf_counter() - started
        self.metrics.connect_seconds.labels(str(answer.status)).observe(elapsed)
        # Only names that passed validation, and what else came from the caller escaped:
        # a line break in the path must not start a log line of its own.
        namespace, pool = request.match_info["namespace"], request.match_info["pool"]
        valid = is_namespace(namespace) and is_object_name(pool)
        log.info(
            "connect %s%s: %d %s (%s) in %.3fs",
            f"{namespace}/{pool}" if valid else "(an invalid name)",
            f" by {printable(user)}" if self.settings.log_users else "",
            answer.status,
            answer.reason,
            printable(str(answer.body.get("message", answer.body.get("host", "")))),
            elapsed,
        )
        return self._send(request, "connect", answer)

    async def _connect_body(self, request: web.Request) -> None:
        if not request.can_read_body:
            return
        raw = await request.read()  # client_max_size: 413 past 16 KiB
        if not raw.strip():
            return
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise _RefusalError(error(400, "InvalidBody", "the body is not JSON")) from None
        if not isinstance(body, dict):
            raise _RefusalError(error(400, "InvalidBody", "the body is not a JSON object"))
        unknown = sorted(set(body) - CONNECT_FIELDS)
        if unknown:
            raise _RefusalError(
                error(400, "InvalidBody", f"{unknown[0][:64]}: unknown field (only protocol)")
            )
        if "protocol" in body and body["protocol"] != "RDP":
            raise _RefusalError(error(400, "InvalidBody", "protocol: only RDP is offered"))

    async def _connect(self, namespace: str, pool_name: str, caller: Caller) -> Answer:
        directory = self.directory
        key = (namespace, pool_name, caller.user)
        async with directory.user_lock(key):
            pool = directory.pools.get((namespace, pool_name))
            mine = directory.mine(namespace, pool_name, caller.user)
            decision = decisions.decide(namespace, pool_name, pool, caller, mine)
            if isinstance(decision, decisions.NotFound) or pool is None:
                return decisions.not_found(namespace, pool_name)
            if isinstance(decision, decisions.Ending):
                return decisions.waiting(decision.request, "SessionEnding")
            if isinstance(decision, decisions.Reuse):
                view, reused = decision.request, True
            else:
                view, reused = await self._create(namespace, pool_name, caller, decision)
        if not decisions.placed_or_final(view):
            found = await directory.wait_for(
                (namespace, view.name),
                lambda v: v is None or decisions.placed_or_final(v),
                self.settings.connect_timeout,
            )
            if found is None:
                return decisions.waiting(view, "SessionEnding")
            view = found
        return decisions.answer(view, pool, caller, reused=reused)

    async def _create(
        self, namespace: str, pool_name: str, caller: Caller, decision: decisions.Create
    ) -> tuple[RequestView, bool]:
        """The caller's request, created (after deleting the failed one it replaces); a
        namesake that exists already (another replica, or this one before a restart, got
        there first) is taken over when it is the caller's."""
        client = self.directory.client
        if decision.replaces is not None:
            try:
                await client.delete(REQUESTS, namespace, decision.name, uid=decision.replaces.uid)
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise _RefusalError(_api_failure(exc)) from None
            except ApiTransportError as exc:
                raise _RefusalError(_api_failure(exc)) from None
        body = {
            "apiVersion": "hostpool.io/v1alpha1",
            "kind": "SessionRequest",
            "metadata": {
                "name": decision.name,
                "namespace": namespace,
                "labels": {BROKER_LABEL: "true"},
            },
            "spec": {"poolRef": {"name": pool_name}, "user": caller.user, "protocol": "RDP"},
        }
        try:
            created = await client.create(REQUESTS, namespace, body)
            return self.directory.observe(created), False
        except ApiError as exc:
            if exc.status != 409:
                raise _RefusalError(_api_failure(exc)) from None
        except ApiTransportError as exc:
            raise _RefusalError(_api_failure(exc)) from None
        try:
            existing = await client.get(REQUESTS, namespace, decision.name)
        except (ApiError, ApiTransportError) as exc:
            raise _RefusalError(_api_failure(exc)) from None
        view = RequestView.from_api(existing)
        if (view.pool, view.user) != (pool_name, caller.user):
            raise _RefusalError(
                error(409, "NameTaken", f"request {decision.name} belongs to someone else")
            )
        if not view.live:
            # A failed or ending namesake: the caller comes back once it is replaced or gone.
            raise _RefusalError(decisions.waiting(view, "SessionEnding"))
        self.directory.observe_view(view)
        return view, False

    # ------------------------------------------------------------------ end a session

    async def end_session(self, request: web.Request) -> web.Response:
        try:
            caller = await self._caller(request)
            namespace, pool_name = self._names(request)
            self._ready()
            answer = await self._end(namespace, pool_name, caller)
        except _RefusalError as refusal:
            answer = refusal.answer
        return self._send(request, "session", answer)

    async def _end(self, namespace: str, pool_name: str, caller: Caller) -> Answer:
        directory = self.directory
        pool = directory.pools.get((namespace, pool_name))
        if pool is None or not pool.admits(caller.user, caller.groups):
            return decisions.not_found(namespace, pool_name)
        now = dt.datetime.now(dt.UTC)
        stale_after = self.settings.agent_stale_after
        ends = [
            (view, how)
            for view in directory.mine(namespace, pool_name, caller.user)
            if (
                how := decisions.end_by(
                    view,
                    directory.hosts.get((namespace, view.host)) if view.host else None,
                    now,
                    stale_after,
                )
            )
            is not None
        ]
        if not ends:
            return error(404, "NoSession", f"you have no session in {namespace}/{pool_name}")
        client = directory.client
        ended: list[str] = []
        for view, how in ends:
            try:
                if how == "logoff":
                    # The host's agent reports: it logs the user off now and deletes the
                    # request. (A silent agent never would: those requests are deleted.)
                    logoff = {"message": "Logged off at the user's request", "deadline": _now()}
                    await client.patch_status(
                        REQUESTS,
                        namespace,
                        view.name,
                        {"logoff": logoff},
                        resource_version=view.resource_version,
                    )
                else:
                    await client.delete(REQUESTS, namespace, view.name, uid=view.uid)
                ended.append(view.name)
            except ApiError as exc:
                if exc.status == 404:
                    continue
                if exc.status == 409:
                    # Changed meanwhile (e.g. just placed): delete it instead, the agent
                    # sees the session's request go.
                    try:
                        await client.delete(REQUESTS, namespace, view.name, uid=view.uid)
                        ended.append(view.name)
                    except ApiError as again:
                        if again.status != 404:
                            return _api_failure(again)
                    continue
                return _api_failure(exc)
            except ApiTransportError as exc:
                return _api_failure(exc)
        body = {"requests": ended, "reason": "LogoffRequested"}
        return Answer(202, "LogoffRequested", body)


def printable(text: str, limit: int = 256) -> str:
    """``text`` for a log line: at most ``limit`` characters, every control character (a
    line break above all) and backslash escaped, so a caller's input stays on its line."""
    text = text[:limit]
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else repr(c)[1:-1] for c in text)


def jittered(seconds: int, draw: float) -> int:
    """A Retry-After of ``seconds`` plus up to half as much again (at least one second
    more), chosen by ``draw`` in [0, 1): the callers told to come back spread out rather than
    all retrying in the same second; never sooner than ``seconds``."""
    spread = max(1, seconds // 2)
    return seconds + min(spread, int(draw * (spread + 1)))


def _api_failure(exc: ApiError | ApiTransportError) -> Answer:
    """The API server refused or did not answer: the caller may try again."""
    log.warning("API call failed: %s", exc)
    if isinstance(exc, ApiError) and exc.status == 403:
        return error(503, "Forbidden", "the broker may not do that in this namespace", 5)
    return error(503, "ApiUnavailable", "the Kubernetes API did not take the request", 2)


def _now() -> str:
    return rfc3339(dt.datetime.now(dt.UTC))
