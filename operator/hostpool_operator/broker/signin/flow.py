"""Sign-in to the portal: OpenID Connect's authorization code flow with PKCE (S256), state and
nonce, against the issuer the broker already trusts for bearer tokens; the session in a
sealed cookie; refresh; sign-out that ends the provider's session too; the CSRF rule.

- ``GET /auth/login[?next=/path]`` keeps state, nonce and the PKCE verifier in a sealed
  ``hostpool_signin`` cookie (10 minutes, path ``/auth/``) and sends the browser to the
  provider. ``next`` is kept only when it is a path of this origin (``urls.safe_next``).
- ``GET /auth/callback`` checks the state against that cookie, exchanges the code (with the
  verifier and the client secret), verifies the ID token (signature by the issuer's keys,
  iss, aud, azp, nonce, exp) and the access token as the /v1 API verifies bearer tokens (the
  portal's client id is an accepted audience), and sets the session cookie.
- The session cookie ``hostpool_session`` (split over ``_0``, ``_1``... when large) holds the
  user and groups (by the broker's --user-claim/--groups-claim rules), the refresh token,
  when the access token expires, the session's end and a CSRF token. No token is ever sent
  to JavaScript or put in a URL; none is logged.
- A request arriving when the access token has less than :data:`REFRESH_MARGIN` seconds
  left refreshes it (user and groups read again); a refresh the provider refuses ends the
  session.
- Every session has a random id; sign-out and a refused refresh end it in every replica
  (``sign_outs``): a cookie copied before sign-out is refused everywhere within seconds, and
  the browser desktops it opened end with it.
- ``POST /auth/logout`` (CSRF-checked) ends the provider's session from the broker itself:
  ``POST end_session_endpoint`` with the client's credentials and the refresh token (what
  Keycloak offers confidential clients), else the refresh token revoked at the
  ``revocation_endpoint`` (RFC 7009). A back-channel call needs no navigation through the
  provider, so the page's sign-out is one fetch and never shows the provider's "do you want
  to log out?" page, and the ID token (a large value) need not be kept in the cookie.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import secrets
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any

import aiohttp
from aiohttp import web

from ...access import sign_outs as ended_sessions
from ...access.connect import Caller
from ..oidc import InvalidTokenError, TokenVerifier, check_time
from ..render import message_page
from . import cookies
from .sign_outs import SignOuts
from .urls import origin_of, safe_next, same_origin_headers

log = logging.getLogger(__name__)

SESSION_COOKIE = "hostpool_session"
SIGNIN_COOKIE = "hostpool_signin"
CSRF_HEADER = "X-Hostpool-CSRF"
#: Seconds a sign-in may take at the provider.
SIGNIN_SECONDS = 600
#: A request arriving with less than this left of the access token refreshes it.
REFRESH_MARGIN = 60.0
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SCOPE = "openid profile email"
_KEY = "hostpool_portal"  # the request's entry for what this module learned of it


@dataclass(frozen=True)
class PortalSettings:
    client_id: str
    client_secret: str
    #: The AES key of the cookies (``cookies.derive_key`` of the cookie secret).
    cookie_key: bytes
    #: ``scheme://host[:port]`` the browser reaches the broker at.
    public_url: str
    session_seconds: float = 10 * 3600.0
    #: Name the user in sign-in log lines (the broker's --log-users).
    log_users: bool = False

    @property
    def secure(self) -> bool:
        return self.public_url.startswith("https://")

    @property
    def session_cookie(self) -> str:
        """The session cookie's name: ``__Host-`` behind https, so that the browser takes
        it only from this origin, over TLS, for the whole site and no other domain."""
        return f"__Host-{SESSION_COOKIE}" if self.secure else SESSION_COOKIE

    @property
    def signin_cookie(self) -> str:
        """The sign-in cookie's name: ``__Secure-`` behind https (its path is /auth/, which
        ``__Host-`` does not allow)."""
        return f"__Secure-{SIGNIN_COOKIE}" if self.secure else SIGNIN_COOKIE

    @property
    def redirect_uri(self) -> str:
        return f"{self.public_url}/auth/callback"


@dataclass(frozen=True)
class PortalSession:
    """A signed-in browser: who, the CSRF token its page sends back, when the session ends,
    its id (what sign-out ends) and when its access token is due to be refreshed."""

    caller: Caller
    csrf: str
    expires_at: float
    sid: str = ""
    access_expires: float = 0.0


class SigninError(Exception):
    """The sign-in or a refresh failed; the message is for the person (no token in it)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Pending:
    """What the response to a request must do to its cookies."""

    set_value: str | None = None
    clear: bool = False
    session: PortalSession | None = None
    data: dict[str, Any] | None = None
    looked: bool = False


