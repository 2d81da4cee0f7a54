"""`make bench-relay-flood` (run by hack/bench/portal.py with the end-to-end suite's fixtures
as plugins; not part of the suite): what one user flooding the browser-desktop relay costs
everyone else, with real parts (the local control plane, the operator, Keycloak, an xrdp
host with its agent, the broker with the web client).

The flooder holds as many relays as the broker lets one user have, over and over: each a
ticket, the WebSocket, the RDCleanPath request (the relay does TLS with the real xrdp host),
then 1 MiB messages cut into 7-byte RDP packets, until the relay gives up on them. Meanwhile
another client asks ``GET /readyz`` back to back; its latency (p50, p99, max) is measured
without the flood, then with it, once with the broker's per-user rate limit as shipped and
once with it lifted (what the relay's own bounds do alone). The figures go to
BENCH_PORTAL_OUT (JSON) and to stdout.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

from hostpool_operator.broker.relay import rdcleanpath as rcp
from support.broker_helpers import BrokerProcess
from support.cluster import Cluster
from support.kube import wait_for
from support.web_desktop import WebDesktops, x224_request

POOL, HOST = "flood", "fl-1"
FIRST_ADDRESS = 91
SECONDS = float(os.environ.get("BENCH_FLOOD_SECONDS", "20"))
#: Relays the flooder tries to hold at once (the broker lets one user have 4).
AT_ONCE = 6
MIB = 1024 * 1024
#: A TPKT packet of 7 bytes (an X.224 data header, nothing in it), the cheapest to send.
PACKET = bytes([3, 0, 0, 7, 2, 0xF0, 0x80])
FLOOD = PACKET * (MIB // len(PACKET))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def readyz_latency(port: int, seconds: float) -> dict[str, Any]:
    """GET /readyz back to back on one kept-alive connection for ``seconds``."""
    took: list[float] = []
    failed = 0
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        try:
            connection.request("GET", "/readyz")
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                failed += 1
        except OSError:
            failed += 1
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            continue
        took.append((time.perf_counter() - started) * 1000)
    connection.close()
    return {
        "requests": len(took),
        "failed": failed,
        "p50Ms": round(statistics.median(took), 2),
        "p99Ms": round(percentile(took, 0.99), 2),
        "maxMs": round(max(took), 2),
    }


class Flooder:
    """One user's relays, :data:`AT_ONCE` at a time, each flooded until it ends."""

    def __init__(self, broker: BrokerProcess, base: str, token: str, destination: str) -> None:
        self.url = broker.url + base
        self.ws_url = f"ws://127.0.0.1:{broker.port}{base}/session/web"
        self.auth = {"Authorization": f"Bearer {token}"}
        self.destination = destination
        self.outcomes: Counter[str] = Counter()
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        asyncio.run(self._all())

    async def _all(self) -> None:
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(self._one(session) for _ in range(AT_ONCE)))

    async def _one(self, session: aiohttp.ClientSession) -> None:
        while not self.stop.is_set():
            self.outcomes[await self._relay(session)] += 1

    async def _relay(self, session: aiohttp.ClientSession) -> str:
        async with session.post(f"{self.url}/session/web-ticket", headers=self.auth) as answer:
            if answer.status != 200:
                await asyncio.sleep(0.05)
                return f"ticket {answer.status}"
            ticket = (await answer.json())["ticket"]
        try:
            ws = await session.ws_connect(self.ws_url, headers=self.auth)
        except aiohttp.WSServerHandshakeError as refused:
            await asyncio.sleep(0.05)
            return f"relay {refused.status}"
        async with ws:
            request = rcp.Pdu(destination=self.destination, proxy_auth=ticket, x224=x224_request())
            await ws.send_bytes(rcp.encode(request))
            first = await ws.receive(timeout=30)
            if first.type is not aiohttp.WSMsgType.BINARY:
                return "no answer"
            if rcp.decode(first.data).error is not None:
                return "refused"
            # Flooded until the relay closes it (its close frame is the next message): what
            # is sent after that goes nowhere and is not counted.
            closed = asyncio.ensure_future(ws.receive())
            try:
                while not closed.done() and not self.stop.is_set():
                    await ws.send_bytes(FLOOD)
                    await asyncio.sleep(0)
                    if not closed.done():
                        self.sent += len(FLOOD)
            except (ConnectionError, aiohttp.ClientError):
                pass
            finally:
                closed.cancel()
        return "flooded"


def flood_arm(broker: BrokerProcess, base: str, token: str, destination: str) -> dict[str, Any]:
    flooder = Flooder(broker, base, token, destination)
    thread = threading.Thread(target=flooder.run, daemon=True)
    thread.start()
    time.sleep(2)  # the flood under way before the first measurement
    latency = readyz_latency(broker.port, SECONDS)
    flooder.stop.set()
    thread.join(60)
    return {
        "readyz": latency,
        "floodMiB": round(flooder.sent / MIB, 1),
        "relays": dict(flooder.outcomes),
    }


def placed(broker: BrokerProcess, namespace: str, token: str) -> bool:
    return broker.connect(namespace, POOL, token).status == 200


def test_bench_relay_flood(
    web_desktop: WebDesktops,
    cluster: Cluster,
    namespace: str,
    tokens: Callable[[str], str],
) -> None:
    users = {"alice": "alice-flood-pw"}
    web = web_desktop([HOST], users, first=FIRST_ADDRESS, pool=POOL, limit=4)
    wait_for(
        lambda: bool((cluster.hosts()[HOST].get("status") or {}).get("agent", {}).get("address")),
        60,
        what="the agent to report its host's address",
    )
    destination = f"{web.hosts.hosts[HOST].address}:3389"
    base = f"/v1/namespaces/{namespace}/pools/{POOL}"
    result: dict[str, Any] = {"seconds": SECONDS, "relaysAtOnce": AT_ONCE}
    for arm, extra in (
        ("asShipped", ()),
        ("rateLimitLifted", ("--rate-limit", "100000", "--rate-burst", "100000")),
    ):
        broker = web.start_broker(*extra, portal=False)
        token = tokens("alice")
        wait_for(
            partial(placed, broker, namespace, token),
            60,
            what="alice's session to be placed (the agent publishes the host's address)",
        )
        quiet = readyz_latency(broker.port, SECONDS / 2)
        flooded = flood_arm(broker, base, token, destination)
        result[arm] = {"quiet": quiet, **flooded}
        print(f"bench-relay-flood: {arm} {json.dumps(result[arm])}", flush=True)
        broker.stop()
    out = os.environ.get("BENCH_PORTAL_OUT")
    if out:
        Path(out).write_text(json.dumps(result, indent=2))
