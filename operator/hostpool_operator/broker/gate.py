"""The gate every route of the broker passes: who the caller is (bearer token, or the
portal's cookie with its CSRF rule), the rate limit, valid names of a namespace the broker
serves, readiness, the entitled pool, and the answer: JSON ``{"reason", "message"}`` (or the
``.rdp`` file), counted by endpoint and status. A check that refuses raises
:class:`RefusalError` with the answer to send; nothing unexpected reaches a caller as a stack
trace, and no token reaches the log."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from ..access import connect as decisions
from ..access.connect import Answer, Caller, error
from ..access.names import is_namespace, is_object_name
from ..access.ratelimit import RateLimit
from ..access.views import PoolView
from ..kube.errors import ApiError, ApiTransportError
from .directory import Directory
from .metrics import BrokerMetrics
from .oidc import InvalidTokenError, TokenVerifier
from .signin.flow import SAFE_METHODS, Portal

log = logging.getLogger(__name__)

#: The reasons of aiohttp's own refusals, by status.
_HTTP_REASONS = {404: "NotFound", 405: "MethodNotAllowed", 413: "BodyTooLarge"}


class RefusalError(Exception):
    """Ends a handler early with this answer."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.reason)
        self.answer = answer


class Gate:
    """The checks and the answer every route shares."""

    def __init__(
        self,
        directory: Directory,
        verifier: TokenVerifier,
        limit: RateLimit,
        metrics: BrokerMetrics,
        portal: Portal | None,
    ) -> None:
        self.directory = directory
        self.verifier = verifier
        self.limit = limit
        self.metrics = metrics
        #: The portal's sign-in and cookie sessions (None: bearer tokens only).
        self.portal = portal

    # ------------------------------------------------------------------ checks

    async def caller(self, request: web.Request) -> Caller:
        """The caller of the bearer token, or of the portal's cookie session; within its
        rate limit."""
        if self.portal is not None and "Authorization" not in request.headers:
            caller = await self._cookie_caller(request, self.portal)
        else:
            try:
                caller = await self.verifier.verify(request.headers.get("Authorization"))
            except InvalidTokenError as exc:
                raise RefusalError(error(401, "Unauthorized", str(exc))) from None
        wait = self.limit.take(caller.user, time.monotonic())
        if wait > 0:
            raise RefusalError(
                error(429, "TooManyRequests", "too many calls; slow down", max(1, round(wait)))
            )
        return caller

    async def _cookie_caller(self, request: web.Request, portal: Portal) -> Caller:
        """The caller of the portal's session cookie; a change (any method but GET/HEAD)
        also needs the session's CSRF token and the portal's own origin."""
        session = await portal.session(request)
        if session is None:
            raise RefusalError(error(401, "Unauthorized", "no bearer token or portal session"))
        if request.method not in SAFE_METHODS and not portal.csrf_ok(request, session):
            raise RefusalError(
                error(403, "CsrfRefused", "a change needs the page's CSRF token and origin")
            )
        return session.caller

    def names(self, request: web.Request) -> tuple[str, str]:
        """The route's namespace and pool: valid names, in a namespace this broker serves."""
        namespace, pool = request.match_info["namespace"], request.match_info["pool"]
        if not is_namespace(namespace):
            raise RefusalError(error(400, "InvalidName", "namespace: not a valid namespace name"))
        if not is_object_name(pool):
            raise RefusalError(error(400, "InvalidName", "pool: not a valid object name"))
        if not self.directory.serves(namespace):
            raise RefusalError(decisions.not_found(namespace, pool))
        return namespace, pool

    def ready(self) -> None:
        if not self.directory.ready:
            raise RefusalError(error(503, "NotReady", "the broker is still starting", 1))

    def entitled(self, namespace: str, pool_name: str, caller: Caller) -> PoolView:
        """The pool, when the caller is entitled to it; else the same 404 as for a pool that
        does not exist (nobody learns which pools exist that they may not use)."""
        pool = decisions.entitled(self.directory.pools.get((namespace, pool_name)), caller)
        if pool is None:
            raise RefusalError(decisions.not_found(namespace, pool_name))
        return pool

    # ------------------------------------------------------------------ answers

    async def answer(
        self, request: web.Request, endpoint: str, handle: Callable[[], Awaitable[Answer]]
    ) -> web.Response:
        """``handle``'s answer, or the refusal it raised, sent and counted."""
        try:
            answer = await handle()
        except RefusalError as refusal:
            answer = refusal.answer
        return self.send(request, endpoint, answer)

    def send(self, request: web.Request, endpoint: str, answer: Answer) -> web.Response:
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

    @web.middleware
    async def errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """aiohttp's own refusals (unknown path, wrong method, body too large) and anything
        unexpected become JSON answers; the unexpected is logged with its traceback, never
        sent."""
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except web.HTTPException as exc:
            if exc.status < 400:  # a redirect is an answer, not a refusal
                raise
            reason = _HTTP_REASONS.get(exc.status, exc.reason.replace(" ", ""))
            return self.send(request, "other", error(exc.status, reason, exc.reason))
        except Exception:
            log.exception("%s %s failed", request.method, printable(request.path))
            return self.send(request, "other", error(500, "InternalError", "the broker failed"))


def api_failure(exc: ApiError | ApiTransportError) -> Answer:
    """The API server refused or did not answer: the caller may try again."""
    log.warning("API call failed: %s", exc)
    if isinstance(exc, ApiError) and exc.status == 403:
        return error(503, "Forbidden", "the broker may not do that in this namespace", 5)
    return error(503, "ApiUnavailable", "the Kubernetes API did not take the request", 2)


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
