"""The tests' one way to the API server (tests/api, tests/e2e, tests/e2e/faults).

:class:`Kube` wraps a configured ``kubernetes`` ``ApiClient`` with a few small, typed calls
on raw API paths. Raw paths keep the tests exact about what goes over the wire (content
types, ``Accept`` headers for the Table API, status codes of refusals) and independent of
the generated client's model classes. Every refusal is an :class:`ApiError`. A copy from
:meth:`Kube.through_outages` retries through API server and etcd restarts (the fault tests);
:meth:`Kube.connect` opens one for another identity or with a bigger connection pool
(threads). Nothing here starts a cluster; ``conftest.py`` does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException

from support.paths import REPO_ROOT

if TYPE_CHECKING:
    from support.controlplane import ControlPlane

CRD_DIR = REPO_ROOT / "crds"
EXAMPLES_DIR = CRD_DIR / "examples"

GROUP = "hostpool.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: kind -> plural of the project's custom resources.
PLURALS: dict[str, str] = {
    "HostPool": "hostpools",
    "SessionHost": "sessionhosts",
    "SessionRequest": "sessionrequests",
    "ScalingPlan": "scalingplans",
}

TABLE_ACCEPT = "application/json;as=Table;g=meta.k8s.io;v=v1"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

Obj = dict[str, Any]

T = TypeVar("T")


# ---------------------------------------------------------------------------------------
# Manifests


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a file, each a mapping."""
    docs: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for doc in yaml.safe_load_all(fh):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise ValueError(f"{path}: a document is not a mapping: {doc!r}")
            docs.append(doc)
    return docs


def crd_files() -> list[Path]:
    """The generated CRD files (``crds/*.yaml``, not the examples)."""
    return sorted(CRD_DIR.glob("*.yaml"))


def example_files() -> list[Path]:
    return sorted(EXAMPLES_DIR.glob("*.yaml"))


def example_documents() -> list[tuple[Path, dict[str, Any]]]:
    """Every example object with the file it comes from, in file order."""
    return [(path, doc) for path in example_files() for doc in load_yaml_documents(path)]


def unique_name(prefix: str, max_length: int = 63) -> str:
    """A DNS-1123 label: ``prefix`` (sanitized, shortened) plus a random suffix."""
    cleaned = "".join(c if c.isalnum() else "-" for c in prefix.lower()).strip("-")
    while "--" in cleaned:
        cleaned = cleaned.replace("--", "-")
    suffix = uuid.uuid4().hex[:6]
    head = cleaned[: max_length - len(suffix) - 1].rstrip("-") or "t"
    return f"{head}-{suffix}"


# ---------------------------------------------------------------------------------------
# API access


class ApiError(Exception):
    """A non-2xx answer of the API server, with the ``Status`` it sent."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.body = body
        super().__init__(f"{method} {path} -> {status}: {self.message}")

    @property
    def message(self) -> str:
        if isinstance(self.body, dict):
            return str(self.body.get("message", self.body))
        return str(self.body)

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", "")) if isinstance(self.body, dict) else ""

    @property
    def causes(self) -> list[dict[str, Any]]:
        if not isinstance(self.body, dict):
            return []
        details = self.body.get("details") or {}
        causes = details.get("causes") or []
        return [c for c in causes if isinstance(c, dict)]


#: HTTP statuses of an API server (or etcd behind it) that is restarting or overloaded.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def transient(exc: BaseException) -> bool:
    """An error a client should retry while the API server or etcd restarts: a refusal of
    the kind above, or no answer at all (the ``kubernetes`` client reports a TLS failure as
    an ``ApiException`` with status 0)."""
    if isinstance(exc, ApiError):
        return exc.status in TRANSIENT_STATUSES
    if isinstance(exc, ApiException):
        return exc.status in (None, 0)
    return isinstance(exc, urllib3.exceptions.HTTPError | OSError)


#: What a predicate may raise while the API server or etcd restarts (see :func:`transient`),
#: or while the objects are not there yet: for :func:`wait_for`'s ``retry_on``.
OUTAGE = (ApiError, ApiException, KeyError, urllib3.exceptions.HTTPError, OSError)


def resource_path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    """The API path of a collection or an object of one of the project's kinds."""
    path = f"/apis/{GROUP}/{VERSION}"
    if namespace is not None:
        path += f"/namespaces/{namespace}"
    path += f"/{PLURALS[kind]}"
    if name is not None:
        path += f"/{name}"
    return path


