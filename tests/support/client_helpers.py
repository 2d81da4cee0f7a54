"""For live tests of the operator's own client (``hostpool_operator.k8s``) against the
suite's API server: a client logged in the way the operator logs in, and requests to list."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostpool_operator.kube.auth import login
from hostpool_operator.kube.client import KubeClient
from support import builders
from support.kube import Kube


def use_kubeconfig(kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``login()`` read ``kubeconfig`` (and no token file) for this test."""
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("HOSTPOOL_TOKEN_FILE", raising=False)


def operator_client(kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> KubeClient:
    """The operator's client, logged in with ``kubeconfig``."""
    use_kubeconfig(kubeconfig, monkeypatch)
    return KubeClient(login())


def fill_requests(kube: Kube, namespace: str, prefix: str, count: int) -> set[str]:
    """``count`` SessionRequests named ``<prefix>-000``...; their names."""
    names = {f"{prefix}-{i:03d}" for i in range(count)}
    for name in sorted(names):
        kube.create(namespace, builders.request(name, "pool", user=name))
    return names
