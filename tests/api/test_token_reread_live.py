"""The operator's client and its token file, on a real API server.

A ServiceAccount's token is revoked by deleting the ServiceAccount and creating it again
under the same name (tokens are bound to the old uid). The client then gets 401; it re-reads
its token file on the 401 and sends the request once more when the file holds a new token,
and re-reads the file every ``token_reread`` seconds anyway. Every failed try is counted in
``hostpool_api_errors_total`` by its HTTP status, or ``transport`` when no answer came.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import kopf
import pytest
import yaml
from prometheus_client import generate_latest

from hostpool_operator.controller.metrics import PrometheusMetrics
from hostpool_operator.kube.client import KubeClient
from hostpool_operator.kube.errors import ApiError, ApiTransportError
from support.kube import Kube

ACCOUNT = "rotating"


def _connection(kube: Kube, token: str, server: str | None = None) -> kopf.ConnectionInfo:
    config = yaml.safe_load(kube.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority")
    if ca and not Path(ca).is_absolute():
        ca = str((kube.kubeconfig.parent / ca).resolve())
    return kopf.ConnectionInfo(
        server=server or cluster["server"],
        ca_path=ca,
        ca_data=cluster.get("certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        token=token,
    )


def _account(kube: Kube, namespace: str) -> None:
    kube.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        body={"metadata": {"name": ACCOUNT}},
    )


def _token(kube: Kube, namespace: str) -> str:
    answer = kube.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{ACCOUNT}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(answer["status"]["token"])


def _write(path: Path, token: str) -> None:
    staging = path.with_name(path.name + ".new")
    staging.write_text(token)
    os.replace(staging, path)


def _errors(metrics: PrometheusMetrics) -> dict[str, float]:
    counts: dict[str, float] = {}
    for family in metrics.registry.collect():
        if family.name == "hostpool_api_errors":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counts[sample.labels["code"]] = sample.value
    return counts


def test_a_revoked_token_is_replaced_from_the_file_on_the_401(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    _account(kube, namespace)
    # Any authenticated identity may ask who it is: no RBAC needed for the probe.
    review = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    old = _token(kube, namespace)
    token_file = tmp_path / "token"
    _write(token_file, old)
    metrics = PrometheusMetrics()

    async def ask(client: KubeClient) -> str:
        answer = await client.request("POST", review, body=body)
        return str(answer["status"]["userInfo"]["username"])

    async def scenario() -> None:
        client = KubeClient(_connection(kube, old), token_file=str(token_file), metrics=metrics)
        plain = KubeClient(_connection(kube, old))
        try:
            assert await ask(client) == f"system:serviceaccount:{namespace}:{ACCOUNT}"
            kube.call("DELETE", f"/api/v1/namespaces/{namespace}/serviceaccounts/{ACCOUNT}")
            _account(kube, namespace)

            async def refused() -> bool:
                try:
                    await ask(plain)
                except ApiError as error:
                    return error.status == 401
                return False

            for _ in range(150):  # the API server's token cache keeps it up to 10 s
                if await refused():
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the old token was never refused")
            # The file still holds the revoked token: the 401 reaches the caller.
            with pytest.raises(ApiError) as refusal:
                await ask(client)
            assert refusal.value.status == 401
            assert _errors(metrics) == {"401": 1}  # re-read, unchanged: not sent again
            # A new token in the file: the next 401 re-reads it and the request goes through.
            _write(token_file, _token(kube, namespace))
            assert await ask(client) == f"system:serviceaccount:{namespace}:{ACCOUNT}"
            assert _errors(metrics) == {"401": 2}
            assert await ask(client)  # and it stays in use
            assert _errors(metrics) == {"401": 2}
        finally:
            await client.close()
            await plain.close()

    asyncio.run(scenario())


def test_the_token_file_is_read_again_periodically(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    _account(kube, namespace)
    token_file = tmp_path / "token"
    _write(token_file, _token(kube, namespace))
    metrics = PrometheusMetrics()
    review = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}

    async def scenario() -> None:
        # Started with a token the API server never issued: only the file's is valid, and
        # with a zero interval it is read before the first request, so no 401 ever comes.
        client = KubeClient(
            _connection(kube, "not-a-token"),
            token_file=str(token_file),
            token_reread=0.0,
            metrics=metrics,
        )
        try:
            await client.request("POST", review, body=body)
        finally:
            await client.close()

    asyncio.run(scenario())
    assert _errors(metrics) == {}


def test_transport_errors_and_error_answers_are_counted(kube: Kube, namespace: str) -> None:
    metrics = PrometheusMetrics()

    async def scenario() -> None:
        admin = yaml.safe_load(kube.kubeconfig.read_text())
        token = admin["users"][0]["user"].get("token")
        if not token:
            pytest.skip("the suite's kubeconfig holds no token")
        client = KubeClient(_connection(kube, token), metrics=metrics)
        try:
            with pytest.raises(ApiError):
                await client.get("sessionrequests", namespace, "absent")
            with pytest.raises(ApiError):
                await client.create("sessionrequests", namespace, {"kind": "Nonsense"})
        finally:
            await client.close()
        # Nothing listens on port 9 of localhost: no answer at all.
        nowhere = KubeClient(_connection(kube, token, "https://127.0.0.1:9"), metrics=metrics)
        try:
            with pytest.raises(ApiTransportError):
                await nowhere.request("GET", "/version")
        finally:
            await nowhere.close()

    asyncio.run(scenario())
    errors = _errors(metrics)
    assert errors["404"] == 1
    assert errors["transport"] == 1
    assert sum(errors.values()) == 3, errors  # and the refused create, 400 or 422
    text = generate_latest(metrics.registry).decode()
    assert 'hostpool_api_errors_total{code="404"} 1.0' in text