def same_origin(request: web.Request, public_url: str) -> bool:
    """Whether the request comes from a page of the portal's own origin (Origin, or without
    one Referer). Used for every cookie-authenticated change and the WebSocket upgrade."""
    public = origin_of(public_url)
    if public is None:
        return False
    return same_origin_headers(
        request.headers.get("Origin"), request.headers.get("Referer"), public
    )


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def pkce_challenge(verifier: str) -> str:
    """RFC 7636's S256 challenge of a code verifier."""
    return _b64(hashlib.sha256(verifier.encode()).digest())


class Portal:
    """The sign-in routes and the cookie session. ``verifier`` is the broker's bearer-token
    verifier (the issuer, its keys, the claim rules)."""

    def __init__(self, verifier: TokenVerifier, settings: PortalSettings) -> None:
        self.verifier = verifier
        self.settings = settings
        self.public_origin = origin_of(settings.public_url) or settings.public_url
        #: The groups some pool's entitlements name (the broker sets it; None: keep all).
        self.groups_named: Callable[[], frozenset[str]] | None = None
        #: The ended sessions (shared with the other replicas when the broker says where).
        self.sign_outs = SignOuts()
        # One refresh per refresh token at a time in this replica: a page's parallel
        # requests share it.
        self._refreshing: dict[str, asyncio.Future[dict[str, Any]]] = {}

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/auth/login", self.login),
            web.get("/auth/callback", self.callback),
            web.post("/auth/logout", self.logout),
            web.get("/auth/session", self.whoami),
        ]

    # ------------------------------------------------------------------ the session

    async def session(self, request: web.Request) -> PortalSession | None:
        """The session of the request's cookie, refreshed when due; None when there is none
        or it is not valid (the response then clears the cookie)."""
        pending = self._pending(request)
        if not pending.looked:
            pending.looked = True
            pending.session = await self._session(request, pending)
        return pending.session

    def csrf_ok(self, request: web.Request, session: PortalSession) -> bool:
        """The CSRF rule for a cookie-authenticated request that changes something: the
        session's token in the X-Hostpool-CSRF header and the portal's own origin."""
        sent = request.headers.get(CSRF_HEADER, "")
        token_ok = hmac.compare_digest(sent.encode(), session.csrf.encode())
        return token_ok and same_origin(request, self.settings.public_url)

    def _pending(self, request: web.Request) -> _Pending:
        pending = request.get(_KEY)
        if not isinstance(pending, _Pending):
            pending = _Pending()
            request[_KEY] = pending
        return pending

    async def _session(self, request: web.Request, pending: _Pending) -> PortalSession | None:
        value = cookies.join(self.settings.session_cookie, request.cookies)
        if value is None:
            return None
        now = time.time()
        try:
            data = cookies.open_sealed(self.settings.cookie_key, SESSION_COOKIE, value, now)
        except cookies.CookieError as exc:
            log.info("portal cookie refused: %s", exc)
            pending.clear = True
            return None
        why = self._ended(data.get("sid"))
        if why is not None:
            log.info("portal cookie refused: %s", why)
            pending.clear = True
            return None
        if float(data.get("ax", 0)) - now < REFRESH_MARGIN:
            refreshed = await self._refreshed(data, pending, now)
            if refreshed is None:
                return None
            data = refreshed
        pending.data = data
        session = _session_of(data)
        if session is None:
            pending.clear = True
        return session

    def _ended(self, sid: object) -> str | None:
        """Why a session with this id is over (None: it is not)."""
        if not ended_sessions.is_sid(sid):
            # One an earlier broker sealed: it could not be ended by signing out.
            return "a session without an id"
        assert isinstance(sid, str)
        return "signed out" if self.sign_outs.is_ended(sid) else None

    async def _refreshed(
        self, data: dict[str, Any], pending: _Pending, now: float
    ) -> dict[str, Any] | None:
        token = data.get("rt")
        if not isinstance(token, str) or not token:
            if float(data.get("ax", 0)) > now:
                return data
            pending.clear = True
            return None
        try:
            fresh = await self._refresh_once(token, data)
        except SigninError as exc:
            log.info("portal session ended: its refresh failed (%s)", exc)
            pending.clear = exc.status < 500
            if pending.clear:  # the provider said no: over in every replica, desktops too
                await self.sign_outs.end(str(data["sid"]), float(data.get("sx", now)))
            return None
        pending.set_value = self._seal_session(fresh, time.time())
        return fresh

    async def _refresh_once(self, token: str, data: dict[str, Any]) -> dict[str, Any]:
        key = hashlib.sha256(token.encode()).hexdigest()
        running = self._refreshing.get(key)
        if running is None:
            running = asyncio.ensure_future(self._refresh(token, data))
            self._refreshing[key] = running
            running.add_done_callback(lambda _: self._refreshing.pop(key, None))
        return await asyncio.shield(running)

    async def _refresh(self, token: str, data: dict[str, Any]) -> dict[str, Any]:
        answer = await self._token_request({"grant_type": "refresh_token", "refresh_token": token})
        caller, expires, subject = await self._access(answer)
        if data.get("sub") and subject != data.get("sub"):
            raise SigninError(401, "the refreshed token is for someone else")
        fresh = dict(data)
        fresh.update(
            u=caller.user,
            g=self._kept_groups(caller),
            x=caller.uid,
            ax=expires,
            rt=answer.get("refresh_token") or token,
        )
        log.info("portal session refreshed%s", self._who(caller))
        return fresh

    def _seal_session(self, data: Mapping[str, Any], now: float) -> str:
        lifetime = max(1.0, float(data["sx"]) - now)
        return cookies.seal(self.settings.cookie_key, SESSION_COOKIE, data, now, lifetime)

    def _kept_groups(self, caller: Caller) -> list[str]:
        """The caller's groups the session keeps: those some pool names (all of them when
        the broker has not said). A pool that names another of the caller's groups later
        sees it at the session's next refresh, within the access token's life."""
        named = self.groups_named() if self.groups_named is not None else None
        kept = caller.groups if named is None else caller.groups & named
        return sorted(kept)

    def _who(self, caller: Caller) -> str:
        return f" for {caller.user}" if self.settings.log_users else ""

    async def on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """Writes the cookies a request's session handling decided on (a refreshed session,
        or a refused one cleared)."""
        pending = request.get(_KEY)
        if not isinstance(pending, _Pending):
            return
        if pending.set_value is not None:
            self._set_session(request, response, pending.set_value)
        elif pending.clear:
            self._clear(request, response, self.settings.session_cookie, "/")

    # ------------------------------------------------------------------ cookies

    def _cookie(
        self, response: web.StreamResponse, name: str, value: str, path: str, *, drop: bool = False
    ) -> None:
        """A Set-Cookie header, written into the headers themselves: aiohttp serialises its
        own cookie jar before on_response_prepare runs, where refreshed sessions are set."""
        jar: SimpleCookie = SimpleCookie()
        jar[name] = value
        morsel = jar[name]
        morsel["path"] = path
        morsel["httponly"] = True
        morsel["samesite"] = "Lax"
        if self.settings.secure:
            morsel["secure"] = True
        if drop:
            morsel["max-age"] = "0"
            morsel["expires"] = "Thu, 01 Jan 1970 00:00:00 GMT"
        response.headers.add("Set-Cookie", morsel.OutputString())

    def _set_session(self, request: web.Request, response: web.StreamResponse, value: str) -> None:
        parts = cookies.split(self.settings.session_cookie, value)
        for name, part in parts.items():
            self._cookie(response, name, part, "/")
        for name in cookies.names(self.settings.session_cookie):
            if name in request.cookies and name not in parts:
                self._cookie(response, name, "", "/", drop=True)

    def _clear(
        self, request: web.Request, response: web.StreamResponse, base: str, path: str
    ) -> None:
        for name in cookies.names(base):
            if name in request.cookies:
                self._cookie(response, name, "", path, drop=True)

    # ------------------------------------------------------------------ /auth/login

    async def login(self, request: web.Request) -> web.Response:
        try:
            endpoint = await self._endpoint("authorization_endpoint")
        except SigninError as exc:
            return _page(exc.status, "Sign-in is not available", str(exc))
        state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        verifier = secrets.token_urlsafe(64)
        target = safe_next(request.query.get("next"))
        sealed = cookies.seal(
            self.settings.cookie_key,
            SIGNIN_COOKIE,
            {"s": state, "n": nonce, "c": verifier, "next": target},
            time.time(),
            SIGNIN_SECONDS,
        )
        query = urllib.parse.urlencode(
            {
                "response_type": "code",
                "client_id": self.settings.client_id,
                "redirect_uri": self.settings.redirect_uri,
                "scope": SCOPE,
                "state": state,
                "nonce": nonce,
                "code_challenge": pkce_challenge(verifier),
                "code_challenge_method": "S256",
            }
        )
        separator = "&" if "?" in endpoint else "?"
        response = web.Response(status=302, headers={"Location": f"{endpoint}{separator}{query}"})
        response.headers["Cache-Control"] = "no-store"
        self._cookie(response, self.settings.signin_cookie, sealed, "/auth/")
        return response

    async def _endpoint(self, name: str) -> str:
        try:
            metadata = await self.verifier.metadata()
        except (OSError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("the issuer's discovery document could not be read: %s", exc)
            raise SigninError(503, "The identity provider cannot be reached; try again.") from None
        value = metadata.get(name)
        if not isinstance(value, str) or origin_of(value) is None:
            raise SigninError(503, f"The identity provider names no {name}.")
        if self.verifier.issuer.startswith("https://") and not value.startswith("https://"):
            raise SigninError(503, f"The identity provider's {name} is not https.")
        return value

    # ------------------------------------------------------------------ /auth/callback

    async def callback(self, request: web.Request) -> web.Response:
        try:
            data, target = await self._callback(request)
        except SigninError as exc:
            return _page(exc.status, "Sign-in failed", str(exc), link=True)
        response = web.Response(status=303, headers={"Location": target})
        response.headers["Cache-Control"] = "no-store"
        self._set_session(request, response, self._seal_session(data, time.time()))
        self._clear(request, response, self.settings.signin_cookie, "/auth/")
        return response

    async def _callback(self, request: web.Request) -> tuple[dict[str, Any], str]:
        sealed = request.cookies.get(self.settings.signin_cookie)
        if sealed is None:
            raise SigninError(400, "This sign-in was not started here, or took too long.")
        try:
            started = cookies.open_sealed(
                self.settings.cookie_key, SIGNIN_COOKIE, sealed, time.time()
            )
        except cookies.CookieError:
            raise SigninError(400, "This sign-in was not started here, or took too long.") from None
        state = request.query.get("state", "")
        if not hmac.compare_digest(state.encode(), str(started.get("s", "")).encode()):
            raise SigninError(400, "The sign-in's state does not match: start again.")
        if "error" in request.query:
            said = request.query.get("error", "")[:64]
            raise SigninError(401, f"The identity provider refused the sign-in ({said}).")
        code = request.query.get("code", "")
        if not code:
            raise SigninError(400, "The identity provider sent no code.")
        answer = await self._token_request(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": self.settings.redirect_uri,
                "code_verifier": str(started.get("c", "")),
            }
        )
        await self._check_id_token(answer.get("id_token"), str(started.get("n", "")))
        caller, expires, subject = await self._access(answer)
        now = time.time()
        data = {
            "u": caller.user,
            "g": self._kept_groups(caller),
            "x": caller.uid,
            "sub": subject,
            "rt": answer.get("refresh_token") or "",
            "ax": expires,
            "sx": int(now + self.settings.session_seconds),
            "csrf": secrets.token_urlsafe(32),
            "sid": secrets.token_urlsafe(16),
        }
        log.info("portal sign-in%s", self._who(caller))
        return data, safe_next(str(started.get("next", "/")))

    async def _check_id_token(self, token: Any, nonce: str) -> None:
        if not isinstance(token, str):
            raise SigninError(502, "The identity provider sent no ID token.")
        try:
            claims = await self.verifier.signed_claims(token)
            check_id_claims(claims, self.verifier.issuer, self.settings.client_id, nonce)
            check_time(claims, time.time())
        except InvalidTokenError as exc:
            log.warning("portal sign-in refused: the ID token: %s", exc)
            raise SigninError(401, "The identity provider's ID token is not valid.") from None

    async def _access(self, answer: Mapping[str, Any]) -> tuple[Caller, int, str]:
        """The caller, expiry and subject of a token answer's access token, verified as the
        /v1 API verifies bearer tokens (the portal's client id an accepted audience too)."""
        token = answer.get("access_token")
        if not isinstance(token, str):
            raise SigninError(502, "The identity provider sent no access token.")
        own = (self.settings.client_id,)
        try:
            claims = await self.verifier.signed_claims(token)
            self.verifier.check_claims(claims, time.time(), audiences=own, parties=own)
            caller = self.verifier.caller(claims)
        except InvalidTokenError as exc:
            log.warning("portal sign-in refused: the access token: %s", exc)
            raise SigninError(403, f"Your account cannot use the portal: {exc}.") from None
        return caller, int(claims["exp"]), str(claims.get("sub", ""))

    async def _token_request(self, form: Mapping[str, str]) -> dict[str, Any]:
        """A POST to the token endpoint with the client's credentials; SigninError (4xx: the
        provider refused; 502/503: it could not be asked) otherwise."""
        endpoint = await self._endpoint("token_endpoint")
        try:
            async with self.verifier.http().post(
                endpoint, data=dict(form), auth=self._client_auth()
            ) as response:
                body = await response.json(content_type=None)
                status = response.status
        except (OSError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("the token endpoint could not be asked: %s", type(exc).__name__)
            raise SigninError(503, "The identity provider cannot be reached; try again.") from None
        if status != 200 or not isinstance(body, dict):
            said = body.get("error", "") if isinstance(body, dict) else ""
            log.info("the token endpoint refused: HTTP %d %s", status, str(said)[:64])
            raise SigninError(401 if status < 500 else 502, "The identity provider refused.")
        return body

    def _client_auth(self) -> aiohttp.BasicAuth:
        # client_secret_basic (RFC 6749 2.3.1: both parts form-encoded first).
        quote = urllib.parse.quote_plus
        return aiohttp.BasicAuth(quote(self.settings.client_id), quote(self.settings.client_secret))

    # ------------------------------------------------------------------ /auth/session

    async def whoami(self, request: web.Request) -> web.Response:
        """The session for the page's script: user, groups, CSRF token, end (never a token).
        Another origin's script cannot read it (no CORS headers)."""
        session = await self.session(request)
        if session is None:
            refusal = {"reason": "Unauthorized", "message": "not signed in"}
            return web.json_response(refusal, status=401, headers={"Cache-Control": "no-store"})
        body: dict[str, Any] = {
            "user": session.caller.user,
            "groups": sorted(session.caller.groups),
            "csrf": session.csrf,
            "expiresAt": int(session.expires_at),
        }
        return web.json_response(body, headers={"Cache-Control": "no-store"})

    # ------------------------------------------------------------------ /auth/logout

    async def logout(self, request: web.Request) -> web.Response:
        session = await self.session(request)
        form = await request.post() if request.content_type.endswith("form-urlencoded") else {}
        if session is not None and not self._logout_allowed(request, session, form):
            return web.json_response(
                {"reason": "CsrfRefused", "message": "the sign-out came from another page"},
                status=403,
            )
        ended = False
        data = self._pending(request).data
        if session is not None and data is not None:
            refresh = str(data.get("rt", ""))
            await self.sign_outs.end(session.sid, session.expires_at)
            ended = bool(refresh) and await self._end_at_provider(refresh)
            log.info("portal sign-out%s", self._who(session.caller))
        if form:
            response: web.Response = web.Response(status=303, headers={"Location": "/"})
        else:
            response = web.json_response({"signedOut": True, "providerSessionEnded": ended})
        response.headers["Cache-Control"] = "no-store"
        self._pending(request).set_value = None
        self._clear(request, response, self.settings.session_cookie, "/")
        return response

    def _logout_allowed(
        self, request: web.Request, session: PortalSession, form: Mapping[str, Any]
    ) -> bool:
        if not same_origin(request, self.settings.public_url):
            return False
        sent = request.headers.get(CSRF_HEADER) or str(form.get("csrf", ""))
        return hmac.compare_digest(sent.encode(), session.csrf.encode())

    async def _end_at_provider(self, refresh: str) -> bool:
        """End the provider's session of this refresh token; whether it said so."""
        for name, form in (
            ("end_session_endpoint", {"refresh_token": refresh}),
            ("revocation_endpoint", {"token": refresh, "token_type_hint": "refresh_token"}),
        ):
            try:
                endpoint = await self._endpoint(name)
            except SigninError:
                continue
            try:
                async with self.verifier.http().post(
                    endpoint, data=form, auth=self._client_auth()
                ) as response:
                    await response.read()
                    if response.status < 300:
                        return True
                    log.warning("sign-out: %s answered HTTP %d", name, response.status)
            except (OSError, aiohttp.ClientError, TimeoutError) as exc:
                log.warning("sign-out: %s could not be asked: %s", name, type(exc).__name__)
        return False


def check_id_claims(claims: Mapping[str, Any], issuer: str, client_id: str, nonce: str) -> None:
    """An ID token's claims (OpenID Connect Core 3.1.3.7): this issuer, for this client
    (azp when it names more audiences), typ ID where the issuer writes one, this nonce.
    Its times are checked by the caller."""
    if claims.get("iss") != issuer:
        raise InvalidTokenError("the ID token is from another issuer")
    audience = claims.get("aud")
    named = [audience] if isinstance(audience, str) else audience
    if not isinstance(named, list) or client_id not in named:
        raise InvalidTokenError("the ID token is not for this client")
    if len(named) > 1 and claims.get("azp") != client_id:
        raise InvalidTokenError("the ID token's azp is not this client")
    if "typ" in claims and claims["typ"] != "ID":
        raise InvalidTokenError("not an ID token")
    sent = claims.get("nonce")
    if not isinstance(sent, str) or not nonce or not hmac.compare_digest(sent, nonce):
        raise InvalidTokenError("the ID token's nonce is not this sign-in's")


def _session_of(data: Mapping[str, Any]) -> PortalSession | None:
    user, groups, csrf, ends = data.get("u"), data.get("g"), data.get("csrf"), data.get("sx")
    if not isinstance(user, str) or not isinstance(groups, list) or not isinstance(csrf, str):
        return None
    if not isinstance(ends, int | float):
        return None
    uid = data.get("x")  # the uid claim's, where the broker reads one
    caller = Caller(user, frozenset(map(str, groups)), uid if type(uid) is int else None)
    access = data.get("ax")
    access_expires = float(access) if isinstance(access, int | float) else 0.0
    return PortalSession(caller, csrf, float(ends), str(data["sid"]), access_expires)


def _page(status: int, title: str, message: str, *, link: bool = False) -> web.Response:
    """A small HTML page for a browser's navigation (no details, no traceback)."""
    return message_page(
        status, title, message, link=("/auth/login", "Sign in again") if link else None
    )
