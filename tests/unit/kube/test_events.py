"""The Event limiter: once per interval per key, on an injected clock, in bounded memory;
and what a standby holds back until it leads."""

from __future__ import annotations

import inspect
from collections.abc import Coroutine
from typing import Any, cast

import pytest

from hostpool_operator.kube.client import KubeClient
from hostpool_operator.kube.recorder import ApiEvents, EventLimiter

PRUNE_ABOVE = 10_000


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def limiter(interval: float = 10.0) -> tuple[EventLimiter, Clock]:
    clock = Clock()
    return EventLimiter(interval, clock=clock), clock


@pytest.mark.parametrize(
    ("later", "allowed"),
    [
        (0.0, False),
        (5.0, False),
        (9.999, False),
        (10.0, True),  # a whole interval later
        (25.0, True),
    ],
    ids=["same-instant", "mid-interval", "just-before", "at-interval", "well-after"],
)
def test_once_per_interval_per_key(later: float, allowed: bool) -> None:
    limit, clock = limiter(10.0)
    assert limit.allow("pending", "ns", "desk", "PoolSaturated")
    clock.now += later
    assert limit.allow("pending", "ns", "desk", "PoolSaturated") is allowed


@pytest.mark.parametrize(
    "other",
    [
        ("pending", "ns", "desk", "NoEligibleHost"),
        ("pending", "ns", "other-pool", "PoolSaturated"),
        ("pending", "ns2", "desk", "PoolSaturated"),
        ("pending", "ns", "desk"),
        ("pendingns", "desk", "PoolSaturated"),
    ],
    ids=["reason", "pool", "namespace", "shorter", "joined-differently"],
)
def test_keys_are_independent(other: tuple[str, ...]) -> None:
    limit, _ = limiter()
    assert limit.allow("pending", "ns", "desk", "PoolSaturated")
    assert limit.allow(*other)
    assert not limit.allow(*other)
    assert not limit.allow("pending", "ns", "desk", "PoolSaturated")


def test_a_refused_event_does_not_restart_the_interval() -> None:
    limit, clock = limiter(10.0)
    assert limit.allow("k")
    clock.now += 6
    assert not limit.allow("k")
    clock.now += 4  # 10 s after the one let through, 4 s after the refused one
    assert limit.allow("k")
    clock.now += 9
    assert not limit.allow("k")


def test_the_interval_counts_from_the_last_event_let_through() -> None:
    limit, clock = limiter(10.0)
    times = [0, 3, 10, 15, 19, 21, 30]
    start = clock.now
    allowed = []
    for t in times:
        clock.now = start + t
        allowed.append(limit.allow("k"))
    assert allowed == [True, False, True, False, False, True, False]


def test_zero_interval_lets_everything_through() -> None:
    limit, _ = limiter(0.0)
    assert all(limit.allow("k") for _ in range(3))


def test_the_default_clock_is_monotonic_time() -> None:
    limit = EventLimiter(3600.0)
    assert limit.allow("k")
    assert not limit.allow("k")


def fill(limit: EventLimiter, n: int, prefix: str = "k") -> None:
    for i in range(n):
        assert limit.allow(prefix, str(i))


def remembered(limit: EventLimiter) -> int:
    """How many keys the limiter keeps (its memory: white-box on purpose)."""
    return len(limit._last)


def test_memory_is_pruned_past_10000_keys() -> None:
    limit, clock = limiter(10.0)
    fill(limit, PRUNE_ABOVE)
    assert remembered(limit) == PRUNE_ABOVE  # not pruned at the threshold itself
    clock.now += 10.5  # every key's interval is over
    assert limit.allow("one", "more")
    assert remembered(limit) == 1


def test_no_pruning_up_to_10000_keys() -> None:
    limit, clock = limiter(10.0)
    fill(limit, PRUNE_ABOVE - 1, "old")
    clock.now += 11.0  # all of them are due again, and still remembered
    assert limit.allow("the", "10000th")
    assert remembered(limit) == PRUNE_ABOVE
    assert limit.allow("the", "10001st")  # past 10,000: now the old ones go
    assert remembered(limit) == 2


def test_pruning_keeps_keys_still_within_their_interval() -> None:
    limit, clock = limiter(10.0)
    fill(limit, PRUNE_ABOVE // 2, "old")
    clock.now += 6.0
    fill(limit, PRUNE_ABOVE // 2, "recent")
    clock.now += 5.0  # "old" keys are 11 s old, "recent" ones 5 s
    assert limit.allow("trigger")
    assert remembered(limit) == PRUNE_ABOVE // 2 + 1
    # pruning never lets an Event through early...
    assert not limit.allow("recent", "0")
    assert not limit.allow("trigger")
    # ...and what it forgot was due anyway
    assert limit.allow("old", "0")


def test_pruning_under_a_burst_keeps_memory_bounded_and_the_newest_limited() -> None:
    limit, clock = limiter(10.0)
    fill(limit, PRUNE_ABOVE + 5)  # all within one interval: none of them is due
    clock.now += 1.0
    # Past the bound with nothing due, the oldest half goes: memory stays bounded...
    assert remembered(limit) <= PRUNE_ABOVE
    assert remembered(limit) >= PRUNE_ABOVE // 2
    # ...and the newest keys are still limited.
    assert not limit.allow("k", str(PRUNE_ABOVE + 4))


def test_a_long_burst_of_distinct_keys_never_grows_past_the_bound() -> None:
    limit, _ = limiter(60.0)
    fill(limit, 3 * PRUNE_ABOVE)
    assert remembered(limit) <= PRUNE_ABOVE + 1


def test_a_standby_holds_the_newest_event_per_key_and_posts_them_once_allowed() -> None:
    """While not allowed (a standby) nothing is posted; the newest Event of each key is kept
    and posted on release. The client is never reached: the spawned posts are only read."""
    leading = False
    spawned: list[Any] = []

    def spawn(post: Coroutine[Any, Any, Any]) -> None:
        spawned.append(inspect.getcoroutinelocals(post))  # the post's arguments, not run
        post.close()

    events = ApiEvents(cast(KubeClient, None), spawn, 10.0, allowed=lambda: leading)
    host = {"metadata": {"name": "h1", "namespace": "ns"}}
    events.post(host, "SessionHost", "HostLost", "first", "Warning")
    events.post(host, "SessionHost", "HostLost", "second", "Warning")
    events.post(host, "SessionHost", "Drained", "drained", "Normal")
    assert spawned == []
    leading = True
    assert events.release(max_age=60) == 2
    assert [(p["reason"], p["message"]) for p in spawned] == [
        ("HostLost", "second"),
        ("Drained", "drained"),
    ]
    assert events.release(max_age=60) == 0
