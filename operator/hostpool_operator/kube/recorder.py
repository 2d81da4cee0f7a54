"""Events posted through the API, never more often than once per interval per key."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from .client import KubeClient
from .events import post_event

#: Keys the limiter remembers before it prunes those whose interval is over (and, if that
#: is not enough, the oldest half).
MAX_KEYS = 10_000


class EventLimiter:
    """Lets an Event through at most once per interval per key (object, reason)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[tuple[str, ...], float] = {}

    def allow(self, *key: str) -> bool:
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            return False
        self._last[key] = now
        if len(self._last) > MAX_KEYS:  # bounded memory under a storm of distinct keys
            cutoff = now - self._interval
            self._last = {k: t for k, t in self._last.items() if t >= cutoff}
            if len(self._last) > MAX_KEYS:
                # A burst of distinct keys all within their interval: forget the oldest half,
                # so memory stays bounded and this copy is not made again on every call.
                newest = sorted(self._last.items(), key=lambda item: item[1])[-MAX_KEYS // 2 :]
                self._last = dict(newest)
        return True


class ApiEvents:
    """The operator's EventSink: each Event is posted in a task of its own (a failure is
    logged by the client, never raised), keyed ones through the limiter."""

    def __init__(
        self,
        client: KubeClient,
        spawn: Callable[[Coroutine[Any, Any, Any]], object],
        interval: float,
    ) -> None:
        self._client = client
        self._spawn = spawn
        self.limiter = EventLimiter(interval)

    def post(
        self,
        involved: Mapping[str, Any],
        kind: str,
        reason: str,
        message: str,
        type_: str,
        *,
        once_per: tuple[str, ...] | None = None,
    ) -> None:
        if once_per is not None and not self.limiter.allow(*once_per):
            return
        self._spawn(
            post_event(
                self._client, involved, kind=kind, reason=reason, message=message, type_=type_
            )
        )
