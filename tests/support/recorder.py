"""Every state of every SessionRequest of a namespace, as a watch saw them
(:class:`RequestRecorder`), also through API server and etcd restarts: what the placement
and fault tests judge "never moved, assigned once" by.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.conditions import Obj, phase, status
from support.kube import ApiError, Kube, resource_path

#: (phase, host, assignedAt) of a SessionRequest.
State = tuple[str | None, str | None, str | None]


@dataclass
class RequestHistory:
    """The (phase, host, assignedAt) states a request went through, as a watch saw them."""

    uid: str = ""
    states: list[State] = field(default_factory=list)

    def record(self, obj: Mapping[str, Any]) -> None:
        st = status(obj)
        state = (st.get("phase"), st.get("host"), st.get("assignedAt"))
        if not self.states or self.states[-1] != state:
            self.states.append(state)

    def hosts(self, *, assigned_only: bool = False) -> list[str]:
        """Distinct non-empty hosts in order of appearance (only those the request was seen
        Assigned to, with ``assigned_only``: a foreign writer may set a host on a Pending
        request)."""
        seen: list[str] = []
        for ph, host, _ in self.states:
            if host and host not in seen and (ph == "Assigned" or not assigned_only):
                seen.append(host)
        return seen

    def assignments(self) -> int:
        """How many times the request entered phase Assigned (a new assignedAt counts as a
        new entry)."""
        count = 0
        previous: tuple[str | None, str | None] = (None, None)
        for ph, _, at in self.states:
            if ph == "Assigned" and previous != ("Assigned", at):
                count += 1
            previous = (ph, at)
        return count

    def problems(
        self, name: str, *, may_fail: bool = False, assigned_only: bool = False
    ) -> list[str]:
        """What is wrong with this history: the host changed (see :meth:`hosts` for
        ``assigned_only``), the request was assigned more than once, or it left Assigned
        again (to Failed is allowed with ``may_fail``: its host was deleted)."""
        out: list[str] = []
        hosts = self.hosts(assigned_only=assigned_only)
        if len(hosts) > 1:
            out.append(f"{name}: host changed {hosts}: {self.states}")
        if self.assignments() > 1:
            out.append(f"{name}: assigned {self.assignments()} times: {self.states}")
        phases = [ph for ph, _, _ in self.states]
        if "Assigned" in phases and any(
            p != "Assigned" and not (p == "Failed" and may_fail)
            for p in phases[phases.index("Assigned") + 1 :]
        ):
            out.append(f"{name}: left Assigned: {self.states}")
        return out


class RequestRecorder:
    """Watches the namespace's SessionRequests in a thread and keeps every state seen.

    Use as a context manager. Resumes from the last resourceVersion after a dropped
    connection, lists again on 410 Gone (or when the API server forgot the version after a
    restart), and never gives up while it runs: it keeps going through API server and etcd
    restarts; ``errors`` counts the interruptions it rode out, ``relists`` the lists again.
    ``objects()`` are the requests as last seen (deleted ones leave), ``snapshot()`` every
    request's history."""

    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        # A Kube of its own: its watch holds a connection while the test's calls go on.
        self._kube = Kube.connect(kubeconfig, pool_size=4)
        self.namespace = namespace
        self.histories: dict[str, RequestHistory] = {}
        self.latest: dict[str, Obj] = {}
        self.errors = 0
        self.last_error = ""
        self.relists = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="request-recorder", daemon=True)

    def __enter__(self) -> RequestRecorder:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"the request watch did not start: {self.last_error}")
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=20)
        self._kube.close()

    def _record(self, event: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        with self._lock:
            if event == "DELETED":
                self.latest.pop(name, None)
                return
            history = self.histories.setdefault(name, RequestHistory(uid=str(meta.get("uid"))))
            history.record(obj)
            self.latest[name] = dict(obj)

    def _run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listing = self._kube.call(
                        "GET", resource_path("SessionRequest", self.namespace), timeout=30
                    )
                    names = set()
                    for item in listing.get("items") or []:
                        names.add(item["metadata"]["name"])
                        self._record("ADDED", item)
                    with self._lock:
                        for gone in set(self.latest) - names:
                            self.latest.pop(gone)
                    version = str(listing["metadata"]["resourceVersion"])
                    self._ready.set()
                for event in self._kube.watch("SessionRequest", self.namespace, version):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        version = None  # 410 Gone: list again
                        self.relists += 1
                        break
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        version = str(rv)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._record(str(event["type"]), obj)
                    if self._stop.is_set():
                        return
            except ApiError as exc:
                if exc.status != 410:
                    self._failed(exc)
                    continue
                version = None  # the API server forgot that version (after a restart)
                self.relists += 1
            except Exception as exc:
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2)

    def snapshot(self) -> dict[str, RequestHistory]:
        with self._lock:
            return {n: RequestHistory(h.uid, list(h.states)) for n, h in self.histories.items()}

    def objects(self) -> dict[str, Obj]:
        with self._lock:
            return dict(self.latest)

    def count(self, names: Iterable[str], phase_: str = "Assigned") -> int:
        with self._lock:
            return sum(1 for n in names if n in self.latest and phase(self.latest[n]) == phase_)

    def problems(self, *, failed_ok: Iterable[str] = ()) -> list[str]:
        """Requests whose host changed (in any phase), that were assigned more than once, or
        that left Assigned (except to Failed for the names in ``failed_ok``)."""
        allowed = set(failed_ok)
        out: list[str] = []
        for name, history in sorted(self.snapshot().items()):
            out += history.problems(name, may_fail=name in allowed)
        return out
