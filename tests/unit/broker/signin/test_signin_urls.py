"""Where the portal may send a browser after sign-in (``next``), and the same-origin check of
the CSRF rule."""

from __future__ import annotations

import urllib.parse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.broker.oidc import InvalidTokenError
from hostpool_operator.broker.signin.flow import check_id_claims, pkce_challenge
from hostpool_operator.broker.signin.urls import origin_of, safe_next, same_origin_headers

ORIGIN = "https://portal.example"


@pytest.mark.parametrize(
    ("given_path", "kept"),
    [
        ("/", "/"),
        ("/desktop/corp/desk", "/desktop/corp/desk"),
        ("/?lang=sv#top", "/?lang=sv#top"),
        ("/a/../b", "/a/../b"),
        (None, "/"),
        ("", "/"),
        ("https://evil.example", "/"),
        ("http://evil.example/", "/"),
        ("//evil.example", "/"),
        ("///evil.example", "/"),
        ("/\\evil.example", "/"),
        ("\\\\evil.example", "/"),
        ("/\t/evil.example", "/"),
        ("/\n/evil.example", "/"),
        ("/\r\n/evil.example", "/"),
        (" /evil", "/"),
        ("/ /evil", "/"),
        ("javascript:alert(1)", "/"),
        ("data:text/html,hi", "/"),
        ("evil.example", "/"),
        ("/\u3000/evil.example", "/"),
        ("/\uff0f\uff0fevil.example", "/"),
        ("/" + "a" * 3000, "/"),
    ],
)
def test_next_is_kept_only_when_it_is_a_path_of_this_origin(
    given_path: str | None, kept: str
) -> None:
    assert safe_next(given_path) == kept


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.text(max_size=80), st.from_regex(r"\A[/\\\t ]{0,3}[a-z:./]{0,20}\Z")))
def test_no_next_ever_leaves_the_origin(path: str) -> None:
    kept = safe_next(path)
    joined = urllib.parse.urljoin(ORIGIN + "/auth/callback", kept)
    assert joined.startswith(ORIGIN + "/")
    assert kept.startswith("/")
    assert not kept.startswith("//")
    assert "\\" not in kept
    assert all(0x21 <= ord(c) <= 0x7E for c in kept)


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://portal.example", "https://portal.example"),
        ("https://Portal.Example:443/page?q#f", "https://portal.example"),
        ("http://127.0.0.1:8443/", "http://127.0.0.1:8443"),
        ("http://127.0.0.1:80", "http://127.0.0.1"),
        ("http://[::1]:8443", "http://[::1]:8443"),
        ("null", None),
        ("", None),
        ("/relative", None),
        ("ftp://portal.example", None),
        ("https://user:pw@portal.example", None),
        ("https://portal.example:99999", None),
    ],
)
def test_origin_of(url: str, origin: str | None) -> None:
    assert origin_of(url) == origin


@pytest.mark.parametrize(
    ("origin", "referer", "same"),
    [
        (ORIGIN, None, True),
        (ORIGIN + ":443", None, True),
        ("https://evil.example", None, False),
        ("https://portal.example.evil.example", None, False),
        ("http://portal.example", None, False),  # another scheme is another origin
        ("https://portal.example:8443", None, False),
        ("null", ORIGIN + "/", False),  # an Origin, even null, is the one looked at
        (None, ORIGIN + "/pools", True),
        (None, "https://evil.example/" + ORIGIN, False),
        (None, None, False),
    ],
)
def test_same_origin(origin: str | None, referer: str | None, same: bool) -> None:
    assert same_origin_headers(origin, referer, ORIGIN) is same


def test_pkce_challenge_is_rfc_7636s() -> None:
    # RFC 7636, appendix B.
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert pkce_challenge(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


ISSUER = "https://idp.example/realms/corp"
GOOD = {"iss": ISSUER, "aud": "hostpool-portal", "typ": "ID", "nonce": "n-1", "exp": 1}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"iss": ISSUER + "/"}, "issuer"),
        ({"aud": "hostpool-desktops"}, "client"),
        ({"aud": ["hostpool-desktops", "hostpool-portal"]}, "azp"),
        ({"typ": "Bearer"}, "not an ID token"),
        ({"nonce": "n-2"}, "nonce"),
        ({"nonce": None}, "nonce"),
    ],
)
def test_an_id_token_of_another_sign_in_is_refused(change: dict[str, object], problem: str) -> None:
    check_id_claims(GOOD, ISSUER, "hostpool-portal", "n-1")
    with pytest.raises(InvalidTokenError, match=problem):
        check_id_claims({**GOOD, **change}, ISSUER, "hostpool-portal", "n-1")
    with pytest.raises(InvalidTokenError, match="nonce"):
        check_id_claims(GOOD, ISSUER, "hostpool-portal", "")
