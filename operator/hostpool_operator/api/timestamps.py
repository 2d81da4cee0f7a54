"""Timestamps as the Kubernetes API writes them (RFC 3339, UTC, whole seconds) and reads
them back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp from the API, or None when absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
