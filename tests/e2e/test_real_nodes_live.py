"""Real nodes (``hack/cluster/cluster.sh`` with ``HOSTPOOL_REAL_NODES``): a kubelet with
containerd runs the project's image.

The module starts a control plane of its own, in a temporary directory, with one real node
(``real-node-1``) and no fake nodes: the kubelet built from the same Kubernetes module as the
control plane (``hack/cluster/tools.sh --nodes``), Debian's containerd, runc and bridge CNI.
The operator image (``make image``) is imported into the node's containerd. A pod running it
serves HTTP and becomes Ready by its readiness probe; the host reaches it at its pod IP;
``kubectl logs`` and ``kubectl exec`` work; the pod calls the API server in-cluster, with its
mounted ServiceAccount token, at ``$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``; the
kubelet answers anonymous calls with 401 and the API server's client certificate with 200.
After the control plane stops, nothing of the node is left (processes, mounts, cgroups, the
bridge, iptables chains, files in fixed paths).

Figures printed (run with ``-s``): the kubelet's build (or cache) time, node start -> Ready,
image import, pod create -> Ready, the kubelet's and containerd's RSS and CPU.

Where real nodes cannot run (not root, no apt-get for containerd) or podman cannot be had, the
tests skip, saying why; with ``CI=true`` on a machine with apt-get they fail instead.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from support.kube import wait_for
from support.real_nodes import NODE, RealCluster, leftovers, node_traces, real_node_cluster

PORT = 8080
#: The pod: the image's python3 serving HTTP (and leaving at once on SIGTERM: as PID 1 it
#: would otherwise ignore it until the grace period ends).
SERVE = (
    "import http.server, signal, sys\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "print('serving on', sys.argv[1], flush=True)\n"
    "http.server.HTTPServer(('', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler)"
    ".serve_forever()\n"
)
#: In the pod: the API server through the in-cluster address and the mounted token and CA
#: (what the kubernetes client's and kopf's in-cluster login read).
IN_CLUSTER = """
import json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
env = os.environ
base = "https://%s:%s" % (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"])
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
token = open(sa + "/token").read()
headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
def call(path, body=None):
    data = json.dumps(body).encode() if body else None
    req = urllib.request.Request(base + path, data=data, headers=headers)
    return json.load(urllib.request.urlopen(req, context=ctx, timeout=10))
api = call("/api")
review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
me = call("/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
user = me["status"]["userInfo"]["username"]
print(json.dumps({"base": base, "versions": api["versions"], "user": user}))
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    with real_node_cluster(tmp_path_factory) as real:
        yield real


def serving_pod(name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "web",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", SERVE, str(PORT)],
                    "workingDir": "/tmp",
                    "ports": [{"containerPort": PORT}],
                    "readinessProbe": {
                        "httpGet": {"path": "/", "port": PORT},
                        "periodSeconds": 1,
                    },
                }
            ],
        },
    }


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def web(cluster: RealCluster) -> dict[str, Any]:
    """The serving pod, Ready (module scope: the later tests use it)."""
    created = time.monotonic()
    cluster.kube.call(
        "POST",
        f"/api/v1/namespaces/{cluster.namespace}/pods",
        body=serving_pod("web", cluster.image),
    )

    def ready() -> dict[str, Any] | None:
        pod = cluster.pod("web")
        return pod if pod_ready(pod) else None

    pod = wait_for(
        ready,
        60,
        what="the pod to become Ready on the real node",
        interval=0.05,
        show=lambda: json.dumps(cluster.pod("web").get("status"), indent=1)[:3000],
    )
    cluster.timings["pod create -> Ready (readiness probe every 1 s)"] = (
        f"{time.monotonic() - created:.2f} s"
    )
    return pod


def test_node_is_ready(cluster: RealCluster) -> None:
    node = cluster.node()
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready, node["status"]["conditions"]
    assert ready[0]["status"] == "True", node["status"]["conditions"]
    info = node["status"]["nodeInfo"]
    version = cluster.kube.call("GET", "/version")
    # The kubelet is built from the control plane's own Kubernetes module.
    assert info["kubeletVersion"] == version["gitVersion"]
    assert info["containerRuntimeVersion"].startswith("containerd://")
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == cluster.state()["NODES_NET"] + ".1"
    assert not [t for t in node["spec"].get("taints", []) if "not-ready" in t["key"]]


def test_pod_serves_and_is_reached_from_the_host(cluster: RealCluster, web: dict[str, Any]) -> None:
    assert web["spec"]["nodeName"] == NODE
    ip = web["status"]["podIP"]
    assert ip.startswith(cluster.state()["NODES_NET"] + "."), ip
    with urllib.request.urlopen(f"http://{ip}:{PORT}/", timeout=10) as response:
        assert response.status == 200


def test_logs_and_exec(cluster: RealCluster, web: dict[str, Any]) -> None:
    del web
    logs = cluster.run_kubectl("-n", cluster.namespace, "logs", "web")
    assert f"serving on {PORT}" in logs
    assert '"GET / HTTP/1.1" 200' in logs  # the readiness probe's requests
    out = cluster.run_kubectl(
        "-n",
        cluster.namespace,
        "exec",
        "web",
        "--",
        "python3",
        "-c",
        "import os; print(os.getuid(), 6 * 7)",
    )
    assert out.split()[-1] == "42", out


