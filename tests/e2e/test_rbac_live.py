"""The chart's RBAC, proven on a real API server: the operator runs under its ServiceAccount.

Each test renders the chart with the project's helm (``helm template``), applies only its
ServiceAccount and RBAC objects with the admin kubeconfig, gets a token for the
ServiceAccount through the TokenRequest API (``kubectl create token``), writes a kubeconfig
with nothing but that token (server and CA from the admin kubeconfig), and runs the operator
as a subprocess with the arguments of the chart's Deployment under that identity. It then
drives placement, scale-up and scale-down, checks that the operator's log holds no
authorization refusal, and that the identity is refused (403) what its role does not grant.

The workload rules (chart value ``workloadResources``) are proven with real requests under
the same token: with the default values the identity creates, gets, lists, watches and
deletes a Pod in the watched namespace, and is refused Deployments, Secrets and patching the
Pod; with a custom resource in ``workloadResources`` (a CRD installed for the test) that
resource gets the same five calls, and an empty list grants none.

The namespaced test also takes the objects the Argo CD health checks are tested against
(``tests/chart/test_argocd_health.py``): it runs the Lua checks on the live objects, and
with ``HOSTPOOL_UPDATE_ARGOCD_FIXTURES=1`` writes them to ``tests/support/fixtures/argocd/``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import test_plans_live as plans
from support import builders
from support.argocd_health import health, write_fixture
from support.helm import helm_template
from support.identity import token_kubeconfig
from support.kube import (
    Kube,
    resource_path,
    unique_name,
    wait_default_service_account,
    wait_for,
)
from support.ports import free_port

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
#: Applied with the RBAC: the FlowSchema that gives the identity's Lease requests a level.
APPLIED_KINDS = (*RBAC_KINDS, "FlowSchema")
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding", "FlowSchema")
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
STARTED_LINE = "hostpool-operator started"
UPDATE_FIXTURES_ENV = "HOSTPOOL_UPDATE_ARGOCD_FIXTURES"

#: A refusal of the API server in the operator's log: an RBAC denial ("... is forbidden:
#: User ... cannot list resource ..."), a 403 status, a kopf APIForbiddenError.
#: A refusal in a log line: the word, or status 403 (not the milliseconds of a timestamp
#: such as "22:31:42,403").
FORBIDDEN = re.compile(r"forbidden|(?<![,.:\d])\b403\b", re.IGNORECASE)
#: The one refusal that is no RBAC matter: writing into a namespace being deleted (left
#: over from an earlier test) is refused with reason Forbidden as well.
TERMINATING = "because it is being terminated"
#: How long the waits here may take (polling every 0.2 s; an exception fails at once).
WAIT_SECONDS = 45

#: The workload verbs the chart grants on each entry of ``workloadResources``.
WORKLOAD_VERBS = ("get", "list", "watch", "create", "delete")
#: A custom workload kind for the test: its CRD is created (and removed) by ``desktop_crd``.
DESKTOP_GROUP = "vdi.example.com"
DESKTOP_CRD_NAME = f"desktops.{DESKTOP_GROUP}"
CRD_BASE = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

Obj = dict[str, Any]


# ---------------------------------------------------------------------------------------
# tools


def run_tool(argv: list[str], *, stdin: str | None = None, timeout: float = 120) -> str:
    proc = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}"
        )
    return proc.stdout


# ---------------------------------------------------------------------------------------
# the ServiceAccount's identity


@dataclass
class Identity:
    """The chart's ServiceAccount, installed, with a kubeconfig that holds only its token."""

    docs: list[Obj]
    kubeconfig: Path
    api: Kube
    username: str

    def of_kind(self, kind: str) -> list[Obj]:
        return [d for d in self.docs if d["kind"] == kind]

    release_namespace: str = ""

    @property
    def operator_args(self) -> list[str]:
        """The operator's arguments exactly as the chart's Deployment passes them."""
        (deployment,) = self.of_kind("Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        return [str(a) for a in container["args"]]

    @property
    def process_args(self) -> list[str]:
        """The Deployment's arguments, plus what the pod's environment would decide: in a
        pod the leader-election Lease goes to the pod's namespace (read from the mounted
        ServiceAccount files); a process outside says so with ``--lease-namespace``."""
        args = self.operator_args
        if "--no-leader-election" not in args and supports_option("--lease-namespace"):
            args = [*args, "--lease-namespace", self.release_namespace]
        return args


def supports_option(option: str) -> bool:
    """Whether ``hostpool-operator run`` has this option (read from its --help)."""
    proc = subprocess.run(
        [sys.executable, "-m", "hostpool_operator", "run", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return option in proc.stdout


@pytest.fixture
def install_identity(
    kube: Kube, bin_dir: Path, tmp_path: Path
) -> Iterator[Callable[[str, dict[str, Any]], Identity]]:
    """Render the chart for a release namespace and values; apply its ServiceAccount and RBAC;
    return the identity. Cluster-scoped RBAC objects are deleted afterwards."""
    kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(kube.kubeconfig)]
    applied: list[str] = []

    def install(release_namespace: str, values: dict[str, Any]) -> Identity:
        release = unique_name("rbac", max_length=20)
        # The operator's objects only: the host agents' (component "agent": their
        # ServiceAccounts, Role and admission policy) are tests/e2e/test_agent_security_live.py's,
        # the roles for people and brokers (user-roles, broker, session-admin)
        # test_roles_live.py's.
        docs = [
            d
            for d in helm_template(
                bin_dir / "helm", values, release=release, namespace=release_namespace
            )
            if d["metadata"].get("labels", {}).get("app.kubernetes.io/component")
            not in ("agent", "user-roles", "broker", "session-admin")
        ]
        rbac = [d for d in docs if d["kind"] in APPLIED_KINDS]
        manifest = yaml.safe_dump_all(rbac)
        run_tool([*kubectl, "apply", "-f", "-"], stdin=manifest)
        applied.append(yaml.safe_dump_all([d for d in rbac if d["kind"] in CLUSTER_SCOPED]))
        (sa,) = [d for d in rbac if d["kind"] == "ServiceAccount"]
        name = sa["metadata"]["name"]
        token = run_tool(
            [*kubectl, "create", "token", name, "-n", release_namespace, "--duration", "1h"]
        ).strip()
        path = token_kubeconfig(kube.kubeconfig, token, tmp_path / f"{release}.kubeconfig")
        api = Kube.connect(path)
        return Identity(
            docs, path, api, f"system:serviceaccount:{release_namespace}:{name}", release_namespace
        )

    yield install
    for manifest in applied:
        if manifest.strip():
            run_tool(
                [*kubectl, "delete", "--ignore-not-found", "--wait=false", "-f", "-"],
                stdin=manifest,
            )


# ---------------------------------------------------------------------------------------
# the operator under that identity


@dataclass
class OperatorRun:
    """``python -m hostpool_operator run ARGS`` with ``KUBECONFIG`` set to the identity's."""

    kubeconfig: Path
    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None)

    def start(self, timeout: float = 60) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("KUBERNETES_SERVICE_HOST", None)  # never the in-cluster login
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hostpool_operator", "run", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while STARTED_LINE not in self.log():
            if self.proc.poll() is not None:
                raise AssertionError(f"the operator exited ({self.proc.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the operator did not start in {timeout}s:\n{self.log()}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def refusals(self) -> list[str]:
        """Log lines that report a refusal by the API server (except terminating namespaces)."""
        return [
            line
            for line in self.log().splitlines()
            if FORBIDDEN.search(line) and TERMINATING not in line
        ]


@pytest.fixture
def operator_run() -> Iterator[list[OperatorRun]]:
    """Operators started by a test; stopped afterwards. Their log tail goes to stderr at
    teardown, which pytest shows only when the test failed."""
    runs: list[OperatorRun] = []
    yield runs
    for run in runs:
        run.stop()
        sys.stderr.write(f"---- operator log {run.log_path} (tail)\n{run.log()[-12000:]}\n")


def start_operator(runs: list[OperatorRun], identity: Identity, tmp_path: Path) -> OperatorRun:
    run = OperatorRun(identity.kubeconfig, identity.process_args, tmp_path / "operator.log")
    runs.append(run)
    run.start()
    return run


# ---------------------------------------------------------------------------------------
# objects


def scaling_pool(name: str, *, limit: int, max_hosts: int) -> Obj:
    """A DepthFirst pool that may create hosts, and removes empty ones after 1 s."""
    return builders.pool(
        name,
        "DepthFirst",
        limit,
        scaling={
            "minHosts": 0,
            "maxHosts": max_hosts,
            "bufferSessions": 0,
            "scaleDownDelaySeconds": 1,
            "hostTemplate": {"metadata": {"labels": {"origin": "scaling"}}, "spec": {}},
        },
    )


def items(kube: Kube, kind: str, namespace: str) -> list[Obj]:
    listing: Obj = kube.call("GET", resource_path(kind, namespace))
    found: list[Obj] = listing["items"]
    return found


def status_of(obj: Obj) -> Obj:
    value = obj.get("status")
    return value if isinstance(value, dict) else {}


def cond(obj: Obj, type_: str) -> Obj:
    for c in status_of(obj).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return {}


def wait_obj(
    kube: Kube, kind: str, namespace: str, name: str, check: Callable[[Obj], bool], what: str
) -> Obj:
    def current() -> Obj | None:
        obj = kube.get(kind, namespace, name)
        return obj if check(obj) else None

    def last() -> str:
        return f"its status now: {json.dumps(kube.get(kind, namespace, name).get('status'))}"

    return wait_for(current, WAIT_SECONDS, what=f"{kind} {name}: {what}", show=last)


def phases(kube: Kube, namespace: str) -> dict[str, tuple[str | None, str | None]]:
    return {
        o["metadata"]["name"]: (status_of(o).get("phase"), status_of(o).get("host"))
        for o in items(kube, "SessionRequest", namespace)
    }


def wait_assigned(kube: Kube, namespace: str, names: list[str]) -> dict[str, str]:
    def assigned() -> dict[str, str] | None:
        now = phases(kube, namespace)
        if all(now.get(n, (None, None))[0] == "Assigned" for n in names):
            return {n: str(now[n][1]) for n in names}
        return None

    return wait_for(
        assigned,
        WAIT_SECONDS,
        what=f"{names} Assigned",
        show=lambda: f"requests now: {phases(kube, namespace)}",
    )


def managed_hosts(kube: Kube, namespace: str) -> list[Obj]:
    return [
        h
        for h in items(kube, "SessionHost", namespace)
        if h["metadata"].get("labels", {}).get("hostpool.io/managed-by") == "hostpool-operator"
    ]


def assert_refused(identity: Identity, method: str, path: str, body: Any = None) -> None:
    kind = "application/merge-patch+json" if method == "PATCH" else "application/json"
    code, answer = identity.api.request(method, path, body=body, content_type=kind)
    assert code == 403, f"{identity.username}: {method} {path} answered {code}, not 403: {answer}"
    assert isinstance(answer, dict)
    assert answer.get("reason") == "Forbidden"
    assert identity.username in answer.get("message", "")


def pod_manifest(name: str) -> Obj:
    """A pod for the fake nodes (it tolerates their taint); on a cluster with real nodes and
    no node labelled type=kwok it just stays Pending, which is all these tests need."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [{"name": "desktop", "image": "example.invalid/desktop:1"}],
        },
    }


def desktop_manifest(name: str) -> Obj:
    return {
        "apiVersion": f"{DESKTOP_GROUP}/v1",
        "kind": "Desktop",
        "metadata": {"name": name},
        "spec": {"image": "example.invalid/desktop:1"},
    }


def pods_path(namespace: str | None = None) -> str:
    return f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"


def desktops_path(namespace: str) -> str:
    return f"/apis/{DESKTOP_GROUP}/v1/namespaces/{namespace}/desktops"


def wait_role_in_effect(identity: Identity, namespace: str) -> None:
    """Until the API server's authorizer has seen the new role and binding, even granted
    calls are refused: wait until a SelfSubjectAccessReview for one of the operator's fixed
    rules (list sessionhosts) is allowed."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "group": "hostpool.io",
                "resource": "sessionhosts",
                "verb": "list",
                "namespace": namespace,
            }
        },
    }
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

    def allowed() -> bool:
        answer = identity.api.call("POST", path, body=review)
        return bool(answer["status"].get("allowed"))

    wait_for(allowed, WAIT_SECONDS, what=f"the role of {identity.username} in effect")


