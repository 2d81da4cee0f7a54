"""A ValidatingAdmissionPolicy on SessionHost updates in one namespace, put in force for a
test and taken away after it: a cluster's own policy saying no to the operator's writes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from support.kube import Kube

VAP = "/apis/admissionregistration.k8s.io/v1"


def host_update_policy(name: str, expression: str, message: str) -> dict[str, Any]:
    """Refuses every SessionHost update for which ``expression`` is false."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["hostpool.io"],
                        "apiVersions": ["v1alpha1"],
                        "operations": ["UPDATE"],
                        "resources": ["sessionhosts"],
                    }
                ]
            },
            "validations": [{"expression": expression, "message": message}],
        },
    }


def namespace_binding(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }


@contextmanager
def host_updates_refused(
    kube: Kube, namespace: str, name: str, expression: str, message: str
) -> Iterator[None]:
    """The policy and its binding, created on entry and deleted on exit. The API server
    takes a moment to enforce a new policy: callers wait for a refusal (a dry run)."""
    kube.call(
        "POST",
        f"{VAP}/validatingadmissionpolicies",
        body=host_update_policy(name, expression, message),
    )
    kube.call(
        "POST", f"{VAP}/validatingadmissionpolicybindings", body=namespace_binding(name, namespace)
    )
    try:
        yield
    finally:
        kube.request("DELETE", f"{VAP}/validatingadmissionpolicybindings/{name}")
        kube.request("DELETE", f"{VAP}/validatingadmissionpolicies/{name}")
