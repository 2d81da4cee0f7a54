"""`make demo-desktop` (after `make demo`): real users on real remote desktops.

Two session hosts on the demo cluster: ``xrdp-1``, an xrdp host in a network namespace on
the demo's bridge with its agent (``--sessions-from xrdp``, under the host's own
ServiceAccount token from the chart), and a pod-backed host: a real kubelet node joins the
cluster (``cluster.sh add-nodes``; the kubelet is built by ``tools.sh --nodes`` when
missing), the session-host image is built and imported into it, and the pool's
``hostTemplate`` makes a Pod of it (xrdp plus the agent as a sidecar, under its pod-bound
token) that takes sessions once its readiness probe passes. The pool ``xrdp-desks`` is
depth-first, two sessions a host, entitled to alice, bob and carol; Keycloak and the broker
are started as ``make demo-broker`` does, if not running. Each user signs in, asks the
broker to connect, and opens the ``.rdp`` file it hands back with FreeRDP on a virtual
display of their own; the agents report the sessions. The screenshots go to
``.cluster/demo-desktop/`` and a table shows who is on which host. Everything keeps running
for a look around; ``make demo-down`` (or ``hack/demo/desktop.py down``, then
``cluster.sh down``) stops it, and ``make demo-portal``'s single sign-on host ``xrdp-sso``
with the accounts its logon made. Needs root (network namespaces, local users, a kubelet).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The tests' support package (control plane, Keycloak, desktops) does the set-up here too.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hack/: the other demos

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from demo import broker as demo_broker
from demo import pool as demo
from support.agent_objects import apply_agent_objects, run_tool
from support.builders import session_host_pool
from support.desktop import (
    NetnsAgent,
    RdpClient,
    VirtualDisplay,
    XrdpHosts,
    pixel,
    why_no_client,
    why_not,
)
from support.identity import token_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / ".cluster"
WORK = CLUSTER / "demo-desktop"
NAMESPACE = demo_broker.NAMESPACE
POOL = "xrdp-desks"
#: The hosts in network namespaces; the pool's other host is a Pod on the real node.
HOSTS = ("xrdp-1",)
#: ``make demo-portal``'s single sign-on host, on the same bridge and in the same hosts'
#: directory (its agent is stopped here too, and the accounts its logon made removed).
SSO_HOSTS = ("xrdp-sso",)
NODE = "real-node-1"
#: Only the desktop Pod goes to the real node: the demo's other pools' pods (which tolerate
#: kwok's taint and run nothing) stay on the fake nodes.
NODE_TAINT = {"key": "hostpool.io/demo-desktops", "value": "true", "effect": "NoSchedule"}
#: Desktop passwords (the sign-in passwords are Keycloak's, in demo_broker.USERS).
USERS = {"alice": "alice-desk", "bob": "bob-desk", "carol": "carol-desk"}
GROUP, VERSION = demo_broker.GROUP, demo_broker.VERSION


def say(message: str) -> None:
    print(f"demo-desktop: {message}", flush=True)


def running(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def cluster_state() -> dict[str, str]:
    state = CLUSTER / "state.env"
    if not state.exists() or not (CLUSTER / "operator.pid").exists():
        raise SystemExit("demo-desktop: run `make demo` first (it starts the cluster and operator)")
    pairs = (line.split("=", 1) for line in state.read_text().splitlines() if "=" in line)
    return {key: value.strip('"') for key, value in pairs}


def bridge_of_cluster() -> str:
    bridge = cluster_state().get("HOSTS_BRIDGE", "")
    if not bridge:
        raise SystemExit(
            "demo-desktop: the demo's control plane serves on no hosts' bridge (it was started "
            "without root, or before this demo existed): `make demo-down && make demo` as root"
        )
    return bridge


def script(name: str, *args: str, what: str) -> str:
    """Run one of the project's scripts; its progress goes to the terminal, its last line of
    output is returned."""
    started = time.monotonic()
    proc = subprocess.run(
        [str(ROOT / "hack" / "cluster" / name), *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOSTPOOL_PYTHON": sys.executable},
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"demo-desktop: {what} failed (hack/cluster/{name}, see above)")
    say(f"{what}: {time.monotonic() - started:.1f} s")
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def real_node_problem() -> str | None:
    """Why the demo cluster cannot get a real kubelet node here (None: it has one, or can)."""
    if cluster_state().get("REAL_NODES", "0") != "0":
        return None
    check = subprocess.run(
        [str(ROOT / "hack" / "cluster" / "cluster.sh"), "check-nodes"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"no real node here: {check.stdout.strip()}" if check.returncode != 0 else None


def ensure_real_node(kubeconfig: Path) -> str:
    """A real kubelet node in the demo cluster (added when it has none) with the session-host
    image imported; returns the image's name."""
    if cluster_state().get("REAL_NODES", "0") == "0":
        problem = real_node_problem()
        if problem:
            raise SystemExit(f"demo-desktop: {problem}")
        script("tools.sh", "--control-plane", "--nodes", what="the kubelet and pause image")
        script("cluster.sh", "add-nodes", str(CLUSTER), "1", what=f"real node {NODE} added")
        kubectl = [str(CLUSTER / "bin" / "kubectl"), "--kubeconfig", str(kubeconfig)]
        taint = f"{NODE_TAINT['key']}={NODE_TAINT['value']}:{NODE_TAINT['effect']}"
        run_tool([*kubectl, "taint", "node", NODE, taint, "--overwrite"])
        if not running(CLUSTER / "operator.pid"):
            # It gives up its Lease when the API server is away longer than its renewal
            # deadline, and exits (a Deployment would restart it; here we do).
            say("the operator exited while the API server restarted; starting it again")
            demo.start_operator(kubeconfig)
    else:
        say(f"real node {NODE} is there")
    image = script("image.sh", "--session-host", what="the session-host image")
    script("cluster.sh", "import-image", str(CLUSTER), image, what=f"{image} imported")
    return image


