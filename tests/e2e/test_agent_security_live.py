"""Host agents' least privilege, enforced by a real API server.

Each test renders the chart with the project's helm (``helm template``), applies its agent
objects (component ``agent``: the ServiceAccounts, the agents' Role and RoleBinding, the
ValidatingAdmissionPolicy and its binding) with the admin kubeconfig, and creates a pool,
hosts A and B, pods named like them (using the ServiceAccount ``hostpool-agent``; they need
not run) and requests whose status the admin writes as the operator would (assigned to A, to
B, or pending). Tokens come from ``kubectl create token`` exactly as docs/install.md shows:
bound to a pod (what the kubelet mounts into a sidecar), unbound, or of a per-host
ServiceAccount ``hostpool-agent-<host>`` (a machine outside the cluster). Every call is a
raw HTTP request under one token; every refusal is checked for its HTTP status and for the
message of the policy rule (or the RBAC refusal) that made it.

No operator runs: the statuses are only what the test writes. The cluster-scoped policy and
binding are deleted at teardown.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from support import builders
from support.agent_objects import CLUSTER_SCOPED, apply_agent_objects, delete_objects, run_tool
from support.agent_process import AgentProcess
from support.identity import token_kubeconfig
from support.kube import Kube, resource_path, unique_name, wait_for
from support.log_lines import lines_saying

AGENT_SA = "hostpool-agent"
MERGE_PATCH = "application/merge-patch+json"
WAIT_SECONDS = 45
NOW = "2026-01-05T08:00:00Z"
LATER = "2026-01-05T08:01:00Z"

#: The host names (pods are named the same); B's machine also has its own ServiceAccount.
HOST_A = "desk-a"
HOST_B = "desk-b"

Obj = dict[str, Any]


# ---------------------------------------------------------------------------------------
# tools


# ---------------------------------------------------------------------------------------
# the chart's agent objects, installed


@dataclass
class Installed:
    """The chart's agent objects in a namespace, and how to get tokens there."""

    kube: Kube
    namespace: str
    docs: list[Obj]
    kubectl: list[str]
    tmp_path: Path

    def of_kind(self, kind: str) -> list[Obj]:
        return [d for d in self.docs if d["kind"] == kind]

    @property
    def policy(self) -> Obj:
        (policy,) = self.of_kind("ValidatingAdmissionPolicy")
        return policy

    def message(self, rule: str) -> str:
        """The message of one of the policy's rules (as rendered by the chart)."""
        (message,) = [
            v["message"]
            for v in self.policy["spec"]["validations"]
            if v["message"].startswith(f"rule {rule}:")
        ]
        return str(message)

    def token(self, service_account: str, *bound: str, namespace: str | None = None) -> Agent:
        """``kubectl create token`` (``bound``: extra arguments such as the pod to bind to);
        a client that holds only that token."""
        ns = namespace or self.namespace
        argv = [*self.kubectl, "create", "token", service_account, "-n", ns, "--duration", "1h"]
        token = run_tool([*argv, *bound]).strip()
        path = token_kubeconfig(
            self.kube.kubeconfig, token, self.tmp_path / f"{unique_name('agent')}.kubeconfig"
        )
        api = Kube.connect(path)
        return Agent(api, f"system:serviceaccount:{ns}:{service_account}", self)

    def pod_token(self, pod: str, *, namespace: str | None = None) -> Agent:
        """A token of the shared ServiceAccount bound to a pod: what the kubelet mounts."""
        ns = namespace or self.namespace
        uid = self.kube.call("GET", f"/api/v1/namespaces/{ns}/pods/{pod}")["metadata"]["uid"]
        args = ["--bound-object-kind", "Pod", "--bound-object-name", pod]
        return self.token(AGENT_SA, *args, "--bound-object-uid", uid, namespace=namespace)


