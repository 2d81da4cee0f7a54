"""OIDC bearer tokens: the issuer's keys found through discovery, and each token checked
against them.

Keys are fetched from the issuer's ``jwks_uri`` and kept for ``keys_max_age`` seconds, then
fetched again (:meth:`TokenVerifier.keep_fresh` does it in the background, and a token
checked after that age waits for the new set): a key the issuer stops publishing stops
verifying tokens within that time. A token signed with a key id the set does not know makes
the broker fetch it at once (at most once per ``refetch_interval``, so a flood of made-up key
ids cannot turn the broker against the issuer). A failed fetch keeps the last good set, for
at most ``keys_max_stale`` seconds past its age: after that no token is accepted until a
fetch succeeds. Only asymmetric algorithms are accepted: a token with ``alg: none`` or an
HMAC algorithm is refused whatever it claims.

Only access tokens are taken: an ID token or a refresh token of the same issuer (Keycloak
writes ``typ: ID`` / ``Refresh`` in the payload), a header type other than ``JWT`` or
``at+jwt``, and any ``crit`` header (an extension the broker would have to understand) are
refused. The issuer is compared exactly, as OpenID Connect says: no trailing slash forgiven.
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
from ..api.address import has_control_character
from ..logon import uids

log = logging.getLogger(__name__)

ASYMMETRIC = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
#: Longest token looked at (a bigger Authorization header is refused before decoding).
MAX_TOKEN = 64 * 1024
#: Most groups taken from a token: more is refused rather than matched one by one.
MAX_GROUPS = 1000
LEEWAY_SECONDS = 60
#: Header ``typ`` values of an access token (a JWT, or RFC 9068's ``at+jwt``), compared
#: without case and without an ``application/`` prefix (RFC 7515, 4.1.9). None is fine too.
ACCESS_TOKEN_HEADER_TYPES = frozenset({"jwt", "at+jwt"})
#: The ``typ`` claim of an access token where the issuer writes one (Keycloak does).
ACCESS_TOKEN_TYP = "Bearer"
#: Seconds between fetches while there is no key set at all (at start, an issuer down).
KEYLESS_RETRY = 5.0
#: Seconds between fetches after a failed one while the last set is kept.
FAILED_RETRY = 10.0


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
    #: When not empty, a token's ``azp`` must be one of these client ids.
    authorized_parties: tuple[str, ...] = ()
    #: Seconds a fetched key set is used before it is fetched again.
    keys_max_age: float = 300.0
    #: Seconds past ``keys_max_age`` the last set is still trusted while fetches fail.
    keys_max_stale: float = 3600.0
    #: The claim naming the user's uid for single sign-on (None: the broker allocates).
    uid_claim: str | None = None


class TokenVerifier:
    """Verifies bearer tokens of one issuer for one audience. ``on_fetch(ok)`` is told of
    every fetch of the key set (the metrics count them)."""

    def __init__(
        self, settings: OidcSettings, on_fetch: Callable[[bool], None] | None = None
    ) -> None:
        self.settings = settings
        self._on_fetch = on_fetch or (lambda ok: None)
        self.issuer = settings.issuer
        self._ssl: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=settings.ca_file) if settings.ca_file else True
        )
        self._session: aiohttp.ClientSession | None = None
        self._jwks_uri: str | None = None
        self._metadata: dict[str, Any] = {}
        self._keys: dict[str, jwt.PyJWK] = {}
        self._keys_at = float("-inf")  # when the set was fetched (monotonic)
        self._tried_at = float("-inf")  # when a fetch last began
        self._fetching: asyncio.Task[bool] | None = None

    async def close(self) -> None:
        if self._fetching is not None:
            self._fetching.cancel()
        if self._session is not None:
            await self._session.close()

    def http(self) -> aiohttp.ClientSession:
        """The HTTP client for the issuer (its CA, a 10 s timeout), shared with the portal."""
        return self._http()

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

    # -- the key set ----------------------------------------------------------------------

    def _age(self) -> float:
        return time.monotonic() - self._keys_at

    def _trusted(self) -> dict[str, jwt.PyJWK]:
        """The keys tokens are checked against: none once the set is older than its age
        and the stale allowance together."""
        limit = self.settings.keys_max_age + self.settings.keys_max_stale
        return self._keys if self._age() <= limit else {}

    @property
    def ready(self) -> bool:
        return bool(self._trusted())

    def use_keys(self, jwks: dict[str, Any]) -> list[str]:
        """Take this JWKS as the issuer's key set (its asymmetric signing keys) from now on;
        the key ids taken. ValueError (the set kept as it was) when it has none."""
        keys = jwt.PyJWKSet.from_dict(jwks)
        usable = {
            k.key_id: k
            for k in keys.keys
            if k.key_id and k.public_key_use in (None, "sig") and k.algorithm_name in ASYMMETRIC
        }
        if not usable:
            raise ValueError("the key set has no signing key")
        before = set(self._keys)
        self._keys, self._keys_at = usable, time.monotonic()
        if set(usable) != before:
            log.info("issuer keys: %d signing keys (%s)", len(usable), ", ".join(sorted(usable)))
            if gone := before - set(usable):
                log.info("issuer keys no longer published, no longer trusted: %s", sorted(gone))
        return list(usable)

    async def _discover(self) -> str:
        """The ``jwks_uri`` of the issuer's discovery document (read once), whose issuer
        must be exactly the configured one."""
        if self._jwks_uri is None:
            base = self.issuer.rstrip("/")  # OpenID Connect Discovery, section 4
            found = await self._get_json(f"{base}/.well-known/openid-configuration")
            if found.get("issuer") != self.issuer:
                raise OSError(f"discovery names issuer {str(found.get('issuer'))[:200]!r}")
            uri = found.get("jwks_uri")
            if not isinstance(uri, str):
                raise OSError("discovery has no jwks_uri")
            if self.issuer.startswith("https://") and not uri.startswith("https://"):
                raise OSError(f"discovery names a jwks_uri that is not https: {uri[:200]!r}")
            self._jwks_uri, self._metadata = uri, found
        return self._jwks_uri

    async def metadata(self) -> dict[str, Any]:
        """The issuer's discovery document (fetched once, its issuer checked); OSError or
        aiohttp.ClientError when it cannot be had."""
        await self._discover()
        return self._metadata

    async def refresh(self) -> bool:
        """Fetch the key set now (discovery once); whether it worked. A failure keeps the
        last good set (for as long as ``keys_max_stale`` allows) and says so in the log."""
        self._tried_at = time.monotonic()
        try:
            self.use_keys(await self._get_json(await self._discover()))
        except (OSError, aiohttp.ClientError, TimeoutError, ValueError, jwt.PyJWTError) as error:
            self._on_fetch(False)
            self._log_failure(error)
            return False
        self._on_fetch(True)
        return True

    def _log_failure(self, error: Exception) -> None:
        if not self._keys:
            log.warning("issuer keys not fetched (%s); no key set yet", error)
            return
        age = self._age()
        left = self.settings.keys_max_age + self.settings.keys_max_stale - age
        if left > 0:
            log.warning(
                "issuer keys not fetched (%s); keeping the set fetched %.0f s ago "
                "(%d keys) for at most %.0f s more",
                error,
                age,
                len(self._keys),
                left,
            )
        else:
            log.warning(
                "issuer keys not fetched (%s); the last set is %.0f s old, past its "
                "max age and stale allowance: every token is refused until a fetch works",
                error,
                age,
            )

    async def _fetch(self) -> bool:
        """One fetch, shared by every caller arriving while it runs."""
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.ensure_future(self.refresh())
        return await asyncio.shield(self._fetching)

    async def _refetch_if_allowed(self) -> None:
        """Fetch again unless a fetch began less than ``refetch_interval`` ago (one in
        progress is waited for)."""
        running = self._fetching is not None and not self._fetching.done()
        if running or time.monotonic() - self._tried_at >= self.settings.refetch_interval:
            await self._fetch()

    async def keep_fresh(self) -> None:
        """Fetch the key set, and again each time it reaches ``keys_max_age`` (every
        KEYLESS_RETRY while there is none, every FAILED_RETRY after a failure); forever."""
        while True:
            ok = await self._fetch()
            if ok or self._age() < self.settings.keys_max_age:
                delay = self.settings.keys_max_age - self._age()
            else:
                delay = FAILED_RETRY if self._keys else KEYLESS_RETRY
            await asyncio.sleep(max(delay, 0.05))

    # -- a token --------------------------------------------------------------------------

    async def verify(self, authorization: str | None) -> Caller:
        """The caller of an ``Authorization`` header; InvalidTokenError otherwise."""
        if not authorization:
            raise InvalidTokenError("no bearer token")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise InvalidTokenError("the Authorization header is not a bearer token")
        claims = await self.signed_claims(token)
        self.check_claims(claims, time.time())
        return self.caller(claims)

    async def signed_claims(self, token: str) -> dict[str, Any]:
        """The payload of a token signed by one of the issuer's keys (its header as an access
        token's); InvalidTokenError otherwise. The claims are not checked here."""
        if len(token) > MAX_TOKEN:
            raise InvalidTokenError("the token is too long")
        signing_input, header, payload, signature = _split(token)
        alg, kid = _check_header(header)
        if self._age() > self.settings.keys_max_age or kid not in self._keys:
            await self._refetch_if_allowed()
        keys = self._trusted()
        if not keys and self._keys:
            raise InvalidTokenError("the issuer's keys could not be fetched for too long")
        key = keys.get(kid)
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
        return _json_object(payload, "payload")

    def check_claims(
        self,
        claims: dict[str, Any],
        now: float,
        audiences: tuple[str, ...] = (),
        parties: tuple[str, ...] = (),
    ) -> None:
        """An access token (typ, when present) from exactly this issuer, for this audience
        or one of ``audiences`` (and one of the authorized parties or ``parties``, when there
        are any), within its time."""
        if claims.get("iss") != self.issuer:
            raise InvalidTokenError("the token is from another issuer")
        if "typ" in claims and claims["typ"] != ACCESS_TOKEN_TYP:
            raise InvalidTokenError(f"not an access token (typ {str(claims['typ'])[:16]!r})")
        audience = claims.get("aud")
        named = [audience] if isinstance(audience, str) else audience
        accepted = (self.settings.audience, *audiences)
        if not isinstance(named, list) or not any(a in named for a in accepted):
            raise InvalidTokenError("the token is not for this audience")
        # Extra parties widen a configured list; no list means any party.
        allowed = self.settings.authorized_parties
        allowed = (*allowed, *parties) if allowed else ()
        if allowed and not (isinstance(claims.get("azp"), str) and claims["azp"] in allowed):
            raise InvalidTokenError("the token's authorized party (azp) is not accepted")
        _check_time(claims, now)

    def caller(self, claims: dict[str, Any]) -> Caller:
        """The user and groups of verified claims (never of the request body). Groups are
        taken exactly as the token carries them."""
        user_claim, groups_claim = self.settings.user_claim, self.settings.groups_claim
        user = claims.get(user_claim)
        if not isinstance(user, str) or not user:
            raise InvalidTokenError(f"claim {user_claim!r} is missing or not a string")
        if len(user) > 256:
            raise InvalidTokenError(f"claim {user_claim!r} is longer than 256 characters")
        if has_control_character(user):
            # What spec.user refuses: the request could never be created.
            raise InvalidTokenError(f"claim {user_claim!r} holds a control character")
        if user_claim == "email" and claims.get("email_verified") is not True:
            raise InvalidTokenError("claim 'email' is used but 'email_verified' is not true")
        groups = claims.get(groups_claim, [])
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise InvalidTokenError(f"claim {groups_claim!r} is not a list of strings")
        if len(groups) > MAX_GROUPS:
            raise InvalidTokenError(f"claim {groups_claim!r} lists more than {MAX_GROUPS} groups")
        uid = None
        if self.settings.uid_claim is not None:
            try:
                uid = uids.from_claim(claims, self.settings.uid_claim)
            except uids.UidError as exc:
                raise InvalidTokenError(str(exc)) from None
        return Caller(user, frozenset(groups), uid)


def _check_header(header: dict[str, Any]) -> tuple[str, str]:
    """(alg, kid) of a JOSE header the broker understands: an asymmetric algorithm, a key
    id, the type of an access token (or none), no ``crit``."""
    alg, kid, typ = header.get("alg"), header.get("kid"), header.get("typ")
    if alg not in ASYMMETRIC:
        raise InvalidTokenError(f"algorithm {str(alg)[:16]!r} is not accepted")
    if not isinstance(kid, str) or not kid:
        raise InvalidTokenError("the token names no key")
    if typ is not None:
        media = typ.lower().removeprefix("application/") if isinstance(typ, str) else None
        if media not in ACCESS_TOKEN_HEADER_TYPES:
            raise InvalidTokenError(f"header type {str(typ)[:16]!r} is not an access token's")
    if "crit" in header:
        raise InvalidTokenError("the token has critical header extensions (crit)")
    return str(alg), kid


def check_time(claims: dict[str, Any], now: float) -> None:
    """A token's exp (required) and nbf (when present), with LEEWAY_SECONDS."""
    _check_time(claims, now)


def _check_time(claims: dict[str, Any], now: float) -> None:
    """exp (required) and nbf (when present), with LEEWAY_SECONDS."""
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
