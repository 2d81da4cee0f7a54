"""The host agent's figures: load over an interval, from two readings of the machine's
counters, and what a load script's output means.

Pure: the agent reads the counters (psutil) and the clock; these functions only compute.
Every figure covers the whole interval, as Horizon's agent reports them: CPU from the time
the processors spent busy, disk queue length as the average number of I/Os in flight (the
time all I/Os spent queued or in service, divided by the interval), disk latency as the
average time per I/O completed in the interval, memory as the mean of the samples taken.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..api.base import MAX_THRESHOLD


@dataclass(frozen=True, slots=True)
class Counters:
    """One reading of the machine's cumulative counters."""

    at: float  # monotonic seconds
    cpu_busy: float  # seconds all processors spent not idle
    cpu_total: float  # seconds all processors existed
    reads: int
    writes: int
    read_ms: int  # total time spent on reads, ms
    write_ms: int


def _clamp(value: float, high: int) -> int:
    return max(0, min(high, round(value)))


def load_figures(
    before: Counters, after: Counters, memory_samples: Sequence[float]
) -> dict[str, int]:
    """cpuPercent, memoryPercent, diskQueueLength, diskReadLatencyMs, diskWriteLatencyMs
    over the interval between two readings. A latency with no I/O completed is 0; a figure
    that cannot be computed is left out (counters that went backwards after a reset)."""
    figures: dict[str, int] = {}
    total = after.cpu_total - before.cpu_total
    busy = after.cpu_busy - before.cpu_busy
    if total > 0 and busy >= 0:
        figures["cpuPercent"] = _clamp(100 * busy / total, 100)
    if memory_samples:
        figures["memoryPercent"] = _clamp(sum(memory_samples) / len(memory_samples), 100)
    elapsed_ms = (after.at - before.at) * 1000
    reads, writes = after.reads - before.reads, after.writes - before.writes
    read_ms, write_ms = after.read_ms - before.read_ms, after.write_ms - before.write_ms
    if min(reads, writes, read_ms, write_ms) < 0:
        return figures  # a counter was reset (a disk went away): no disk figures this time
    if elapsed_ms > 0:
        figures["diskQueueLength"] = _clamp((read_ms + write_ms) / elapsed_ms, MAX_THRESHOLD)
    # No I/O completed in the interval: 0 ms, as Windows' own counters (which Horizon's agent
    # reads) say. Left out, the merge patch would remove the field, and a Horizon pool with a
    # latency threshold would put exactly its quiet hosts last (load index -1, bucket 3).
    figures["diskReadLatencyMs"] = _clamp(read_ms / reads, MAX_THRESHOLD) if reads else 0
    figures["diskWriteLatencyMs"] = _clamp(write_ms / writes, MAX_THRESHOLD) if writes else 0
    return figures


def custom_load_value(output: str) -> int:
    """The load script's answer: the first line of its output, an integer 0..100.
    Raises ValueError, with a message saying what was wrong, for anything else."""
    lines = output.splitlines()
    first = lines[0].strip() if lines else ""
    if not first:
        raise ValueError("the load script printed nothing")
    try:
        value = int(first)
    except ValueError:
        raise ValueError(f"the load script printed {first[:40]!r}, not an integer") from None
    if not 0 <= value <= 100:
        raise ValueError(f"the load script printed {value}, outside 0..100")
    return value