#: Every verb RBAC knows for a resource collection or object.
ALL_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


def allowed_verbs(
    identity: Identity, group: str, resource: str, namespace: str, subresource: str = ""
) -> set[str]:
    """The verbs of ALL_VERBS the identity may use on ``resource`` in ``namespace``, each
    asked of the API server with a SelfSubjectAccessReview under the identity's token."""
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    allowed: set[str] = set()
    for verb in ALL_VERBS:
        attributes = {
            "group": group,
            "resource": resource,
            "subresource": subresource,
            "verb": verb,
            "namespace": namespace,
        }
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        if identity.api.call("POST", path, body=review)["status"].get("allowed"):
            allowed.add(verb)
    return allowed


def watch_events(identity: Identity, collection: str, resource_version: str) -> list[Obj]:
    """The events of a real watch from ``resource_version``, which the server ends after
    2 s (``timeoutSeconds``)."""
    code, answer = identity.api.request(
        "GET",
        collection,
        query={"watch": "true", "resourceVersion": resource_version, "timeoutSeconds": "2"},
    )
    assert code == 200, f"{identity.username}: watch {collection} answered {code}: {answer}"
    if isinstance(answer, dict):  # a single event line decodes as one object
        return [answer]
    return [json.loads(line) for line in str(answer or "").splitlines() if line.strip()]


