"""`make bench`: a logon storm against the real API server, with the operator and without.

1. **Ceiling.** With no operator, a load generator (its own process) runs the same storm with
   no decision logic: each worker creates a SessionRequest and at once writes its status (a
   precomputed host, conditional on the resourceVersion the create returned). The write is
   the one the operator makes: the same status fields (phase, host, reason, message,
   sessionState, assignedAt, the Assigned condition) replaced in one PUT. That is the fastest
   any operator could place this storm on this API server.
2. **Operator.** The operator runs as its own process, watching a fresh namespace with one
   pool (default BreadthFirst, 200 hosts x maxSessionLimit 10). The load generator creates N
   requests (default 2,000) with enough concurrency not to be the bottleneck, while this
   process watches the requests: per-request latency from creation to Assigned, requests
   assigned over time, and whether any request's host ever changes.
3. **Bare controllers.** The same storm once more for each bare controller: no decision
   logic, it learns of requests from a watch, as the operator does, and writes the operator's
   status for a round-robin host. One is in Python on the operator's HTTP client; a compiled
   one (Go standard library; when ``go`` is installed) runs twice, over one HTTP/2 connection
   and over HTTP/1.1 connections. Their latency is what the API server and this machine allow
   any watch-driven controller.

Measured: p50/p99 latency, throughput, operator CPU seconds and peak RSS, API writes per
assignment (kube-apiserver's ``apiserver_request_total`` before and after, minus the load
generator's own creates), and the invariants lost / duplicates / overLimit (all must be 0).
The last line of stdout is one JSON object.

Environment: BENCH_REQUESTS, BENCH_HOSTS, BENCH_LIMIT, BENCH_ALGORITHM, BENCH_CONCURRENCY,
BENCH_WRITE_CONCURRENCY, BENCH_POOLS (hosts and requests spread round robin over that many pools);
BENCH_KUBECONFIG to use an existing cluster instead of starting a local control plane of its
own (``.cluster/bench``, no nodes: the storm needs no pods), which is stopped afterwards unless
BENCH_KEEP is set (a kept kube-apiserver goes on deleting the bench's namespaces for minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "operator"))

sys.path.insert(0, str(ROOT / "hack"))  # bench.broker_arm, beside this file
from bench import broker_arm, local_cluster
from hostpool_operator.api import conditions as cond
from hostpool_operator.api.timestamps import rfc3339
from hostpool_operator.kube.client import KubeClient
from hostpool_operator.kube.errors import ApiError, ApiTransportError

GROUP_VERSION = "hostpool.io/v1alpha1"
WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
#: Writes that count: the project's kinds (and their status) and the Events it posts.
COUNTED = {"sessionrequests", "sessionhosts", "hostpools", "events"}


def pool_name(i: int, pools: int) -> str:
    """The pool of request or host number ``i``: round robin over the pools."""
    return "storm" if pools == 1 else f"storm-{i % pools}"


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def client_for(kubeconfig: str) -> KubeClient:
    import kopf

    os.environ["KUBECONFIG"] = kubeconfig
    info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())
    assert info is not None, f"no credentials in {kubeconfig}"
    return KubeClient(info, max_connections=256)


# ------------------------------------------------------------------------------ load generator


def assigned_status(host: str, generation: int) -> dict[str, Any]:
    """The status the operator writes for a new session on ``host`` (same fields, same shape)."""
    now = datetime.now(UTC)
    message = f"new session on {host}"
    return {
        "observedGeneration": generation,
        "phase": "Assigned",
        "host": host,
        "reason": "NewSession",
        "message": message,
        "sessionState": "Connecting",
        "assignedAt": rfc3339(now),
        "conditions": cond.merge(
            None,
            [cond.Cond("Assigned", "True", "NewSession", message)],
            now=now,
            generation=generation,
        ),
    }


#: Request ``i`` of a load generator's batch: its body, and the host its status names when
#: the load generator writes the status itself (the ceiling).
Layout = Callable[[int], tuple[dict[str, Any], str]]


async def create_requests(
    client: KubeClient,
    namespace: str,
    count: int,
    concurrency: int,
    layout: Layout,
    *,
    assign: bool,
    reported: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create ``count`` requests with ``concurrency`` workers; with ``assign`` write each
    one's status (Assigned to its layout's host) right after, with ``reported`` on top (the
    fields a host's agent writes, as if it had reported the session already). When each was
    sent (created), answered (returned) and assigned, the span, and the errors."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)
    created: dict[str, float] = {}
    returned: dict[str, float] = {}
    assigned: dict[str, float] = {}
    errors: list[str] = []

    async def worker() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            body, host = layout(i)
            name = body["metadata"]["name"]
            try:
                started = time.time()
                obj = await client.create("sessionrequests", namespace, body)
                returned[name] = time.time()
                created[name] = started
                if assign:
                    meta = obj["metadata"]
                    await client.replace_status(
                        "sessionrequests",
                        "SessionRequest",
                        namespace,
                        name,
                        assigned_status(host, meta.get("generation", 1)) | (reported or {}),
                        resource_version=meta["resourceVersion"],
                        uid=meta["uid"],
                    )
                    assigned[name] = time.time()
            except (ApiError, ApiTransportError) as error:
                errors.append(f"{name}: {error}")

    began = time.time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {
        "created": created,
        "returned": returned,
        "assigned": assigned,
        "began": began,
        "ended": time.time(),
        "errors": errors[:20],
        "errorCount": len(errors),
    }


async def loadgen(args: argparse.Namespace) -> None:
    """Create N requests (and, in ceiling mode, write each one's status right away)."""

    def layout(i: int) -> tuple[dict[str, Any], str]:
        body = {
            "apiVersion": GROUP_VERSION,
            "kind": "SessionRequest",
            "metadata": {"name": f"r{i:06d}"},
            "spec": {"poolRef": {"name": pool_name(i, args.pools)}, "user": f"user{i:06d}"},
        }
        return body, f"host{i % args.hosts:05d}"

    client = client_for(args.kubeconfig)
    result = await create_requests(
        client,
        args.namespace,
        args.requests,
        args.concurrency,
        layout,
        assign=args.mode == "ceiling",
    )
    await client.close()
    Path(args.out).write_text(json.dumps(result))


# ------------------------------------------------------------------------------ the bench


async def apiserver_writes(client: KubeClient) -> dict[tuple[str, str], float]:
    """apiserver_request_total summed by (verb, resource), write verbs only."""
    session = client._http()  # the admin identity may read /metrics
    async with session.get(client._server + "/metrics") as response:
        text = await response.text()
    totals: dict[tuple[str, str], float] = {}
    pattern = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")
    for line in text.splitlines():
        match = pattern.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        verb = labels.get("verb", "")
        resource = labels.get("resource", "")
        if verb not in WRITE_VERBS or resource not in COUNTED:
            continue
        sub = labels.get("subresource")
        key = (verb, resource + (f"/{sub}" if sub else ""))
        totals[key] = totals.get(key, 0.0) + float(match.group(2))
    return totals


async def delete_namespace(client: KubeClient, namespace: str) -> None:
    """Delete the namespace and wait until it is gone."""
    try:
        # One delete-collection call per kind first: the namespace controller alone takes
        # minutes for thousands of objects (it is rate-limited as a client).
        for plural in ("sessionrequests", "sessionhosts", "hostpools"):
            await client.request("DELETE", client.path(plural, namespace))
        await client.request("DELETE", f"/api/v1/namespaces/{namespace}")
        while True:
            await client.request("GET", f"/api/v1/namespaces/{namespace}")
            await asyncio.sleep(0.5)
    except ApiError as error:
        if not error.not_found:
            raise


async def create_namespace(client: KubeClient, prefix: str) -> str:
    """A namespace under a name never used before.

    Re-using a name is not neutral: for a while after a namespace is deleted, kube-apiserver's
    NamespaceLifecycle admission looks the namespace up in storage on every create in it,
    which made one run pay an extra GET per request and the other not.
    """
    obj = await client.request(
        "POST", "/api/v1/namespaces", body={"metadata": {"generateName": prefix + "-"}}
    )
    name: str = obj["metadata"]["name"]
    return name


async def create_pool(
    client: KubeClient,
    namespace: str,
    args: argparse.Namespace,
    entitlements: dict[str, Any] | None = None,
) -> None:
    lb: dict[str, Any] = {"type": args.algorithm, "maxSessionLimit": args.limit}
    spec: dict[str, Any] = {"loadBalancer": lb}
    if entitlements is not None:
        spec["entitlements"] = entitlements
    for j in range(args.pools):
        await client.create(
            "hostpools",
            namespace,
            {
                "apiVersion": GROUP_VERSION,
                "kind": "HostPool",
                "metadata": {"name": pool_name(j, args.pools)},
                "spec": spec,
            },
        )
    sem = asyncio.Semaphore(32)

    def host_spec(i: int) -> dict[str, Any]:
        spec: dict[str, Any] = {"poolRef": {"name": pool_name(i, args.pools)}}
        if entitlements is not None:  # the broker hands clients an address
            spec["address"] = f"host{i:05d}.bench.example"
        return spec

    async def host(i: int) -> None:
        async with sem:
            await client.create(
                "sessionhosts",
                namespace,
                {
                    "apiVersion": GROUP_VERSION,
                    "kind": "SessionHost",
                    "metadata": {"name": f"host{i:05d}"},
                    "spec": host_spec(i),
                },
            )

    await asyncio.gather(*(host(i) for i in range(args.hosts)))


def run_loadgen(args: argparse.Namespace, mode: str, namespace: str, out: Path) -> dict[str, Any]:
    subprocess.run(
        [
            sys.executable,
            __file__,
            "loadgen",
            "--mode",
            mode,
            "--kubeconfig",
            args.kubeconfig,
            "--namespace",
            namespace,
            "--requests",
            str(args.requests),
            "--concurrency",
            str(args.concurrency),
            "--hosts",
            str(args.hosts),
            "--pools",
            str(args.pools),
            "--out",
            str(out),
        ],
        check=True,
    )
    result: dict[str, Any] = json.loads(out.read_text())
    if result["errorCount"]:
        log(f"load generator: {result['errorCount']} errors, e.g. {result['errors'][:3]}")
    return result


async def ceiling(
    args: argparse.Namespace, client: KubeClient, work: Path, label: str
) -> dict[str, Any]:
    """The storm with no operator: the load generator creates and assigns each request."""
    namespace = await create_namespace(client, "bench-ceiling")
    # The same recording watch as in the operator run, so both runs load the machine alike,
    # and the latency it records is measured the same way.
    seen: dict[str, tuple[str, float]] = {}
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch_requests(client, namespace, seen, set(), stop))
    await asyncio.sleep(0.3)
    result = await asyncio.to_thread(
        run_loadgen, args, "ceiling", namespace, work / f"ceiling-{label}.json"
    )
    deadline = time.time() + 10
    while len(seen) < len(result["assigned"]) and time.time() < deadline:
        await asyncio.sleep(0.1)
    stop.set()
    watcher.cancel()
    done = len(result["assigned"])
    seconds = float(result["ended"]) - float(result["began"])
    log(f"ceiling ({label}): {done} requests created and assigned in {seconds:.2f}s")
    await delete_namespace(client, namespace)  # gone before the next run starts
    created = result["created"]
    return {
        "perS": done / seconds,
        "latencies": [(seen[n][1] - t0) * 1000 for n, t0 in created.items() if n in seen],
    }


