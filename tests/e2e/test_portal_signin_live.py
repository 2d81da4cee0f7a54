"""The portal's sign-in, end to end: headless chromium, Keycloak's own login form, the broker
with the portal's flags against the suite's API server.

Signed in, the browser holds one HttpOnly, SameSite=Lax session cookie that the /v1 API
takes; no token is in any URL the browser visited, in ``document.cookie`` or in the broker's
log. Refused: cookies forged, altered, sealed with another secret, expired, or of the sign-in
step; a callback whose state is not the one the browser started with (or in a browser that
started nothing); every change without the page's CSRF token and origin (a form posted from
another origin's page above all); ``next`` addresses of other origins. Sign-out ends
Keycloak's session (the next sign-in shows its form again); a session is refreshed when its
access token is about to expire, and ends when Keycloak no longer refreshes it; another
replica with the same cookie secret reads the cookie.
"""

from __future__ import annotations

import secrets
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, Request, Route

from hostpool_operator.broker.signin import cookies
from support.broker_helpers import POOL, REALM, BrokerProcess, Connecting, Reply, entitled_pool
from support.cluster import Cluster
from support.keycloak import PORTAL_SHORT_CLIENT_ID, SHORT_LIFESPAN, Keycloak
from support.kube import wait_for
from support.portal import (
    CSRF_HEADER,
    SESSION_COOKIE,
    PortalFlags,
    csrf_token,
    fill_keycloak_form,
    portal_args,
    session_cookies,
    sign_in,
)

Obj = dict[str, Any]
#: What a token looks like in a URL or a log: the base64 of '{"' that starts a JWT.
JWT_MARK = "eyJ"


class Portal:
    """A broker with the portal, its cookie key, and HTTP calls carrying a cookie."""

    def __init__(self, broker: BrokerProcess, flags: PortalFlags) -> None:
        self.broker = broker
        self.flags = flags
        self.url = broker.url

    def call(
        self,
        method: str,
        path: str,
        cookie: str | None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        sent = dict(headers or {})
        if cookie is not None:
            sent["Cookie"] = f"{SESSION_COOKIE}={cookie}"
        return self.broker.call(method, path, headers=sent)

    def seal(self, data: Obj, *, issued: float | None = None, lifetime: float = 3600) -> str:
        now = time.time() if issued is None else issued
        return cookies.seal(self.flags.cookie_key, SESSION_COOKIE, data, now, lifetime)


@pytest.fixture
def portal(connecting: Connecting, tmp_path: Path) -> Callable[..., Portal]:
    """``portal(client_id=..., cookie_secret=...)``: a broker with the portal, the pool
    ``desk`` entitled to /finance-desk in this test's namespace (the operator running)."""
    cluster, brokers, _ = connecting
    entitled_pool(cluster, ["h1"], groups=["/finance-desk"])

    def start(**options: Any) -> Portal:
        flags = portal_args(tmp_path / f"portal-{secrets.token_hex(3)}", **options)
        return Portal(brokers(*flags.args, "--log-users"), flags)

    return start


def visited(page: Page) -> list[str]:
    """Every URL the page requests from now on (navigations, redirects, sub-resources)."""
    seen: list[str] = []

    def note(request: Request) -> None:
        seen.append(request.url)
        if request.redirected_from is not None:
            seen.append(request.redirected_from.url)

    page.on("request", note)
    return seen


def keycloak_user_sessions(keycloak: Keycloak, user: str) -> set[str]:
    _, _, found = keycloak.admin("GET", f"/{REALM}/users?username={user}&exact=true")
    _, _, sessions = keycloak.admin("GET", f"/{REALM}/users/{found[0]['id']}/sessions")
    return {s["id"] for s in sessions}


# ---------------------------------------------------------------------------------------
# signing in


def test_sign_in_through_keycloaks_form_and_call_v1_with_the_cookie(
    portal: Callable[..., Portal], new_page: Callable[..., Page], cluster: Cluster
) -> None:
    site = portal()
    page = new_page()
    urls = visited(page)
    started = time.monotonic()
    sign_in(page, site.url, "alice", "alice-pw", next_path="/v1/pools")
    took = time.monotonic() - started
    assert page.url == f"{site.url}/v1/pools"
    # The way there: the broker, Keycloak's authorization endpoint with PKCE S256, state
    # and nonce, its form, the callback with a code, back where the user was going.
    authorize = next(u for u in urls if "/protocol/openid-connect/auth?" in u)
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(authorize).query)
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) == 43
    assert len(query["state"][0]) >= 43
    assert len(query["nonce"][0]) >= 43
    assert query["redirect_uri"] == [f"{site.url}/auth/callback"]
    assert "code_verifier" not in authorize
    assert any(u.startswith(f"{site.url}/auth/callback?") and "code=" in u for u in urls)
    # No token in a URL: no token parameter anywhere, nothing JWT-like in the broker's URLs
    # (Keycloak's own login URLs carry a base64 JSON of its own, no token).
    named = ("access_token", "id_token", "refresh_token", "code_verifier")
    leaked = [u for u in urls if any(n in u for n in named)]
    leaked += [u for u in urls if u.startswith(site.url) and JWT_MARK in u]
    assert not leaked, leaked

    jar = {c["name"]: c for c in page.context.cookies(site.url)}
    session = jar[SESSION_COOKIE]
    assert session["httpOnly"] is True
    assert session["sameSite"] == "Lax"
    assert session["secure"] is False  # plain http here; Secure behind https (unit-tested)
    assert session["path"] == "/"
    assert "hostpool_signin" not in jar  # the sign-in step's cookie is gone
    assert JWT_MARK not in session["value"]
    assert not [u for u in urls if session["value"][3:40] in u]
    assert page.evaluate("document.cookie") == ""  # nothing for the page's script

    pools = page.request.get(f"{site.url}/v1/pools")
    assert pools.status == 200, pools.text()
    assert [p["name"] for p in pools.json()["pools"]] == [POOL]
    me = page.request.get(f"{site.url}/auth/session").json()
    assert me["user"] == "alice"
    assert me["groups"] == ["/finance-desk"]
    assert len(me["csrf"]) >= 43
    assert 9.9 * 3600 < me["expiresAt"] - time.time() <= 10 * 3600  # --portal-session-hours

    # bob is not entitled: signed in, he sees no pool.
    other = new_page()
    sign_in(other, site.url, "bob", "bob-pw", next_path="/v1/pools")
    assert other.request.get(f"{site.url}/v1/pools").json() == {"pools": []}

    log = site.broker.log_text()
    assert JWT_MARK not in log
    assert "portal sign-in for alice" in log
    assert log.count("portal sign-in") == 2
    print(f"sign-in through Keycloak's form: {took:.2f} s; cookie {len(session['value'])} bytes")