def assert_workload_calls(identity: Identity, kube: Kube, collection: str, body: Obj) -> None:
    """The identity's own requests on one workload resource: list, create, get, list, watch
    (the ADDED event of the object it created) and delete all succeed; patching it (a verb
    the chart does not grant) is refused. The admin then sees the object gone."""
    name = body["metadata"]["name"]
    who = identity.username

    def ok(method: str, path: str, codes: tuple[int, ...], **kwargs: Any) -> Any:
        code, answer = identity.api.request(method, path, **kwargs)
        assert code in codes, f"{who}: {method} {path} answered {code}: {answer}"
        return answer

    before = ok("GET", collection, (200,))
    created = ok("POST", collection, (201,), body=body)
    uid = created["metadata"]["uid"]
    assert ok("GET", f"{collection}/{name}", (200,))["metadata"]["uid"] == uid
    listing = ok("GET", collection, (200,))
    assert uid in [o["metadata"]["uid"] for o in listing["items"]]
    events = watch_events(identity, collection, before["metadata"]["resourceVersion"])
    added = [e for e in events if e.get("type") == "ADDED"]
    assert uid in [e["object"]["metadata"]["uid"] for e in added], events
    assert_refused(
        identity, "PATCH", f"{collection}/{name}", {"metadata": {"labels": {"patched": "yes"}}}
    )
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    ok("DELETE", f"{collection}/{name}", (200, 202), body=options)
    wait_for(
        lambda: kube.request("GET", f"{collection}/{name}")[0] == 404,
        WAIT_SECONDS,
        what=f"{collection}/{name} deleted by {who}",
    )