def test_pod_calls_the_api_server_in_cluster(cluster: RealCluster, web: dict[str, Any]) -> None:
    del web
    env = cluster.run_kubectl("-n", cluster.namespace, "exec", "web", "--", "env")
    assert "KUBERNETES_SERVICE_HOST=10.0.0.1" in env.splitlines()
    out = cluster.run_kubectl(
        "-n", cluster.namespace, "exec", "web", "--", "python3", "-c", IN_CLUSTER
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert result["versions"] == ["v1"]
    assert result["user"] == f"system:serviceaccount:{cluster.namespace}:default"


def test_kubelet_refuses_anonymous_calls(cluster: RealCluster, web: dict[str, Any]) -> None:
    del web
    url = f"https://{cluster.state()['NODES_NET']}.1:10250/pods"
    anonymous = ssl.create_default_context(cafile=str(cluster.cp.directory / "pki" / "ca.crt"))
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, context=anonymous, timeout=10)
    assert refused.value.code == 401
    # The API server's own client certificate (system:masters) is let in.
    pki = cluster.cp.directory / "pki"
    client = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    client.load_cert_chain(
        pki / "apiserver-kubelet-client.crt", pki / "apiserver-kubelet-client.key"
    )
    with urllib.request.urlopen(url, context=client, timeout=10) as response:
        pods = json.load(response)
    assert "web" in [p["metadata"]["name"] for p in pods["items"]]


def claim_pod(name: str, image: str, script: str) -> dict[str, Any]:
    """A pod that runs ``script`` with python3 as a user other than root, the claim ``data``
    mounted at /data."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", script],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }


def test_claims_are_provisioned_on_the_node(cluster: RealCluster) -> None:
    """The local-path provisioner (the default storage class): a claim is bound once its
    pod is scheduled, to a directory on the node under the cluster's volumes; what one pod
    writes there the next reads; deleting the claim deletes the volume and its directory."""
    ns, kube = cluster.namespace, cluster.kube
    kube.call(
        "POST",
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        body={
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    claim_path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data"
    assert kube.call("GET", claim_path)["spec"]["storageClassName"] == "local-path"
    created = time.monotonic()
    write = "open('/data/note.txt', 'w').write('kept')"
    kube.call(
        "POST", f"/api/v1/namespaces/{ns}/pods", body=claim_pod("writer", cluster.image, write)
    )

    def finished(name: str) -> dict[str, Any] | None:
        pod = cluster.pod(name)
        phase = pod.get("status", {}).get("phase")
        assert phase != "Failed", json.dumps(pod.get("status"), indent=1)[:3000]
        return pod if phase == "Succeeded" else None

    show = lambda: cluster.run_kubectl("-n", ns, "get", "pvc,pods", "-o", "wide")  # noqa: E731
    wait_for(lambda: finished("writer"), 90, what="the writing pod to succeed", show=show)
    cluster.timings["claim + pod -> volume provisioned, pod done"] = (
        f"{time.monotonic() - created:.2f} s"
    )
    volume = kube.call("GET", claim_path)["spec"]["volumeName"]
    pv = kube.call("GET", f"/api/v1/persistentvolumes/{volume}")
    directory = pv["spec"]["hostPath"]["path"]
    assert directory.startswith(str(cluster.cp.directory / "volumes") + "/")
    with open(f"{directory}/note.txt") as note:
        assert note.read() == "kept"

    read = "import sys; sys.exit(open('/data/note.txt').read() != 'kept')"
    kube.call(
        "POST", f"/api/v1/namespaces/{ns}/pods", body=claim_pod("reader", cluster.image, read)
    )
    wait_for(lambda: finished("reader"), 60, what="the reading pod to succeed", show=show)

    for name in ("writer", "reader"):
        kube.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
    kube.call("DELETE", claim_path)

    wait_for(
        lambda: (
            kube.request("GET", f"/api/v1/persistentvolumes/{volume}")[0] == 404
            and not os.path.exists(directory)
        ),
        90,
        what="the volume and its directory to be deleted",
        show=show,
    )


def test_stop_leaves_nothing(cluster: RealCluster, web: dict[str, Any]) -> None:
    """Last: stops the control plane and checks that nothing of the node is left."""
    del web
    for u in cluster.usage:
        cluster.timings[u.name] = u.report()
    node = node_traces(cluster.cp.directory, cluster.state(), [u.pid for u in cluster.usage])
    running = leftovers(node)
    # The checks see the node's things while it runs (so they would see them left).
    assert f"bridge {node.bridge}" in running
    assert any(s.startswith("mount ") for s in running)
    assert any(s.startswith("cgroup ") for s in running)
    assert any(s.startswith("/run/containerd/s/") for s in running), running

    stopped = time.monotonic()
    cluster.cp.stop()
    cluster.timings["cluster.sh down"] = f"{time.monotonic() - stopped:.1f} s"
    left = leftovers(node)
    assert not left, "left behind after cluster.sh down:\n  " + "\n  ".join(left)
    assert not cluster.cp.is_running()

    print("\nreal node figures:\n" + "\n".join(f"  {k}: {v}" for k, v in cluster.timings.items()))
    sys.stdout.flush()
