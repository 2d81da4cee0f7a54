"""`make bench-scale`: the operator at enterprise scale (issue 19), a benchmark, not a test.

1. **Pre-fill.** A load generator (its own process, high concurrency) fills a fresh namespace
   with SCALE_POOLS pools (SCALE_ALGORITHM, maxSessionLimit SCALE_LIMIT) of
   SCALE_HOSTS_PER_POOL hosts each, and SCALE_SESSIONS SessionRequests already Assigned: each
   one created, then its status written in one PUT, as the ceiling of ``make bench`` does
   (the operator is not running). Sessions are spread evenly, so no host holds more than
   ceil(sessions / hosts). A second namespace holds the first SCALE_STORM_POOLS of those pools,
   filled alike: the ceiling's storm runs there, on the same API server and etcd.
   etcd's db size and kube-apiserver's RSS are printed before and after.
2. **Start.** The operator starts, watching the filled namespace; a probe request created at
   the same moment times start -> first placement; start -> all pool statuses current (every
   pool's observedGeneration == generation and status.sessions.total == its count); the
   operator's own ``initial sync: list ..s, decode ..s, rebuild ..s, N objects`` log line;
   its peak RSS and CPU seconds while it holds all sessions.
3. **Storm.** SCALE_STORM logons over SCALE_STORM_POOLS pools with the operator running, and
   the same storm without an operator (the ceiling: create + status PUT) in the second
   namespace, once before and once after: throughput vs. the ceilings' mean, p50/p99
   create -> Assigned, writes per assignment.
4. **Kill.** The storm again (other pools) with a kill -9 of the operator once about a third
   is placed, and a restart at once: the same figures, and restart -> first placement.
5. **Standby.** A second operator (another pod's name) starts beside the leader and waits,
   synced, as a warm standby; the storm a third time (other pools) with a kill -9 of the
   leader once a third is placed and nothing restarted: ``takeoverS`` is the kill -> a probe
   created at the kill placed by the standby; the standby's RSS beside the leader's; the
   arm's own lost / duplicates / overLimit (JSON ``standby``).
   Invariants at the end over the whole namespace (pre-filled sessions included): lost,
   duplicates (a request whose host changed), over the limit.

It reuses ``storm.py`` (client, status body, write counting, /proc figures). The last line of
stdout is one JSON object. Environment: SCALE_POOLS (1000), SCALE_HOSTS_PER_POOL (10),
SCALE_LIMIT (12), SCALE_SESSIONS (100000), SCALE_STORM (2000), SCALE_STORM_POOLS (100),
SCALE_ALGORITHM (DepthFirst), SCALE_CONCURRENCY (pre-fill, 256), SCALE_STORM_CONCURRENCY (64),
SCALE_SESSION_LIMITS (1: every pool with sessionLimits, pre-filled sessions reported Active),
SCALE_SESSIONS_ACTIVE (1: pre-filled sessions reported Active, no limits), SCALE_LEASE_DURATION
(the operators' --lease-duration);
BENCH_KUBECONFIG to use an existing cluster (etcd's and kube-apiserver's own figures are then
not reported), else a local control plane of its own, started afresh at
``.cluster/bench-scale`` and stopped afterwards unless BENCH_KEEP, SCALE_PREFILL_ONLY or
SCALE_REUSE is set (SCALE_REUSE uses the one an earlier run left there).

Pre-filling 100,000 sessions takes minutes; to measure the operator again without it,
SCALE_PREFILL_ONLY=1 pre-fills, keeps both namespaces and stops, and SCALE_REUSE=NS,CEILING_NS
(same SCALE_* sizes) runs steps 2-5 on them, deleting what an earlier run's steps added first.
SCALE_KEEP=1 keeps the namespaces of a whole run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import local_cluster, storm
from bench.storm import ROOT, log, percentile, proc_stats
from hostpool_operator.api.timestamps import rfc3339
from hostpool_operator.kube.client import KubeClient
from hostpool_operator.kube.errors import ApiError, ApiTransportError

GROUP_VERSION = storm.GROUP_VERSION
#: The pools' spec.sessionLimits with SCALE_SESSION_LIMITS=1 (none come due during a run).
SESSION_LIMITS = {"disconnectedMinutes": 60, "idleMinutes": 30, "maxSessionMinutes": 600}
#: The operator's log line when it holds the Lease (the standby's, once it has taken over).
LEASE_HELD_LINE = " holds lease "
#: The leader's line for a renewal answered past the renew deadline (controller/leader.py).
LATE_RENEWAL_LINE = re.compile(r"a renewal succeeded ([0-9.]+)s past the renew deadline")
SYNC_LINE = re.compile(
    r"initial sync: list ([0-9.]+)s, decode ([0-9.]+)s, rebuild ([0-9.]+)s, ([0-9]+) objects"
)
#: Every operator process started, stopped at the end whatever happens.
OPERATORS: list[Operator] = []


def pool(p: int) -> str:
    return f"p{p:04d}"


def host(p: int, h: int) -> str:
    return f"p{p:04d}-h{h:02d}"


def slot(i: int, first_pool: int, pools: int, hosts_per_pool: int) -> tuple[int, int]:
    """(pool, host) of item ``i`` of a batch spread round robin over ``pools`` pools from
    ``first_pool``, and within a pool round robin over its hosts: an even spread."""
    return first_pool + i % pools, (i // pools) % hosts_per_pool


def per_host(count: int, pools: int, hosts_per_pool: int) -> int:
    """The most items of such a batch on one host."""
    return math.ceil(count / (pools * hosts_per_pool)) if count else 0


# ------------------------------------------------------------------------------ load generator


async def loadgen(args: argparse.Namespace) -> None:
    """Create pools and hosts (``--setup``), then ``--count`` requests named
    ``<prefix><i>``; with ``--assign`` each one's status is written at once (the ceiling)."""
    client = storm.client_for(args.kubeconfig)
    ns = args.namespace
    errors: list[str] = []
    sem = asyncio.Semaphore(args.concurrency)
    began_setup = time.time()
    if args.setup:
        lb = {"type": args.algorithm, "maxSessionLimit": args.limit}
        limits = {"sessionLimits": SESSION_LIMITS} if args.session_limits else {}

        async def make(plural: str, kind: str, name: str, spec: dict[str, Any]) -> None:
            async with sem:
                body = {"apiVersion": GROUP_VERSION, "kind": kind, "metadata": {"name": name}}
                try:
                    await client.create(plural, ns, {**body, "spec": spec})
                except (ApiError, ApiTransportError) as error:
                    errors.append(f"{name}: {error}")

        pools = range(args.first_pool, args.first_pool + args.pools)
        await asyncio.gather(
            *(make("hostpools", "HostPool", pool(p), {"loadBalancer": lb, **limits}) for p in pools)
        )
        await asyncio.gather(
            *(
                make("sessionhosts", "SessionHost", host(p, h), {"poolRef": {"name": pool(p)}})
                for p in pools
                for h in range(args.hosts_per_pool)
            )
        )
    setup_s = time.time() - began_setup

    def layout(i: int) -> tuple[dict[str, Any], str]:
        p, h = slot(i, args.first_pool, args.pools, args.hosts_per_pool)
        body = {
            "apiVersion": GROUP_VERSION,
            "kind": "SessionRequest",
            "metadata": {
                "name": f"{args.prefix}{i:06d}",
                "labels": {"scale.hostpool.io/batch": args.prefix},
            },
            "spec": {"poolRef": {"name": pool(p)}, "user": f"{args.prefix}u{i:06d}"},
        }
        return body, host(p, h)

    # With session limits (or SCALE_SESSIONS_ACTIVE), each pre-filled session is one its
    # host's agent has reported Active (stateChangedAt, logonAt): every one of them is a
    # session the limits look at.
    now = rfc3339(datetime.now(UTC))
    reported = (
        {"sessionState": "Active", "stateChangedAt": now, "logonAt": now}
        if args.session_limits or args.sessions_active
        else None
    )
    result = await storm.create_requests(
        client, ns, args.count, args.concurrency, layout, assign=args.assign, reported=reported
    )
    await client.close()
    result["errors"] = (errors + result["errors"])[:20]
    result["errorCount"] += len(errors)
    Path(args.out).write_text(json.dumps(result | {"setupS": setup_s}))