def test_cookies_the_broker_refuses(portal: Callable[..., Portal]) -> None:
    site = portal()
    now = time.time()
    good = {
        "u": "alice",
        "g": ["/finance-desk"],
        "sub": "x",
        "rt": "",
        "csrf": "c" * 43,
        "sid": secrets.token_urlsafe(16),
    }
    # A cookie the test seals with the broker's own secret is taken: what fails below
    # fails for what was changed, not for the test's way of sealing.
    valid = site.seal({**good, "ax": now + 600, "sx": now + 3600})
    assert site.call("GET", "/v1/pools", valid).status == 200

    flipped = valid[:-6] + ("A" if valid[-6] != "A" else "B") + valid[-5:]
    other_key = cookies.derive_key(secrets.token_urlsafe(32).encode())
    cases = {
        "random": "v1." + secrets.token_urlsafe(300),
        "not sealed": "alice",
        "altered": flipped,
        "sealed with another secret": cookies.seal(
            other_key, SESSION_COOKIE, {**good, "ax": now + 600, "sx": now + 3600}, now, 3600
        ),
        "expired": site.seal({**good, "ax": now + 600, "sx": now - 1}, issued=now - 3601),
        "the sign-in step's cookie": cookies.seal(
            site.flags.cookie_key,
            "hostpool_signin",
            {**good, "ax": now + 600, "sx": now + 600},
            now,
            600,
        ),
        "issued in the future": site.seal(
            {**good, "ax": now + 7200, "sx": now + 7200}, issued=now + 3600
        ),
        # One an earlier broker sealed, without the id sign-out ends.
        "without a session id": site.seal(
            {k: v for k, v in good.items() if k != "sid"} | {"ax": now + 600, "sx": now + 3600}
        ),
    }
    for what, value in cases.items():
        answer = site.call("GET", "/v1/pools", value)
        assert answer.status == 401, (what, answer.status, answer.text)
        assert answer.body["reason"] == "Unauthorized", what
        # The browser is told to drop it.
        assert f"{SESSION_COOKIE}=;" in answer.headers.get("Set-Cookie", "") or (
            "Max-Age=0" in answer.headers.get("Set-Cookie", "")
        ), (what, answer.headers)
        assert site.call("GET", "/auth/session", value).status == 401, what
    # Without a cookie or a token: 401, as before the portal.
    assert site.call("GET", "/v1/pools", None).status == 401


