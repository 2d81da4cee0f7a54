"""Tombstones: the uids of deleted objects, bounded, newest kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.engine.records import Tombstones


def test_a_buried_uid_is_remembered_and_an_empty_one_is_not() -> None:
    graves = Tombstones()
    graves.bury("uid-1")
    graves.bury("")
    assert "uid-1" in graves
    assert "" not in graves
    assert "uid-2" not in graves
    assert len(graves) == 1


def test_past_the_limit_the_oldest_go_first() -> None:
    graves = Tombstones(limit=3)
    for uid in ("a", "b", "c"):
        graves.bury(uid)
    graves.bury("a")  # buried again: now the newest
    graves.bury("d")
    assert "b" not in graves
    assert {"a", "c", "d"} == {uid for uid in "abcd" if uid in graves}


@given(st.lists(st.text(min_size=1, max_size=4), max_size=200), st.integers(1, 20))
def test_never_more_than_the_limit_and_always_the_newest(uids: list[str], limit: int) -> None:
    graves = Tombstones(limit=limit)
    for uid in uids:
        graves.bury(uid)
    assert len(graves) <= limit
    newest = list(dict.fromkeys(reversed(uids)))[:limit]
    assert all(uid in graves for uid in newest)
