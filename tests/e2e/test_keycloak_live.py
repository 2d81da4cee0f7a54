"""The ``keycloak`` fixture itself: a real Keycloak whose tokens verify with PyJWT against the
keys its discovery document points at, for the issuer and the audience the suite's realms
promise, with the claims the tests of the broker rely on; wrong passwords refused; key
rotation through the admin API seen at once in new tokens and in the JWKS.

Rotation changes realm ``other`` only: the keys of ``corp`` stay as they were for every
other test of the session. Tokens are never printed: assertions name claims and key ids.
"""

from __future__ import annotations

import asyncio
from typing import Any

import jwt
import pytest

from support.keycloak import (
    CLIENT_ID,
    CLIENT_SECRET,
    CORP,
    CORP_USERS,
    OTHER,
    Keycloak,
    KeycloakError,
)


def verify(keycloak: Keycloak, realm: str, token: str) -> dict[str, Any]:
    """The claims of a token verified as a relying party would: the key found in the JWKS
    of the discovered ``jwks_uri`` (fetched now), RS256 only, issuer and audience checked."""
    keys = jwt.PyJWKClient(keycloak.jwks_uri(realm), cache_keys=False, cache_jwk_set=False)
    key = keys.get_signing_key_from_jwt(token)
    claims: dict[str, Any] = jwt.decode(
        token,
        key,
        algorithms=["RS256"],
        audience=CLIENT_ID,
        issuer=keycloak.issuer(realm),
        options={"require": ["exp", "iat", "iss", "aud", "sub"]},
    )
    return claims


def audiences(claims: dict[str, Any]) -> list[str]:
    aud = claims["aud"]
    return [aud] if isinstance(aud, str) else list(aud)


def test_discovery_names_the_pinned_issuer(keycloak: Keycloak) -> None:
    for realm in (CORP, OTHER):
        meta = keycloak.discovery(realm)
        assert meta["issuer"] == keycloak.issuer(realm)
        assert meta["issuer"].startswith("http://127.0.0.1:")
        assert meta["jwks_uri"].startswith(keycloak.issuer(realm) + "/")
        assert "password" in meta["grant_types_supported"]


def test_alice_token_carries_her_name_group_and_audience(keycloak: Keycloak) -> None:
    token = keycloak.token(CORP, CLIENT_ID, CLIENT_SECRET, "alice", "alice-pw")
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "RS256"
    claims = verify(keycloak, CORP, token)
    assert claims["preferred_username"] == "alice"
    assert claims["groups"] == ["/finance-desk"]
    assert CLIENT_ID in audiences(claims)
    assert claims["azp"] == CLIENT_ID
    assert claims["typ"] == "Bearer"
    assert claims["email"] == "alice@corp.example"
    # The suite's realms give tokens 600 s: longer than any test.
    assert claims["exp"] - claims["iat"] == 600


def test_groups_claim_lists_full_paths(keycloak: Keycloak) -> None:
    """Full paths (the group mapper's full.path): heidi's /contractors/finance-desk is not
    alice's /finance-desk, though both groups are named finance-desk."""
    tokens = asyncio.run(keycloak.tokens(CORP, CLIENT_ID, CLIENT_SECRET, CORP_USERS, concurrency=4))
    assert sorted(tokens) == sorted(u for u, _, _ in CORP_USERS)
    for username, _, groups in CORP_USERS:
        claims = verify(keycloak, CORP, tokens[username])
        assert claims["preferred_username"] == username
        if groups:
            assert sorted(claims["groups"]) == sorted(groups), username
        else:
            # No group at all: Keycloak leaves the claim out rather than sending [].
            assert "groups" not in claims, username
    frank = verify(keycloak, CORP, tokens["frank"])
    assert len(frank["groups"]) == 10
    heidi = verify(keycloak, CORP, tokens["heidi"])
    assert heidi["groups"] == ["/contractors/finance-desk"]
    assert verify(keycloak, CORP, tokens["alice"])["groups"] == ["/finance-desk"]


def test_the_kinds_of_token_keycloak_issues(keycloak: Keycloak) -> None:
    """What the broker tells an access token by: Keycloak writes typ Bearer into an access
    token's payload and ID into an ID token's, which has the same issuer, the client id in
    aud and the same user; the refresh token is HS512 (a secret of Keycloak's own)."""
    answer = keycloak.token_response(CORP, CLIENT_ID, CLIENT_SECRET, "alice", "alice-pw")
    access, id_token = answer["access_token"], answer["id_token"]
    assert jwt.get_unverified_header(access)["typ"] == "JWT"
    assert verify(keycloak, CORP, access)["typ"] == "Bearer"
    claims = verify(keycloak, CORP, id_token)
    assert claims["typ"] == "ID"
    assert claims["preferred_username"] == "alice"
    assert CLIENT_ID in audiences(claims)
    refresh = jwt.get_unverified_header(answer["refresh_token"])
    assert refresh["alg"].startswith("HS")
    assert jwt.decode(answer["refresh_token"], options={"verify_signature": False})["typ"] == (
        "Refresh"
    )


