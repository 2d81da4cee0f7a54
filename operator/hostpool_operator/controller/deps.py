"""What every pool's I/O parts share: the client, settings, sinks, write slots and spawn."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..kube.client import KubeClient
from ..kube.sinks import EventSink, MetricsSink
from ..kube.writeslots import WriteSlots
from .settings import ControllerSettings

Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]
#: Runs a long-lived task under the supervisor: (name, kind for the metric, factory).
Supervise = Callable[[str, str, Callable[[], Coroutine[Any, Any, None]]], "asyncio.Task[None]"]


@dataclass(frozen=True, slots=True)
class Deps:
    client: KubeClient
    settings: ControllerSettings
    metrics: MetricsSink
    events: EventSink
    #: Request status writes in flight, bounded for the whole operator.
    write_slots: WriteSlots
    #: Pool and host status writes in flight, bounded for the whole operator.
    status_slots: WriteSlots
    #: Runs a coroutine as a task the controller owns (logged if it fails, cancelled at stop).
    spawn: Spawn
    #: Runs a long-lived loop that is started again if it fails (see ``supervisor``).
    supervise: Supervise
    #: The next arrival sequence number (the order requests are placed in, operator-wide).
    next_seq: Callable[[], int]
    #: The resource (plural) serving a workload kind (apiVersion, kind), discovered on first
    #: use; None when the API server does not serve it.
    workload_resource: Callable[[str, str], Awaitable[str | None]]
    #: True while this instance may write (it leads): a standby builds its pools' state from
    #: its watches and writes nothing; what it would have written on an event is done at
    #: take-over (see ``PoolWorker.take_over``).
    leading: Callable[[], bool]
