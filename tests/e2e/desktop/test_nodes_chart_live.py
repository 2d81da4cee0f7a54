"""The chart installed for real, and pod-backed desktops that really run, on a real kubelet
node (``tests/e2e/real_nodes.py``: a control plane of the module's own with one real node).

1. ``helm install`` of the chart with the built image: the operator runs as the Deployment's
   Pod under the chart's ServiceAccount (its token mounted by the kubelet), becomes Ready by
   its probes and places a request; liveness and metrics answer through
   ``kubectl port-forward``; its container killed with SIGKILL, the kubelet restarts it, it
   takes its Lease back and places again.
2. A pool whose ``hostTemplate.workload`` is ``crds/examples/session-host-pool.yaml``'s pod
   (the session-host image; the agent as a sidecar under the pod-bound token): scale-up makes
   a Pod that really starts, the host takes sessions only once xrdp listens (readiness), alice
   signs in through the broker and FreeRDP shows the pod's desktop, the sidecar reports her
   session; the desktop container killed → HostLost and a new Pod; scale-down deletes the Pod
   and its processes end.
3. The chart's broker in a Pod, answering a signed-in user.
4. Personal desktops (``crds/examples/personal-desktops.yaml``): a host per user with its
   home on a claim the local-path provisioner binds on the node; alice's file survives her
   host's stop and start; 20 users connecting at once get 20 desktops, none shared.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hostpool_operator.logon import uids
from support.agent_objects import run_tool
from support.broker_helpers import (
    CLIENT,
    REALM,
    BrokerProcess,
    broker_requests,
    keycloak_token,
)
from support.builders import desktop_users, personal_desktop_pool, session_host_pool
from support.cluster import Cluster
from support.conditions import condition, status
from support.desktop import RdpClient, VirtualDisplay, install_client, pixel
from support.keycloak import CLIENT_SECRET, Keycloak, KeycloakError, keycloak_home, suite_realms
from support.kube import ApiError, wait_for
from support.paths import CHART_DIR
from support.real_nodes import NODE, RealCluster, real_node_cluster
from support.report_logs import EXTRA_LOGS

RELEASE = "hp"
LIVENESS_PORT, METRICS_PORT = 8080, 9090
DESKTOP_PASSWORD = "alice-desk-pw"
#: The session-host image's desktop colour (operator/session-host/xsession).
IMAGE_COLOUR = "#0a7d6c"
BACKGROUND = (1000, 740)
OPERATOR_PODS = f"app.kubernetes.io/name=hostpool-operator,app.kubernetes.io/instance={RELEASE}"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    with real_node_cluster(tmp_path_factory, "--session-host") as real:
        yield real
        for line in (f"  {k}: {v}" for k, v in real.timings.items()):
            print(line)
        for usage in real.usage:
            print(f"  {usage.name}: {usage.report()}")


def kubectl(nodes: RealCluster, *args: str, timeout: float = 120) -> str:
    return nodes.run_kubectl(*args, timeout=timeout)


def pods(nodes: RealCluster, selector: str) -> list[Obj]:
    listing = nodes.kube.call(
        "GET", f"/api/v1/namespaces/{nodes.namespace}/pods", query={"labelSelector": selector}
    )
    return list(listing["items"])


def ready(pod: Obj) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions", [])
    )


def ready_pod(nodes: RealCluster, selector: str, what: str) -> Obj:
    """The first Ready pod of ``selector`` (on a timeout: the pods and their logs)."""
    found: Obj = wait_for(
        lambda: next((p for p in pods(nodes, selector) if ready(p)), None),
        120,
        what=f"{what} to become Ready",
        show=lambda: (
            kubectl(nodes, "-n", nodes.namespace, "get", "pods", "-o", "wide")
            + kubectl(nodes, "-n", nodes.namespace, "logs", "--tail", "40", "-l", selector)
        ),
    )
    return found


def container_pid(nodes: RealCluster, pod: Obj, container: str) -> int:
    """The host pid of a container's main process, from the node's containerd."""
    statuses = pod["status"].get("containerStatuses", []) + pod["status"].get(
        "initContainerStatuses", []
    )
    (state,) = [c for c in statuses if c["name"] == container]
    container_id = state["containerID"].split("://", 1)[1]
    sock = nodes.cp.directory / "nodes" / NODE / "containerd.sock"
    out = subprocess.run(
        ["ctr", "--address", str(sock), "--namespace", "k8s.io", "tasks", "ls"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    for line in out.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == container_id:
            return int(fields[1])
    raise AssertionError(f"no task of container {container_id} in:\n{out}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PortForward:
    """``kubectl port-forward pod/NAME LOCAL:REMOTE`` in the background."""

    def __init__(self, nodes: RealCluster, pod: str, remote: int) -> None:
        self.local = free_port()
        self.proc = subprocess.Popen(
            [str(nodes.kubectl), "--kubeconfig", str(nodes.cp.kubeconfig), "-n", nodes.namespace,
             "port-forward", f"pod/{pod}", f"{self.local}:{remote}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def get(self, path: str) -> tuple[int, str]:
        def answer() -> tuple[int, str] | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.local}{path}", timeout=5) as r:
                    return r.status, r.read().decode()
            except OSError:
                return None

        return wait_for(answer, 30, what=f"port-forward {path}")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def operator_pod(nodes: RealCluster) -> Obj:
    """The chart installed (helm install) with the built image; its operator Pod, Ready."""
    repository, tag = nodes.image.rsplit(":", 1)
    started = time.monotonic()
    run_tool(
        [str(nodes.bin_dir / "helm"), "--kubeconfig", str(nodes.cp.kubeconfig), "install", RELEASE,
         str(CHART_DIR), "-n", nodes.namespace, "--set", f"image.repository={repository}",
         "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
         "--set", f"watchNamespace={nodes.namespace}", "--set", "operator.logFormat=text"]
    )  # fmt: skip
    # The chart's CRDs: once served, a pool, two hosts and a request that waits for the
    # operator; its placement is the operator's first.
    wait_for(
        lambda: nodes.kube.create(nodes.namespace, pool_body("plain")),
        60,
        what="the chart's CRDs to be served",
        retry_on=(ApiError,),
    )
    for i in range(2):
        nodes.kube.create(nodes.namespace, host_body(f"plain-{i}", "plain", f"10.9.0.{i + 1}"))
    nodes.kube.create(nodes.namespace, request_body("first", "plain", "user-1"))
    pod = ready_pod(nodes, OPERATOR_PODS, "the operator's Pod")
    nodes.timings["helm install -> operator Pod Ready"] = f"{time.monotonic() - started:.2f} s"
    wait_assigned(nodes, "first", 60, what="the operator in its Pod to place the waiting request")
    nodes.timings["helm install -> first placement"] = f"{time.monotonic() - started:.2f} s"
    return pod


def wait_assigned(nodes: RealCluster, request: str, timeout: float, *, what: str) -> None:
    """Wait for SessionRequest ``request`` to be placed (phase Assigned)."""
    wait_for(
        lambda: (
            status(nodes.kube.get("SessionRequest", nodes.namespace, request)).get("phase")
            == "Assigned"
        ),
        timeout,
        what=what,
    )


def pool_body(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "hostpool.io/v1alpha1",
        "kind": "HostPool",
        "metadata": {"name": name},
        "spec": {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 2}, **spec},
    }


def host_body(name: str, pool: str, address: str) -> Obj:
    return {
        "apiVersion": "hostpool.io/v1alpha1",
        "kind": "SessionHost",
        "metadata": {"name": name},
        "spec": {"poolRef": {"name": pool}, "address": address},
    }


def request_body(name: str, pool: str, user: str) -> Obj:
    return {
        "apiVersion": "hostpool.io/v1alpha1",
        "kind": "SessionRequest",
        "metadata": {"name": name},
        "spec": {"poolRef": {"name": pool}, "user": user},
    }


def test_the_chart_runs_the_operator_in_a_pod(nodes: RealCluster, operator_pod: Obj) -> None:
    spec = operator_pod["spec"]
    assert spec["nodeName"] == NODE
    assert spec["serviceAccountName"] == f"{RELEASE}-hostpool-operator"
    # The kubelet mounted the ServiceAccount's projected token, and the operator used it.
    mounts = [m["mountPath"] for c in spec["containers"] for m in c.get("volumeMounts", [])]
    assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts
    name = operator_pod["metadata"]["name"]
    health = PortForward(nodes, name, LIVENESS_PORT)
    metrics = PortForward(nodes, name, METRICS_PORT)
    try:
        assert health.get("/healthz")[0] == 200
        code, text = metrics.get("/metrics")
        assert code == 200
        assert "hostpool_" in text
    finally:
        health.close()
        metrics.close()

    # SIGKILL the operator's process: the kubelet restarts the container, it takes its Lease
    # back and places again.
    lease_path = (
        f"/apis/coordination.k8s.io/v1/namespaces/{nodes.namespace}/leases/hostpool-operator"
    )
    before = nodes.kube.call("GET", lease_path)["spec"]
    killed = time.monotonic()
    os.kill(container_pid(nodes, operator_pod, "operator"), signal.SIGKILL)

    def restarted() -> Obj | None:
        pod = nodes.pod(name)
        restarts = sum(c["restartCount"] for c in pod["status"]["containerStatuses"])
        return pod if restarts >= 1 and ready(pod) else None

    wait_for(restarted, 120, what="the kubelet to restart the operator's container")
    nodes.kube.create(nodes.namespace, request_body("second", "plain", "user-2"))
    wait_assigned(nodes, "second", 90, what="the restarted operator to place a new request")
    nodes.timings["operator container SIGKILL -> placing again"] = (
        f"{time.monotonic() - killed:.2f} s"
    )
    after = nodes.kube.call("GET", lease_path)["spec"]
    assert after["renewTime"] != before["renewTime"]
    assert after.get("leaseTransitions", 0) >= before.get("leaseTransitions", 0)

    # The chart runs a leader and a warm standby: the leader's pod deleted (as a drain or a
    # rollout does), the standby takes the Lease and a new logon is placed at once.
    def steady() -> tuple[str, list[str]] | None:
        names = sorted(p["metadata"]["name"] for p in pods(nodes, OPERATOR_PODS) if ready(p))
        holder = nodes.kube.call("GET", lease_path)["spec"].get("holderIdentity")
        return (holder, names) if len(names) == 2 and holder in names else None

    leader, names = wait_for(
        steady,
        120,
        what="the chart's two operator pods Ready, one of them holding the Lease",
        show=lambda: (
            kubectl(nodes, "-n", nodes.namespace, "get", "pods", "-o", "wide")
            + json.dumps(nodes.kube.call("GET", lease_path)["spec"])
        ),
    )
    deleted = time.monotonic()
    kubectl(nodes, "-n", nodes.namespace, "delete", "pod", leader, "--wait=false")

    def taken_over() -> str | None:
        holder = nodes.kube.call("GET", lease_path)["spec"].get("holderIdentity")
        return holder if holder and holder != leader else None

    def operators() -> str:
        return kubectl(nodes, "-n", nodes.namespace, "get", "pods", "-o", "wide") + kubectl(
            nodes, "-n", nodes.namespace, "logs", "--tail", "30", "--prefix", "-l", OPERATOR_PODS
        )

    now_leading = wait_for(
        taken_over, 30, what="another operator instance to take the Lease", show=operators
    )
    # The standby, or the pod the Deployment made in the old one's place: in this small
    # cluster that pod has listed everything within about a second, so it is often seeking
    # the Lease by the time the kubelet has stopped the old leader and the Lease is released,
    # and whichever looks first takes it (a run here: the new pod, 2.12 s after the delete).
    # Both list everything before they seek the Lease, so either places at once.
    assert now_leading.startswith(f"{RELEASE}-hostpool-operator-"), now_leading
    who = "the standby" if now_leading in names else "the replacement pod"
    nodes.timings[f"leader's pod deleted -> {who} leads"] = f"{time.monotonic() - deleted:.2f} s"
    nodes.kube.create(nodes.namespace, request_body("third", "plain", "user-3"))
    wait_assigned(nodes, "third", 30, what="the new leader to place a new request")
    nodes.timings["leader's pod deleted -> a new request placed"] = (
        f"{time.monotonic() - deleted:.2f} s"
    )


def desktop_pool(nodes: RealCluster) -> Obj:
    """The example pool (tests/builders.py), with a 1 s agent interval and a short
    scale-down."""
    pool = session_host_pool(nodes.images["--session-host"], agent_interval=1)
    pool["metadata"]["name"] = "pods"
    spec = pool["spec"]
    spec["loadBalancer"]["maxSessionLimit"] = 2
    spec["entitlements"] = {"users": ["alice"]}
    spec["scaling"].update(minHosts=1, maxHosts=2, bufferSessions=0, scaleDownDelaySeconds=1)
    return pool


def desktop_pods(nodes: RealCluster) -> list[Obj]:
    return [
        p
        for p in nodes.kube.call("GET", f"/api/v1/namespaces/{nodes.namespace}/pods")["items"]
        if p["metadata"]["name"].startswith("pods-")
    ]


def host_ready(cluster: Cluster, name: str) -> bool:
    """The host takes new sessions (its Available condition)."""
    available = condition(cluster.host(name), "Available")
    return bool(available and available["status"] == "True")


def test_pod_backed_desktops_run_on_the_real_node(
    nodes: RealCluster,
    operator_pod: Obj,
    keycloak: Keycloak,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    del operator_pod  # the chart's operator places these too
    install_client()
    ns = nodes.namespace
    cluster = Cluster(nodes.kube, ns)
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    nodes.kube.call(
        "POST",
        f"/api/v1/namespaces/{ns}/secrets",
        body=desktop_users({"alice": DESKTOP_PASSWORD}),
    )
    nodes.kube.create(ns, desktop_pool(nodes))

    # Scale-up (minHosts 1): a Pod that really starts; the host takes sessions once xrdp
    # listens (the readiness probe), not before.
    first = wait_for(lambda: desktop_pods(nodes)[:1], 60, what="the operator to create a Pod")[0]
    created = time.monotonic()
    host = first["metadata"]["name"]
    agent_log = ["-n", ns, "logs", host, "-c", "agent", "--tail", "40"]
    logs.append((f"pod {host} agent log", lambda: kubectl(nodes, *agent_log)))
    while not ready(nodes.pod(host)):
        assert not host_ready(cluster, host), "the host took sessions before its pod was Ready"
        assert time.monotonic() - created < 120, "the desktop pod did not become Ready"
        time.sleep(0.05)
    pod_ready_after = time.monotonic() - created
    cluster.wait(lambda: host_ready(cluster, host), f"host {host} to take sessions", timeout=30)
    nodes.timings["desktop pod create -> Ready (xrdp listening)"] = f"{pod_ready_after:.2f} s"
    nodes.timings["desktop pod create -> host taking sessions"] = (
        f"{time.monotonic() - created:.2f} s"
    )

    broker = BrokerProcess(
        nodes.cp.kubeconfig, keycloak.issuer(REALM), CLIENT, [ns], tmp_path / "broker.log"
    )
    logs.append(("broker log", lambda: broker.log_tail(60)))
    broker.start()
    display = VirtualDisplay(tmp_path / "xvfb.log")
    client: RdpClient | None = None
    try:
        with display:
            reply = broker.connect(ns, "pods", keycloak_token(keycloak, "alice"))
            assert reply.status == 200, reply.text
            answer = reply.body
            pod = nodes.pod(host)
            assert answer["host"] == host
            assert answer["address"] == pod["status"]["podIP"]
            rdp = tmp_path / "alice.rdp"
            rdp.write_text(answer["rdpFile"], newline="")
            client = RdpClient(
                display, rdp, DESKTOP_PASSWORD, tmp_path / "xfreerdp.log", tmp_path / "home"
            )
            logs.append(("xfreerdp log", client.log_text))
            connect = time.monotonic()
            client.start()
            cluster.wait(
                lambda: status(cluster.request(answer["request"])).get("sessionState") == "Active",
                "the agent sidecar to report alice Active",
                timeout=45,
            )
            nodes.timings["connect -> Active (pod-backed host)"] = (
                f"{time.monotonic() - connect:.2f} s"
            )
            shot = tmp_path / "pod-desktop.png"
            wait_for(
                lambda: pixel(display.screenshot(shot), *BACKGROUND) == IMAGE_COLOUR,
                15,
                what="the client's screen to show the pod's desktop",
            )

            # The desktop container dies: the pod ends, alice's request is HostLost, and
            # the operator makes a new pod for the host.
            old_uid = pod["metadata"]["uid"]
            killed = time.monotonic()
            os.kill(container_pid(nodes, pod, "desktop"), signal.SIGKILL)
            cluster.wait(
                lambda: status(cluster.request(answer["request"])).get("reason") == "HostLost",
                "alice's request to fail with HostLost",
                timeout=60,
            )
            assert status(cluster.request(answer["request"]))["phase"] == "Failed"
            nodes.timings["desktop container SIGKILL -> request HostLost"] = (
                f"{time.monotonic() - killed:.2f} s"
            )
            new = cluster.wait(
                lambda: next(
                    (p for p in desktop_pods(nodes) if p["metadata"]["uid"] != old_uid),
                    None,
                ),
                "a new Pod for the host",
                timeout=120,
            )
            assert new["metadata"]["name"] == host
            new = cluster.wait(
                lambda: (lambda p: p if ready(p) else None)(nodes.pod(host)),
                "the new Pod to become Ready",
                timeout=120,
            )
            assert new["metadata"]["uid"] != old_uid
            nodes.timings["desktop container SIGKILL -> new Pod Ready"] = (
                f"{time.monotonic() - killed:.2f} s"
            )
            client.kill()
    finally:
        if client is not None:
            client.kill()
        broker.stop()

    # Scale-down: no sessions and minHosts 0 -> the host and its Pod go, its processes end.
    pids = [container_pid(nodes, new, c) for c in ("desktop", "agent")]
    scaled = time.monotonic()
    cluster.patch("HostPool", "pods", {"spec": {"scaling": {"minHosts": 0}}})
    cluster.wait(lambda: not desktop_pods(nodes), "scale-down to delete the Pod", timeout=120)
    wait_for(
        lambda: not any(Path(f"/proc/{p}").exists() for p in pids),
        30,
        what="the desktop pod's processes to end",
    )
    nodes.timings["minHosts 0 -> Pod deleted, its processes ended"] = (
        f"{time.monotonic() - scaled:.2f} s"
    )


@pytest.fixture(scope="module")
def pod_keycloak(
    nodes: RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Keycloak]:
    """A Keycloak the node's pods reach: listening on, and naming in its issuer, the pods'
    gateway (the suite's Keycloak is on loopback, which a pod cannot reach)."""
    gateway = nodes.state()["NODES_NET"] + ".1"
    server = Keycloak(keycloak_home(), tmp_path_factory.mktemp("pod-keycloak"), host=gateway)
    try:
        server.start(suite_realms())
    except KeycloakError as error:
        pytest.fail(f"Keycloak for the node's pods is not available: {error}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def test_the_chart_runs_the_broker_in_a_pod(
    nodes: RealCluster, operator_pod: Obj, pod_keycloak: Keycloak
) -> None:
    """broker.enabled: the broker's Deployment Pod, under its own ServiceAccount, becomes
    Ready (its watches listed, the issuer's keys fetched from Keycloak) and answers a signed-in
    user through port-forward; the operator keeps running beside it."""
    del operator_pod
    started = time.monotonic()
    run_tool(
        [str(nodes.bin_dir / "helm"), "--kubeconfig", str(nodes.cp.kubeconfig), "upgrade", RELEASE,
         str(CHART_DIR), "-n", nodes.namespace, "--reuse-values",
         "--set", "broker.enabled=true", "--set", "broker.replicas=1",
         "--set", f"broker.oidc.issuer={pod_keycloak.issuer(REALM)}",
         "--set", f"broker.oidc.audience={CLIENT}",
         "--set", "broker.oidc.allowInsecureIssuer=true"]
    )  # fmt: skip
    selector = (
        f"app.kubernetes.io/name=hostpool-operator-broker,app.kubernetes.io/instance={RELEASE}"
    )
    broker = ready_pod(nodes, selector, "the broker's Pod")
    nodes.timings["helm upgrade broker.enabled -> broker Pod Ready"] = (
        f"{time.monotonic() - started:.2f} s"
    )
    assert broker["spec"]["serviceAccountName"] == f"{RELEASE}-hostpool-operator-broker"
    forward = PortForward(nodes, broker["metadata"]["name"], 8443)
    try:
        token = pod_keycloak.token(REALM, CLIENT, CLIENT_SECRET, "alice", "alice-pw")
        request = urllib.request.Request(
            f"http://127.0.0.1:{forward.local}/v1/pools",
            headers={"Authorization": f"Bearer {token}"},
        )
        forward.get("/healthz")
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = json.loads(answer.read())
        assert "pods" in [p["name"] for p in body["pools"]], body
        refused = urllib.request.Request(f"http://127.0.0.1:{forward.local}/v1/pools")
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(refused, timeout=10)
        assert error.value.code == 401
    finally:
        forward.close()


# ---------------------------------------------------------------------------------------
# personal desktops: a host per user, its home on a claim, stopped when unused

PERSONAL_PASSWORDS = {"alice": DESKTOP_PASSWORD, "bob": "bob-desk-pw"}
#: Stop/start rounds of alice's desktop (each waits stopAfterMinutes, one minute): more give
#: more figures of connect -> desktop for a stopped host (docs/performance.md).
RESTARTS = int(os.environ.get("HOSTPOOL_PERSONAL_RESTARTS", "1"))


def put_desktop_users(nodes: RealCluster, passwords: dict[str, str]) -> None:
    """The Secret desktop-users with these users (made, or replaced)."""
    base = f"/api/v1/namespaces/{nodes.namespace}/secrets"
    try:
        nodes.kube.call("POST", base, body=desktop_users(passwords))
    except ApiError as error:
        if error.status != 409:
            raise
        nodes.kube.call("PUT", f"{base}/desktop-users", body=desktop_users(passwords))


def connect_until_placed(
    broker: BrokerProcess, namespace: str, pool: str, token: str
) -> tuple[Obj, list[str]]:
    """POST connect again while the broker answers 202, as the portal and a client do: the
    connection, and the reasons of the 202s on the way."""
    waited: list[str] = []
    deadline = time.monotonic() + 180
    while True:
        reply = broker.connect(namespace, pool, token)
        if reply.status == 200:
            return reply.body, waited
        assert reply.status == 202, reply.text
        waited.append(reply.body["reason"])
        assert time.monotonic() < deadline, f"not placed in 180 s; waited {waited[-5:]}"
        time.sleep(0.2)


def desktop_listed(broker: BrokerProcess, token: str) -> Obj | None:
    """The caller's desktop in the pool ``mine`` as ``GET /v1/pools`` lists it."""
    reply = broker.pools(token)
    assert reply.status == 200, reply.text
    (mine,) = [p for p in reply.body["pools"] if p["name"] == "mine"]
    assert mine["type"] == "Personal"
    desktop: Obj | None = mine["desktop"]
    return desktop


def wait_listed(broker: BrokerProcess, token: str, host: str, power: str) -> None:
    """Wait until the broker lists the caller's desktop in ``mine`` as ``host`` with ``power``."""
    wait_for(
        lambda: desktop_listed(broker, token) == {"host": host, "power": power},
        30,
        what=f"the broker to list the caller's desktop {host} as {power}",
    )


def claim_of(nodes: RealCluster, host: str) -> Obj:
    path = f"/api/v1/namespaces/{nodes.namespace}/persistentvolumeclaims/home-{host}"
    claim: Obj = nodes.kube.call("GET", path)
    return claim


def in_home(nodes: RealCluster, host: str, user: str, script: str) -> str:
    """``script`` run by ``user`` in the host's desktop container."""
    return kubectl(
        nodes, "-n", nodes.namespace, "exec", host, "-c", "desktop", "--",
        "runuser", "-u", user, "--", "sh", "-c", script,
    )  # fmt: skip


def test_personal_desktops_keep_their_data_on_the_real_node(
    nodes: RealCluster,
    operator_pod: Obj,
    keycloak: Keycloak,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """crds/examples/personal-desktops.yaml (stopAfterMinutes 1): alice's first connect makes
    her host, its Pod and its claim home-<host> (bound by the local-path provisioner on the
    node); FreeRDP shows her desktop and she keeps a file in her home. Bob gets another host
    and claim. Logged off, her host is stopped after a minute: the Pod goes, the claim stays.
    Her next connect waits (202) while the operator starts it again, then lands on the same
    host, and the file is there. A host deleted takes its claim with it."""
    del operator_pod
    install_client()
    ns = nodes.namespace
    cluster = Cluster(nodes.kube, ns)
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    put_desktop_users(nodes, PERSONAL_PASSWORDS)
    pool = personal_desktop_pool(nodes.images["--session-host"], agent_interval=1)
    pool["metadata"]["name"] = "mine"
    spec = pool["spec"]
    spec["personal"]["stopAfterMinutes"] = 1
    spec["entitlements"] = {"users": list(PERSONAL_PASSWORDS)}
    spec["scaling"]["maxHosts"] = 3
    nodes.kube.create(ns, pool)
    logs.append(
        ("pods and claims", lambda: kubectl(nodes, "-n", ns, "get", "pods,pvc", "-o", "wide"))
    )

    # A connect is held one second at most, then answered 202: a start is seen as the
    # client sees it, 202 HostsStarting until the desktop is there.
    broker = BrokerProcess(
        nodes.cp.kubeconfig, keycloak.issuer(REALM), CLIENT, [ns], tmp_path / "broker.log",
        extra_args=["--connect-timeout-seconds", "1"],
    )  # fmt: skip
    logs.append(("broker log", lambda: broker.log_tail(60)))
    broker.start()
    display = VirtualDisplay(tmp_path / "xvfb.log")
    client: RdpClient | None = None
    tokens = {user: keycloak_token(keycloak, user) for user in PERSONAL_PASSWORDS}

    def desktop(answer: Obj, step: str) -> RdpClient:
        """FreeRDP with the broker's .rdp, once alice's desktop shows."""
        rdp = tmp_path / f"{step}.rdp"
        rdp.write_text(answer["rdpFile"], newline="")
        started = RdpClient(
            display, rdp, DESKTOP_PASSWORD, tmp_path / f"{step}-xfreerdp.log", tmp_path / "home"
        )
        logs.append((f"xfreerdp log ({step})", started.log_text))
        started.start()
        shot = tmp_path / f"{step}.png"
        wait_for(
            lambda: pixel(display.screenshot(shot), *BACKGROUND) == IMAGE_COLOUR,
            60,
            what=f"the client's screen to show alice's desktop ({step})",
        )
        return started

    def log_off(answer: Obj) -> None:
        assert broker.end_session(ns, "mine", tokens["alice"]).status in (200, 202)
        cluster.wait(
            lambda: answer["request"] not in broker_requests(cluster),
            "alice's session to end",
            timeout=60,
        )

    try:
        with display:
            # First connect: a host of her own is made, with its claim.
            connected = time.monotonic()
            ours = [h for h in cluster.hosts().values() if h["spec"]["poolRef"]["name"] == "mine"]
            assert not ours, "the pool has hosts before anyone connected"
            answer, waited = connect_until_placed(broker, ns, "mine", tokens["alice"])
            assert "HostsStarting" in waited, waited
            mine = answer["host"]
            assert cluster.host(mine)["spec"]["assignedUser"] == "alice"
            claim = claim_of(nodes, mine)
            assert claim["status"]["phase"] == "Bound"
            (owner,) = claim["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"]) == ("SessionHost", mine)
            client = desktop(answer, "first")
            pod_uid = nodes.pod(mine)["metadata"]["uid"]
            nodes.timings["personal: first connect -> desktop (host, claim, Pod made)"] = (
                f"{time.monotonic() - connected:.2f} s"
            )
            in_home(nodes, mine, "alice", "echo 'kept by alice' > ~/notes.txt")

            # Bob: another host, another claim.
            theirs, _ = connect_until_placed(broker, ns, "mine", tokens["bob"])
            assert theirs["host"] != mine
            wait_listed(broker, tokens["bob"], theirs["host"], "Running")
            bobs = claim_of(nodes, theirs["host"])
            assert bobs["spec"]["volumeName"] != claim["spec"]["volumeName"]

            figures: list[float] = []
            for round_ in range(1, RESTARTS + 1):
                client.kill()
                log_off(answer)
                logged_off = time.monotonic()
                cluster.wait(
                    lambda: status(cluster.host(mine)).get("power") == "Stopped",
                    "alice's host to be stopped",
                    timeout=150,
                )
                nodes.timings[f"personal: logoff -> Stopped (round {round_})"] = (
                    f"{time.monotonic() - logged_off:.1f} s"
                )
                cluster.wait(
                    lambda: mine not in [p["metadata"]["name"] for p in pods(nodes, "")],
                    "the stopped host's Pod to be gone",
                    timeout=60,
                )
                assert claim_of(nodes, mine)["metadata"]["uid"] == claim["metadata"]["uid"]
                wait_listed(broker, tokens["alice"], mine, "Stopped")

                started = time.monotonic()
                answer, waited = connect_until_placed(broker, ns, "mine", tokens["alice"])
                assert "HostsStarting" in waited, waited
                assert answer["host"] == mine
                cluster.wait(
                    lambda: status(cluster.host(mine)).get("power") == "Running",
                    "alice's host to say it runs again",
                    timeout=30,
                )
                wait_listed(broker, tokens["alice"], mine, "Running")
                assert nodes.pod(mine)["metadata"]["uid"] != pod_uid
                pod_uid = nodes.pod(mine)["metadata"]["uid"]
                client = desktop(answer, f"restart-{round_}")
                figures.append(time.monotonic() - started)
                assert in_home(nodes, mine, "alice", "cat ~/notes.txt").strip() == "kept by alice"
            nodes.timings["personal: connect -> desktop, stopped host"] = (
                ", ".join(f"{f:.1f}" for f in figures)
                + f" s (median {statistics.median(figures):.1f}, max {max(figures):.1f})"
            )
            client.kill()
    finally:
        if client is not None:
            client.kill()
        broker.stop()

    # A host deleted takes its claim (and so its volume) with it.
    cluster.delete("SessionHost", theirs["host"])
    bobs_claim = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/home-{theirs['host']}"
    wait_for(
        lambda: nodes.kube.request("GET", bobs_claim)[0] == 404,
        60,
        what="bob's claim to be deleted with his host",
    )


# ---------------------------------------------------------------------------------------
# single sign-on: the chart's broker signs people on to pods on the real node

#: The ConfigMap the chart's broker publishes its public key in (the examples mount it).
LOGON_KEYS = "hostpool-logon-keys"
#: Signs on with single sign-on: in Keycloak's realm, in no users file of this module.
PERSON = "erin"


def connect_through(forward: PortForward, namespace: str, pool: str, token: str) -> Obj:
    """POST connect to the broker's Pod until it answers 200 (202 while a host starts)."""

    def placed() -> Obj | None:
        request = urllib.request.Request(
            f"http://127.0.0.1:{forward.local}/v1/namespaces/{namespace}/pools/{pool}/connect",
            data=b"{}",
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=90) as answer:
                body: Obj = json.loads(answer.read())
                return body if answer.status == 200 else None
        except OSError as error:
            # A refusal is an answer; a connection cut or timed out (the port-forward under
            # load, a connect held while a Pod starts) is asked again.
            if isinstance(error, urllib.error.HTTPError):
                raise
            assert forward.proc.poll() is None, "kubectl port-forward ended"
            return None

    found: Obj = wait_for(placed, 240, what=f"a connection to pool {pool}")
    return found


def account(nodes: RealCluster, pod: str, user: str) -> tuple[str, str]:
    """The user's uid and their home's owner, as the pod's desktop container sees them."""
    out = kubectl(
        nodes, "-n", nodes.namespace, "exec", pod, "-c", "desktop", "--",
        "sh", "-c", f"id -u {user}; stat -c %u /home/{user}",
    )  # fmt: skip
    uid, owner = out.split()
    return uid, owner


def test_single_sign_on_to_pods_on_the_real_node(
    nodes: RealCluster,
    operator_pod: Obj,
    pod_keycloak: Keycloak,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """broker.singleSignOn: the chart makes the key, the broker's Pod publishes its public
    half (ConfigMap hostpool-logon-keys, under the chart's Role) and the example templates'
    Pods mount it. erin, known to Keycloak and to no host's users file (alice and bob are in
    this module's: an account of the users file is never taken over by single sign-on),
    connects to a pooled and to a personal single sign-on pool: FreeRDP with the connect
    answer's one-time password shows each desktop, and her account on both Pods has the uid
    the broker recorded, her home owned by it. Her personal host's Pod deleted, the new Pod
    signs her on again with the same uid and her file is there, still hers."""
    del operator_pod
    install_client()
    ns = nodes.namespace
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    run_tool(
        [str(nodes.bin_dir / "helm"), "--kubeconfig", str(nodes.cp.kubeconfig), "upgrade", RELEASE,
         str(CHART_DIR), "-n", ns, "--reuse-values",
         "--set", "broker.enabled=true", "--set", "broker.replicas=1",
         "--set", f"broker.oidc.issuer={pod_keycloak.issuer(REALM)}",
         "--set", f"broker.oidc.audience={CLIENT}",
         "--set", "broker.oidc.allowInsecureIssuer=true",
         "--set", "broker.singleSignOn.enabled=true"]
    )  # fmt: skip
    selector = (
        f"app.kubernetes.io/name=hostpool-operator-broker,app.kubernetes.io/instance={RELEASE}"
    )
    logs.append(
        ("broker log", lambda: kubectl(nodes, "-n", ns, "logs", "--tail", "60", "-l", selector))
    )
    keys_path = f"/api/v1/namespaces/{ns}/configmaps/{LOGON_KEYS}"
    published = wait_for(
        lambda: nodes.kube.call("GET", keys_path)["data"]["keys.pem"],
        120,
        what="the broker to publish its public logon key",
        retry_on=(ApiError,),
    )
    assert published.count("BEGIN PUBLIC KEY") == 1

    # The upgrade rolls the broker (an earlier test may have one running already): the Pod
    # to talk to is a new one, Ready and not going.
    def signing_broker() -> Obj | None:
        return next(
            (
                p
                for p in pods(nodes, selector)
                if ready(p)
                and not p["metadata"].get("deletionTimestamp")
                and "--logon-key-file" in p["spec"]["containers"][0]["args"]
            ),
            None,
        )

    broker: Obj = wait_for(signing_broker, 120, what="the single sign-on broker's Pod Ready")
    forward = PortForward(nodes, broker["metadata"]["name"], 8443)
    forward.get("/healthz")
    # The hosts have a users file too (its accounts typed passwords sign on to, beside).
    put_desktop_users(nodes, PERSONAL_PASSWORDS)
    pooled = session_host_pool(nodes.images["--session-host"], agent_interval=1)
    pooled["metadata"]["name"] = "sso-pooled"
    pooled["spec"]["scaling"].update({"minHosts": 1, "maxHosts": 1})
    personal = personal_desktop_pool(nodes.images["--session-host"], agent_interval=1)
    personal["metadata"]["name"] = "sso-mine"
    personal["spec"]["scaling"]["maxHosts"] = 1
    for pool in (pooled, personal):
        pool["spec"]["entitlements"] = {"users": [PERSON]}
        pool["spec"].setdefault("connection", {})["singleSignOn"] = True
        nodes.kube.create(ns, pool)
    logs.append(("pods", lambda: kubectl(nodes, "-n", ns, "get", "pods,pvc", "-o", "wide")))
    token = pod_keycloak.token(REALM, CLIENT, CLIENT_SECRET, PERSON, f"{PERSON}-pw")
    display = VirtualDisplay(tmp_path / "xvfb.log")
    record = f"/api/v1/namespaces/{ns}/configmaps/{uids.record_name(PERSON)}"

    def signed_on(pool: str, step: str) -> tuple[Obj, RdpClient]:
        answer = connect_through(forward, ns, pool, token)
        logon = answer["logon"]
        assert logon["user"] == PERSON
        assert logon["password"] not in answer["rdpFile"]
        rdp = tmp_path / f"{step}.rdp"
        rdp.write_text(answer["rdpFile"], newline="")
        client = RdpClient(
            display, rdp, logon["password"], tmp_path / f"{step}-xfreerdp.log", tmp_path / "home"
        )
        logs.append((f"xfreerdp log ({step})", client.log_text))
        client.start()
        wait_for(
            lambda: (
                pixel(display.screenshot(tmp_path / f"{step}.png"), *BACKGROUND) == IMAGE_COLOUR
            ),
            90,
            what=f"{PERSON}'s desktop on {answer['host']} ({step})",
        )
        return answer, client

    with display:
        answer, client = signed_on("sso-pooled", "pooled")
        uid = str(nodes.kube.call("GET", record)["data"]["uid"])
        assert account(nodes, answer["host"], PERSON) == (uid, uid)
        client.kill()

        answer, client = signed_on("sso-mine", "personal")
        mine = answer["host"]
        assert account(nodes, mine, PERSON) == (uid, uid)
        in_home(nodes, mine, PERSON, "echo 'kept by erin' > ~/notes.txt")
        client.kill()
        pod_uid = nodes.pod(mine)["metadata"]["uid"]
        kubectl(nodes, "-n", ns, "delete", "pod", mine, "--wait=false")
        wait_for(
            lambda: (ready(p := nodes.pod(mine)) and p["metadata"]["uid"] != pod_uid) or None,
            180,
            what=f"a new Pod for {PERSON}'s personal host",
            retry_on=(ApiError,),
        )
        answer, client = signed_on("sso-mine", "re-created")
        assert answer["host"] == mine
        assert account(nodes, mine, PERSON) == (uid, uid)
        assert in_home(nodes, mine, PERSON, "stat -c %u ~/notes.txt; cat ~/notes.txt").split(
            "\n", 1
        ) == [uid, "kept by erin\n"]
        client.kill()
    forward.close()


def test_twenty_users_connecting_at_once_get_twenty_desktops_on_the_real_node(
    nodes: RealCluster, operator_pod: Obj
) -> None:
    """20 users, each connecting twice at once, to a personal pool with no hosts: the
    operator makes 20 hosts from the example's template, each with its Pod running on the
    real node and its own claim bound; each user's two requests land on their host, and no
    host or volume is shared."""
    del operator_pod
    ns = nodes.namespace
    cluster = Cluster(nodes.kube, ns)
    put_desktop_users(nodes, PERSONAL_PASSWORDS)  # the Pods mount it (nobody signs in here)
    pool = personal_desktop_pool(nodes.images["--session-host"], agent_interval=1)
    pool["metadata"]["name"] = "many"
    pool["spec"]["scaling"]["maxHosts"] = 24
    # 40 containers on a two-core node: requests small enough for the scheduler to fit all.
    template = pool["spec"]["scaling"]["hostTemplate"]["workload"]["spec"]
    for container in template["containers"] + template["initContainers"]:
        container["resources"] = {"requests": {"cpu": "10m", "memory": "32Mi"}}
    nodes.kube.create(ns, pool)
    users = [f"user{i:02d}" for i in range(20)]
    items = [(f"{user}-{tab}", "many", user) for user in users for tab in ("a", "b")]
    started = time.monotonic()
    cluster.create_requests_concurrently(items)
    placed = cluster.wait_assigned([name for name, _, _ in items], timeout=300.0)
    nodes.timings["personal: 20 users x 2 connects -> all placed"] = (
        f"{time.monotonic() - started:.1f} s"
    )
    host_of = {name: status(obj)["host"] for name, obj in placed.items()}
    for user in users:
        assert host_of[f"{user}-a"] == host_of[f"{user}-b"], (user, host_of)
    mine = {user: host_of[f"{user}-a"] for user in users}
    assert len(set(mine.values())) == 20, mine  # none shared
    hosts = {
        name: h for name, h in cluster.hosts().items() if h["spec"]["poolRef"]["name"] == "many"
    }
    assert {n: h["spec"].get("assignedUser") for n, h in hosts.items()} == {
        h: u for u, h in mine.items()
    }
    volumes = set()
    for host in mine.values():
        pod = nodes.pod(host)
        assert ready(pod), host
        assert pod["spec"]["nodeName"] == NODE, host
        claim = claim_of(nodes, host)
        assert claim["status"]["phase"] == "Bound", host
        volumes.add(claim["spec"]["volumeName"])
    assert len(volumes) == 20
    # Gone with the pool: the hosts, their Pods and their claims.
    cluster.delete("HostPool", "many")
    wait_for(
        lambda: (
            not [
                c
                for c in nodes.kube.call("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims")[
                    "items"
                ]
                if c["metadata"]["name"].startswith("home-many-")
            ]
        ),
        180,
        what="the pool's claims to go with it",
    )


#: The notice window's title band (operator/hostpool_operator/agent/desktop.py HEADER).
NOTICE_HEADER = "#1f3a5f"
REVISION = "hostpool.io/template-revision"


def colour_share(png: Path, colour: str) -> float:
    """The share of a picture's pixels that are exactly ``colour`` (``#rrggbb``)."""
    out = subprocess.run(
        ["convert", str(png), "-alpha", "off", "-format", "%c", "histogram:info:-"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    total = found = 0
    for line in out.splitlines():
        count, _, rest = line.strip().partition(":")
        if not count.isdigit():
            continue
        total += int(count)
        if f"#{colour[1:].upper()}" in rest.upper().split():
            found += int(count)
    return found / total if total else 0.0


def tag_image(nodes: RealCluster, image: str, tag: str) -> str:
    """``image`` under another tag in the node's containerd (a second image of the same
    content, as a patched image would be): the new name."""
    name = f"{image.rpartition(':')[0]}:{tag}"
    sock = nodes.cp.directory / "nodes" / NODE / "containerd.sock"
    subprocess.run(
        ["ctr", "--address", str(sock), "--namespace", "k8s.io", "images", "tag", "--force",
         image, name],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return name


def update_pods(nodes: RealCluster, pool: str) -> dict[str, Obj]:
    """The Pods of the pool's hosts (named after the pool)."""
    return {
        p["metadata"]["name"]: p
        for p in nodes.kube.call("GET", f"/api/v1/namespaces/{nodes.namespace}/pods")["items"]
        if p["metadata"]["name"].startswith(f"{pool}-")
    }


def image_of(pod: Obj) -> str:
    (desktop,) = [c for c in pod["spec"]["containers"] if c["name"] == "desktop"]
    return str(desktop["image"])


def set_image(cluster: Cluster, pool: Obj, image: str, **update: Any) -> None:
    """The pool's template with ``image`` in both containers (a new revision), and
    ``update`` merged into spec.update."""
    workload = pool["spec"]["scaling"]["hostTemplate"]["workload"]
    for container in workload["spec"]["containers"] + workload["spec"]["initContainers"]:
        container["image"] = image
        container["imagePullPolicy"] = "IfNotPresent"
    body = {"spec": {"scaling": {"hostTemplate": {"workload": workload}}, "update": update}}
    cluster.patch("HostPool", pool["metadata"]["name"], body)


def pool_update(cluster: Cluster, pool: str) -> Obj:
    found: Obj = status(cluster.pool(pool)).get("update") or {}
    return found


def update_in(cluster: Cluster, pool: str, phase: str, timeout: float) -> Obj:
    """Wait until the pool's status.update is in ``phase``: that status."""
    found: Obj = cluster.wait(
        lambda: (lambda u: u if u.get("phase") == phase else None)(pool_update(cluster, pool)),
        f"pool {pool}'s update {phase}",
        timeout=timeout,
    )
    return found


def only_image(nodes: RealCluster, pool: str, image: str) -> None:
    """Wait until the pool's Pods are one, of ``image`` (a replaced host's Pod takes its
    grace period to go)."""
    wait_for(
        lambda: [image_of(p) for p in update_pods(nodes, pool).values()] == [image] or None,
        60,
        what=f"pool {pool}'s one Pod to be of {image}",
    )


def update_pool(nodes: RealCluster, name: str, image: str, **spec: Any) -> Obj:
    """A pool of the session-host image for the update test, of one Ready host (updates one
    at a time, never below one serving), made; ``spec`` merged into its spec."""
    pool = session_host_pool(image, agent_interval=1)
    pool["metadata"]["name"] = name
    pool["spec"]["loadBalancer"]["maxSessionLimit"] = 2
    pool["spec"]["scaling"].update(
        minHosts=1, maxHosts=3, bufferSessions=0, scaleDownDelaySeconds=600
    )
    pool["spec"]["update"] = {"maxSurge": 1, "maxUnavailable": 0}
    pool["spec"].update(spec)
    nodes.kube.create(nodes.namespace, pool)
    return pool


def test_an_image_update_on_the_real_node_keeps_desktops_until_logoff(
    nodes: RealCluster,
    operator_pod: Obj,
    keycloak: Keycloak,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Two tags of the session-host image on the real node. alice's FreeRDP desktop is on
    pool upd's one Pod (tag A). (1) Tag B with WaitForLogoff: a Pod of tag B is made beside
    hers, her desktop keeps running; when she logs off her Pod is replaced. (2) Tag A again
    with ForceLogoff: the notice shows in her desktop (she is on tag B now), she is logged
    off at its deadline, and her Pod is replaced. Meanwhile on pool cnr: (3) a canary of an
    image that cannot be pulled fails the update with the kubelet's ErrImagePull, the
    outdated Pod untouched; tag B after it completes (the failed canary removed, never
    made again under its name)."""
    del operator_pod
    install_client()
    ns = nodes.namespace
    cluster = Cluster(nodes.kube, ns)
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    logs.append(("pools, hosts and requests", cluster.describe))
    put_desktop_users(nodes, PERSONAL_PASSWORDS)
    first_image = nodes.images["--session-host"]
    second_image = tag_image(nodes, first_image, "update-b")
    pool = update_pool(nodes, "upd", first_image, entitlements={"users": ["alice"]})
    canaried = update_pool(nodes, "cnr", first_image)

    def serving(name: str) -> Obj | None:
        ready_pods = [p for p in update_pods(nodes, name).values() if ready(p)]
        host = ready_pods[0]["metadata"]["name"] if ready_pods else None
        return ready_pods[0] if host is not None and host_ready(cluster, host) else None

    old = wait_for(lambda: serving("upd"), 120, what="pool upd's host taking sessions")
    before = wait_for(lambda: serving("cnr"), 120, what="pool cnr's host taking sessions")
    old_name, old_uid = old["metadata"]["name"], old["metadata"]["uid"]

    # (3) begins: a canary that cannot be pulled, watched for its minute while (1) and (2)
    # run.
    missing = f"{first_image.rpartition(':')[0]}:not-there"
    canary = {"canary": {"hosts": 1, "readyTimeoutMinutes": 1, "observeMinutes": 0}}
    set_image(cluster, canaried, missing, **canary)

    broker = BrokerProcess(
        nodes.cp.kubeconfig, keycloak.issuer(REALM), CLIENT, [ns], tmp_path / "broker.log"
    )
    logs.append(("broker log", lambda: broker.log_tail(60)))
    broker.start()
    token = keycloak_token(keycloak, "alice")
    display = VirtualDisplay(tmp_path / "xvfb.log")
    clients: list[RdpClient] = []

    def desktop(what: str) -> tuple[Obj, RdpClient]:
        answer, _ = connect_until_placed(broker, ns, "upd", token)
        rdp = tmp_path / f"alice-{len(clients)}.rdp"
        rdp.write_text(answer["rdpFile"], newline="")
        client = RdpClient(
            display, rdp, DESKTOP_PASSWORD, tmp_path / f"xfreerdp-{len(clients)}.log",
            tmp_path / "home",
        )  # fmt: skip
        clients.append(client)
        logs.append((f"xfreerdp log ({what})", client.log_text))
        client.start()
        cluster.wait(
            lambda: status(cluster.request(answer["request"])).get("sessionState") == "Active",
            f"alice Active ({what})", timeout=45,
        )  # fmt: skip
        return answer, client

    def showing(colour: str, name: str) -> bool:
        return pixel(display.screenshot(tmp_path / name), *BACKGROUND) == colour

    try:
        with display:
            answer, client = desktop("tag A")
            assert answer["host"] == old_name
            wait_for(lambda: showing(IMAGE_COLOUR, "a.png"), 15, what="alice's desktop")

            # (1) Tag B, WaitForLogoff: a Pod of tag B beside alice's, her desktop on.
            set_image(cluster, pool, second_image)
            started = time.monotonic()
            new = wait_for(
                lambda: next((p for n, p in update_pods(nodes, "upd").items()
                              if n != old_name and image_of(p) == second_image and ready(p)),
                             None),
                120, what="a Pod of tag B beside alice's",
            )  # fmt: skip
            nodes.timings["update: new tag -> replacement Pod Ready"] = (
                f"{time.monotonic() - started:.1f} s"
            )
            time.sleep(3)  # passes go by: the update ends no session
            assert update_pods(nodes, "upd")[old_name]["metadata"]["uid"] == old_uid
            assert status(cluster.request(answer["request"]))["sessionState"] == "Active"
            assert showing(IMAGE_COLOUR, "a-during-update.png")
            progress = pool_update(cluster, "upd")
            assert progress.get("phase") == "Progressing", progress
            client.kill()
            reply = broker.end_session(ns, "upd", token)  # alice logs off
            assert reply.status in (200, 202, 204), reply.text
            logged_off = time.monotonic()
            cluster.wait(
                lambda: old_name not in update_pods(nodes, "upd") or None,
                "alice's old Pod to go once she logged off", timeout=120,
            )  # fmt: skip
            nodes.timings["update: logoff -> outdated Pod deleted"] = (
                f"{time.monotonic() - logged_off:.1f} s"
            )
            done = update_in(cluster, "upd", "Complete", 60)
            assert done["updatedHosts"] == 1, done
            only_image(nodes, "upd", second_image)

            # (2) Tag A again with ForceLogoff: the notice in her desktop, then the logoff.
            answer, client = desktop("tag B")
            assert answer["host"] == new["metadata"]["name"]
            wait_for(lambda: showing(IMAGE_COLOUR, "b.png"), 15, what="alice's desktop on tag B")
            force = {
                "strategy": "ForceLogoff",
                "logoffDelayMinutes": 1,
                "logoffMessage": "Your desktop moves to a new image: save your work.",
            }
            set_image(cluster, pool, first_image, **force)
            drained = time.monotonic()
            noticed = wait_for(
                lambda: (status(cluster.request(answer["request"])).get("logoff") or {}).get(
                    "shownAt"
                ),
                120, what="the agent to show alice the logoff notice",
            )  # fmt: skip
            shot = tmp_path / "notice.png"
            wait_for(
                lambda: colour_share(display.screenshot(shot), NOTICE_HEADER) > 0.005,
                15, what="the notice window in alice's desktop (its title band)",
            )  # fmt: skip
            logs.append(("notice screenshot", lambda: str(shot)))
            deadline = status(cluster.request(answer["request"]))["logoff"]["deadline"]

            # (3) meanwhile: the canary failed, with the kubelet's words; the outdated
            # host untouched. Tag B after it: complete, one host.
            failed = update_in(cluster, "cnr", "Failed", 150)
            events = [e for e in cluster.events_for("cnr") if e["reason"] == "UpdateFailed"]
            assert events, cluster.events_for("cnr")
            assert "ErrImagePull" in events[0]["message"], events[0]["message"]
            nodes.timings["update: canary of an unpullable image -> Failed"] = failed["message"]
            cnr_pods = update_pods(nodes, "cnr")
            assert (
                cnr_pods[before["metadata"]["name"]]["metadata"]["uid"] == before["metadata"]["uid"]
            )
            assert host_ready(cluster, before["metadata"]["name"])  # still taking sessions
            set_image(cluster, canaried, second_image, canary=None)
            update_in(cluster, "cnr", "Complete", 120)
            only_image(nodes, "cnr", second_image)

            cluster.wait(
                lambda: new["metadata"]["name"] not in update_pods(nodes, "upd") or None,
                "alice logged off at the deadline and her Pod replaced", timeout=150,
            )  # fmt: skip
            took = time.monotonic() - drained
            nodes.timings["update ForceLogoff: notice shown at"] = noticed
            nodes.timings["update ForceLogoff: logoff deadline"] = deadline
            nodes.timings["update ForceLogoff: new tag -> old Pod gone"] = f"{took:.1f} s"
            assert took >= 50, took  # not before the deadline, a minute after the drain
            update_in(cluster, "upd", "Complete", 60)
            only_image(nodes, "upd", first_image)
            reasons = {e["reason"] for e in cluster.events_for("upd")}
            assert {"UpdateStarted", "HostUpdated", "UpdateComplete"} <= reasons, reasons
    finally:
        for client in clients:
            client.kill()
        broker.stop()
        cluster.delete("HostPool", "upd")
        cluster.delete("HostPool", "cnr")
