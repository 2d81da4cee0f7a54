"""What the balancer sees of a host and what it answers: the engine's views. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol as Interface

from ..api import HostFeatures, HostLogonStorm, HostMetrics, Reason
from .demand import Demand


@dataclass(slots=True)
class BalancerHost:
    """The observed state of one session host, as the engine sees it."""

    name: str
    drain_mode: bool = False
    features: HostFeatures = field(default_factory=HostFeatures)
    address: str | None = None
    #: Sessions on the host, whoever they belong to (known users plus anonymous ones).
    sessions: int = 0
    #: Sessions still logging on (state Connecting, within connectingTimeoutSeconds).
    connecting: int = 0
    metrics: HostMetrics | None = None
    #: Query-order key; hosts are compared by (order, name). Defaults to insertion order.
    order: int = -1
    #: The host's own logon-storm thresholds (spec.logonStorm); None: the pool's.
    logon_storm: HostLogonStorm | None = None
    #: Made from an earlier host template while the pool's hosts are being updated: it takes
    #: a new session only when no updated host can.
    outdated: bool = False

    def supports(self, demand: Demand) -> bool:
        if demand.protocol is not None and demand.protocol not in self.features.protocols:
            return False
        return not (demand.unauthenticated and not self.features.unauthenticated_access)


@dataclass(frozen=True, slots=True)
class Placement:
    """The engine's answer for one request: a host and why, or no host and why not."""

    host: str | None
    reason: Reason


class Slotted(Interface):
    """Anything with a session count and a drain mode (a BalancerHost, a scaling host)."""

    @property
    def sessions(self) -> int: ...

    @property
    def drain_mode(self) -> bool: ...


def free_slots(limit: int, hosts: Iterable[Slotted]) -> int:
    """Session slots left on the hosts that are not draining."""
    return sum(max(0, limit - h.sessions) for h in hosts if not h.drain_mode)


def breadth_first_candidates(n: int) -> int:
    """How many of n eligible hosts a breadth-first decision chooses among: ceil(n/2)."""
    return (n + 1) // 2
