"""Horizon's load index, and the index a Horizon pool keeps of its hosts by bucket.

Pure. The load index of a host is a figure from 0 to 100 (or -1, never reported) derived
from its metrics and session count; a host turns new logons away at its logon-storm
thresholds (its own policy's, else the pool's); a Horizon pool sorts the hosts that accept
new sessions into buckets by it, and keeps them sorted so each decision is a lookup, not a
scan.
"""

from __future__ import annotations

from dataclasses import dataclass

from sortedcontainers import SortedList

from ..api import HostLogonStorm, HostMetrics, LoadIndexSettings, LogonStorm

#: The load index of a host whose needed inputs were never reported.
NO_LOAD_INDEX = -1


def _ratio_percent(value: int, threshold: int) -> int:
    """min(100, round(100 * value / threshold)), rounding halves up, in integers."""
    return min(100, (200 * value + threshold) // (2 * threshold))


def load_index(
    settings: LoadIndexSettings, metrics: HostMetrics | None, sessions: int, limit: int
) -> int:
    """The Horizon load index of a host, as the project defines it.

    * With ``useCustomScript``: the host's ``customLoadValue``, nothing else.
    * Otherwise each metric whose threshold is > 0 gives ``min(100, round(100*value/threshold))``;
      the session factor ``min(100, round(100*sessions/limit))`` counts when
      ``includeSessionCount`` is set or when no metric threshold is; the index is the largest.
    * If an input the pool needs was never reported, the index is -1 (no load index).
    """
    if settings.use_custom_script:
        value = None if metrics is None else metrics.custom_load_value
        return NO_LOAD_INDEX if value is None else value
    pairs = (
        (settings.cpu_threshold_percent, None if metrics is None else metrics.cpu_percent),
        (settings.memory_threshold_percent, None if metrics is None else metrics.memory_percent),
        (
            settings.disk_queue_length_threshold,
            None if metrics is None else metrics.disk_queue_length,
        ),
        (
            settings.disk_read_latency_threshold_ms,
            None if metrics is None else metrics.disk_read_latency_ms,
        ),
        (
            settings.disk_write_latency_threshold_ms,
            None if metrics is None else metrics.disk_write_latency_ms,
        ),
    )
    index = 0
    any_metric = False
    for threshold, value in pairs:
        if threshold <= 0:
            continue
        any_metric = True
        if value is None:
            return NO_LOAD_INDEX
        index = max(index, _ratio_percent(value, threshold))
    if settings.include_session_count or not any_metric:
        index = max(index, _ratio_percent(sessions, limit))
    return index


@dataclass(frozen=True, slots=True)
class LogonStormBlock:
    """Why a host turns new logons away: the threshold it is at, whose threshold that is
    (``"host"``: its own spec.logonStorm; ``"pool"``: the pool's horizon.logonStorm), the
    threshold's value and the host's figure (connecting sessions, or load index)."""

    threshold: str  # "connectingSessionThreshold" or "loadIndexThreshold"
    source: str  # "host" or "pool"
    limit: int
    value: int


def _in_force(pool_value: int, host_value: int | None) -> tuple[int, str]:
    """A logon-storm threshold in force on a host: the host's own where it sets one."""
    return (pool_value, "pool") if host_value is None else (host_value, "host")


def logon_storm_block(
    pool: LogonStorm, host: HostLogonStorm | None, connecting: int, load: int
) -> LogonStormBlock | None:
    """The logon-storm threshold that turns new logons away from a host, or None.

    Each threshold in force is the host's own (``spec.logonStorm``) where the host sets that
    field, else the pool's (``horizon.logonStorm``), field by field, as a Horizon agent's
    policy wins over the console setting; 0 disables it. A host is at the connecting
    threshold with that many sessions logging on, at the load-index threshold with a load
    index at or above it (never with no load index). Reconnects never ask.
    """
    limit, source = _in_force(
        pool.connecting_session_threshold,
        None if host is None else host.connecting_session_threshold,
    )
    if limit and connecting >= limit:
        return LogonStormBlock("connectingSessionThreshold", source, limit, connecting)
    limit, source = _in_force(
        pool.load_index_threshold, None if host is None else host.load_index_threshold
    )
    if limit and load != NO_LOAD_INDEX and load >= limit:
        return LogonStormBlock("loadIndexThreshold", source, limit, load)
    return None


class HorizonEntry:
    """What a host was indexed under, so it can be found again when it changes."""

    __slots__ = ("bucket2", "candidate", "connecting", "load", "name", "order", "queue_key")

    def __init__(
        self, name: str, order: int, load: int, candidate: bool, bucket2: bool, connecting: int
    ) -> None:
        self.name = name
        self.order = order
        self.load = load
        self.candidate = candidate
        self.bucket2 = bucket2
        self.connecting = connecting
        self.queue_key = (101 if load == NO_LOAD_INDEX else load, connecting, order, name)


class HorizonIndex:
    """Hosts of a Horizon pool that accept new sessions, arranged for the three buckets.

    * ``by_load``: bucket-1 candidates (every default feature, a load index, fewer connecting
      sessions than the Connection Server threshold), by (load, order). The raised threshold is
      read off it by position.
    * ``by_connecting[k]``: the same candidates with k connecting sessions, by (load, order);
      bucket 1's fair share is the first of the lowest k whose first host is under the threshold.
    * ``bucket2``: hosts with non-default features under both configured thresholds.
    * ``queue``: every accepting host by (load, connecting, order): bucket 3, the last resort.
    """

    def __init__(self) -> None:
        self.by_load: SortedList = SortedList()
        self.by_connecting: dict[int, SortedList] = {}
        self.connecting_levels: SortedList = SortedList()
        self.bucket2: SortedList = SortedList()
        self.queue: SortedList = SortedList()
        self.entries: dict[str, HorizonEntry] = {}

    def add(self, entry: HorizonEntry) -> None:
        self.entries[entry.name] = entry
        self.queue.add(entry.queue_key)
        if entry.candidate:
            key = (entry.load, entry.order, entry.name)
            self.by_load.add(key)
            level = self.by_connecting.get(entry.connecting)
            if level is None:
                level = self.by_connecting[entry.connecting] = SortedList()
                self.connecting_levels.add(entry.connecting)
            level.add(key)
        elif entry.bucket2:
            self.bucket2.add(entry.queue_key)

    def discard(self, name: str) -> None:
        entry = self.entries.pop(name, None)
        if entry is None:
            return
        self.queue.remove(entry.queue_key)
        if entry.candidate:
            key = (entry.load, entry.order, entry.name)
            self.by_load.remove(key)
            level = self.by_connecting[entry.connecting]
            level.remove(key)
            if not level:
                del self.by_connecting[entry.connecting]
                self.connecting_levels.remove(entry.connecting)
        elif entry.bucket2:
            self.bucket2.remove(entry.queue_key)

    def raised_threshold(self, configured: int, wanted: int) -> int:
        """The bucket-1 load threshold after the dynamic raise (see PoolBalancer.buckets)."""
        if wanted <= 0 or not self.by_load:
            return configured
        below = self.by_load.bisect_left((configured,))
        if below >= wanted:
            return configured
        nth = self.by_load[min(wanted, len(self.by_load)) - 1][0]
        return max(configured, int(nth) + 1)

    def bucket_one_choice(self, threshold: int) -> str | None:
        for level in self.connecting_levels:
            first = self.by_connecting[level][0]
            if first[0] < threshold:
                return str(first[2])
        return None
