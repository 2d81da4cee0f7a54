"""Every long-lived task of the operator runs under one supervisor.

A watch, a pool's loop or a plan's status writer that dies on an unexpected exception leaves
the operator deciding on a view that no longer moves, while its liveness probe stays green.
Under the supervisor such a task is logged, counted (``hostpool_task_restarts_total{task}``)
and started again after a back-off; a task that keeps failing — ``failing_after`` failures in
a row, none of them after a run of ``healthy_run`` seconds — is reported by
:meth:`Supervisor.problems`, which turns the liveness probe red so the kubelet restarts the
process. A task that returns has finished its work and is not started again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..kube.backoff import Backoff
from ..kube.sinks import MetricsSink

log = logging.getLogger(__name__)

#: A task that ran this long before failing counts as having worked: its back-off starts over.
HEALTHY_RUN = 60.0
#: Failures in a row (each within HEALTHY_RUN of its start) that make a task "failing".
FAILING_AFTER = 5

TaskFactory = Callable[[], Coroutine[Any, Any, None]]
Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


@dataclass(slots=True)
class _Health:
    failures: int = 0
    last_error: str = ""
    #: When the current run started (clock), or None while waiting to restart.
    running_since: float | None = None


class Supervisor:
    """Starts tasks by name and keeps them running (see the module)."""

    def __init__(
        self,
        metrics: MetricsSink,
        spawn: Spawn,
        *,
        failing_after: int = FAILING_AFTER,
        healthy_run: float = HEALTHY_RUN,
        first_wait: float = 0.5,
        max_wait: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metrics = metrics
        self._spawn = spawn
        self._failing_after = failing_after
        self._healthy_run = healthy_run
        self._first_wait = first_wait
        self._max_wait = max_wait
        self._clock = clock
        self._health: dict[str, _Health] = {}

    def supervise(self, name: str, label: str, factory: TaskFactory) -> asyncio.Task[None]:
        """Run ``factory()`` as task ``name`` (unique, e.g. ``pool ns/finance``), restarting
        it after an unexpected exception; ``label`` is its low-cardinality kind for the
        metric (``pool``, ``informer/sessionrequests``)."""
        task: asyncio.Task[None] = self._spawn(self._keep(name, label, factory))
        task.set_name(name)
        return task

    async def _keep(self, name: str, label: str, factory: TaskFactory) -> None:
        backoff = Backoff(first=self._first_wait, cap=self._max_wait)
        health = self._health.setdefault(name, _Health())
        try:
            while True:
                started = health.running_since = self._clock()
                try:
                    await factory()
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    if self._clock() - started >= self._healthy_run:
                        backoff.reset()  # it worked for a good while: a new failure
                    wait = backoff.next()
                    health.running_since = None
                    health.failures = backoff.failures
                    health.last_error = f"{type(error).__name__}: {error}"[:300]
                    self._metrics.task_restarted(label)
                    log.error(
                        "task %s failed (%d in a row); restarting it in %.1fs",
                        name,
                        health.failures,
                        wait,
                        exc_info=error,
                    )
                    await asyncio.sleep(wait)
                    continue
                return  # finished its work
        finally:
            self._health.pop(name, None)

    def failures(self, name: str) -> int:
        """Failures in a row of task ``name`` (0 while it runs well or when unknown)."""
        health = self._health.get(name)
        if health is None or self._recovered(health):
            return 0
        return health.failures

    def _recovered(self, health: _Health) -> bool:
        since = health.running_since
        return since is not None and self._clock() - since >= self._healthy_run

    def problems(self) -> list[str]:
        """The tasks that keep failing, each with its last error (empty: all is well)."""
        return [
            f"task {name} failed {health.failures} times in a row (last: {health.last_error})"
            for name, health in sorted(self._health.items())
            if health.failures >= self._failing_after and not self._recovered(health)
        ]
