"""What the help desk is told of a user's recent connects (``kubectl hostpool diagnose``):
each as a timeline of its phases, the slowest one against the pool's median for that phase,
and for a failure the phase, the reason in words and the Event behind it.

Pure: requests and Events as the API returns them in, lines (or JSON) out.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..api.request import ConnectPhase
from ..api.timestamps import parse_time
from .connects import ORDER, connects_of, phases_of, started_at, total

Obj = dict[str, Any]
#: Before anything: what a connect or Event without a time sorts as.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: Each failure reason in words a help desk (and the person) understands.
REASON_WORDS: dict[str, str] = {
    "PoolSaturated": "every host of the pool was full; the connect waited for a free place",
    "HostsStarting": "the pool's hosts were starting",
    "NoEligibleHost": "no host of the pool could take this session",
    "PoolNotFound": "the pool does not exist",
    "HostLost": "the desktop's host went away during the session",
    "HostNotGiven": "the personal desktop could not be given to this person",
    "HostNotTrusted": "the host did not present the certificate its agent published",
    "TicketUsed": "the one-time connect ticket had been used already",
    "UidMismatch": "the person's account on the host has another user id",
    "HomeOwnedByAnotherUser": "the person's home directory on the host belongs to someone else",
    "Replayed": "the one-time sign-in credential had been used already",
    "Expired": "the sign-in credential had expired before the host checked it",
    "NotYetValid": "the host's clock is behind: the credential was not valid yet",
    "Malformed": "the sign-in credential was damaged",
    "SessionNotStarted": "the host never started the desktop session",
    "Abandoned": "the person gave up before the desktop was shown",
}


def words(reason: str | None) -> str:
    """A failure's reason in words (the reason itself when it has none here)."""
    if not reason:
        return "no reason was recorded"
    return REASON_WORDS.get(reason, reason)


@dataclass(frozen=True, slots=True)
class Seen:
    """One connect, where it was made, and the Event that explains a failure."""

    pool: str
    request: str
    connect: Mapping[str, Any]
    event: str | None = None

    @property
    def started(self) -> datetime | None:
        return started_at(self.connect)


def user_of(request: Mapping[str, Any]) -> str | None:
    spec = request.get("spec")
    user = spec.get("user") if isinstance(spec, Mapping) else None
    return user if isinstance(user, str) else None


def pool_of(request: Mapping[str, Any]) -> str:
    spec = request.get("spec")
    ref = spec.get("poolRef") if isinstance(spec, Mapping) else None
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return name if isinstance(name, str) else "?"


def status_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


#: Waits most connects do not have: for the median, a connect without one waited 0 s (a
#: host's start is slow against the many connects that needed none).
WAITS = (ConnectPhase.QUEUE, ConnectPhase.HOST_START)


def medians(requests: Iterable[Mapping[str, Any]]) -> dict[str, dict[ConnectPhase, float]]:
    """Per pool, the median seconds of each phase over the connects its requests keep."""
    figures: dict[str, dict[ConnectPhase, list[float]]] = {}
    for request in requests:
        by_phase = figures.setdefault(pool_of(request), {})
        for connect in connects_of(status_of(request)):
            found = phases_of(connect)
            if found:
                found = {**dict.fromkeys(WAITS, 0.0), **found}
            for phase, value in found.items():
                by_phase.setdefault(phase, []).append(value)
    return {
        pool: {phase: statistics.median(values) for phase, values in by_phase.items()}
        for pool, by_phase in figures.items()
    }


def explaining(events: Sequence[Mapping[str, Any]], connect: Mapping[str, Any]) -> str | None:
    """The Event behind a failed connect: the latest Warning of its reason, else the latest
    Warning after it began, as ``Reason: message``."""
    reason = connect.get("reason")
    began = started_at(connect)
    warnings = [e for e in events if e.get("type") == "Warning"]
    if began is not None:
        warnings = [e for e in warnings if (_event_time(e) or began) >= began]
    chosen = [e for e in warnings if e.get("reason") == reason] or warnings
    if not chosen:
        return None
    latest = max(chosen, key=lambda e: _event_time(e) or EPOCH)
    return f"{latest.get('reason')}: {latest.get('message', '')}".strip()


def _event_time(event: Mapping[str, Any]) -> datetime | None:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        found = parse_time(event.get(key))
        if found is not None:
            return found
    meta = event.get("metadata")
    return parse_time(meta.get("creationTimestamp")) if isinstance(meta, Mapping) else None


def slowest(
    connect: Mapping[str, Any], pool_medians: Mapping[ConnectPhase, float]
) -> tuple[ConnectPhase, float, float | None] | None:
    """The phase that took longest against its pool median (its share over the median;
    the longest outright when no median is known): (phase, seconds, median)."""
    phases = phases_of(connect)
    if not phases:
        return None

    def excess(item: tuple[ConnectPhase, float]) -> float:
        median = pool_medians.get(item[0])
        return item[1] - median if median is not None else item[1]

    phase, value = max(phases.items(), key=excess)
    return phase, value, pool_medians.get(phase)


def lines(
    seen: Sequence[Seen], pool_medians: Mapping[str, Mapping[ConnectPhase, float]]
) -> list[str]:
    """The report: one block a connect, newest first."""
    out: list[str] = []
    ordered = sorted(seen, key=lambda s: s.started or EPOCH, reverse=True)
    for item in ordered:
        connect = item.connect
        outcome = connect.get("outcome") or "under way"
        kind = "reconnect" if connect.get("reconnect") else "connect"
        when = connect.get("startedAt", "?")
        out.append(
            f"{when}  {kind} {connect.get('ref')}  pool {item.pool}  request {item.request}  "
            f"{outcome}  {total(connect):.2f} s"
        )
        medians_here = pool_medians.get(item.pool, {})
        mark = slowest(connect, medians_here)
        for phase in ORDER:
            value = phases_of(connect).get(phase)
            if value is None:
                continue
            median = medians_here.get(phase)
            note = f"  (pool median {median:.2f} s)" if median is not None else ""
            flag = "  <- slowest" if mark is not None and mark[0] is phase else ""
            out.append(f"    {phase.value:<15}{value:8.2f} s{note}{flag}")
        if connect.get("outcome") == "Failed":
            failed = connect.get("failedPhase") or "?"
            reason = connect.get("reason")
            out.append(f"    failed in {failed}: {reason or '?'}: {words(reason)}")
            if connect.get("message"):
                out.append(f"    {connect['message']}")
            if item.event:
                out.append(f"    event: {item.event}")
    return out


def as_json(
    seen: Sequence[Seen], pool_medians: Mapping[str, Mapping[ConnectPhase, float]]
) -> list[Obj]:
    """The report as data (``-o json``), newest first."""
    ordered = sorted(seen, key=lambda s: s.started or EPOCH, reverse=True)
    found = []
    for item in ordered:
        mark = slowest(item.connect, pool_medians.get(item.pool, {}))
        entry: Obj = {
            "pool": item.pool,
            "request": item.request,
            **dict(item.connect),
            "seconds": total(item.connect),
        }
        if mark is not None:
            entry["slowest"] = {"phase": mark[0].value, "seconds": mark[1], "poolMedian": mark[2]}
        if item.connect.get("outcome") == "Failed":
            entry["explanation"] = words(item.connect.get("reason"))
            if item.event:
                entry["event"] = item.event
        found.append(entry)
    return found
