"""Helpers for the fault-injection and hostile-input tests (``test_faults*.py``,
``test_hostile_input.py``).

* :class:`FaultOperator`: the operator subprocess of :mod:`e2e.helpers` that can also be killed
  with SIGKILL, started as a leader-election standby, and measured (VmRSS / VmHWM).
* :func:`install_identity`: the chart's least-privilege ServiceAccount and RBAC for one
  namespace, and a kubeconfig that holds only its token (the approach of
  ``test_rbac_live.py``, over the raw API instead of kubectl).
* :data:`OUTAGE`: what a wait (:func:`kube.wait_for`) takes for "not yet" while the API
  server or etcd restarts; :func:`retry` calls again through such outages.
* :class:`Storm`: SessionRequests created from worker threads at a set pace, retrying through
  outages (an AlreadyExists after a dropped connection counts as created).
* :func:`invariant_problems`: the checks every fault test ends with.

Every state of every request is recorded by :class:`e2e.helpers.RequestRecorder`. Nothing here
sleeps to assert: waits poll a predicate with a timeout.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import queue
import re
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
import urllib3
import yaml
from kubernetes import client as k8s

from support.controlplane import ensure_tools
from support.helpers import (
    STARTED_LINE,
    Obj,
    OperatorProcess,
    RequestHistory,
    host_of,
    per_host_users,
    status,
)
from support.kube import (
    GROUP,
    PLURALS,
    REPO_ROOT,
    VERSION,
    Kube,
    make_api_client,
    unique_name,
    wait_for,
)

T = TypeVar("T")

#: What a leader-election standby logs once, while it waits for the Lease.
STANDBY_LINE = "waiting as a standby"
#: What an instance logs when it holds the Lease.
LEADER_LINE = "leader election:"
CHART_DIR = REPO_ROOT / "charts" / "hostpool-operator"
RBAC_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}

# ---------------------------------------------------------------------------------------
# transient API errors


def transient(exc: BaseException) -> bool:
    """An error a client should retry while the API server or etcd restarts."""
    if isinstance(exc, k8s.ApiException):
        return exc.status in (None, 0, 408, 429, 500, 502, 503, 504)
    return isinstance(exc, urllib3.exceptions.HTTPError | OSError)


def retry(
    fn: Callable[[], T], *, timeout: float = 90.0, on_retry: Callable[[], None] | None = None
) -> T:
    """``fn()``, retried every 0.2 s on :func:`transient` errors for up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except Exception as exc:
            if not transient(exc) or time.monotonic() > deadline:
                raise
        if on_retry is not None:
            on_retry()
        time.sleep(0.2)


#: What a predicate may raise while the API server or etcd restarts (see :func:`transient`),
#: or while the objects are not there yet: for :func:`kube.wait_for`'s ``retry_on``.
OUTAGE = (k8s.ApiException, KeyError, urllib3.exceptions.HTTPError, OSError)


# ---------------------------------------------------------------------------------------
# the operator


