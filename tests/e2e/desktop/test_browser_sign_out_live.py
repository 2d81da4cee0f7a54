"""A desktop in the browser ends with the portal session that opened it (issue 49, item 6:
sign-out closed the page's event stream, never its desktops).

alice signs in through Keycloak, opens her desktop on one replica of the broker (a real xrdp
host in a network namespace, headless chromium, IronRDP's web client) and signs out on the
other replica; within 10 s the relay has closed her host's connection and counted the
outcome ``SignedOut``; the page's desktop is over, and a new connect with the old cookie is
refused."""

from __future__ import annotations

import time
from collections.abc import Callable

from playwright.sync_api import Page, ViewportSize

from hostpool_operator.access.names import request_name
from support.cluster import Cluster
from support.desktop_sessions import wait_state
from support.kube import wait_for
from support.portal import CSRF_HEADER, csrf_token, session_cookies, sign_in
from support.web_desktop import WebDesktops, cookie_header, metric, open_desktop

HOST = "signout-1"
POOL = "signout"
FIRST_ADDRESS = 81
PASSWORD = "alice-sign-out-pw"
VIEWPORT: ViewportSize = {"width": 1024, "height": 768}


def test_a_desktop_ends_when_its_session_is_signed_out_on_another_replica(
    web_desktop: WebDesktops,
    new_page: Callable[..., Page],
    cluster: Cluster,
    namespace: str,
) -> None:
    web = web_desktop([HOST], {"alice": PASSWORD}, first=FIRST_ADDRESS, pool=POOL)
    relaying = web.start_broker()
    other = web.start_broker()  # a replica: the same cookie secret

    page = new_page(viewport=VIEWPORT)
    sign_in(page, relaying.url, "alice", "alice-pw", next_path=web.path)
    open_desktop(page, relaying.url + web.path, PASSWORD)
    wait_state(cluster, request_name(namespace, POOL, "alice"), "Active", "alice to be Active")
    assert web.hosts.established(HOST) == 1
    copied = cookie_header(session_cookies(page.context, relaying.url))
    metrics = f"http://127.0.0.1:{relaying.metrics_port}"

    # Signed out on the other replica (the page's own cookie, its CSRF token and origin).
    answer = page.request.post(
        f"{other.url}/auth/logout",
        headers={CSRF_HEADER: csrf_token(page, other.url), "Origin": other.url},
    )
    assert answer.status == 200, answer.text()
    signed_out = time.monotonic()
    wait_for(lambda: web.hosts.established(HOST) == 0, 10, what="the relay to end with the session")
    took = time.monotonic() - signed_out
    assert took <= 10
    outcome = 'outcome="SignedOut"'
    assert metric(metrics, "hostpool_broker_web_relays_total", outcome) == 1
    assert metric(metrics, "hostpool_broker_web_sessions") == 0
    page.wait_for_selector(
        "#desktop[data-desktop-state=closed], #desktop[data-desktop-state=error]",
        state="attached",
        timeout=20_000,
    )
    # The cookie copied before sign-out opens nothing more on the relaying replica.
    again = relaying.call(
        "POST",
        f"/v1/namespaces/{namespace}/pools/{POOL}/session/web-ticket",
        headers={"Cookie": copied, "Origin": relaying.url, CSRF_HEADER: "x"},
    )
    assert again.status == 401, again.text
    print(f"relay ended {took:.1f}s after sign-out on the other replica")
