"""Writes that must not act on a stale decision carry preconditions (real API server).

ZeroActiveSessions deletes a Disconnected request in the version it decided on: a user who
reconnected meanwhile (the agent wrote Active, a newer version) keeps the session, the
delete answers 409. A plan's drain or logoff is sent for the resourceVersion it decided on,
so an admin's change in between is not overwritten and a request re-created under the same
name never receives someone else's logoff (its versions are all newer).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from hostpool_operator.kube.client import KubeClient
from hostpool_operator.kube.errors import ApiError
from support import builders
from support.client_helpers import operator_client
from support.kube import Kube


def _state(kube: Kube, namespace: str, name: str, state: str) -> dict[str, Any]:
    return kube.merge_patch(
        "SessionRequest",
        namespace,
        name,
        {"status": {"phase": "Assigned", "host": "rds-01", "sessionState": state}},
        status=True,
    )


def answer(
    kube: Kube, monkeypatch: pytest.MonkeyPatch, call: Callable[[KubeClient], Awaitable[Any]]
) -> int:
    """The HTTP status the operator's client got for ``call`` (200 when it succeeded)."""

    async def run() -> int:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            try:
                await call(client)
            except ApiError as error:
                return error.status
            return 200

    return asyncio.run(run())


def test_a_delete_of_the_disconnected_version_spares_a_reconnected_session(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.create(namespace, builders.request("alice", "finance", user="alice@corp"))
    decided = _state(kube, namespace, "alice", "Disconnected")  # what the plan saw
    _state(kube, namespace, "alice", "Active")  # the user is back
    meta = decided["metadata"]
    code = answer(
        kube,
        monkeypatch,
        lambda client: client.delete(
            "sessionrequests",
            namespace,
            "alice",
            uid=meta["uid"],
            resource_version=meta["resourceVersion"],
        ),
    )
    assert code == 409
    assert kube.get("SessionRequest", namespace, "alice")["status"]["sessionState"] == "Active"


def test_a_delete_of_the_version_seen_goes_through(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.create(namespace, builders.request("bob", "finance", user="bob@corp"))
    meta = _state(kube, namespace, "bob", "Disconnected")["metadata"]
    code = answer(
        kube,
        monkeypatch,
        lambda client: client.delete(
            "sessionrequests",
            namespace,
            "bob",
            uid=meta["uid"],
            resource_version=meta["resourceVersion"],
        ),
    )
    assert code == 200
    assert not kube.exists("SessionRequest", namespace, "bob")


def test_a_drain_decided_on_an_old_version_does_not_overwrite_an_admins_undrain(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = kube.create(namespace, builders.host("rds-01", "finance", drainMode=False))
    kube.merge_patch("SessionHost", namespace, "rds-01", {"spec": {"drainMode": True}})
    kube.merge_patch("SessionHost", namespace, "rds-01", {"spec": {"drainMode": False}})
    code = answer(
        kube,
        monkeypatch,
        lambda client: client.patch(
            "sessionhosts",
            namespace,
            "rds-01",
            {"spec": {"drainMode": True}},
            resource_version=seen["metadata"]["resourceVersion"],
        ),
    )
    assert code == 409
    assert kube.get("SessionHost", namespace, "rds-01")["spec"]["drainMode"] is False


def test_a_logoff_for_a_request_never_lands_on_its_namesake(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = kube.create(namespace, builders.request("alice", "finance", user="alice@corp"))
    kube.delete("SessionRequest", namespace, "alice")
    kube.create(namespace, builders.request("alice", "finance", user="alice@corp"))
    code = answer(
        kube,
        monkeypatch,
        lambda client: client.patch_status(
            "sessionrequests",
            namespace,
            "alice",
            {"logoff": {"message": "bye", "deadline": "2026-12-01T18:00:00Z"}},
            resource_version=old["metadata"]["resourceVersion"],
        ),
    )
    # The version decided on belongs to the deleted incarnation: never the namesake's. (A
    # uid in the patch would not do: the API server applied such a patch, 200.)
    assert code == 409
    assert "logoff" not in (kube.get("SessionRequest", namespace, "alice").get("status") or {})


def test_a_patch_onto_the_version_read_reads_again_after_a_change_in_between(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``KubeClient.patch_as_read``: what is decided on a version goes onto that version
    only. A change between the read and the write (here made by the decision itself, as
    an agent's status write would land) answers 409 and the object is read and decided
    again; a decision to write nothing writes nothing; a change under every try ends in
    None, with nothing written."""
    kube.create(namespace, builders.request("carol", "finance", user="carol@corp"))
    seen: list[str] = []
    writes = itertools.count()

    def changing(times: int) -> Callable[[dict[str, Any]], dict[str, Any] | bool]:
        def decide(obj: dict[str, Any]) -> dict[str, Any] | bool:
            seen.append(obj["metadata"]["resourceVersion"])
            if len(seen) <= times:  # someone else's write after this read
                _state(kube, namespace, "carol", ("Disconnected", "Active")[next(writes) % 2])
            return {"metadata": {"labels": {"decided-on": obj["metadata"]["resourceVersion"]}}}

        return decide

    async def run(decide: Callable[[dict[str, Any]], Any], attempts: int) -> Any:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            return await client.patch_as_read(
                "sessionrequests", namespace, "carol", decide, attempts=attempts
            )

    answer_ = asyncio.run(run(changing(1), 3))
    assert isinstance(answer_, dict)
    assert len(seen) == 2
    assert seen[0] != seen[1]
    first = answer_["metadata"]["labels"]["decided-on"]
    assert first == seen[1]  # decided on the version read again

    before = kube.get("SessionRequest", namespace, "carol")["metadata"]["resourceVersion"]
    assert asyncio.run(run(lambda obj: False, 3)) is False
    assert kube.get("SessionRequest", namespace, "carol")["metadata"]["resourceVersion"] == before

    seen.clear()
    assert asyncio.run(run(changing(99), 2)) is None
    assert len(seen) == 2
    labels = kube.get("SessionRequest", namespace, "carol")["metadata"]["labels"]
    assert labels["decided-on"] == first  # nothing of the last call's was written
