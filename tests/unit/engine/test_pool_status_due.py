"""When a pool's status is written: counts alone wait during a storm, anything else not."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.engine.status import POOL_COUNT_FIELDS, pool_status_due


def pool_status(
    *,
    total: int = 10,
    free: int = 5,
    pending: int = 0,
    saturated: str = "False",
    reason: str = "CapacityAvailable",
    generation: int = 1,
    ltt: str = "2026-11-29T10:00:00Z",
) -> dict[str, Any]:
    return {
        "observedGeneration": generation,
        "hosts": {"total": 2, "available": 2, "draining": 0, "full": 0},
        "sessions": {"total": total, "connecting": total, "active": 0, "disconnected": 0},
        "capacity": {"total": total + free, "free": free},
        "pendingRequests": pending,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Reconciled",
                "message": "2 of 2 hosts take new sessions",
                "lastTransitionTime": ltt,
            },
            {
                "type": "Saturated",
                "status": saturated,
                "reason": reason,
                "message": f"{free} free slots",
                "lastTransitionTime": ltt,
            },
        ],
    }


def due_mid_storm(before: dict[str, Any] | None, after: dict[str, Any]) -> bool:
    """Placements going on, the last write a second ago, a maximum delay of 5 s."""
    return pool_status_due(before, after, busy=True, since_written=1.0, max_delay=5.0)


def test_first_status_is_written_at_once() -> None:
    assert due_mid_storm(None, pool_status())


def test_unchanged_status_is_not_written_even_when_quiet() -> None:
    before = pool_status()
    after = pool_status(ltt="2026-11-29T11:00:00Z")  # only a time differs
    assert not pool_status_due(before, after, busy=False, since_written=60.0, max_delay=5.0)


def test_counts_alone_wait_while_placements_go_on() -> None:
    # the condition messages quote the counts too: they change, and still it waits
    assert not due_mid_storm(pool_status(), pool_status(total=11, free=4))


def test_counts_are_written_once_placements_pause() -> None:
    assert pool_status_due(
        pool_status(), pool_status(total=11, free=4), busy=False, since_written=1.0, max_delay=5.0
    )


def test_counts_are_written_after_the_maximum_delay_even_mid_storm() -> None:
    assert pool_status_due(
        pool_status(), pool_status(total=11, free=4), busy=True, since_written=5.0, max_delay=5.0
    )
    assert not pool_status_due(
        pool_status(), pool_status(total=11, free=4), busy=True, since_written=4.9, max_delay=5.0
    )


@pytest.mark.parametrize(
    "after",
    [
        pool_status(total=15, free=0, saturated="True", reason="NoFreeSessions"),
        pool_status(saturated="True", reason="RequestsWaiting", pending=3),
        pool_status(reason="SomethingElse"),
        pool_status(generation=2),
    ],
    ids=["saturated-flips", "saturated-reason-and-status", "reason-only", "new-generation"],
)
def test_a_condition_or_generation_change_is_written_mid_storm(after: dict[str, Any]) -> None:
    assert due_mid_storm(pool_status(), after)


def test_a_new_condition_type_is_written_mid_storm() -> None:
    after = pool_status()
    after["conditions"].append(
        {"type": "ScalingLimited", "status": "True", "reason": "MaxHostsReached", "message": ""}
    )
    assert due_mid_storm(pool_status(), after)


counts = st.integers(min_value=0, max_value=10_000)


@given(total=counts, free=counts, pending=counts, since=st.floats(0, 4.99))
def test_property_mid_storm_only_non_count_changes_are_written(
    total: int, free: int, pending: int, since: float
) -> None:
    before = pool_status()
    after = pool_status(total=total, free=free, pending=pending)
    assert not pool_status_due(before, after, busy=True, since_written=since, max_delay=5.0)
    # ...and once quiet, any difference at all is written
    changed = {k: after[k] != before[k] for k in POOL_COUNT_FIELDS}
    assert pool_status_due(before, after, busy=False, since_written=since, max_delay=5.0) == any(
        changed.values()
    )
