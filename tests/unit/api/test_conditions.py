"""Conditions follow the API conventions: lastTransitionTime moves only when status flips."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hostpool_operator.api.conditions import Cond, find, merge

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def test_new_condition_gets_the_current_time_and_generation() -> None:
    out = merge(None, [Cond("Ready", "True", "Reconciled", "ok")], now=T0, generation=3)
    assert out == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Reconciled",
            "message": "ok",
            "lastTransitionTime": "2026-11-29T10:00:00Z",
            "observedGeneration": 3,
        }
    ]


def test_same_status_keeps_the_transition_time_even_with_a_new_reason() -> None:
    first = merge(None, [Cond("Saturated", "False", "CapacityAvailable", "5 free")], now=T0)
    second = merge(first, [Cond("Saturated", "False", "CapacityAvailable", "1 free")], now=T1)
    assert second[0]["lastTransitionTime"] == "2026-11-29T10:00:00Z"
    assert second[0]["message"] == "1 free"


def test_flipped_status_moves_the_transition_time() -> None:
    first = merge(None, [Cond("Saturated", "False", "CapacityAvailable")], now=T0)
    second = merge(first, [Cond("Saturated", "True", "RequestsWaiting")], now=T1)
    assert second[0]["lastTransitionTime"] == "2026-11-29T10:05:00Z"


def test_conditions_of_other_types_are_kept() -> None:
    theirs = [{"type": "Audited", "status": "True", "reason": "X", "message": ""}]
    out = merge(theirs, [Cond("Ready", "True", "Reconciled")], now=T0)
    assert find(out, "Audited") == theirs[0]
    assert find(out, "Ready") is not None
    assert find(out, "Missing") is None
