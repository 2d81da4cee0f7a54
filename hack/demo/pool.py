"""`make demo`: a depth-first pool fills host by host, scales up with pod-backed hosts, and a
logon burst is placed.

Uses the cluster of HOSTPOOL_TEST_KUBECONFIG (or KUBECONFIG) when set, e.g. kind; otherwise
the local control plane from `make cluster-up` (.cluster/kubeconfig), whose pods run on kwok's
fake nodes. Installs the CRDs, starts the operator in the background, applies a pool of two
hosts (maxSessionLimit 5, scaling up to 6 hosts, each added host backed by a Pod) and creates
40 SessionRequests at once, then shows the pool filling as it happens and a summary: how long
each added host took from the scale-up decision to taking sessions. The operator keeps running
so you can look around afterwards.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# The tests' support package (control plane, Keycloak, desktops) does the set-up here too.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from support import builders

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / ".cluster"
NAMESPACE = "hostpool-demo"
POOL = "finance"
LIMIT = 5
MAX_HOSTS = 6
USERS = 40
GROUP, VERSION = "hostpool.io", "v1alpha1"

#: make demo-desktop's bridge for xrdp hosts (its own /24; the tests use 10.251.1.0/24).
DEMO_HOSTS_BRIDGE = "hpdemo0:10.251.0.1/24"


def say(message: str) -> None:
    print(f"demo: {message}", flush=True)


def kubeconfig() -> Path:
    for variable in ("HOSTPOOL_TEST_KUBECONFIG", "KUBECONFIG"):
        value = os.environ.get(variable, "").strip()
        if value:
            say(f"using the cluster of {variable}={value}")
            return Path(value).expanduser()
    say("starting the local control plane (make cluster-up)")
    env = dict(os.environ)
    if os.geteuid() == 0 and shutil.which("ip"):
        # Served on a bridge too, so that make demo-desktop's xrdp hosts (network namespaces
        # on that bridge) and their agents reach it.
        env.setdefault("HOSTPOOL_HOSTS_BRIDGE", DEMO_HOSTS_BRIDGE)
    subprocess.run(
        [str(ROOT / "hack" / "cluster" / "cluster.sh"), "up", str(CLUSTER)], check=True, env=env
    )
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
                "hostTemplate": {
                    "metadata": {"labels": {"tier": "autoscaled"}},
                    "workload": builders.desktop_pod(),
                },
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
    say(
        f"pool {POOL}: DepthFirst, maxSessionLimit {LIMIT}, 2 hosts, scaling up to {MAX_HOSTS} "
        "with a Pod behind each added host"
    )


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


def snapshot(objects: Any, core: Any) -> Snapshot:
    pool = objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "hostpools", POOL)
    hosts = objects.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "sessionhosts")
    requests = objects.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "sessionrequests")
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(NAMESPACE).items}
    return pool, hosts["items"], requests["items"], pods


def conditions_of(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}


def pod_state(pod: Any) -> str:
    if pod is None:
        return "-"
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    node = pod.spec.node_name or "unscheduled"
    return f"{pod.status.phase}{' Ready' if ready else ''} on {node}"


def render(snap: Snapshot, elapsed: float) -> str:
    pool, hosts, requests, pods = snap
    status = pool.get("status", {})
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
        + "  ".join(
            f"{t}={c['status']}({c['reason']})" for t, c in sorted(conditions_of(pool).items())
        ),
        "",
        f"  {'HOST':<16} {'SESSIONS':<{LIMIT + 10}} {'AVAILABLE':<28} {'ADDRESS':<20} POD",
    ]
    ordered = sorted(
        hosts, key=lambda h: (h["metadata"]["creationTimestamp"], h["metadata"]["name"])
    )
    for h in ordered:
        name = h["metadata"]["name"]
        sessions = h.get("status", {}).get("sessions", {}).get("total", 0)
        available = conditions_of(h).get("Available")
        state = f"{available['status']} ({available['reason']})" if available else "-"
        address = h.get("status", {}).get("address") or h["spec"].get("address") or "-"
        backed = "workloadRef" in h["spec"]
        bar = "#" * sessions + "." * max(0, LIMIT - sessions)
        lines.append(
            f"  {name:<16} [{bar}] {sessions:>2}/{LIMIT}   {state:<28} {address:<20} "
            f"{pod_state(pods.get(name)) if backed else '(no workload)'}"
        )
    lines.append("")
    lines.append("  requests: " + ", ".join(f"{k} {v}" for k, v in sorted(phases.items())))
    return "\n".join(lines)


Snapshot = tuple[dict[str, Any], list[Any], list[Any], dict[str, Any]]


def start_times(log_path: Path) -> list[float]:
    """Seconds from each scale-up decision to the new host's Pod being Ready, as the
    operator logs them (it also exports them: hostpool_host_start_seconds)."""
    pattern = re.compile(r"host \S+ ready ([0-9.]+)s after the scale-up decision")
    return sorted(float(m.group(1)) for m in pattern.finditer(log_path.read_text(errors="replace")))


def watch(objects: Any, core: Any, started: float) -> Snapshot:
    tty = sys.stdout.isatty()
    last = ""
    stable_since = time.monotonic()
    while True:
        snap = snapshot(objects, core)
        elapsed = time.monotonic() - started
        frame = render(snap, elapsed)
        body = frame.split("\n", 1)[1]
        if body != last:
            stable_since = time.monotonic()
            if tty:
                print("\033[2J\033[H" + frame, flush=True)
            else:
                print(frame + "\n", flush=True)
            last = body
        requests = snap[2]
        settled = all(r.get("status", {}).get("phase") in ("Assigned", "Pending") for r in requests)
        if settled and time.monotonic() - stable_since > 3:
            return snap
        if elapsed > 90:
            say("still changing after 90 s; stopping the display")
            return snap
        time.sleep(0.2)


# --------------------------------------------------------------------------- Horizon + agents

HZ_POOL = "engineering"
HZ_HOSTS = {"eng-01": 70, "eng-02": 20, "eng-03": 45}  # each agent's load script says this
HZ_USERS = 12


def start_agents(kubeconfig_path: Path) -> None:
    """One hostpool-agent per Horizon host, every 2 s, each with a load script that prints
    the number in .cluster/demo-load/<host> (edit it to move the load)."""
    loads, pids = CLUSTER / "demo-load", CLUSTER / "agents"
    loads.mkdir(parents=True, exist_ok=True)
    pids.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig_path)}
    for host, load in HZ_HOSTS.items():
        pid_file = pids / f"{host}.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
        (loads / host).write_text(f"{load}\n")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hostpool_operator.agent",
                "--host",
                host,
                "--namespace",
                NAMESPACE,
                "--interval",
                "2",
                "--load-script",
                f"cat {loads / host}",
            ],
            stdout=(CLUSTER / "logs" / f"agent-{host}.log").open("wb"),
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        pid_file.write_text(str(process.pid))
    say(f"{len(HZ_HOSTS)} host agents running (every 2 s; logs in .cluster/logs/agent-*.log)")


def apply_horizon_pool(objects: Any) -> None:
    objects.create_namespaced_custom_object(
        GROUP,
        VERSION,
        NAMESPACE,
        "hostpools",
        builders.pool(
            HZ_POOL,
            "Horizon",
            10,
            horizon={
                "loadIndex": {"useCustomScript": True},
                # Hosts under load index 50 make bucket 1 and share new logons; a host above
                # it gets none while bucket 1 has room.
                "connectionServer": {"rdsLoadIndexThreshold": 50, "minRdsServersInLbQueue": 1},
            },
        ),
    )
    for host in HZ_HOSTS:
        objects.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "sessionhosts", builders.host(host, HZ_POOL)
        )


def horizon_part(objects: Any, kubeconfig_path: Path) -> None:
    print()
    say(f"a Horizon pool driven by live agents: {HZ_POOL}, load index = each agent's load script")
    apply_horizon_pool(objects)
    start_agents(kubeconfig_path)
    deadline = time.monotonic() + 30
    hosts: list[Any] = []
    while time.monotonic() < deadline:
        hosts = [
            h
            for h in objects.list_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, "sessionhosts"
            )["items"]
            if h["spec"]["poolRef"]["name"] == HZ_POOL
        ]
        if len(hosts) == len(HZ_HOSTS) and all(
            h.get("status", {}).get("loadIndex") == HZ_HOSTS[h["metadata"]["name"]] for h in hosts
        ):
            break
        time.sleep(0.3)
    else:
        say("the agents' load did not reach every host within 30 s")
    for i in range(1, HZ_USERS + 1):
        objects.create_namespaced_custom_object(
            GROUP,
            VERSION,
            NAMESPACE,
            "sessionrequests",
            builders.request(f"eng-logon-{i:02d}", HZ_POOL, f"dev{i:02d}@corp.example"),
        )
    say(f"{HZ_USERS} developers logged on")
    time.sleep(3)
    requests = [
        r
        for r in objects.list_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "sessionrequests"
        )["items"]
        if r["spec"]["poolRef"]["name"] == HZ_POOL
    ]
    hosts = [
        h
        for h in objects.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "sessionhosts")[
            "items"
        ]
        if h["spec"]["poolRef"]["name"] == HZ_POOL
    ]
    placed: dict[str, int] = {}
    for r in requests:
        host = r.get("status", {}).get("host")
        if host:
            placed[host] = placed.get(host, 0) + 1
    print(f"  {'HOST':<8} {'AGENT LOAD':>10} {'LOAD INDEX':>10} {'BUCKET':>6} {'SESSIONS':>8}")
    for h in sorted(hosts, key=lambda h: h["metadata"]["name"]):
        name = h["metadata"]["name"]
        st = h.get("status", {})
        print(
            f"  {name:<8} {st.get('metrics', {}).get('customLoadValue', '-')!s:>10} "
            f"{st.get('loadIndex', '-')!s:>10} {st.get('bucket', '-')!s:>6} "
            f"{placed.get(name, 0):>8}"
        )
    print(
        "  (hosts under load index 50 share the logons; eng-01 at 70 gets none while they "
        "have room)\n"
        "  Move the load: echo 90 > .cluster/demo-load/eng-02   (its agent reports it within 2 s)"
    )


def main() -> int:
    path = kubeconfig()
    config.load_kube_config(str(path))  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    install_crds(client.ApiextensionsV1Api(api))
    core = client.CoreV1Api(api)
    fresh_namespace(core)
    start_operator(path)
    objects = client.CustomObjectsApi(api)
    apply_pool(objects)
    started = time.monotonic()
    logon_burst(objects)
    pool, hosts, requests, pods = watch(objects, core, started)
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
    backed = [p for name, p in pods.items() if any(h["metadata"]["name"] == name for h in added)]
    print(f"  pods behind the added hosts: {len(backed)} ({len(added)} hosts)")
    durations = start_times(CLUSTER / "logs" / "operator.log")
    if durations:
        print(
            "  scale-up decision to host taking sessions (host and pod created, pod scheduled "
            f"and Ready): median {durations[len(durations) // 2]:.2f} s, "
            f"max {durations[-1]:.2f} s over {len(durations)} host(s)"
        )
    print(f"  hosts over maxSessionLimit: {len(over)}")
    limited = conditions_of(pool).get("ScalingLimited")
    if limited and limited["status"] == "True":
        print(f"  ScalingLimited: {limited['message']}")
    horizon_part(objects, path)
    kc = os.path.relpath(path, Path.cwd()) if str(path).startswith(str(ROOT)) else str(path)
    print(
        "\nLook around (the operator and the agents are still running):\n"
        f"  export KUBECONFIG={kc} PATH=$PWD/.cluster/bin:$PATH\n"
        f"  kubectl get hp,sh,sr,pods -n {NAMESPACE} -o wide\n"
        f"  kubectl describe hp {POOL} -n {NAMESPACE}\n"
        f"  kubectl get sh -n {NAMESPACE} {' '.join(HZ_HOSTS)} -o wide   (the agents' load)\n"
        f"  kubectl delete sr -n {NAMESPACE} logon-01 logon-02\n"
        "      (two sessions end: two waiting users get their slots)\n"
        f"  kubectl delete pod -n {NAMESPACE} <an added host's pod>\n"
        "      (its sessions fail with HostLost; the operator starts the pod again)\n"
        "  curl -s 127.0.0.1:9090/metrics | grep ^hostpool_\n"
        "  tail -f .cluster/logs/operator.log\n"
        "Tear down: make demo-down   (stops the operator, the agents and the control plane)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
