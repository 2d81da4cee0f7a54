"""The one-time logon credential: what an RDP client sends as the password of a pool with
``connection.singleSignOn``, and what the host's verifier takes instead of one.

It is signed with the broker's Ed25519 key over this user, this host (by name), the
request's uid and the user's uid, when it was issued and until when it is good (at most
:data:`MAX_LIFETIME` seconds), and a random nonce that makes it single-use. User and host
are signed but not carried: the verifier signs over the user PAM names and its own host, so
a credential for another user or another host fails its signature, and the whole fits the
RDP password field (255 characters) with room to spare::

    hp1.<payload>.<signature>      (base64url, no padding; 145 characters)
    payload = request digest (16) | uid (4) | issued (4) | expires (4) | nonce (12)

Pure: the caller passes the clock, the keys and the nonce."""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PREFIX: Final = "hp1."
#: Longest a credential is good for (seconds).
MAX_LIFETIME: Final = 120
#: The hosts' and the broker's clocks may differ by this much (seconds).
CLOCK_SKEW: Final = 30
NONCE_BYTES: Final = 12
_PAYLOAD = struct.Struct(">16sIII12s")
_SIGNATURE_BYTES: Final = 64
_CONTEXT: Final = b"hostpool-operator logon credential v1"
#: The longest text read as a credential (anything longer is refused unread).
MAX_TEXT: Final = 255
#: Uids a credential may name: a person's, never root's or a system account's.
MIN_UID: Final = 1000
MAX_UID: Final = 2**31 - 2

#: Why a credential is refused (the host's Event says this, never the credential).
Refusal = Literal["Malformed", "InvalidSignature", "Expired", "NotYetValid", "UidOutOfRange"]


class LogonRefusedError(ValueError):
    """The credential is refused; ``reason`` says why in one word."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason: Refusal = reason


@dataclass(frozen=True, slots=True)
class Claims:
    """What a credential says besides its user and host."""

    #: The first 16 bytes of the SHA-256 of the request's uid.
    request: bytes
    uid: int
    issued: int
    expires: int
    nonce: bytes

    @property
    def nonce_id(self) -> str:
        """The nonce as text, for the single-use record."""
        return self.nonce.hex()


def request_digest(request_uid: str) -> bytes:
    return hashlib.sha256(request_uid.encode()).digest()[:16]


def _signed(user: str, host: str, payload: bytes) -> bytes:
    return b"\n".join((_CONTEXT, user.encode(), host.encode(), payload))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class Grant:
    """What the broker signs a person on with."""

    user: str
    host: str
    request_uid: str
    uid: int


def mint(key: Ed25519PrivateKey, grant: Grant, now: int, lifetime: int, nonce: bytes) -> str:
    """The credential for ``grant``, good from ``now`` for ``lifetime`` seconds."""
    if not 0 < lifetime <= MAX_LIFETIME:
        raise ValueError(f"lifetime: 1..{MAX_LIFETIME} seconds")
    if not MIN_UID <= grant.uid <= MAX_UID:
        raise ValueError(f"uid {grant.uid}: not in {MIN_UID}..{MAX_UID}")
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"nonce: {NONCE_BYTES} bytes")
    payload = _PAYLOAD.pack(
        request_digest(grant.request_uid), grant.uid, now, now + lifetime, nonce
    )
    signature = key.sign(_signed(grant.user, grant.host, payload))
    return f"{PREFIX}{_b64(payload)}.{_b64(signature)}"


def _parts(text: str) -> tuple[bytes, bytes]:
    if len(text) > MAX_TEXT or not text.startswith(PREFIX) or not text.isascii():
        raise LogonRefusedError("Malformed", "not a logon credential")
    payload_text, dot, signature_text = text[len(PREFIX) :].partition(".")
    try:
        payload, signature = _unb64(payload_text), _unb64(signature_text)
    except (binascii.Error, ValueError):
        raise LogonRefusedError("Malformed", "not a logon credential") from None
    if not dot or len(payload) != _PAYLOAD.size or len(signature) != _SIGNATURE_BYTES:
        raise LogonRefusedError("Malformed", "not a logon credential")
    return payload, signature


def verify(text: str, user: str, host: str, keys: Iterable[Ed25519PublicKey], now: float) -> Claims:
    """The credential's claims, when one of ``keys`` signed it for this user and host and it
    is good now; else :class:`LogonRefusedError`. (Whether it was used before is the
    caller's record: :class:`Claims.nonce_id`.)"""
    payload, signature = _parts(text)
    message = _signed(user, host, payload)
    for key in keys:
        try:
            key.verify(signature, message)
            break
        except InvalidSignature:
            continue
    else:
        raise LogonRefusedError(
            "InvalidSignature", "not signed by the broker for this user on this host"
        )
    digest, uid, issued, expires, nonce = _PAYLOAD.unpack(payload)
    claims = Claims(digest, uid, issued, expires, nonce)
    if expires - issued > MAX_LIFETIME or expires < issued:
        raise LogonRefusedError("Malformed", "the credential's lifetime is out of bounds")
    if now > expires + CLOCK_SKEW:
        raise LogonRefusedError("Expired", "the credential has expired")
    if now < issued - CLOCK_SKEW:
        raise LogonRefusedError("NotYetValid", "the credential is not valid yet")
    if not MIN_UID <= uid <= MAX_UID:
        raise LogonRefusedError("UidOutOfRange", f"uid {uid} is not a person's")
    return claims


def private_key(pem: bytes) -> Ed25519PrivateKey:
    """The broker's signing key from its PEM file (PKCS#8)."""
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return key


def public_keys(pem: bytes) -> list[Ed25519PublicKey]:
    """Every Ed25519 public key in a PEM file (two while the broker's key is rotated)."""
    keys: list[Ed25519PublicKey] = []
    marker = b"-----END PUBLIC KEY-----"
    for block in pem.split(marker)[:-1]:
        key = serialization.load_pem_public_key(block.strip() + b"\n" + marker + b"\n")
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("not an Ed25519 public key")
        keys.append(key)
    if not keys:
        raise ValueError("no public key")
    return keys


def public_pem(key: Ed25519PrivateKey) -> bytes:
    """The public half of the broker's key, as the hosts are given it."""
    return public_pem_of(key.public_key())


def public_pem_of(key: Ed25519PublicKey) -> bytes:
    """A public key as PEM (SubjectPublicKeyInfo)."""
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


#: Public keys the hosts trust at once: the broker's current one and the one before it, so
#: that credentials minted by a replica still on the old key pass while a new key rolls out.
TRUSTED_KEYS: Final = 2


def trusted_pem(current: bytes, published: str | None) -> str:
    """What the hosts should trust once the broker's current public key (PEM) is published
    over ``published`` (the file as it stands, or None). A key already there changes nothing
    (two replicas mid-rotation never take turns reordering the file); a new one goes first,
    with the newest earlier one after it, at most :data:`TRUSTED_KEYS`. What does not read
    as an Ed25519 public key in ``published`` is dropped, never trusted."""
    mine = public_pem_of(public_keys(current)[0])
    earlier: list[bytes] = []
    marker = "-----END PUBLIC KEY-----"
    for block in (published or "").split(marker)[:-1]:
        try:
            (key,) = public_keys((block.strip() + "\n" + marker + "\n").encode())
        except ValueError:
            continue
        pem = public_pem_of(key)
        if pem not in earlier:
            earlier.append(pem)
    keys = earlier[:TRUSTED_KEYS] if mine in earlier[:TRUSTED_KEYS] else [mine, *earlier]
    return b"".join(keys[:TRUSTED_KEYS]).decode()