def test_a_callback_with_another_state_is_refused(
    portal: Callable[..., Portal], new_page: Callable[..., Page]
) -> None:
    site = portal()
    page = new_page()
    held: list[str] = []

    # Keycloak's answer to the login form is held (a redirect the browser would follow at
    # once): the test sends the browser to the callback itself, altered or not.
    def hold(route: Route) -> None:
        answer = route.fetch(max_redirects=0)
        held.append(answer.headers["location"])
        route.fulfill(status=200, body="held", content_type="text/plain")

    page.route("**/login-actions/authenticate*", hold)
    page.goto(f"{site.url}/auth/login?next=/auth/session")
    fill_keycloak_form(page, "carol", "carol-pw")
    page.wait_for_selector("text=held")
    page.unroute("**/login-actions/authenticate*")
    callback = held[0]
    assert callback.startswith(f"{site.url}/auth/callback?")
    parts = urllib.parse.urlsplit(callback)
    query = dict(urllib.parse.parse_qsl(parts.query))

    # The same code with another state (an attacker's callback link): refused.
    forged = {**query, "state": secrets.token_urlsafe(32)}
    answer = page.goto(parts._replace(query=urllib.parse.urlencode(forged)).geturl())
    assert answer is not None
    assert answer.status == 400
    assert "state does not match" in page.content()
    assert SESSION_COOKIE not in session_cookies(page.context, site.url)
    # No state at all: refused too.
    bare = {k: v for k, v in query.items() if k != "state"}
    answer = page.goto(parts._replace(query=urllib.parse.urlencode(bare)).geturl())
    assert answer is not None
    assert answer.status == 400
    # The real callback in another browser, which never started a sign-in (login CSRF:
    # someone else's code planted in this browser): refused.
    stranger = new_page()
    answer = stranger.goto(callback)
    assert answer is not None
    assert answer.status == 400
    assert "not started here" in stranger.content()
    assert SESSION_COOKIE not in session_cookies(stranger.context, site.url)
    # The real callback in the browser that started it: carol is signed in.
    answer = page.goto(callback)
    assert answer is not None
    assert page.url == f"{site.url}/auth/session"
    assert page.request.get(f"{site.url}/auth/session").json()["user"] == "carol"
    # The code is spent: the same callback again is refused by Keycloak (and the sign-in
    # step's cookie is gone).
    again = stranger.goto(callback)
    assert again is not None
    assert again.status == 400


EVIL_FORM = """<!doctype html><html><body>
<form id="f" method="post" action="{action}"><input name="protocol" value="RDP"></form>
<script>document.getElementById("f").submit()</script></body></html>"""


