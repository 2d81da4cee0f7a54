"""Sealed cookies: a JSON object encrypted and authenticated with AES-256-GCM, readable by
any replica given the same cookie secret.

The key is derived from the secret (at least 32 bytes) with HKDF-SHA256, so the secret file
may hold any random text. A sealed value is ``v1.<base64url(nonce || ciphertext+tag)>``; the
cookie's name is the associated data (a sign-in cookie cannot be replayed as a session
cookie), and the plaintext carries the format version, when it was issued and when it expires:
an expired value is refused even when the browser kept it. A value longer than
:data:`CHUNK` characters is split over ``NAME_0``, ``NAME_1``... (browsers drop a cookie past
about 4 KB), at most :data:`MAX_CHUNKS` of them; :func:`join` reads either form back.

Pure: the caller passes the time."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

VERSION = 1
PREFIX = "v1."
#: Least length of the cookie secret, in bytes.
MIN_SECRET = 32
#: Longest value of one cookie (with its name and attributes it stays under 4,096 bytes).
CHUNK = 3500
#: Most cookies one value is split over: a bigger value is refused rather than sent.
MAX_CHUNKS = 8
#: Seconds a value issued "in the future" is still taken (replicas' clocks differ).
CLOCK_SKEW = 60.0
_NONCE = 12


class CookieError(Exception):
    """The cookie is not one this secret sealed, or no longer valid (the message says which;
    never the value)."""


def derive_key(secret: bytes) -> bytes:
    """The AES-256 key of a cookie secret (ValueError when it is shorter than MIN_SECRET)."""
    secret = secret.strip()
    if len(secret) < MIN_SECRET:
        raise ValueError(f"the cookie secret must hold at least {MIN_SECRET} bytes")
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"hostpool-portal-cookie")
    return hkdf.derive(secret)


def seal(
    key: bytes,
    name: str,
    data: Mapping[str, Any],
    now: float,
    lifetime: float,
    nonce: bytes | None = None,
) -> str:
    """``data`` sealed for the cookie ``name``, valid from ``now`` for ``lifetime`` seconds.
    ``nonce``: 12 random bytes (fresh ones from the OS unless given: tests only)."""
    nonce = nonce if nonce is not None else os.urandom(_NONCE)
    plain = orjson.dumps({"v": VERSION, "iat": int(now), "exp": int(now + lifetime), "d": data})
    box = AESGCM(key).encrypt(nonce, plain, name.encode())
    return PREFIX + base64.urlsafe_b64encode(nonce + box).decode().rstrip("=")


def open_sealed(key: bytes, name: str, value: str, now: float) -> dict[str, Any]:
    """The data of a sealed value of cookie ``name``; CookieError when it was not sealed with
    this key for this name, or has expired."""
    if not value.startswith(PREFIX) or len(value) > CHUNK * MAX_CHUNKS:
        raise CookieError("not a sealed cookie of this format")
    text = value[len(PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, binascii.Error):
        raise CookieError("not a sealed cookie (base64)") from None
    if len(raw) < _NONCE + 16:
        raise CookieError("too short to be a sealed cookie")
    try:
        plain = AESGCM(key).decrypt(raw[:_NONCE], raw[_NONCE:], name.encode())
    except InvalidTag:
        raise CookieError("sealed with another key, for another cookie, or altered") from None
    body = orjson.loads(plain)  # authenticated: written by seal()
    if not isinstance(body, dict) or body.get("v") != VERSION:
        raise CookieError("a sealed cookie of another version")
    if not isinstance(body.get("exp"), int) or now >= body["exp"]:
        raise CookieError("expired")
    if not isinstance(body.get("iat"), int) or body["iat"] > now + CLOCK_SKEW:
        raise CookieError("issued in the future")
    data = body.get("d")
    if not isinstance(data, dict):
        raise CookieError("a sealed cookie without data")
    return data


def split(name: str, value: str) -> dict[str, str]:
    """The cookies to set for a value: ``{name: value}`` when it fits in one, else
    ``{name_0: ..., name_1: ...}``. ValueError past MAX_CHUNKS."""
    if len(value) <= CHUNK:
        return {name: value}
    parts = [value[i : i + CHUNK] for i in range(0, len(value), CHUNK)]
    if len(parts) > MAX_CHUNKS:
        raise ValueError(f"a sealed value of {len(value)} characters is too big for cookies")
    return {f"{name}_{i}": part for i, part in enumerate(parts)}


def join(name: str, cookies: Mapping[str, str]) -> str | None:
    """The value of ``name`` among a request's cookies: whole, or joined from its chunks
    (``name_0``... up to the first missing one); None when there is neither."""
    if name in cookies:
        return cookies[name]
    parts = []
    for i in range(MAX_CHUNKS):
        part = cookies.get(f"{name}_{i}")
        if part is None:
            break
        parts.append(part)
    return "".join(parts) if parts else None


def names(name: str) -> list[str]:
    """Every cookie name a value of ``name`` may be set under (to clear them all)."""
    return [name, *(f"{name}_{i}" for i in range(MAX_CHUNKS))]
