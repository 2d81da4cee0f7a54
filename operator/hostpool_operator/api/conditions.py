"""Status conditions in the Kubernetes API conventions' shape (pure helpers).

``lastTransitionTime`` moves only when a condition's ``status`` flips; a new reason or message
keeps the old time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from .timestamps import rfc3339


class Cond(NamedTuple):
    """A desired condition: type, status ("True"/"False"/"Unknown"), reason, message."""

    type: str
    status: str
    reason: str
    message: str = ""


def merge(
    existing: Sequence[Mapping[str, Any]] | None,
    desired: Iterable[Cond],
    *,
    now: datetime,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """The new condition list: desired conditions, keeping lastTransitionTime where the status
    is unchanged, and any other condition types that were there (someone else's)."""
    old = {c.get("type"): c for c in existing or () if isinstance(c, Mapping)}
    out: list[dict[str, Any]] = []
    seen = set()
    for cond in desired:
        seen.add(cond.type)
        before = old.get(cond.type)
        moved = before is None or before.get("status") != cond.status
        item: dict[str, Any] = {
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message,
            "lastTransitionTime": rfc3339(now)
            if moved or before is None or not before.get("lastTransitionTime")
            else before["lastTransitionTime"],
        }
        if generation is not None:
            item["observedGeneration"] = generation
        out.append(item)
    out.extend(dict(c) for t, c in old.items() if t not in seen)
    return out


def find(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for cond in conditions or ():
        if cond.get("type") == type_:
            return cond
    return None
