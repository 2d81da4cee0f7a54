"""Scaling decisions: how many session hosts to add, which empty ones may go, and the
manifest of a host to create.

Pure functions of observed state (no I/O, no clock of their own: ``now`` is passed in), so
the operator derives every decision from what the API shows and a restart can never make it
create a host twice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..api import API_VERSION, HostTemplate, Scaling
from ..api.base import pool_owner
from ..engine.balancer_view import free_slots
from ..engine.workloads import workload_ref


@dataclass(frozen=True, slots=True)
class ScaleHost:
    """What scaling needs to know of one host."""

    name: str
    sessions: int = 0
    drain_mode: bool = False
    #: Created by the operator from the pool's hostTemplate (only those are ever removed).
    managed: bool = False
    #: Since when the host has had no session (None: it has sessions, or it is unknown).
    empty_since: datetime | None = None


@dataclass(frozen=True, slots=True)
class ScaleUp:
    """How many hosts to create now; ``limited`` when maxHosts kept it from creating more."""

    add: int
    wanted: int
    limited: bool


def hosts_to_add(
    scaling: Scaling | None, limit: int, hosts: Sequence[ScaleHost], waiting: int
) -> ScaleUp:
    """Hosts to create so that ``waiting`` requests (pending for lack of capacity) fit and
    ``bufferSessions`` slots stay free, with at least ``minHosts`` and at most ``maxHosts``.

    Every host counts toward ``maxHosts``, whoever created it; a new host is assumed to take
    ``limit`` sessions.
    """
    if scaling is None:
        return ScaleUp(0, 0, False)
    total = len(hosts)
    short = waiting + scaling.buffer_sessions - free_slots(limit, hosts)
    by_demand = math.ceil(short / limit) if short > 0 else 0
    wanted = max(by_demand, scaling.min_hosts - total, 0)
    room = max(0, scaling.max_hosts - total)
    return ScaleUp(add=min(wanted, room), wanted=wanted, limited=wanted > room)


def hosts_to_remove(
    scaling: Scaling | None,
    limit: int,
    hosts: Sequence[ScaleHost],
    waiting: int,
    now: datetime,
) -> list[str]:
    """Operator-created hosts that have been empty for ``scaleDownDelaySeconds`` and are not
    needed: the pool stays at or above ``minHosts`` and keeps ``bufferSessions`` free slots.
    Never a host with a session, never a host a user created, never while requests wait.
    ``hosts`` come in query order; the newest go first.
    """
    if scaling is None or waiting > 0:
        return []
    total = len(hosts)
    free = free_slots(limit, hosts)
    removable: list[str] = []
    for host in reversed(hosts):
        if total - len(removable) <= scaling.min_hosts:
            break
        if not host.managed or host.sessions > 0 or host.empty_since is None:
            continue
        if (now - host.empty_since).total_seconds() < scaling.scale_down_delay_seconds:
            continue
        freed = 0 if host.drain_mode else limit
        if free - freed < scaling.buffer_sessions:
            continue
        free -= freed
        removable.append(host.name)
    return removable


@dataclass(frozen=True, slots=True)
class ScalingDecision:
    """What a pool's scaling does now: create ``add`` hosts, or remove ``remove`` (never
    both), and what its ScalingLimited condition says (True when maxHosts stops growth)."""

    add: int
    remove: list[str]
    limited: bool
    message: str


def decide_scaling(
    scaling: Scaling, limit: int, hosts: Sequence[ScaleHost], waiting: int, now: datetime
) -> ScalingDecision:
    """Add hosts when requests wait for capacity (or the buffer runs low); else remove the
    operator's hosts that have been empty long enough. ``hosts`` are the pool's hosts in
    query order, except those being removed already."""
    up = hosts_to_add(scaling, limit, hosts, waiting)
    if up.limited:
        message = (
            f"maxHosts {scaling.max_hosts} reached; {up.wanted - up.add} more host(s) "
            "would be needed"
        )
    else:
        message = f"{len(hosts)} of at most {scaling.max_hosts} hosts"
    if up.add > 0:
        return ScalingDecision(up.add, [], up.limited, message)
    remove = hosts_to_remove(scaling, limit, hosts, waiting, now)
    return ScalingDecision(0, remove, up.limited, message)


def host_manifest(
    template: HostTemplate,
    *,
    pool: str,
    namespace: str,
    pool_uid: str,
    labels: dict[str, str],
    name: str | None = None,
) -> dict[str, Any]:
    """A SessionHost to create from the pool's template: ``name`` (else a name generated
    after the pool), the template's labels plus ``labels``, the pool as its controlling owner
    (so deleting the pool deletes the hosts it made), and, when the template has a workload,
    the reference to the workload of the same name."""
    spec = template.spec.to_api()
    spec["poolRef"] = {"name": pool}
    metadata: dict[str, Any] = {
        "namespace": namespace,
        "labels": {**template.metadata.labels, **labels},
        "annotations": dict(template.metadata.annotations),
        "ownerReferences": [pool_owner(pool, pool_uid, block_deletion=True)],
    }
    if name is not None:
        metadata["name"] = name
    else:
        metadata["generateName"] = f"{pool}-"[:58]
    if template.workload is not None and name is not None:
        spec["workloadRef"] = workload_ref(template.workload, name).to_api()
    return {"apiVersion": API_VERSION, "kind": "SessionHost", "metadata": metadata, "spec": spec}
