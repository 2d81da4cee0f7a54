"""The portal's sealed cookies: what one replica seals another with the same secret opens;
anything altered, sealed with another key or for another cookie, expired, or of another
format is refused; large values are split over numbered cookies and joined back."""

from __future__ import annotations

import base64
import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.broker.signin import cookies
from hostpool_operator.broker.signin.cookies import CookieError, open_sealed, seal

SECRET = b"a cookie secret of more than thirty-two bytes, for tests"
KEY = cookies.derive_key(SECRET)
NOW = 1_800_000_000.0
NAME = "hostpool_session"


def test_a_sealed_value_opens_with_the_same_secret_on_another_replica() -> None:
    value = seal(KEY, NAME, {"u": "alice", "g": ["/finance-desk"]}, NOW, 3600)
    other_replica = cookies.derive_key(SECRET + b"\n")  # the file's trailing newline
    assert open_sealed(other_replica, NAME, value, NOW + 10) == {
        "u": "alice",
        "g": ["/finance-desk"],
    }
    assert value.startswith("v1.")
    assert "alice" not in value
    assert "finance" not in value


def test_each_seal_is_different() -> None:
    first, second = (seal(KEY, NAME, {"u": "alice"}, NOW, 60) for _ in range(2))
    assert first != second


@pytest.mark.parametrize("position", [3, 10, 20, -30, -1])
def test_an_altered_value_is_refused(position: int) -> None:
    value = seal(KEY, NAME, {"u": "alice"}, NOW, 3600)
    raw = bytearray(base64.urlsafe_b64decode(value[3:] + "=" * (-len(value[3:]) % 4)))
    raw[position] ^= 0x01
    forged = "v1." + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    with pytest.raises(CookieError, match="altered"):
        open_sealed(KEY, NAME, forged, NOW)


def test_another_key_is_refused() -> None:
    value = seal(KEY, NAME, {"u": "alice"}, NOW, 3600)
    other = cookies.derive_key(secrets.token_urlsafe(32).encode())
    with pytest.raises(CookieError, match="another key"):
        open_sealed(other, NAME, value, NOW)


def test_a_sign_in_cookie_is_not_a_session_cookie() -> None:
    value = seal(KEY, "hostpool_signin", {"u": "alice"}, NOW, 3600)
    with pytest.raises(CookieError):
        open_sealed(KEY, NAME, value, NOW)


def test_an_expired_value_is_refused_even_when_the_browser_kept_it() -> None:
    value = seal(KEY, NAME, {"u": "alice"}, NOW, 60)
    assert open_sealed(KEY, NAME, value, NOW + 59) == {"u": "alice"}
    with pytest.raises(CookieError, match="expired"):
        open_sealed(KEY, NAME, value, NOW + 60)


def test_a_value_issued_in_the_future_is_refused() -> None:
    value = seal(KEY, NAME, {"u": "alice"}, NOW + 3600, 7200)
    with pytest.raises(CookieError, match="future"):
        open_sealed(KEY, NAME, value, NOW)
    assert open_sealed(KEY, NAME, value, NOW + 3600 - 30) == {"u": "alice"}  # clock skew


@pytest.mark.parametrize(
    "value", ["", "v1.", "v1.@@@", "v2.AAAA", "v1." + "A" * 20, "alice", "v1." + "A" * 40000]
)
def test_garbage_is_refused(value: str) -> None:
    with pytest.raises(CookieError):
        open_sealed(KEY, NAME, value, NOW)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_refused_never_raises_otherwise(value: str) -> None:
    with pytest.raises(CookieError):
        open_sealed(KEY, NAME, value, NOW)


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="32"):
        cookies.derive_key(b"short")
    with pytest.raises(ValueError, match="32"):
        cookies.derive_key(b"x" * 20 + b" " * 20)  # spaces do not count


def test_a_small_value_is_one_cookie() -> None:
    value = seal(KEY, NAME, {"u": "alice"}, NOW, 60)
    assert cookies.split(NAME, value) == {NAME: value}
    assert cookies.join(NAME, {NAME: value, "other": "x"}) == value
    assert cookies.join(NAME, {"other": "x"}) is None


def test_a_large_value_is_split_and_joined_back() -> None:
    groups = [f"/team-{i:04d}-with-a-long-name" for i in range(400)]
    value = seal(KEY, NAME, {"u": "frank", "g": groups}, NOW, 3600)
    parts = cookies.split(NAME, value)
    assert len(parts) >= 4
    assert list(parts) == [f"{NAME}_{i}" for i in range(len(parts))]
    assert all(len(p) <= cookies.CHUNK for p in parts.values())
    joined = cookies.join(NAME, parts)
    assert joined == value
    assert open_sealed(KEY, NAME, joined, NOW)["g"] == groups


def test_a_missing_chunk_is_refused() -> None:
    groups = [f"/team-{i:04d}-with-a-long-name" for i in range(400)]
    parts = cookies.split(NAME, seal(KEY, NAME, {"g": groups}, NOW, 3600))
    del parts[f"{NAME}_1"]
    joined = cookies.join(NAME, parts)
    assert joined is not None
    with pytest.raises(CookieError):
        open_sealed(KEY, NAME, joined, NOW)


def test_a_value_too_big_for_the_cookies_is_refused() -> None:
    with pytest.raises(ValueError, match="too big"):
        cookies.split(NAME, "v1." + "A" * (cookies.CHUNK * cookies.MAX_CHUNKS + 1))


def test_names_cover_every_chunk() -> None:
    assert cookies.names(NAME)[:2] == [NAME, f"{NAME}_0"]
    assert len(cookies.names(NAME)) == cookies.MAX_CHUNKS + 1
