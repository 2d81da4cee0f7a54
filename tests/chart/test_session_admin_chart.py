"""The session admin role as the chart renders it: the ClusterRole hostpool-session-admin
(aggregated into admin), and the ValidatingAdmissionPolicy that holds its holders to three
fields of a request's status and to a host's spec.drainMode. tests/e2e/test_roles_live.py
proves them on a real API server."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import yaml

from support.helm import helm_template_error
from support.monitoring import Obj
from support.paths import REPO_ROOT

Render = Callable[..., list[Obj]]
CRD_DIR = REPO_ROOT / "crds"
COMPONENT = "session-admin"
ROLE = "hostpool-session-admin"
POLICY = "hp-hostpool-operator-session-admin"
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"

ROLE_RULES: list[Obj] = [
    {
        "apiGroups": ["hostpool.io"],
        "resources": ["hostpools", "sessionhosts", "sessionrequests"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["hostpool.io"],
        "resources": ["sessionrequests/status"],
        "verbs": ["get", "patch", "update"],
    },
    {"apiGroups": ["hostpool.io"], "resources": ["sessionhosts"], "verbs": ["patch", "update"]},
    {
        "apiGroups": ["", "events.k8s.io"],
        "resources": ["events"],
        "verbs": ["get", "list", "watch"],
    },
]


def objects(docs: list[Obj]) -> dict[str, Obj]:
    return {
        d["kind"]: d
        for d in docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == COMPONENT
    }


def unchanged(expression: str, section: str) -> set[str]:
    pattern = rf"object\.\?{section}\.\?(\w+) == oldObject\.\?{section}\.\?(\w+)"
    pairs = re.findall(pattern, expression)
    assert all(new == old for new, old in pairs), pairs
    return {new for new, _ in pairs}


def crd_fields(plural: str, section: str, crd_dir: Path = CRD_DIR) -> set[str]:
    crd = yaml.safe_load((crd_dir / f"hostpool.io_{plural}.yaml").read_text())
    return {
        name
        for version in crd["spec"]["versions"]
        for name in version["schema"]["openAPIV3Schema"]["properties"][section]["properties"]
    }


def rule(policy: Obj, name: str) -> Obj:
    (found,) = [
        v for v in policy["spec"]["validations"] if v["message"].startswith(f"rule {name}:")
    ]
    result: Obj = found
    return result


def test_the_role_by_default(render: Render) -> None:
    found = objects(render())
    assert sorted(found) == [
        "ClusterRole",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    role = found["ClusterRole"]
    assert role["metadata"]["name"] == ROLE
    assert "namespace" not in role["metadata"]
    aggregated = {
        k.removeprefix(AGGREGATE)
        for k, v in role["metadata"]["labels"].items()
        if k.startswith(AGGREGATE) and v == "true"
    }
    assert aggregated == {"admin"}
    assert role["rules"] == ROLE_RULES
    # Never another status, never create or delete, never a wildcard.
    for granted in role["rules"]:
        assert "*" not in granted["verbs"] + granted["resources"] + granted["apiGroups"]
        assert not {"create", "delete", "deletecollection"} & set(granted["verbs"])
        for resource in granted["resources"]:
            assert not resource.endswith("/status") or resource == "sessionrequests/status"


def test_the_policy_holds_all_but_three_request_fields_drain_and_assignment(render: Render) -> None:
    found = objects(render())
    policy = found["ValidatingAdmissionPolicy"]
    assert policy["metadata"]["name"] == POLICY
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (constraint,) = spec["matchConstraints"]["resourceRules"]
    assert constraint["operations"] == ["UPDATE"]
    assert sorted(constraint["resources"]) == ["sessionhosts", "sessionrequests/status"]
    # Matched by what the writer may do, not by names.
    (condition,) = spec["matchConditions"]
    assert "serviceaccount" not in condition["expression"]
    assert ".subresource('status')" in condition["expression"]
    assert ".check('patch').allowed()" in condition["expression"]
    assert ".check('create').allowed()" in condition["expression"]

    requests = rule(policy, "session-admin-request-fields")
    fields = unchanged(requests["expression"], "status")
    assert fields == crd_fields("sessionrequests", "status") - {"logoff", "disconnect", "notice"}
    assert {"phase", "host", "hostAddress", "sessionState", "conditions"} <= fields
    assert requests["reason"] == "Forbidden"

    hosts = rule(policy, "session-admin-host-fields")
    assert unchanged(hosts["expression"], "spec") == crd_fields("sessionhosts", "spec") - {
        "drainMode",
        "assignedUser",
        "keepData",  # unassign --keep-data
    }
    assert "object.metadata.?labels == oldObject.metadata.?labels" in hosts["expression"]
    # Not the operator's hostpool.io/data-of either: edited away, a user's files would reach
    # the host's next user.
    assert "object.metadata.?annotations == oldObject.metadata.?annotations" in hosts["expression"]
    # Not the owners or finalizers: the garbage collector (no create on anything) is held too.
    assert "ownerReferences" not in hosts["expression"]
    assert "finalizers" not in hosts["expression"]

    binding = found["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}


def test_not_aggregated_when_aggregation_is_off(render: Render) -> None:
    """rbac.aggregateClusterRoles=false: the role is still rendered, for binding directly,
    but not folded into admin."""
    role = objects(render(**{"rbac.aggregateClusterRoles": False}))["ClusterRole"]
    assert not [k for k in role["metadata"]["labels"] if k.startswith(AGGREGATE)]
    assert role["rules"] == ROLE_RULES


def test_knobs(render: Render) -> None:
    assert not objects(render(**{"sessionAdmin.enabled": False}))
    without_policy = objects(render(**{"sessionAdmin.admissionPolicy": False}))
    assert sorted(without_policy) == ["ClusterRole"]
    # rbac.create false: no role (bring your own), but the policy still holds whoever writes.
    no_rbac = objects(render(**{"rbac.create": False}))
    assert sorted(no_rbac) == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


def test_values_schema_refuses_unknown_keys(helm: Path) -> None:
    error = helm_template_error(helm, {"sessionAdmin": {"enable": True}})
    assert "sessionAdmin" in error, error
    assert "enable" in error, error
    error = helm_template_error(helm, {"sessionAdmin": {"enabled": "yes"}})
    assert "sessionAdmin" in error, error
    assert "enabled" in error, error