class FaultOperator(OperatorProcess):
    """The operator subprocess, plus SIGKILL, standby starts and memory readings.

    ``kubeconfig`` is the identity it runs as (see :func:`install_identity`)."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        log_path: Path,
        *,
        status_interval: float = 0.2,
        extra_args: Iterable[str] = (),
    ) -> None:
        super().__init__(
            kubeconfig, namespace, log_path, status_interval=status_interval, extra_args=extra_args
        )
        self.kills = 0
        self.peak_rss_kb = 0

    def launch(self) -> int:
        """Start the process without waiting; return the log offset its output starts at."""
        if self.running:
            raise RuntimeError("the operator is already running")
        offset = self._log_size()
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("KUBERNETES_SERVICE_HOST", None)  # never an in-cluster login
        with self.log_path.open("ab") as log:
            self.starts += 1
            log.write(f"==== faults: operator start #{self.starts}: {self.command}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        return offset

    def wait_line(self, line: str, offset: int, timeout: float) -> float:
        """Wait until ``line`` appears in the log after ``offset``; return the seconds waited.
        Fails the test if the process exits first."""
        t0 = time.monotonic()
        while line not in self._log_since(offset):
            proc = self.proc
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                pytest.fail(
                    f"the operator exited ({code}) before logging {line!r}:\n{self.log_tail(60)}",
                    pytrace=False,
                )
            if time.monotonic() - t0 > timeout:
                pytest.fail(
                    f"the operator did not log {line!r} within {timeout:.0f}s:\n"
                    + self.log_tail(60),
                    pytrace=False,
                )
            time.sleep(0.05)
        return time.monotonic() - t0

    def start(self, timeout: float = 60.0) -> None:
        self.wait_line(STARTED_LINE, self.launch(), timeout)

    def kill(self) -> None:
        """kill -9: no clean-up handler runs, the Lease is not released."""
        proc = self.proc
        if proc is None:
            raise RuntimeError("the operator is not running")
        self.sample_memory()
        self.proc = None
        proc.send_signal(signal.SIGKILL)
        code = proc.wait(timeout=30)
        self.exit_codes.append(code)
        self.kills += 1
        with self.log_path.open("ab") as log:
            log.write(f"==== faults: operator killed with SIGKILL (exit code {code})\n".encode())

    def memory_kb(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) of the running process in kB, from /proc/<pid>/status."""
        proc = self.proc
        if proc is None:
            raise RuntimeError("the operator is not running")
        values: dict[str, int] = {}
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
        return values["VmRSS"], values["VmHWM"]

    def sample_memory(self) -> int:
        """Remember the peak resident set size seen so far (kB); return the current one."""
        try:
            rss, hwm = self.memory_kb()
        except (RuntimeError, OSError, KeyError):
            return 0
        self.peak_rss_kb = max(self.peak_rss_kb, rss, hwm)
        return rss


# ---------------------------------------------------------------------------------------
# least privilege: the chart's ServiceAccount


@dataclass
class Identity:
    """The chart's ServiceAccount for one namespace and a kubeconfig with only its token."""

    kubeconfig: Path
    token: str
    username: str
    cluster_scoped: list[str] = field(default_factory=list)  # API paths to delete afterwards

    def secrets(self) -> list[str]:
        """Strings that must never appear in a log: the token and its signature part."""
        parts = self.token.split(".")
        return [self.token, *([parts[-1]] if len(parts) == 3 and len(parts[-1]) >= 16 else [])]


def _rendered_rbac(kube: Kube, release: str, namespace: str) -> list[Obj]:
    bin_dir = kube.bin_dir if kube.bin_dir is not None else ensure_tools(REPO_ROOT)
    argv = [
        str(bin_dir / "helm"),
        "template",
        release,
        str(CHART_DIR),
        "--namespace",
        namespace,
        "--set-json",
        f"watchNamespace={json.dumps(namespace)}",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"helm template failed: {proc.stderr}")
    docs = [d for d in yaml.safe_load_all(proc.stdout) if isinstance(d, dict)]
    return [d for d in docs if d.get("kind") in RBAC_PATHS]