@dataclass
class Agent:
    """One agent credential: raw requests under its token."""

    api: Kube
    username: str
    installed: Installed

    @property
    def namespace(self) -> str:
        return self.installed.namespace

    def call(self, method: str, path: str, body: Any = None, **query: str) -> tuple[int, Any]:
        kind = MERGE_PATCH if method == "PATCH" else "application/json"
        return self.api.request(method, path, body=body, content_type=kind, query=query or None)

    def ok(self, method: str, path: str, body: Any = None, **query: str) -> Any:
        code, answer = self.call(method, path, body, **query)
        assert 200 <= code < 300, f"{self.username}: {method} {path} answered {code}: {answer}"
        return answer

    def refused(self, rule: str, method: str, path: str, body: Any = None) -> None:
        """Refused by the admission policy's rule ``rule``: 403, and its message."""
        code, answer = self.call(method, path, body)
        assert code == 403, f"{self.username}: {method} {path} answered {code}, not 403: {answer}"
        assert isinstance(answer, dict), answer
        assert answer.get("reason") == "Forbidden", answer
        message = str(answer.get("message", ""))
        assert "ValidatingAdmissionPolicy" in message, message
        assert self.installed.message(rule) in message, message

    def refused_by_rbac(self, verb: str, resource: str, method: str, path: str, body: Any) -> None:
        code, answer = self.call(method, path, body)
        assert code == 403, f"{self.username}: {method} {path} answered {code}, not 403: {answer}"
        assert isinstance(answer, dict), answer
        message = str(answer.get("message", ""))
        assert f'User "{self.username}" cannot {verb} resource "{resource}"' in message, message

    # -- the agent's writes -----------------------------------------------------------

    def patch_host(self, host: str, status: Obj) -> tuple[int, Any]:
        return self.call("PATCH", host_status(self.namespace, host), {"status": status})

    def patch_request(self, name: str, status: Obj) -> tuple[int, Any]:
        return self.call("PATCH", request_status(self.namespace, name), {"status": status})


def host_status(namespace: str, name: str) -> str:
    return resource_path("SessionHost", namespace, name) + "/status"


def request_status(namespace: str, name: str) -> str:
    return resource_path("SessionRequest", namespace, name) + "/status"


@pytest.fixture
def install_agents(
    kube: Kube, bin_dir: Path, tmp_path: Path
) -> Iterator[Callable[[str, dict[str, Any]], Installed]]:
    """Render the chart with ``values`` for release namespace ``namespace``, apply its agent
    objects, wait for the agents' Role; the policy and its binding are deleted afterwards."""
    kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(kube.kubeconfig)]
    cluster_scoped: list[Obj] = []

    def install(namespace: str, values: dict[str, Any]) -> Installed:
        release = unique_name("agents", max_length=20)
        agents = apply_agent_objects(bin_dir, kube.kubeconfig, release, namespace, values)
        cluster_scoped.extend(d for d in agents if d["kind"] in CLUSTER_SCOPED)
        return Installed(kube, namespace, agents, kubectl, tmp_path)

    yield install
    delete_objects(bin_dir, kube.kubeconfig, cluster_scoped)


# ---------------------------------------------------------------------------------------
# the objects


