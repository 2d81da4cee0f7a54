"""The .rdp file the broker hands out never carries a line a host's address put there.

An address with a line break (``10.0.0.5\\r\\ndrivestoredirect:s:*``) in an agent's report, or
in a request's ``status.hostAddress``, would add properties of its writer's choosing to the
file of every later user of that host. Today's CRDs refuse such a value
(tests/api/test_addresses_live.py). These tests are about objects that got in before: stored
under a CRD without the address pattern (a cluster whose CRDs were upgraded after the
objects were written, which the API server never revalidates), with the real operator and
the real broker processes reading them. The CRD is relaxed only for the write that
reproduces such an object, then restored from crds/ before anything reads it.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hostpool_operator.access.names import request_name
from support.broker_helpers import BROKER_LABEL, POOL, BrokerProcess, Reply, assert_refused
from support.builders import request as request_manifest
from support.cluster import Cluster
from support.conditions import phase
from support.kube import Kube, crd_files, resource_path
from support.operator_process import OperatorProcess

Obj = dict[str, Any]

INJECTED = "10.0.0.5\r\ndrivestoredirect:s:*\r\nredirectclipboard:i:1"
#: Another bad address, for probing which CRD is in force: the API server lets a write keep
#: a stored value the schema now refuses (validation ratcheting), so the probe differs.
PROBE = "10.0.0.6\r\nredirectclipboard:i:1"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _schema_of(crd: Obj, path: list[str]) -> Obj:
    (version,) = crd["spec"]["versions"]
    node: Obj = version["schema"]["openAPIV3Schema"]
    for step in path:
        node = node["properties"][step]
    return node


def _accepts(kube: Kube, kind: str, namespace: str, name: str, status: Obj) -> bool:
    """Whether a status write of ``status`` is taken now (a dry run: nothing is stored)."""
    path = resource_path(kind, namespace, name) + "/status"
    code, _ = kube.request(
        "PATCH",
        path,
        body={"status": status},
        query={"dryRun": "All"},
        content_type="application/merge-patch+json",
    )
    return code == 200


@contextmanager
def older_crd(
    kube: Kube, crd_name: str, fields: list[list[str]], probe: tuple[str, str, str, Obj]
) -> Iterator[None]:
    """The CRD ``crd_name`` without the ``pattern`` of ``fields`` (as a CRD from before the
    address rule), until the block ends; then the CRDs of crds/ again. ``probe`` (kind,
    namespace, name, status) is a status write the pattern refuses: it is taken (dry run)
    before the block starts and, when crds/ has the pattern, refused again before this
    returns."""
    crd = kube.read_crd(crd_name)
    relaxed = copy.deepcopy(crd)
    patterned = False
    for path in fields:
        patterned |= _schema_of(relaxed, path).pop("pattern", None) is not None
    relaxed.pop("status", None)
    kube.call("PUT", f"{CRDS}/{crd_name}", body=relaxed)
    kind, namespace, name, status = probe
    wait_until(lambda: _accepts(kube, kind, namespace, name, status), "the older CRD in force")
    try:
        yield
    finally:
        kube.install_crds(crd_files())
        if patterned:
            wait_until(
                lambda: not _accepts(kube, kind, namespace, name, status), "crds/ in force again"
            )


def wait_until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def assert_no_injected_line(reply: Reply) -> None:
    """Whatever the answer, no .rdp text in it has a line the address put there."""
    texts = [reply.text]
    if isinstance(reply.body, dict) and isinstance(reply.body.get("rdpFile"), str):
        texts.append(reply.body["rdpFile"])
    for text in texts:
        for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
            assert not line.startswith(("drivestoredirect", "redirectclipboard")), (
                f"{reply.status}: an injected line in the answer: {text[:400]!r}"
            )


def assert_retry_after(reply: Reply, seconds: int) -> None:
    """Retry-After: ``seconds``, plus the broker's jitter of up to half as much again."""
    value = int(reply.headers.get("Retry-After", "0"))
    assert seconds <= value <= seconds * 3 // 2, reply.headers


def connect_both_ways(broker: BrokerProcess, namespace: str, token: str) -> list[Reply]:
    """A connect as JSON, and one asking for the file itself."""
    return [
        broker.connect(namespace, POOL, token),
        broker.connect(namespace, POOL, token, headers={"Accept": "application/x-rdp"}),
    ]


def test_an_address_an_agent_slipped_past_an_older_crd_never_reaches_a_file(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    """The agent's report is stored with a line break in it; the operator never takes it as
    the host's address, so the broker has no address to hand out (and says so)."""
    del operator_process
    cluster.setup_pool(
        POOL, "DepthFirst", 2, hosts=["h1"], entitlements={"users": ["alice"], "groups": []}
    )
    report = {"agent": {"version": "old", "address": INJECTED}}
    probe = ("SessionHost", cluster.namespace, "h1", {"agent": {"address": PROBE}})
    with older_crd(
        cluster.kube,
        "sessionhosts.hostpool.io",
        [["status", "agent", "address"], ["status", "address"]],
        probe,
    ):
        cluster.patch_status("SessionHost", "h1", report)
    assert cluster.host("h1")["status"]["agent"]["address"] == INJECTED  # it is stored

    broker = brokers()
    replies = connect_both_ways(broker, cluster.namespace, tokens("alice"))
    for reply in replies:
        assert_no_injected_line(reply)
        assert_refused(reply, 503, "HostAddressUnknown")
        assert_retry_after(reply, 5)
    name = request_name(cluster.namespace, POOL, "alice")
    assert phase(cluster.request(name)) == "Assigned"
    assert "hostAddress" not in cluster.request(name)["status"]
    assert "address" not in cluster.host("h1").get("status", {})


def test_a_request_stored_with_a_bad_address_is_refused_with_a_reason(
    cluster: Cluster,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    """A request whose status.hostAddress an older operator copied from such a report: the
    broker answers 503 HostAddressInvalid with Retry-After, and never the file."""
    cluster.create_pool(POOL, "DepthFirst", 2, entitlements={"users": ["alice"], "groups": []})
    name = request_name(cluster.namespace, POOL, "alice")
    body = request_manifest(name, POOL, "alice", namespace=cluster.namespace, protocol="RDP")
    body["metadata"]["labels"] = {BROKER_LABEL: "true"}
    cluster.create_body(body)
    placed = {
        "phase": "Assigned",
        "host": "h1",
        "hostAddress": INJECTED,
        "reason": "NewSession",
        "sessionState": "Connecting",
    }
    probe = ("SessionRequest", cluster.namespace, name, {**placed, "hostAddress": PROBE})
    with older_crd(cluster.kube, "sessionrequests.hostpool.io", [["status", "hostAddress"]], probe):
        cluster.patch_status("SessionRequest", name, placed)
    assert cluster.request(name)["status"]["hostAddress"] == INJECTED  # it is stored

    broker = brokers()
    for reply in connect_both_ways(broker, cluster.namespace, tokens("alice")):
        assert_no_injected_line(reply)
        assert_refused(reply, 503, "HostAddressInvalid")
        assert_retry_after(reply, 60)
        assert "h1" in reply.body["message"]
        assert "drivestoredirect" not in reply.text
        assert reply.headers.get("Content-Type", "").startswith("application/json")
    # The broker made nothing else for it: the one request, as it was.
    assert list(cluster.requests()) == [name]