def assert_pod_workloads(identity: Identity, kube: Kube, namespace: str) -> None:
    """Default workloadResources: Pods in the watched namespace, all five verbs; no
    Deployments, no Secrets."""
    wait_default_service_account(kube, namespace, WAIT_SECONDS)
    assert_workload_calls(identity, kube, pods_path(namespace), pod_manifest("workload-pod"))
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "desktops"},
        "spec": {
            "selector": {"matchLabels": {"app": "desktop"}},
            "template": {
                "metadata": {"labels": {"app": "desktop"}},
                "spec": pod_manifest("x")["spec"],
            },
        },
    }
    assert_refused(
        identity, "POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment
    )
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {}}
    assert_refused(identity, "POST", f"/api/v1/namespaces/{namespace}/secrets", secret)


def assert_probes(identity: Identity) -> None:
    """The liveness probe and the metrics endpoint the chart points at answer."""
    args = identity.operator_args
    liveness = args[args.index("--liveness") + 1].replace("0.0.0.0", "127.0.0.1")
    metrics = args[args.index("--metrics-address") + 1].replace("0.0.0.0", "127.0.0.1")
    with urllib.request.urlopen(liveness, timeout=10) as answer:
        assert answer.status == 200
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as answer:
        assert b"hostpool_assignments_total" in answer.read()


def chart_ports() -> dict[str, Any]:
    return {
        "operator.livenessPort": free_port(),
        "metrics.port": free_port(),
        "operator.statusInterval": 0.2,
        "operator.logFormat": "text",
    }


# ---------------------------------------------------------------------------------------
# the tests


def priority_level_of_lease_requests(identity: Identity) -> str | None:
    """The uid of the APF priority level the API server put the identity's GET of the
    operator's Lease in (its answer's ``X-Kubernetes-PF-PriorityLevel-UID``)."""
    client = identity.api.api_client
    method, url, headers, _, _ = client.param_serialize(
        method="GET",
        resource_path=(
            f"/apis/coordination.k8s.io/v1/namespaces/{identity.release_namespace}"
            "/leases/hostpool-operator"
        ),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = client.call_api(method, url, header_params=headers, _request_timeout=30)
    response.read()
    assert response.status == 200, response.status
    level: str | None = response.getheader("X-Kubernetes-PF-PriorityLevel-UID")
    return level


def test_clusterwide_role_places_scales_up_and_down(
    kube: Kube,
    namespace: str,
    install_identity: Callable[[str, dict[str, Any]], Identity],
    operator_run: list[OperatorRun],
    tmp_path: Path,
) -> None:
    identity = install_identity(namespace, chart_ports())
    assert sorted(d["kind"] for d in identity.docs if d["kind"] in RBAC_KINDS) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",  # the leader-election Lease, in the release namespace
        "RoleBinding",
        "ServiceAccount",
    ]
    assert "--namespace" not in identity.operator_args
    operator = start_operator(operator_run, identity, tmp_path)
    # The chart's FlowSchema puts the Lease's renewals in the API server's own level for
    # leader election, not behind the workloads of every other service account.
    (schema,) = identity.of_kind("FlowSchema")
    level = kube.call("GET", f"{FLOWCONTROL}/prioritylevelconfigurations/leader-election")
    wait_for(
        lambda: priority_level_of_lease_requests(identity) == level["metadata"]["uid"] or None,
        WAIT_SECONDS,
        what=f"the Lease's requests in level leader-election ({schema['metadata']['name']})",
    )

    # Placement: depth-first fills one static host, then the next.
    kube.create(namespace, scaling_pool("desk", limit=2, max_hosts=4))
    for name in ("static-1", "static-2"):
        kube.create(namespace, builders.host(name, "desk", drainMode=False))
    first = [f"r{i}" for i in range(1, 5)]
    for name in first:
        kube.create(namespace, builders.request(name, "desk", f"{name}@corp.example"))
    placed = wait_assigned(kube, namespace, first)
    assert Counter(placed.values()) == {"static-1": 2, "static-2": 2}

    # Scale-up: four more requests than capacity: the operator creates two hosts.
    extra = [f"r{i}" for i in range(5, 9)]
    for name in extra:
        kube.create(namespace, builders.request(name, "desk", f"{name}@corp.example"))
    placed_extra = wait_assigned(kube, namespace, extra)
    created = managed_hosts(kube, namespace)
    assert sorted(h["metadata"]["name"] for h in created) == sorted(set(placed_extra.values()))
    assert len(created) == 2
    for h in created:
        (owner,) = h["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["blockOwnerDeletion"]) == (
            "HostPool",
            "desk",
            True,
        )
        assert h["metadata"]["labels"]["origin"] == "scaling"

    # Scale-down: without those requests the created hosts are empty and go after 1 s.
    for name in extra:
        kube.delete("SessionRequest", namespace, name)
    wait_for(lambda: not managed_hosts(kube, namespace), WAIT_SECONDS, what="created hosts removed")
    assert sorted(h["metadata"]["name"] for h in items(kube, "SessionHost", namespace)) == [
        "static-1",
        "static-2",
    ]
    wait_obj(
        kube,
        "HostPool",
        namespace,
        "desk",
        lambda o: (
            cond(o, "Ready").get("status") == "True"
            and status_of(o).get("observedGeneration") == o["metadata"]["generation"]
            and status_of(o).get("sessions", {}).get("total") == 4
        ),
        "Ready with 4 sessions",
    )
    # The Events the operator posted went through (events: create).
    events = kube.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    reasons = {
        e["reason"] for e in events if e.get("source", {}).get("component") == "hostpool-operator"
    }
    assert {"HostsAdded", "HostsRemoved"} <= reasons, reasons
    assert_probes(identity)

    assert operator.refusals() == [], "\n".join(operator.refusals())
    assert operator.proc is not None
    assert operator.proc.poll() is None, "the operator exited"

    # Outside its role: refused.
    assert_refused(identity, "GET", f"/api/v1/namespaces/{namespace}/secrets")
    assert_refused(identity, "GET", "/api/v1/secrets")
    assert_refused(identity, "DELETE", resource_path("HostPool", namespace, "desk"))
    assert_refused(
        identity,
        "POST",
        resource_path("HostPool", namespace),
        scaling_pool("x", limit=1, max_hosts=1),
    )
    assert_refused(
        identity,
        "PATCH",
        resource_path("SessionRequest", namespace, "r1"),
        {"spec": {"user": "mallory@corp.example"}},
    )
    assert_refused(identity, "GET", "/api/v1/namespaces/kube-system/configmaps")

    # Workloads (default workloadResources: Pods): all five verbs, cluster-wide lists too.
    assert_pod_workloads(identity, kube, namespace)
    code, answer = identity.api.request("GET", pods_path())
    assert code == 200, f"list pods in all namespaces answered {code}: {answer}"