def pod(name: str) -> Obj:
    """A pod of the shared agent ServiceAccount, tolerating kwok's fake nodes' taint; it
    need not run (a token can be bound to any Pod object)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": AGENT_SA,
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [{"name": "desktop", "image": "example.invalid/desktop:1"}],
        },
    }


def host_status_as_operator(name: str) -> Obj:
    return {
        "observedGeneration": 1,
        "sessions": {"total": 1, "connecting": 0, "active": 1, "disconnected": 0},
        "address": f"{name}.corp.example",
        "loadIndex": 20,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "AcceptingSessions",
                "message": "takes sessions",
                "lastTransitionTime": NOW,
            }
        ],
    }


def assigned(host: str) -> Obj:
    return {
        "observedGeneration": 1,
        "phase": "Assigned",
        "host": host,
        "hostAddress": f"{host}.corp.example",
        "reason": "NewSession",
        "message": f"Assigned to {host}",
        "sessionState": "Connecting",
        "assignedAt": NOW,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "NewSession", "lastTransitionTime": NOW}
        ],
    }


PENDING: Obj = {"observedGeneration": 1, "phase": "Pending", "reason": "PoolSaturated"}


def create_world(kube: Kube, namespace: str, pods: list[str]) -> None:
    """A pool, hosts A and B with the status the operator would write, pods named ``pods``,
    and requests: ra1, ra2 on A, rb1 on B, pending1 pending."""
    kube.create(namespace, builders.pool("desk", "DepthFirst", 5))
    for name in (HOST_A, HOST_B):
        kube.create(namespace, builders.host(name, "desk", drainMode=False))
        kube.merge_patch(
            "SessionHost",
            namespace,
            name,
            {"status": host_status_as_operator(name)},
            status=True,
        )
    for name in pods:
        kube.call("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod(name))
    statuses = {"ra1": assigned(HOST_A), "ra2": assigned(HOST_A), "rb1": assigned(HOST_B)}
    statuses["pending1"] = PENDING
    for name, status in statuses.items():
        kube.create(namespace, builders.request(name, "desk", f"{name}@corp.example"))
        kube.merge_patch("SessionRequest", namespace, name, {"status": status}, status=True)


def wait_in_effect(agent: Agent, foreign_host: str, rule: str) -> None:
    """Until the Role lets the agent read hosts and the policy refuses it another host's
    status (a dry run: nothing is written even before the policy is in effect)."""
    path = host_status(agent.namespace, foreign_host)
    body = {"status": {"metrics": {"cpuPercent": 1}}}

    def refused_by_policy() -> bool:
        if agent.call("GET", resource_path("SessionHost", agent.namespace))[0] != 200:
            return False
        code, answer = agent.call("PATCH", path, body, dryRun="All")
        return code == 403 and agent.installed.message(rule) in str(answer)

    wait_for(refused_by_policy, WAIT_SECONDS, what="the agents' Role and policy in effect")


def wait_refused_by_policy(agent: Agent, rule: str, path: str, body: Obj) -> None:
    """Until a dry run of this PATCH passes RBAC and is refused by the policy's rule (an
    RBAC grant takes a moment to be seen by the authorizer)."""

    def refused() -> bool:
        code, answer = agent.call("PATCH", path, body, dryRun="All")
        return code == 403 and agent.installed.message(rule) in str(answer)

    wait_for(refused, WAIT_SECONDS, what=f"{agent.username}: {path} refused by rule {rule}")


def status(kube: Kube, kind: str, namespace: str, name: str) -> Obj:
    found: Obj = kube.get(kind, namespace, name).get("status") or {}
    return found


def wait_default_service_account(kube: Kube, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{AGENT_SA}"
    wait_for(lambda: kube.request("GET", path)[0] == 200, WAIT_SECONDS, what=path)


# ---------------------------------------------------------------------------------------
# the tests


def test_sidecar_token_touches_only_its_own_host(
    kube: Kube, namespace: str, install_agents: Callable[[str, dict[str, Any]], Installed]
) -> None:
    """A pod-bound token of hostpool-agent for pod A: A's metrics and agent fields; of A's
    requests, sessionState, stateChangedAt, logonAt, idleSince, connects, notice, disconnect and
    logoff, and deleting them; nothing else."""
    installed = install_agents(namespace, {})
    wait_default_service_account(kube, namespace)
    create_world(kube, namespace, [HOST_A, HOST_B])
    agent = installed.pod_token(HOST_A)
    wait_in_effect(agent, HOST_B, "own-host")
    before = status(kube, "SessionHost", namespace, HOST_A)

    # Its own host: metrics and agent, as the agent writes them.
    metrics = {"cpuPercent": 37, "memoryPercent": 52, "diskQueueLength": 1, "sampledAt": NOW}
    own = {"version": "0.1.0", "address": "10.0.0.7"}
    code, answer = agent.patch_host(HOST_A, {"metrics": metrics, "agent": own})
    assert code == 200, answer
    after = status(kube, "SessionHost", namespace, HOST_A)
    assert after["metrics"] == metrics
    assert after["agent"] == own
    assert {k: v for k, v in after.items() if k not in ("metrics", "agent")} == before
    # Reading is allowed (get, list; get of the status subresource, which kubectl patch
    # --subresource status reads first).
    agent.ok("GET", resource_path("SessionHost", namespace, HOST_A))
    agent.ok("GET", host_status(namespace, HOST_B))
    listed = agent.ok("GET", resource_path("SessionRequest", namespace))
    assert sorted(r["metadata"]["name"] for r in listed["items"]) == [
        "pending1",
        "ra1",
        "ra2",
        "rb1",
    ]

    # Any other field of its own host's status: refused, alone or with metrics.
    host_a = host_status(namespace, HOST_A)
    ready_false = [{"type": "Ready", "status": "False", "reason": "Draining"}]
    agent.refused("host-status-fields", "PATCH", host_a, {"status": {"conditions": ready_false}})
    agent.refused("host-status-fields", "PATCH", host_a, {"status": {"sessions": {"total": 0}}})
    agent.refused(
        "host-status-fields",
        "PATCH",
        host_a,
        {"status": {"metrics": {"cpuPercent": 1}, "loadIndex": 0}},
    )
    agent.refused("host-status-fields", "PATCH", host_a, {"status": {"address": "evil.example"}})
    agent.refused("host-status-fields", "PATCH", host_a, {"status": {"bucket": 1}})  # was absent
    agent.refused("host-status-fields", "PATCH", host_a, {"status": {"observedGeneration": None}})
    assert status(kube, "SessionHost", namespace, HOST_A) == after

    # Another host: refused, even its metrics alone.
    before_b = status(kube, "SessionHost", namespace, HOST_B)
    host_b = host_status(namespace, HOST_B)
    agent.refused("own-host", "PATCH", host_b, {"status": {"metrics": {"cpuPercent": 99}}})
    agent.refused("own-host", "PATCH", host_b, {"status": {"agent": {"address": "10.6.6.6"}}})
    assert status(kube, "SessionHost", namespace, HOST_B) == before_b

    # Its requests: what it measures (sessionState, stateChangedAt, logonAt, idleSince) and
    # what it carries out (a notice shown, a disconnect done, a logoff cleared).
    ra1 = request_status(namespace, "ra1")
    code, answer = agent.patch_request("ra1", {"sessionState": "Active"})
    assert code == 200, answer
    assert status(kube, "SessionRequest", namespace, "ra1") == {
        **assigned(HOST_A),
        "sessionState": "Active",
    }
    # The operator (here the admin) asks: a notice, a disconnect, a logoff.
    asked = {
        "notice": {"message": "idle for 25 minutes", "sentAt": NOW, "limit": "Idle"},
        "disconnect": {"requestedAt": NOW, "limit": "Idle"},
        "logoff": {"message": "bye", "deadline": NOW, "limit": "Idle"},
    }
    kube.merge_patch("SessionRequest", namespace, "ra1", {"status": asked}, status=True)
    measured = {
        "sessionState": "Disconnected",
        "stateChangedAt": LATER,
        "logonAt": NOW,
        "idleSince": NOW,
    }
    agent.ok("PATCH", ra1, {"status": measured})
    acted = {
        "notice": {**asked["notice"], "shownAt": LATER},
        "disconnect": {**asked["disconnect"], "doneAt": LATER},
        "logoff": None,
        "idleSince": None,
    }
    agent.ok("PATCH", ra1, {"status": acted})
    expected = {
        **assigned(HOST_A),
        **measured,
        "notice": acted["notice"],
        "disconnect": acted["disconnect"],
    }
    del expected["idleSince"]
    assert status(kube, "SessionRequest", namespace, "ra1") == expected
    # One write per new field, each alone: every one is the agent's.
    for write in (
        {"stateChangedAt": NOW},
        {"logonAt": LATER},
        {"idleSince": LATER},
        {"notice": {"message": "hi", "sentAt": NOW}},
        {"disconnect": {"requestedAt": NOW}},
        {"logoff": {"message": "bye", "deadline": NOW}},
        {"connects": [{"ref": "ABCDEFGH", "startedAt": NOW, "outcome": "Succeeded"}]},
    ):
        code, answer = agent.call("PATCH", ra1, {"status": write}, dryRun="All")
        assert code == 200, (write, answer)
    for change in (
        {"phase": "Failed"},
        {"host": HOST_B},
        {"hostAddress": "10.6.6.6"},
        {"reason": "Reconnected"},
        {"message": "moved"},
        {"assignedAt": "2026-01-05T09:00:00Z"},
        {"conditions": None},
        {"observedGeneration": 7},
        {"sessionState": "Active", "phase": "Pending"},
        {"notice": None, "host": HOST_B},
    ):
        agent.refused("request-status-fields", "PATCH", ra1, {"status": change})
    assert status(kube, "SessionRequest", namespace, "ra1") == expected

    # Requests on another host, or on none: refused, whichever field.
    for name in ("rb1", "pending1"):
        path = request_status(namespace, name)
        for write in (
            {"sessionState": "Active"},
            {"idleSince": NOW},
            {"notice": {"message": "hi", "sentAt": NOW, "shownAt": NOW}},
            {"disconnect": {"requestedAt": NOW, "doneAt": NOW}},
            {"logoff": {"message": "bye", "deadline": NOW}},
        ):
            agent.refused("own-requests", "PATCH", path, {"status": write})
    assert status(kube, "SessionRequest", namespace, "rb1") == assigned(HOST_B)
    assert status(kube, "SessionRequest", namespace, "pending1") == PENDING

    # Deleting: its host's requests only.
    for name in ("rb1", "pending1"):
        agent.refused("own-requests", "DELETE", resource_path("SessionRequest", namespace, name))
        assert kube.exists("SessionRequest", namespace, name)
    agent.ok("DELETE", resource_path("SessionRequest", namespace, "ra2"))
    assert not kube.exists("SessionRequest", namespace, "ra2")

    # Events: created (its Warning Events on its host).
    involved = {"apiVersion": "hostpool.io/v1alpha1", "kind": "SessionHost", "name": HOST_A}
    event: Obj = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{HOST_A}."},
        "involvedObject": {**involved, "namespace": namespace},
        "reason": "LoadScriptFailed",
        "message": "the load script failed",
        "type": "Warning",
    }
    agent.ok("POST", f"/api/v1/namespaces/{namespace}/events", event)

    # RBAC: no spec or metadata changes, no creating, no other kinds.
    host_a_main = resource_path("SessionHost", namespace, HOST_A)
    agent.refused_by_rbac(
        "patch", "sessionhosts", "PATCH", host_a_main, {"spec": {"drainMode": True}}
    )
    agent.refused_by_rbac(
        "patch", "sessionhosts", "PATCH", host_a_main, {"metadata": {"labels": {"x": "y"}}}
    )
    request = builders.request("forged", "desk", "mallory@corp.example")
    agent.refused_by_rbac(
        "create", "sessionrequests", "POST", resource_path("SessionRequest", namespace), request
    )
    agent.refused_by_rbac(
        "delete", "sessionhosts", "DELETE", resource_path("SessionHost", namespace, HOST_B), None
    )
    agent.refused_by_rbac(
        "patch",
        "hostpools/status",
        "PATCH",
        resource_path("HostPool", namespace, "desk") + "/status",
        {"status": {"observedGeneration": 9}},
    )
    agent.refused_by_rbac("list", "secrets", "GET", f"/api/v1/namespaces/{namespace}/secrets", None)

    # Everyone else is not matched by the policy: the admin (as the operator would) writes
    # the host's conditions and the request's phase.
    kube.merge_patch(
        "SessionHost", namespace, HOST_A, {"status": {"conditions": ready_false}}, status=True
    )
    kube.merge_patch(
        "SessionRequest", namespace, "rb1", {"status": {"phase": "Failed"}}, status=True
    )
    assert status(kube, "SessionRequest", namespace, "rb1")["phase"] == "Failed"


def test_a_credential_that_names_no_host_writes_nothing(
    kube: Kube, namespace: str, install_agents: Callable[[str, dict[str, Any]], Installed]
) -> None:
    """The shared ServiceAccount's token bound to no pod names no host; bound to a pod that
    is no host's, it names a host that does not exist: neither writes any host or request."""
    installed = install_agents(namespace, {})
    wait_default_service_account(kube, namespace)
    create_world(kube, namespace, [HOST_A, "stray"])
    unbound = installed.token(AGENT_SA)
    stray = installed.pod_token("stray")
    wait_in_effect(stray, HOST_A, "own-host")
    metrics = {"status": {"metrics": {"cpuPercent": 5}}}
    state = {"status": {"sessionState": "Active"}}
    for host in (HOST_A, HOST_B):
        unbound.refused("agent-identity", "PATCH", host_status(namespace, host), metrics)
        stray.refused("own-host", "PATCH", host_status(namespace, host), metrics)
        assert "metrics" not in status(kube, "SessionHost", namespace, host)
    for name in ("ra1", "rb1", "pending1"):
        unbound.refused("agent-identity", "PATCH", request_status(namespace, name), state)
        stray.refused("own-requests", "PATCH", request_status(namespace, name), state)
        path = resource_path("SessionRequest", namespace, name)
        unbound.refused("agent-identity", "DELETE", path)
        stray.refused("own-requests", "DELETE", path)
        assert kube.exists("SessionRequest", namespace, name)
    assert status(kube, "SessionRequest", namespace, "ra1") == assigned(HOST_A)
    # The refusal names the host the credential stands for.
    code, answer = stray.patch_host(HOST_A, {"metrics": {"cpuPercent": 5}})
    assert code == 403
    assert "this credential is the agent of host stray" in answer["message"], answer