def run_loadgen(
    args: argparse.Namespace,
    namespace: str,
    out: Path,
    *,
    prefix: str,
    count: int,
    first_pool: int,
    pools: int,
    assign: bool,
    setup: bool = False,
    concurrency: int | None = None,
) -> dict[str, Any]:
    argv = [
        sys.executable,
        __file__,
        "loadgen",
        "--kubeconfig",
        args.kubeconfig,
        "--namespace",
        namespace,
        "--prefix",
        prefix,
        "--count",
        str(count),
        "--first-pool",
        str(first_pool),
        "--pools",
        str(pools),
        "--hosts-per-pool",
        str(args.hosts_per_pool),
        "--limit",
        str(args.limit),
        "--algorithm",
        args.algorithm,
        "--concurrency",
        str(concurrency or args.storm_concurrency),
        "--out",
        str(out),
    ]
    subprocess.run(
        argv
        + (["--assign"] if assign else [])
        + (["--setup"] if setup else [])
        + (["--session-limits"] if args.session_limits else [])
        + (["--sessions-active"] if args.sessions_active else []),
        check=True,
    )
    result: dict[str, Any] = json.loads(out.read_text())
    if result["errorCount"]:
        log(f"load generator: {result['errorCount']} errors, e.g. {result['errors'][:3]}")
    return result


# ------------------------------------------------------------------------------ figures


class Cluster:
    """etcd's db size and kube-apiserver's memory, from the local control plane's directory."""

    def __init__(self, directory: str) -> None:
        self.dir = Path(directory) if directory else None
        self.state: dict[str, str] = {}
        if self.dir and (self.dir / "state.env").exists():
            for line in (self.dir / "state.env").read_text().splitlines():
                key, _, value = line.partition("=")
                self.state[key] = value

    def pid(self, name: str) -> int | None:
        if not self.dir:
            return None
        path = self.dir / "pids" / f"{name}.pid"
        return int(path.read_text().strip()) if path.exists() else None

    def apiserver_rss_mb(self) -> float | None:
        pid = self.pid("kube-apiserver")
        if pid is None:
            return None
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return None

    async def etcd_db_mb(self, client: KubeClient) -> float | None:
        port = self.state.get("ETCD_PORT")
        if not port:
            return None
        async with client._http().get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
        for line in text.splitlines():
            if line.startswith("etcd_mvcc_db_total_size_in_bytes "):
                return float(line.split()[1]) / 1e6
        return None

    async def figures(self, client: KubeClient) -> dict[str, float | None]:
        etcd = await self.etcd_db_mb(client)
        rss = self.apiserver_rss_mb()
        return {
            "etcdDbMb": None if etcd is None else round(etcd, 1),
            "apiserverRssMb": None if rss is None else round(rss, 1),
        }


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


async def current_rv(client: KubeClient, namespace: str) -> str:
    page = await client.request(
        "GET", client.path("sessionrequests", namespace), params={"limit": "1"}
    )
    rv: str = page["metadata"]["resourceVersion"]
    return rv


async def watch_batch(
    client: KubeClient,
    namespace: str,
    selector: str,
    rv: str,
    seen: dict[str, tuple[str, float]],
    changed: set[str],
) -> None:
    """When each request of a batch (label selector) is first seen Assigned, and any later
    change of its host; from ``rv`` on (not a replay of the whole namespace)."""
    async for kind, obj in storm.watch_events(client, namespace, rv=rv, selector=selector):
        if kind not in ("ADDED", "MODIFIED"):
            continue
        status = obj.get("status") or {}
        if status.get("phase") != "Assigned":
            continue
        name, where = obj["metadata"]["name"], status.get("host", "")
        if name not in seen:
            seen[name] = (where, time.time())
        elif seen[name][0] != where:
            changed.add(name)


