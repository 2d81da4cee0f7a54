"""Times things fall due, by key: each key's latest time, in a heap so the earliest is known
in O(1). A moved or dropped key leaves a stale heap entry behind, skipped when it comes up
(cheaper than removing it from the middle of the heap)."""

from __future__ import annotations

import heapq
from datetime import datetime


class DueTimes:
    """When each key (a request's name) is due; ``due(now)`` gives each due key once."""

    __slots__ = ("_by_key", "_heap")

    def __init__(self) -> None:
        self._by_key: dict[str, datetime] = {}
        self._heap: list[tuple[datetime, str]] = []

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def note(self, key: str, when: datetime | None) -> None:
        """``key`` is due at ``when`` (None: not due at all, or no longer)."""
        if when is None:
            self._by_key.pop(key, None)
            return
        if self._by_key.get(key) == when:
            return
        self._by_key[key] = when
        heapq.heappush(self._heap, (when, key))

    def forget(self, key: str) -> None:
        self._by_key.pop(key, None)

    def clear(self) -> None:
        self._by_key.clear()
        self._heap.clear()

    def _prune(self) -> None:
        heap = self._heap
        while heap and self._by_key.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)

    def next_due(self) -> datetime | None:
        """The earliest time a key is due (None: none is)."""
        self._prune()
        return self._heap[0][0] if self._heap else None

    def due(self, now: datetime, most: int | None = None) -> list[tuple[str, datetime]]:
        """The keys due by ``now`` with their times, earliest first, each given once (no
        longer kept: a later ``note`` brings one back); at most ``most`` (the rest stay)."""
        found: list[tuple[str, datetime]] = []
        self._prune()
        while self._heap and self._heap[0][0] <= now and (most is None or len(found) < most):
            when, key = heapq.heappop(self._heap)
            del self._by_key[key]
            found.append((key, when))
            self._prune()
        return found