# Expected health of the captured objects: fixture name -> (Argo CD status, message part).
EXPECTED_HEALTH: dict[str, tuple[str, str]] = {
    "hostpool-new": ("Progressing", "Waiting for the hostpool-operator"),
    "hostpool-ready": ("Healthy", "Reconciled"),
    "hostpool-saturated": ("Healthy", "saturated"),
    "sessionhost-new": ("Progressing", "Waiting for the hostpool-operator"),
    "sessionhost-available": ("Healthy", "AcceptingSessions"),
    "sessionhost-full": ("Healthy", "SessionLimitReached"),
    "sessionhost-draining": ("Suspended", "Draining"),
    "sessionhost-pool-not-found": ("Degraded", "PoolNotFound"),
    "sessionrequest-new": ("Progressing", "Waiting for the hostpool-operator"),
    "sessionrequest-assigned": ("Healthy", "Assigned to"),
    "sessionrequest-pending": ("Progressing", "PoolSaturated"),
    "sessionrequest-failed": ("Degraded", "HostDeleted"),
    "scalingplan-new": ("Progressing", "Waiting for the hostpool-operator"),
    "scalingplan-applied": ("Healthy", "Applied: applied to 1 pool(s); phase Peak"),
    "scalingplan-pool-not-found": ("Degraded", "PoolNotFound"),
}


def capture(captured: dict[str, Obj], name: str, obj: Obj) -> None:
    obj = json.loads(json.dumps(obj))
    obj.get("metadata", {}).pop("managedFields", None)
    captured[name] = obj


def test_namespaced_role_places_fails_and_scales(
    kube: Kube,
    namespace: str,
    install_identity: Callable[[str, dict[str, Any]], Identity],
    operator_run: list[OperatorRun],
    tmp_path: Path,
) -> None:
    """watchNamespace: a Role in the watched namespace for a ServiceAccount elsewhere."""
    release_ns = unique_name("rbac-release", max_length=30)
    kube.create_namespace(release_ns)
    try:
        identity = install_identity(release_ns, {**chart_ports(), "watchNamespace": namespace})
        roles = {r["metadata"]["namespace"]: r for r in identity.of_kind("Role")}
        assert sorted(roles) == sorted([namespace, release_ns])  # objects; the Lease
        assert len(identity.of_kind("RoleBinding")) == 2
        # Nothing cluster-scoped: the operator reads only its watched namespace.
        assert not identity.of_kind("ClusterRole")
        assert not identity.of_kind("ClusterRoleBinding")
        args = identity.operator_args
        assert args[args.index("--namespace") + 1] == namespace
        run_namespaced_scenario(kube, namespace, release_ns, identity, operator_run, tmp_path)
    finally:
        kube.delete_namespace(release_ns)


