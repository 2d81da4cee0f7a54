"""Pool and host status writes are bounded for the whole operator, on a real API server.

At start every pool and host may need a status write (11,000 of them at 1,000 pools x 10
hosts). With a bound per pool they all went out at once, each holding a connection of its
own, and the first placements waited behind them (docs/performance.md, "Scale"). The
controller runs in process here so the writes in flight can be counted at the client; the
writes themselves are real.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest

from hostpool_operator.controller.manager import Controller
from hostpool_operator.controller.settings import ControllerSettings
from hostpool_operator.kube.auth import login
from hostpool_operator.kube.client import JSON, KubeClient
from support import builders
from support.client_helpers import use_kubeconfig
from support.kube import Kube, resource_path

POOLS = 12
HOSTS = 3
BOUND = 2


class CountingClient(KubeClient):
    """The real client, counting its status PATCHes in flight."""

    def __init__(self) -> None:
        super().__init__(login())
        self.in_flight = 0
        self.most = 0
        self.writes = 0

    async def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> JSON:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            return await super().patch_status(
                plural, namespace, name, status, resource_version=resource_version
            )
        finally:
            self.in_flight -= 1
            self.writes += 1


def test_status_writes_of_all_pools_share_one_bound(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for p in range(POOLS):
        kube.create(namespace, builders.pool(f"pool-{p:02d}", "BreadthFirst", 4))
        for h in range(HOSTS):
            kube.create(namespace, builders.host(f"pool-{p:02d}-h{h}", f"pool-{p:02d}"))
    use_kubeconfig(kube.kubeconfig, monkeypatch)

    def written() -> int:
        done = 0
        for kind in ("HostPool", "SessionHost"):
            for obj in kube.call("GET", resource_path(kind, namespace))["items"]:
                done += bool((obj.get("status") or {}).get("conditions"))
        return done

    async def run() -> CountingClient:
        client = CountingClient()
        controller = Controller(client, ControllerSettings(status_concurrency=BOUND))
        try:
            await controller.initial_sync([namespace])
            deadline = time.monotonic() + 60
            while await asyncio.to_thread(written) < POOLS * (1 + HOSTS):
                assert time.monotonic() < deadline, "statuses not written within 60 s"
                await asyncio.sleep(0.2)
        finally:
            await controller.stop()
            await client.close()
        return client

    client = asyncio.run(run())
    assert client.writes >= POOLS * (1 + HOSTS)
    assert client.most == BOUND, f"{client.most} status writes in flight at once"