def ensure_broker(kubeconfig: Path) -> None:
    if running(CLUSTER / "broker.pid") and running(CLUSTER / "keycloak.pid"):
        say("Keycloak and the broker are running (make demo-broker)")
        return
    issuer = demo_broker.start_keycloak()
    demo_broker.start_broker(kubeconfig, issuer)


def apply(objects: Any, plural: str, body: dict[str, Any]) -> None:
    try:
        objects.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, body)
    except ApiException as error:
        if error.status != 409:
            raise


def desktop_workload(image: str) -> dict[str, Any]:
    """The example pool's Pod (tests/builders.py: the image built here, small requests), the
    agent every 2 s, and only on the real node."""
    template: dict[str, Any] = session_host_pool(image, agent_interval=2)["spec"]["scaling"][
        "hostTemplate"
    ]
    pod = template["workload"]["spec"]
    pod["nodeSelector"] = {"type": "real"}
    pod["tolerations"] = [{**NODE_TAINT, "operator": "Equal"}]
    return template


def make_pool(objects: Any, core: Any) -> None:
    users = "".join(f"{user}:{password}\n" for user, password in USERS.items())
    secret = client.V1Secret(metadata=client.V1ObjectMeta(name="desktop-users"))
    secret.string_data = {"users": users}
    try:
        core.create_namespaced_secret(NAMESPACE, secret)
    except ApiException as error:
        if error.status != 409:
            raise
    apply(
        objects,
        "hostpools",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "HostPool",
            "metadata": {"name": POOL},
            "spec": {
                "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 2},
                "entitlements": {"users": list(USERS)},
            },
        },
    )
    for host in HOSTS:
        # No address: the agent reports the one clients reach it at.
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SessionHost",
            "metadata": {"name": host},
            "spec": {"poolRef": {"name": POOL}},
        }
        apply(objects, "sessionhosts", body)
    say(f"pool {POOL}: depth-first, 2 sessions a host, {', '.join(HOSTS)}, for {', '.join(USERS)}")


def let_pool_scale(objects: Any, image: str) -> None:
    """Scaling with the session-host Pod as the template, once the hosts of the pool take
    sessions (so that they count): a host more only when the pool is full."""
    scaling = {
        "minHosts": len(HOSTS),
        "maxHosts": len(HOSTS) + 1,
        "bufferSessions": 0,
        "hostReadyTimeoutSeconds": 300,
        "hostTemplate": desktop_workload(image),
    }
    objects.patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "hostpools", POOL, {"spec": {"scaling": scaling}}
    )
    say(f"pool {POOL} scales: one more host, a Pod on {NODE}, when its hosts are full")


