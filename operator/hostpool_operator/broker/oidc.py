"""OIDC bearer tokens: the issuer's keys found through discovery, and each token checked
against them.

Keys are fetched from the issuer's ``jwks_uri`` and kept; a token signed with a key id the
set does not know makes the broker fetch it again (at most once per ``refetch_interval``,
so a flood of made-up key ids cannot turn the broker against the issuer), and a failed
fetch keeps the last good set. Only asymmetric algorithms are accepted: a token with
``alg: none`` or an HMAC algorithm is refused whatever it claims.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import jwt
import orjson

from ..access.connect import Caller

log = logging.getLogger(__name__)

ASYMMETRIC = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
#: Longest token looked at (a bigger Authorization header is refused before decoding).
MAX_TOKEN = 64 * 1024
#: Most groups taken from a token: more is refused rather than matched one by one.
MAX_GROUPS = 1000
LEEWAY_SECONDS = 60


class InvalidTokenError(Exception):
    """The caller is not authenticated: the message says why (never the token)."""


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    audience: str
    user_claim: str = "preferred_username"
    groups_claim: str = "groups"
    ca_file: str | None = None
    refetch_interval: float = 60.0


class TokenVerifier:
    """Verifies bearer tokens of one issuer for one audience. ``on_fetch(ok)`` is told of
    every fetch of the key set (the metrics count them)."""

    def __init__(
        self, settings: OidcSettings, on_fetch: Callable[[bool], None] | None = None
    ) -> None:
        self.settings = settings
        self._on_fetch = on_fetch or (lambda ok: None)
        self.issuer = settings.issuer.rstrip("/")
        self._ssl: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=settings.ca_file) if settings.ca_file else True
        )
        self._session: aiohttp.ClientSession | None = None
        self._jwks_uri: str | None = None
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = float("-inf")
        self._fetching: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl),
                timeout=aiohttp.ClientTimeout(total=10),
            )
        return self._session

    async def _get_json(self, url: str) -> dict[str, Any]:
        async with self._http().get(url) as response:
            if response.status != 200:
                raise OSError(f"GET {url}: {response.status}")
            body = await response.json(content_type=None)
        if not isinstance(body, dict):
            raise OSError(f"GET {url}: not a JSON object")
        return body

    @property
    def ready(self) -> bool:
        return bool(self._keys)

    async def refresh(self) -> None:
        """Discovery (once) and the key set; keeps the last good set when this fails."""
        self._fetched_at = time.monotonic()
        try:
            if self._jwks_uri is None:
                found = await self._get_json(f"{self.issuer}/.well-known/openid-configuration")
                if str(found.get("issuer", "")).rstrip("/") != self.issuer:
                    raise OSError(f"discovery names issuer {found.get('issuer')!r}")
                uri = found.get("jwks_uri")
                if not isinstance(uri, str):
                    raise OSError("discovery has no jwks_uri")
                self._jwks_uri = uri
            keys = jwt.PyJWKSet.from_dict(await self._get_json(self._jwks_uri))
            usable = {
                k.key_id: k
                for k in keys.keys
                if k.key_id and k.public_key_use in (None, "sig") and k.algorithm_name in ASYMMETRIC
            }
            if not usable:
                raise OSError("the key set has no signing key")
            self._keys = usable
            self._on_fetch(True)
            log.info("issuer keys: %d signing keys (%s)", len(usable), ", ".join(sorted(usable)))
        except (OSError, aiohttp.ClientError, TimeoutError, ValueError, jwt.PyJWTError) as error:
            self._on_fetch(False)
            log.warning(
                "issuer keys not fetched (%s); keeping %d known keys", error, len(self._keys)
            )

    async def _refetch_for(self, kid: str) -> None:
        """An unknown key id: fetch the set again unless that was done a moment ago. Callers
        arriving together share one fetch."""
        if kid in self._keys:
            return
        if self._fetching is None or self._fetching.done():
            if time.monotonic() - self._fetched_at < self.settings.refetch_interval:
                return
            self._fetching = asyncio.ensure_future(self.refresh())
        await asyncio.shield(self._fetching)

    async def verify(self, authorization: str | None) -> Caller:
        """The caller of an ``Authorization`` header; InvalidTokenError otherwise."""
        if not authorization:
            raise InvalidTokenError("no bearer token")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise InvalidTokenError("the Authorization header is not a bearer token")
        if len(token) > MAX_TOKEN:
            raise InvalidTokenError("the token is too long")
        signing_input, header, payload, signature = _split(token)
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ASYMMETRIC:
            raise InvalidTokenError(f"algorithm {str(alg)[:16]!r} is not accepted")
        if not isinstance(kid, str) or not kid:
            raise InvalidTokenError("the token names no key")
        if kid not in self._keys:
            await self._refetch_for(kid)
        key = self._keys.get(kid)
        if key is None:
            raise InvalidTokenError("signed by a key the issuer does not publish")
        if key.algorithm_name != alg:
            raise InvalidTokenError("the token's algorithm does not match its key")
        # The signature with the key's own algorithm (PyJWT's, on the cryptography library),
        # then the claims: only a signed payload is read.
        try:
            signed = key.Algorithm.verify(signing_input, key.key, signature)
        except (ValueError, TypeError, jwt.PyJWTError):
            signed = False
        if not signed:
            raise InvalidTokenError("the signature does not verify")
        claims = _json_object(payload, "payload")
        self.check_claims(claims, time.time())
        return self.caller(claims)

    def check_claims(self, claims: dict[str, Any], now: float) -> None:
        """iss, aud, exp (required), nbf (when present), with LEEWAY_SECONDS."""
        issuer = claims.get("iss")
        if not isinstance(issuer, str) or issuer.rstrip("/") != self.issuer:
            raise InvalidTokenError("the token is from another issuer")
        audience = claims.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience
        if not isinstance(audiences, list) or self.settings.audience not in audiences:
            raise InvalidTokenError("the token is not for this audience")
        expires = claims.get("exp")
        if not isinstance(expires, int | float) or isinstance(expires, bool):
            raise InvalidTokenError("the token has no expiry")
        if now > expires + LEEWAY_SECONDS:
            raise InvalidTokenError("the token has expired")
        not_before = claims.get("nbf")
        if not_before is not None and (
            not isinstance(not_before, int | float)
            or isinstance(not_before, bool)
            or now + LEEWAY_SECONDS < not_before
        ):
            raise InvalidTokenError("the token is not valid yet")

    def caller(self, claims: dict[str, Any]) -> Caller:
        """The user and groups of verified claims (never of the request body)."""
        user_claim, groups_claim = self.settings.user_claim, self.settings.groups_claim
        user = claims.get(user_claim)
        if not isinstance(user, str) or not user:
            raise InvalidTokenError(f"claim {user_claim!r} is missing or not a string")
        if len(user) > 256:
            raise InvalidTokenError(f"claim {user_claim!r} is longer than 256 characters")
        groups = claims.get(groups_claim, [])
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise InvalidTokenError(f"claim {groups_claim!r} is not a list of strings")
        if len(groups) > MAX_GROUPS:
            raise InvalidTokenError(f"claim {groups_claim!r} lists more than {MAX_GROUPS} groups")
        return Caller(user, frozenset(groups))


#: A segment of a compact JWS: base64url, no padding (RFC 7515).
_SEGMENT = re.compile(r"^[A-Za-z0-9_-]*$")


def _split(token: str) -> tuple[bytes, dict[str, Any], bytes, bytes]:
    """(signing input, header, payload bytes, signature) of a compact JWS; InvalidTokenError
    for anything else. Checked with one regular expression per segment: PyJWT's own parser
    checks the alphabet character by character in Python, which was a third of the broker's
    CPU in a logon storm."""
    parts = token.split(".")
    if len(parts) != 3 or not all(_SEGMENT.match(p) and len(p) % 4 != 1 for p in parts):
        raise InvalidTokenError("not a JWT")
    header_b64, payload_b64, _ = parts
    try:
        header_raw, payload, signature = (
            base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)) for p in parts
        )
    except (ValueError, binascii.Error):
        raise InvalidTokenError("not a JWT") from None
    header = _json_object(header_raw, "header")
    return f"{header_b64}.{payload_b64}".encode(), header, payload, signature


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidTokenError(f"not a JWT: its {what} is not JSON") from None
    if not isinstance(value, dict):
        raise InvalidTokenError(f"not a JWT: its {what} is not a JSON object")
    return value
