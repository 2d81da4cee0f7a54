"""The broker as a real process for the end-to-end tests, and an HTTP client for it.

``BrokerProcess`` runs ``python -m hostpool_operator.broker`` against the suite's API server
and an issuer (Keycloak), waits for ``/readyz``, and keeps its log for the failure report."""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from support.cluster import Cluster
from support.keycloak import CLIENT_SECRET, CORP_USERS, OTHER_USERS, Keycloak
from support.ports import free_port

#: The realm, client and pool the broker tests use, and the label on the broker's requests.
REALM = "corp"
CLIENT = "hostpool-desktops"
POOL = "desk"
BROKER_LABEL = "hostpool.io/broker"

Obj = dict[str, Any]


@dataclass
class Reply:
    """One HTTP answer: status, headers, and the body as JSON (or text when it is not)."""

    status: int
    headers: dict[str, str]
    text: str
    body: Any = field(default=None)


class BrokerProcess:
    def __init__(
        self,
        kubeconfig: Path,
        issuer: str,
        audience: str,
        namespaces: Iterable[str],
        log_path: Path,
        *,
        extra_args: Iterable[str] = (),
        port: int | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.issuer = issuer
        self.audience = audience
        self.namespaces = list(namespaces)
        self.log_path = log_path
        self.extra_args = list(extra_args)
        self.port = port or free_port()
        #: Where its /metrics are served (--metrics-listen; not on the API's port).
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.scheme = "https" if "--tls-cert" in self.extra_args else "http"
        #: Trusts the broker's certificate (set by a test that gives it one).
        self.ssl_context: ssl.SSLContext | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def command(self) -> list[str]:
        ns_args = [arg for ns in self.namespaces for arg in ("--namespace", ns)]
        # The suite's Keycloak serves plain http on 127.0.0.1: the broker takes such an
        # issuer only when told so by name.
        insecure = ["--oidc-allow-insecure-issuer"] if self.issuer.startswith("http://") else []
        return [
            sys.executable,
            "-m",
            "hostpool_operator.broker",
            "--oidc-issuer",
            self.issuer,
            "--oidc-audience",
            self.audience,
            *insecure,
            "--listen",
            f"127.0.0.1:{self.port}",
            *ns_args,
            "--verbose",
            *([] if "--metrics-listen" in self.extra_args else self._metrics_flag()),
            *self.extra_args,
        ]

    def _metrics_flag(self) -> list[str]:
        return ["--metrics-listen", f"127.0.0.1:{self.metrics_port}"]

    def start(self, timeout: float = 60.0, *, ready: bool = True) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("ab") as log:
            self.starts += 1
            log.write(f"==== e2e: broker start #{self.starts}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        if not ready:
            return
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"the broker exited with {self.proc.returncode}:\n{self.log_tail()}",
                    pytrace=False,
                )
            try:
                if self.call("GET", "/readyz").status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the broker was not ready in {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.1)

    def kill(self) -> None:
        """kill -9: no shutdown at all."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        with self.log_path.open("ab") as log:
            log.write(f"==== e2e: broker stopped, exit code {self.proc.returncode}\n".encode())
        self.proc = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def problems(self) -> list[str]:
        markers = ("Traceback (most recent call last)", " ERROR ", "CRITICAL")
        return [line for line in self.log_text().splitlines() if any(m in line for m in markers)]

    def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: Any = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> Reply:
        """One HTTP call; any status comes back as a Reply (never raised)."""
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        if body is not None:
            data = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(
                request, timeout=timeout, context=self.ssl_context
            ) as answer:
                status, got, raw = answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as error:
            status, got, raw = error.code, dict(error.headers), error.read()
        text = raw.decode(errors="replace")
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        return Reply(status, got, text, parsed)

    def connect(self, namespace: str, pool: str, token: str, **kwargs: Any) -> Reply:
        return self.call(
            "POST", f"/v1/namespaces/{namespace}/pools/{pool}/connect", token=token, **kwargs
        )

    def end_session(self, namespace: str, pool: str, token: str) -> Reply:
        return self.call("DELETE", f"/v1/namespaces/{namespace}/pools/{pool}/session", token=token)

    def pools(self, token: str) -> Reply:
        return self.call("GET", "/v1/pools", token=token)

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as answer:
            text: str = answer.read().decode()
            return text


# ---------------------------------------------------------------------------------------
# what the broker tests share


class Connecting(NamedTuple):
    """What a test of users connecting through the broker works with (the ``connecting``
    fixture): this test's namespace, with the operator running in it to place the requests
    the brokers create; ``brokers`` to start brokers for it; ``tokens`` of realm users."""

    cluster: Cluster
    brokers: Callable[..., BrokerProcess]
    tokens: Callable[[str], str]


def b64int(text: str) -> int:
    return int.from_bytes(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)), "big")


def keycloak_token(keycloak: Keycloak, user: str, realm: str = REALM) -> str:
    users = CORP_USERS if realm == REALM else OTHER_USERS
    password = next(p for name, p, _ in users if name == user)
    return keycloak.token(realm, CLIENT, CLIENT_SECRET, user, password)


def add_realm_key(keycloak: Keycloak, name: str, priority: int) -> tuple[str, Any]:
    """(kid, private key) of an RSA key added to realm corp under ``name``, at a priority
    below Keycloak's own keys: it is published in the realm's key set, Keycloak keeps
    signing with its own."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    status, _, body = keycloak.admin(
        "POST",
        f"/{REALM}/components",
        {
            "name": name,
            "providerId": "rsa",
            "providerType": "org.keycloak.keys.KeyProvider",
            "config": {"priority": [str(priority)], "privateKey": [pem], "algorithm": ["RS256"]},
        },
    )
    assert status == 201, f"adding the key {name}: {status} {body}"
    n = private.public_key().public_numbers().n
    for key in keycloak.jwks(REALM)["keys"]:
        if key.get("kty") == "RSA" and b64int(key["n"]) == n:
            return str(key["kid"]), private
    raise AssertionError(f"the added key {name} is not in the realm's key set")


def entitled_pool(
    cluster: Cluster,
    hosts: list[str],
    *,
    limit: int = 2,
    users: list[str] | None = None,
    groups: list[str] | None = None,
    name: str = POOL,
    **spec: Any,
) -> None:
    cluster.setup_pool(
        name,
        "DepthFirst",
        limit,
        hosts=hosts,
        entitlements={"users": users or [], "groups": groups or []},
        **spec,
    )
    for i, host in enumerate(hosts):
        cluster.patch("SessionHost", host, {"spec": {"address": f"10.0.0.{i + 1}"}})


def broker_requests(cluster: Cluster) -> dict[str, Obj]:
    return {
        n: r
        for n, r in cluster.requests().items()
        if (r["metadata"].get("labels") or {}).get(BROKER_LABEL) == "true"
    }


def host_sessions(cluster: Cluster) -> dict[str, int]:
    return {
        name: ((h.get("status") or {}).get("sessions") or {}).get("total", 0)
        for name, h in cluster.hosts().items()
    }


def assert_refused(reply: Reply, status: int, reason: str | None = None) -> None:
    assert reply.status == status, f"{reply.status}: {reply.text[:400]}"
    assert isinstance(reply.body, dict), reply.text[:400]
    assert set(reply.body) == {"reason", "message"}, reply.body
    if reason is not None:
        assert reply.body["reason"] == reason, reply.body
    assert "Traceback" not in reply.text


# ---------------------------------------------------------------------------------------
