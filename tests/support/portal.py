"""The portal in tests: the broker's portal flags, and signing in through Keycloak's own form
in a real browser.

``portal_args(tmp_path)`` writes the client secret and a fresh cookie secret to files and
returns the flags for ``brokers(*args)`` plus the cookie key (a test may seal cookies with
it: an expired one, a forged one). ``sign_in(page, broker_url, user, password)`` goes to
``/auth/login``, fills Keycloak's form (``#username``, ``#password``, ``#kc-login``) and
waits until the browser is back on the broker.
"""

from __future__ import annotations

import secrets
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import BrowserContext, Page

from hostpool_operator.broker.signin.cookies import derive_key
from support.keycloak import PORTAL_CLIENT_ID, PORTAL_CLIENT_SECRET

SESSION_COOKIE = "hostpool_session"
CSRF_HEADER = "X-Hostpool-CSRF"
#: Seconds Keycloak's form and the redirects back may take on a busy machine (ms).
SIGN_IN_TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class PortalFlags:
    args: list[str]
    cookie_key: bytes


def portal_args(
    directory: Path,
    *,
    client_id: str = PORTAL_CLIENT_ID,
    client_secret: str = PORTAL_CLIENT_SECRET,
    cookie_secret: bytes | None = None,
    extra: tuple[str, ...] = (),
) -> PortalFlags:
    """The broker's portal flags with the secrets in files under ``directory``. Brokers given
    the same ``cookie_secret`` read each other's cookies (replicas)."""
    secret = cookie_secret or secrets.token_urlsafe(48).encode()
    directory.mkdir(parents=True, exist_ok=True)
    client_file = directory / "portal-client-secret"
    cookie_file = directory / "cookie-secret"
    client_file.write_text(client_secret)
    cookie_file.write_bytes(secret)
    client_file.chmod(0o600)
    cookie_file.chmod(0o600)
    args = [
        "--portal-client-id",
        client_id,
        "--portal-client-secret-file",
        str(client_file),
        "--cookie-secret-file",
        str(cookie_file),
        *extra,
    ]
    return PortalFlags(args, derive_key(secret))


def sign_in(
    page: Page, broker_url: str, user: str, password: str, *, next_path: str | None = None
) -> None:
    """Sign in through the broker's /auth/login and Keycloak's own login form; returns once
    the browser is back on the broker (at ``next_path`` or ``/``)."""
    query = f"?{urllib.parse.urlencode({'next': next_path})}" if next_path else ""
    page.goto(f"{broker_url}/auth/login{query}", timeout=SIGN_IN_TIMEOUT_MS)
    fill_keycloak_form(page, user, password)
    steps = (f"{broker_url}/auth/login", f"{broker_url}/auth/callback")
    page.wait_for_url(
        lambda url: url.startswith(broker_url) and not url.startswith(steps),
        timeout=SIGN_IN_TIMEOUT_MS,
    )


def fill_keycloak_form(page: Page, user: str, password: str) -> None:
    """Fill and send Keycloak's login form (the page must be showing it)."""
    page.wait_for_selector("#username", timeout=SIGN_IN_TIMEOUT_MS)
    page.fill("#username", user)
    page.fill("#password", password)
    page.click("#kc-login")


def session_cookies(context: BrowserContext, broker_url: str) -> dict[str, str]:
    """The broker's cookies in this browser: name -> value."""
    return {c["name"]: c["value"] for c in context.cookies(broker_url)}


def csrf_token(page: Page, broker_url: str) -> str:
    """The session's CSRF token, as the page's script reads it (``GET /auth/session``)."""
    answer = page.request.get(f"{broker_url}/auth/session")
    assert answer.status == 200, answer.text()
    return str(answer.json()["csrf"])
