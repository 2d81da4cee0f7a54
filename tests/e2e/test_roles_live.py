"""The chart's roles for actors other than the operator, proven on a real API server.

The chart is rendered with the project's helm; only the roles for other actors are applied
(component ``user-roles``: the view and edit ClusterRoles that aggregate into Kubernetes'
built-in ones; component ``broker``: the broker's ServiceAccount, Role and RoleBinding).
Tokens come from the TokenRequest API (``kubectl create token``), and every call below is
made with a kubeconfig that holds nothing but that token.

* The broker, with the operator running: it reads the pool and its hosts, creates a
  SessionRequest, watches it until the operator assigns it, reads the host's address, and
  deletes it. It is refused (403) patching a request's status, creating a SessionHost,
  deleting a HostPool and reading Secrets.
* Aggregation: the suite's kube-controller-manager runs the clusterrole-aggregation
  controller, so a ServiceAccount bound (in one namespace) to the built-in ``view``
  ClusterRole may list hostpools once the chart's roles are applied, and one bound to
  ``edit`` may create a pool and scale it, but neither may write a status.
* The session admin role: two people (users, not ServiceAccounts: the admin credential
  impersonates them, as ``kubectl --as`` does; authorization and admission see only the
  user), one bound in the namespace to the built-in ``admin``, one to
  ``hostpool-session-admin``, set a request's status.notice, status.disconnect and
  status.logoff and are refused its phase, host and every other status field, by the
  policy's rule; the helpdesk drains and undrains a host and is refused its address; a user
  bound to the garbage collector's built-in role (held: it creates nothing) still removes
  an owner reference and is refused the address. The
  operator (the chart's ServiceAccount and Role), a host agent (its per-host
  ServiceAccount) and the broker are not held by that policy: each writes what it writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.test_rbac_live import (
    WAIT_SECONDS,
    Identity,
    allowed_verbs,
    assert_refused,
    run_tool,
    watch_events,
)
from support import builders
from support.agent_objects import CLUSTER_SCOPED, apply_agent_objects, delete_objects
from support.cluster import Cluster
from support.helm import helm_template
from support.identity import install_identity, remove_identity, token_kubeconfig
from support.kube import Kube, resource_path, unique_name, wait_for
from support.operator_process import OperatorProcess

OTHER_ACTORS = ("user-roles", "broker", "session-admin")
POOL = "finance"
Obj = dict[str, Any]


#: What the release's admission policies say when they refuse a field of a request's status.
REFUSALS = (
    "the broker may set status.logoff",
    "a session administrator may change only status.logoff, status.disconnect and status.notice",
)


def component(doc: Obj) -> str | None:
    value = doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")
    return None if value is None else str(value)


@pytest.fixture
def chart_roles(kube: Kube, bin_dir: Path, namespace: str) -> Iterator[list[Obj]]:
    """The chart's roles for other actors, applied: the broker's in the test namespace (its
    ServiceAccount there too). The ClusterRoles are deleted afterwards."""
    kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(kube.kubeconfig)]
    release = unique_name("roles", max_length=20)
    values = {
        "broker.create": True,
        "broker.namespace": namespace,
        "broker.serviceAccount": {"create": True, "namespace": namespace},
    }
    docs = [
        d
        for d in helm_template(bin_dir / "helm", values, release=release, namespace=namespace)
        if component(d) in OTHER_ACTORS
    ]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole",
        "ClusterRole",
        "ClusterRole",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBinding",
    ]
    run_tool([*kubectl, "apply", "-f", "-"], stdin=yaml.safe_dump_all(docs))
    try:
        yield docs
    finally:
        cluster_scoped = [d for d in docs if d["kind"].startswith(("ClusterRole", "Validating"))]
        run_tool(
            [*kubectl, "delete", "--ignore-not-found", "--wait=false", "-f", "-"],
            stdin=yaml.safe_dump_all(cluster_scoped),
        )


@pytest.fixture
def identity_of(
    kube: Kube,
    bin_dir: Path,
    tmp_path: Path,
) -> Callable[[str, str], Identity]:
    """An Identity (a kubeconfig with only its token) for a ServiceAccount."""
    kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(kube.kubeconfig)]

    def make(namespace: str, name: str) -> Identity:
        token = run_tool(
            [*kubectl, "create", "token", name, "-n", namespace, "--duration", "1h"]
        ).strip()
        path = token_kubeconfig(kube.kubeconfig, token, tmp_path / f"{name}.kubeconfig")
        api = Kube.connect(path)
        return Identity([], path, api, f"system:serviceaccount:{namespace}:{name}", namespace)

    return make


def wait_allowed(identity: Identity, resource: str, verb: str, namespace: str) -> None:
    """Until the authorizer has seen the new roles and bindings (and, for the built-in
    roles, the aggregation controller has filled them in)."""
    wait_for(
        lambda: verb in allowed_verbs(identity, "hostpool.io", resource, namespace),
        WAIT_SECONDS,
        what=f"{identity.username} may {verb} {resource}",
    )


def service_account(kube: Kube, namespace: str, name: str, cluster_role: str) -> None:
    """A ServiceAccount bound in ``namespace`` to a built-in ClusterRole."""
    kube.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": cluster_role,
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    kube.call(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        body=binding,
    )


def test_the_broker_asks_for_a_session_and_nothing_more(
    kube: Kube,
    namespace: str,
    cluster: Cluster,
    operator_process: OperatorProcess,
    chart_roles: list[Obj],
    identity_of: Callable[[str, str], Identity],
) -> None:
    del operator_process
    (sa,) = [d for d in chart_roles if d["kind"] == "ServiceAccount"]
    broker = identity_of(namespace, sa["metadata"]["name"])
    cluster.setup_pool(POOL, "DepthFirst", 2, hosts=["rds-01"], host_spec={"address": "10.0.0.1"})
    wait_allowed(broker, "sessionrequests", "create", namespace)
    assert allowed_verbs(broker, "hostpool.io", "sessionrequests", namespace) == {
        "create",
        "get",
        "list",
        "watch",
        "delete",
    }
    for resource in ("hostpools", "sessionhosts"):
        assert allowed_verbs(broker, "hostpool.io", resource, namespace) == {"get", "list", "watch"}

    api = broker.api
    pool = api.call("GET", resource_path("HostPool", namespace, POOL))
    assert pool["metadata"]["name"] == POOL
    hosts = api.call("GET", resource_path("SessionHost", namespace))
    assert [h["metadata"]["name"] for h in hosts["items"]] == ["rds-01"]

    requests = resource_path("SessionRequest", namespace)
    before = api.call("GET", requests)["metadata"]["resourceVersion"]
    body = {
        "apiVersion": "hostpool.io/v1alpha1",
        "kind": "SessionRequest",
        "metadata": {"name": "alice"},
        "spec": {"poolRef": {"name": POOL}, "user": "alice"},
    }
    created = api.call("POST", requests, body=body)
    uid = created["metadata"]["uid"]

    # The broker's watch sees the request added, then assigned by the operator.
    seen: list[Obj] = []

    def assigned() -> Obj | None:
        for event in watch_events(broker, requests, before):
            obj = event.get("object", {})
            if obj.get("metadata", {}).get("uid") == uid:
                seen.append(event)
                if obj.get("status", {}).get("phase") == "Assigned":
                    return dict(obj)
        return None

    obj = wait_for(assigned, WAIT_SECONDS, what="the broker watches alice assigned")
    assert seen[0]["type"] == "ADDED"
    assert obj["status"]["host"] == "rds-01"
    assert obj["status"]["hostAddress"] == "10.0.0.1"
    host = api.call("GET", resource_path("SessionHost", namespace, "rds-01"))
    assert host["status"]["address"] == "10.0.0.1"

    # Refused: a request's status (but its logoff), a host, a pool's deletion, Secrets.
    name_path = resource_path("SessionRequest", namespace, "alice")

    def policy_in_force() -> bool:
        # A dry run passes admission without writing: the API server may take a moment to
        # load a new admission policy.
        code, _ = broker.api.request(
            "PATCH",
            f"{name_path}/status?dryRun=All",
            body={"status": {"phase": "Failed"}},
            content_type="application/merge-patch+json",
        )
        return code == 403

    wait_for(policy_in_force, WAIT_SECONDS, what="the broker's admission policy in force")
    forbidden: list[Obj] = [{"phase": "Failed"}, {"host": "rds-02"}, {"conditions": []}]
    for status in forbidden:
        code, answer = broker.api.request(
            "PATCH",
            f"{name_path}/status",
            body={"status": status},
            content_type="application/merge-patch+json",
        )
        assert code == 403, f"status {status}: {code} {answer}"
        # Both the broker's policy and the session admin policy refuse these fields; the API
        # server names whichever it evaluated first, in no fixed order.
        message = answer.get("message", "")
        assert any(refusal in message for refusal in REFUSALS), answer
    assert_refused(broker, "PATCH", name_path, {"metadata": {"labels": {"x": "y"}}})
    host_body = {
        "apiVersion": "hostpool.io/v1alpha1",
        "kind": "SessionHost",
        "metadata": {"name": "rogue"},
        "spec": {"poolRef": {"name": POOL}},
    }
    assert_refused(broker, "POST", resource_path("SessionHost", namespace), host_body)
    assert_refused(broker, "DELETE", resource_path("HostPool", namespace, POOL))
    assert_refused(broker, "GET", f"/api/v1/namespaces/{namespace}/secrets")
    assert_refused(broker, "GET", resource_path("ScalingPlan", namespace))

    # A logoff is the one status write it may make.
    logoff = {"logoff": {"message": "bye", "deadline": "2026-01-01T00:00:00Z"}}
    code, answer = broker.api.request(
        "PATCH",
        f"{name_path}/status?dryRun=All",
        body={"status": logoff},
        content_type="application/merge-patch+json",
    )
    assert code == 200, f"{code} {answer}"
    assert answer["status"]["phase"] == "Assigned"

    # Logoff: the broker deletes its request.
    api.call("DELETE", name_path)
    wait_for(
        lambda: kube.request("GET", name_path)[0] == 404,
        WAIT_SECONDS,
        what="alice's request deleted by the broker",
    )
    assert POOL in cluster.objects("HostPool")


def test_view_and_edit_aggregate_into_the_built_in_roles(
    kube: Kube,
    namespace: str,
    chart_roles: list[Obj],
    identity_of: Callable[[str, str], Identity],
) -> None:
    del chart_roles
    service_account(kube, namespace, "viewer", "view")
    service_account(kube, namespace, "editor", "edit")
    viewer = identity_of(namespace, "viewer")
    editor = identity_of(namespace, "editor")
    # The aggregation controller copies the chart's rules into view and edit.
    wait_allowed(viewer, "hostpools", "list", namespace)
    wait_allowed(editor, "hostpools", "create", namespace)
    for kind in ("hostpools", "sessionhosts", "sessionrequests", "scalingplans"):
        assert allowed_verbs(viewer, "hostpool.io", kind, namespace) == {"get", "list", "watch"}
        assert allowed_verbs(editor, "hostpool.io", kind, namespace) == {
            "get",
            "list",
            "watch",
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection",
        }
        for identity in (viewer, editor):
            assert not allowed_verbs(identity, "hostpool.io", kind, namespace, "status")

    pool = {
        "apiVersion": "hostpool.io/v1alpha1",
        "kind": "HostPool",
        "metadata": {"name": POOL},
        "spec": {"loadBalancer": {"type": "BreadthFirst"}, "scaling": {"maxHosts": 4}},
    }
    pools = resource_path("HostPool", namespace)
    assert_refused(viewer, "POST", pools, pool)
    editor.api.call("POST", pools, body=pool)
    listing = viewer.api.call("GET", pools)
    assert [p["metadata"]["name"] for p in listing["items"]] == [POOL]
    # edit may scale a pool (the /scale subresource), view may not; neither writes status.
    scale = f"{resource_path('HostPool', namespace, POOL)}/scale"
    patch = {"spec": {"replicas": 2}}
    assert_refused(viewer, "PATCH", scale, patch)
    code, answer = editor.api.request(
        "PATCH", scale, body=patch, content_type="application/merge-patch+json"
    )
    assert code == 200, answer
    assert kube.get("HostPool", namespace, POOL)["spec"]["scaling"]["minHosts"] == 2
    status = f"{resource_path('HostPool', namespace, POOL)}/status"
    assert_refused(editor, "PATCH", status, {"status": {"pendingRequests": 1}})
    assert_refused(viewer, "GET", f"/api/v1/namespaces/{namespace}/secrets/x")


# ---------------------------------------------------------------------------------------
# the session admin role

OPS = "ops@corp.example"  # bound to the built-in admin in the namespace
HELPDESK = "helpdesk@corp.example"  # bound to hostpool-session-admin only
COLLECTOR = "gc@corp.example"  # bound to the garbage collector's built-in role
HOST = "rds-01"
NOW = "2026-01-05T08:00:00Z"
LATER = "2026-01-05T08:05:00Z"
MERGE_PATCH = "application/merge-patch+json"

ASSIGNED: Obj = {
    "observedGeneration": 1,
    "phase": "Assigned",
    "host": HOST,
    "hostAddress": "10.0.0.1",
    "reason": "NewSession",
    "message": f"Assigned to {HOST}",
    "sessionState": "Active",
    "assignedAt": NOW,
    "stateChangedAt": NOW,
    "logonAt": NOW,
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "NewSession", "lastTransitionTime": NOW}
    ],
}


def person(kube: Kube, username: str) -> Identity:
    """A person: the admin credential impersonating ``username`` (what ``kubectl --as``
    does). The API server authorizes and admits the call as that user alone (with the
    group system:authenticated), never as the admin."""
    api = Kube.connect(kube.kubeconfig)
    api.api_client.set_default_header("Impersonate-User", username)
    return Identity([], kube.kubeconfig, api, username)


def bind_user(kube: Kube, namespace: str, user: str, cluster_role: str) -> None:
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": unique_name(cluster_role, max_length=40)},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": cluster_role,
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    kube.call(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        body=binding,
    )


def patch(identity: Identity, path: str, body: Obj, **query: str) -> tuple[int, Any]:
    return identity.api.request(
        "PATCH", path, body=body, content_type=MERGE_PATCH, query=query or None
    )


def rule_message(docs: list[Obj], rule: str) -> str:
    (policy,) = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy" and component(d) == "session-admin"
    ]
    (message,) = [
        v["message"]
        for v in policy["spec"]["validations"]
        if v["message"].startswith(f"rule {rule}:")
    ]
    return str(message)


def assert_held(identity: Identity, docs: list[Obj], rule: str, path: str, body: Obj) -> None:
    """Refused by the session admin policy's rule ``rule``: 403, and the rule's message."""
    code, answer = patch(identity, path, body)
    assert code == 403, f"{identity.username}: {body} answered {code}, not 403: {answer}"
    assert isinstance(answer, dict), answer
    assert answer.get("reason") == "Forbidden", answer
    message = str(answer.get("message", ""))
    assert "ValidatingAdmissionPolicy" in message, message
    assert rule_message(docs, rule) in message, message


def wait_status_allowed(identity: Identity, namespace: str) -> None:
    """Until the authorizer lets ``identity`` patch a request's status (for admin: once the
    aggregation controller has filled the role in)."""

    def allowed() -> bool:
        verbs = allowed_verbs(identity, "hostpool.io", "sessionrequests", namespace, "status")
        return "patch" in verbs

    wait_for(allowed, WAIT_SECONDS, what=f"{identity.username} may patch sessionrequests/status")


def test_session_admins_set_notice_disconnect_and_logoff_and_nothing_else(
    kube: Kube,
    namespace: str,
    bin_dir: Path,
    tmp_path: Path,
    chart_roles: list[Obj],
    identity_of: Callable[[str, str], Identity],
) -> None:
    kube.create(namespace, builders.pool(POOL, "DepthFirst", 2))
    kube.create(namespace, builders.host(HOST, POOL, address="10.0.0.1"))
    kube.create(namespace, builders.request("alice", POOL, "alice@corp.example"))
    kube.merge_patch("SessionRequest", namespace, "alice", {"status": ASSIGNED}, status=True)
    bind_user(kube, namespace, OPS, "admin")
    bind_user(kube, namespace, HELPDESK, "hostpool-session-admin")
    ops, helpdesk = person(kube, OPS), person(kube, HELPDESK)
    status_path = resource_path("SessionRequest", namespace, "alice") + "/status"
    host_path = resource_path("SessionHost", namespace, HOST)

    # RBAC: admin gets the role through aggregation (the controller fills admin in).
    for identity in (ops, helpdesk):
        wait_status_allowed(identity, namespace)
    verbs = allowed_verbs(helpdesk, "hostpool.io", "sessionrequests", namespace, "status")
    assert verbs == {"get", "patch", "update"}
    assert allowed_verbs(helpdesk, "hostpool.io", "sessionrequests", namespace) == {
        "get",
        "list",
        "watch",
    }
    assert allowed_verbs(helpdesk, "hostpool.io", "sessionhosts", namespace) == {
        "get",
        "list",
        "watch",
        "patch",
        "update",
    }
    assert allowed_verbs(helpdesk, "hostpool.io", "hostpools", namespace) == {
        "get",
        "list",
        "watch",
    }
    assert "list" in allowed_verbs(helpdesk, "", "events", namespace)

    # The policy in force (a dry run: nothing is written before).
    request_rule = "session-admin-request-fields"
    phase = {"status": {"phase": "Failed"}}

    def policy_in_force() -> bool:
        code, answer = patch(helpdesk, status_path, phase, dryRun="All")
        return code == 403 and rule_message(chart_roles, request_rule) in str(answer)

    wait_for(policy_in_force, WAIT_SECONDS, what="the session admin policy in force")

    # Both people set the three fields; each write is stored as sent.
    for identity in (ops, helpdesk):
        who = identity.username
        writes: list[Obj] = [
            {"notice": {"message": f"maintenance at noon ({who})", "sentAt": NOW}},
            {"disconnect": {"requestedAt": NOW}},
            {"logoff": {"message": f"logged off by {who}", "deadline": LATER}},
            {"notice": None, "disconnect": None, "logoff": None},
        ]
        for write in writes:
            code, answer = patch(identity, status_path, {"status": write})
            assert code == 200, f"{who}: {write} answered {code}: {answer}"
            for field, value in write.items():
                assert answer["status"].get(field) == value, (who, field, answer["status"])
        # Anything else of the status: refused by the rule, alone or with an allowed field.
        for change in (
            {"phase": "Failed"},
            {"host": "rds-02"},
            {"hostAddress": "10.6.6.6"},
            {"sessionState": "Disconnected"},
            {"stateChangedAt": LATER},
            {"logonAt": None},
            {"assignedAt": LATER},
            {"conditions": None},
            {"observedGeneration": 2},
            {"notice": {"message": "hi", "sentAt": NOW}, "phase": "Pending"},
        ):
            assert_held(identity, chart_roles, request_rule, status_path, {"status": change})
    # An update (PUT) of the status is held the same way.
    current = kube.get("SessionRequest", namespace, "alice")
    current["status"]["host"] = "rds-02"
    code, answer = helpdesk.api.request("PUT", status_path, body=current)
    assert code == 403, answer
    assert rule_message(chart_roles, request_rule) in answer.get("message", ""), answer
    assert kube.get("SessionRequest", namespace, "alice")["status"] == ASSIGNED

    # Drain and undrain, assign and unassign; nothing else of a host. admin (which may
    # create hosts) is not held.
    host_rule = "session-admin-host-fields"
    for drain in (True, False):
        code, answer = patch(helpdesk, host_path, {"spec": {"drainMode": drain}})
        assert code == 200, answer
        assert answer["spec"]["drainMode"] is drain
    code, answer = patch(helpdesk, host_path, {"spec": {"assignedUser": "carol"}})
    assert code == 200, answer
    assert answer["spec"]["assignedUser"] == "carol"
    code, answer = patch(helpdesk, host_path, {"spec": {"assignedUser": None}})
    assert code == 200, answer
    assert "assignedUser" not in answer["spec"]
    assert_held(helpdesk, chart_roles, host_rule, host_path, {"spec": {"address": "10.6.6.6"}})
    assert_held(
        helpdesk,
        chart_roles,
        host_rule,
        host_path,
        {"spec": {"features": {"multiSession": False}}},
    )
    assert_held(helpdesk, chart_roles, host_rule, host_path, {"metadata": {"labels": {"x": "y"}}})
    assert_held(
        helpdesk,
        chart_roles,
        host_rule,
        host_path,
        {"metadata": {"annotations": {"hostpool.io/drained-by-plan": "2026-12-02T00:00:00Z"}}},
    )
    # Nor the host's owners or finalizers: an owner pointed at another object would have
    # the garbage collector delete the host with its workload and claims; a finalizer would
    # keep it from ever going.
    owners_rule = "session-admin-host-owners"
    other = kube.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "doomed"}},
    )
    elsewhere = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "doomed",
        "uid": other["metadata"]["uid"],
    }
    assert_held(
        helpdesk,
        chart_roles,
        owners_rule,
        host_path,
        {"metadata": {"ownerReferences": [elsewhere]}},
    )
    assert_held(
        helpdesk, chart_roles, owners_rule, host_path, {"metadata": {"finalizers": ["x.io/never"]}}
    )
    host_meta = kube.get("SessionHost", namespace, HOST)["metadata"]
    assert "ownerReferences" not in host_meta
    assert "finalizers" not in host_meta
    code, answer = patch(ops, host_path, {"spec": {"address": "10.0.0.9"}}, dryRun="All")
    assert code == 200, answer
    # The garbage collector's role (patch and delete on anything, create on nothing) is held
    # too, and still does its work: an owner reference removed.
    pool_uid = kube.get("HostPool", namespace, POOL)["metadata"]["uid"]
    owner = {"apiVersion": "hostpool.io/v1alpha1", "kind": "HostPool", "name": POOL}
    owned = {"metadata": {"ownerReferences": [{**owner, "uid": pool_uid}]}}
    kube.merge_patch("SessionHost", namespace, HOST, owned)
    bind_user(kube, namespace, COLLECTOR, "system:controller:generic-garbage-collector")
    collector = person(kube, COLLECTOR)
    wait_for(
        lambda: "patch" in allowed_verbs(collector, "hostpool.io", "sessionhosts", namespace),
        WAIT_SECONDS,
        what="the collector's binding in effect",
    )
    assert "create" not in allowed_verbs(collector, "hostpool.io", "sessionhosts", namespace)
    assert_held(collector, chart_roles, host_rule, host_path, {"spec": {"address": "10.6.6.6"}})
    code, answer = patch(collector, host_path, {"metadata": {"ownerReferences": None}})
    assert code == 200, answer
    assert "ownerReferences" not in answer["metadata"]

    # RBAC: the helpdesk creates and deletes nothing, reads no Secrets.
    requests = resource_path("SessionRequest", namespace)
    body = builders.request("forged", POOL, "mallory@corp.example")
    assert_refused(helpdesk, "POST", requests, body)
    assert_refused(helpdesk, "DELETE", resource_path("SessionRequest", namespace, "alice"))
    assert_refused(helpdesk, "DELETE", host_path)
    assert_refused(helpdesk, "PATCH", resource_path("HostPool", namespace, POOL), {"spec": {}})
    assert_refused(helpdesk, "GET", f"/api/v1/namespaces/{namespace}/secrets")

    # Not held: the operator (the chart's ServiceAccount and Role for this namespace) ...
    operator = install_identity(kube, namespace, tmp_path)
    try:
        assert operator.username.endswith("-hostpool-operator"), operator.username
        operator_api = Kube.connect(operator.kubeconfig)
        as_operator = Identity([], operator.kubeconfig, operator_api, operator.username)
        moved = {"status": {"phase": "Assigned", "host": "rds-02", "sessionState": "Connecting"}}
        wait_for(
            lambda: patch(as_operator, status_path, moved, dryRun="All")[0] == 200,
            WAIT_SECONDS,
            what="the operator's Role in effect and not held",
        )
    finally:
        remove_identity(kube, operator)
    # ... a host agent (held by its own policy, not this one) ...
    release = unique_name("agents", max_length=20)
    agents = apply_agent_objects(
        bin_dir, kube.kubeconfig, release, namespace, {"agents.hosts": [HOST]}
    )
    try:
        agent = identity_of(namespace, f"hostpool-agent-{HOST}")
        measured = {"status": {"sessionState": "Disconnected", "stateChangedAt": LATER}}
        wait_for(
            lambda: patch(agent, status_path, measured)[0] == 200,
            WAIT_SECONDS,
            what="the agent writes its measurements",
        )
        assert kube.get("SessionRequest", namespace, "alice")["status"]["sessionState"] == (
            "Disconnected"
        )
    finally:
        delete_objects(bin_dir, kube.kubeconfig, [d for d in agents if d["kind"] in CLUSTER_SCOPED])
    # ... and the broker, which its own policy holds to a logoff.
    (sa,) = [d for d in chart_roles if d["kind"] == "ServiceAccount"]
    broker = identity_of(namespace, sa["metadata"]["name"])
    logoff = {"status": {"logoff": {"message": "bye", "deadline": NOW}}}
    wait_for(
        lambda: patch(broker, status_path, logoff, dryRun="All")[0] == 200,
        WAIT_SECONDS,
        what="the broker's Role in effect",
    )
    code, answer = patch(broker, status_path, {"status": {"disconnect": {"requestedAt": NOW}}})
    assert code == 403, answer
    assert "the broker may set status.logoff" in answer.get("message", ""), answer
