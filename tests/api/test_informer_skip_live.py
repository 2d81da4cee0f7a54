"""One object a handler cannot take never ends a watch (real API server, real informer).

Before: ``Informer.run`` caught only API errors, so an exception from its handler (a decoding
bug, a crafted object) ended the watch task for good and every later event of the kind went
unseen while the operator looked healthy. Now the object is skipped, logged by name and
reported; the list and the watch go on.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from hostpool_operator.controller.manager import Controller
from hostpool_operator.kube.informer import Informer
from support import builders
from support.client_helpers import operator_client
from support.kube import Kube, until

POISON = "poison"


def test_a_handler_that_raises_on_one_object_skips_it_and_the_watch_goes_on(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("before-a", POISON, "before-b"):
        kube.create(namespace, builders.request(name, "pool", user=name))
    delivered: list[tuple[str, str]] = []
    skipped: list[tuple[str, str, str]] = []

    def handler(kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name == POISON:
            raise TypeError("a crafted object this handler cannot take")
        delivered.append((kind, name))

    def on_skip(kind: str, obj: dict[str, Any], error: Exception) -> None:
        skipped.append((kind, obj["metadata"]["name"], type(error).__name__))

    async def run() -> bool:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            informer = Informer(client, "sessionrequests", namespace, handler, on_skip=on_skip)
            task = asyncio.create_task(informer.run())
            try:
                await until(lambda: ("ADDED", "before-b") in delivered)
                # The poisoned object changes (a watch event for it), then others arrive.
                await asyncio.to_thread(
                    kube.merge_patch,
                    "SessionRequest",
                    namespace,
                    POISON,
                    {"metadata": {"labels": {"touched": "yes"}}},
                )
                await asyncio.to_thread(
                    kube.create, namespace, builders.request("after", "pool", user="after")
                )
                await until(lambda: ("ADDED", "after") in delivered)
                return not task.done()
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    still_watching = asyncio.run(run())
    assert still_watching
    assert {name for _, name in delivered} == {"before-a", "before-b", "after"}
    assert ("ADDED", POISON, "TypeError") in skipped  # from the list
    assert ("MODIFIED", POISON, "TypeError") in skipped  # from the watch


def test_a_skipped_object_gets_a_warning_event_naming_why(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    obj = kube.create(namespace, builders.request(POISON, "pool", user="mallory"))

    def ours() -> list[dict[str, Any]]:
        events = kube.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
        return [e for e in events if e["involvedObject"].get("name") == POISON]

    async def run() -> list[dict[str, Any]]:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            controller = Controller(client)
            controller.on_skipped("ADDED", obj, KeyError("spec"))
            controller.on_skipped("MODIFIED", obj, KeyError("spec"))  # once per interval
            await until(lambda: not controller._tasks)
            # A standby (not leading yet) posts nothing: the Event waits for its take-over.
            standing_by = await asyncio.to_thread(ours)
            controller.leading = True
            controller.events.release(max_age=60)
            await until(lambda: not controller._tasks)  # the Event posts have finished
            return standing_by

    assert asyncio.run(run()) == []
    posted = ours()
    assert len(posted) == 1, posted
    event = posted[0]
    assert event["type"] == "Warning"
    assert event["reason"] == "ObjectSkipped"
    assert event["involvedObject"]["kind"] == "SessionRequest"
    assert event["involvedObject"]["uid"] == obj["metadata"]["uid"]
    assert "KeyError" in event["message"]
