"""Helpers for the end-to-end tests: the operator as a subprocess, objects from dicts, polling,
and :class:`RequestRecorder`, which records every state of every request (also through API
server and etcd restarts, for the fault tests).

Everything here talks to a real API server through the ``kubernetes`` client
(``CustomObjectsApi`` / ``CoreV1Api`` on the suite's ``ApiClient``). Nothing here sleeps to
assert: :func:`kube.wait_for` polls until a predicate holds and, when it does not in time,
fails with a compact dump of the objects it last observed.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import pytest
from kubernetes import client as k8s

from support import builders
from support.kube import GROUP, PLURALS, VERSION, make_api_client, wait_for

MERGE_PATCH = "application/merge-patch+json"

#: The log line the operator prints once its initial LIST is done and placement runs.
STARTED_LINE = "hostpool-operator started"
#: kopf's log line once every task and the cleanup handler are done, after SIGTERM.
SHUTDOWN_LINE = "Root tasks are stopped"

#: Further logs a fixture attaches to a failed test's report (e.g. host agents'): pairs of a
#: section title and a function reading the log. Defined here, not in conftest.py: pytest
#: imports conftest under its own name, and a key must be one object for every importer.
EXTRA_LOGS = pytest.StashKey[list[tuple[str, Callable[[], str]]]]()

#: Threads still waiting for stopped operators to exit (joined at the end of the session).
_REAPERS: list[threading.Thread] = []


def join_reapers(timeout: float = 30.0) -> None:
    """Wait for every operator stopped with ``wait=False`` to have exited."""
    deadline = time.monotonic() + timeout
    while _REAPERS:
        _REAPERS.pop().join(timeout=max(0.0, deadline - time.monotonic()))


T = TypeVar("T")
Obj = dict[str, Any]

#: What a predicate on the ``kubernetes`` client may raise while the objects it looks at are
#: not there (yet): for :func:`kube.wait_for`'s ``retry_on``.
NOT_YET = (k8s.ApiException, AssertionError, KeyError, TypeError)


class KubeLike(Protocol):
    """What the e2e tests use of the suite's ``kube`` fixture (``tests/kube.py:Kube``)."""

    kubeconfig: Path
    api_client: Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# ---------------------------------------------------------------------------------------
# small accessors


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


# ---------------------------------------------------------------------------------------
# the operator as a subprocess