def test_changes_need_the_csrf_token_and_the_portals_origin(
    portal: Callable[..., Portal], new_page: Callable[..., Page], cluster: Cluster
) -> None:
    site = portal()
    page = new_page()
    sign_in(page, site.url, "erin", "erin-pw", next_path="/auth/session")
    csrf = csrf_token(page, site.url)
    cookie = session_cookies(page.context, site.url)[SESSION_COOKIE]
    ns = cluster.namespace
    connect = f"/v1/namespaces/{ns}/pools/{POOL}/connect"

    # A page of another origin (same site: 127.0.0.1 on another port, so SameSite=Lax still
    # sends the cookie) posts a form to connect: refused, nothing created.
    evil = f"http://127.0.0.1:{site.broker.port + 1}/evil"
    page.route(
        evil,
        lambda route: route.fulfill(
            body=EVIL_FORM.format(action=site.url + connect), content_type="text/html"
        ),
    )
    page.goto(evil)
    page.wait_for_url(f"{site.url}{connect}")
    assert page.locator("body").inner_text().count("CsrfRefused") == 1
    assert not cluster.requests()

    # The same calls by hand, the cookie and each part of the rule varied. DELETE .../session
    # with everything right answers 404 NoSession (erin has none): past the CSRF check.
    session = f"/v1/namespaces/{ns}/pools/{POOL}/session"
    own = site.url
    cases: list[tuple[str, dict[str, str], int]] = [
        ("token and Origin", {CSRF_HEADER: csrf, "Origin": own}, 404),
        ("token and Referer", {CSRF_HEADER: csrf, "Referer": own + "/"}, 404),
        ("token, no Origin or Referer", {CSRF_HEADER: csrf}, 403),
        ("token, another Origin", {CSRF_HEADER: csrf, "Origin": "https://evil.example"}, 403),
        ("token, another port", {CSRF_HEADER: csrf, "Origin": evil.rsplit("/", 1)[0]}, 403),
        ("token, Origin null", {CSRF_HEADER: csrf, "Origin": "null", "Referer": own}, 403),
        ("no token", {"Origin": own}, 403),
        ("another token", {CSRF_HEADER: secrets.token_urlsafe(32), "Origin": own}, 403),
        ("empty token", {CSRF_HEADER: "", "Origin": own}, 403),
    ]
    for what, headers, status in cases:
        answer = site.call("DELETE", session, cookie, headers)
        assert answer.status == status, (what, answer.status, answer.text)
        if status == 403:
            assert answer.body["reason"] == "CsrfRefused", what
    # GET needs no token (it changes nothing); a bearer caller needs none (no cookie).
    assert site.call("GET", "/v1/pools", cookie).status == 200
    # Sign-out is a change too: without the token it is refused and the session lives on.
    answer = site.call("POST", "/auth/logout", cookie, {"Origin": own})
    assert answer.status == 403
    assert answer.body["reason"] == "CsrfRefused"
    assert site.call("GET", "/auth/session", cookie).status == 200


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example",
        "//evil.example",
        "/\\evil.example",
        "\\\\evil.example",
        "/\t/evil.example",
        "https:evil.example",
        "javascript:alert(1)",
    ],
)
def test_next_never_leaves_the_portal(
    portal: Callable[..., Portal], new_page: Callable[..., Page], target: str
) -> None:
    site = portal()
    page = new_page()
    urls = visited(page)
    sign_in(page, site.url, "dave", "dave-pw", next_path=target)
    assert page.url == f"{site.url}/"
    assert not [u for u in urls if "evil.example" in urllib.parse.urlsplit(u).netloc]
    # Signed in: another sign-in goes straight back (Keycloak's session), still home.
    page.goto(f"{site.url}/auth/login?next={urllib.parse.quote(target, safe='')}")
    page.wait_for_url(f"{site.url}/")


# ---------------------------------------------------------------------------------------
# signing out, refresh, replicas


def test_sign_out_ends_the_keycloak_session(
    portal: Callable[..., Portal], new_page: Callable[..., Page], keycloak: Keycloak
) -> None:
    site = portal()
    page = new_page()
    urls = visited(page)
    sign_in(page, site.url, "erin", "erin-pw", next_path="/auth/session")
    callback = next(u for u in urls if "/auth/callback?" in u)
    sid = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query))["session_state"]
    assert sid in keycloak_user_sessions(keycloak, "erin")
    csrf = csrf_token(page, site.url)

    # The page's sign-out: a fetch from the portal's own page with the token.
    answer = page.evaluate(
        """async ([csrf, header]) => {
            const r = await fetch("/auth/logout", {method: "POST", headers: {[header]: csrf}});
            return {status: r.status, body: await r.json()};
        }""",
        [csrf, CSRF_HEADER],
    )
    assert answer == {"status": 200, "body": {"signedOut": True, "providerSessionEnded": True}}
    assert SESSION_COOKIE not in session_cookies(page.context, site.url)
    assert sid not in keycloak_user_sessions(keycloak, "erin")
    assert page.request.get(f"{site.url}/v1/pools").status == 401
    # Signing in again asks for the password: Keycloak's session is gone, not only ours.
    page.goto(f"{site.url}/auth/login")
    page.wait_for_selector("#username", timeout=30_000)
    assert page.url.startswith(keycloak.issuer(REALM))


