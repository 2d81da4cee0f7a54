"""The operator's API client under API Priority and Fairness, on a real API server.

In a real cluster the operator's ServiceAccount is not exempt from API Priority and
Fairness: during a logon storm, with many assignment writes in flight, the API server may
turn some away with 429 Too Many Requests. Such a request was never processed, so the
client sends it again after the Retry-After the server asked for, and the caller (the
placement loop) never sees the refusal.

These tests give a ServiceAccount a FlowSchema that sends its hostpool.io requests to a
priority level of its own with the smallest share and no queueing (``Reject``), so that a
burst of concurrent writes is certain to be refused in part. Without retries some writes
fail with 429 (the limit is real); with the client's default every write lands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import kopf
import pytest
import yaml

from hostpool_operator.kube.client import KubeClient
from hostpool_operator.kube.errors import ApiError
from support import builders
from support.kube import API_VERSION, Kube, unique_name, wait_for

FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
#: More concurrent writes than the priority level has seats (a handful), by far.
BURST = 40
#: Bursts the retrying client is given to be throttled at least once.
ROUNDS = 5


def _connection(kube: Kube, token: str) -> kopf.ConnectionInfo:
    config = yaml.safe_load(kube.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    return kopf.ConnectionInfo(
        server=cluster["server"],
        ca_data=cluster.get("certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        token=token,
    )


@pytest.fixture
def throttled_identity(kube: Kube, namespace: str) -> Iterator[tuple[kopf.ConnectionInfo, str]]:
    """A ServiceAccount allowed to write SessionRequests, whose hostpool.io requests go to a
    priority level with the smallest share that rejects instead of queueing."""
    account = "storm-writer"
    kube.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        body={"metadata": {"name": account}},
    )
    kube.call(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        body={
            "metadata": {"name": account},
            "rules": [
                {
                    "apiGroups": ["hostpool.io"],
                    "resources": ["sessionrequests", "sessionrequests/status"],
                    "verbs": ["create", "get", "patch"],
                }
            ],
        },
    )
    kube.call(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        body={
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )
    answer = kube.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    token = str(answer["status"]["token"])
    level = unique_name("hostpool-throttle", max_length=50)
    created: list[str] = []
    try:
        pl = kube.call(
            "POST",
            f"{FLOWCONTROL}/prioritylevelconfigurations",
            body={
                "metadata": {"name": level},
                "spec": {
                    "type": "Limited",
                    "limited": {
                        "nominalConcurrencyShares": 1,
                        "lendablePercent": 0,
                        "borrowingLimitPercent": 0,
                        "limitResponse": {"type": "Reject"},
                    },
                },
            },
        )
        created.append(f"{FLOWCONTROL}/prioritylevelconfigurations/{level}")
        kube.call(
            "POST",
            f"{FLOWCONTROL}/flowschemas",
            body={
                "metadata": {"name": level},
                "spec": {
                    "priorityLevelConfiguration": {"name": level},
                    "matchingPrecedence": 500,
                    "distinguisherMethod": {"type": "ByUser"},
                    "rules": [
                        {
                            "subjects": [
                                {
                                    "kind": "ServiceAccount",
                                    "serviceAccount": {"name": account, "namespace": namespace},
                                }
                            ],
                            "resourceRules": [
                                {
                                    "verbs": ["*"],
                                    "apiGroups": ["hostpool.io"],
                                    "resources": ["*"],
                                    "namespaces": ["*"],
                                }
                            ],
                        }
                    ],
                },
            },
        )
        created.append(f"{FLOWCONTROL}/flowschemas/{level}")
        connection = _connection(kube, token)
        _wait_until_classified(connection, namespace, pl["metadata"]["uid"])
        yield connection, namespace
    finally:
        for path in reversed(created):
            kube.request("DELETE", path)


def _wait_until_classified(connection: kopf.ConnectionInfo, namespace: str, uid: str) -> None:
    """The API server picks up new flow control objects asynchronously: wait until it
    names our priority level in its answers to the ServiceAccount."""

    async def level_in_use() -> bool:
        client = KubeClient(connection)
        try:
            session = client._http()
            url = client._server + client.path("sessionrequests", namespace)
            async with session.get(url) as response:
                await response.read()
                return response.headers.get("X-Kubernetes-PF-PriorityLevel-UID") == uid
        finally:
            await client.close()

    wait_for(
        lambda: asyncio.run(level_in_use()), 30, what="the priority level in use", interval=0.25
    )


async def _burst(
    connection: kopf.ConnectionInfo, namespace: str, prefix: str, *, retries: int | None
) -> tuple[int, list[ApiError], int]:
    """BURST concurrent create + conditional status writes; (written, errors, throttled)."""
    client = (
        KubeClient(connection)
        if retries is None
        else KubeClient(connection, throttle_retries=retries)
    )
    errors: list[ApiError] = []
    written = 0

    async def one(i: int) -> None:
        nonlocal written
        name = f"{prefix}-{i:03d}"
        try:
            obj = await client.create(
                "sessionrequests", namespace, builders.request(name, "storm", name)
            )
            await client.patch_status(
                "sessionrequests",
                namespace,
                name,
                {"phase": "Assigned", "host": f"host-{i % 7}", "reason": "NewSession"},
                resource_version=obj["metadata"]["resourceVersion"],
            )
            written += 1
        except ApiError as error:
            errors.append(error)

    try:
        await asyncio.gather(*(one(i) for i in range(BURST)))
    finally:
        await client.close()
    return written, errors, client.throttled


def test_without_retries_a_burst_is_partly_refused(
    throttled_identity: tuple[kopf.ConnectionInfo, str],
) -> None:
    connection, namespace = throttled_identity
    written, errors, throttled = asyncio.run(_burst(connection, namespace, "bare", retries=0))
    assert errors, "the priority level refused nothing: the test would prove nothing"
    assert {e.status for e in errors} == {429}, [str(e) for e in errors[:3]]
    assert throttled == 0
    assert written == BURST - len(errors)


def test_the_client_sends_refused_requests_again_until_they_land(
    kube: Kube, throttled_identity: tuple[kopf.ConnectionInfo, str]
) -> None:
    connection, namespace = throttled_identity
    # On a loaded machine one burst's requests may happen not to overlap enough to be
    # refused: bursts go on (each one whole) until one was throttled.
    for round_ in range(1, ROUNDS + 1):
        prefix = f"retry{round_}"
        written, errors, throttled = asyncio.run(
            _burst(connection, namespace, prefix, retries=None)
        )
        assert not errors, [str(e) for e in errors[:3]]
        assert written == BURST
        path = f"/apis/{API_VERSION}/namespaces/{namespace}/sessionrequests"
        mine = [
            i
            for i in kube.call("GET", path)["items"]
            if i["metadata"]["name"].startswith(f"{prefix}-")
        ]
        assert len(mine) == BURST
        assert all((i.get("status") or {}).get("phase") == "Assigned" for i in mine)
        if throttled:
            break
    assert throttled > 0, (
        f"nothing was throttled in {ROUNDS} bursts: the retry path was not exercised"
    )
