"""`make bench-update`: a new image rolled onto a busy pool, with WaitForLogoff and again with
ForceLogoff.

A depth-first pool of BENCH_HOSTS pod-backed hosts (kwok's nodes run the pods) with
BENCH_LIMIT sessions each is filled to 90 % by a logon storm; then, while users keep logging
off (the longest-connected first, BENCH_CHURN a second) and as many log on, the host
template's image changes. Measured until the update is Complete: the time it took, logons
that waited or failed while it ran (the update must refuse none), the most hosts out of
service at once (wanted minus those whose Pod is Ready and which are not being deleted or
drained, sampled from the API: at most maxUnavailable), the sessions the update ended
(WaitForLogoff: none), the most hosts at once (at most wanted + maxSurge), and the API
server's writes during the update per host replaced, less the bench's own logons and
logoffs. The last line of stdout is one JSON object.

Environment: BENCH_HOSTS (default 50), BENCH_LIMIT (default 10), BENCH_CHURN (logoffs and
logons a second, default 5); KUBECONFIG to use an existing cluster. kwok's pods run no agent:
the bench carries out a forced logoff at its deadline as a host's agent would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "hack"))

from bench import local_cluster
from bench.hosts import fresh_namespace, items, start_operator
from support import builders

CLUSTER = ROOT / ".cluster" / "bench-update"
GROUP, VERSION = "hostpool.io", "v1alpha1"
NAMESPACE = "bench-hosts"  # bench.hosts' helpers work in this namespace
POOL = "desktops"
MANAGED = "hostpool.io/managed-by"
REVISION = "hostpool.io/template-revision"
SURGE, UNAVAILABLE = 2, 1
#: The longest an update may take before the arm gives up.
UPDATE_TIMEOUT = 600.0
#: The revision-ignoring arm runs this many times the preferring arm's time at most.
SLOWER = 4.0
WRITES = re.compile(r'^apiserver_request_total\{.*verb="(POST|PUT|PATCH|DELETE)".*\} (\S+)$')


def log(message: str) -> None:
    print(f"bench-update: {message}", file=sys.stderr, flush=True)


class Churn(threading.Thread):
    """Users log off (the longest-connected first) and as many log on, ``rate`` a second;
    counts the logons that were not placed within ``patience`` seconds."""

    def __init__(self, objects: Any, rate: float, first: int) -> None:
        super().__init__(daemon=True)
        self.objects = objects
        self.rate = rate
        self.next = first
        self.stop = threading.Event()
        self.logons: dict[str, float] = {}
        self.logged_off: set[str] = set()
        #: Sessions logged off at their logoff's deadline, as the host's agent would.
        self.forced: set[str] = set()

    def carry_out_logoffs(self, requests: list[dict[str, Any]]) -> None:
        """The agent's part (there is none on kwok's pods): a session whose status.logoff
        deadline has come is logged off, and its request goes."""
        now = datetime.now(UTC)
        for request in requests:
            logoff = (request.get("status") or {}).get("logoff") or {}
            deadline = logoff.get("deadline")
            name = request["metadata"]["name"]
            if deadline and name not in self.forced and _when(deadline) <= now:
                self.objects.delete_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, "sessionrequests", name
                )
                self.forced.add(name)

    def run(self) -> None:
        while not self.stop.wait(1.0):
            requests = items(self.objects, "sessionrequests")
            self.carry_out_logoffs(requests)
            assigned = sorted(
                (r for r in requests if _phase(r) == "Assigned" and r["metadata"]["name"]
                 not in self.forced),
                key=lambda r: r["status"].get("assignedAt", ""),
            )  # fmt: skip
            for request in assigned[: int(self.rate)]:
                name = request["metadata"]["name"]
                self.objects.delete_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, "sessionrequests", name
                )
                self.logged_off.add(name)
            for _ in range(int(self.rate)):
                name = logon(self.objects, self.next)
                self.logons[name] = time.monotonic()
                self.next += 1


def _when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _phase(request: dict[str, Any]) -> str | None:
    phase: str | None = (request.get("status") or {}).get("phase")
    return phase


def logon(objects: Any, i: int) -> str:
    name = f"logon-{i:05d}"
    objects.create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "sessionrequests",
        {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "SessionRequest",
            "metadata": {"name": name},
            "spec": {"poolRef": {"name": POOL}, "user": f"user{i:05d}"},
        },
    )  # fmt: skip
    return name


def api_writes(path: Path) -> float:
    """The API server's write requests so far (apiserver_request_total, every resource)."""
    out = subprocess.run(
        [str(local_cluster.KUBECTL), "--kubeconfig", str(path), "get", "--raw", "/metrics"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return sum(float(m.group(2)) for line in out.splitlines() if (m := WRITES.match(line)))


class Census(threading.Thread):
    """The most hosts at once, and the fewest serving (Pod Ready, host not deleted/drained)."""

    def __init__(self, objects: Any, core: Any) -> None:
        super().__init__(daemon=True)
        self.objects, self.core = objects, core
        self.most = 0
        self.fewest_serving: int | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.25):
            hosts = {
                h["metadata"]["name"]: h
                for h in items(self.objects, "sessionhosts")
                if (h["metadata"].get("labels") or {}).get(MANAGED) == "hostpool-operator"
            }
            ready = {
                p.metadata.name
                for p in self.core.list_namespaced_pod(NAMESPACE).items
                if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            }
            serving = sum(
                1
                for name, h in hosts.items()
                if name in ready
                and not h["metadata"].get("deletionTimestamp")
                and not h["spec"].get("drainMode")
            )
            self.most = max(self.most, len(hosts))
            if self.fewest_serving is None or serving < self.fewest_serving:
                self.fewest_serving = serving


def arm(
    path: Path,
    strategy: str,
    shape: tuple[int, int, float],
    *,
    placement: str = "prefer-updated",
    timeout: float = UPDATE_TIMEOUT,
) -> dict[str, Any]:
    """One update of a full pool with ``strategy`` (and the operator's ``placement``): its
    figures. ``shape``: hosts, sessions a host, logoffs and logons a second."""
    hosts, limit, _ = shape
    config.load_kube_config(str(path))  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    core, objects = client.CoreV1Api(api), client.CustomObjectsApi(api)
    fresh_namespace(core)

    def template(tag: str) -> dict[str, Any]:
        pod = builders.desktop_pod()
        pod["spec"]["containers"][0]["image"] = f"registry.k8s.io/pause:{tag}"
        return {"workload": pod}

    scaling = {
        "minHosts": hosts, "maxHosts": hosts + SURGE + 5, "scaleDownDelaySeconds": 3600,
        "hostTemplate": template("3.10"),
    }  # fmt: skip
    update = {
        "strategy": strategy, "maxSurge": SURGE, "maxUnavailable": UNAVAILABLE,
        "logoffDelayMinutes": 0,
    }  # fmt: skip
    objects.create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "hostpools",
        builders.pool(POOL, "DepthFirst", limit, scaling=scaling, update=update),
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        operator = start_operator(
            path, Path(tmp) / "operator.log", ("--update-placement", placement)
        )
        try:
            figures = _measure(path, objects, core, scaling, shape, strategy, timeout)
            return {"placement": placement, **figures}
        finally:
            operator.terminate()
            operator.wait(30)


def _measure(
    path: Path,
    objects: Any,
    core: Any,
    scaling: dict[str, Any],
    shape: tuple[int, int, float],
    strategy: str,
    timeout: float,
) -> dict[str, Any]:
    hosts, limit, churn_rate = shape
    users = hosts * limit * 9 // 10
    log(f"{strategy}: {users} logons at once onto {hosts} hosts of {limit}")
    with ThreadPoolExecutor(max_workers=16) as creators:
        list(creators.map(lambda i: logon(objects, i), range(users)))
    deadline = time.monotonic() + 300
    while sum(1 for r in items(objects, "sessionrequests") if _phase(r) == "Assigned") < users:
        if time.monotonic() > deadline:
            raise SystemExit(f"bench-update: {users} logons were not all placed in 300 s")
        time.sleep(0.5)
    first = {h["metadata"]["name"] for h in items(objects, "sessionhosts")}
    sessions_before = {r["metadata"]["name"] for r in items(objects, "sessionrequests")}
    churn = Churn(objects, churn_rate, users)
    census = Census(objects, core)
    writes_before = api_writes(path)
    churn.start()
    census.start()
    log(f"{strategy}: the image changes; {churn_rate:g} logoffs and logons a second")
    scaling["hostTemplate"]["workload"]["spec"]["containers"][0]["image"] = (
        "registry.k8s.io/pause:3.9"
    )
    started = time.monotonic()
    objects.patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "hostpools", POOL, {"spec": {"scaling": scaling}}
    )
    phase = None
    while time.monotonic() - started < timeout:
        pool = objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "hostpools", POOL)
        update = (pool.get("status") or {}).get("update") or {}
        phase = update.get("phase")
        if phase == "Failed" or (phase == "Complete" and update.get("outdatedHosts") == 0):
            break
        time.sleep(0.5)
    took = time.monotonic() - started
    churn.stop.set()
    census.stop.set()
    churn.join(10)
    census.join(10)
    bench_writes = len(churn.logged_off) + len(churn.forced) + len(churn.logons)
    writes = api_writes(path) - writes_before - bench_writes
    time.sleep(2)
    requests = items(objects, "sessionrequests")
    phases = Counter(_phase(r) for r in requests)
    waiting = [r for r in requests if _phase(r) == "Pending"]
    now_hosts = {h["metadata"]["name"] for h in items(objects, "sessionhosts")}
    replaced = len(first - now_hosts)
    # Sessions gone that no user logged off, or failed: ended by the update.
    gone = (
        (sessions_before | set(churn.logons))
        - churn.logged_off
        - {r["metadata"]["name"] for r in requests}
    )
    ended = len(gone) + phases["Failed"]
    return {
        "strategy": strategy,
        "phase": phase,
        "completedSeconds": round(took, 1) if phase == "Complete" else None,
        "ranSeconds": round(took, 1),
        "outdatedAtEnd": update.get("outdatedHosts"),
        "logonsDuring": len(churn.logons),
        "logonsWaitingAtEnd": len(waiting),
        "logonsFailed": phases["Failed"],
        "mostOutOfService": max(0, hosts - (census.fewest_serving or 0)),
        "maxUnavailable": UNAVAILABLE,
        "mostHosts": census.most,
        "hostsBound": hosts + SURGE,
        "sessionsEndedByUpdate": ended,
        "hostsReplaced": replaced,
        "apiWritesPerHostReplaced": round(writes / replaced, 1) if replaced else None,
    }


