"""Request status writes in flight, bounded for the whole operator, shared fairly by pools.

Every write in flight is a request the API server works on at the same time as all others;
past a point more of them only slow down the watches that deliver new requests
(docs/performance.md). So the bound is one for all pools, not one per pool: a logon storm
over many pools must not put many times that number in flight. When every slot is taken,
the next free one goes to the pools in turn (round robin), so a pool with a long backlog
cannot hold up the first request of another. An urgent write (a pool's own status, behind
thousands of host status writes at a start) goes before all others, first come first served.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager


class WriteSlots:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.busy = 0
        self._waiting: dict[Hashable, deque[asyncio.Future[None]]] = {}
        self._turns: deque[Hashable] = deque()  # pools with waiters, next turn first
        self._urgent: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._urgent) + sum(len(q) for q in self._waiting.values())

    @asynccontextmanager
    async def slot(self, pool: Hashable, *, urgent: bool = False) -> AsyncIterator[None]:
        """Hold one slot for ``pool`` while the body runs; ``urgent``: ahead of every
        waiter that is not."""
        await self._acquire(pool, urgent)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, pool: Hashable, urgent: bool) -> None:
        if self.busy < self.limit and not self._turns and not self._urgent:
            self.busy += 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if urgent:
            self._urgent.append(granted)
        else:
            queue = self._waiting.get(pool)
            if queue is None:
                queue = self._waiting[pool] = deque()
                self._turns.append(pool)
            queue.append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release()  # the slot was handed over just as we were cancelled
            elif urgent:
                self._urgent.remove(granted)
            else:
                self._forget(pool, granted)
            raise

    def _release(self) -> None:
        # Hand the slot over to the first urgent waiter, else to the next pool in turn (busy
        # stays the same), or free it.
        while self._urgent:
            granted = self._urgent.popleft()
            if not granted.done():
                granted.set_result(None)
                return
        while self._turns:
            pool = self._turns.popleft()
            queue = self._waiting[pool]
            granted = queue.popleft()
            if queue:
                self._turns.append(pool)
            else:
                del self._waiting[pool]
            if not granted.done():
                granted.set_result(None)
                return
        self.busy -= 1

    def _forget(self, pool: Hashable, granted: asyncio.Future[None]) -> None:
        queue = self._waiting.get(pool)
        if queue is None or granted not in queue:
            return
        queue.remove(granted)
        if not queue:
            del self._waiting[pool]
            self._turns.remove(pool)
