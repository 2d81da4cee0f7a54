"""A write's answer that arrives after the object's deletion never brings it back (real API
server, real objects, the operator's own routing).

A scaling plan's writes (drain, undrain, logoff) feed their PATCH answers back as MODIFIED
events. If the agent deletes a request (its user logged off) and the DELETED event is handled
before the answer to a logoff PATCH of that request, the answer used to re-add the request:
its session held a slot nothing ever freed (the informer no longer knew the object, so no
relist removed it) and the host never emptied. The same for a drained host deleted meanwhile.
Here the three real objects (assigned, patched, deleted) are handed to the controller in that
unlucky order; the controller is not started, so no write of its own interferes.
"""

from __future__ import annotations

import asyncio

import pytest

from hostpool_operator.controller.manager import Controller
from support import builders
from support.client_helpers import operator_client
from support.kube import Kube


def test_a_logoff_answer_after_the_deletion_does_not_resurrect_the_request(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = kube.create(namespace, builders.pool("finance", "DepthFirst", 2))
    host = kube.create(namespace, builders.host("rds-01", "finance"))
    kube.create(namespace, builders.request("alice", "finance", user="alice@corp"))
    assigned = kube.merge_patch(
        "SessionRequest",
        namespace,
        "alice",
        {"status": {"phase": "Assigned", "host": "rds-01", "sessionState": "Active"}},
        status=True,
    )
    # What a plan's logoff PATCH answers: a newer version of the request.
    answer = kube.merge_patch(
        "SessionRequest",
        namespace,
        "alice",
        {"status": {"logoff": {"message": "bye", "deadline": "2026-12-01T18:00:00Z"}}},
        status=True,
    )
    kube.delete("SessionRequest", namespace, "alice")
    deleted = {**answer, "metadata": {**answer["metadata"]}}

    async def run() -> tuple[int, int, bool]:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            controller = Controller(client)
            controller.on_pool_event("ADDED", pool)
            controller.on_host_event("ADDED", host)
            controller.on_request_event("ADDED", assigned)
            worker = controller.pools[(namespace, "finance")]
            before = worker.state.ledger.count_on("rds-01")
            controller.on_request_event("DELETED", deleted)
            controller.on_request_event("MODIFIED", answer)  # the answer, after the deletion
            return before, worker.state.ledger.count_on("rds-01"), "alice" in worker.state.requests

    before, after, known = asyncio.run(run())
    assert before == 1  # the assigned request held its session
    assert after == 0, "the answer re-opened the deleted request's session"
    assert not known


def test_a_drain_answer_after_the_host_was_deleted_does_not_bring_the_host_back(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = kube.create(namespace, builders.pool("finance", "DepthFirst", 2))
    host = kube.create(namespace, builders.host("rds-01", "finance"))
    answer = kube.merge_patch("SessionHost", namespace, "rds-01", {"spec": {"drainMode": True}})
    kube.delete("SessionHost", namespace, "rds-01")

    async def run() -> bool:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            controller = Controller(client)
            controller.on_pool_event("ADDED", pool)
            controller.on_host_event("ADDED", host)
            controller.on_host_event("DELETED", answer)
            controller.on_host_event("MODIFIED", answer)
            return "rds-01" in controller.pools[(namespace, "finance")].state.hosts

    assert not asyncio.run(run())