def install_identity(kube: Kube, namespace: str, directory: Path) -> Identity:
    """Render the chart for this namespace (``watchNamespace``, release in the same namespace,
    so the leader-election Lease lives there too), create its ServiceAccount and RBAC objects
    with the admin credentials, and ask the TokenRequest API for a one-hour token."""
    release = unique_name("flt", max_length=16)
    identity = Identity(kubeconfig=directory / f"{release}.kubeconfig", token="", username="")
    sa_name = ""
    for doc in _rendered_rbac(kube, release, namespace):
        base = RBAC_PATHS[doc["kind"]].format(ns=namespace)
        kube.call("POST", base, body=doc)
        if doc["kind"].startswith("Cluster"):
            identity.cluster_scoped.append(f"{base}/{doc['metadata']['name']}")
        if doc["kind"] == "ServiceAccount":
            sa_name = doc["metadata"]["name"]
    assert sa_name, "the chart rendered no ServiceAccount"
    answer = kube.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa_name}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    identity.token = str(answer["status"]["token"])
    identity.username = f"system:serviceaccount:{namespace}:{sa_name}"
    admin = yaml.safe_load(kube.kubeconfig.read_text())
    context_name = admin["current-context"]
    context = next(c["context"] for c in admin["contexts"] if c["name"] == context_name)
    cluster = dict(next(c["cluster"] for c in admin["clusters"] if c["name"] == context["cluster"]))
    ca = cluster.get("certificate-authority")
    if ca and not Path(ca).is_absolute():
        cluster["certificate-authority"] = str((kube.kubeconfig.parent / ca).resolve())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "target", "cluster": cluster}],
        "users": [{"name": "operator", "user": {"token": identity.token}}],
        "contexts": [
            {
                "name": "operator",
                "context": {"cluster": "target", "user": "operator", "namespace": namespace},
            }
        ],
        "current-context": "operator",
    }
    identity.kubeconfig.write_text(yaml.safe_dump(config))
    identity.kubeconfig.chmod(0o600)
    return identity


def remove_identity(kube: Kube, identity: Identity) -> None:
    """Delete the cluster-scoped RBAC objects (the namespace takes the rest with it)."""
    for path in identity.cluster_scoped:

        def delete(path: str = path) -> None:
            kube.request("DELETE", path)

        retry(delete)


def leaked_secrets(identity: Identity, text: str) -> list[str]:
    """Which of the identity's secrets appear in ``text`` (shown shortened)."""
    return [f"{s[:6]}...({len(s)} chars)" for s in identity.secrets() if s in text]


# ---------------------------------------------------------------------------------------
# objects


class Api:
    """Typed calls on a ``CustomObjectsApi`` of its own (thread-safe connection pool), each
    retried through outages."""

    def __init__(self, kubeconfig: Path, namespace: str, *, pool_size: int = 16) -> None:
        self.client = make_api_client(kubeconfig, pool_size=pool_size)
        self.custom = k8s.CustomObjectsApi(self.client)
        self.namespace = namespace
        self.retries = 0  # calls repeated because of a transient error (an outage)

    def close(self) -> None:
        self.client.close()

    def _retried(self) -> None:
        self.retries += 1

    def list(self, kind: str) -> dict[str, Obj]:
        def once() -> dict[str, Obj]:
            listing = cast(
                Obj,
                self.custom.list_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURALS[kind], _request_timeout=30
                ),
            )
            return {i["metadata"]["name"]: i for i in listing.get("items", [])}

        return retry(once)

    def get(self, kind: str, name: str) -> Obj:
        return cast(
            Obj,
            retry(
                lambda: self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURALS[kind], name, _request_timeout=30
                )
            ),
        )

    def create(self, body: Obj) -> Obj | None:
        """Create; None when it already exists (e.g. created before a dropped connection)."""

        def once() -> Obj | None:
            try:
                return cast(
                    Obj,
                    self.custom.create_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        self.namespace,
                        PLURALS[body["kind"]],
                        body,
                        _request_timeout=30,
                    ),
                )
            except k8s.ApiException as exc:
                if exc.status == 409:
                    return None
                raise

        return retry(once, on_retry=self._retried)

    def patch(self, kind: str, name: str, patch: Mapping[str, Any]) -> Obj:
        return cast(
            Obj,
            retry(
                lambda: self.custom.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURALS[kind],
                    name,
                    dict(patch),
                    _content_type="application/merge-patch+json",
                    _request_timeout=30,
                )
            ),
        )

    def patch_status(
        self,
        kind: str,
        name: str,
        body: Any,
        *,
        content_type: str = "application/merge-patch+json",
    ) -> Obj:
        """Patch the status subresource once (no retry: callers judge conflicts)."""
        return cast(
            Obj,
            self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                self.namespace,
                PLURALS[kind],
                name,
                body,
                _content_type=content_type,
                _request_timeout=30,
            ),
        )

    def delete(self, kind: str, name: str) -> None:
        def once() -> None:
            try:
                self.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURALS[kind], name, _request_timeout=30
                )
            except k8s.ApiException as exc:
                if exc.status != 404:
                    raise

        retry(once)