def test_sign_out_in_one_replica_ends_the_session_in_every_replica(
    portal: Callable[..., Portal], new_page: Callable[..., Page]
) -> None:
    # Issue 49, item 11: a cookie copied before sign-out still opened the portal (on the
    # replica that signed out and on any other) until the cookie's own end, hours later.
    shared = secrets.token_urlsafe(48).encode()
    first, second = portal(cookie_secret=shared), portal(cookie_secret=shared)
    page = new_page()
    sign_in(page, first.url, "erin", "erin-pw", next_path="/auth/session")
    copied = session_cookies(page.context, first.url)[SESSION_COOKIE]
    assert second.call("GET", "/auth/session", copied).status == 200
    answer = page.request.post(
        f"{first.url}/auth/logout",
        headers={CSRF_HEADER: csrf_token(page, first.url), "Origin": first.url},
    )
    assert answer.status == 200, answer.text()
    signed_out = time.monotonic()
    # The replica that signed out refuses the copy at once; the other within 60 s.
    assert first.call("GET", "/auth/session", copied).status == 401
    assert first.call("GET", "/v1/pools", copied).status == 401
    wait_for(
        lambda: second.call("GET", "/auth/session", copied).status == 401,
        60 - (time.monotonic() - signed_out),
        what="the other replica to refuse the cookie copied before sign-out",
    )
    assert second.call("GET", "/v1/pools", copied).status == 401
    assert "portal cookie refused: signed out" in second.broker.log_text()
    # A fresh sign-in is a new session: it is not refused.
    sign_in(page, second.url, "erin", "erin-pw", next_path="/auth/session")
    fresh = session_cookies(page.context, second.url)[SESSION_COOKIE]
    assert first.call("GET", "/auth/session", fresh).status == 200


def test_the_session_is_refreshed_and_ends_when_keycloak_ends_it(
    portal: Callable[..., Portal], new_page: Callable[..., Page], keycloak: Keycloak
) -> None:
    # Access tokens of this client live SHORT_LIFESPAN (65) s: a request with less than
    # 60 s left refreshes, i.e. any request from 5 s after the sign-in on.
    site = portal(client_id=PORTAL_SHORT_CLIENT_ID)
    page = new_page()
    sign_in(page, site.url, "carol", "carol-pw", next_path="/auth/session")
    signed_in = time.monotonic()
    first = session_cookies(page.context, site.url)[SESSION_COOKIE]
    assert page.request.get(f"{site.url}/v1/pools").status == 200
    assert session_cookies(page.context, site.url)[SESSION_COOKIE] == first  # not due yet
    page.wait_for_timeout(
        max(0.0, SHORT_LIFESPAN - 60 + 1.5 - (time.monotonic() - signed_in)) * 1000
    )
    assert page.request.get(f"{site.url}/v1/pools").status == 200
    second = session_cookies(page.context, site.url)[SESSION_COOKIE]
    assert second != first
    assert site.broker.log_text().count("portal session refreshed for carol") == 1
    refreshed = time.monotonic()
    # The next requests use the refreshed cookie: no further refresh for now.
    assert page.request.get(f"{site.url}/auth/session").status == 200
    assert site.broker.log_text().count("portal session refreshed for carol") == 1

    # An administrator ends carol's sessions at Keycloak: the next refresh is refused and
    # the portal session ends with it.
    _, _, found = keycloak.admin("GET", f"/{REALM}/users?username=carol&exact=true")
    keycloak.admin("POST", f"/{REALM}/users/{found[0]['id']}/logout")
    page.wait_for_timeout(
        max(0.0, SHORT_LIFESPAN - 60 + 1.5 - (time.monotonic() - refreshed)) * 1000
    )
    answer = page.request.get(f"{site.url}/v1/pools")
    assert answer.status == 401
    assert SESSION_COOKIE not in session_cookies(page.context, site.url)
    assert "its refresh failed" in site.broker.log_text()


def wait_until_refresh_due(page: Page, since: float) -> None:
    """Until the access token got at ``since`` (monotonic) has less than 60 s left."""
    due = since + SHORT_LIFESPAN - 60 + 1.5
    page.wait_for_timeout(max(0.0, due - time.monotonic()) * 1000)


def test_another_replica_reads_the_cookie_another_secret_does_not(
    portal: Callable[..., Portal], new_page: Callable[..., Page]
) -> None:
    shared = secrets.token_urlsafe(48).encode()
    first = portal(cookie_secret=shared)
    second = portal(cookie_secret=shared)
    stranger = portal()
    page = new_page()
    sign_in(page, first.url, "alice", "alice-pw", next_path="/auth/session")
    cookie = session_cookies(page.context, first.url)[SESSION_COOKIE]
    assert second.call("GET", "/v1/pools", cookie).status == 200
    assert second.call("GET", "/auth/session", cookie).body["user"] == "alice"
    assert stranger.call("GET", "/v1/pools", cookie).status == 401