class Operator:
    def __init__(
        self,
        args: argparse.Namespace,
        namespace: str,
        work: Path,
        label: str,
        pod_name: str = "hostpool-operator-bench-scale",
    ) -> None:
        self.log_path = work / f"operator-{label}.log"
        self.metrics_port = storm.free_port()
        self.started = time.time()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hostpool_operator",
                "run",
                "--namespace",
                namespace,
                "--status-interval",
                str(args.status_interval),
                "--write-concurrency",
                str(args.write_concurrency),
                "--metrics-address",
                f"127.0.0.1:{self.metrics_port}",
                *(["--lease-duration", args.lease_duration] if args.lease_duration else []),
            ],
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "KUBECONFIG": args.kubeconfig,
                "PYTHONPATH": str(ROOT / "operator"),
                # Every process is the same pod: the restart after kill -9 is the container
                # restarted in place by the kubelet, which takes its own Lease back at once.
                # The standby arm's second instance is another pod.
                "POD_NAME": pod_name,
            },
        )
        OPERATORS.append(self)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def sync_figures(self) -> dict[str, float] | None:
        match = SYNC_LINE.search(self.text())
        if not match:
            return None
        return {
            "listS": float(match.group(1)),
            "decodeS": float(match.group(2)),
            "rebuildS": float(match.group(3)),
            "objects": int(match.group(4)),
        }

    def lease_wait(self) -> float | None:
        """Seconds it waited as a standby for the lease (the killed one's) to expire."""
        stamps: dict[str, datetime] = {}
        for line in self.text().splitlines():
            for key, text in (("wait", "waiting as a standby"), ("lead", "holds lease")):
                if text in line and key not in stamps:
                    stamps[key] = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
        if "wait" not in stamps or "lead" not in stamps:
            return None
        return (stamps["lead"] - stamps["wait"]).total_seconds()

    def problems(self) -> list[str]:
        return [
            line
            for line in self.text().splitlines()
            if re.search(r"\b(ERROR|WARNING|Traceback|CRITICAL)\b", line)
        ]

    def late_renewals(self) -> tuple[int, float]:
        """Lease renewals it logged as answered past the renew deadline, and the seconds
        they paused its writes in all."""
        paused = [float(m.group(1)) for m in LATE_RENEWAL_LINE.finditer(self.text())]
        return len(paused), sum(paused)

    def rss_mb(self) -> float:
        """Its resident set now (MB)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    async def wait_line(self, text: str, limit: float) -> float:
        """Seconds since its start when ``text`` appeared in its log (nan: not in time)."""
        while time.time() - self.started < limit and self.alive():
            if text in self.text():
                return time.time() - self.started
            await asyncio.sleep(0.1)
        return float("nan")

    def logged_at(self, text: str) -> float:
        """The time (time.time()) of the first log line holding ``text`` (nan: none); the
        operator's text log stamps local time to the millisecond."""
        for line in self.text().splitlines():
            if text in line:
                try:
                    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                except ValueError:
                    continue
                return stamp.timestamp()
        return float("nan")

    def stop(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


async def wait_assigned(client: KubeClient, namespace: str, name: str, limit: float) -> float:
    """Seconds until request ``name`` is Assigned (nan if not within ``limit``)."""
    began = time.time()
    while time.time() - began < limit:
        try:
            obj = await client.get("sessionrequests", namespace, name)
            if (obj.get("status") or {}).get("phase") == "Assigned":
                return time.time()
        except (ApiError, ApiTransportError):
            pass
        await asyncio.sleep(0.05)
    return float("nan")


async def create_probe(client: KubeClient, namespace: str, name: str, p: int) -> None:
    await client.create(
        "sessionrequests",
        namespace,
        {
            "apiVersion": GROUP_VERSION,
            "kind": "SessionRequest",
            "metadata": {"name": name, "labels": {"scale.hostpool.io/batch": "probe"}},
            "spec": {"poolRef": {"name": pool(p)}, "user": f"{name}-user"},
        },
    )


async def pools_current(
    client: KubeClient, namespace: str, expected: dict[str, int], limit: float
) -> tuple[float, int]:
    """(time when every pool's status is current, pools current at the last look)."""
    began = time.time()
    good = 0
    while time.time() - began < limit:
        listing = await client.list("hostpools", namespace)
        good = 0
        for obj in listing["items"]:
            status = obj.get("status") or {}
            sessions = (status.get("sessions") or {}).get("total")
            if status.get("observedGeneration") == obj["metadata"].get(
                "generation"
            ) and sessions == expected.get(obj["metadata"]["name"]):
                good += 1
        if good == len(expected):
            return time.time(), good
        await asyncio.sleep(0.5)
    return float("nan"), good


async def hosts_current(
    client: KubeClient, namespace: str, expected: dict[str, int], limit: float
) -> tuple[float, int]:
    """(time when every host's status describes its generation and carries at least its
    expected sessions, hosts current at the last look): the start's host writes are done."""
    began = time.time()
    good = 0
    while time.time() - began < limit:
        good = 0
        listing = await client.list("sessionhosts", namespace)
        for obj in listing["items"]:
            status = obj.get("status") or {}
            total = (status.get("sessions") or {}).get("total", 0)
            if status.get("observedGeneration") == obj["metadata"].get(
                "generation"
            ) and total >= expected.get(obj["metadata"]["name"], 0):
                good += 1
        if good == len(expected):
            return time.time(), good
        await asyncio.sleep(1.0)
    return float("nan"), good


# ------------------------------------------------------------------------------ the bench


async def storm_run(
    args: argparse.Namespace,
    client: KubeClient,
    namespace: str,
    work: Path,
    *,
    prefix: str,
    first_pool: int,
    assign: bool,
    operator: Operator | None = None,
    kill_at: int = 0,
    restart: Any = None,
    expected: dict[str, int] | None = None,
    expected_hosts: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One storm of args.storm requests over args.storm_pools pools from ``first_pool``;
    ``assign``: the ceiling (the load generator writes the status). With ``kill_at``, the
    operator gets a kill -9 once that many are seen Assigned, and ``restart()`` at once.
    With ``expected`` (each pool's sessions before the storm, updated here): the writes are
    counted until every pool's status is current again, and how long after the last
    placement that took is ``poolsCurrentAfterS``; with ``expected_hosts`` (each host's
    sessions) until every host's is too (``hostsCurrentAfterS``)."""
    seen: dict[str, tuple[str, float]] = {}
    changed: set[str] = set()
    rv = await current_rv(client, namespace)
    watcher = asyncio.create_task(
        watch_batch(client, namespace, f"scale.hostpool.io/batch={prefix}", rv, seen, changed)
    )
    await asyncio.sleep(0.3)
    cpu_before = proc_stats(operator.process.pid)[0] if operator else 0.0
    writes_before = await storm.apiserver_writes(client)
    kill: dict[str, Any] = {}

    async def killer() -> None:
        while len(seen) < kill_at:
            await asyncio.sleep(0.02)
        assert operator is not None
        kill["placedAtKill"] = len(seen)
        kill["cpuBeforeKillS"] = proc_stats(operator.process.pid)[0] - cpu_before
        kill["rssBeforeKillMb"] = proc_stats(operator.process.pid)[1]
        operator.process.send_signal(signal.SIGKILL)
        operator.process.wait()
        kill["killedAt"] = time.time()
        kill["operator"] = await restart()

    killing = asyncio.create_task(killer()) if kill_at else None
    result = await asyncio.to_thread(
        run_loadgen,
        args,
        namespace,
        work / f"{prefix}.json",
        prefix=prefix,
        count=args.storm,
        first_pool=first_pool,
        pools=args.storm_pools,
        assign=assign,
    )
    deadline = time.time() + args.timeout
    while len(seen) < len(result["created"]) and time.time() < deadline:
        await asyncio.sleep(0.1)
    if killing is not None and not killing.done():
        if "killedAt" in kill:
            await killing  # the restarted operator's probe
        else:
            log("kill -9 never happened: too few placed")
            killing.cancel()
    current_after = hosts_after = float("nan")
    if expected is not None:
        for name, (host_name, _) in seen.items():
            if name in result["created"]:
                expected[host_name.rsplit("-", 1)[0]] += 1
                if expected_hosts is not None:
                    expected_hosts[host_name] = expected_hosts.get(host_name, 0) + 1
        done_at, _ = await pools_current(client, namespace, expected, args.timeout)
        last_placed = max((t for _, t in seen.values()), default=time.time())
        current_after = done_at - last_placed
        if expected_hosts is not None:
            # The hosts' counts too: their writes belong to the storm as much as the pools'.
            hosts_at, _ = await hosts_current(client, namespace, expected_hosts, args.timeout)
            hosts_after = hosts_at - last_placed
    else:
        await asyncio.sleep(args.status_interval * 2 + 0.5)
    watcher.cancel()
    op = kill["operator"][0] if kill else operator
    cpu_after, peak = proc_stats(op.process.pid) if op else (0.0, 0.0)
    writes_after = await storm.apiserver_writes(client)
    created = result["created"]
    delta = {k: writes_after.get(k, 0) - writes_before.get(k, 0) for k in writes_after}
    delta = {k: v for k, v in delta.items() if v}
    latencies = [(seen[n][1] - t) * 1000 for n, t in created.items() if n in seen]
    first = min(created.values()) if created else 0.0
    last = max((t for _, t in seen.values()), default=first)
    placed = sum(1 for n in created if n in seen)
    out: dict[str, Any] = {
        "prefix": prefix,
        "requests": args.storm,
        "created": len(created),
        "placed": placed,
        "perS": placed / (last - first) if last > first else 0.0,
        "p50Ms": percentile(latencies, 50),
        "p99Ms": percentile(latencies, 99),
        "seen": {n: h for n, (h, _) in seen.items()},
        "changed": sorted(changed),
        "writes": {f"{v} {r}": n for (v, r), n in sorted(delta.items())},
        "writesPerAssignment": (sum(delta.values()) - len(created)) / placed
        if placed and not assign
        else float("nan"),
        "loadgenErrors": result["errorCount"],
        "poolsCurrentAfterS": current_after,
        "hostsCurrentAfterS": hosts_after,
    }
    if operator is not None and not kill_at:
        out["operatorCpuS"] = cpu_after - cpu_before
        out["operatorPeakRssMb"] = peak
    if kill:
        times = sorted(t for _, t in seen.values())
        out["placedAtKill"] = kill["placedAtKill"]
        # The dead process's writes in flight may still land just after the kill: the
        # outage is the longest pause between placements.
        out["longestPauseS"] = max(
            (b - a for a, b in itertools.pairwise(times)), default=float("nan")
        )
        # Where the longest pause lies against the kill (as this bench's watch saw the
        # placements; the dead leader's writes in flight may land just after the kill).
        gaps = [(b - a, a, b) for a, b in itertools.pairwise(times)]
        if gaps:
            _, began, ended = max(gaps)
            out["pauseFromKillS"] = [began - kill["killedAt"], ended - kill["killedAt"]]
        out.update(kill["operator"][1])
        out["restartedOperatorPeakRssMb"] = peak
    return out


async def bench(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="hostpool-scale-"))
    client = storm.client_for(args.kubeconfig)
    cluster = Cluster(args.cluster_dir)
    hosts = args.pools * args.hosts_per_pool
    fill = per_host(args.sessions, args.pools, args.hosts_per_pool)
    storm_fill = per_host(args.storm, args.storm_pools, args.hosts_per_pool)
    if fill + storm_fill > args.limit or fill + 2 > args.limit:
        raise SystemExit(
            f"scale: no room: {fill} pre-filled + {storm_fill} storm sessions (or 2 probes) per "
            f"host > maxSessionLimit {args.limit}"
        )
    figures: dict[str, Any] = {"before": await cluster.figures(client)}
    if args.reuse:
        return await bench_filled(args, client, cluster, work, figures, *args.reuse.split(","))
    namespace = await storm.create_namespace(client, "bench-scale")
    ceiling_ns = await storm.create_namespace(client, "bench-scale-ceiling")
    log(f"work directory {work}; namespaces {namespace}, {ceiling_ns}")
    prefill = await asyncio.to_thread(
        run_loadgen,
        args,
        namespace,
        work / "prefill.json",
        prefix="f",
        count=args.sessions,
        first_pool=0,
        pools=args.pools,
        assign=True,
        setup=True,
        concurrency=args.concurrency,
    )
    log(
        f"pre-filled {args.pools} pools, {hosts} hosts, {len(prefill['assigned'])} sessions in "
        f"{prefill['setupS'] + prefill['ended'] - prefill['began']:.1f}s"
    )
    ceiling_sessions = sum(
        1
        for i in range(args.sessions)
        if slot(i, 0, args.pools, args.hosts_per_pool)[0] < args.storm_pools
    )
    # The ceiling's namespace: the storm pools again, filled alike (same pools, same hosts,
    # the same sessions on each host).
    ceiling_fill = await asyncio.to_thread(
        run_loadgen,
        args,
        ceiling_ns,
        work / "prefill-ceiling.json",
        prefix="f",
        count=ceiling_sessions,
        first_pool=0,
        pools=args.storm_pools,
        assign=True,
        setup=True,
        concurrency=args.concurrency,
    )
    await asyncio.sleep(2)
    figures["afterPrefill"] = await cluster.figures(client)
    prefill_summary: dict[str, Any] = {
        "pools": args.pools,
        "hostsPerPool": args.hosts_per_pool,
        "hosts": hosts,
        "limit": args.limit,
        "algorithm": args.algorithm,
        "sessions": len(prefill["assigned"]),
        "setupS": round(prefill["setupS"], 1),
        "sessionsS": round(prefill["ended"] - prefill["began"], 1),
        "sessionsPerS": round(len(prefill["assigned"]) / (prefill["ended"] - prefill["began"]), 1),
        "errors": prefill["errorCount"],
        "concurrency": args.concurrency,
        "ceilingNamespaceSessions": len(ceiling_fill["assigned"]),
        "ceilingNamespaceS": round(
            ceiling_fill["setupS"] + ceiling_fill["ended"] - ceiling_fill["began"], 1
        ),
    }
    if args.prefill_only:
        print(json.dumps({"prefill": prefill_summary, "cluster": figures}))
        log(f"pre-filled and kept: run again with SCALE_REUSE={namespace},{ceiling_ns}")
        await client.close()
        return 0
    return await bench_filled(
        args, client, cluster, work, figures, namespace, ceiling_ns, prefill_summary
    )


async def standby_run(
    args: argparse.Namespace,
    client: KubeClient,
    namespace: str,
    work: Path,
    leader: Operator,
    probe_pool: int,
) -> tuple[dict[str, Any], Operator]:
    """The standby arm: a second instance (another pod) starts beside the leader, lists
    everything and waits as a warm standby; the storm a third time (pools of its own) with a
    kill -9 of the leader once a third is placed, and nothing restarted: the standby takes
    the Lease when it expires and places. ``takeoverS``: the kill -> a probe request created
    at the kill placed. Returns the arm's figures and the standby (the leader now)."""
    standby = Operator(args, namespace, work, "standby", pod_name="hostpool-operator-bench-b")
    synced = await standby.wait_line("waiting as a standby", args.timeout)
    leader_rss, standby_rss = leader.rss_mb(), standby.rss_mb()
    log(
        f"standby: synced {synced:.2f}s after its start; RSS leader {leader_rss:.0f} MB, "
        f"standby {standby_rss:.0f} MB"
    )
    at_kill: dict[str, float] = {}

    async def take_over() -> tuple[Operator, dict[str, Any]]:
        killed_at = time.time()  # called the moment the leader is dead
        at_kill["standbyRssMb"] = standby.rss_mb()
        await create_probe(client, namespace, "probe-standby", probe_pool)
        at = await wait_assigned(client, namespace, "probe-standby", args.timeout)
        return standby, {
            "takeoverS": at - killed_at,
            "killToLeaseS": standby.logged_at(LEASE_HELD_LINE) - killed_at,
        }

    result = await storm_run(
        args,
        client,
        namespace,
        work,
        prefix="w",
        first_pool=2 * args.storm_pools,
        assign=False,
        operator=leader,
        kill_at=args.storm // 3,
        restart=take_over,
    )
    result |= {
        "standbySyncS": synced,
        "leaderRssMb": leader_rss,
        "standbyRssBeforeMb": standby_rss,
        "standbyRssMb": at_kill.get("standbyRssMb", float("nan")),
    }
    log(
        f"standby arm: take-over {result.get('takeoverS', float('nan')):.2f}s, "
        f"{result['placed']} placed in {result['perS']:.1f}/s"
    )
    return result, standby


async def clear_batches(client: KubeClient, namespace: str) -> None:
    """Delete what an earlier run of the phases below left in a kept namespace (storm, kill,
    ceiling and probe requests), and wait until they are gone."""
    selector = "scale.hostpool.io/batch in (s,k,w,c,d,probe)"
    path = f"/apis/{GROUP_VERSION}/namespaces/{namespace}/sessionrequests"
    await client.request("DELETE", path, params={"labelSelector": selector})
    while (await client.request("GET", path, params={"labelSelector": selector, "limit": "1"}))[
        "items"
    ]:
        await asyncio.sleep(0.5)


def arm_invariants(
    args: argparse.Namespace, items: list[dict[str, Any]], arm: dict[str, Any]
) -> dict[str, int]:
    """One storm's own: its requests not Assigned at the end (lost), seen on a second host
    (duplicates); hosts over the limit (overLimit) over the whole namespace."""
    by_name = {obj["metadata"]["name"]: obj.get("status") or {} for obj in items}
    pattern = re.compile(rf"{arm['prefix']}\d{{6}}")
    batch = {name for name in by_name if pattern.fullmatch(name)}
    lost = sum(1 for name in batch if by_name[name].get("phase") != "Assigned")
    lost += max(0, arm["created"] - len(batch))
    duplicates = set(arm["changed"]) | {
        name
        for name in batch
        if by_name[name].get("host") not in (None, arm["seen"].get(name, by_name[name]["host"]))
    }
    count: dict[str, int] = {}
    for status in by_name.values():
        if status.get("phase") == "Assigned":
            count[status["host"]] = count.get(status["host"], 0) + 1
    return {
        "lost": lost,
        "duplicates": len(duplicates),
        "overLimit": sum(1 for n in count.values() if n > args.limit),
    }


def check_invariants(
    args: argparse.Namespace, items: list[dict[str, Any]], storms: tuple[dict[str, Any], ...]
) -> dict[str, int]:
    """Over every request at the end: none lost, none moved (a pre-filled session elsewhere
    than its slot, or a storm's request seen on another host than first), none over a limit."""
    count: dict[str, int] = {}
    lost: list[str] = []
    dup: set[str] = set().union(*(batch["changed"] for batch in storms))
    for obj in items:
        name = obj["metadata"]["name"]
        status = obj.get("status") or {}
        if status.get("phase") != "Assigned":
            lost.append(name)
            continue
        where = status["host"]
        count[where] = count.get(where, 0) + 1
        if name.startswith("f"):
            p, h = slot(int(name[1:]), 0, args.pools, args.hosts_per_pool)
            if where != host(p, h):
                dup.add(name)
        if any(batch["seen"].get(name, where) != where for batch in storms):
            dup.add(name)
    names = {obj["metadata"]["name"] for obj in items}
    # The pre-filled sessions, the storms (two, three with the standby arm) and their probes.
    missing = args.sessions + len(storms) * args.storm + len(storms) - len(names)
    return {
        "lost": len(lost) + max(0, missing),
        "duplicates": len(dup),
        "overLimit": sum(1 for n in count.values() if n > args.limit),
        "objectsAtEnd": len(items),
    }


async def bench_filled(
    args: argparse.Namespace,
    client: KubeClient,
    cluster: Cluster,
    work: Path,
    figures: dict[str, Any],
    namespace: str,
    ceiling_ns: str,
    prefill_summary: dict[str, Any] | None = None,
) -> int:
    """Start, storm, kill -9 and the invariants, on namespaces pre-filled by ``bench`` (this
    run's, or kept by an earlier ``SCALE_PREFILL_ONLY`` run and named by ``SCALE_REUSE``)."""
    hosts = args.pools * args.hosts_per_pool
    probe_pool = args.pools - 1
    if prefill_summary is None:
        log(f"re-using the pre-filled namespaces {namespace}, {ceiling_ns}")
        for ns in (namespace, ceiling_ns):
            await clear_batches(client, ns)
        prefill_summary = {
            "pools": args.pools,
            "hostsPerPool": args.hosts_per_pool,
            "hosts": hosts,
            "limit": args.limit,
            "algorithm": args.algorithm,
            "sessions": args.sessions,
            "reusedFrom": f"{namespace},{ceiling_ns}",
        }
        figures["afterPrefill"] = await cluster.figures(client)
    expected: dict[str, int] = {pool(p): 0 for p in range(args.pools)}
    for i in range(args.sessions):
        expected[pool(slot(i, 0, args.pools, args.hosts_per_pool)[0])] += 1
    expected[pool(probe_pool)] += 1

    # --- start
    operator = Operator(args, namespace, work, "start")
    await create_probe(client, namespace, "probe-start", probe_pool)
    placed_at = await wait_assigned(client, namespace, "probe-start", args.timeout)
    current_at, good = await pools_current(client, namespace, expected, args.timeout)
    # The storm starts once the start's host status writes are done, so its window counts
    # only the writes the storm itself causes.
    host_sessions: dict[str, int] = {
        host(p, h): 0 for p in range(args.pools) for h in range(args.hosts_per_pool)
    }
    for i in range(args.sessions):
        host_sessions[host(*slot(i, 0, args.pools, args.hosts_per_pool))] += 1
    hosts_at, hosts_good = await hosts_current(client, namespace, host_sessions, args.timeout)
    cpu, peak = proc_stats(operator.process.pid)
    start_sync = operator.sync_figures()
    start: dict[str, Any] = {
        "firstPlacementS": placed_at - operator.started,
        "poolsCurrentS": current_at - operator.started,
        "poolsCurrent": good,
        "hostsCurrentS": hosts_at - operator.started,
        "hostsCurrent": hosts_good,
        "initialSync": start_sync,
        "cpuS": cpu,
        "peakRssMb": peak,
    }
    figures["operatorRunning"] = await cluster.figures(client)
    log(
        f"start: first placement {start['firstPlacementS']:.2f}s, pools current "
        f"{start['poolsCurrentS']:.2f}s ({good}/{args.pools}), hosts current "
        f"{start['hostsCurrentS']:.2f}s ({hosts_good}/{len(host_sessions)}), "
        f"peak RSS {peak:.0f} MB, "
        f"CPU {cpu:.1f}s, initial sync {start['initialSync'] or 'not reported'}"
    )

    # --- storm and ceiling
    sp = args.storm_pools
    # The ceiling once before and once after the storm, their mean the reference (as in
    # make bench): on a shared two-core machine one ceiling alone is noisy. The second one's
    # requests go to the same hosts again; nothing places there, so no limit applies.
    before = await storm_run(args, client, ceiling_ns, work, prefix="c", first_pool=0, assign=True)
    log(f"ceiling before: {before['placed']} in {before['perS']:.1f}/s")
    run = await storm_run(
        args,
        client,
        namespace,
        work,
        prefix="s",
        first_pool=0,
        assign=False,
        operator=operator,
        expected=expected,
        expected_hosts=host_sessions,
    )
    log(f"storm: {run['placed']} in {run['perS']:.1f}/s")
    after = await storm_run(args, client, ceiling_ns, work, prefix="d", first_pool=0, assign=True)
    log(f"ceiling after: {after['placed']} in {after['perS']:.1f}/s")
    ceiling = {key: (before[key] + after[key]) / 2 for key in ("perS", "p50Ms", "p99Ms")} | {
        "beforePerS": before["perS"],
        "afterPerS": after["perS"],
    }
    # --- the storm again, kill -9 a third of the way
    restarted: list[Operator] = []

    async def restart() -> tuple[Operator, dict[str, Any]]:
        new = Operator(args, namespace, work, "restart")
        restarted.append(new)
        await create_probe(client, namespace, "probe-restart", probe_pool)
        at = await wait_assigned(client, namespace, "probe-restart", args.timeout)
        return new, {
            "restartToProbePlacementS": at - new.started,
            "restartInitialSync": new.sync_figures(),
            "leaseWaitS": new.lease_wait(),
        }

    killed = await storm_run(
        args,
        client,
        namespace,
        work,
        prefix="k",
        first_pool=sp,
        assign=False,
        operator=operator,
        kill_at=args.storm // 3,
        restart=restart,
    )
    log(f"storm with kill -9: {killed['placed']} in {killed['perS']:.1f}/s")
    leader = restarted[0] if restarted else operator
    # --- the standby arm: a warm standby beside the leader, kill -9 of the leader
    standby_arm, standby = await standby_run(args, client, namespace, work, leader, probe_pool)
    # --- invariants over the whole namespace
    listing = await client.list("sessionrequests", namespace)
    figures["end"] = await cluster.figures(client)
    problems = operator.problems() + (leader.problems() if restarted else [])
    problems += standby.problems()
    instances = [operator, *([leader] if restarted else []), standby]
    late = [process.late_renewals() for process in instances]
    late_renewals = {"count": sum(n for n, _ in late), "pausedS": round(sum(s for _, s in late), 2)}
    for process in (standby, leader, operator):
        process.stop()  # the killed ones are not alive: nothing to do
    invariants = check_invariants(args, listing["items"], (run, killed, standby_arm))
    standby_arm |= arm_invariants(args, listing["items"], standby_arm)

    def storm_summary(r: dict[str, Any]) -> dict[str, Any]:
        keep = {k: v for k, v in r.items() if k not in ("seen", "changed")}
        keep["ratio"] = r["perS"] / ceiling["perS"] if ceiling["perS"] else float("nan")
        return {
            k: round(v, 3) if isinstance(v, float) else v for k, v in keep.items() if k != "writes"
        } | {"writes": r["writes"]}

    summary = {
        "prefill": prefill_summary,
        "sessionLimits": SESSION_LIMITS if args.session_limits else None,
        "cluster": figures,
        "start": {k: round(v, 2) if isinstance(v, float) else v for k, v in start.items()},
        "ceiling": {k: round(v, 1) for k, v in ceiling.items()},
        "storm": storm_summary(run),
        "kill": storm_summary(killed),
        "standby": storm_summary(standby_arm),
        "invariants": invariants,
        "operatorLogProblems": len(problems),
        "lateLeaseRenewals": late_renewals,
    }
    sync_text = (
        "not reported"
        if not start_sync
        else "list {listS}s, decode {decodeS}s, rebuild {rebuildS}s, {objects} objects".format(
            **start_sync
        )
    )

    def storm_rows(label: str, r: dict[str, Any]) -> list[tuple[str, str]]:
        return (
            [
                (f"{label}: placed / requests", f"{r['placed']} / {r['requests']}"),
                (
                    f"{label}: /s (ratio to ceiling)",
                    f"{r['perS']:.1f} ({r['perS'] / ceiling['perS']:.3f})",
                ),
                (f"{label}: p50 / p99 (ms)", f"{r['p50Ms']:.1f} / {r['p99Ms']:.1f}"),
                (f"{label}: API writes per assignment", f"{r['writesPerAssignment']:.3f}"),
            ]
            + (
                [(f"{label}: every pool status current, after the last placement", f"{after:.2f}s")]
                if (after := r.get("poolsCurrentAfterS", float("nan"))) == after
                else []
            )
            + (
                [(f"{label}: every host status current, after the last placement", f"{h:.2f}s")]
                if (h := r.get("hostsCurrentAfterS", float("nan"))) == h
                else []
            )
        )

    how = (
        f"load generator, concurrency {args.concurrency}: create + status PUT each "
        f"(no operator); hosts/pools {prefill_summary['setupS']}s, sessions "
        f"{prefill_summary['sessionsS']}s ({prefill_summary['sessionsPerS']}/s)"
        if "reusedFrom" not in prefill_summary
        else f"kept from an earlier pre-fill ({prefill_summary['reusedFrom']}); its storm, "
        "kill and probe requests deleted first"
    )
    pause_from_kill = standby_arm.get("pauseFromKillS") or [float("nan")] * 2
    rows = [
        (
            "pre-filled",
            f"{args.pools} pools x {args.hosts_per_pool} hosts ({args.algorithm}, limit "
            f"{args.limit}), {prefill_summary['sessions']} Assigned sessions",
        ),
        (
            "  session limits",
            f"every pool {json.dumps(SESSION_LIMITS)}, pre-filled sessions Active"
            if args.session_limits
            else "none" + (", pre-filled sessions Active" if args.sessions_active else ""),
        ),
        ("  how", how),
        (
            "  ceiling namespace",
            f"{sp} pools filled alike"
            + (
                f", {prefill_summary['ceilingNamespaceSessions']} sessions in "
                f"{prefill_summary['ceilingNamespaceS']}s"
                if "ceilingNamespaceS" in prefill_summary
                else ""
            ),
        ),
        *(
            (
                f"etcd db / apiserver RSS (MB), {k}",
                f"{fmt(v['etcdDbMb'])} / {fmt(v['apiserverRssMb'])}",
            )
            for k, v in figures.items()
        ),
        ("start -> first placement (s)", f"{start['firstPlacementS']:.2f}"),
        (
            "start -> all pool statuses current",
            f"{start['poolsCurrentS']:.2f} s ({good}/{args.pools} pools)",
        ),
        ("operator's initial sync", sync_text),
        ("operator CPU (s) / peak RSS (MB), start", f"{cpu:.1f} / {peak:.1f}"),
        (
            "ceiling: /s before / after (mean)",
            f"{ceiling['beforePerS']:.1f} / {ceiling['afterPerS']:.1f} ({ceiling['perS']:.1f})",
        ),
        ("ceiling: p50 / p99 (ms, mean)", f"{ceiling['p50Ms']:.1f} / {ceiling['p99Ms']:.1f}"),
        *storm_rows("storm", run),
        (
            "storm: operator CPU (s) / peak RSS (MB)",
            f"{run['operatorCpuS']:.1f} / {run['operatorPeakRssMb']:.1f}",
        ),
        *storm_rows("kill -9", killed),
        ("kill -9: placed at the kill", str(killed.get("placedAtKill", "never killed"))),
        ("kill -9: restart waited for the lease (s)", fmt(killed.get("leaseWaitS"), 2)),
        (
            "kill -9: restart -> probe placed (s)",
            fmt(killed.get("restartToProbePlacementS"), 2),
        ),
        (
            "kill -9: longest pause in placements (s)",
            fmt(killed.get("longestPauseS"), 2),
        ),
        ("standby: synced after its start (s)", fmt(standby_arm.get("standbySyncS"), 2)),
        (
            "standby: RSS (MB) leader / standby / standby at the kill",
            f"{fmt(standby_arm.get('leaderRssMb'))} / "
            f"{fmt(standby_arm.get('standbyRssBeforeMb'))} / "
            f"{fmt(standby_arm.get('standbyRssMb'))}",
        ),
        ("standby: kill -9 -> probe placed (takeoverS)", fmt(standby_arm.get("takeoverS"), 2)),
        (
            "standby: longest pause in placements (s)",
            fmt(standby_arm.get("longestPauseS"), 2),
        ),
        (
            "standby: from the kill: the pause began / the Lease taken / the pause ended (s)",
            f"{fmt(pause_from_kill[0], 2)} / {fmt(standby_arm.get('killToLeaseS'), 2)} / "
            f"{fmt(pause_from_kill[1], 2)}",
        ),
        (
            "standby: lost / duplicates / overLimit",
            f"{standby_arm['lost']} / {standby_arm['duplicates']} / {standby_arm['overLimit']}",
        ),
        (
            "lost / duplicates / overLimit (all)",
            f"{invariants['lost']} / {invariants['duplicates']} / {invariants['overLimit']}",
        ),
        ("operator log: ERROR/WARNING lines", str(len(problems))),
        (
            "late Lease renewals / writes paused by them (s)",
            f"{late_renewals['count']} / {fmt(late_renewals['pausedS'], 2)}",
        ),
    ]
    print(
        f"\nscale: {args.sessions} sessions over {args.pools} pools; storm {args.storm} over "
        f"{sp} pools"
    )
    for label, value in rows:
        print(f"  {label:<42} {value}")
    for line in problems[:10]:
        print(f"  operator log: {line[:200]}")
    print(f"  operator logs and raw results: {work}")
    print(json.dumps(summary), flush=True)
    if args.keep or args.reuse:
        log(f"namespaces kept: {namespace}, {ceiling_ns}")
    else:
        # Not waited for: deleting 100,000 requests outlasts the API server's request timeout
        # (one run got a 504), and the next make bench-scale starts a fresh control plane.
        for ns in (ceiling_ns, namespace):
            try:
                await client.request("DELETE", f"/api/v1/namespaces/{ns}")
            except (ApiError, ApiTransportError) as error:
                log(f"namespace {ns} not deleted: {error}")
    if args.cluster_dir:
        log(f"the control plane runs on: hack/cluster/cluster.sh down {args.cluster_dir}")
    await client.close()
    bad = invariants["lost"] or invariants["duplicates"] or invariants["overLimit"]
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    sub = parser.add_subparsers(dest="command")
    gen = sub.add_parser("loadgen")
    for flag in ("--kubeconfig", "--namespace", "--prefix", "--algorithm", "--out"):
        gen.add_argument(flag, required=True)
    for flag in ("--count", "--first-pool", "--pools", "--hosts-per-pool", "--limit"):
        gen.add_argument(flag, type=int, required=True)
    gen.add_argument("--concurrency", type=int, required=True)
    gen.add_argument("--assign", action="store_true")
    gen.add_argument("--session-limits", action="store_true")
    gen.add_argument("--sessions-active", action="store_true")
    gen.add_argument("--setup", action="store_true")
    env = os.environ.get
    parser.add_argument("--pools", type=int, default=int(env("SCALE_POOLS", "1000")))
    parser.add_argument(
        "--hosts-per-pool", type=int, default=int(env("SCALE_HOSTS_PER_POOL", "10"))
    )
    parser.add_argument("--limit", type=int, default=int(env("SCALE_LIMIT", "12")))
    parser.add_argument("--sessions", type=int, default=int(env("SCALE_SESSIONS", "100000")))
    parser.add_argument("--storm", type=int, default=int(env("SCALE_STORM", "2000")))
    parser.add_argument("--storm-pools", type=int, default=int(env("SCALE_STORM_POOLS", "100")))
    parser.add_argument("--algorithm", default=env("SCALE_ALGORITHM", "DepthFirst"))
    parser.add_argument("--concurrency", type=int, default=int(env("SCALE_CONCURRENCY", "256")))
    parser.add_argument(
        "--storm-concurrency", type=int, default=int(env("SCALE_STORM_CONCURRENCY", "64"))
    )
    parser.add_argument(
        "--session-limits",
        action="store_true",
        default=bool(env("SCALE_SESSION_LIMITS")),
        help="every pool with spec.sessionLimits (SESSION_LIMITS), and every pre-filled "
        "session reported Active by its host (sessionState, stateChangedAt, logonAt)",
    )
    parser.add_argument(
        "--sessions-active",
        action="store_true",
        default=bool(env("SCALE_SESSIONS_ACTIVE")),
        help="every pre-filled session reported Active by its host, without session limits "
        "(the other half of the comparison with --session-limits)",
    )
    parser.add_argument(
        "--lease-duration",
        default=env("SCALE_LEASE_DURATION", ""),
        help="the operators' --lease-duration (default: theirs)",
    )
    parser.add_argument("--status-interval", type=float, default=1.0)
    parser.add_argument("--write-concurrency", type=int, default=128)
    parser.add_argument("--timeout", type=float, default=float(env("SCALE_TIMEOUT", "600")))
    parser.add_argument(
        "--keep", action="store_true", default=bool(env("SCALE_KEEP")), help="keep the namespaces"
    )
    parser.add_argument(
        "--prefill-only",
        action="store_true",
        default=bool(env("SCALE_PREFILL_ONLY")),
        help="pre-fill, keep the namespaces and stop (for runs with --reuse)",
    )
    parser.add_argument(
        "--reuse",
        default=env("SCALE_REUSE", ""),
        help="NAMESPACE,CEILING_NAMESPACE pre-filled by an earlier --prefill-only run (same "
        "SCALE_* sizes): skip the pre-fill",
    )
    args = parser.parse_args()
    if args.command == "loadgen":
        asyncio.run(loadgen(args))
        return 0
    # The storm, the kill run and the standby arm use pools of their own; the probes use the
    # last pool.
    args.storm_pools = max(1, min(args.storm_pools, (args.pools - 1) // 3))
    options = local_cluster.Options(
        env="BENCH_KUBECONFIG",
        fake_nodes=False,
        fresh=not args.reuse,
        reuse=bool(args.reuse),
        keep=bool(env("BENCH_KEEP", "") or args.prefill_only),
    )
    with local_cluster.bench_cluster(ROOT / ".cluster" / "bench-scale", log, options) as cluster:
        args.kubeconfig = str(cluster.kubeconfig)
        args.cluster_dir = str(cluster.directory or "")
        try:
            return asyncio.run(bench(args))
        finally:
            for operator in OPERATORS:
                operator.stop()


if __name__ == "__main__":
    sys.exit(main())
