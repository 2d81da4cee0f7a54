"""A pool's loop stops when it is cancelled, even as it is woken in the same turn (real API
server, the operator's controller in this process).

Before: the loop slept in ``asyncio.wait_for(wake.wait(), timeout)``. On Python 3.11
``wait_for`` returns the wait's result when the wake and the cancel land together, so the
cancel was lost, the loop went round again and ``stop()`` waited for ever (seen once as a CI
run that hung in a test stopping its controller). Now the loop sleeps under
``asyncio.timeout``, which never swallows a cancel.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from hostpool_operator.controller.manager import Controller
from support import builders
from support.client_helpers import operator_client
from support.kube import Kube

ROUNDS = 60
#: Seconds a stop may take (it takes milliseconds; a lost cancel never returns).
STOP_WITHIN = 5.0


def test_a_pool_loop_woken_as_it_is_cancelled_stops(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.create(namespace, builders.pool("finance", "BreadthFirst", 2))

    async def run() -> list[int]:
        hung = []
        async with operator_client(kube.kubeconfig, monkeypatch) as client:
            controller = Controller(client)
            try:
                await controller.initial_sync([namespace])
                worker = controller.pools[(namespace, "finance")]
                for round_ in range(ROUNDS):
                    # A status write due: the loop sleeps with a timeout (without one,
                    # wait_for awaits the wake directly and the cancel is never lost).
                    worker.mark_dirty()
                    worker.start()
                    for _ in range(round_ % 4):  # the loop at different points of its sleep
                        await asyncio.sleep(0)
                    worker.wake()
                    for _ in range(round_ % 3):
                        await asyncio.sleep(0)
                    started = time.monotonic()
                    try:
                        async with asyncio.timeout(STOP_WITHIN):
                            await worker.stop()
                    except TimeoutError:
                        worker.task = None  # the hung loop is left to the final cancel
                    if time.monotonic() - started >= STOP_WITHIN:
                        hung.append(round_)
            finally:
                await controller.stop()
        return hung

    hung = asyncio.run(run())
    assert hung == [], f"stop() did not return in {len(hung)} of {ROUNDS} rounds: {hung}"
