"""Paginated LISTs (``limit``/``continue``) of the operator's client on a real API server.

The informers list page by page and feed each page before reading the next; every object
must be seen once, and the watch must start at the list's resourceVersion (the snapshot the
pages were read at), so nothing created after the list is missed and nothing listed comes
back as new. A continue token the API server no longer accepts (410: etcd compacted past
the snapshot) starts the list again from the first page.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from hostpool_operator.kube.auth import login
from hostpool_operator.kube.client import KubeClient
from hostpool_operator.kube.informer import Informer
from support import builders
from support.client_helpers import fill_requests, operator_client, use_kubeconfig
from support.kube import Kube, need_control_plane

OBJECTS = 23
PAGE = 5


def test_an_informer_lists_every_page_and_watches_from_the_lists_version(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = fill_requests(kube, namespace, "paged", OBJECTS)
    events: list[tuple[str, str]] = []

    def handler(kind: str, obj: dict[str, Any]) -> None:
        events.append((kind, obj["metadata"]["name"]))

    async def run() -> tuple[list[str | None], str | None, list[tuple[str, str]]]:
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            versions = [
                page.resource_version
                async for page in client.list_pages("sessionrequests", namespace, limit=PAGE)
            ]
            informer = Informer(
                client, "sessionrequests", namespace, handler, page_size=PAGE, stream=False
            )
            before = client.list_timing.copy()
            await informer.list_once()
            assert client.list_timing.objects - before.objects == OBJECTS
            assert informer.listed == OBJECTS
            listed_at = informer.resource_version
            # Created after the list: the watch reports it, and only it.
            await asyncio.to_thread(
                kube.create, namespace, builders.request("late", "pool", user="late")
            )
            watching = asyncio.create_task(informer._watch())
            try:
                for _ in range(200):
                    if ("ADDED", "late") in events:
                        break
                    await asyncio.sleep(0.05)
            finally:
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
            return versions, listed_at, events[OBJECTS:]

    versions, listed_at, after_list = asyncio.run(run())
    assert len(versions) == -(-OBJECTS // PAGE)  # more than one page
    assert len(set(versions)) == 1  # one snapshot
    assert sorted(name for kind, name in events[:OBJECTS]) == sorted(listed)
    assert {kind for kind, _ in events[:OBJECTS]} == {"ADDED"}
    assert listed_at is not None
    assert int(listed_at) >= int(str(versions[0]))
    # The watch started at the list's version: the late object, and no listed one again.
    assert after_list == [("ADDED", "late")]


def _etcd(kube: Kube, path: str, body: dict[str, Any]) -> dict[str, Any]:
    plane = need_control_plane(kube, "compacting etcd")
    state = dict(
        line.split("=", 1)
        for line in (plane.directory / "state.env").read_text().splitlines()
        if "=" in line
    )
    request = urllib.request.Request(
        f"http://127.0.0.1:{state['ETCD_PORT']}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        result: dict[str, Any] = json.loads(answer.read())
        return result


class _AgedTokenClient(KubeClient):
    """The operator's client, but its first continue token names ``aged_rv``: a revision
    etcd has compacted away, so the API server answers it 410 Expired (the API server may
    serve a fresh token's pages from its watch cache, which compaction does not touch, so
    this is the way to make a real token expire at once; the next page is requested before
    the caller sees the first, so the token is aged on its way out)."""

    aged_rv = 0
    aged = 0

    async def _exchange(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | Sequence[Any] | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> bytes:
        if params is not None and "continue" in params and not self.aged:
            token = json.loads(base64.urlsafe_b64decode(params["continue"] + "=="))
            token["rv"] = self.aged_rv
            raw = base64.urlsafe_b64encode(json.dumps(token).encode()).decode().rstrip("=")
            params = {**params, "continue": raw}
            self.aged += 1
        return await super()._exchange(
            method, path, body=body, params=params, content_type=content_type
        )


def test_an_expired_continue_token_lists_again_from_the_start(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = fill_requests(kube, namespace, "expiring", 12)

    async def run() -> tuple[list[tuple[bool, list[str]]], int, int]:
        pages: list[tuple[bool, list[str]]] = []
        use_kubeconfig(kube.kubeconfig, monkeypatch)
        # Compact etcd up to now: revision 2 is gone for sure (and older than the watch cache).
        key = base64.b64encode(b"/").decode()
        head = await asyncio.to_thread(_etcd, kube, "/v3/kv/range", {"key": key, "limit": 1})
        revision = int(head["header"]["revision"])
        await asyncio.to_thread(
            _etcd, kube, "/v3/kv/compaction", {"revision": revision, "physical": True}
        )
        client = _AgedTokenClient(login())
        client.aged_rv = 2
        try:
            async for page in client.list_pages("sessionrequests", namespace, limit=PAGE):
                pages.append((page.restarted, [item["metadata"]["name"] for item in page.items]))
            return pages, client.list_timing.restarts, client.aged
        finally:
            await client.close()

    pages, restarts, aged = asyncio.run(run())
    assert aged == 1
    assert restarts == 1
    assert [restarted for restarted, _ in pages].count(True) == 1
    again = next(i for i, (restarted, _) in enumerate(pages) if restarted)
    assert again == 1  # the second page's token had expired: the list began again
    names = [name for _, batch in pages[again:] for name in batch]
    assert sorted(names) == sorted(listed)