def bare_commands(
    args: argparse.Namespace, client: KubeClient, work: Path
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """How to start each bare controller (argv without --namespace/--out, extra environment):
    the Python one (this file, the operator's HTTP client), and the compiled one (Go standard
    library) over HTTP/2 and over HTTP/1.1 when ``go`` is installed and the kubeconfig has a CA
    and a bearer token."""
    common = ["--hosts", str(args.hosts), "--write-concurrency", str(args.write_concurrency)]
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "python": (
            [sys.executable, __file__, "bare-controller", "--kubeconfig", args.kubeconfig, *common],
            {},
        )
    }
    info = client._info
    if shutil.which("go") is None or not info.token or not (info.ca_path or info.ca_data):
        log("compiled bare controller skipped: it needs go, and a CA and a token to connect")
        return commands
    binary = work / "barecontroller"
    subprocess.run(
        ["go", "build", "-o", str(binary), "."],
        cwd=Path(__file__).parent / "barecontroller",
        check=True,
    )
    ca = work / "ca.crt"
    if info.ca_path:
        ca.write_bytes(Path(os.fsdecode(info.ca_path)).read_bytes())
    elif info.ca_data:
        data = info.ca_data
        text = data.decode() if isinstance(data, bytes) else data
        ca.write_text(text if "-----BEGIN" in text else base64.b64decode(text).decode())
    commands["go"] = (
        [str(binary), "--server", info.server, "--ca", str(ca), *common],
        {"BARE_CONTROLLER_TOKEN": info.token},
    )
    commands["go-http1"] = (
        [str(binary), "--server", info.server, "--ca", str(ca), "--http1", *common],
        {"BARE_CONTROLLER_TOKEN": info.token},
    )
    return commands