def test_per_host_service_account_of_a_machine_outside_the_cluster(
    kube: Kube, namespace: str, install_agents: Callable[[str, dict[str, Any]], Installed]
) -> None:
    """agents.hosts: [B] gives ServiceAccount hostpool-agent-B; its token (no pod) writes B's
    metrics and B's requests' sessionState, and nothing of A."""
    installed = install_agents(namespace, {"agents.hosts": [HOST_B]})
    (sa,) = [
        d
        for d in installed.of_kind("ServiceAccount")
        if d["metadata"]["name"] == f"{AGENT_SA}-{HOST_B}"
    ]
    assert sa["metadata"]["namespace"] == namespace
    wait_default_service_account(kube, namespace)
    create_world(kube, namespace, [HOST_A])
    agent = installed.token(f"{AGENT_SA}-{HOST_B}")
    wait_in_effect(agent, HOST_A, "own-host")

    code, answer = agent.patch_host(HOST_B, {"metrics": {"cpuPercent": 61}, "agent": {}})
    assert code == 200, answer
    assert status(kube, "SessionHost", namespace, HOST_B)["metrics"] == {"cpuPercent": 61}
    agent.refused(
        "host-status-fields",
        "PATCH",
        host_status(namespace, HOST_B),
        {"status": {"loadIndex": 0}},
    )
    agent.refused(
        "own-host",
        "PATCH",
        host_status(namespace, HOST_A),
        {"status": {"metrics": {"cpuPercent": 61}}},
    )
    assert "metrics" not in status(kube, "SessionHost", namespace, HOST_A)
    code, answer = agent.patch_request("rb1", {"sessionState": "Active"})
    assert code == 200, answer
    agent.refused(
        "own-requests",
        "PATCH",
        request_status(namespace, "ra1"),
        {"status": {"sessionState": "Active"}},
    )
    agent.refused("own-requests", "DELETE", resource_path("SessionRequest", namespace, "ra1"))
    agent.ok("DELETE", resource_path("SessionRequest", namespace, "rb1"))
    assert not kube.exists("SessionRequest", namespace, "rb1")
    assert kube.exists("SessionRequest", namespace, "ra1")


