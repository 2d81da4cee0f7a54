"""The bootstrap the agent and the broker share (``kube.program.run``) against the suite's API
server: logging set up from the flags, a client logged in from the kubeconfig, SIGTERM
turned into the body's stop event, the body's exit code returned and the client closed."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Any

import pytest

from hostpool_operator.kube import program
from hostpool_operator.kube.program import Program, Running
from support import builders
from support.client_helpers import use_kubeconfig
from support.kube import Kube


@pytest.mark.parametrize("uvloop", [False, True])
def test_a_program_lists_with_its_client_stops_on_sigterm_and_closes_the_client(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch, uvloop: bool
) -> None:
    kube.create(namespace, builders.pool("finance", "DepthFirst", 5))
    use_kubeconfig(kube.kubeconfig, monkeypatch)
    logging_set_up: list[dict[str, Any]] = []
    # The suite's log capture is not the program's to replace (its SIGTERM handling is
    # restored below).
    monkeypatch.setattr(program, "setup_logging", lambda **kw: logging_set_up.append(kw))
    seen: dict[str, Any] = {}

    async def body(running: Running) -> int:
        listing = await running.client.list("hostpools", namespace)
        seen["pools"] = [p["metadata"]["name"] for p in listing["items"]]
        seen["server"] = running.server
        seen["client"] = running.client
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(running.stop.wait(), 10)
        return 3

    args = argparse.Namespace(log_format="json", verbose=True)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = program.run(Program("test", max_connections=2, uvloop=uvloop), args, body)
    finally:
        signal.signal(signal.SIGTERM, previous)

    assert code == 3
    assert seen["pools"] == ["finance"]
    assert seen["server"].startswith("https://")
    assert seen["client"]._session is None  # closed
    assert logging_set_up == [{"json_logs": True, "verbose": True}]