async def bare_run(
    args: argparse.Namespace,
    client: KubeClient,
    work: Path,
    label: str,
    command: tuple[list[str], dict[str, str]],
) -> dict[str, Any]:
    """The storm placed by a bare controller (its own process) instead of the operator,
    measured the same way: the same load generator, the same recording watch."""
    namespace = await create_namespace(client, "bench-bare")
    out = work / f"bare-{label}.json"
    out_log = work / f"bare-{label}.log"
    argv, env = command
    bare = subprocess.Popen(
        [*argv, "--namespace", namespace, "--out", str(out)],
        stdout=out_log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
    )
    seen: dict[str, tuple[str, float]] = {}
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch_requests(client, namespace, seen, set(), stop))
    try:
        await started(bare, out_log, "bare controller watching", "bare controller")
        await asyncio.sleep(0.3)
        result = await asyncio.to_thread(
            run_loadgen, args, "create", namespace, work / f"bare-{label}-load.json"
        )
        deadline = time.time() + args.timeout
        while len(seen) < len(result["created"]) and time.time() < deadline:
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        watcher.cancel()
        bare.send_signal(signal.SIGTERM)
        try:
            bare.wait(30)
        except subprocess.TimeoutExpired:
            bare.kill()
        await delete_namespace(client, namespace)
    errors = json.loads(out.read_text())["errorCount"] if out.exists() else -1
    created = result["created"]
    (work / f"bare-{label}-timings.json").write_text(
        json.dumps(
            {
                "created": created,
                "returned": result["returned"],
                "assigned": {n: t for n, (_, t) in seen.items()},
            }
        )
    )
    first = min(created.values()) if created else 0.0
    last = max((t for _, t in seen.values()), default=first)
    log(f"bare controller ({label}): {len(seen)} of {len(created)} assigned, {errors} write errors")
    return {
        "perS": len(seen) / (last - first) if last > first else 0.0,
        "latencies": [(seen[n][1] - t0) * 1000 for n, t0 in created.items() if n in seen],
        "assigned": len(seen),
    }


