"""The broker's public logon key published for the hosts, on a real API server: the first
broker makes the ConfigMap; two replicas with two keys (a rotation under way) publishing at
once leave both keys trusted, the newest first, whichever wrote last; a third key pushes the
oldest out; publishing the same key again changes nothing; what is not a key is dropped."""

from __future__ import annotations

import asyncio

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hostpool_operator.broker.logon_keys import KEY, LogonKeyPublisher
from hostpool_operator.logon import credential
from support.client_helpers import operator_client
from support.kube import Kube

NAME = "hostpool-logon-keys"


def _pem() -> bytes:
    return credential.public_pem(Ed25519PrivateKey.generate())


def _published(kube: Kube, namespace: str) -> str:
    body = kube.call("GET", f"/api/v1/namespaces/{namespace}/configmaps/{NAME}")
    return str(body["data"][KEY])


def test_rotation_keeps_the_current_key_and_the_one_before(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new, newer = _pem(), _pem(), _pem()

    async def run() -> list[bool]:
        async with (
            operator_client(kube.kubeconfig, monkeypatch) as one,
            operator_client(kube.kubeconfig, monkeypatch) as two,
        ):
            first = await LogonKeyPublisher(one, [namespace], NAME, old).publish(namespace)
            # Two replicas, one on each key, at once: conditional writes, nobody lost.
            both = await asyncio.gather(
                LogonKeyPublisher(one, [namespace], NAME, new).publish(namespace),
                LogonKeyPublisher(two, [namespace], NAME, old).publish(namespace),
            )
            return [first, *both]

    assert asyncio.run(run())[0] is True
    keys = credential.public_keys(_published(kube, namespace).encode())
    raw = {credential.public_pem_of(k) for k in keys}
    assert raw == {old, new}

    async def again(pem: bytes) -> bool:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            return await LogonKeyPublisher(client, [namespace], NAME, pem).publish(namespace)

    published = _published(kube, namespace)
    current = published.encode().split(b"-----END PUBLIC KEY-----")[0]
    latest = old if old.startswith(current) else new
    assert asyncio.run(again(latest)) is False  # the same key again: nothing to write
    assert _published(kube, namespace) == published
    assert asyncio.run(again(newer)) is True
    keys = credential.public_keys(_published(kube, namespace).encode())
    assert [credential.public_pem_of(k) for k in keys] == [newer, latest]


def test_what_is_not_a_key_is_dropped_and_a_deleted_configmap_comes_back(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = _pem()
    kube.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": NAME},
            "data": {KEY: "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n"},
        },
    )

    async def publish() -> bool:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            return await LogonKeyPublisher(client, [namespace], NAME, mine).publish(namespace)

    assert asyncio.run(publish()) is True
    assert _published(kube, namespace) == mine.decode()
    kube.call("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/{NAME}")
    assert asyncio.run(publish()) is True
    assert _published(kube, namespace) == mine.decode()