# ---------------------------------------------------------------------------------------
# a storm of requests


class Storm:
    """Creates SessionRequests from ``threads`` worker threads, each retried through outages.

    :meth:`add` queues bodies, optionally paced (``rate`` per second from now on); streams
    added at different times interleave by due time. ``started[name]`` is the monotonic time
    its create call began, ``created[name]`` when it returned."""

    def __init__(self, kubeconfig: Path, namespace: str, *, threads: int = 8) -> None:
        self.api = Api(kubeconfig, namespace, pool_size=threads)
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
                self.api.create(body)
            except Exception as exc:
                with self._lock:
                    self.errors.append(f"{name}: {type(exc).__name__}: {exc}"[:500])
                continue
            with self._lock:
                self.created[name] = time.monotonic()

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
        self.api.close()


# ---------------------------------------------------------------------------------------
# invariants


def invariant_problems(
    requests: Mapping[str, Obj],
    hosts: Mapping[str, Obj],
    histories: Mapping[str, RequestHistory],
    limits: Mapping[str, int],
    names: Iterable[str],
    *,
    reset: Iterable[str] = (),
    failed_ok: Iterable[str] = (),
) -> list[str]:
    """Everything wrong with the end state of a storm, as readable lines:

    * every named request exists and is Assigned, to a host of its own pool;
    * no host has more distinct users than its pool's ``limits[pool]`` (``limits`` names
      every pool whose hosts are checked);
    * by the recorded history: no request was ever seen Assigned to two hosts or assigned
      twice, and none left Assigned again. Requests in ``reset`` (a foreign writer reset
      their status) may be assigned again, once per reset, to any host; requests in
      ``failed_ok`` (their host was deleted) may go from Assigned to Failed.
    """
    problems: list[str] = []
    allowed = set(reset)
    may_fail = set(failed_ok)
    for name in names:
        obj = requests.get(name)
        if obj is None:
            problems.append(f"{name}: lost (no such request)")
            continue
        pool = str(((obj.get("spec") or {}).get("poolRef") or {}).get("name"))
        st = status(obj)
        if st.get("phase") != "Assigned":
            problems.append(
                f"{name}: phase {st.get('phase')} reason {st.get('reason')}: {st.get('message')}"
            )
            continue
        host = host_of(obj)
        host_obj = hosts.get(host or "")
        if host_obj is None:
            problems.append(f"{name}: assigned to {host!r}, which is no host")
        elif host_obj["spec"]["poolRef"]["name"] != pool:
            problems.append(f"{name}: pool {pool} but host {host} is in another pool")
    for host, users in sorted(per_host_users(requests).items()):
        host_obj = hosts.get(host)
        if host_obj is None:
            continue
        pool = host_obj["spec"]["poolRef"]["name"]
        if pool in limits and len(users) > limits[pool]:
            problems.append(f"host {host}: {len(users)} sessions, over the limit {limits[pool]}")
    for name, history in sorted(histories.items()):
        if name not in allowed:
            problems += history.problems(name, may_fail=name in may_fail, assigned_only=True)
    return problems


def describe(requests: Mapping[str, Obj], hosts: Mapping[str, Obj]) -> str:
    """A compact view of where sessions are and what waits, for failure messages."""
    counts = {h: len(u) for h, u in per_host_users(requests).items()}
    phases: dict[str, int] = {}
    for obj in requests.values():
        key = f"{status(obj).get('phase')}/{status(obj).get('reason')}"
        phases[key] = phases.get(key, 0) + 1
    host_lines = [
        f"  {h}: api={counts.get(h, 0)} status={(status(o).get('sessions') or {}).get('total')}"
        f" drain={o['spec'].get('drainMode', False)}"
        for h, o in sorted(hosts.items())
    ]
    return f"requests by phase/reason: {phases}\nhosts:\n" + "\n".join(host_lines)


