"""`make bench-hosts`: a logon storm on an empty pool whose hosts are started on demand.

A depth-first pool with no hosts and a Pod behind every host it adds (scheduled by the real
kube-scheduler to kwok's fake nodes on the local control plane, or run by the kubelets of the
cluster named by KUBECONFIG). N logons arrive at once; the operator must start exactly
ceil(N / maxSessionLimit) hosts, no more, and place every logon on them without putting any
host over its limit.

Measured: hosts and pods created against hosts needed, the time from the first logon to the
last assignment, each host's time from the scale-up decision to its Pod being Ready (from the
operator's log), per-request time from creation to Assigned (creation and assignedAt stamps,
whole seconds), and the invariants: lost (not assigned), failed, over the limit, requests on a
host that does not exist. The last line of stdout is one JSON object.

Environment: BENCH_HOSTS (hosts needed, default 50), BENCH_LIMIT (default 10),
BENCH_CONCURRENCY (request creators, default 16); KUBECONFIG to use an existing cluster.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "hack"))

from bench import local_cluster
from support import builders

CLUSTER = ROOT / ".cluster" / "bench-hosts"
GROUP, VERSION = "hostpool.io", "v1alpha1"
NAMESPACE = "bench-hosts"
POOL = "desktops"


def log(message: str) -> None:
    print(f"bench-hosts: {message}", file=sys.stderr, flush=True)


def fresh_namespace(core: Any) -> None:
    try:
        core.delete_namespace(NAMESPACE)
    except ApiException as error:
        if error.status != 404:
            raise
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            core.read_namespace(NAMESPACE)
        except ApiException as error:
            if error.status == 404:
                break
        time.sleep(0.2)
    core.create_namespace({"metadata": {"name": NAMESPACE}})


def start_operator(
    path: Path, log_path: Path, extra: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "hostpool_operator",
        "run",
        "--namespace",
        NAMESPACE,
        "--no-leader-election",
        "--log-format",
        "text",
        *extra,
    ]
    env = {**os.environ, "KUBECONFIG": str(path), "PYTHONPATH": str(ROOT / "operator")}
    process = subprocess.Popen(
        command, stdout=log_path.open("wb"), stderr=subprocess.STDOUT, env=env
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "hostpool-operator started" in log_path.read_text(errors="replace"):
            return process
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise SystemExit("bench-hosts: the operator did not start:\n" + log_path.read_text()[-3000:])


def items(objects: Any, plural: str) -> list[dict[str, Any]]:
    listing: dict[str, Any] = objects.list_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, plural
    )
    found: list[dict[str, Any]] = listing["items"]
    return found


def stamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def main() -> int:
    with local_cluster.bench_cluster(CLUSTER, log) as cluster:
        path = cluster.kubeconfig
        return run(path)


def run(path: Path) -> int:
    hosts_needed = int(os.environ.get("BENCH_HOSTS", "50"))
    limit = int(os.environ.get("BENCH_LIMIT", "10"))
    concurrency = int(os.environ.get("BENCH_CONCURRENCY", "16"))
    users = hosts_needed * limit
    subprocess.run(
        [
            str(ROOT / ".cluster" / "bin" / "kubectl"),
            "--kubeconfig",
            str(path),
            "apply",
            "-f",
            str(ROOT / "crds"),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    config.load_kube_config(str(path))  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    core = client.CoreV1Api(api)
    objects = client.CustomObjectsApi(api)
    fresh_namespace(core)
    objects.create_namespaced_custom_object(
        GROUP,
        VERSION,
        NAMESPACE,
        "hostpools",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "HostPool",
            "metadata": {"name": POOL},
            "spec": {
                "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": limit},
                "scaling": {
                    "maxHosts": hosts_needed * 2,  # room to over-provision, were it to
                    "scaleDownDelaySeconds": 3600,
                    "hostTemplate": {"workload": builders.desktop_pod()},
                },
            },
        },
    )
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "operator.log"
        operator = start_operator(path, log_path)
        try:
            log(f"{users} logons at once onto an empty pool (limit {limit})")

            def logon(i: int) -> None:
                objects.create_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    NAMESPACE,
                    "sessionrequests",
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "SessionRequest",
                        "metadata": {"name": f"logon-{i:05d}"},
                        "spec": {"poolRef": {"name": POOL}, "user": f"user{i:05d}"},
                    },
                )

            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=concurrency) as creators:
                list(creators.map(logon, range(users)))
            created_in = time.monotonic() - started
            deadline = started + 600
            while True:
                requests = items(objects, "sessionrequests")
                phases = Counter(r.get("status", {}).get("phase") for r in requests)
                if phases["Assigned"] + phases["Failed"] == users or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
            all_placed_in = time.monotonic() - started
            time.sleep(2)  # let any (wrong) extra host appear before counting
            hosts = items(objects, "sessionhosts")
            pods = core.list_namespaced_pod(NAMESPACE).items
            starts = sorted(
                float(m.group(1))
                for m in re.finditer(
                    r"ready ([0-9.]+)s after the scale-up decision",
                    log_path.read_text(errors="replace"),
                )
            )
        finally:
            operator.terminate()
            operator.wait(30)
    host_names = {h["metadata"]["name"] for h in hosts}
    per_host = Counter(
        r["status"]["host"] for r in requests if r.get("status", {}).get("phase") == "Assigned"
    )
    latencies = sorted(
        (
            stamp(r["status"]["assignedAt"]) - stamp(r["metadata"]["creationTimestamp"])
        ).total_seconds()
        for r in requests
        if r.get("status", {}).get("assignedAt")
    )
    needed = math.ceil(users / limit)
    result: dict[str, Any] = {
        "logons": users,
        "limit": limit,
        "hostsNeeded": needed,
        "hostsCreated": len(hosts),
        "podsCreated": len(pods),
        "overProvisioned": len(hosts) - needed,
        "createSeconds": round(created_in, 2),
        "allAssignedSeconds": round(all_placed_in, 2),
        "throughput": round(users / all_placed_in, 1),
        "hostStartMedian": starts[len(starts) // 2] if starts else None,
        "hostStartMax": starts[-1] if starts else None,
        "hostStarts": len(starts),
        "latencyP50": latencies[len(latencies) // 2] if latencies else None,
        "latencyP99": latencies[int(len(latencies) * 0.99)] if latencies else None,
        "lost": users - phases["Assigned"] - phases["Failed"],
        "failed": phases["Failed"],
        "overLimit": sum(1 for n in per_host.values() if n > limit),
        "onUnknownHost": sum(n for h, n in per_host.items() if h not in host_names),
    }
    print(f"{'logons':<28}{users:>10}")
    print(f"{'hosts needed':<28}{needed:>10}")
    print(f"{'hosts created':<28}{len(hosts):>10}")
    print(f"{'pods created':<28}{len(pods):>10}")
    print(f"{'logons created in (s)':<28}{created_in:>10.2f}")
    print(f"{'all assigned after (s)':<28}{all_placed_in:>10.2f}")
    if starts:
        print(f"{'decision->Ready median (s)':<28}{starts[len(starts) // 2]:>10.2f}")
        print(f"{'decision->Ready max (s)':<28}{starts[-1]:>10.2f}")
    if latencies:
        print(f"{'create->Assigned p50 (s)':<28}{result['latencyP50']:>10.0f}")
        print(f"{'create->Assigned p99 (s)':<28}{result['latencyP99']:>10.0f}")
    for key in ("lost", "failed", "overLimit", "onUnknownHost", "overProvisioned"):
        print(f"{key:<28}{result[key]:>10}")
    print(json.dumps(result))
    return 0 if result["overProvisioned"] == 0 and result["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
