"""`make bench-portal-events`: what open portal pages cost the broker. Each open page holds one
``GET /v1/events`` stream; this opens N of them (``BENCH_STREAMS``, default 100,500,1000;
``BENCH_STREAMS_PER_USER`` each, default 4, as a user with a few tabs) against one broker
process and measures, for each N:

- memory: the broker's RSS with the streams open, less its RSS before any (per stream);
- idle: the broker's CPU over ``BENCH_IDLE_SECONDS`` with nothing changing (heartbeats only);
- churn: ``BENCH_CHANGES_PER_SECOND`` users' sessions changing state for ``BENCH_CHURN_SECONDS``
  (a status patch each, as an agent writes them), the broker's CPU per change and the time
  from the patch to its event at the user's pages (median, p95);
- fan-out: one pool change every stream must see (its display name): the time until the last
  stream has it, and the broker's CPU for it.

The pool is entitled to the bench realm's group; every user has a request in it, created
directly (no operator: the broker only watches). Tokens come from a real Keycloak (the broker
verifies them as usual). The client runs in this process: on a small machine it competes with
the broker for CPU, so the latencies are upper bounds.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "hack"))

from bench import broker_arm, local_cluster
from support import builders
from support.broker_helpers import BrokerProcess
from support.kube import Kube

CLUSTER = ROOT / ".cluster" / "bench-portal-events"
#: A namespace of its own each run (the last run's may still be terminating).
NAMESPACE = f"bench-portal-events-{int(time.time())}"
POOL = "desk"
TICK = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(f"bench-portal-events: {message}", file=sys.stderr, flush=True)


def setting(name: str, default: str) -> str:
    return os.environ.get(name, "").strip() or default


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def prepare(kube: Kube, users: list[str]) -> None:
    """A fresh namespace: the pool (entitled to the bench group, one host) and a request of
    each user, Assigned and Active."""
    kube.install_crds(sorted((ROOT / "crds").glob("*.yaml")))
    kube.create_namespace(NAMESPACE)
    pool = builders.pool(
        POOL, "BreadthFirst", 10_000, entitlements={"groups": [f"/{broker_arm.GROUP}"]}
    )
    kube.create(NAMESPACE, pool)
    kube.create(NAMESPACE, builders.host("h1", POOL, address="10.0.0.1"))
    for user in users:
        kube.create(NAMESPACE, builders.request(req_name(user), POOL, user))
        status = {"phase": "Assigned", "host": "h1", "hostAddress": "10.0.0.1"}
        kube.merge_patch(
            "SessionRequest",
            NAMESPACE,
            req_name(user),
            {"status": {**status, "sessionState": "Active"}},
            status=True,
        )


def req_name(user: str) -> str:
    return f"r-{user}"


class Streams:
    """N open /v1/events streams and what arrived on each: (time, body)."""

    def __init__(self, url: str, tokens: dict[str, str], users: list[str], each: int) -> None:
        self.url = url
        self.tokens = tokens
        self.owners = [user for user in users for _ in range(each)]
        self.arrived: list[list[tuple[float, Any]]] = [[] for _ in self.owners]
        self.tasks: list[asyncio.Task[None]] = []
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        )

    async def open(self) -> None:
        for index, user in enumerate(self.owners):
            self.tasks.append(asyncio.create_task(self._read(index, user)))
            if index % 50 == 49:
                await asyncio.sleep(0.05)  # not all at once: the broker's rate limit per user
        while any(not seen for seen in self.arrived):
            await asyncio.sleep(0.1)

    async def _read(self, index: int, user: str) -> None:
        headers = {"Authorization": f"Bearer {self.tokens[user]}"}
        async with self.session.get(f"{self.url}/v1/events", headers=headers) as answer:
            if answer.status != 200:
                raise RuntimeError(f"stream {index}: HTTP {answer.status} {await answer.text()}")
            async for raw in answer.content:
                if raw.startswith(b"data: "):
                    self.arrived[index].append((time.monotonic(), orjson.loads(raw[6:])))

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.session.close()

    def events(self) -> int:
        return sum(len(seen) for seen in self.arrived)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


async def churn(
    kube: Kube, streams: Streams, users: list[str], rate: int, seconds: float
) -> tuple[int, list[float]]:
    """``rate`` state changes a second (round robin over the users) for ``seconds``; the
    changes made and the delays from each patch to its event at the user's first stream."""
    first_stream = {user: streams.owners.index(user) for user in users}
    delays: list[float] = []
    pending: list[tuple[str, str, float]] = []
    made = 0
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        tick = time.monotonic()
        for _ in range(rate):
            user = users[made % len(users)]
            state = "Disconnected" if (made // len(users)) % 2 == 0 else "Active"
            # From before the call: the event can reach the page before the patch's answer
            # reaches this client.
            sent = time.monotonic()
            await asyncio.to_thread(
                kube.merge_patch,
                "SessionRequest",
                NAMESPACE,
                req_name(user),
                {"status": {"sessionState": state}},
                status=True,
            )
            pending.append((user, state, sent))
            made += 1
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    await asyncio.sleep(2.0)
    for user, state, at in pending:
        seen = streams.arrived[first_stream[user]]
        got = next(
            (t for t, body in seen if t >= at and body["pools"][0]["session"]["state"] == state),
            None,
        )
        if got is not None:
            delays.append(got - at)
    return made, delays


async def fan_out(kube: Kube, streams: Streams, label: str) -> float:
    """Seconds from one pool change to the last stream having it."""
    began = time.monotonic()
    await asyncio.to_thread(
        kube.merge_patch, "HostPool", NAMESPACE, POOL, {"spec": {"displayName": label}}
    )
    while True:
        done = sum(
            1
            for seen in streams.arrived
            if seen and seen[-1][1]["pools"][0]["displayName"] == label
        )
        if done == len(streams.arrived) or time.monotonic() - began > 60:
            return time.monotonic() - began
        await asyncio.sleep(0.01)


async def one_size(
    kube: Kube, broker: BrokerProcess, tokens: dict[str, str], count: int, each: int
) -> dict[str, Any]:
    assert broker.proc is not None
    pid = broker.proc.pid
    idle_seconds = float(setting("BENCH_IDLE_SECONDS", "20"))
    rate = int(setting("BENCH_CHANGES_PER_SECOND", "20"))
    churn_seconds = float(setting("BENCH_CHURN_SECONDS", "15"))
    users = sorted(tokens)[: max(1, count // each)]
    rss_before = rss_mib(pid)
    streams = Streams(broker.url, tokens, users, each)
    began = time.monotonic()
    await streams.open()
    opened_in = time.monotonic() - began
    if not all(seen[0][1]["pools"] for seen in streams.arrived):
        raise RuntimeError("a stream's first event lists no pool: the entitlements are wrong")
    await asyncio.sleep(2.0)
    rss_open = rss_mib(pid)
    cpu = cpu_seconds(pid)
    await asyncio.sleep(idle_seconds)
    idle_cpu = cpu_seconds(pid) - cpu
    cpu = cpu_seconds(pid)
    made, delays = await churn(kube, streams, users, rate, churn_seconds)
    churn_cpu = cpu_seconds(pid) - cpu
    cpu = cpu_seconds(pid)
    fan = await fan_out(kube, streams, f"desk {count}")
    await asyncio.sleep(1.0)
    fan_cpu = cpu_seconds(pid) - cpu
    await streams.close()
    return {
        "streams": len(streams.owners),
        "users": len(users),
        "opened_s": opened_in,
        "rss_mib": rss_open,
        "rss_per_stream_kib": (rss_open - rss_before) * 1024 / len(streams.owners),
        "idle_cpu_pct": 100 * idle_cpu / idle_seconds,
        "changes": made,
        "cpu_ms_per_change": 1000 * churn_cpu / max(1, made),
        "events_per_change": each,
        "delay_p50_ms": 1000 * statistics.median(delays) if delays else float("nan"),
        "delay_p95_ms": 1000 * percentile(delays, 0.95),
        "delays_seen": len(delays),
        "fan_out_s": fan,
        "fan_out_cpu_s": fan_cpu,
    }


def report(rows: list[dict[str, Any]], baseline_rss: float) -> None:
    print(f"broker RSS with no stream: {baseline_rss:.1f} MiB")
    print(
        "streams users open(s) RSS(MiB) KiB/stream idle-CPU% changes CPU-ms/change "
        "patch->event p50/p95(ms) fan-out(s) fan-out-CPU(s)"
    )
    for r in rows:
        print(
            f"{r['streams']:7d} {r['users']:5d} {r['opened_s']:7.1f} {r['rss_mib']:8.1f} "
            f"{r['rss_per_stream_kib']:10.1f} {r['idle_cpu_pct']:9.2f} {r['changes']:7d} "
            f"{r['cpu_ms_per_change']:13.2f} {r['delay_p50_ms']:11.0f}/{r['delay_p95_ms']:.0f} "
            f"({r['delays_seen']} seen) {r['fan_out_s']:10.2f} {r['fan_out_cpu_s']:14.2f}"
        )


def run(path: Path) -> int:
    sizes = [int(n) for n in setting("BENCH_STREAMS", "100,500,1000").split(",")]
    each = int(setting("BENCH_STREAMS_PER_USER", "4"))
    user_count = max(1, max(sizes) // each)
    kube = Kube.connect(path)
    log(f"Keycloak with {user_count} users, then their tokens")
    with broker_arm.start_keycloak(user_count) as keycloak:
        tokens, took = broker_arm.mint_tokens(keycloak, user_count)
        log(f"{len(tokens)} tokens in {took:.1f}s; the namespace, the pool, a request each")
        prepare(kube, sorted(tokens))
        work = CLUSTER / "work"
        work.mkdir(parents=True, exist_ok=True)
        broker = BrokerProcess(
            path,
            keycloak.issuer(broker_arm.REALM),
            broker_arm.CLIENT,
            [NAMESPACE],
            work / "broker.log",
            extra_args=["--rate-burst", "100"],
        )
        broker.start()
        try:
            assert broker.proc is not None
            time.sleep(2.0)
            baseline = rss_mib(broker.proc.pid)
            rows = []
            for count in sizes:
                log(f"{count} streams")
                rows.append(asyncio.run(one_size(kube, broker, tokens, count, each)))
            report(rows, baseline)
        finally:
            broker.stop()
            kube.delete_namespace(NAMESPACE)
    return 0


def main() -> int:
    with local_cluster.bench_cluster(CLUSTER, log) as cluster:
        path = cluster.kubeconfig
        return run(path)


if __name__ == "__main__":
    sys.exit(main())