def test_bob_has_no_groups_claim(keycloak: Keycloak) -> None:
    claims = verify(keycloak, CORP, keycloak.login(CORP, "bob"))
    assert claims["preferred_username"] == "bob"
    assert "groups" not in claims


def test_wrong_password_and_missing_secret_are_refused(keycloak: Keycloak) -> None:
    with pytest.raises(KeycloakError, match=r"HTTP 401: .*invalid_grant"):
        keycloak.token(CORP, CLIENT_ID, CLIENT_SECRET, "alice", "not-her-password")
    with pytest.raises(KeycloakError, match=r"HTTP 401: .*invalid_grant"):
        keycloak.token(CORP, CLIENT_ID, CLIENT_SECRET, "nobody", "nobody-pw")
    with pytest.raises(KeycloakError, match=r"HTTP 401: .*unauthorized_client"):
        keycloak.token(CORP, CLIENT_ID, None, "alice", "alice-pw")
    with pytest.raises(KeycloakError, match=r"'bob'.*HTTP 401: .*invalid_grant"):
        asyncio.run(
            keycloak.tokens(
                CORP, CLIENT_ID, CLIENT_SECRET, [("alice", "alice-pw"), ("bob", "not-bob-pw")]
            )
        )
    # corp's password is not the other realm's.
    with pytest.raises(KeycloakError, match=r"HTTP 401: .*invalid_grant"):
        keycloak.token(OTHER, CLIENT_ID, CLIENT_SECRET, "alice", "alice-pw")


def test_token_of_the_other_realm_fails_corps_checks(keycloak: Keycloak) -> None:
    token = keycloak.login(OTHER, "alice")
    claims = verify(keycloak, OTHER, token)
    assert claims["preferred_username"] == "alice"
    assert claims["groups"] == ["/finance-desk"]
    assert CLIENT_ID in audiences(claims)
    # Each realm signs with keys of its own: corp's JWKS does not know the key...
    corp_kids = {k["kid"] for k in keycloak.jwks(CORP)["keys"]}
    assert jwt.get_unverified_header(token)["kid"] not in corp_kids
    # ...and the issuer is not corp's even where the key is taken from the token's realm.
    with pytest.raises(jwt.InvalidIssuerError):
        jwt.decode(
            token,
            jwt.PyJWKClient(keycloak.jwks_uri(OTHER)).get_signing_key_from_jwt(token),
            algorithms=["RS256"],
            audience=CLIENT_ID,
            issuer=keycloak.issuer(CORP),
        )


def test_rotated_key_signs_new_tokens_and_old_ones_still_verify(keycloak: Keycloak) -> None:
    old = keycloak.login(OTHER, "alice")
    old_kid = jwt.get_unverified_header(old)["kid"]

    new_kid = keycloak.rotate_key(OTHER)
    assert new_kid != old_kid
    jwks_kids = {k["kid"] for k in keycloak.jwks(OTHER)["keys"]}
    assert {old_kid, new_kid} <= jwks_kids

    new = keycloak.login(OTHER, "alice")
    assert jwt.get_unverified_header(new)["kid"] == new_kid
    assert verify(keycloak, OTHER, new)["preferred_username"] == "alice"
    assert verify(keycloak, OTHER, old)["preferred_username"] == "alice"

    # Passive: no longer signs, still published.
    keycloak.retire_key(OTHER, old_kid)
    assert old_kid in {k["kid"] for k in keycloak.jwks(OTHER)["keys"]}
    assert verify(keycloak, OTHER, old)["preferred_username"] == "alice"
    # Removed: gone from the JWKS, so the tokens it signed no longer verify.
    keycloak.retire_key(OTHER, old_kid, remove=True)
    assert old_kid not in {k["kid"] for k in keycloak.jwks(OTHER)["keys"]}
    with pytest.raises(jwt.PyJWKClientError):
        verify(keycloak, OTHER, old)
    assert verify(keycloak, OTHER, keycloak.login(OTHER, "alice"))["preferred_username"] == "alice"
