"""Power of a personal pool's workload-backed hosts: the stop rule, and each host's power read
from the pool's state. Pure.

A host is Stopped when the operator deleted its workload after ``stopAfterMinutes`` unused
(its volumes stay), Starting from its user's next connect (or its creation) until the
workload is Ready, Running while it is. Hosts of Pooled pools, and hosts without a
workload, have no power state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..api import PowerState
from .pool_state import PoolState
from .records import HostRecord
from .workloads import Gate


@dataclass(frozen=True, slots=True)
class PowerView:
    """One workload-backed host of a personal pool, as the stop rule sees it."""

    name: str
    user: str | None
    #: Its workload exists (the operator has not stopped it).
    running: bool
    #: Sessions on it, Disconnected ones included (a session is a reason to keep it).
    sessions: int
    #: Since when it has had no session (None: it has one now).
    unused_since: datetime | None


def stop_due(host: PowerView, stop_after: timedelta) -> datetime | None:
    """When this host is to be stopped (None: it is not: stopped already, unassigned, or in
    use). Only an assigned host stops: unassigned ones are the pool's spare capacity, which
    scaling keeps and removes."""
    if not host.running or host.user is None or host.sessions or host.unused_since is None:
        return None
    return host.unused_since + stop_after


def hosts_to_stop(
    hosts: Iterable[PowerView], stop_after: timedelta | None, now: datetime
) -> list[str]:
    """The hosts unused for ``personal.stopAfterMinutes`` (absent: none ever)."""
    if stop_after is None:
        return []
    return [h.name for h in hosts if (due := stop_due(h, stop_after)) is not None and due <= now]


def next_stop(
    hosts: Iterable[PowerView], stop_after: timedelta | None, now: datetime
) -> datetime | None:
    """When the next host comes due for a stop (for the worker's timer)."""
    if stop_after is None:
        return None
    dues = [d for h in hosts if (d := stop_due(h, stop_after)) is not None and d > now]
    return min(dues) if dues else None


def personal(state: PoolState) -> bool:
    return state.spec is not None and state.spec.is_personal


def stop_after(state: PoolState) -> timedelta | None:
    spec = state.spec
    if spec is None or not spec.is_personal:
        return None
    minutes = spec.personal_settings.stop_after_minutes
    return None if minutes is None else timedelta(minutes=minutes)


def power_of(state: PoolState, host: HostRecord, now: datetime) -> PowerState | None:
    """The host's ``status.power`` (None: it has none)."""
    if not personal(state) or host.spec is None or host.spec.workload_ref is None:
        return None
    if host.meta.name in state.power_off:
        return PowerState.STOPPED
    workload = state.workload_state(host, now)
    if workload is not None and workload.gate is Gate.OPEN:
        return PowerState.RUNNING
    return PowerState.STARTING


def power_views(state: PoolState, now: datetime) -> list[PowerView]:
    """The pool's workload-backed hosts for the stop rule, noting since when each has been
    unused (the clock restarts with every session, and when the host starts again)."""
    views = []
    for name, host in state.hosts.items():
        if host.spec is None or host.spec.workload_ref is None or name in state.removing:
            continue
        if not host.managed:
            continue  # its workload is someone else's to make: the operator never stops it
        running = name not in state.power_off
        sessions = state.ledger.count_on(name)
        if sessions or not running:
            state.unused_since.pop(name, None)
        else:
            state.unused_since.setdefault(name, now)
        views.append(
            PowerView(
                name=name,
                user=state.personal.claims.get(name, host.spec.assigned_user),
                running=running,
                sessions=sessions,
                unused_since=state.unused_since.get(name),
            )
        )
    return views