def preference_speedup(prefer: dict[str, Any], ignore: dict[str, Any]) -> str:
    """How many times sooner the update completes with updated hosts first: a figure, or
    ">=N" when the revision-ignoring arm had not completed when it was stopped."""
    if prefer["completedSeconds"] is None:
        return "n/a"
    ratio = ignore["ranSeconds"] / prefer["completedSeconds"]
    return f"{ratio:.1f}" if ignore["completedSeconds"] is not None else f">={ratio:.1f}"


def main() -> int:
    hosts = int(os.environ.get("BENCH_HOSTS", "50"))
    limit = int(os.environ.get("BENCH_LIMIT", "10"))
    churn = float(os.environ.get("BENCH_CHURN", "5"))
    shape = (hosts, limit, churn)
    with local_cluster.bench_cluster(CLUSTER, log) as cluster:
        results = [arm(cluster.kubeconfig, s, shape) for s in ("WaitForLogoff", "ForceLogoff")]
        # The same WaitForLogoff update with placement that ignores revisions: new sessions
        # keep filling outdated hosts. Given SLOWER x the first arm's time at most (a
        # shortfall then is a lower bound of the ratio).
        took = results[0]["completedSeconds"] or UPDATE_TIMEOUT
        results.append(
            arm(cluster.kubeconfig, "WaitForLogoff", shape, placement="ignore-revisions",
                timeout=max(SLOWER * took, 60.0))
        )  # fmt: skip
    for result in results:
        print(f"\n{result['strategy']}, placement {result['placement']}")
        for key, value in result.items():
            if key not in ("strategy", "placement"):
                print(f"  {key:<28}{value}")
    speedup = preference_speedup(results[0], results[2])
    print(f"\nupdated hosts first completes the update {speedup}x sooner")
    print(json.dumps({
        "hosts": hosts, "limit": limit, "churnPerSecond": churn, "arms": results,
        "preferUpdatedSpeedup": speedup,
    }))  # fmt: skip
    wait = results[0]
    ok = wait["phase"] == "Complete" and wait["sessionsEndedByUpdate"] == 0
    return 0 if ok and all(r["mostOutOfService"] <= UNAVAILABLE for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