def test_the_policy_holds_when_rbac_grants_too_much(
    kube: Kube, namespace: str, install_agents: Callable[[str, dict[str, Any]], Installed]
) -> None:
    """Defence in depth: with a (mistaken) extra RoleBinding that lets agent identities
    patch hosts, create requests and write statuses, also from another namespace, the
    policy still refuses what agents must not do, naming its rule."""
    other = unique_name("agents-other", max_length=30)
    kube.create_namespace(other)
    try:
        installed = install_agents(namespace, {"agents.namespaces": [namespace, other]})
        wait_default_service_account(kube, namespace)
        wait_default_service_account(kube, other)
        create_world(kube, namespace, [HOST_A])
        kube.call("POST", f"/api/v1/namespaces/{other}/pods", body=pod(HOST_A))
        too_much = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "too-much"},
            "rules": [
                {
                    "apiGroups": ["hostpool.io"],
                    "resources": ["sessionhosts", "sessionrequests", "sessionhosts/status"],
                    "verbs": ["get", "list", "create", "patch", "update"],
                }
            ],
        }
        rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
        kube.call("POST", f"{rbac}/roles", body=too_much)
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "too-much"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "too-much",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": AGENT_SA, "namespace": ns}
                for ns in (namespace, other)
            ],
        }
        kube.call("POST", f"{rbac}/rolebindings", body=binding)
        agent = installed.pod_token(HOST_A)
        wait_in_effect(agent, HOST_B, "own-host")
        host_a = resource_path("SessionHost", namespace, HOST_A)
        drain = {"spec": {"drainMode": True}}
        wait_refused_by_policy(agent, "agent-operations", host_a, drain)
        agent.refused("agent-operations", "PATCH", host_a, {"spec": {"drainMode": True}})
        request = builders.request("forged", "desk", "mallory@corp.example")
        agent.refused(
            "agent-operations", "POST", resource_path("SessionRequest", namespace), request
        )
        assert kube.get("SessionHost", namespace, HOST_A)["spec"]["drainMode"] is False
        assert not kube.exists("SessionRequest", namespace, "forged")

        # The same ServiceAccount name and pod name in another namespace: not A's agent.
        elsewhere = installed.pod_token(HOST_A, namespace=other)
        path = host_status(namespace, HOST_A)
        metrics = {"status": {"metrics": {"cpuPercent": 3}}}
        wait_refused_by_policy(elsewhere, "own-namespace", path, metrics)
        elsewhere.refused("own-namespace", "PATCH", path, metrics)
        assert "metrics" not in status(kube, "SessionHost", namespace, HOST_A)
    finally:
        kube.delete_namespace(other)


