"""Where the operator's token comes from, and that kopf's login handler reads it afresh.

kopf calls the login handler again after a 401; with a kubeconfig whose user has
``tokenFile`` (kopf's own kubeconfig login ignores that key) or in-cluster, the handler must
return what the file holds now. Files and a kubeconfig in a temporary directory; no server.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
import yaml

from hostpool_operator.controller import handlers
from hostpool_operator.kube import auth as k8s_auth


def kubeconfig(directory: Path, user: dict[str, str]) -> Path:
    path = directory / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.fixture
def token_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if Path(k8s_auth.SERVICE_ACCOUNT_TOKEN).exists():
        pytest.skip("runs in a pod: the in-cluster token comes first")
    token = tmp_path / "token"
    token.write_text("first\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, {"tokenFile": str(token)})))
    monkeypatch.setattr(handlers._Logins, "token", None)
    monkeypatch.setattr(handlers._Logins, "at", float("-inf"))
    return token


def authenticate() -> kopf.ConnectionInfo | None:
    # kopf's decorator types the handler as kopf calls it (with every keyword it passes).
    handler = cast(Any, handlers.authenticate)
    result = asyncio.run(handler(settings=kopf.OperatorSettings()))
    assert result is None or isinstance(result, kopf.ConnectionInfo)
    return result


def test_a_kubeconfig_token_file_is_read(token_path: Path) -> None:
    assert k8s_auth.token_file() == str(token_path)
    assert k8s_auth.login().token == "first"


def test_an_inline_token_is_not_a_token_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if Path(k8s_auth.SERVICE_ACCOUNT_TOKEN).exists():
        pytest.skip("runs in a pod: the in-cluster token comes first")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, {"token": "inline"})))
    assert k8s_auth.token_file() is None
    assert k8s_auth.login().token == "inline"


def test_kopf_login_returns_the_token_the_file_holds_now(token_path: Path) -> None:
    first = authenticate()
    assert first is not None
    assert first.token == "first"
    token_path.write_text("second")
    second = authenticate()
    assert second is not None
    assert second.token == "second"


def test_kopf_relogin_with_an_unchanged_file_is_a_new_item_and_waits_for_a_change(
    token_path: Path,
) -> None:
    first = authenticate()
    assert first is not None
    # kopf got a 401 with "first" and asks again at once: the handler waits for the file.
    writer = threading.Timer(0.6, lambda: token_path.write_text("rotated"))
    writer.start()
    started = time.monotonic()
    again = authenticate()
    waited = time.monotonic() - started
    writer.join()
    assert again is not None
    assert again.token == "rotated"
    assert 0.5 < waited < handlers.RELOGIN_WAIT
    # No change within the wait: the same token, but not equal to the invalidated item
    # (kopf would never take that back and stop with "Ran out of valid credentials").
    started = time.monotonic()
    same = authenticate()
    assert time.monotonic() - started >= handlers.RELOGIN_WAIT
    assert same is not None
    assert same.token == "rotated"
    assert same != again


@pytest.mark.parametrize(
    ("environ", "server"),
    [
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
         "https://10.0.0.1:443"),
        ({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"},
         "https://[fd00::1]:6443"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, None),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "https"}, None),
        ({}, None),
    ],
)  # fmt: skip
def test_in_cluster_server_is_the_kubelets_service_address(
    environ: dict[str, str], server: str | None
) -> None:
    """A pod reaches the API server at the address the kubelet gives it, without cluster
    DNS (kopf's own service-account login names kubernetes.default.svc)."""
    assert k8s_auth.in_cluster_server(environ) == server