def wait_host_status_matches(api: Api, timeout: float = 60.0) -> None:
    """Until every host's status.sessions.total equals the Assigned requests on it: the
    operator's own count agrees with the API (nothing lost from its ledger)."""

    def check() -> bool:
        requests = api.list("SessionRequest")
        hosts = api.list("SessionHost")
        counts = {h: len(u) for h, u in per_host_users(requests).items()}
        return all(
            (status(obj).get("sessions") or {}).get("total") == counts.get(name, 0)
            for name, obj in hosts.items()
        )

    wait_for(
        check,
        timeout,
        what="host status.sessions.total to match the Assigned requests",
        show=lambda: describe(api.list("SessionRequest"), api.list("SessionHost")),
        retry_on=OUTAGE,
    )


@dataclass
class Tally:
    """How many faults a test injected, by kind (reported in the test's properties)."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, n: int = 1) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n

    def report(self, record_property: Callable[[str, object], None]) -> None:
        record_property("faults", json.dumps(self.counts, sort_keys=True))
        print(f"faults injected: {json.dumps(self.counts, sort_keys=True)}")


# ---------------------------------------------------------------------------------------
# a proxy that cuts requests off (or holds them back)


@dataclass
class HeldRequest:
    """A request :class:`CuttingProxy` holds back until :meth:`CuttingProxy.release`."""

    line: str
    body: bytes
    release: asyncio.Event
    #: Set once the API server's answer has been passed on (or the exchange failed).
    answered: threading.Event = field(default_factory=threading.Event)
    #: The status line of that answer, e.g. ``HTTP/1.1 409 Conflict``.
    answer: str = ""


class CuttingProxy:
    """A TLS-terminating HTTP/1.1 proxy in front of the API server that cuts chosen requests.

    It forwards each request on a fresh upstream connection (``Connection: close``, so one
    request per client connection and responses, watches included, are piped until the
    server closes). A request whose method and path match :attr:`match` while :attr:`budget`
    is positive is cut: with ``mode == "before"`` the client connection is dropped without
    forwarding (the write never happens), with ``"after"`` the request is forwarded, the
    response read and thrown away, and then the connection is dropped (the write happened,
    the client never learns it). ``how`` is ``"close"`` (TLS close and FIN: aiohttp raises
    ServerDisconnectedError) or ``"reset"`` (RST: ConnectionResetError). Either way the
    client gets no response, as when the API server dies mid-request.

    Requests whose request line matches :meth:`hold`'s pattern wait in :attr:`held` until
    :meth:`release`: that orders two writes the operator has in flight at once.

    Its own self-signed certificate (openssl) is the CA of :meth:`kubeconfig`; the bearer
    token passes through, so it works in front of any cluster."""

    def __init__(self, admin_kubeconfig: Path, directory: Path) -> None:
        admin = yaml.safe_load(admin_kubeconfig.read_text())
        context_name = admin["current-context"]
        context = next(c["context"] for c in admin["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in admin["clusters"] if c["name"] == context["cluster"])
        self.upstream = urllib3.util.parse_url(cluster["server"])
        self.upstream_ssl = ssl.create_default_context()
        if cluster.get("certificate-authority-data"):
            self.upstream_ssl.load_verify_locations(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
            )
        elif cluster.get("certificate-authority"):
            ca = Path(cluster["certificate-authority"])
            if not ca.is_absolute():
                ca = admin_kubeconfig.parent / ca
            self.upstream_ssl.load_verify_locations(cafile=str(ca))
        if cluster.get("insecure-skip-tls-verify"):
            self.upstream_ssl.check_hostname = False
            self.upstream_ssl.verify_mode = ssl.CERT_NONE
        self.directory = directory
        self.cert = directory / "proxy.crt"
        key = directory / "proxy.key"
        proc = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(key), "-out", str(self.cert), "-days", "1",
             "-subj", "/CN=fault-proxy", "-addext", "subjectAltName=IP:127.0.0.1"],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"openssl failed: {proc.stderr}")
        self.server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.server_ssl.load_cert_chain(str(self.cert), str(key))
        self.match = re.compile(r"^PUT /apis/hostpool\.io/v1alpha1/namespaces/[^/]+/"
                                r"sessionrequests/[^/? ]+/status[? ]")  # fmt: skip
        self.mode = "before"
        self.how = "close"
        self.budget = 0
        self.cut: list[str] = []
        self.hold_match: re.Pattern[str] | None = None
        self.held: list[HeldRequest] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(timeout=30)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.server_ssl)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def arm(self, mode: str, budget: int, how: str = "close") -> None:
        """Cut the next ``budget`` matching requests (``mode``: "before" or "after"; ``how``:
        "close" or "reset")."""
        with self._lock:
            self.mode, self.budget, self.how = mode, budget, how

    def hold(self, pattern: str | None) -> None:
        """Hold back the requests whose request line matches ``pattern`` from now on (None:
        stop holding new ones; those held stay held until released)."""
        with self._lock:
            self.hold_match = re.compile(pattern) if pattern else None

    def release(self, held: HeldRequest) -> None:
        """Forward a held request."""
        self._loop.call_soon_threadsafe(held.release.set)

    def _hold(self, request_line: str, body: bytes) -> HeldRequest | None:
        with self._lock:
            if self.hold_match is None or not self.hold_match.search(request_line):
                return None
            held = HeldRequest(request_line, body, asyncio.Event())
            self.held.append(held)
            return held

    async def _cut(self, writer: asyncio.StreamWriter) -> None:
        if self.how == "reset":
            writer.transport.abort()
            return
        writer.close()
        with contextlib.suppress(ConnectionError, OSError, ssl.SSLError):
            await writer.wait_closed()

    def _take(self, request_line: str) -> str | None:
        with self._lock:
            if self.budget > 0 and self.match.search(request_line):
                self.budget -= 1
                self.cut.append(request_line)
                return self.mode
        return None

    def kubeconfig(self, token: str, path: Path, namespace: str) -> Path:
        ca = base64.b64encode(self.cert.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "proxy",
                    "cluster": {
                        "server": f"https://127.0.0.1:{self.port}",
                        "certificate-authority-data": ca,
                    },
                }
            ],
            "users": [{"name": "operator", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "proxy",
                    "context": {"cluster": "proxy", "user": "operator", "namespace": namespace},
                }
            ],
            "current-context": "proxy",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        held: HeldRequest | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            request_line = lines[0]
            headers = [h for h in lines[1:] if h]
            length = 0
            for h in headers:
                name, _, value = h.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            body = await reader.readexactly(length) if length else b""
            held = self._hold(request_line, body)
            if held is not None:
                await held.release.wait()
            cut = self._take(request_line)
            if cut == "before":
                await self._cut(writer)
                return
            kept = [
                h
                for h in headers
                if h.partition(":")[0].strip().lower() not in ("connection", "keep-alive")
            ]
            out = "\r\n".join([request_line, *kept, "Connection: close", "", ""]).encode("latin-1")
            up_reader, upstream = await asyncio.open_connection(
                self.upstream.host, self.upstream.port or 443, ssl=self.upstream_ssl
            )
            upstream.write(out + body)
            await upstream.drain()
            if cut == "after":
                while await up_reader.read(65536):
                    pass
                await self._cut(writer)
                return
            while chunk := await up_reader.read(65536):
                if held is not None and not held.answer:
                    held.answer = chunk.split(b"\r\n", 1)[0].decode("latin-1")
                writer.write(chunk)
                await writer.drain()
            writer.close()
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ssl.SSLError):
            writer.transport.abort()
        except asyncio.CancelledError:  # the proxy stops: end quietly (no re-raise, see
            writer.transport.abort()  # asyncio's connection_made callback in 3.11)
        finally:
            if upstream is not None:
                upstream.transport.abort()
            if held is not None:
                held.answered.set()
