"""The uid an identity gets: from a token's claim (checked, never guessed), else the broker's
allocation: a search that starts where the name says and skips what is taken."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.logon import uids


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        pytest.param({}, None, id="no-claim"),
        pytest.param({"uidNumber": 20001}, 20001, id="number"),
        pytest.param({"uidNumber": "20001"}, 20001, id="text"),
        pytest.param({"uidNumber": " 4242 "}, 4242, id="spaces"),
    ],
)
def test_a_claim_names_the_uid(claims: dict[str, object], expected: int | None) -> None:
    assert uids.from_claim(claims, "uidNumber") == expected


@pytest.mark.parametrize(
    "value",
    [0, 999, "0", "-5", "1e4", True, None, [1001], "x", 2**31, "99999999999"],
)
def test_a_claim_that_is_no_persons_uid_is_refused(value: object) -> None:
    with pytest.raises(uids.UidError, match="uidNumber"):
        uids.from_claim({"uidNumber": value}, "uidNumber")


def test_record_names_are_dns_labels_whatever_the_user() -> None:
    for user in ("alice", "Alice@Corp.Example", "o'hara / ops", "ü" * 300):
        name = uids.record_name(user)
        assert len(name) <= 63
        assert name.isascii()
        assert name == name.lower()
    assert uids.record_name("alice") != uids.record_name("Alice")
    assert uids.uid_record_name(20001) == "uid-20001"


@given(
    st.text(min_size=1, max_size=40),
    st.sets(st.integers(uids.FIRST_ALLOCATED, uids.LAST_ALLOCATED), max_size=200),
)
def test_candidates_are_free_allocated_uids_in_a_stable_order(user: str, taken: set[int]) -> None:
    found = uids.candidates(user, taken, limit=8)
    assert found
    assert len(found) == len(set(found)) <= 8
    assert not set(found) & taken
    assert all(uids.FIRST_ALLOCATED <= uid <= uids.LAST_ALLOCATED for uid in found)
    assert found == uids.candidates(user, taken, limit=8)
    if uids.first_try(user) not in taken:
        assert found[0] == uids.first_try(user)


def test_when_every_uid_is_taken_the_broker_says_so() -> None:
    everything = set(range(uids.FIRST_ALLOCATED, uids.LAST_ALLOCATED + 1))
    with pytest.raises(uids.UidError, match="taken"):
        uids.candidates("alice", everything)
