"""The token checks of the broker's verifier, on tokens signed with real keys (RSA, by the
cryptography library through PyJWT) and a key set given to the verifier as the issuer would
publish it: which kinds of token it takes (an access token) and which it refuses (an ID
token, a refresh token, a header it does not understand, an issuer not exactly its own, a
client it was not told to trust, an e-mail address nobody verified).

The key set is fetched from a real issuer (Keycloak) in tests/e2e/test_broker_auth_live.py;
here it is handed over, so that each rule is shown on its own.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.access.connect import Caller
from hostpool_operator.api.access import Entitlements
from hostpool_operator.broker.oidc import InvalidTokenError, OidcSettings, TokenVerifier

ISSUER = "https://idp.example/realms/corp"
AUDIENCE = "hostpool-desktops"
KID = "test-key"


@functools.cache
def private_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks() -> dict[str, Any]:
    public = jwt.algorithms.RSAAlgorithm.to_jwk(private_key().public_key(), as_dict=True)
    return {"keys": [{**public, "kid": KID, "use": "sig", "alg": "RS256"}]}


def verifier(on_fetch: Callable[[bool], None] | None = None, **settings: Any) -> TokenVerifier:
    """A verifier of tokens for AUDIENCE from ISSUER (``settings`` override OidcSettings'),
    handed the key set; ``on_fetch`` hears whether each fetch of the set worked."""
    made = TokenVerifier(
        OidcSettings(**{"issuer": ISSUER, "audience": AUDIENCE, **settings}), on_fetch=on_fetch
    )
    made.use_keys(jwks())
    return made


def access_token(headers: dict[str, Any] | None = None, **claims: Any) -> str:
    """What Keycloak issues as an access token (header typ JWT, claim typ Bearer), claims
    overridden by keywords (None leaves one out)."""
    body: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "7d1c8e0a-5b1f-4c3e-9a55-0d7f4c2b9e11",
        "typ": "Bearer",
        "azp": AUDIENCE,
        "exp": 4_000_000_000,
        "iat": 1_700_000_000,
        "preferred_username": "alice",
        "email": "alice@corp.example",
        "email_verified": True,
        "groups": ["/finance-desk"],
    }
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    header = {"kid": KID, "typ": "JWT", **(headers or {})}
    return jwt.encode(body, private_key(), algorithm="RS256", headers=header)


def verify(token: str, **settings: Any) -> Caller:
    return asyncio.run(verifier(**settings).verify(f"Bearer {token}"))


def test_an_access_token_is_accepted() -> None:
    caller = verify(access_token())
    assert (caller.user, caller.groups) == ("alice", frozenset({"/finance-desk"}))


# ---------------------------------------------------------------------------------------
# the kind of token: typ in the header and in the claims, crit


@pytest.mark.parametrize(
    "typ", [None, "JWT", "jwt", "at+jwt", "AT+JWT", "application/at+jwt", "Application/JWT"]
)
def test_header_types_of_an_access_token_are_accepted(typ: str | None) -> None:
    assert verify(access_token({"typ": typ})).user == "alice"


@pytest.mark.parametrize(
    "typ",
    ["JOSE", "dpop+jwt", "logout+jwt", "secevent+jwt", "application/id+jwt", "JWT ", 7],
)
def test_other_header_types_are_refused(typ: Any) -> None:
    with pytest.raises(InvalidTokenError, match="header type"):
        verify(access_token({"typ": typ}))


@pytest.mark.parametrize("crit", [["exp"], ["b64"], ["http://example.com/ext"], [], "exp"])
def test_a_crit_header_is_refused(crit: Any) -> None:
    """RFC 7515 4.1.11: an extension the recipient does not understand makes the token
    invalid; the broker understands none."""
    with pytest.raises(InvalidTokenError, match="crit"):
        verify(access_token({"crit": crit}))


@pytest.mark.parametrize("typ", ["ID", "Refresh", "Offline", "Logout", "bearer", "", ["Bearer"], 1])
def test_tokens_other_than_access_tokens_are_refused(typ: Any) -> None:
    """Keycloak writes the kind of token in the payload: ID (the ID token, which carries
    the same issuer, audience and user), Refresh, Offline, Logout..."""
    with pytest.raises(InvalidTokenError, match="not an access token"):
        verify(access_token(typ=typ))


def test_a_token_without_a_typ_claim_is_accepted() -> None:
    """Issuers other than Keycloak (Entra ID, Dex, Okta) write no typ claim."""
    assert verify(access_token(typ=None)).user == "alice"


# ---------------------------------------------------------------------------------------
# the issuer, exactly


@pytest.mark.parametrize(
    "iss",
    [
        ISSUER + "/",
        ISSUER + "//",
        "https://IDP.example/realms/corp",
        "https://idp.example/realms/Corp",
        "https://idp.example:443/realms/corp",
        "http://idp.example/realms/corp",
        ISSUER + " ",
        ISSUER + "/../corp",
    ],
)
def test_an_issuer_not_exactly_the_configured_one_is_refused(iss: str) -> None:
    with pytest.raises(InvalidTokenError, match="another issuer"):
        verify(access_token(iss=iss))


def test_an_issuer_configured_with_a_trailing_slash_wants_it_in_the_token() -> None:
    assert verify(access_token(iss=ISSUER + "/"), issuer=ISSUER + "/").user == "alice"
    with pytest.raises(InvalidTokenError, match="another issuer"):
        verify(access_token(iss=ISSUER), issuer=ISSUER + "/")


# ---------------------------------------------------------------------------------------
# the authorized party


def test_without_an_allow_list_any_authorized_party_is_accepted() -> None:
    assert verify(access_token(azp="some-other-app")).user == "alice"
    assert verify(access_token(azp=None)).user == "alice"


@pytest.mark.parametrize(
    ("azp", "accepted"),
    [
        ("rdp-portal", True),
        ("rdp-client", True),
        ("some-other-app", False),
        ("RDP-PORTAL", False),
        ("", False),
        (None, False),
        (["rdp-portal"], False),
    ],
)
def test_the_authorized_party_allow_list(azp: Any, accepted: bool) -> None:
    parties = ("rdp-portal", "rdp-client")
    token = access_token(azp=azp)
    if accepted:
        assert verify(token, authorized_parties=parties).user == "alice"
    else:
        with pytest.raises(InvalidTokenError, match="authorized party"):
            verify(token, authorized_parties=parties)


# ---------------------------------------------------------------------------------------
# the user claim: email only when verified


def test_email_as_the_user_claim_when_verified() -> None:
    assert verify(access_token(), user_claim="email").user == "alice@corp.example"


@pytest.mark.parametrize("verified", [False, None, "true", 1, "yes"])
def test_email_as_the_user_claim_refused_unless_verified_is_true(verified: Any) -> None:
    with pytest.raises(InvalidTokenError, match="email_verified"):
        verify(access_token(email_verified=verified), user_claim="email")


def test_email_verified_does_not_matter_for_other_user_claims() -> None:
    assert verify(access_token(email_verified=False)).user == "alice"
    assert verify(access_token(email_verified=False), user_claim="sub").user.startswith("7d1c")


# ---------------------------------------------------------------------------------------
# groups: exactly as the token carries them


def admitted(token_groups: list[str], pool_groups: list[str]) -> bool:
    caller = verifier().caller({"preferred_username": "zed", "groups": token_groups})
    return Entitlements(users=[], groups=pool_groups).admits(caller.user, caller.groups)


@pytest.mark.parametrize(
    ("token_groups", "pool_groups", "expected"),
    [
        (["/contractors/finance-desk"], ["/contractors/finance-desk"], True),
        (["/contractors/finance-desk"], ["finance-desk"], False),
        (["/contractors/finance-desk"], ["/finance-desk"], False),
        (["/contractors/finance-desk"], ["/contractors"], False),
        (["/contractors/finance-desk"], ["/Contractors/finance-desk"], False),
        (["/contractors/finance-desk"], ["/contractors/finance-desk/"], False),
        (["/finance-desk"], ["finance-desk"], False),
        (["finance-desk"], ["/finance-desk"], False),
        (["/finance-desk-eu"], ["/finance-desk"], False),
        (["/finance-desk"], ["/finance-desk"], True),
        ([" /finance-desk"], ["/finance-desk"], False),
    ],
)
def test_groups_match_exactly_as_the_token_carries_them(
    token_groups: list[str], pool_groups: list[str], expected: bool
) -> None:
    assert admitted(token_groups, pool_groups) is expected


@given(st.lists(st.text(min_size=1, max_size=30), max_size=8), st.text(min_size=1, max_size=30))
def test_a_group_is_admitted_only_when_the_token_lists_that_exact_string(
    token_groups: list[str], pool_group: str
) -> None:
    assert admitted(token_groups, [pool_group]) is (pool_group in token_groups)
    caller = verifier().caller({"preferred_username": "zed", "groups": token_groups})
    assert caller.groups == frozenset(token_groups)  # taken as they are, nothing rewritten


# ---------------------------------------------------------------------------------------
# the key set's age when the issuer cannot be reached (nothing listens on port 1: every
# fetch fails at once, as for an issuer that is down)

DOWN = "https://127.0.0.1:1/realms/corp"


def test_past_its_max_age_a_set_is_kept_while_fetches_fail_within_the_stale_allowance(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fetches: list[bool] = []

    async def scenario() -> Caller:
        made = verifier(
            fetches.append, issuer=DOWN, refetch_interval=0, keys_max_age=0.05, keys_max_stale=60
        )
        await asyncio.sleep(0.1)
        try:
            return await made.verify(f"Bearer {access_token(iss=DOWN)}")
        finally:
            await made.close()

    assert asyncio.run(scenario()).user == "alice"
    assert fetches == [False]
    assert "keeping the set fetched 0 s ago (1 keys) for at most 60 s more" in caplog.text


def test_past_the_stale_allowance_no_token_is_accepted_until_a_fetch_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> tuple[bool, str]:
        made = verifier(issuer=DOWN, refetch_interval=0, keys_max_age=0.05, keys_max_stale=0.05)
        assert made.ready
        await asyncio.sleep(0.2)
        try:
            await made.verify(f"Bearer {access_token(iss=DOWN)}")
        except InvalidTokenError as error:
            return made.ready, str(error)
        finally:
            await made.close()
        return made.ready, "accepted"

    assert asyncio.run(scenario()) == (False, "the issuer's keys could not be fetched for too long")
    assert "every token is refused until a fetch works" in caplog.text


def test_a_set_within_its_max_age_is_not_fetched_again() -> None:
    fetches: list[bool] = []

    async def scenario() -> None:
        made = verifier(fetches.append, issuer=DOWN, refetch_interval=0)
        for _ in range(3):
            await made.verify(f"Bearer {access_token(iss=DOWN)}")
        await made.close()

    asyncio.run(scenario())
    assert fetches == []
