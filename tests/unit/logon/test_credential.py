"""The one-time logon credential: minted by the broker, checked by the host offline. Every way
one is refused (forged, another user, another host, another key, expired, from the future,
tampered, malformed), and that what is accepted is exactly what was minted."""

from __future__ import annotations

import base64
import dataclasses

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.logon import credential as c

KEY = Ed25519PrivateKey.from_private_bytes(b"k" * 32)
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(b"o" * 32)
NOW = 1_800_000_000
GRANT = c.Grant(user="alice", host="desk-1", request_uid="0d9c-request", uid=20_123)
NONCE = b"n" * c.NONCE_BYTES


def minted(grant: c.Grant = GRANT, now: int = NOW, lifetime: int = 60) -> str:
    return c.mint(KEY, grant, now, lifetime, NONCE)


def test_a_credential_reads_back_what_was_minted() -> None:
    text = minted()
    claims = c.verify(text, "alice", "desk-1", [KEY.public_key()], NOW + 1)
    assert claims.uid == 20_123
    assert claims.request == c.request_digest("0d9c-request")
    assert (claims.issued, claims.expires) == (NOW, NOW + 60)
    assert claims.nonce_id == NONCE.hex()


def test_it_fits_the_rdp_password_field() -> None:
    text = minted(dataclasses.replace(GRANT, user="u" * 200, host="h" * 63))
    assert len(text) <= 255
    assert text.isascii()
    assert text.isprintable()
    assert len(text) == len(minted())  # user and host are signed, not carried


@pytest.mark.parametrize(
    ("user", "host", "keys", "now", "reason"),
    [
        pytest.param("bob", "desk-1", [KEY], NOW, "InvalidSignature", id="another-user"),
        pytest.param("alice", "desk-2", [KEY], NOW, "InvalidSignature", id="another-host"),
        pytest.param("alice", "desk-1", [OTHER_KEY], NOW, "InvalidSignature", id="forged"),
        pytest.param("alice", "desk-1", [], NOW, "InvalidSignature", id="no-key"),
        pytest.param("alice", "desk-1", [KEY], NOW + 91, "Expired", id="expired"),
        pytest.param("alice", "desk-1", [KEY], NOW - 31, "NotYetValid", id="future"),
    ],
)
def test_refused(
    user: str, host: str, keys: list[Ed25519PrivateKey], now: int, reason: str
) -> None:
    with pytest.raises(c.LogonRefusedError) as refused:
        c.verify(minted(), user, host, [k.public_key() for k in keys], now)
    assert refused.value.reason == reason
    assert minted() not in str(refused.value)


def test_the_clock_may_differ_by_thirty_seconds_either_way() -> None:
    keys = [KEY.public_key()]
    assert c.verify(minted(), "alice", "desk-1", keys, NOW + 60 + 30).uid == 20_123
    assert c.verify(minted(), "alice", "desk-1", keys, NOW - 30).uid == 20_123


def test_during_a_rotation_either_key_is_trusted() -> None:
    keys = [OTHER_KEY.public_key(), KEY.public_key()]
    assert c.verify(minted(), "alice", "desk-1", keys, NOW).uid == 20_123


def test_a_signature_by_one_key_is_not_taken_as_another_uid() -> None:
    """A payload changed after signing (another uid, a longer life) fails its signature."""
    text = minted()
    payload_text, signature_text = text[len(c.PREFIX) :].split(".")
    raw = bytearray(base64.urlsafe_b64decode(payload_text + "=" * (-len(payload_text) % 4)))
    raw[16:20] = (0).to_bytes(4, "big")
    payload = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    forged = f"{c.PREFIX}{payload}.{signature_text}"
    with pytest.raises(c.LogonRefusedError) as refused:
        c.verify(forged, "alice", "desk-1", [KEY.public_key()], NOW)
    assert refused.value.reason == "InvalidSignature"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hunter2",
        "hp1.",
        "hp1.abc",
        "hp1.abc.def",
        "hp1." + "A" * 300,
        "hp1.é.x",
        "hp2." + "A" * 54 + "." + "A" * 86,
    ],
)
def test_malformed_text_is_refused_unread(text: str) -> None:
    with pytest.raises(c.LogonRefusedError) as refused:
        c.verify(text, "alice", "desk-1", [KEY.public_key()], NOW)
    assert refused.value.reason == "Malformed"


@given(st.text(max_size=300))
def test_any_text_is_a_refusal_never_a_crash(text: str) -> None:
    with pytest.raises(c.LogonRefusedError):
        c.verify(text, "alice", "desk-1", [KEY.public_key()], NOW)


@given(st.binary(min_size=1, max_size=140), st.integers(0, 140))
def test_a_corrupted_credential_is_refused(noise: bytes, at: int) -> None:
    text = minted()
    at = min(at, len(text) - 1)
    changed = text[:at] + noise.hex()[: len(text) - at] + text[at + len(noise.hex()) :]
    if changed == text:
        return
    with pytest.raises(c.LogonRefusedError):
        c.verify(changed, "alice", "desk-1", [KEY.public_key()], NOW)


@pytest.mark.parametrize(
    ("grant", "lifetime", "nonce"),
    [
        pytest.param(GRANT, 121, NONCE, id="too-long"),
        pytest.param(GRANT, 0, NONCE, id="no-life"),
        pytest.param(dataclasses.replace(GRANT, uid=0), 60, NONCE, id="root"),
        pytest.param(dataclasses.replace(GRANT, uid=999), 60, NONCE, id="system-uid"),
        pytest.param(GRANT, 60, b"short", id="short-nonce"),
    ],
)
def test_the_broker_mints_nothing_out_of_bounds(
    grant: c.Grant, lifetime: int, nonce: bytes
) -> None:
    with pytest.raises(ValueError, match=r"."):
        c.mint(KEY, grant, NOW, lifetime, nonce)


def test_keys_read_from_pem_files() -> None:
    from cryptography.hazmat.primitives import serialization

    pem = KEY.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    key = c.private_key(pem)
    both = c.public_pem(OTHER_KEY) + c.public_pem(key)
    keys = c.public_keys(both)
    assert len(keys) == 2
    assert c.verify(minted(), "alice", "desk-1", keys, NOW).uid == 20_123
    with pytest.raises(ValueError, match="no public key"):
        c.public_keys(b"")


# ---------------------------------------------------------------- the keys hosts trust


def _public() -> bytes:
    return c.public_pem(Ed25519PrivateKey.generate())


def test_the_first_key_published_is_trusted_alone() -> None:
    mine = _public()
    assert c.trusted_pem(mine, None) == mine.decode()


def test_a_new_key_goes_first_and_the_oldest_is_dropped() -> None:
    first, second, third = _public(), _public(), _public()
    two = c.trusted_pem(second, first.decode())
    assert two == (second + first).decode()
    assert c.trusted_pem(third, two) == (third + second).decode()


def test_a_key_already_trusted_changes_nothing() -> None:
    a, b = _public(), _public()
    both = (b + a).decode()
    assert c.trusted_pem(a, both) == both  # the old replica, mid-rotation
    assert c.trusted_pem(b, both) == both


def test_what_is_not_a_key_is_dropped() -> None:
    mine = _public()
    junk = "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\nnoise"
    assert c.trusted_pem(mine, junk) == mine.decode()
    x25519 = (
        "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VuAyEAp8zL3zJ0sX2Yw1s0yG0u2Kc5b3b7a3GQWl8W1sZ2m3k=\n"
        "-----END PUBLIC KEY-----\n"
    )  # an X25519 key: a public key, but not one that signs
    assert c.trusted_pem(mine, x25519) == mine.decode()
