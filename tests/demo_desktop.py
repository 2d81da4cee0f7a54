"""`make demo-desktop` (after `make demo`): real users on real remote desktops.

Two xrdp session hosts as network namespaces on the demo cluster's bridge, each with its
agent (``--sessions-from xrdp``, under the host's own ServiceAccount token from the chart);
a depth-first pool ``xrdp-desks`` of them, two sessions a host, entitled to alice, bob and
carol; Keycloak and the broker (started as ``make demo-broker`` does, if not running). Each
user signs in, asks the broker to connect, and opens the ``.rdp`` file it hands back with
FreeRDP on a virtual display of their own; the agents report the sessions. The screenshots
go to ``.cluster/demo-desktop/`` and a table shows who is on which host. Everything keeps
running for a look around; ``make demo-down`` (or ``tests/demo_desktop.py down``) stops it.
Needs root (network namespaces, local users).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

import demo_broker
from desktop import (
    DesktopError,
    NetnsAgent,
    RdpClient,
    VirtualDisplay,
    XrdpHosts,
    install_client,
    pixel,
    why_not,
)
from e2e.agent_objects import apply_agent_objects, run_tool
from kube import token_kubeconfig

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / ".cluster"
WORK = CLUSTER / "demo-desktop"
NAMESPACE = demo_broker.NAMESPACE
POOL = "xrdp-desks"
HOSTS = ("xrdp-1", "xrdp-2")
#: Desktop passwords (the sign-in passwords are Keycloak's, in demo_broker.USERS).
USERS = {"alice": "alice-desk", "bob": "bob-desk", "carol": "carol-desk"}
GROUP, VERSION = demo_broker.GROUP, demo_broker.VERSION
FIRST_DISPLAY = 81


def say(message: str) -> None:
    print(f"demo-desktop: {message}", flush=True)


def running(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def bridge_of_cluster() -> str:
    state = CLUSTER / "state.env"
    if not state.exists() or not (CLUSTER / "operator.pid").exists():
        raise SystemExit("demo-desktop: run `make demo` first (it starts the cluster and operator)")
    values = dict(line.split("=", 1) for line in state.read_text().splitlines() if "=" in line)
    bridge = values.get("HOSTS_BRIDGE", "").strip('"')
    if not bridge:
        raise SystemExit(
            "demo-desktop: the demo's control plane serves on no hosts' bridge (it was started "
            "without root, or before this demo existed): `make demo-down && make demo` as root"
        )
    return bridge


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


def make_pool(objects: Any) -> None:
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
    say(f"pool {POOL}: depth-first, hosts {', '.join(HOSTS)} x 2 sessions, for {', '.join(USERS)}")


def start_agents(kubeconfig: Path, hosts: XrdpHosts) -> None:
    bin_dir = CLUSTER / "bin"
    values = {"agents.hosts": list(HOSTS), "agents.namespaces": [NAMESPACE]}
    apply_agent_objects(bin_dir, kubeconfig, "demo-desktop", NAMESPACE, values)
    kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig)]
    agents_dir = CLUSTER / "agents"
    agents_dir.mkdir(exist_ok=True)
    for host in HOSTS:
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
        pid_file.write_text(str(agent.start()))
    say(f"agents on {', '.join(HOSTS)} (--sessions-from xrdp, own ServiceAccount tokens)")


def wait_for(what: str, probe: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"demo-desktop: timed out waiting for {what}")


def addresses(objects: Any) -> dict[str, str]:
    found = {}
    for host in HOSTS:
        obj = objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "sessionhosts", host)
        address = ((obj.get("status") or {}).get("agent") or {}).get("address")
        if address:
            found[host] = address
    return found if len(found) == len(HOSTS) else {}


def log_on(objects: Any, user: str, index: int) -> dict[str, Any]:
    password = next(p for name, p, _ in demo_broker.USERS if name == user)
    bearer = demo_broker.token(user, password)
    connect = f"/v1/namespaces/{NAMESPACE}/pools/{POOL}/connect"
    status, text = demo_broker.call("POST", connect, bearer)
    if status != 200:
        raise SystemExit(f"demo-desktop: connect for {user}: HTTP {status} {text}")
    answer: dict[str, Any] = json.loads(text)
    rdp = WORK / f"{user}.rdp"
    rdp.write_text(answer["rdpFile"], newline="")
    display = VirtualDisplay(FIRST_DISPLAY + index, WORK / f"xvfb-{user}.log").__enter__()
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
    problem = why_not()
    if problem:
        raise SystemExit(f"demo-desktop: {problem}")
    try:
        install_client()
    except DesktopError as error:
        raise SystemExit(f"demo-desktop: {error}") from None
    kubeconfig = CLUSTER / "kubeconfig"
    WORK.mkdir(parents=True, exist_ok=True)
    config.load_kube_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    objects = client.CustomObjectsApi(client.ApiClient())
    ensure_broker(kubeconfig)
    hosts = XrdpHosts(WORK / "hosts", bridge)
    made = hosts.up(HOSTS, USERS)
    for host in made.values():
        say(f"xrdp host {host.name} at {host.address} (network namespace {host.netns})")
    make_pool(objects)
    start_agents(kubeconfig, hosts)
    wait_for("the agents to report their addresses", lambda: addresses(objects))
    rows = []
    for index, user in enumerate(USERS):
        say(f"{user} signs in with Keycloak, connects through the broker, opens the .rdp file")
        answer = log_on(objects, user, index)
        rows.append((user, answer))
    print()
    print(
        f"  {'user':<7} {'host':<8} {'address':<13} {'reason':<11} {'Active after':<13} screenshot"
    )
    for user, answer in rows:
        shot = os.path.relpath(answer["screenshot"], Path.cwd())
        print(
            f"  {user:<7} {answer['host']:<8} {answer['address']:<13} {answer['reason']:<11} "
            f"{answer['activeAfter']:>5.1f} s       {shot}"
        )
    print(
        "\nThe sessions as the cluster sees them:\n"
        f"  .cluster/bin/kubectl --kubeconfig .cluster/kubeconfig -n {NAMESPACE} "
        "get sr,sh -o wide\n"
        "Connect yourself (needs an X display): xfreerdp .cluster/demo-desktop/alice.rdp "
        f"/p:{USERS['alice']} /cert:ignore\n"
        "Log alice off by force: the broker's DELETE .../session (see make demo-broker)\n"
        "Tear down: make demo-down"
    )
    return 0


def down() -> int:
    """Stop the clients, displays, agents and hosts of this demo (fine when none run)."""
    for pattern in ("xfreerdp-*.pid", "xvfb-*.pid"):
        for pid_file in WORK.glob(pattern):
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            pid_file.unlink(missing_ok=True)
    for host in HOSTS:
        pid_file = CLUSTER / "agents" / f"{host}.pid"
        if pid_file.exists():
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            pid_file.unlink(missing_ok=True)
    if (WORK / "hosts").exists():
        subprocess.run(
            [str(ROOT / "tests" / "desktop" / "xrdp-hosts.sh"), "down", str(WORK / "hosts")],
            check=False,
        )
    return 0


if __name__ == "__main__":
    sys.exit(down() if sys.argv[1:] == ["down"] else up())
