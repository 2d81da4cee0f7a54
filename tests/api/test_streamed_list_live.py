"""Streamed lists (the API server's WatchList) of the operator's informers, on a real API
server; and the paged list they fall back to where the API server cannot stream.

A streamed list is a watch that starts with every existing object (ADDED) and a bookmark
marking the end of them; the informer reports each object once, takes the bookmark's
resourceVersion and watches on from there, so nothing created after is missed and nothing
listed comes back as new. A relist reports what vanished meanwhile as DELETED.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from pathlib import Path
from typing import Any

import pytest

from hostpool_operator.kube.errors import ApiError, ApiTransportError
from hostpool_operator.kube.informer import Informer
from support import builders
from support.client_helpers import fill_requests, operator_client
from support.controlplane import ControlPlane
from support.kube import Kube, crd_files, need_control_plane

OBJECTS = 23


async def _watch_until(informer: Informer, events: list[tuple[str, str]], event: Any) -> None:
    """Watch from the informer's resourceVersion until ``event`` has been reported."""
    watching = asyncio.create_task(informer._watch())
    try:
        for _ in range(200):
            if event in events:
                return
            await asyncio.sleep(0.05)
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching


def test_an_informer_streams_its_list_then_watches_from_the_end_bookmark(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = fill_requests(kube, namespace, "streamed", OBJECTS)
    events: list[tuple[str, str]] = []

    def handler(kind: str, obj: dict[str, Any]) -> None:
        events.append((kind, obj["metadata"]["name"]))

    async def run() -> tuple[bool, int, list[tuple[str, str]], list[tuple[str, str]]]:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            informer = Informer(client, "sessionrequests", namespace, handler)
            before = client.list_timing.copy()
            await informer.list_once()
            timed = client.list_timing.objects - before.objects
            assert informer.listed == OBJECTS
            assert informer.resource_version is not None
            # Created after the list: the watch reports it, and only it.
            await asyncio.to_thread(
                kube.create, namespace, builders.request("late", "pool", user="late")
            )
            await _watch_until(informer, events, ("ADDED", "late"))
            after_list = events[OBJECTS:]
            # Gone while not watching: a relist says so; one created meanwhile is new.
            mark = len(events)
            await asyncio.to_thread(kube.delete, "SessionRequest", namespace, "streamed-000")
            await asyncio.to_thread(
                kube.create, namespace, builders.request("later", "pool", user="later")
            )
            await informer.list_once()
            return informer.stream, timed, after_list, events[mark:]

    streamed, timed, after_list, relisted = asyncio.run(run())
    assert streamed  # the API server streamed the list: no fall back to pages
    assert timed == OBJECTS
    assert sorted(name for _, name in events[:OBJECTS]) == sorted(listed)
    assert {kind for kind, _ in events[:OBJECTS]} == {"ADDED"}
    assert {kind for kind, _ in relisted if kind != "ADDED"} == {"DELETED"}
    assert after_list == [("ADDED", "late")]
    assert ("DELETED", "streamed-000") in relisted
    assert sorted(name for kind, name in relisted if kind == "ADDED") == sorted(
        (listed - {"streamed-000"}) | {"late", "later"}
    )


def test_an_api_server_that_cannot_stream_lists_gets_paged_lists(
    kube: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API server with WatchList off (as 1.33 ships) refuses a streamed list (422): the
    informer lists page by page from then on, and watches from that list's version."""
    need_control_plane(kube, "starting an API server with WatchList off")
    plane = ControlPlane(
        tmp_path / "no-watchlist",
        bin_dir=kube.bin_dir,
        fake_nodes=0,
        apiserver_args=("--feature-gates=WatchList=false",),
    )
    with plane:
        other = Kube.connect(plane.kubeconfig)
        try:
            other.install_crds(crd_files())
            other.create_namespace("paged")
            listed = fill_requests(other, "paged", "paged", 7)
            events: list[tuple[str, str]] = []

            def handler(kind: str, obj: dict[str, Any]) -> None:
                events.append((kind, obj["metadata"]["name"]))

            async def run() -> tuple[bool, int]:
                async with operator_client(plane.kubeconfig, monkeypatch) as client:
                    informer = Informer(client, "sessionrequests", "paged", handler, page_size=3)
                    await informer.list_once()
                    await asyncio.to_thread(
                        other.create, "paged", builders.request("late", "pool", user="late")
                    )
                    await _watch_until(informer, events, ("ADDED", "late"))
                    return informer.stream, informer.listed

            streamed, count = asyncio.run(run())
        finally:
            other.api_client.close()
    assert not streamed
    assert count == len(listed)
    assert sorted(name for _, name in events[: len(listed)]) == sorted(listed)
    assert events[len(listed) :] == [("ADDED", "late")]


@pytest.mark.faults
def test_a_list_as_the_api_server_comes_back_gets_every_object(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Coming back from a restart, the API server answers before its cache of a kind is
    built and refuses a streamed list meanwhile (429 "storage is (re)initializing"; seen in
    CI, where the operator's start then waited a minute for kopf's retry). The informer
    lists page by page then (served from etcd) and streams again next time. Lists are tried
    from the moment the API server is down until one answers: only no answer and 5xx
    (not ready yet) are tried again, a 429 fails the test."""
    plane = need_control_plane(kube, "restarting the API server")
    listed = fill_requests(kube, namespace, "restart", 5)
    events: list[tuple[str, str]] = []

    def handler(kind: str, obj: dict[str, Any]) -> None:
        events.append((kind, obj["metadata"]["name"]))

    async def run() -> tuple[bool, int]:
        # Down for 2 s: on a loaded machine a poll can take longer than the instant between
        # the old server's stop and the new one's first answer, and then no list began while
        # it was down (seen once in CI).
        down = functools.partial(plane.restart_apiserver, down_seconds=2.0)
        restart = asyncio.create_task(asyncio.to_thread(down))
        tries = 0
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            while not restart.done():  # until the old API server stops answering
                try:
                    await client.request("GET", "/version")
                except (ApiError, ApiTransportError):
                    break
                await asyncio.sleep(0.02)
            informer = Informer(client, "sessionrequests", namespace, handler)
            while True:
                tries += 1
                try:
                    await informer.list_once()
                    break
                except ApiTransportError:
                    pass
                except ApiError as error:
                    if error.status < 500:
                        raise
                events.clear()
                await asyncio.sleep(0.02)
            await restart
            return informer.stream, tries

    streamed, tries = asyncio.run(run())
    assert tries > 1  # the list began while the API server was down
    assert streamed  # a refusal of this kind does not turn streaming off
    assert sorted(name for _, name in events) == sorted(listed)
