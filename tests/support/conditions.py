"""Readers of the project's objects as the API returns them (plain dicts): status fields,
conditions, and where requests were placed. No API calls here."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def status(obj: Mapping[str, Any]) -> dict[str, Any]:
    value = obj.get("status")
    return dict(value) if isinstance(value, Mapping) else {}


def condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    """The condition of this type in ``status.conditions``, if any."""
    for cond in status(obj).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            return dict(cond)
    return None


def cond_is(obj: Mapping[str, Any], type_: str, value: str, reason: str | None = None) -> bool:
    cond = condition(obj, type_)
    if cond is None or cond.get("status") != value:
        return False
    return reason is None or cond.get("reason") == reason


def phase(obj: Mapping[str, Any]) -> str | None:
    value = status(obj).get("phase")
    return value if isinstance(value, str) else None


def host_of(obj: Mapping[str, Any]) -> str | None:
    value = status(obj).get("host")
    return value if isinstance(value, str) else None


def sessions_total(obj: Mapping[str, Any]) -> int | None:
    sessions = status(obj).get("sessions")
    if not isinstance(sessions, Mapping):
        return None
    total = sessions.get("total")
    return total if isinstance(total, int) else None


def half_up(n: int) -> int:
    """ceil(n/2): how many of n eligible hosts a breadth-first decision picks among."""
    return math.ceil(n / 2)


def hosts_of(requests: Mapping[str, Obj]) -> dict[str, str | None]:
    """Each request's status.host, by request name."""
    return {name: host_of(obj) for name, obj in requests.items()}


def per_host_users(requests: Mapping[str, Obj]) -> dict[str, set[str]]:
    """Distinct users with an Assigned request, per host."""
    users: dict[str, set[str]] = {}
    for obj in requests.values():
        host = host_of(obj)
        if host is not None and phase(obj) == "Assigned":
            users.setdefault(host, set()).add(str((obj.get("spec") or {}).get("user")))
    return users


def count_by_host(requests: Mapping[str, Obj]) -> dict[str, int]:
    """How many distinct users each host serves, from the requests assigned to it."""
    return {host: len(users) for host, users in per_host_users(requests).items()}
