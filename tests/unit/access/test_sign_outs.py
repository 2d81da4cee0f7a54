"""The shared record of ended portal sessions: what a ConfigMap's data says (damaged entries
left out, never failing the rest) and which records are past their session's end."""

from __future__ import annotations

import secrets

from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.access import sign_outs

SID = secrets.token_urlsafe(16)
NOW = 1_800_000_000


def test_a_record_of_sid_and_end_is_read() -> None:
    assert sign_outs.read({SID: str(NOW + 60)}) == {SID: NOW + 60}
    assert sign_outs.read(None) == {}


def test_damaged_entries_are_left_out_and_the_rest_kept() -> None:
    data = {
        SID: str(NOW),
        "short": str(NOW),  # not an id the broker makes
        "a" * 22: "soon",
        "b" * 22: "-5",
        "c/" * 11: str(NOW),
    }
    assert sign_outs.read(data) == {SID: NOW}


def test_records_past_their_sessions_end_are_expired() -> None:
    ended = {"a" * 22: NOW - 1, "b" * 22: NOW, "c" * 22: NOW + 1}
    assert sign_outs.expired(ended, NOW) == ["a" * 22, "b" * 22]


@given(st.integers(min_value=0, max_value=2**40))
def test_every_session_id_the_broker_makes_is_one(seed: int) -> None:
    del seed
    assert sign_outs.is_sid(secrets.token_urlsafe(16))
