"""`make bench`'s broker arm: the same logon storm, but every user logs on through
``hostpool-broker`` with a token from a real Keycloak.

Keycloak (tests/keycloak.py) imports a realm of N users in group ``bench`` and mints their
access tokens before the storm. Then, on a fresh namespace with the raw storm's pool shape
(entitled to that group), the operator and the broker run as their own processes, and a
load generator (its own process too) sends each user's connect, ``--broker-concurrency`` in
flight (256; 0: every user at once). A client waits for its answer, so the rate is at most
concurrency / latency: 256 keeps that well above what the servers do here, while every user
at once measures mostly the queue in front of them (p99 = the time to place them all): the
time from the HTTP call to its answer is each logon's latency. A connect
answered 202 (still waiting) is sent again after its Retry-After, as a client would; a
user's answer counts once it is 200.

Measured: throughput, p50/p99, the answers by status, broker CPU seconds and peak RSS, and
the invariants (one request per user, no host changed, no host over its limit).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.keycloak import Keycloak, keycloak_session, numbered_users, realm

REALM, CLIENT, GROUP = "bench", "hostpool-desktops", "bench"


def bench_realm(users: int) -> dict[str, Any]:
    # The tokens must outlive the whole bench (minted before the first ceiling run).
    return realm(
        REALM,
        numbered_users(users, prefix="u", groups=[GROUP]),
        client_id=CLIENT,
        client_secret="bench-secret",
        access_token_lifespan=3600,
    )


def mint_tokens(kc: Keycloak, users: int) -> tuple[dict[str, str], float]:
    """Every bench user's access token (username -> token), and the seconds it took."""
    began = time.time()
    tokens = asyncio.run(
        kc.tokens(
            REALM,
            CLIENT,
            "bench-secret",
            numbered_users(users, prefix="u", groups=[GROUP]),
            concurrency=8,
        )
    )
    return tokens, time.time() - began


def start_keycloak(users: int) -> Any:
    """The context manager of a Keycloak with the bench realm (fetched if needed)."""
    return keycloak_session([bench_realm(users)])


# ------------------------------------------------------------------------------ load generator


async def connect_loadgen(args: argparse.Namespace) -> None:
    """Each user's connect, ``--concurrency`` at a time; 202s are retried after their
    Retry-After. Writes, per user: first call, final answer time, status, host, request."""
    tokens: dict[str, str] = json.loads(Path(args.tokens).read_text())
    users = sorted(tokens)
    gate = asyncio.Semaphore(args.concurrency)
    out: dict[str, dict[str, Any]] = {}
    answers: dict[str, int] = {}
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

        async def one(i: int, user: str) -> None:
            pool = "storm" if args.pools == 1 else f"storm-{i % args.pools}"
            url = f"{args.url}/v1/namespaces/{args.namespace}/pools/{pool}/connect"
            headers = {"Authorization": f"Bearer {tokens[user]}"}
            async with gate:
                began = time.time()
                for _ in range(20):
                    try:
                        async with http.post(url, headers=headers) as response:
                            body = await response.json(content_type=None)
                            status = response.status
                            retry = float(response.headers.get("Retry-After", "1"))
                    except (aiohttp.ClientError, TimeoutError) as error:
                        status, body, retry = 0, {"reason": type(error).__name__}, 1.0
                    key = f"{status} {body.get('reason', '')}" if isinstance(body, dict) else "?"
                    answers[key] = answers.get(key, 0) + 1
                    if status != 202 and status != 0:
                        break
                    await asyncio.sleep(retry)
                out[user] = {
                    "began": began,
                    "ended": time.time(),
                    "status": status,
                    "host": body.get("host") if isinstance(body, dict) else None,
                    "request": body.get("request") if isinstance(body, dict) else None,
                }

        started = time.time()
        await asyncio.gather(*(one(i, user) for i, user in enumerate(users)))
        ended = time.time()
    Path(args.out).write_text(
        json.dumps({"began": started, "ended": ended, "users": out, "answers": answers})
    )


def add_loadgen_parser(sub: Any) -> None:
    gen = sub.add_parser("connect-loadgen")
    gen.add_argument("--url", required=True)
    gen.add_argument("--namespace", required=True)
    gen.add_argument("--tokens", required=True)
    gen.add_argument("--pools", type=int, required=True)
    gen.add_argument("--concurrency", type=int, required=True)
    gen.add_argument("--out", required=True)


# ------------------------------------------------------------------------------ the arm


