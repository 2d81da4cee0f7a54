"""Per-user rate limit of the broker: a token bucket per user, fed by ``now``.

Memory stays bounded: a bucket that has refilled is the same as no bucket, so full ones
are dropped when the table grows."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class RateLimit:
    """``burst`` calls at once, then ``rate`` a second, per user."""

    def __init__(self, rate: float, burst: int, *, max_users: int = 100_000) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = float(burst)
        self.max_users = max_users
        self._buckets: dict[str, _Bucket] = {}

    def take(self, user: str, now: float) -> float:
        """0 when the call may go ahead (and it is counted), else the seconds until it
        could."""
        bucket = self._buckets.get(user)
        if bucket is None:
            if len(self._buckets) >= self.max_users:
                self._prune(now)
            bucket = self._buckets[user] = _Bucket(self.burst, now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate

    def _prune(self, now: float) -> None:
        full = [
            user
            for user, b in self._buckets.items()
            if b.tokens + (now - b.at) * self.rate >= self.burst
        ]
        for user in full:
            del self._buckets[user]
        if len(self._buckets) >= self.max_users:
            # Everyone is busy: forget the oldest (they get a fresh burst, never a refusal
            # they did not earn).
            for user in sorted(self._buckets, key=lambda u: self._buckets[u].at)[
                : len(self._buckets) // 2
            ]:
                del self._buckets[user]

    def __len__(self) -> int:
        return len(self._buckets)
