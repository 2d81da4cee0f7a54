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
#: Events a standby holds back at most (the newest), for its take-over (see ApiEvents.release).
MAX_HELD = 1_000


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
        allowed: Callable[[], bool] = lambda: True,
    ) -> None:
        self._client = client
        self._spawn = spawn
        self.limiter = EventLimiter(interval)
        #: False: the Event is held back (a standby posts none; the leader posts its own).
        self._allowed = allowed
        #: Held back while not allowed, newest last: (kind, reason, name) -> (clock, Event).
        self._held: dict[tuple[str, ...], tuple[float, dict[str, Any]]] = {}

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
        if not self._allowed():
            self._hold(
                {
                    "involved": involved,
                    "kind": kind,
                    "reason": reason,
                    "message": message,
                    "type_": type_,
                    "once_per": once_per,
                }
            )
            return
        if once_per is not None and not self.limiter.allow(*once_per):
            return
        self._spawn(
            post_event(
                self._client, involved, kind=kind, reason=reason, message=message, type_=type_
            )
        )

    def _hold(self, event: dict[str, Any]) -> None:
        """Keep ``event`` (:meth:`post`'s arguments) for :meth:`release`, the newest per key."""
        involved = event["involved"]
        meta = involved.get("metadata", involved)
        name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
        key = event["once_per"] or (event["kind"], event["reason"], name)
        self._held.pop(key, None)
        self._held[key] = (time.monotonic(), event)
        if len(self._held) > MAX_HELD:
            del self._held[next(iter(self._held))]

    def release(self, max_age: float) -> int:
        """Now allowed: post the Events held back in the last ``max_age`` seconds (a start's
        first LIST, say), forget older ones (the leader of the time posted those). Returns
        how many were posted."""
        held, self._held = self._held, {}
        cutoff = time.monotonic() - max_age
        posted = 0
        for at, event in held.values():
            if at >= cutoff:
                self.post(**event)
                posted += 1
        return posted