def start_agents(
    kubeconfig: Path, hosts: XrdpHosts, names: Sequence[str] = HOSTS, *, logon: bool = False
) -> None:
    """The agents of hosts ``names`` (each under its own ServiceAccount's token); with
    ``logon`` (single sign-on hosts) each keeps the logon state its host's verifier writes,
    and so reports the host's refusals as Events."""
    bin_dir = CLUSTER / "bin"
    accounts = sorted({*HOSTS, *names})  # the chart's objects for every host of the demo
    values = {"agents.hosts": accounts, "agents.namespaces": [NAMESPACE]}
    apply_agent_objects(bin_dir, kubeconfig, "demo-desktop", NAMESPACE, values)
    kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig)]
    agents_dir = CLUSTER / "agents"
    agents_dir.mkdir(exist_ok=True)
    for host in names:
        pid_file = agents_dir / f"{host}.pid"
        if running(pid_file):
            continue
        account = f"hostpool-agent-{host}"
        for attempt in range(50):
            try:
                token = run_tool(
                    [*kubectl, "create", "token", account, "-n", NAMESPACE, "--duration", "24h"]
                ).strip()
                break
            except AssertionError:
                if attempt == 49:
                    raise
                time.sleep(0.2)
        config_path = token_kubeconfig(kubeconfig, token, WORK / f"{host}.kubeconfig")
        agent = NetnsAgent(
            hosts, host, NAMESPACE, config_path, CLUSTER / "logs" / f"agent-{host}.log", 2.0
        )
        state = ("--logon-state", str(hosts.directory / host / "logon")) if logon else ()
        pid_file.write_text(str(agent.start(*state)))
    more = ", --logon-state" if logon else ""
    say(f"agents on {', '.join(names)} (--sessions-from xrdp{more}, own ServiceAccount tokens)")


def wait_for(what: str, probe: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"demo-desktop: timed out waiting for {what}")


def pool_hosts(objects: Any, pool: str = POOL) -> list[dict[str, Any]]:
    found = objects.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "sessionhosts")
    return [h for h in found["items"] if h["spec"]["poolRef"]["name"] == pool]


#: Why a working host may take no new session now: it is full (its sessions are in use).
FULL = ("SessionLimitReached", "LogonStormThreshold")


def available(host: dict[str, Any], *, full_ok: bool = False) -> bool:
    """Whether the host takes sessions (``full_ok``: or would, but is full now)."""
    conditions = (host.get("status") or {}).get("conditions") or []
    return any(
        c["type"] == "Available" and (c["status"] == "True" or (full_ok and c["reason"] in FULL))
        for c in conditions
    )


def hosts_taking_sessions(
    objects: Any, *, full_ok: bool = False, pool: str = POOL
) -> dict[str, str]:
    """The hosts of ``pool`` with their addresses, once all of them take sessions (a Pod's
    after its readiness probe passed, the netns host's once its agent reported); with
    ``full_ok`` a host full of sessions counts too (``make demo-desktop``'s users on it)."""
    hosts = pool_hosts(objects, pool)
    found = {}
    for host in hosts:
        status = host.get("status") or {}
        address = status.get("address") or (status.get("agent") or {}).get("address")
        if address and available(host, full_ok=full_ok):
            found[host["metadata"]["name"]] = address
    return found if len(found) == len(hosts) else {}


def log_on(objects: Any, user: str) -> dict[str, Any]:
    password = next(p for name, p, _ in demo_broker.USERS if name == user)
    bearer = demo_broker.token(user, password)
    connect = f"/v1/namespaces/{NAMESPACE}/pools/{POOL}/connect"
    asked = time.monotonic()
    status, text = demo_broker.call("POST", connect, bearer)
    if status == 202:
        # No free slot: the request waits (the pool adds a host); asking again is safe, the
        # broker answers with the same request until it is placed.
        say(f"{user} waits: HTTP 202 {json.loads(text).get('reason', '')}")
        deadline = asked + 240
        while status == 202 and time.monotonic() < deadline:
            time.sleep(1.0)
            status, text = demo_broker.call("POST", connect, bearer)
    if status != 200:
        raise SystemExit(f"demo-desktop: connect for {user}: HTTP {status} {text}")
    answer: dict[str, Any] = json.loads(text)
    answer["waited"] = time.monotonic() - asked
    rdp = WORK / f"{user}.rdp"
    rdp.write_text(answer["rdpFile"], newline="")
    display = VirtualDisplay(WORK / f"xvfb-{user}.log").__enter__()
    (WORK / f"xvfb-{user}.pid").write_text(str(display.proc.pid if display.proc else ""))
    rdp_client = RdpClient(display, rdp, USERS[user], WORK / f"xfreerdp-{user}.log", WORK / "home")
    started = time.monotonic()
    rdp_client.start()
    assert rdp_client.proc is not None
    (WORK / f"xfreerdp-{user}.pid").write_text(str(rdp_client.proc.pid))

    def active() -> bool:
        obj = objects.get_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "sessionrequests", answer["request"]
        )
        return (obj.get("status") or {}).get("sessionState") == "Active"

    wait_for(f"{user}'s session to be Active", active)
    answer["activeAfter"] = time.monotonic() - started
    shot = WORK / f"{user}.png"
    time.sleep(1.0)  # the first frame drawn
    display.screenshot(shot)
    answer["screenshot"] = shot
    answer["display"] = display.name
    answer["colour"] = pixel(shot, 1000, 740)
    return answer


