"""A storm of SessionRequests (:class:`Storm`): created from worker threads at a set pace,
each retried through API server and etcd restarts; and :class:`Tally`, how many faults a
test injected.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from support.conditions import Obj
from support.kube import OUTAGE, ApiError, Kube, wait_for


class Storm:
    """Creates SessionRequests from ``threads`` worker threads, each retried through outages.

    :meth:`add` queues bodies, optionally paced (``rate`` per second from now on); streams
    added at different times interleave by due time. ``started[name]`` is the monotonic time
    its create call began, ``created[name]`` when it returned."""

    def __init__(self, kubeconfig: Path, namespace: str, *, threads: int = 8) -> None:
        # Its own connection pool, one connection per thread, retrying through outages.
        self.kube = Kube.connect(kubeconfig, pool_size=threads).through_outages()
        self.namespace = namespace
        self.started: dict[str, float] = {}
        self.created: dict[str, float] = {}
        self.errors: list[str] = []
        self._queue: queue.PriorityQueue[tuple[float, int, Obj | None]] = queue.PriorityQueue()
        self._seq = 0
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._work, name=f"storm-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()
        self.queued = 0

    def _put(self, due: float, body: Obj | None) -> None:
        with self._lock:
            self._seq += 1
            self._queue.put((due, self._seq, body))

    def add(self, bodies: Iterable[Obj], *, rate: float | None = None) -> list[str]:
        """Queue these requests; return their names."""
        names = []
        t0 = time.monotonic()
        for i, body in enumerate(bodies):
            self._put(t0 + i / rate if rate else t0, body)
            names.append(str(body["metadata"]["name"]))
        with self._lock:
            self.queued += len(names)
        return names

    def _work(self) -> None:
        while True:
            due, _, body = self._queue.get()
            if body is None:
                return
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            name = str(body["metadata"]["name"])
            with self._lock:
                self.started[name] = time.monotonic()
            try:
                self._create(body)
            except Exception as exc:
                with self._lock:
                    self.errors.append(f"{name}: {type(exc).__name__}: {exc}"[:500])
                continue
            with self._lock:
                self.created[name] = time.monotonic()

    def _create(self, body: Obj) -> None:
        try:
            self.kube.create(self.namespace, body)
        except ApiError as exc:
            if exc.status != 409:  # 409: created before a connection dropped
                raise

    def done(self, names: Iterable[str]) -> int:
        with self._lock:
            return sum(1 for n in names if n in self.created)

    def wait(self, timeout: float = 120.0) -> None:
        """Until every queued request was created (or failed for good)."""
        wait_for(
            lambda: len(self.created) + len(self.errors) >= self.queued,
            timeout,
            what=f"{self.queued} requests to be created",
            retry_on=OUTAGE,
        )
        assert not self.errors, f"creating requests failed: {self.errors[:5]}"

    def close(self) -> None:
        for _ in self._threads:
            self._put(float("inf"), None)
        for thread in self._threads:
            thread.join(timeout=30)
        self.kube.close()


@dataclass
class Tally:
    """How many faults a test injected, by kind (reported in the test's properties)."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, n: int = 1) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n

    def report(self, record_property: Callable[[str, object], None]) -> None:
        record_property("faults", json.dumps(self.counts, sort_keys=True))
        print(f"faults injected: {json.dumps(self.counts, sort_keys=True)}")