def test_the_agent_itself_works_under_its_sidecar_credential(
    kube: Kube,
    namespace: str,
    install_agents: Callable[[str, dict[str, Any]], Installed],
    tmp_path: Path,
) -> None:
    """The real hostpool-agent process, holding only A's pod-bound token: every write it
    makes (metrics, sessionState, the logoff delete, an Event) passes RBAC and the policy,
    and B's request stays as it was."""
    installed = install_agents(namespace, {})
    wait_default_service_account(kube, namespace)
    create_world(kube, namespace, [HOST_A, HOST_B])
    agent = installed.pod_token(HOST_A)
    wait_in_effect(agent, HOST_B, "own-host")
    rb1_before = status(kube, "SessionRequest", namespace, "rb1")
    sessions = tmp_path / "sessions.jsonl"
    sessions.write_text('{"user": "ra1@corp.example", "state": "Active"}\n')
    script = tmp_path / "load.sh"
    script.write_text("#!/bin/sh\necho nonsense\n")  # fails: the agent posts an Event
    script.chmod(0o755)
    log_path = tmp_path / "agent.log"
    command = [
        sys.executable,
        "-m",
        "hostpool_operator.agent",
        "--host",
        HOST_A,
        "--namespace",
        namespace,
        "--interval",
        "1",
        "--sessions-command",
        f"cat {sessions}",
        "--load-script",
        str(script),
    ]
    env = {**os.environ, "KUBECONFIG": str(agent.api.kubeconfig)}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(
            lambda: (
                "cpuPercent" in status(kube, "SessionHost", namespace, HOST_A).get("metrics", {})
            ),
            WAIT_SECONDS,
            what="metrics written under the agent's own token",
        )
        wait_for(
            lambda: (
                status(kube, "SessionRequest", namespace, "ra1").get("sessionState") == "Active"
            ),
            WAIT_SECONDS,
            what="ra1 Active",
        )
        sessions.write_text("")  # ra1's user logs off
        wait_for(
            lambda: (
                kube.request("GET", resource_path("SessionRequest", namespace, "ra1"))[0] == 404
            ),
            WAIT_SECONDS,
            what="ra1 deleted by the agent",
        )
        events = kube.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
        assert any(
            e["reason"] == "LoadScriptFailed" and e["involvedObject"]["name"] == HOST_A
            for e in events
        ), [e["reason"] for e in events]
    finally:
        proc.terminate()
        proc.wait(15)
    text = log_path.read_text(errors="replace")
    assert lines_saying(text, "403", "Forbidden") == [], text[-3000:]
    assert status(kube, "SessionRequest", namespace, "rb1") == rb1_before
    assert status(kube, "SessionRequest", namespace, "ra2").get("sessionState") == "Connecting"


