"""The relay's limits on browser desktops open at once: per user, and per replica."""

from __future__ import annotations

from hostpool_operator.broker.relay.open_desktops import OpenDesktops


def test_a_user_may_open_up_to_their_share() -> None:
    opened = OpenDesktops(per_user=2, total=10)
    for _ in range(2):
        assert opened.refusal("alice") is None
        opened.opened("alice")
    assert opened.refusal("alice") == "TooManyDesktops"
    assert opened.refusal("bob") is None  # others are not held by alice's
    opened.closed("alice")
    assert opened.refusal("alice") is None


def test_the_replica_takes_no_more_than_its_total() -> None:
    opened = OpenDesktops(per_user=4, total=3)
    for user in ("a", "b", "c"):
        opened.opened(user)
    assert opened.refusal("d") == "RelayBusy"
    assert opened.open == 3
    for user in ("a", "b", "c"):
        opened.closed(user)
    assert opened.open == 0
    assert not opened.by_user  # nobody's count is kept at zero