@dataclass
class Kube:
    """A cluster the tests may use: its kubeconfig and a configured API client.

    ``control_plane`` is the suite's own :class:`controlplane.ControlPlane`, or ``None`` for
    an existing cluster given by ``HOSTPOOL_TEST_KUBECONFIG``. With ``outage_timeout`` (see
    :meth:`through_outages`) :meth:`call` retries :func:`transient` failures that long and
    counts them in ``retries``.
    """

    kubeconfig: Path
    api_client: Any
    control_plane: ControlPlane | None = None
    bin_dir: Path | None = None
    crd_names: list[str] = field(default_factory=list)
    outage_timeout: float = 0.0
    retries: int = 0

    @classmethod
    def connect(cls, kubeconfig: Path, *, pool_size: int | None = None) -> Kube:
        """A Kube of its own for this kubeconfig (another identity, another cluster, or a
        connection pool of ``pool_size`` for as many threads); :meth:`close` it."""
        return cls(
            kubeconfig=kubeconfig, api_client=make_api_client(kubeconfig, pool_size=pool_size)
        )

    def through_outages(self, timeout: float = 90.0) -> Kube:
        """This Kube (same client, same cluster) retrying through restarts of the API server
        and etcd for up to ``timeout`` s per call; its own ``retries`` count."""
        return dataclasses.replace(self, outage_timeout=timeout, retries=0)

    def close(self) -> None:
        self.api_client.close()

    # -- raw requests -------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float = 30.0,
    ) -> tuple[int, Any]:
        """Send one request; return (HTTP status, decoded JSON body or text). Never raises
        for an HTTP error status."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        m, url, hdrs, data, _ = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query.items()) if query else None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(
            m, url, header_params=hdrs, body=data, _request_timeout=timeout
        )
        raw = response.read() or b""
        text = raw.decode("utf-8", errors="replace")
        try:
            decoded: Any = json.loads(text) if text else None
        except json.JSONDecodeError:
            decoded = text
        return int(response.status), decoded

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """Like :meth:`request` but raise :class:`ApiError` unless the status is 2xx; retried
        through outages when :attr:`outage_timeout` is set."""
        deadline = time.monotonic() + self.outage_timeout
        while True:
            try:
                status, body = self.request(method, path, **kwargs)
                if not 200 <= status < 300:
                    raise ApiError(method, path, status, body)
                return body
            except Exception as exc:
                if not transient(exc) or time.monotonic() >= deadline:
                    raise
            self.retries += 1
            time.sleep(0.2)

    def stream(
        self, path: str, *, query: dict[str, str] | None = None, timeout: Any = (5, 15)
    ) -> Iterator[Any]:
        """The JSON lines of a streamed answer (a watch), decoded as they arrive."""
        m, url, hdrs, _, _ = self.api_client.param_serialize(
            method="GET",
            resource_path=path,
            query_params=list(query.items()) if query else None,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(m, url, header_params=hdrs, _request_timeout=timeout)
        raw = response.response  # the urllib3 response, not read yet
        try:
            if not 200 <= int(response.status) < 300:
                text = raw.read().decode("utf-8", errors="replace")
                raise ApiError("GET", path, int(response.status), text)
            buffer = b""
            for chunk in raw.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            raw.release_conn()

    # -- the project's kinds --------------------------------------------------------------

    def create(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.call("POST", resource_path(obj["kind"], namespace), body=obj)
        return result

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.call("GET", resource_path(kind, namespace, name))
        return result

    def objects(self, kind: str, namespace: str) -> dict[str, Obj]:
        """Every object of the kind in the namespace, by name."""
        listing = self.call("GET", resource_path(kind, namespace))
        return {item["metadata"]["name"]: item for item in listing.get("items") or []}

    def watch(
        self, kind: str, namespace: str, resource_version: str, *, timeout_seconds: int = 2
    ) -> Iterator[Obj]:
        """The events of one watch from ``resource_version`` (with bookmarks), which the API
        server ends after ``timeout_seconds``."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        return self.stream(resource_path(kind, namespace), query=query)

    def events(self, namespace: str, name: str) -> list[Obj]:
        """core/v1 Events in the namespace about the object with this name."""
        query = {"fieldSelector": f"involvedObject.name={name}"}
        listing = self.call("GET", f"/api/v1/namespaces/{namespace}/events", query=query)
        return list(listing.get("items") or [])

    def exists(self, kind: str, namespace: str, name: str) -> bool:
        status, body = self.request("GET", resource_path(kind, namespace, name))
        if status == 404:
            return False
        if not 200 <= status < 300:
            raise ApiError("GET", resource_path(kind, namespace, name), status, body)
        return True

    def replace(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        result: dict[str, Any] = self.call(
            "PUT", resource_path(obj["kind"], namespace, name), body=obj
        )
        return result

    def replace_status(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        result: dict[str, Any] = self.call(
            "PUT", resource_path(obj["kind"], namespace, name) + "/status", body=obj
        )
        return result

    def merge_patch(
        self,
        kind: str,
        namespace: str,
        name: str,
        patch: Any,
        *,
        status: bool = False,
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        """A merge patch (or, with ``content_type=JSON_PATCH``, a list of JSON patch
        operations) of the object or, with ``status``, of its status subresource."""
        path = resource_path(kind, namespace, name) + ("/status" if status else "")
        result: dict[str, Any] = self.call("PATCH", path, body=patch, content_type=content_type)
        return result

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        propagation: str = "Background",
        missing_ok: bool = False,
    ) -> Any:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            return self.call("DELETE", resource_path(kind, namespace, name), body=body)
        except ApiError as exc:
            if missing_ok and exc.status == 404:
                return None
            raise

    def table(self, kind: str, namespace: str) -> dict[str, Any]:
        """The server-side printed list (what ``kubectl get`` shows)."""
        result: dict[str, Any] = self.call(
            "GET", resource_path(kind, namespace), accept=TABLE_ACCEPT
        )
        return result

    # -- namespaces and CRDs --------------------------------------------------------------

    def create_namespace(self, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.call("POST", "/api/v1/namespaces", body=body)

    def delete_namespace(self, name: str) -> None:
        status, body = self.request("DELETE", f"/api/v1/namespaces/{name}")
        if status not in (200, 202, 404):
            raise ApiError("DELETE", f"/api/v1/namespaces/{name}", status, body)

    def read_crd(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.call(
            "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        )
        return result

    def install_crds(self, paths: list[Path], *, timeout: float = 60.0) -> list[str]:
        """Create each CRD, or replace it when it exists; wait until all are Established
        and their resources are served. Returns the CRD names."""
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        names: list[str] = []
        for path in paths:
            for crd in load_yaml_documents(path):
                name = crd["metadata"]["name"]
                names.append(name)
                status, body = self.request("POST", base, body=crd)
                if status == 409:
                    current = self.read_crd(name)
                    crd = {
                        **crd,
                        "metadata": {
                            **crd["metadata"],
                            "resourceVersion": current["metadata"]["resourceVersion"],
                        },
                    }
                    self.call("PUT", f"{base}/{name}", body=crd)
                elif not 200 <= status < 300:
                    raise ApiError("POST", base, status, body)

        def wait(predicate: Callable[[], bool], what: str) -> None:
            # A TimeoutError, not a failed test: the `kube` fixture adds the API server's log.
            wait_for(
                predicate,
                timeout,
                what=what,
                interval=0.25,
                retry_on=(ApiError,),
                raises=TimeoutError,
            )

        for name in names:

            def established(name: str = name) -> bool:
                return _crd_established(self.read_crd(name))

            wait(established, f"CRD {name} to become Established")
        for kind in PLURALS:

            def served(kind: str = kind) -> bool:
                return self.request("GET", resource_path(kind))[0] == 200

            wait(served, f"{kind} to be served")
        self.crd_names = names
        return names

    def log_tail(self, lines: int = 60) -> str:
        """The API server's last log lines, when the suite runs its own control plane."""
        if self.control_plane is None:
            return "(an existing cluster from HOSTPOOL_TEST_KUBECONFIG; no API server log here)"
        return self.control_plane.log_tail("kube-apiserver", lines)


def _crd_established(crd: dict[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    state = {c.get("type"): c.get("status") for c in conditions}
    return state.get("Established") == "True" and state.get("NamesAccepted") == "True"


def make_api_client(kubeconfig: Path, *, pool_size: int | None = None) -> Any:
    """A ``kubernetes`` ApiClient for the kubeconfig's current context; ``pool_size`` sets its
    connection pool (threads each need a connection)."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    configuration = k8s_client.Configuration()
    load: Any = k8s_config.load_kube_config  # untyped in the client library
    load(config_file=str(kubeconfig), client_configuration=configuration, persist_config=False)
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    return k8s_client.ApiClient(configuration=configuration)


def need_control_plane(kube: Kube, why: str) -> ControlPlane:
    """The suite's own control plane, for a test that must act on its processes or nodes;
    the test is skipped against an external cluster (``HOSTPOOL_TEST_KUBECONFIG``), where
    it does not apply."""
    if kube.control_plane is None:
        pytest.skip(
            f"{why} needs the suite's own control plane; HOSTPOOL_TEST_KUBECONFIG names "
            "an external cluster"
        )
    return kube.control_plane


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float = 30.0,
    *,
    what: str = "a condition",
    interval: float = 0.2,
    show: Callable[[], str] | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    raises: type[Exception] | None = None,
) -> T:
    """Poll ``predicate`` every ``interval`` s until it returns something truthy; return it.

    The one wait of the suite. An exception of a type in ``retry_on`` only means "not yet"
    (an :class:`ApiError` 404 right after creation; ``cluster.NOT_YET`` for objects not
    there yet; :data:`OUTAGE` while the API server restarts); any other
    exception propagates at once. On timeout the test fails (``pytest.fail``, no traceback) with
    ``what``, the last exception the predicate raised and ``show()``: the state as last seen.
    With ``raises`` (outside a test, e.g. in a fixture that adds its own context) that
    exception is raised instead, with the same message."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except retry_on as exc:
            last_error = exc
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    lines = [f"timed out after {timeout:.1f}s waiting for {what}"]
    if last_error is not None:
        lines.append(f"last error: {type(last_error).__name__}: {last_error}"[:2000])
    if show is not None:
        try:
            lines.append("last observed:\n" + show())
        except Exception as exc:  # never hide the timeout behind a listing error
            lines.append(f"(could not show the state: {exc})")
    if raises is not None:
        raise raises("\n".join(lines))
    pytest.fail("\n".join(lines), pytrace=False)


async def until(
    predicate: Callable[[], object],
    timeout: float = 20.0,
    *,
    what: str = "a condition",
    in_thread: bool = False,
) -> None:
    """:func:`wait_for` for a test on an event loop: ``predicate`` is looked at every 50 ms
    between the loop's own work (in a thread when it blocks, ``in_thread``)."""
    deadline = time.monotonic() + timeout
    while not (await asyncio.to_thread(predicate) if in_thread else predicate()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.1f}s waiting for {what}", pytrace=False)
        await asyncio.sleep(0.05)


def iter_schema_nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node of an openAPIV3Schema with a readable path (``.spec.x[]``,
    ``.labels{}`` for map values)."""
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from iter_schema_nodes(sub, f"{path}.{name}")
    items = node.get("items")
    if isinstance(items, dict):
        yield from iter_schema_nodes(items, f"{path}[]")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield from iter_schema_nodes(extra, f"{path}{{}}")


def wait_default_service_account(kube: Kube, namespace: str, timeout: float = 60.0) -> None:
    """A pod is admitted only once its namespace's ServiceAccount ``default`` exists (the
    ServiceAccount admission plugin refuses it before that, also with reason Forbidden)."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
    wait_for(lambda: kube.request("GET", path)[0] == 200, timeout, what=path)
