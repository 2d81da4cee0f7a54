"""How long logons waited for a host: the percentile table and the share over a bound, as
the timeline's result and the plan recommender report them (minutes)."""

from __future__ import annotations

import math
from collections.abc import Sequence

#: The rows of the wait table, "p50" ... "p99", then "max".
PERCENTILES = (50, 90, 95, 99)
#: Waits are measured in float seconds: a wait this close to the bound is at the bound.
_EPSILON_SECONDS = 1e-6


def nearest_rank(ordered: Sequence[float], percent: float) -> float:
    """The smallest value that at least ``percent`` % of ``ordered`` (sorted) do not exceed;
    0 for no values."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


def wait_table(waits_seconds: Sequence[float]) -> dict[str, float]:
    """{"p50", "p90", "p95", "p99", "max"} of the waits, in minutes (2 decimals)."""
    ordered = sorted(waits_seconds)
    table = {f"p{p}": round(nearest_rank(ordered, p) / 60, 2) for p in PERCENTILES}
    table["max"] = round(ordered[-1] / 60, 2) if ordered else 0.0
    return table


def waited_over(waits_seconds: Sequence[float], bound_minutes: float) -> int:
    """How many logons waited longer than the bound."""
    limit = bound_minutes * 60 + _EPSILON_SECONDS
    return sum(1 for wait in waits_seconds if wait > limit)


def waited_over_percent(waits_seconds: Sequence[float], bound_minutes: float) -> float:
    """100 x the share of logons that waited longer than the bound (4 decimals; 0 for no
    logons)."""
    if not waits_seconds:
        return 0.0
    return round(100 * waited_over(waits_seconds, bound_minutes) / len(waits_seconds), 4)