def run_namespaced_scenario(
    kube: Kube,
    namespace: str,
    release_ns: str,
    identity: Identity,
    operator_run: list[OperatorRun],
    tmp_path: Path,
) -> None:
    captured: dict[str, Obj] = {}
    capture(
        captured, "hostpool-new", kube.create(namespace, scaling_pool("vdi", limit=2, max_hosts=4))
    )
    capture(
        captured,
        "sessionhost-new",
        kube.create(namespace, builders.host("host-a", "vdi", drainMode=False)),
    )
    kube.create(namespace, builders.host("host-b", "vdi", drainMode=False))
    kube.create(namespace, builders.host("host-drain", "vdi", drainMode=True))
    kube.create(namespace, builders.host("host-orphan", "nowhere", drainMode=False))
    capture(
        captured,
        "sessionrequest-new",
        kube.create(namespace, builders.request("u1", "vdi", "u1@corp.example")),
    )

    operator = start_operator(operator_run, identity, tmp_path)

    # One session: host-a (first in query order) takes it and still accepts more.
    assert wait_assigned(kube, namespace, ["u1"]) == {"u1": "host-a"}
    capture(captured, "sessionrequest-assigned", kube.get("SessionRequest", namespace, "u1"))
    capture(
        captured,
        "sessionhost-available",
        wait_obj(
            kube,
            "SessionHost",
            namespace,
            "host-a",
            lambda o: (
                cond(o, "Available").get("reason") == "AcceptingSessions"
                and status_of(o).get("sessions", {}).get("total") == 1
            ),
            "Available with 1 session",
        ),
    )
    capture(
        captured,
        "hostpool-ready",
        wait_obj(
            kube,
            "HostPool",
            namespace,
            "vdi",
            lambda o: (
                cond(o, "Ready").get("status") == "True"
                and cond(o, "Saturated").get("status") == "False"
                and status_of(o).get("sessions", {}).get("total") == 1
            ),
            "Ready, not saturated, 1 session",
        ),
    )

    # Fill host-a and host-b; scaling may add one host (maxHosts 4 counts every host, the
    # draining one too), so of six more requests one waits.
    more = ["u2", "u3", "u4", "u5", "u6", "u7"]
    for name in more:
        kube.create(namespace, builders.request(name, "vdi", f"{name}@corp.example"))

    def five_placed() -> dict[str, tuple[str | None, str | None]] | None:
        now = {n: p for n, p in phases(kube, namespace).items() if n in more}
        states = Counter(p for p, _ in now.values())
        waiting = [n for n, (p, _) in now.items() if p == "Pending"]
        if states == {"Assigned": 5, "Pending": 1}:
            obj = kube.get("SessionRequest", namespace, waiting[0])
            if status_of(obj).get("reason") == "PoolSaturated":
                return now
        return None

    now = wait_for(
        five_placed,
        WAIT_SECONDS,
        what="five of six placed, one waiting (PoolSaturated)",
        show=lambda: f"requests now: {phases(kube, namespace)}",
    )
    (waiting,) = [n for n, (p, _) in now.items() if p == "Pending"]
    (scaled,) = managed_hosts(kube, namespace)
    scaled_name = scaled["metadata"]["name"]
    assert Counter(h for p, h in now.values() if p == "Assigned") == {
        "host-a": 1,
        "host-b": 2,
        scaled_name: 2,
    }
    capture(captured, "sessionrequest-pending", kube.get("SessionRequest", namespace, waiting))
    capture(
        captured,
        "hostpool-saturated",
        wait_obj(
            kube,
            "HostPool",
            namespace,
            "vdi",
            lambda o: (
                cond(o, "Saturated").get("status") == "True"
                and cond(o, "ScalingLimited").get("status") == "True"
                and status_of(o).get("pendingRequests") == 1
            ),
            "Saturated, ScalingLimited, 1 pending",
        ),
    )
    capture(
        captured,
        "sessionhost-full",
        wait_obj(
            kube,
            "SessionHost",
            namespace,
            "host-a",
            lambda o: cond(o, "Available").get("reason") == "SessionLimitReached",
            "SessionLimitReached",
        ),
    )
    capture(
        captured,
        "sessionhost-draining",
        wait_obj(
            kube,
            "SessionHost",
            namespace,
            "host-drain",
            lambda o: cond(o, "Available").get("reason") == "Draining",
            "Draining",
        ),
    )
    capture(
        captured,
        "sessionhost-pool-not-found",
        wait_obj(
            kube,
            "SessionHost",
            namespace,
            "host-orphan",
            lambda o: cond(o, "Available").get("reason") == "PoolNotFound",
            "PoolNotFound",
        ),
    )

    # A host with sessions is deleted: its requests fail, and the slot it leaves under
    # maxHosts lets scaling add a host for the waiting request.
    on_b = sorted(n for n, (_, h) in now.items() if h == "host-b")
    on_scaled = sorted(n for n, (_, h) in now.items() if h == scaled_name)
    kube.delete("SessionHost", namespace, "host-b")
    capture(
        captured,
        "sessionrequest-failed",
        wait_obj(
            kube,
            "SessionRequest",
            namespace,
            on_b[0],
            lambda o: status_of(o).get("phase") == "Failed",
            "Failed",
        ),
    )
    assert cond(captured["sessionrequest-failed"], "Assigned")["reason"] == "HostDeleted"
    placed_last = wait_assigned(kube, namespace, [waiting])[waiting]
    assert placed_last not in ("host-a", "host-b", "host-drain", scaled_name)
    assert len(managed_hosts(kube, namespace)) == 2

    # Scale-down: the requests on the created hosts end; both hosts go after 1 s.
    for name in [*on_scaled, waiting]:
        kube.delete("SessionRequest", namespace, name)
    wait_for(lambda: not managed_hosts(kube, namespace), WAIT_SECONDS, what="created hosts removed")

    # Scaling plans: one for the pool (it has scaling.maxHosts and an explicit
    # maxSessionLimit, so the plan applies), one for a pool that does not exist.
    capture(
        captured,
        "scalingplan-new",
        kube.create(
            namespace,
            builders.manifest(
                "ScalingPlan", "office", plans.plan_spec("peak", pools=["vdi"]), namespace=namespace
            ),
        ),
    )
    kube.create(
        namespace,
        builders.manifest(
            "ScalingPlan", "ghost", plans.plan_spec("peak", pools=["nowhere"]), namespace=namespace
        ),
    )
    capture(
        captured,
        "scalingplan-applied",
        wait_obj(
            kube,
            "ScalingPlan",
            namespace,
            "office",
            lambda o: (
                cond(o, "Ready").get("reason") == "Applied" and status_of(o).get("phase") == "Peak"
            ),
            "Ready (Applied) in phase Peak",
        ),
    )
    capture(
        captured,
        "scalingplan-pool-not-found",
        wait_obj(
            kube,
            "ScalingPlan",
            namespace,
            "ghost",
            lambda o: cond(o, "Ready").get("reason") == "PoolNotFound",
            "Ready False (PoolNotFound)",
        ),
    )
    assert_probes(identity)
    assert operator.refusals() == [], "\n".join(operator.refusals())

    # Outside its Role: other namespaces, cluster-wide lists, secrets, pool deletion.
    assert_refused(identity, "GET", resource_path("HostPool", release_ns))
    assert_refused(identity, "GET", resource_path("HostPool"))
    assert_refused(identity, "GET", f"/api/v1/namespaces/{namespace}/secrets")
    assert_refused(identity, "DELETE", resource_path("HostPool", namespace, "vdi"))
    assert_refused(identity, "POST", f"/api/v1/namespaces/{release_ns}/events", {})

    # Workloads: Pods in the watched namespace only.
    assert_pod_workloads(identity, kube, namespace)
    assert_refused(identity, "GET", pods_path())
    assert_refused(identity, "GET", pods_path(release_ns))
    assert_refused(identity, "POST", pods_path(release_ns), pod_manifest("elsewhere"))

    check_and_store_fixtures(captured)


