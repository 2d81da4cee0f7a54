"""A pool's session history as the plan recommender reads it: one JSON object a line,
``{"user": "...", "start": RFC 3339, "end": RFC 3339}`` (what an AVD connection log or a
Horizon events database export gives), in any order, at least seven days.

``parse_history(lines, zone)`` takes the lines (the caller reads the file), refuses bad
input with a ``HistoryError`` naming the line, and returns the sessions in start order.
Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from ..api.base import MAX_USER

#: The fewest local calendar days a history must cover: every weekday at least once.
MIN_DAYS = 7
#: Sessions in one history (as a timeline's logons).
MAX_SESSIONS = 2_000_000
_FIELDS = ("user", "start", "end")


class HistoryError(ValueError):
    """An unusable history; the message names the line (1-based) where it can."""


@dataclass(frozen=True, slots=True)
class PastSession:
    """One session of the history: who, and when it started and ended (aware, UTC)."""

    user: str
    start: datetime
    end: datetime


def _instant(value: object, field: str, line: int) -> datetime:
    if not isinstance(value, str):
        raise HistoryError(f"line {line}: {field} must be an RFC 3339 string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise HistoryError(
            f"line {line}: {field} {value!r} is not an RFC 3339 time "
            "(e.g. 2026-12-07T08:03:00+01:00)"
        ) from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise HistoryError(
            f"line {line}: {field} {value!r} has no offset (give Z or +01:00: a history's "
            "times are instants)"
        )
    return parsed.astimezone(UTC)


def _session(text: str, line: int) -> PastSession:
    try:
        item = json.loads(text)
    except json.JSONDecodeError as error:
        raise HistoryError(f"line {line}: not JSON: {error.msg}") from None
    if not isinstance(item, dict):
        raise HistoryError(f"line {line}: must be a JSON object with user, start and end")
    unknown = sorted(set(item) - set(_FIELDS))
    if unknown:
        raise HistoryError(
            f"line {line}: unknown field {unknown[0]!r} (a line has user, start and end)"
        )
    for field in _FIELDS:
        if field not in item:
            raise HistoryError(f"line {line}: {field} is missing")
    user = item["user"]
    if not isinstance(user, str) or not 1 <= len(user) <= MAX_USER:
        raise HistoryError(f"line {line}: user must be a string of 1 to {MAX_USER} characters")
    start = _instant(item["start"], "start", line)
    end = _instant(item["end"], "end", line)
    if end < start:
        raise HistoryError(f"line {line}: end {item['end']} is before start {item['start']}")
    if end == start:
        raise HistoryError(f"line {line}: end is start: a session lasts a while")
    return PastSession(user, start, end)


def covered_days(sessions: list[PastSession], zone: tzinfo) -> int:
    """Local calendar days from the first start's to the last end's, both included."""
    first = sessions[0].start.astimezone(zone).date()
    last = max(s.end for s in sessions).astimezone(zone).date()
    return (last - first).days + 1


def _order(session: PastSession) -> tuple[datetime, datetime, str]:
    return (session.start, session.end, session.user)


def parse_history(
    lines: Iterable[str], zone: tzinfo, *, min_days: int = MIN_DAYS
) -> list[PastSession]:
    """The sessions of the history's lines, checked and sorted: every line a JSON object
    with exactly user, start and end (RFC 3339 with an offset; end after start), at least
    ``min_days`` local days (in ``zone``) from the first start to the last end. Blank lines
    are skipped. The lines may come in any order (an export of a connection log is often by
    user or by end); the result is in start order, ties by end, then user, so the same lines
    in any order give the same list. Two equal lines are two sessions."""
    sessions: list[PastSession] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        if len(sessions) >= MAX_SESSIONS:
            raise HistoryError(f"line {number}: at most {MAX_SESSIONS} sessions in a history")
        sessions.append(_session(text, number))
    sessions.sort(key=_order)
    require_days(sessions, zone, min_days=min_days)
    return sessions


def require_days(sessions: list[PastSession], zone: tzinfo, *, min_days: int = MIN_DAYS) -> None:
    """Refuse an empty history, or one of fewer than ``min_days`` local days (in ``zone``)
    from the first start to the last end (``sessions`` in start order), whatever it was
    read from."""
    if not sessions:
        raise HistoryError("the history is empty: no session in it")
    days = covered_days(sessions, zone)
    if days < min_days:
        first = sessions[0].start.astimezone(zone).date()
        last = first + timedelta(days=days - 1)
        raise HistoryError(
            f"the history covers {days} day{'s' if days != 1 else ''} ({first} to {last} "
            f"local time); at least {min_days} are needed (every weekday once)"
        )