def up() -> int:
    if os.geteuid() != 0:
        raise SystemExit("demo-desktop: needs root (network namespaces, local users)")
    bridge = bridge_of_cluster()
    problem = why_not() or why_no_client()
    if problem:
        raise SystemExit(f"demo-desktop: {problem}")
    kubeconfig = CLUSTER / "kubeconfig"
    WORK.mkdir(parents=True, exist_ok=True)
    config.load_kube_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    objects = client.CustomObjectsApi(client.ApiClient())
    core = client.CoreV1Api(client.ApiClient())
    ensure_broker(kubeconfig)
    image = ensure_real_node(kubeconfig)
    hosts = XrdpHosts(WORK / "hosts", bridge)
    made = hosts.up(HOSTS, USERS)
    for host in made.values():
        say(f"xrdp host {host.name} at {host.address} (network namespace {host.netns})")
    make_pool(objects, core)
    start_agents(kubeconfig, hosts)
    wait_for(f"{', '.join(HOSTS)} to take sessions", lambda: hosts_taking_sessions(objects))
    let_pool_scale(objects, image)
    rows = []
    for user in USERS:
        say(f"{user} signs in with Keycloak, connects through the broker, opens the .rdp file")
        answer = log_on(objects, user)
        rows.append((user, answer))
    kinds = dict.fromkeys(HOSTS, "network namespace")
    for _, answer in rows:
        name = answer["host"]
        if name not in kinds:
            pod = core.read_namespaced_pod(name, NAMESPACE)
            kinds[name] = f"Pod on {pod.spec.node_name if pod.spec else '?'}"
    print()
    width = max(len(name) for name in kinds)
    print(
        f"  {'user':<7} {'host':<{width}} {'runs as':<19} {'address':<12} {'reason':<11} "
        f"{'waited':>7} {'Active after':>13}  screenshot"
    )
    for user, answer in rows:
        shot = os.path.relpath(answer["screenshot"], Path.cwd())
        print(
            f"  {user:<7} {answer['host']:<{width}} {kinds[answer['host']]:<19} "
            f"{answer['address']:<12} {answer['reason']:<11} {answer['waited']:>5.1f} s "
            f"{answer['activeAfter']:>11.1f} s  {shot}"
        )
    print(
        "\nThe sessions as the cluster sees them:\n"
        f"  .cluster/bin/kubectl --kubeconfig .cluster/kubeconfig -n {NAMESPACE} "
        "get sr,sh,pods -o wide\n"
        "Connect yourself (needs an X display): xfreerdp .cluster/demo-desktop/alice.rdp "
        f"/p:{USERS['alice']} /cert:ignore\n"
        "Log alice off by force: the broker's DELETE .../session (see make demo-broker)\n"
        "Tear down: make demo-down"
    )
    return 0


def down() -> int:
    """Stop the clients, displays, agents and hosts of this demo and of ``make demo-portal``
    (fine when none run); the hosts' script removes the users it made and the accounts the
    single sign-on host's logon made."""
    for pattern in ("xfreerdp-*.pid", "xvfb-*.pid"):
        for pid_file in WORK.glob(pattern):
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            pid_file.unlink(missing_ok=True)
    for host in (*HOSTS, *SSO_HOSTS):
        pid_file = CLUSTER / "agents" / f"{host}.pid"
        if pid_file.exists():
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            pid_file.unlink(missing_ok=True)
    if (WORK / "hosts").exists():
        subprocess.run(
            [str(ROOT / "hack" / "cluster" / "xrdp-hosts.sh"), "down", str(WORK / "hosts")],
            check=False,
        )
    return 0


if __name__ == "__main__":
    sys.exit(down() if sys.argv[1:] == ["down"] else up())