async def broker_run(
    args: argparse.Namespace,
    client: Any,
    work: Path,
    kc: Keycloak,
    tokens: dict[str, str],
    tools: dict[str, Callable[..., Any]],
) -> dict[str, Any]:
    """The storm through the broker. ``tools``: storm.py's helpers (create_namespace,
    create_pool, watch_requests, started, proc_stats, free_port, delete_namespace,
    operator_command, percentile)."""
    namespace: str = await tools["create_namespace"](client, "bench-broker")
    await tools["create_pool"](client, namespace, args, entitlements={"groups": [f"/{GROUP}"]})
    operator_log, broker_log = work / "broker-operator.log", work / "broker.log"
    env = {**os.environ, "KUBECONFIG": args.kubeconfig, "PYTHONPATH": str(ROOT / "operator")}
    operator = subprocess.Popen(
        tools["operator_command"](args, namespace, tools["free_port"]()),
        stdout=operator_log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    port = tools["free_port"]()
    profile = os.environ.get("BENCH_BROKER_PROFILE")  # a cProfile output file
    wrapper = ["-m", "cProfile", "-o", profile, "-m"] if profile else ["-m"]
    broker = subprocess.Popen(
        [
            sys.executable,
            *wrapper,
            "hostpool_operator.broker",
            "--oidc-issuer",
            kc.issuer(REALM),
            "--oidc-allow-insecure-issuer",  # the bench's Keycloak is plain http on 127.0.0.1
            "--oidc-audience",
            CLIENT,
            "--listen",
            f"127.0.0.1:{port}",
            "--namespace",
            namespace,
            "--connect-timeout-seconds",
            "30",
            "--rate-limit",
            "100",
        ],
        stdout=broker_log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    token_file = work / "tokens.json"
    token_file.touch(mode=0o600)
    token_file.write_text(json.dumps(tokens))
    try:
        await tools["started"](operator, operator_log, "hostpool-operator started", "operator")
        await tools["started"](broker, broker_log, "broker listening", "broker")
        await _ready(f"http://127.0.0.1:{port}/readyz")
        await asyncio.sleep(1.5)  # the operator's first host status writes settle
        seen: dict[str, tuple[str, float]] = {}
        changed: set[str] = set()
        stop = asyncio.Event()
        watcher = asyncio.create_task(
            tools["watch_requests"](client, namespace, seen, changed, stop)
        )
        await asyncio.sleep(0.3)
        broker_cpu0, _ = tools["proc_stats"](broker.pid)
        out = work / "broker-storm.json"
        await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                str(Path(__file__).with_name("storm.py")),
                "connect-loadgen",
                "--url",
                f"http://127.0.0.1:{port}",
                "--namespace",
                namespace,
                "--tokens",
                str(token_file),
                "--pools",
                str(args.pools),
                "--concurrency",
                str(args.broker_concurrency),
                "--out",
                str(out),
            ],
            check=True,
        )
        broker_cpu1, broker_rss = tools["proc_stats"](broker.pid)
        await asyncio.sleep(args.status_interval * 2 + 0.5)
        stop.set()
        watcher.cancel()
        listing = await client.list("sessionrequests", namespace)
    finally:
        token_file.unlink(missing_ok=True)
        for process in (broker, operator):
            process.send_signal(signal.SIGTERM)
        for process in (broker, operator):
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        await tools["delete_namespace"](client, namespace)
    result = json.loads(out.read_text())
    users = result["users"]
    ok = {u: r for u, r in users.items() if r["status"] == 200}
    latencies = [(r["ended"] - r["began"]) * 1000 for r in ok.values()]
    first = min((r["began"] for r in users.values()), default=0.0)
    last = max((r["ended"] for r in ok.values()), default=first)
    per_host: dict[str, int] = {}
    per_user: dict[str, int] = {}
    for obj in listing["items"]:
        per_user[obj["spec"]["user"]] = per_user.get(obj["spec"]["user"], 0) + 1
        status = obj.get("status") or {}
        if status.get("phase") == "Assigned":
            per_host[status["host"]] = per_host.get(status["host"], 0) + 1
    wrong_host = sum(
        1 for r in ok.values() if r["request"] in seen and seen[r["request"]][0] != r["host"]
    )
    problems = [
        line
        for line in broker_log.read_text(errors="replace").splitlines()
        if " ERROR " in line or "Traceback" in line
    ]
    return {
        "users": len(users),
        "connected": len(ok),
        "answers": result["answers"],
        "throughputPerS": len(ok) / (last - first) if last > first else 0.0,
        "p50Ms": tools["percentile"](latencies, 50),
        "p99Ms": tools["percentile"](latencies, 99),
        "requests": len(listing["items"]),
        "duplicateRequests": sum(n - 1 for n in per_user.values() if n > 1),
        "duplicates": len(changed) + wrong_host,
        "overLimit": sum(1 for n in per_host.values() if n > args.limit),
        "brokerCpuS": broker_cpu1 - broker_cpu0,
        "brokerRssMb": broker_rss,
        "brokerErrors": len(problems),
    }


async def _ready(url: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    async with aiohttp.ClientSession() as http:
        while time.time() < deadline:
            try:
                async with http.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise SystemExit(f"bench: the broker was not ready at {url}")


Coro = Coroutine[Any, Any, Any]
