"""What a session request asks of a host: the input of every placement decision."""

from __future__ import annotations

from dataclasses import dataclass

from ..api import Protocol


@dataclass(frozen=True, slots=True)
class Demand:
    """What a session request asks for (a SessionRequest spec without its pool)."""

    user: str
    protocol: Protocol | None = None
    unauthenticated: bool = False