async def started(process: subprocess.Popen[bytes], log_path: Path, line: str, what: str) -> None:
    """Until ``line`` is in the process's log (at most 30 s); the bench ends if it exits."""
    for _ in range(300):
        if line in log_path.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise SystemExit(f"bench: {what} exited:\n" + log_path.read_text()[-2000:])
        await asyncio.sleep(0.1)


def proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds, peak RSS in MB) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    peak = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    return cpu, peak


async def watch_events(
    client: KubeClient,
    namespace: str,
    stop: asyncio.Event | None = None,
    *,
    rv: str = "0",
    selector: str | None = None,
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(type, object) of every SessionRequest event in the namespace (of those matching the
    label ``selector``), from ``rv`` (default: the start); the watch resumes from the last
    resourceVersion after a timeout or a dropped connection."""
    path = client.path("sessionrequests", namespace)
    while stop is None or not stop.is_set():
        params = {
            "watch": "true",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "30",
        }
        if selector:
            params["labelSelector"] = selector
        try:
            async with client._http().get(
                client._server + path,
                params=params,
                timeout=aiohttp.ClientTimeout(total=None, sock_read=60),
            ) as response:
                async for raw in response.content:
                    event = json.loads(raw)
                    obj = event["object"]
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    yield event["type"], obj
        except (TimeoutError, aiohttp.ClientError):
            await asyncio.sleep(0.2)


async def watch_requests(
    client: KubeClient,
    namespace: str,
    seen: dict[str, tuple[str, float]],
    changed: set[str],
    stop: asyncio.Event,
    visible: dict[str, float] | None = None,
) -> None:
    """Record when each request is first seen Assigned, and any later change of host (and,
    into ``visible``, when the watch first delivered it at all)."""
    async for kind, obj in watch_events(client, namespace, stop):
        if kind not in ("ADDED", "MODIFIED"):
            continue
        if visible is not None:
            visible.setdefault(obj["metadata"]["name"], time.time())
        status = obj.get("status") or {}
        if status.get("phase") != "Assigned":
            continue
        name = obj["metadata"]["name"]
        host = status.get("host", "")
        if name not in seen:
            seen[name] = (host, time.time())
        elif seen[name][0] != host:
            changed.add(name)
        if stop.is_set():
            return


async def bare_controller(args: argparse.Namespace) -> None:
    """The least any watch-driven controller does: watch the requests and, for each new one,
    write the status the operator would write for a precomputed host (round robin), with at
    most ``--write-concurrency`` writes in flight. No informer cache, no decision, no pool or
    host status. It shows what the API server and this client stack allow a controller's
    latency to be on this machine; the operator's figures are compared with it."""
    client = client_for(args.kubeconfig)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    slots = asyncio.Semaphore(args.write_concurrency)
    writes: set[asyncio.Task[None]] = set()
    placed = 0
    errors: list[str] = []

    async def write(obj: dict[str, Any], host: str) -> None:
        meta = obj["metadata"]
        async with slots:
            try:
                await client.replace_status(
                    "sessionrequests",
                    "SessionRequest",
                    args.namespace,
                    meta["name"],
                    assigned_status(host, meta.get("generation", 1)),
                    resource_version=meta["resourceVersion"],
                    uid=meta["uid"],
                )
            except (ApiError, ApiTransportError) as error:
                errors.append(f"{meta['name']}: {error}")

    async def watch() -> None:
        nonlocal placed
        print("bare controller watching", flush=True)
        async for kind, obj in watch_events(client, args.namespace):
            if kind != "ADDED" or (obj.get("status") or {}).get("phase"):
                continue
            host = f"host{placed % args.hosts:05d}"
            placed += 1
            task = asyncio.create_task(write(obj, host))
            writes.add(task)
            task.add_done_callback(writes.discard)

    watcher = asyncio.create_task(watch())
    await stop.wait()
    watcher.cancel()
    if writes:
        await asyncio.wait(writes)
    await client.close()
    Path(args.out).write_text(
        json.dumps({"placed": placed, "errors": errors[:20], "errorCount": len(errors)})
    )


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def operator_histograms(client: KubeClient, port: int) -> dict[str, dict[str, float]]:
    """Mean and p99 (a bucket bound) of the operator's own latency histograms: the time a
    request spent in the operator before its write was sent, and until the write returned."""
    async with client._http().get(f"http://127.0.0.1:{port}/metrics") as response:
        text = await response.text()
    out: dict[str, dict[str, float]] = {}
    for key, metric in (
        ("queued", "hostpool_assignment_queue_seconds"),
        ("written", "hostpool_assignment_latency_seconds"),
    ):
        # Cumulative counts per bucket bound, summed over the label sets (one per pool).
        buckets: dict[float, float] = {}
        total = count = 0.0
        for line in text.splitlines():
            if line.startswith(metric + "_bucket{"):
                bound = re.search(r'le="([^"]+)"', line)
                assert bound is not None
                le = float(bound.group(1))
                buckets[le] = buckets.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
            elif line.startswith(metric + "_sum{"):
                total += float(line.rsplit(" ", 1)[1])
            elif line.startswith(metric + "_count{"):
                count += float(line.rsplit(" ", 1)[1])
        p99 = next(
            (b for b, n in sorted(buckets.items()) if count and n >= 0.99 * count), float("nan")
        )
        out[key] = {
            "meanMs": total / count * 1000 if count else float("nan"),
            "p99AtMostMs": p99 * 1000,
        }
    return out


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def operator_command(args: argparse.Namespace, namespace: str, metrics_port: int) -> list[str]:
    profile = os.environ.get("BENCH_PROFILE")
    wrapper = ["-m", "pyinstrument", "--show-all", "-o", profile, "-m"] if profile else ["-m"]
    return [
        sys.executable,
        *wrapper,
        "hostpool_operator",
        "run",
        "--namespace",
        namespace,
        "--status-interval",
        str(args.status_interval),
        "--write-concurrency",
        str(args.write_concurrency),
        "--metrics-address",
        f"127.0.0.1:{metrics_port}",
    ]


async def operator_run(args: argparse.Namespace, client: KubeClient, work: Path) -> dict[str, Any]:
    namespace = await create_namespace(client, "bench-storm")
    await create_pool(client, namespace, args)
    log(
        f"{args.pools} pool(s): {args.algorithm}, {args.hosts} hosts in all "
        f"x maxSessionLimit {args.limit}"
    )
    op_log = work / "operator.log"
    metrics_port = free_port()
    operator = subprocess.Popen(
        operator_command(args, namespace, metrics_port),
        stdout=op_log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": args.kubeconfig, "PYTHONPATH": str(ROOT / "operator")},
    )
    try:
        await started(operator, op_log, "hostpool-operator started", "operator")
        await asyncio.sleep(1.5)  # initial host status writes settle before we count writes
        cpu_before, _ = proc_stats(operator.pid)
        writes_before = await apiserver_writes(client)
        seen: dict[str, tuple[str, float]] = {}
        visible: dict[str, float] = {}
        changed: set[str] = set()
        stop = asyncio.Event()
        watcher = asyncio.create_task(
            watch_requests(client, namespace, seen, changed, stop, visible)
        )
        await asyncio.sleep(0.3)
        result = await asyncio.to_thread(
            run_loadgen, args, "create", namespace, work / "storm.json"
        )
        deadline = time.time() + args.timeout
        while len(seen) < len(result["created"]) and time.time() < deadline:
            await asyncio.sleep(0.1)
        # Let debounced status writes land, then count writes (they belong to the storm).
        await asyncio.sleep(args.status_interval * 2 + 0.5)
        stop.set()
        watcher.cancel()
        cpu_after, peak_rss = proc_stats(operator.pid)
        inside = await operator_histograms(client, metrics_port)
        writes_after = await apiserver_writes(client)
        listing = await client.list("sessionrequests", namespace)
    finally:
        operator.send_signal(signal.SIGTERM)
        try:
            operator.wait(10)
        except subprocess.TimeoutExpired:
            operator.kill()
        await delete_namespace(client, namespace)  # the next run starts on a clean server
    created = result["created"]
    latencies = [(seen[name][1] - t0) * 1000 for name, t0 in created.items() if name in seen]
    per_host: dict[str, int] = {}
    lost = 0
    for obj in listing["items"]:
        status = obj.get("status") or {}
        if status.get("phase") != "Assigned":
            lost += 1
            continue
        per_host[status["host"]] = per_host.get(status["host"], 0) + 1
        name = obj["metadata"]["name"]
        if name in seen and seen[name][0] != status["host"]:
            changed.add(name)
    delta = {k: writes_after.get(k, 0) - writes_before.get(k, 0) for k in writes_after}
    delta = {k: v for k, v in delta.items() if v}
    creates_by_loadgen = len(created)
    operator_writes = sum(delta.values()) - creates_by_loadgen
    first = min(created.values()) if created else 0.0
    last = max((t for _, t in seen.values()), default=first)
    assigned = len(listing["items"]) - lost
    # Raw timings stay in the work directory for a closer look at a run.
    returned = result["returned"]
    (work / "timings.json").write_text(
        json.dumps(
            {
                "created": created,
                "returned": returned,
                "visible": visible,
                "assigned": {n: t for n, (_, t) in seen.items()},
            }
        )
    )
    # Where each request's latency went: its create (until the POST returned), the watch
    # delivering it (to this process's watch, a proxy for the operator's), and the rest
    # (delivery to the operator, decision, write, delivery of the result).
    both = [n for n in created if n in returned and n in visible and n in seen]
    stages = {
        "create": [(returned[n] - created[n]) * 1000 for n in both],
        "watch": [(visible[n] - returned[n]) * 1000 for n in both],
        "assign": [(seen[n][1] - visible[n]) * 1000 for n in both],
    }
    return {
        "latencies": latencies,
        "timeline": sorted(t - first for _, t in seen.values()),
        "assigned": assigned,
        "lost": lost + (args.requests - len(listing["items"])),
        "duplicates": len(changed),
        "overLimit": sum(1 for n in per_host.values() if n > args.limit),
        "throughputPerS": assigned / (last - first) if last > first else 0.0,
        "operatorCpuS": cpu_after - cpu_before,
        "operatorRssMb": peak_rss,
        "writes": {f"{v} {r}": n for (v, r), n in sorted(delta.items())},
        "writesPerAssignment": operator_writes / assigned if assigned else float("nan"),
        "loadgenSeconds": result["ended"] - result["began"],
        "inside": inside,
        "stages": {
            k: [round(percentile(v, 50), 1), round(percentile(v, 99), 1)] for k, v in stages.items()
        },
    }


def plot(run: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    lat = sorted(run["latencies"])
    left.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], color="#4477aa")
    left.set_xlabel("creation → Assigned (ms)")
    left.set_ylabel("fraction of requests")
    left.set_title("latency CDF")
    left.grid(alpha=0.3)
    timeline = run["timeline"]
    right.plot(timeline, range(1, len(timeline) + 1), color="#ee8866")
    right.set_xlabel("seconds since the first request")
    right.set_ylabel("requests assigned")
    right.set_title("assigned over time")
    right.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