def test_the_user_reaches_notify_and_logoff_commands_only_as_an_environment_variable(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """A user name full of shell syntax (``$(...)``, ``&``, ``|``, ``;``, quotes, cmd.exe's
    ``%VAR%``): the real agent's notify and logoff commands get it in ``HOSTPOOL_USER``,
    byte for byte, and nothing in it runs (the command line is the operator's flag alone,
    never a string built with the user's name)."""
    short = Path(tempfile.mkdtemp(prefix="hp"))  # spec.user has at most 256 bytes
    pwned = short / "p"
    user = f"u$(touch {pwned})`touch {pwned}`&touch {pwned}|x;touch {pwned}\"'%HOSTPOOL_MESSAGE%"
    kube.create(namespace, builders.pool("desk", "DepthFirst", 5))
    kube.create(namespace, builders.host(HOST_A, "desk"))
    kube.create(namespace, builders.request("odd", "desk", user))
    deadline = datetime.now(UTC) + timedelta(seconds=10)  # the notice comes first
    logoff = {"message": "maintenance", "deadline": deadline.strftime("%Y-%m-%dT%H:%M:%SZ")}
    kube.merge_patch(
        "SessionRequest",
        namespace,
        "odd",
        {"status": {**assigned(HOST_A), "logoff": logoff}},
        status=True,
    )
    notified, logged_off = tmp_path / "notified", tmp_path / "logged-off"
    log_path = tmp_path / "agent.log"
    agent = AgentProcess(kube.kubeconfig, namespace, HOST_A, log_path)
    agent.start(
        "--sessions-command", "true",
        "--notify-command", f'printf "%s|%s" "$HOSTPOOL_USER" "$HOSTPOOL_MESSAGE" > {notified}',
        "--logoff-command", f'printf "%s" "$HOSTPOOL_USER" > {logged_off}',
    )  # fmt: skip
    try:
        wait_for(
            lambda: (
                kube.request("GET", resource_path("SessionRequest", namespace, "odd"))[0] == 404
            ),
            WAIT_SECONDS,
            what="the agent to log the user off and delete the request",
        )
    finally:
        code = agent.stop()
    assert code == 0, agent.log()[-3000:]
    assert notified.read_text() == f"{user}|maintenance"
    assert logged_off.read_text() == user
    assert not pwned.exists(), "a part of the user name ran as a command"
    shutil.rmtree(short)
