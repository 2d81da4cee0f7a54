"""Identities other than the admin's: kubeconfigs that hold one bearer token, and the chart's
least-privilege ServiceAccount for one namespace (:func:`install_identity`, the approach of
``test_rbac_live.py`` over the raw API instead of kubectl), under which the fault tests run
the operator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from support.controlplane import ensure_tools
from support.helm import helm_template
from support.kube import ApiError, Kube, Obj, unique_name
from support.paths import REPO_ROOT

RBAC_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}


def kubeconfig_cluster(kubeconfig: Path) -> dict[str, Any]:
    """The cluster entry (server, CA) of the kubeconfig's current context, a relative CA
    path made absolute: usable from a kubeconfig written anywhere else."""
    config = yaml.safe_load(kubeconfig.read_text())
    context_name = config["current-context"]
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = dict(
        next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    )
    ca = cluster.get("certificate-authority")
    if ca and not Path(ca).is_absolute():
        cluster["certificate-authority"] = str((kubeconfig.parent / ca).resolve())
    return cluster


def write_kubeconfig(
    target: Path, cluster: dict[str, Any], token: str, *, namespace: str | None = None
) -> Path:
    """A kubeconfig (mode 0600) with this cluster entry and nothing but ``token``."""
    context: dict[str, str] = {"cluster": "target", "user": "token"}
    if namespace is not None:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "target", "cluster": cluster}],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": context}],
        "current-context": "token",
    }
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)
    return target


def token_kubeconfig(
    admin_kubeconfig: Path, token: str, target: Path, *, namespace: str | None = None
) -> Path:
    """A kubeconfig with the admin kubeconfig's server and CA and nothing but ``token``
    (a ServiceAccount's credential, for tests of what that identity may do)."""
    return write_kubeconfig(
        target, kubeconfig_cluster(admin_kubeconfig), token, namespace=namespace
    )


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
    values = {"watchNamespace": namespace}
    docs = helm_template(bin_dir / "helm", values, release=release, namespace=namespace)
    # Not the session admin role: one per cluster (a fixed name), and not the operator's.
    return [
        d
        for d in docs
        if d.get("kind") in RBAC_PATHS
        and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "session-admin"
    ]


def install_identity(kube: Kube, namespace: str, directory: Path) -> Identity:
    """Render the chart for this namespace (``watchNamespace``, release in the same namespace,
    so the leader-election Lease lives there too), create its ServiceAccount and RBAC objects
    with the admin credentials, and ask the TokenRequest API for a one-hour token."""
    release = unique_name("flt", max_length=16)
    sa_name = ""
    cluster_scoped: list[str] = []
    for doc in _rendered_rbac(kube, release, namespace):
        base = RBAC_PATHS[doc["kind"]].format(ns=namespace)
        kube.call("POST", base, body=doc)
        if doc["kind"].startswith("Cluster"):
            cluster_scoped.append(f"{base}/{doc['metadata']['name']}")
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
    token = str(answer["status"]["token"])
    kubeconfig = token_kubeconfig(
        kube.kubeconfig, token, directory / f"{release}.kubeconfig", namespace=namespace
    )
    return Identity(
        kubeconfig=kubeconfig,
        token=token,
        username=f"system:serviceaccount:{namespace}:{sa_name}",
        cluster_scoped=cluster_scoped,
    )


def remove_identity(kube: Kube, identity: Identity) -> None:
    """Delete the cluster-scoped RBAC objects (the namespace takes the rest with it)."""
    resilient = kube.through_outages()
    for path in identity.cluster_scoped:
        try:
            resilient.call("DELETE", path)
        except ApiError as exc:
            if exc.status != 404:
                raise


def leaked_secrets(identity: Identity, text: str) -> list[str]:
    """Which of the identity's secrets appear in ``text`` (shown shortened)."""
    return [f"{s[:6]}...({len(s)} chars)" for s in identity.secrets() if s in text]
