"""The portal's flags (all three or none, the public URL) and what /auth/login sends: the
provider's URL with PKCE S256, state and nonce, and the sealed sign-in cookie with its
attributes (Secure behind https)."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from hostpool_operator.access.connect import Caller
from hostpool_operator.broker.oidc import OidcSettings, TokenVerifier
from hostpool_operator.broker.program import parse_args
from hostpool_operator.broker.signin import cookies
from hostpool_operator.broker.signin.flow import Portal, pkce_challenge

REQUIRED = ["--oidc-issuer", "https://idp.example/realms/corp", "--oidc-audience", "desk"]


def files(tmp_path: Path, cookie_secret: bytes = b"s" * 40) -> list[str]:
    (tmp_path / "client").write_text("client-secret\n")
    (tmp_path / "cookie").write_bytes(cookie_secret)
    return [
        "--portal-client-id",
        "hostpool-portal",
        "--portal-client-secret-file",
        str(tmp_path / "client"),
        "--cookie-secret-file",
        str(tmp_path / "cookie"),
    ]


def test_no_portal_flags_no_portal() -> None:
    args = parse_args(REQUIRED)
    assert args.portal is False
    assert args.portal_settings is None


@pytest.mark.parametrize("keep", [[0, 1], [2, 3], [0, 1, 4, 5]])
def test_the_three_portal_flags_go_together(
    tmp_path: Path, keep: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = files(tmp_path)
    with pytest.raises(SystemExit):
        parse_args([*REQUIRED, *(argv[i] for i in keep)])
    assert "go together" in capsys.readouterr().err


def test_the_portal_settings(tmp_path: Path) -> None:
    args = parse_args([*REQUIRED, *files(tmp_path), "--listen", "127.0.0.1:8443"])
    settings = args.portal_settings
    assert settings.client_secret == "client-secret"
    assert settings.public_url == "http://127.0.0.1:8443"
    assert settings.redirect_uri == "http://127.0.0.1:8443/auth/callback"
    assert settings.secure is False
    assert settings.session_seconds == 10 * 3600
    assert settings.cookie_key == cookies.derive_key(b"s" * 40)


@pytest.mark.parametrize(
    ("given", "public"),
    [
        ("https://desktops.example.com", "https://desktops.example.com"),
        ("https://Desktops.Example.com:443/", "https://desktops.example.com"),
        ("http://10.0.0.5:8080", "http://10.0.0.5:8080"),
    ],
)
def test_the_public_url(tmp_path: Path, given: str, public: str) -> None:
    args = parse_args([*REQUIRED, *files(tmp_path), "--public-url", given])
    assert args.portal_settings.public_url == public
    assert args.portal_settings.secure is public.startswith("https://")


@pytest.mark.parametrize(
    "given", ["desktops.example.com", "https://desktops.example.com/portal", "ftp://x", "null"]
)
def test_a_public_url_that_is_no_origin_is_refused(
    tmp_path: Path, given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args([*REQUIRED, *files(tmp_path), "--public-url", given])
    assert "--public-url" in capsys.readouterr().err


def test_a_short_cookie_secret_or_a_missing_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args([*REQUIRED, *files(tmp_path, b"short\n")])
    assert "at least 32 bytes" in capsys.readouterr().err
    argv = files(tmp_path)
    argv[3] = str(tmp_path / "missing")
    with pytest.raises(SystemExit):
        parse_args([*REQUIRED, *argv])
    assert "missing" in capsys.readouterr().err


def test_the_public_url_defaults_to_the_listen_address_https_with_tls(tmp_path: Path) -> None:
    tls = ["--tls-cert", "c.pem", "--tls-key", "k.pem", "--listen", "127.0.0.1:9443"]
    args = parse_args([*REQUIRED, *files(tmp_path), *tls])
    assert args.portal_settings.public_url == "https://127.0.0.1:9443"
    assert args.portal_settings.secure is True


def test_login_sends_the_browser_to_the_provider_with_pkce_and_a_sealed_cookie(
    tmp_path: Path,
) -> None:
    args = parse_args([*REQUIRED, *files(tmp_path), "--public-url", "https://desktops.example.com"])
    verifier = TokenVerifier(OidcSettings(issuer=REQUIRED[1], audience="desk"))
    # The discovery document as if fetched (no issuer here).
    verifier._jwks_uri = f"{REQUIRED[1]}/certs"
    verifier._metadata = {"authorization_endpoint": f"{REQUIRED[1]}/auth"}
    portal = Portal(verifier, args.portal_settings)

    async def run() -> tuple[int, str, list[str]]:
        app = web.Application()
        app.add_routes(portal.routes())
        async with TestClient(TestServer(app)) as client:
            answer = await client.get("/auth/login?next=//evil.example", allow_redirects=False)
            return answer.status, answer.headers["Location"], answer.headers.getall("Set-Cookie")

    status, location, set_cookies = asyncio.run(run())
    assert status == 302
    target = urllib.parse.urlsplit(location)
    assert f"{target.scheme}://{target.netloc}{target.path}" == f"{REQUIRED[1]}/auth"
    query = dict(urllib.parse.parse_qsl(target.query))
    assert query["redirect_uri"] == "https://desktops.example.com/auth/callback"
    assert query["response_type"] == "code"
    assert query["client_id"] == "hostpool-portal"
    assert query["code_challenge_method"] == "S256"
    [cookie] = set_cookies
    attributes = [a.strip().lower() for a in cookie.split(";")]
    assert "httponly" in attributes
    assert "secure" in attributes
    assert "samesite=lax" in attributes
    assert "path=/auth/" in attributes
    name, _, value = cookie.split(";")[0].partition("=")
    assert name == "__Secure-hostpool_signin"  # behind https: sent only over TLS
    started = cookies.open_sealed(
        args.portal_settings.cookie_key, "hostpool_signin", value, time.time()
    )
    assert started["s"] == query["state"]
    assert started["n"] == query["nonce"]
    assert pkce_challenge(started["c"]) == query["code_challenge"]
    assert started["next"] == "/"  # //evil.example was not kept
    assert started["c"] not in location


def test_behind_https_the_session_cookie_is_host_prefixed(tmp_path: Path) -> None:
    https = parse_args([*REQUIRED, *files(tmp_path), "--public-url", "https://d.example.com"])
    assert https.portal_settings.session_cookie == "__Host-hostpool_session"
    http = parse_args([*REQUIRED, *files(tmp_path), "--public-url", "http://127.0.0.1:8443"])
    assert http.portal_settings.session_cookie == "hostpool_session"  # no prefix without TLS


def test_a_session_keeps_only_the_groups_some_pool_names(tmp_path: Path) -> None:
    """A person in 1,000 groups: the session keeps the three some pool names, and its
    cookie (with a refresh token of Keycloak's size) stays one cookie under 4 KB."""
    args = parse_args([*REQUIRED, *files(tmp_path), "--public-url", "https://d.example.com"])
    portal = Portal(
        TokenVerifier(OidcSettings(issuer=REQUIRED[1], audience="desk")), args.portal_settings
    )
    groups = frozenset(f"/corp/department-{i:04d}/team" for i in range(1_000))
    named = frozenset({"/corp/department-0007/team", "/corp/department-0500/team", "/other"})
    portal.groups_named = lambda: named
    caller = Caller("alice@corp.example", groups, None)
    kept = portal._kept_groups(caller)
    assert kept == ["/corp/department-0007/team", "/corp/department-0500/team"]
    now = time.time()
    data = {"u": caller.user, "g": kept, "rt": "r" * 900, "ax": now + 300, "sx": now + 36_000,
            "csrf": "c" * 43, "x": None}  # fmt: skip
    sealed = cookies.seal(args.portal_settings.cookie_key, "hostpool_session", data, now, 36_000)
    assert len(sealed) < 4_000
    assert list(cookies.split("__Host-hostpool_session", sealed)) == ["__Host-hostpool_session"]
    portal.groups_named = None  # not said: all are kept
    assert len(portal._kept_groups(caller)) == 1_000
