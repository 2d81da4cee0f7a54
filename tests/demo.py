"""`make demo`: a depth-first pool fills host by host, scales up, and a logon burst is placed.

Uses the cluster of HOSTPOOL_TEST_KUBECONFIG (or KUBECONFIG) when set, e.g. kind; otherwise
the local control plane from `make cluster-up` (.cluster/kubeconfig). Installs the CRDs,
starts the operator in the background, applies a pool of two hosts (maxSessionLimit 5,
scaling up to 6 hosts) and creates 40 SessionRequests at once, then shows the pool filling
as it happens and a summary. The operator keeps running so you can look around afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

import builders

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / ".cluster"
NAMESPACE = "hostpool-demo"
POOL = "finance"
LIMIT = 5
MAX_HOSTS = 6
USERS = 40
GROUP, VERSION = "hostpool.io", "v1alpha1"


def say(message: str) -> None:
    print(f"demo: {message}", flush=True)


def kubeconfig() -> Path:
    for variable in ("HOSTPOOL_TEST_KUBECONFIG", "KUBECONFIG"):
        value = os.environ.get(variable, "").strip()
        if value:
            say(f"using the cluster of {variable}={value}")
            return Path(value).expanduser()
    say("starting the local control plane (make cluster-up)")
    subprocess.run([str(ROOT / "tests" / "cluster" / "cluster.sh"), "up", str(CLUSTER)], check=True)
    return CLUSTER / "kubeconfig"


def install_crds(api: Any) -> None:
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        try:
            current = api.read_custom_resource_definition(name)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            api.replace_custom_resource_definition(name, body)
        except ApiException as error:
            if error.status != 404:
                raise
            api.create_custom_resource_definition(body)
    for _ in range(100):
        crds = api.list_custom_resource_definition().items
        established = {
            c.metadata.name
            for c in crds
            if c.spec.group == GROUP
            and any(
                x.type == "Established" and x.status == "True" for x in c.status.conditions or []
            )
        }
        if len(established) >= 3:
            say("CRDs installed: " + ", ".join(sorted(established)))
            return
        time.sleep(0.2)
    raise SystemExit("demo: the CRDs did not become Established")


def fresh_namespace(core: Any) -> None:
    try:
        core.delete_namespace(NAMESPACE)
        say(f"removing the previous {NAMESPACE} namespace")
    except ApiException as error:
        if error.status != 404:
            raise
    for _ in range(300):
        try:
            core.read_namespace(NAMESPACE)
        except ApiException as error:
            if error.status == 404:
                break
        time.sleep(0.2)
    core.create_namespace({"metadata": {"name": NAMESPACE}})


def start_operator(kubeconfig_path: Path) -> subprocess.Popen[bytes]:
    (CLUSTER / "logs").mkdir(parents=True, exist_ok=True)
    pid_file = CLUSTER / "operator.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
            time.sleep(1)
        except (ProcessLookupError, ValueError):
            pass
    log_path = CLUSTER / "logs" / "operator.log"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig_path)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hostpool_operator",
            "run",
            "--namespace",
            NAMESPACE,
            "--status-interval",
            "0.5",
            "--metrics-address",
            "127.0.0.1:9090",
            "--liveness",
            "http://127.0.0.1:8081/healthz",
        ],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    pid_file.write_text(str(process.pid))
    for _ in range(150):
        if "hostpool-operator started" in log_path.read_text(errors="replace"):
            say(f"operator running (pid {process.pid}); log: .cluster/logs/operator.log")
            return process
        if process.poll() is not None:
            raise SystemExit("demo: the operator exited:\n" + log_path.read_text()[-3000:])
        time.sleep(0.2)
    raise SystemExit("demo: the operator did not start:\n" + log_path.read_text()[-3000:])


def apply_pool(objects: Any) -> None:
    objects.create_namespaced_custom_object(
        GROUP,
        VERSION,
        NAMESPACE,
        "hostpools",
        builders.pool(
            POOL,
            "DepthFirst",
            LIMIT,
            scaling={
                "minHosts": 0,
                "maxHosts": MAX_HOSTS,
                "scaleDownDelaySeconds": 120,
                "hostTemplate": {"metadata": {"labels": {"tier": "autoscaled"}}},
            },
        ),
    )
    for name in ("rds-01", "rds-02"):
        objects.create_namespaced_custom_object(
            GROUP,
            VERSION,
            NAMESPACE,
            "sessionhosts",
            builders.host(name, POOL, address=f"{name}.corp.example"),
        )
        time.sleep(1.1)  # distinct creation seconds: a visible query order for the demo
    say(f"pool {POOL}: DepthFirst, maxSessionLimit {LIMIT}, 2 hosts, scaling up to {MAX_HOSTS}")


def logon_burst(objects: Any) -> None:
    def logon(i: int) -> None:
        objects.create_namespaced_custom_object(
            GROUP,
            VERSION,
            NAMESPACE,
            "sessionrequests",
            builders.request(f"logon-{i:02d}", POOL, f"user{i:02d}@corp.example"),
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(logon, range(1, USERS + 1)))
    say(f"{USERS} users logged on at once")


def snapshot(objects: Any) -> Snapshot:
    pool = objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "hostpools", POOL)
    hosts = objects.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "sessionhosts")
    requests = objects.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "sessionrequests")
    return pool, hosts["items"], requests["items"]


def render(pool: dict[str, Any], hosts: list[Any], requests: list[Any], elapsed: float) -> str:
    status = pool.get("status", {})
    conditions = {c["type"]: c for c in status.get("conditions", [])}
    phases: dict[str, int] = {}
    for r in requests:
        key = r.get("status", {}).get("phase", "New")
        if key == "Pending":
            key = f"Pending/{r['status'].get('reason')}"
        phases[key] = phases.get(key, 0) + 1
    lines = [
        f"t={elapsed:5.1f}s  pool {POOL}: hosts {status.get('hosts', {}).get('total', '?')}  "
        f"sessions {status.get('sessions', {}).get('total', '?')}  "
        f"free {status.get('capacity', {}).get('free', '?')}  "
        f"pending {status.get('pendingRequests', '?')}",
        "  conditions: "
        + "  ".join(f"{t}={c['status']}({c['reason']})" for t, c in sorted(conditions.items())),
        "",
        f"  {'HOST':<16} {'SESSIONS':<{LIMIT + 10}} AVAILABLE",
    ]
    ordered = sorted(
        hosts, key=lambda h: (h["metadata"]["creationTimestamp"], h["metadata"]["name"])
    )
    for h in ordered:
        sessions = h.get("status", {}).get("sessions", {}).get("total", 0)
        host_conditions = {c["type"]: c for c in h.get("status", {}).get("conditions", [])}
        available = host_conditions.get("Available")
        state = f"{available['status']} ({available['reason']})" if available else "-"
        bar = "#" * sessions + "." * max(0, LIMIT - sessions)
        lines.append(f"  {h['metadata']['name']:<16} [{bar}] {sessions:>2}/{LIMIT}   {state}")
    lines.append("")
    lines.append("  requests: " + ", ".join(f"{k} {v}" for k, v in sorted(phases.items())))
    return "\n".join(lines)


Snapshot = tuple[dict[str, Any], list[Any], list[Any]]


def watch(objects: Any, started: float) -> Snapshot:
    tty = sys.stdout.isatty()
    last = ""
    stable_since = time.monotonic()
    while True:
        pool, hosts, requests = snapshot(objects)
        elapsed = time.monotonic() - started
        frame = render(pool, hosts, requests, elapsed)
        body = frame.split("\n", 1)[1]
        if body != last:
            stable_since = time.monotonic()
            if tty:
                print("\033[2J\033[H" + frame, flush=True)
            else:
                print(frame + "\n", flush=True)
            last = body
        settled = all(r.get("status", {}).get("phase") in ("Assigned", "Pending") for r in requests)
        if settled and time.monotonic() - stable_since > 3:
            return pool, hosts, requests
        if elapsed > 90:
            say("still changing after 90 s; stopping the display")
            return pool, hosts, requests
        time.sleep(0.3)


def main() -> int:
    path = kubeconfig()
    config.load_kube_config(str(path))  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    install_crds(client.ApiextensionsV1Api(api))
    fresh_namespace(client.CoreV1Api(api))
    start_operator(path)
    objects = client.CustomObjectsApi(api)
    apply_pool(objects)
    started = time.monotonic()
    logon_burst(objects)
    pool, hosts, requests = watch(objects, started)
    assigned = [r for r in requests if r.get("status", {}).get("phase") == "Assigned"]
    waiting = [r for r in requests if r.get("status", {}).get("phase") == "Pending"]
    added = [h for h in hosts if h["metadata"].get("labels", {}).get("hostpool.io/managed-by")]
    over = [
        h["metadata"]["name"]
        for h in hosts
        if h.get("status", {}).get("sessions", {}).get("total", 0) > LIMIT
    ]
    print()
    say("summary")
    print(
        f"  {len(assigned)} of {USERS} logons placed; {len(waiting)} waiting "
        f"({', '.join(sorted({r['status'].get('reason', '?') for r in waiting})) or '-'})"
    )
    print(f"  hosts: 2 created by you, {len(added)} added by the operator (maxHosts {MAX_HOSTS})")
    print(f"  hosts over maxSessionLimit: {len(over)}")
    conditions = {c["type"]: c for c in pool.get("status", {}).get("conditions", [])}
    limited = conditions.get("ScalingLimited")
    if limited and limited["status"] == "True":
        print(f"  ScalingLimited: {limited['message']}")
    kc = os.path.relpath(path, Path.cwd()) if str(path).startswith(str(ROOT)) else str(path)
    print(
        "\nLook around (the operator is still running):\n"
        f"  export KUBECONFIG={kc} PATH=$PWD/.cluster/bin:$PATH\n"
        f"  kubectl get hp,sh,sr -n {NAMESPACE}\n"
        f"  kubectl describe hp {POOL} -n {NAMESPACE}\n"
        f"  kubectl delete sr -n {NAMESPACE} logon-01 logon-02\n"
        "      (two sessions end: two waiting users get their slots)\n"
        "  curl -s 127.0.0.1:9090/metrics | grep ^hostpool_\n"
        "  tail -f .cluster/logs/operator.log\n"
        "Tear down: make demo-down   (stops the operator and the local control plane)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