class OperatorProcess:
    """``python -m hostpool_operator run`` for one namespace, logging to a file.

    :meth:`start` waits for :data:`STARTED_LINE`; :meth:`stop` sends SIGTERM, then SIGKILL
    after ``kill_after`` seconds; :meth:`restart` does both. Every run appends to the same log.
    """

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        log_path: Path,
        *,
        status_interval: float = 0.2,
        extra_args: Iterable[str] = (),
        metrics_port: int | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.log_path = log_path
        self.status_interval = status_interval
        self.extra_args = list(extra_args)
        self.metrics_port = metrics_port
        if metrics_port is not None:
            self.extra_args += ["--metrics-address", f"127.0.0.1:{metrics_port}"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.exit_codes: list[int] = []

    @property
    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "hostpool_operator",
            "run",
            "--namespace",
            self.namespace,
            "--status-interval",
            str(self.status_interval),
            "--log-format",
            "text",
            "-v",
            *self.extra_args,
        ]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def start(self, timeout: float = 30.0) -> None:
        if self.running:
            raise RuntimeError("the operator is already running")
        offset = self._log_size()
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("ab") as log:
            self.starts += 1
            log.write(f"==== e2e: operator start #{self.starts}: {self.command}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while STARTED_LINE not in self._log_since(offset):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.exit_codes.append(code)
                self.proc = None
                pytest.fail(
                    f"the operator exited with code {code} before it started:\n"
                    + self.log_tail(80),
                    pytrace=False,
                )
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(
                    f"the operator did not log {STARTED_LINE!r} within {timeout:.0f}s:\n"
                    + self.log_tail(80),
                    pytrace=False,
                )
            time.sleep(0.05)

    def stop(self, kill_after: float = 10.0, *, wait: bool = True) -> int | None:
        """SIGTERM, then SIGKILL after ``kill_after`` s. Returns the exit code (None if it was
        not running, or when not waiting).

        With ``wait=False`` it returns as soon as the operator has finished its shutdown
        (kopf logs :data:`SHUTDOWN_LINE` after the cleanup handler; kopf then idles a few
        seconds for stray tasks before exiting), and a background thread reaps the process
        (SIGKILL at ``kill_after``): teardown need not wait for that idle time."""
        proc = self.proc
        if proc is None:
            return None
        self.proc = None
        offset = self._log_size()
        deadline = time.monotonic() + kill_after
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        if not wait:
            while proc.poll() is None and time.monotonic() < deadline:
                if SHUTDOWN_LINE in self._log_since(offset):
                    break
                time.sleep(0.05)
            if proc.poll() is None:
                reaper = threading.Thread(
                    target=self._reap, args=(proc, deadline), name="operator-reaper", daemon=True
                )
                reaper.start()
                _REAPERS.append(reaper)
                return None
        return self._reap(proc, deadline)

    def _reap(self, proc: subprocess.Popen[bytes], deadline: float) -> int:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        code = proc.returncode
        self.exit_codes.append(code)
        with self.log_path.open("ab") as log:
            log.write(f"==== e2e: operator stopped, exit code {code}\n".encode())
        return code

    def restart(self, timeout: float = 30.0) -> None:
        self.stop()
        self.start(timeout=timeout)

    def metrics(self) -> str:
        """The operator's Prometheus metrics, as text."""
        assert self.metrics_port is not None, "started without --metrics-address"
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text: str = answer.read().decode()
            return text

    def log_text(self) -> str:
        return self._log_since(0)

    def log_tail(self, lines: int = 80) -> str:
        text = self.log_text().splitlines()
        status_line = (
            "(running)"
            if self.running
            else f"(not running; exit codes so far: {self.exit_codes or 'none'})"
        )
        return "\n".join([*text[-lines:], f"==== e2e: operator {status_line}"])

    def problems(self) -> list[str]:
        """Log lines that mean the operator hit an unexpected error."""
        markers = ("Traceback (most recent call last)", " ERROR ", "CRITICAL")
        return [line for line in self.log_text().splitlines() if any(m in line for m in markers)]


# ---------------------------------------------------------------------------------------
# objects in the test namespace


def _summary(kind: str, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    st = status(obj)
    conds = " ".join(
        f"{c.get('type')}={c.get('status')}/{c.get('reason')}"
        for c in st.get("conditions") or []
        if isinstance(c, Mapping)
    )
    name = meta.get("name")
    if kind == "HostPool":
        keep = {k: st.get(k) for k in ("observedGeneration", "hosts", "sessions", "capacity")}
        return (
            f"  pool {name} gen={meta.get('generation')} spec={json.dumps(spec)} "
            f"status={json.dumps(keep)} pending={st.get('pendingRequests')} [{conds}]"
        )
    if kind == "SessionHost":
        return (
            f"  host {name} drain={spec.get('drainMode', False)} "
            f"sessions={json.dumps(st.get('sessions'))} loadIndex={st.get('loadIndex')} "
            f"bucket={st.get('bucket')} metrics={json.dumps(st.get('metrics'))} [{conds}]"
        )
    if kind == "ScalingPlan":
        pools = [ref.get("name") for ref in spec.get("hostPoolRefs") or []]
        return (
            f"  plan {name} gen={meta.get('generation')} zone={spec.get('timeZone')} "
            f"pools={pools} schedule={st.get('schedule')} phase={st.get('phase')} "
            f"status.pools={json.dumps(st.get('pools'))} [{conds}]"
        )
    return (
        f"  request {name} user={spec.get('user')} pool={(spec.get('poolRef') or {}).get('name')}"
        f" phase={st.get('phase')} host={st.get('host')} reason={st.get('reason')} "
        f"state={st.get('sessionState')} [{conds}]"
    )


class Cluster:
    """The test namespace's HostPools, SessionHosts and SessionRequests, as plain dicts."""

    def __init__(self, kube: KubeLike, namespace: str, api_client: Any | None = None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.api_client = api_client if api_client is not None else kube.api_client
        self.custom = k8s.CustomObjectsApi(self.api_client)
        self.core = k8s.CoreV1Api(self.api_client)

    # -- generic ----------------------------------------------------------------------------

    def create(self, kind: str, name: str, spec: Mapping[str, Any]) -> Obj:
        return self.create_body(builders.manifest(kind, name, dict(spec), namespace=self.namespace))

    def create_body(self, body: Obj) -> Obj:
        """Create an object from a whole manifest (see :mod:`builders`)."""
        plural = PLURALS[body["kind"]]
        return cast(
            Obj,
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, plural, body
            ),
        )

    def get(self, kind: str, name: str) -> Obj:
        plural = PLURALS[kind]
        return cast(
            Obj,
            self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name),
        )

    def objects(self, kind: str) -> dict[str, Obj]:
        """Every object of the kind in the namespace, by name."""
        listing = cast(
            Obj,
            self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURALS[kind]
            ),
        )
        return {item["metadata"]["name"]: item for item in listing.get("items", [])}

    def patch(self, kind: str, name: str, patch: Mapping[str, Any]) -> Obj:
        """Merge-patch the object (spec, metadata)."""
        result = self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURALS[kind], name, dict(patch),
            _content_type=MERGE_PATCH,
        )  # fmt: skip
        return cast(Obj, result)

    def patch_status(self, kind: str, name: str, status_patch: Mapping[str, Any]) -> Obj:
        """Merge-patch ``status`` through the status subresource (what an agent does)."""
        result = self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.namespace, PLURALS[kind], name, {"status": dict(status_patch)},
            _content_type=MERGE_PATCH,
        )  # fmt: skip
        return cast(Obj, result)

    def delete(self, kind: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURALS[kind], name
        )

    # -- the project's kinds ------------------------------------------------------------------

    def create_pool(self, name: str, lb_type: str, limit: int | None = None, **spec: Any) -> Obj:
        return self.create_body(
            builders.pool(name, lb_type, limit, namespace=self.namespace, **spec)
        )

    def create_host(self, name: str, pool: str, **spec: Any) -> Obj:
        return self.create_body(builders.host(name, pool, namespace=self.namespace, **spec))

    def create_hosts(self, names: Iterable[str], pool: str, **spec: Any) -> list[Obj]:
        """Created one after another, so query order (creationTimestamp, name) is name order
        when the names sort in creation order."""
        return [self.create_host(n, pool, **spec) for n in names]

    def setup_pool(
        self,
        name: str,
        lb_type: str,
        limit: int | None = None,
        *,
        hosts: Iterable[str] = (),
        host_spec: Mapping[str, Any] | None = None,
        **spec: Any,
    ) -> Obj:
        """Create a pool and its hosts (in name order), then wait until the operator reports
        them (each host has an Available condition, the pool counts them): requests created
        afterwards meet a pool the operator knows."""
        self.create_pool(name, lb_type, limit, **spec)
        names = list(hosts)
        for host in names:
            self.create_host(host, name, **dict(host_spec or {}))
        self.wait_operator_knows(name, names)
        return self.pool(name)

    def wait_operator_knows(self, pool: str, hosts: Iterable[str], timeout: float = 30.0) -> None:
        """Wait until the operator has written status for the pool and for these hosts."""
        names = list(hosts)

        def check() -> bool:
            pool_obj = self.pool(pool)
            if status(pool_obj).get("observedGeneration") != pool_obj["metadata"]["generation"]:
                return False
            if (status(pool_obj).get("hosts") or {}).get("total") != len(names):
                return False
            objs = self.hosts()
            return all(
                condition(objs[h], "Available") is not None
                and status(objs[h]).get("observedGeneration") == objs[h]["metadata"]["generation"]
                for h in names
            )

        self.wait(check, f"the operator to report pool {pool} and hosts {names}", timeout)

    def create_request(self, name: str, pool: str, user: str, **spec: Any) -> Obj:
        return self.create_body(
            builders.request(name, pool, user, namespace=self.namespace, **spec)
        )

    def create_requests_concurrently(
        self, items: Iterable[tuple[str, str, str]], *, threads: int = 16
    ) -> None:
        """Create (name, pool, user) requests from ``threads`` threads at once."""
        work = list(items)
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for future in [pool.submit(self.create_request, *item) for item in work]:
                future.result()

    def pool(self, name: str) -> Obj:
        return self.get("HostPool", name)

    def host(self, name: str) -> Obj:
        return self.get("SessionHost", name)

    def request(self, name: str) -> Obj:
        return self.get("SessionRequest", name)

    def hosts(self) -> dict[str, Obj]:
        return self.objects("SessionHost")

    def requests(self) -> dict[str, Obj]:
        return self.objects("SessionRequest")

    def set_drain(self, host: str, drain: bool) -> Obj:
        return self.patch("SessionHost", host, {"spec": {"drainMode": drain}})

    def set_limit(self, pool: str, limit: int) -> Obj:
        return self.patch("HostPool", pool, {"spec": {"loadBalancer": {"maxSessionLimit": limit}}})

    def events_for(self, name: str) -> list[Any]:
        """core/v1 Events in the namespace about the object with this name."""
        listing = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name}"
        )
        return list(listing.items)

    # -- waiting ------------------------------------------------------------------------------

    def describe(self) -> str:
        """Every pool, host and request of the namespace, one line each."""
        lines: list[str] = []
        for kind in PLURALS:
            items = self.objects(kind)
            lines.append(f"{kind} ({len(items)}):")
            shown = sorted(items)
            for name in shown[:80]:
                lines.append(_summary(kind, items[name]))
            if len(shown) > 80:
                lines.append(f"  ... and {len(shown) - 80} more")
        return "\n".join(lines)

    def wait(self, predicate: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
        return wait_for(
            predicate, timeout, what=what, interval=0.1, show=self.describe, retry_on=NOT_YET
        )

    def wait_request(
        self,
        name: str,
        *,
        phase_: str,
        reason: str | None = None,
        host: str | None = None,
        timeout: float = 30.0,
    ) -> Obj:
        """Wait until the request has this phase (and reason, and host); return it."""

        def check() -> Obj | None:
            obj = self.request(name)
            st = status(obj)
            if st.get("phase") != phase_:
                return None
            if reason is not None and st.get("reason") != reason:
                return None
            if host is not None and st.get("host") != host:
                return None
            return obj

        wanted = ", ".join(
            f"{k}={v}" for k, v in (("phase", phase_), ("reason", reason), ("host", host)) if v
        )
        return self.wait(check, f"request {name} to have {wanted}", timeout)

    def wait_assigned(self, names: Iterable[str], timeout: float = 30.0) -> dict[str, Obj]:
        """Wait until every named request is Assigned; return all requests by name."""
        wanted = set(names)

        def check() -> dict[str, Obj] | None:
            items = self.requests()
            done = {n for n in wanted if n in items and phase(items[n]) == "Assigned"}
            return items if done == wanted else None

        return self.wait(check, f"{len(wanted)} requests to be Assigned", timeout)

    def wait_host_sessions(self, expected: Mapping[str, int], timeout: float = 30.0) -> None:
        """Wait until each named host's status.sessions.total has the expected value."""

        def check() -> bool:
            hosts = self.hosts()
            return all(sessions_total(hosts[n]) == v for n, v in expected.items())

        self.wait(check, f"host session counts {dict(expected)}", timeout)

    def wait_pool(
        self, name: str, check: Callable[[Obj], bool], what: str, timeout: float = 30.0
    ) -> Obj:
        def probe() -> Obj | None:
            obj = self.pool(name)
            return obj if check(obj) else None

        return self.wait(probe, f"pool {name}: {what}", timeout)

    def wait_host(
        self, name: str, check: Callable[[Obj], bool], what: str, timeout: float = 30.0
    ) -> Obj:
        def probe() -> Obj | None:
            obj = self.host(name)
            return obj if check(obj) else None

        return self.wait(probe, f"host {name}: {what}", timeout)


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


# ---------------------------------------------------------------------------------------
# recording every state of every request

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
        self._client = make_api_client(kubeconfig, pool_size=4)
        self._api = k8s.CustomObjectsApi(self._client)
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
        self._client.close()

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
                    listing = cast(
                        Obj,
                        self._api.list_namespaced_custom_object(
                            GROUP,
                            VERSION,
                            self.namespace,
                            PLURALS["SessionRequest"],
                            _request_timeout=30,
                        ),
                    )
                    names = set()
                    for item in listing.get("items", []):
                        names.add(item["metadata"]["name"])
                        self._record("ADDED", item)
                    with self._lock:
                        for gone in set(self.latest) - names:
                            self.latest.pop(gone)
                    version = str(listing["metadata"]["resourceVersion"])
                    self._ready.set()
                for event in self._events(version):
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
            except Exception as exc:
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.2)

    def _events(self, version: str) -> Iterator[dict[str, Any]]:
        """One short watch (the server closes it after two seconds), decoded line by line."""
        response: Any = self._api.list_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            PLURALS["SessionRequest"],
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=2,
            _request_timeout=(5, 15),
            _preload_content=False,
        )
        try:
            buffer = b""
            for chunk in response.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()

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