async def bench(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="hostpool-bench-"))
    client = client_for(args.kubeconfig)
    idp = contextlib.ExitStack()
    broker: dict[str, Any] | None = None
    try:
        if args.broker:
            log(f"Keycloak: a realm of {args.requests} users, then their tokens")
            began = time.time()
            kc = idp.enter_context(broker_arm.start_keycloak(args.requests))
            started_in = time.time() - began
            tokens, minted_in = await asyncio.to_thread(broker_arm.mint_tokens, kc, args.requests)
            log(f"Keycloak ready in {started_in:.1f}s; {len(tokens)} tokens in {minted_in:.1f}s")
        # The server's own pace drifts between runs (this is a shared two-core machine), so
        # the ceiling is taken on both sides of the operator run and averaged.
        before = await ceiling(args, client, work, "before")
        run = await operator_run(args, client, work)
        if args.broker:
            broker = await broker_arm.broker_run(
                args,
                client,
                work,
                kc,
                tokens,
                {
                    "create_namespace": create_namespace,
                    "create_pool": create_pool,
                    "watch_requests": watch_requests,
                    "started": started,
                    "proc_stats": proc_stats,
                    "free_port": free_port,
                    "delete_namespace": delete_namespace,
                    "operator_command": operator_command,
                    "percentile": percentile,
                },
            )
            idp.close()  # the other arms run without it
            log(f"broker: {broker['connected']} of {broker['users']} connected")
        bare = {
            label: await bare_run(args, client, work, label, command)
            for label, command in bare_commands(args, client, work).items()
        }
        after = await ceiling(args, client, work, "after")
    finally:
        idp.close()
        await client.close()
    ceiling_per_s = (before["perS"] + after["perS"]) / 2
    ceiling_latencies = before["latencies"] + after["latencies"]
    ratio = run["throughputPerS"] / ceiling_per_s if ceiling_per_s else float("nan")
    inside = run["inside"]
    plot(run, Path(args.plot))
    summary = {
        "requests": args.requests,
        "hosts": args.hosts,
        "pools": args.pools,
        "limit": args.limit,
        "algorithm": args.algorithm,
        "assigned": run["assigned"],
        "lost": run["lost"],
        "overLimit": run["overLimit"],
        "duplicates": run["duplicates"],
        "throughputPerS": round(run["throughputPerS"], 1),
        "ceilingPerS": round(ceiling_per_s, 1),
        "ceilingBeforePerS": round(before["perS"], 1),
        "ceilingAfterPerS": round(after["perS"], 1),
        "ceilingP50Ms": round(percentile(ceiling_latencies, 50), 1),
        "ceilingP99Ms": round(percentile(ceiling_latencies, 99), 1),
        "ceilingRatio": round(ratio, 3),
        "bareControllers": {
            label: {
                "perS": round(b["perS"], 1),
                "p50Ms": round(percentile(b["latencies"], 50), 1),
                "p99Ms": round(percentile(b["latencies"], 99), 1),
            }
            for label, b in bare.items()
        },
        "p50Ms": round(percentile(run["latencies"], 50), 1),
        "p99Ms": round(percentile(run["latencies"], 99), 1),
        "writesPerAssignment": round(run["writesPerAssignment"], 3),
        "operatorCpuS": round(run["operatorCpuS"], 2),
        "operatorRssMb": round(run["operatorRssMb"], 1),
        "inOperatorMeanMs": round(inside["queued"]["meanMs"], 1),
        "inOperatorP99AtMostMs": inside["queued"]["p99AtMostMs"],
        "stagesP50P99Ms": run["stages"],
    }
    rows = [
        ("requests / assigned", f"{args.requests} / {run['assigned']}"),
        (
            "lost / duplicates / overLimit",
            f"{run['lost']} / {run['duplicates']} / {run['overLimit']}",
        ),
        ("throughput (assignments/s)", f"{run['throughputPerS']:.1f}"),
        (
            "ceiling (create+status/s)",
            f"{ceiling_per_s:.1f} (before {before['perS']:.1f}, after {after['perS']:.1f})",
        ),
        (
            "ceiling latency p50 / p99 (ms)",
            f"{summary['ceilingP50Ms']} / {summary['ceilingP99Ms']}",
        ),
        ("ceiling ratio", f"{ratio:.3f}"),
        *(
            (f"bare controller ({label}) /s, p50/p99", f"{b['perS']}, {b['p50Ms']} / {b['p99Ms']}")
            for label, b in summary["bareControllers"].items()
        ),
        ("latency p50 / p99 (ms)", f"{summary['p50Ms']} / {summary['p99Ms']}"),
        (
            "operator CPU (s) / peak RSS (MB)",
            f"{run['operatorCpuS']:.2f} / {run['operatorRssMb']:.1f}",
        ),
        (
            "in the operator: mean / p99 (ms)",
            f"{inside['queued']['meanMs']:.1f} / <= {inside['queued']['p99AtMostMs']:.0f}",
        ),
        (
            "  + its write: mean / p99 (ms)",
            f"{inside['written']['meanMs']:.1f} / <= {inside['written']['p99AtMostMs']:.0f}",
        ),
        *(
            (f"  {label}: p50 / p99 (ms)", "{} / {}".format(*run["stages"][key]))
            for key, label in (
                ("create", "create (POST)"),
                ("watch", "then seen by a watch"),
                ("assign", "then seen Assigned"),
            )
        ),
        ("API writes per assignment", f"{run['writesPerAssignment']:.3f}"),
        ("load generator time (s)", f"{run['loadgenSeconds']:.2f}"),
    ]
    print(
        f"\nlogon storm: {args.algorithm}, {args.pools} pool(s), {args.hosts} hosts x "
        f"{args.limit}, {args.requests} requests, concurrency {args.concurrency}"
    )
    for label, value in rows:
        print(f"  {label:<34} {value}")
    print("  API writes during the storm (verb resource: count):")
    for key, count in run["writes"].items():
        print(f"    {key:<40} {count:.0f}")
    print(f"  plot: {args.plot}; raw timings: {work / 'timings.json'}")
    if broker is not None:
        ratio_b = broker["throughputPerS"] / run["throughputPerS"] if run["throughputPerS"] else 0
        summary["broker"] = {
            **{k: (round(v, 2) if isinstance(v, float) else v) for k, v in broker.items()},
            "ratioToRawStorm": round(ratio_b, 3),
            "p99AboveRawStormMs": round(broker["p99Ms"] - percentile(run["latencies"], 99), 1),
        }
        b = summary["broker"]
        print(f"  through the broker ({args.broker_concurrency} connects in flight):")
        for label, value in (
            ("users / connected (200)", f"{b['users']} / {b['connected']}"),
            ("requests / duplicate requests", f"{b['requests']} / {b['duplicateRequests']}"),
            ("duplicates / overLimit", f"{b['duplicates']} / {b['overLimit']}"),
            ("throughput (logons/s)", f"{b['throughputPerS']}"),
            ("ratio to the raw storm", f"{b['ratioToRawStorm']}"),
            ("latency p50 / p99 (ms, call->answer)", f"{b['p50Ms']} / {b['p99Ms']}"),
            ("p99 above the raw storm's (ms)", f"{b['p99AboveRawStormMs']}"),
            ("broker CPU (s) / peak RSS (MB)", f"{b['brokerCpuS']} / {b['brokerRssMb']}"),
            ("answers", ", ".join(f"{k}: {v}" for k, v in sorted(b["answers"].items()))),
        ):
            print(f"    {label:<38} {value}")
    print(json.dumps(summary))
    bad = run["lost"] or run["duplicates"] or run["overLimit"]
    if broker is not None:
        bad = bad or (
            broker["connected"] < broker["users"]
            or broker["duplicateRequests"]
            or broker["duplicates"]
            or broker["overLimit"]
            or broker["brokerErrors"]
        )
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    sub = parser.add_subparsers(dest="command")
    gen = sub.add_parser("loadgen")
    gen.add_argument("--mode", choices=("ceiling", "create"), required=True)
    gen.add_argument("--kubeconfig", required=True)
    gen.add_argument("--namespace", required=True)
    gen.add_argument("--requests", type=int, required=True)
    gen.add_argument("--concurrency", type=int, required=True)
    gen.add_argument("--hosts", type=int, required=True)
    gen.add_argument("--pools", type=int, required=True)
    gen.add_argument("--out", required=True)
    broker_arm.add_loadgen_parser(sub)
    bare = sub.add_parser("bare-controller")
    bare.add_argument("--kubeconfig", required=True)
    bare.add_argument("--namespace", required=True)
    bare.add_argument("--hosts", type=int, required=True)
    bare.add_argument("--write-concurrency", type=int, required=True)
    bare.add_argument("--out", required=True)
    env = os.environ.get
    parser.add_argument("--requests", type=int, default=int(env("BENCH_REQUESTS", "2000")))
    parser.add_argument("--hosts", type=int, default=int(env("BENCH_HOSTS", "200")))
    parser.add_argument("--pools", type=int, default=int(env("BENCH_POOLS", "1")))
    parser.add_argument("--limit", type=int, default=int(env("BENCH_LIMIT", "10")))
    parser.add_argument("--algorithm", default=env("BENCH_ALGORITHM", "BreadthFirst"))
    parser.add_argument("--concurrency", type=int, default=int(env("BENCH_CONCURRENCY", "64")))
    parser.add_argument("--status-interval", type=float, default=1.0)
    parser.add_argument(
        "--write-concurrency", type=int, default=int(env("BENCH_WRITE_CONCURRENCY", "128"))
    )
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument(
        "--broker",
        type=int,
        default=int(env("BENCH_BROKER", "1")),
        help="1: the broker arm too (Keycloak, tokens, logons through hostpool-broker)",
    )
    parser.add_argument(
        "--broker-concurrency",
        type=int,
        default=int(env("BENCH_BROKER_CONCURRENCY", "256")),
        help="connects in flight through the broker (0: every user at once)",
    )
    parser.add_argument("--plot", default="bench-storm.png")
    args = parser.parse_args()
    if args.command == "loadgen":
        asyncio.run(loadgen(args))
        return 0
    if args.command == "connect-loadgen":
        import uvloop

        uvloop.run(broker_arm.connect_loadgen(args))
        return 0
    if args.command == "bare-controller":
        asyncio.run(bare_controller(args))
        return 0
    if args.pools < 1 or args.hosts % args.pools:
        # Host i and request i then share pool i % pools, which the ceiling's hosts rely on.
        parser.error("BENCH_POOLS must be at least 1 and divide BENCH_HOSTS")
    if args.broker_concurrency <= 0:
        args.broker_concurrency = args.requests
    options = local_cluster.Options(
        env="BENCH_KUBECONFIG", fake_nodes=False, keep=bool(env("BENCH_KEEP", ""))
    )
    with local_cluster.bench_cluster(ROOT / ".cluster" / "bench", log, options) as cluster:
        args.kubeconfig = str(cluster.kubeconfig)
        return asyncio.run(bench(args))


if __name__ == "__main__":
    sys.exit(main())
