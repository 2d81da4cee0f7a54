"""The uids the broker allocates for single sign-on, on a real API server: two brokers (each
its own client and cache, as two replicas) allocating for 30 users at once give every user
one uid, the same from both, and no two users the same; a user's uid survives a restart (a
fresh cache reads the record); a record that is not the user's is an error, never a guess."""

from __future__ import annotations

import asyncio

import pytest

from hostpool_operator.broker.uid_records import UidRecords
from hostpool_operator.logon import uids
from support.client_helpers import operator_client
from support.kube import Kube

USERS = [f"user-{i}@corp.example" for i in range(30)]


def test_two_replicas_at_once_give_each_user_one_uid_and_no_uid_two_users(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run() -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        async with (
            operator_client(kube.kubeconfig, monkeypatch) as one,
            operator_client(kube.kubeconfig, monkeypatch) as two,
        ):
            first, second = UidRecords(one, namespace), UidRecords(two, namespace)
            a, b = await asyncio.gather(
                asyncio.gather(*(first.uid_of(user) for user in USERS)),
                asyncio.gather(*(second.uid_of(user) for user in reversed(USERS))),
            )
            restarted = UidRecords(one, namespace)
            again = await asyncio.gather(*(restarted.uid_of(user) for user in USERS))
        return (
            dict(zip(USERS, a, strict=True)),
            dict(zip(reversed(USERS), b, strict=True)),
            dict(zip(USERS, again, strict=True)),
        )

    first, second, again = asyncio.run(run())
    assert first == second == again
    assert len(set(first.values())) == len(USERS)
    assert all(uids.FIRST_ALLOCATED <= uid <= uids.LAST_ALLOCATED for uid in first.values())
    listing = kube.call("GET", f"/api/v1/namespaces/{namespace}/configmaps")
    owners = {
        item["metadata"]["name"]: item["data"]["user"]
        for item in listing["items"]
        if item["metadata"]["name"].startswith("uid-") and "-user-" not in item["metadata"]["name"]
    }
    for user, uid in first.items():
        assert owners[uids.uid_record_name(uid)] == user


def test_a_record_that_is_not_the_users_is_refused(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": uids.record_name("alice")},
            "data": {"user": "mallory", "uid": "20001"},
        },
    )

    async def run() -> None:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            await UidRecords(client, namespace).uid_of("alice")

    with pytest.raises(uids.UidError, match="not this user's"):
        asyncio.run(run())
