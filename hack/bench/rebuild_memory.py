"""Memory and time of the operator's start-up rebuild, in process (no API server).

Builds ``--pools`` HostPools x ``--hosts`` SessionHosts and ``--requests`` assigned
SessionRequests as JSON, shaped like the API server's LIST items (managedFields of the
creator and of the operator's status writes included: a LIST cannot leave them out), encodes
them to bytes page by page the way they arrive, and feeds them through the controller's
handlers (``Controller.on_pool_event``/``on_host_event``/``on_request_event``), decoding
one page at a time like ``Informer.list_once``. Prints the RSS and the tracemalloc growth
per request record, and the seconds of decode and rebuild; ``--profile`` prints the top of a
cProfile of the rebuild instead.

    .venv/bin/python hack/bench/rebuild_memory.py --requests 100000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import json
import pstats
import resource
import time
import tracemalloc
from typing import Any

import kopf
import orjson

from hostpool_operator.controller.manager import Controller, collector_paused
from hostpool_operator.kube.client import KubeClient
from hostpool_operator.kube.lists import LIST_PAGE

NS = "vdi"
STAMP = "2026-01-05T07:58:12Z"


def _managed(manager: str, operation: str, fields: dict[str, Any], sub: str | None) -> Any:
    entry = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "hostpool.io/v1alpha1",
        "time": STAMP,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if sub:
        entry["subresource"] = sub
    return entry


def pool(i: int) -> dict[str, Any]:
    name = f"pool-{i:04d}"
    return {
        "apiVersion": "hostpool.io/v1alpha1",
        "kind": "HostPool",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"7d1c0a52-0000-4000-8000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "generation": 1,
            "creationTimestamp": STAMP,
        },
        "spec": {"loadBalancerType": "BreadthFirst", "maxSessionLimit": 12},
        "status": {},
    }


def host(p: int, h: int) -> dict[str, Any]:
    name = f"pool-{p:04d}-host-{h:02d}"
    return {
        "apiVersion": "hostpool.io/v1alpha1",
        "kind": "SessionHost",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"9a3e0b11-0000-4000-8000-{p * 100 + h:012d}",
            "resourceVersion": str(200000 + p * 100 + h),
            "generation": 1,
            "creationTimestamp": STAMP,
            "managedFields": [
                _managed(
                    "kubectl-create",
                    "Update",
                    {"f:spec": {".": {}, "f:address": {}, "f:poolRef": {".": {}, "f:name": {}}}},
                    None,
                )
            ],
        },
        "spec": {"poolRef": {"name": f"pool-{p:04d}"}, "address": f"10.{p // 250}.{p % 250}.{h}"},
        "status": {"ready": True},
    }


def request(n: int, pools: int, hosts: int) -> dict[str, Any]:
    p = n % pools
    h = (n // pools) % hosts
    name = f"session-{n:06d}"
    pool_name = f"pool-{p:04d}"
    host_name = f"{pool_name}-host-{h:02d}"
    message = f"new session on {host_name}"
    return {
        "apiVersion": "hostpool.io/v1alpha1",
        "kind": "SessionRequest",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"5f2b7c3d-{n:04x}-4000-8000-{n:012d}"[-36:],
            "resourceVersion": str(400000 + n),
            "generation": 1,
            "creationTimestamp": STAMP,
            "managedFields": [
                _managed(
                    "broker",
                    "Update",
                    {
                        "f:spec": {
                            ".": {},
                            "f:poolRef": {".": {}, "f:name": {}},
                            "f:protocol": {},
                            "f:user": {},
                        }
                    },
                    None,
                ),
                _managed(
                    "hostpool-operator",
                    "Update",
                    {
                        "f:status": {
                            ".": {},
                            "f:assignedAt": {},
                            "f:conditions": {},
                            "f:host": {},
                            "f:hostAddress": {},
                            "f:message": {},
                            "f:observedGeneration": {},
                            "f:phase": {},
                            "f:reason": {},
                            "f:sessionState": {},
                        }
                    },
                    "status",
                ),
            ],
        },
        "spec": {
            "poolRef": {"name": pool_name},
            "user": f"user{n:06d}@corp.example",
            "protocol": "RDP",
        },
        "status": {
            "observedGeneration": 1,
            "phase": "Assigned",
            "host": host_name,
            "hostAddress": f"10.{p // 250}.{p % 250}.{h}",
            "reason": "NewSession",
            "message": message,
            "sessionState": "Active",
            "assignedAt": STAMP,
            "conditions": [
                {
                    "type": "Assigned",
                    "status": "True",
                    "reason": "NewSession",
                    "message": message,
                    "lastTransitionTime": STAMP,
                    "observedGeneration": 1,
                }
            ],
        },
    }


def pages(objects: list[dict[str, Any]]) -> list[bytes]:
    """The LIST answers' bodies, ``LIST_PAGE`` objects each."""
    return [
        orjson.dumps({"items": objects[i : i + LIST_PAGE], "metadata": {"resourceVersion": "9"}})
        for i in range(0, len(objects), LIST_PAGE)
    ]


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def feed(
    controller: Controller, bodies: list[bytes], handler: str, *, whole: bool = False
) -> tuple[float, float, int]:
    """Decode and report page by page, as ``Informer.list_once`` does; ``whole``: decode
    every page first and report them after, as the operator did before paging its lists
    (``KubeClient.list`` still does)."""
    decode = rebuild = 0.0
    count = 0
    if whole:
        started = time.perf_counter()
        every = [obj for body in bodies for obj in orjson.loads(body)["items"]]
        fed = time.perf_counter()
        for obj in every:
            getattr(controller, handler)("ADDED", obj)
        return fed - started, time.perf_counter() - fed, len(every)
    for body in bodies:
        started = time.perf_counter()
        items = orjson.loads(body)["items"]
        fed = time.perf_counter()
        for obj in items:
            getattr(controller, handler)("ADDED", obj)
        decode += fed - started
        rebuild += time.perf_counter() - fed
        count += len(items)
        del items
    return decode, rebuild, count


