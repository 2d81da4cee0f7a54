"""Ended portal sessions, as every replica of the broker keeps them.

A portal session lives in a sealed cookie that any replica reads: ending it in one replica
(sign-out, a refresh the provider refused) must refuse the cookie in all of them, and end the
browser desktops it opened. Each session has a random id (``sid``); an ended one is recorded
as ``sid -> the session's own end`` (epoch seconds) in one ConfigMap the replicas share, and
forgotten once that end has passed (the cookie is refused by then anyway).

Pure: the caller passes what the ConfigMap holds and the time."""

from __future__ import annotations

import re
from collections.abc import Mapping

#: A session id as the broker makes them (``secrets.token_urlsafe(16)``: 22 characters), and
#: as a ConfigMap key allows.
_SID = re.compile(r"[A-Za-z0-9_-]{16,64}")


def is_sid(text: object) -> bool:
    return isinstance(text, str) and _SID.fullmatch(text) is not None


def read(data: Mapping[str, object] | None) -> dict[str, int]:
    """The ended sessions a ConfigMap's data records; entries that are not ``sid: epoch``
    (written by hand, or damaged) are left out rather than failing the rest."""
    ended: dict[str, int] = {}
    for sid, until in (data or {}).items():
        if is_sid(sid) and isinstance(until, str) and until.isdigit():
            ended[sid] = int(until)
    return ended


def expired(ended: Mapping[str, int], now: float) -> list[str]:
    """The records whose session would have ended by now: nothing more to refuse."""
    return sorted(sid for sid, until in ended.items() if until <= now)


__all__ = ["expired", "is_sid", "read"]