def check_and_store_fixtures(captured: dict[str, Obj]) -> None:
    """The Lua checks give the live objects the expected health; store them on request."""
    assert sorted(captured) == sorted(EXPECTED_HEALTH)
    for name, obj in captured.items():
        expected_status, expected_text = EXPECTED_HEALTH[name]
        got = health(obj["kind"], obj)
        assert got["status"] == expected_status, (name, got, obj.get("status"))
        assert expected_text in got["message"], (name, got)
    if os.environ.get(UPDATE_FIXTURES_ENV) == "1":
        for name, obj in captured.items():
            write_fixture(name, obj)


# ---------------------------------------------------------------------------------------
# workloadResources: the kinds the operator may use as workloads


@pytest.fixture
def desktop_crd(kube: Kube) -> Iterator[str]:
    """A namespaced custom kind (Desktop, vdi.example.com/v1) for a custom workload resource;
    deleted afterwards."""
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": DESKTOP_CRD_NAME},
        "spec": {
            "group": DESKTOP_GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": "desktops",
                "singular": "desktop",
                "kind": "Desktop",
                "listKind": "DesktopList",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                            },
                        }
                    },
                }
            ],
        },
    }
    code, answer = kube.request("POST", CRD_BASE, body=crd)
    assert code in (201, 409), f"creating the Desktop CRD answered {code}: {answer}"
    served = f"/apis/{DESKTOP_GROUP}/v1/desktops"
    wait_for(lambda: kube.request("GET", served)[0] == 200, WAIT_SECONDS, what=f"{served} served")
    yield DESKTOP_GROUP
    kube.request("DELETE", f"{CRD_BASE}/{DESKTOP_CRD_NAME}")


