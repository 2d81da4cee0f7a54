"""What the broker takes from a verified token's claims: the user and the groups, and which
claims it refuses (the signature and the standard claims are checked live, against Keycloak,
in tests/e2e/test_broker_live.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hostpool_operator.broker.oidc import MAX_GROUPS, InvalidTokenError, OidcSettings, TokenVerifier


def verifier(**settings: Any) -> TokenVerifier:
    return TokenVerifier(
        OidcSettings(issuer="https://idp.example/realms/corp", audience="a", **settings)
    )


def test_user_and_groups_from_the_configured_claims() -> None:
    caller = verifier().caller({"preferred_username": "alice", "groups": ["a", "b", "a"]})
    assert (caller.user, caller.groups) == ("alice", frozenset({"a", "b"}))
    assert verifier().caller({"preferred_username": "bob"}).groups == frozenset()
    other = verifier(user_claim="email", groups_claim="roles")
    caller = other.caller(
        {"email": "carol@corp.example", "email_verified": True, "roles": ["desk"], "groups": ["x"]}
    )
    assert (caller.user, caller.groups) == ("carol@corp.example", frozenset({"desk"}))


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({}, "missing or not a string"),
        ({"preferred_username": ""}, "missing or not a string"),
        ({"preferred_username": ["alice"]}, "missing or not a string"),
        ({"preferred_username": 7}, "missing or not a string"),
        ({"preferred_username": "u" * 257}, "longer than 256"),
        # A SessionRequest's spec.user refuses these: the API server's 422 would have become
        # a 503 "try again" for good.
        ({"preferred_username": "alice\r\nfull address:s:evil"}, "control character"),
        ({"preferred_username": "alice\x1b[2J"}, "control character"),
        ({"preferred_username": "alice\u2028"}, "control character"),
        ({"preferred_username": "alice", "groups": "finance"}, "not a list of strings"),
        ({"preferred_username": "alice", "groups": ["a", 1]}, "not a list of strings"),
        (
            {"preferred_username": "alice", "groups": [f"g{i}" for i in range(MAX_GROUPS + 1)]},
            f"more than {MAX_GROUPS}",
        ),
    ],
)
def test_claims_refused(claims: dict[str, Any], why: str) -> None:
    with pytest.raises(InvalidTokenError, match=why):
        verifier().caller(claims)


@pytest.mark.parametrize(
    ("header", "why"),
    [
        (None, "no bearer token"),
        ("", "no bearer token"),
        ("Basic YWxpY2U6cHc=", "not a bearer token"),
        ("Bearer", "not a bearer token"),
        ("Bearer " + "x" * (64 * 1024 + 1), "too long"),
        ("Bearer abc", "not a JWT"),
        # alg none and HS256 are refused before any key is looked up.
        ("Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", "algorithm 'none'"),
        (
            "Bearer eyJhbGciOiJIUzI1NiIsImtpZCI6ImsifQ.eyJzdWIiOiJ4In0.c2ln",
            "algorithm 'HS256'",
        ),
        ("Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", "names no key"),
    ],
)
def test_headers_refused_before_any_key(header: str | None, why: str) -> None:
    with pytest.raises(InvalidTokenError, match=why):
        asyncio.run(verifier().verify(header))


NOW = 1_800_000_000.0
GOOD = {"iss": "https://idp.example/realms/corp", "aud": "a", "exp": NOW + 300}


@pytest.mark.parametrize(
    "claims",
    [
        GOOD,
        {**GOOD, "aud": ["account", "a"]},
        {**GOOD, "typ": "Bearer"},
        {**GOOD, "exp": NOW - 59},  # within the leeway
        {**GOOD, "nbf": NOW + 59},
        {**GOOD, "exp": NOW + 300.5, "nbf": NOW - 1},
    ],
)
def test_claims_accepted(claims: dict[str, Any]) -> None:
    verifier().check_claims(claims, NOW)


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({**GOOD, "iss": "https://idp.example/realms/other"}, "another issuer"),
        ({**GOOD, "iss": "https://idp.example/realms/corp/"}, "another issuer"),
        ({**GOOD, "typ": "ID"}, "not an access token"),
        ({**GOOD, "typ": "Refresh"}, "not an access token"),
        ({k: v for k, v in GOOD.items() if k != "iss"}, "another issuer"),
        ({**GOOD, "aud": "b"}, "not for this audience"),
        ({**GOOD, "aud": ["b", "c"]}, "not for this audience"),
        ({**GOOD, "aud": {"a": 1}}, "not for this audience"),
        ({k: v for k, v in GOOD.items() if k != "aud"}, "not for this audience"),
        ({k: v for k, v in GOOD.items() if k != "exp"}, "no expiry"),
        ({**GOOD, "exp": "soon"}, "no expiry"),
        ({**GOOD, "exp": True}, "no expiry"),
        ({**GOOD, "exp": NOW - 61}, "expired"),
        ({**GOOD, "nbf": NOW + 61}, "not valid yet"),
        ({**GOOD, "nbf": "now"}, "not valid yet"),
    ],
)
def test_claims_refused_by_the_standard_checks(claims: dict[str, Any], why: str) -> None:
    with pytest.raises(InvalidTokenError, match=why):
        verifier().check_claims(claims, NOW)