async def main(args: argparse.Namespace) -> None:
    pool_bodies = pages([pool(i) for i in range(args.pools)])
    host_bodies = pages([host(p, h) for p in range(args.pools) for h in range(args.hosts)])
    request_bodies = pages([request(n, args.pools, args.hosts) for n in range(args.requests)])
    sample = orjson.dumps(request(0, args.pools, args.hosts))
    print(
        f"request JSON: {len(sample)} bytes each "
        f"({len(json.loads(sample)['metadata']['managedFields'])} managedFields)"
    )
    client = KubeClient(kopf.ConnectionInfo(server="https://127.0.0.1:9"))
    controller = Controller(client)
    for body in pool_bodies:
        for obj in orjson.loads(body)["items"]:
            controller.on_pool_event("ADDED", obj)
    feed(controller, host_bodies, "on_host_event")
    gc.collect()
    before_rss = rss_mb()
    if args.tracemalloc:
        tracemalloc.start()
    before_traced = tracemalloc.get_traced_memory()[0] if args.tracemalloc else 0
    collections = [0, 0, 0]
    gc_seconds = [0.0, 0.0]

    def gc_callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_seconds[1] = time.perf_counter()
        else:
            collections[info["generation"]] += 1
            gc_seconds[0] += time.perf_counter() - gc_seconds[1]

    if args.gc_stats:
        gc.callbacks.append(gc_callback)
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    with collector_paused() if args.pause_gc else contextlib.nullcontext():
        decode, rebuild, count = feed(
            controller, request_bodies, "on_request_event", whole=args.whole
        )
    if profiler:
        profiler.disable()
    if args.gc_stats:
        gc.callbacks.remove(gc_callback)
        print(f"GC: {gc_seconds[0]:.2f}s in {collections} collections (by generation)")
    gc.collect()
    after_rss = rss_mb()
    traced = (tracemalloc.get_traced_memory()[0] - before_traced) if args.tracemalloc else 0
    del request_bodies
    gc.collect()
    await client.close()
    print(
        f"{count} requests over {args.pools} pools x {args.hosts} hosts: "
        f"decode {decode:.2f}s, rebuild {rebuild:.2f}s"
    )
    print(
        f"RSS {before_rss:.0f} MB before requests, {after_rss:.0f} MB after "
        f"({(after_rss - before_rss) * 1024 * 1024 / count:.0f} B/request); "
        f"{rss_mb():.0f} MB without the page bodies; "
        f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )
    if args.tracemalloc:
        print(f"tracemalloc: {traced / count:.0f} B/request kept; by line:")
        for stat in tracemalloc.take_snapshot().statistics("lineno")[:12]:
            print(f"  {stat.size / count:7.0f} B/request  {stat.traceback[0]}")
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        print(out.getvalue())
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(20)
        print(out.getvalue())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--whole", action="store_true", help="decode the whole list, then feed")
    parser.add_argument(
        "--pause-gc", action="store_true", help="feed in collector_paused(), as initial_sync does"
    )
    parser.add_argument("--gc-stats", action="store_true", help="count the GC's passes and time")
    asyncio.run(main(parser.parse_args()))