def test_workload_resources_value_sets_the_workload_kinds(
    kube: Kube,
    namespace: str,
    desktop_crd: str,
    install_identity: Callable[[str, dict[str, Any]], Identity],
) -> None:
    """A custom resource listed in workloadResources gets the five workload verbs (next to
    Pods, listed too); the default values do not grant it; an empty list grants no workload
    at all. Real requests with each identity's token, in one-namespace mode."""
    custom = install_identity(
        namespace,
        {
            "watchNamespace": namespace,
            "workloadResources": [
                {"apiGroup": "", "resources": ["pods"]},
                {"apiGroup": desktop_crd, "resources": ["desktops"]},
            ],
        },
    )
    default = install_identity(namespace, {"watchNamespace": namespace})
    empty = install_identity(namespace, {"watchNamespace": namespace, "workloadResources": []})
    for identity in (custom, default, empty):
        wait_role_in_effect(identity, namespace)

    assert_workload_calls(custom, kube, desktops_path(namespace), desktop_manifest("desk-1"))
    assert_pod_workloads(custom, kube, namespace)

    # The default values: Pods only, not the custom kind.
    assert_refused(default, "GET", desktops_path(namespace))
    assert_refused(default, "POST", desktops_path(namespace), desktop_manifest("desk-2"))

    # No workload resources: neither Pods nor the custom kind, for any workload verb.
    for collection, body in (
        (pods_path(namespace), pod_manifest("p")),
        (desktops_path(namespace), desktop_manifest("d")),
    ):
        assert_refused(empty, "GET", collection)
        assert_refused(empty, "GET", f"{collection}/{body['metadata']['name']}")
        assert_refused(empty, "POST", collection, body)
        assert_refused(empty, "DELETE", f"{collection}/{body['metadata']['name']}")
        code, answer = empty.api.request("GET", collection, query={"watch": "true"})
        assert code == 403, f"watch {collection} answered {code}: {answer}"

    # Exactly the five verbs, as the API server's authorizer answers for each identity.
    for identity, expected in ((custom, set(WORKLOAD_VERBS)), (default, set()), (empty, set())):
        assert allowed_verbs(identity, desktop_crd, "desktops", namespace) == expected
    assert allowed_verbs(default, "", "pods", namespace) == set(WORKLOAD_VERBS)
    assert allowed_verbs(empty, "", "pods", namespace) == set()
    # Workloads are controlled by their host with blockOwnerDeletion (needed where the
    # OwnerReferencesPermissionEnforcement admission plugin runs): only with workloads.
    for identity, expected in ((custom, {"update"}), (default, {"update"}), (empty, set())):
        finalizers = allowed_verbs(identity, "hostpool.io", "sessionhosts", namespace, "finalizers")
        assert finalizers == expected


def test_role_lets_the_operator_apply_a_scaling_plan(
    kube: Kube,
    namespace: str,
    install_identity: Callable[[str, dict[str, Any]], Identity],
    operator_run: list[OperatorRun],
    tmp_path: Path,
) -> None:
    """Plans under the chart's identity: list/watch plans, write their status, create the
    minimum, drain a host (a patch of the host), end its Disconnected session (a request
    delete, ZeroActiveSessions) and remove it, all without a refusal."""
    identity = install_identity(namespace, chart_ports())
    operator = start_operator(operator_run, identity, tmp_path)
    pool = scaling_pool("night", limit=2, max_hosts=2)
    pool["spec"]["loadBalancer"]["type"] = "BreadthFirst"
    pool["spec"]["scaling"]["scaleDownDelaySeconds"] = 3600
    kube.create(namespace, pool)
    plan = builders.manifest(
        "ScalingPlan",
        "office",
        plans.plan_spec("peak", pools=["night"], rampUp={"minimumHostsPercent": 100}),
        namespace=namespace,
    )
    kube.create(namespace, plan)
    wait_for(
        lambda: len(managed_hosts(kube, namespace)) == 2 or None,
        WAIT_SECONDS,
        what="the plan's minimum of 2 hosts",
    )
    wait_obj(
        kube,
        "ScalingPlan",
        namespace,
        "office",
        lambda o: cond(o, "Ready").get("reason") == "Applied",
        "Ready (Applied)",
    )
    for name in ("r1", "r2"):
        kube.create(namespace, builders.request(name, "night", f"{name}@corp.example"))
    placed = wait_assigned(kube, namespace, ["r1", "r2"])
    assert len(set(placed.values())) == 2, placed  # breadth-first: one each
    later = sorted(
        managed_hosts(kube, namespace),
        key=lambda h: (h["metadata"]["creationTimestamp"], h["metadata"]["name"]),
    )[-1]["metadata"]["name"]
    leaving = next(n for n, h in placed.items() if h == later)
    kube.call(
        "PATCH",
        resource_path("SessionRequest", namespace, leaving) + "/status",
        body={"status": {"sessionState": "Disconnected"}},
        content_type="application/merge-patch+json",
    )
    ramp_down = plans.plan_spec(
        "rampDown",
        pools=["night"],
        rampDown={"capacityThresholdPercent": 100, "stopHostsWhen": "ZeroActiveSessions"},
    )
    kube.call(
        "PATCH",
        resource_path("ScalingPlan", namespace, "office"),
        body={"spec": ramp_down},
        content_type="application/merge-patch+json",
    )
    wait_for(
        lambda: (
            [h["metadata"]["name"] for h in managed_hosts(kube, namespace)]
            == [placed[n] for n in placed if n != leaving]
            or None
        ),
        WAIT_SECONDS,
        what="the drained host removed",
    )
    remaining = {r["metadata"]["name"] for r in items(kube, "SessionRequest", namespace)}
    assert remaining == {"r1", "r2"} - {leaving}
    assert operator.refusals() == [], "\n".join(operator.refusals())
    assert operator.proc is not None
    assert operator.proc.poll() is None, "the operator exited"
