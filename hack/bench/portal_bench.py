"""`make bench-portal` (run by hack/bench/portal.py with the end-to-end suite's fixtures as
plugins; not part of the suite): desktops in the browser through one broker, with real parts
(the local control plane, the operator, Keycloak, xrdp hosts with their agents, the broker with the
portal and the web client, headless chromium).

Measured:
- click → first frame: the desktop page's own timing (from the click on Connect to the
  first drawn pixel), over BENCH_PORTAL_RUNS runs of one user (the first a new session, the
  others reconnects: the tab closed and opened again), median and p95;
- the same with single sign-on (a pool with connection.singleSignOn, a host whose PAM runs
  hostpool-logon first): from the page's own connect (nothing to type) to the first frame,
  the first run making the person's account;
- daily work: a dropped connection (the relay's TCP connection to the host cut, ``ss -K``)
  to the first frame of the desktop the page reconnected to by itself, and a resized window
  to the desktop drawn at the new size (the page's own timings), BENCH_PORTAL_RUNS each;
- the verifier's time per logon: hostpool-logon run as pam_exec runs it, for a first logon
  (the account and home made) and for BENCH_PORTAL_RUNS later ones;
- the relay's CPU per MiB relayed: the broker process's CPU time over the relayed bytes
  (both ways) while a desktop draws (an xterm listing /usr over and over on it);
- BENCH_PORTAL_DESKTOPS (default 20) browser desktops at once through the one broker: all
  connected, held BENCH_PORTAL_HOLD seconds while they draw, none dropped (every page still
  connected, the relay's open sessions gauge, the hosts' established connections, no relay
  ended), the broker's CPU and memory meanwhile.
The figures go to BENCH_PORTAL_OUT (JSON) and to stdout.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from playwright.sync_api import Page, ViewportSize

from hostpool_operator.access.names import request_name
from hostpool_operator.logon import credential
from support.broker_helpers import BrokerProcess
from support.cluster import Cluster
from support.desktop_sessions import AgentHosts, session_env, wait_state
from support.keycloak import Keycloak, KeycloakError
from support.kube import wait_for
from support.operator_process import OperatorProcess
from support.portal import portal_args, sign_in
from support.signon import make_keys
from support.web_desktop import (
    first_frame,
    metric,
    open_desktop,
    web_client_or_stop,
)

POOL = "benchweb"
SSO_POOL, SSO_HOST = "benchsso", "bs-1"
FIRST_ADDRESS = 71
PER_HOST = 10
DESKTOPS = int(os.environ.get("BENCH_PORTAL_DESKTOPS", "20"))
RUNS = int(os.environ.get("BENCH_PORTAL_RUNS", "10"))
HOLD = float(os.environ.get("BENCH_PORTAL_HOLD", "30"))
DRAW_SECONDS = float(os.environ.get("BENCH_PORTAL_DRAW_SECONDS", "15"))
VIEWPORT: ViewportSize = {"width": 1024, "height": 768}
MIB = 1024 * 1024


def users() -> dict[str, str]:
    return {f"webu{i:02d}": f"webu{i:02d}-desk-pw" for i in range(1, DESKTOPS + 1)}


def sign_in_password(user: str) -> str:
    return f"{user}-sso-pw"


def add_keycloak_users(keycloak: Keycloak, names: list[str]) -> None:
    for name in names:
        body = {
            "username": name,
            "enabled": True,
            "email": f"{name}@corp.example",
            "emailVerified": True,
            "firstName": name.capitalize(),
            "lastName": "Bench",
            "credentials": [
                {"type": "password", "value": sign_in_password(name), "temporary": False}
            ],
        }
        try:
            keycloak.admin("POST", "/corp/users", body)
        except KeycloakError as error:
            if "409" not in str(error):
                raise


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def draw(user: str, seconds: float) -> subprocess.Popen[bytes]:
    """An xterm on the user's desktop listing /usr over and over (the desktop keeps
    changing) for ``seconds``."""
    script = (
        f"end=$(( $(date +%s) + {int(seconds)} )); "
        "while [ $(date +%s) -lt $end ]; do ls -la /usr/bin /usr/lib; done"
    )
    xterm = ["xterm", "-geometry", "160x50+0+0", "-e", "sh", "-c", script]
    return subprocess.Popen(
        ["timeout", str(int(seconds) + 5), *xterm],
        env=session_env(user),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def relayed(metrics: str) -> float:
    return sum(
        metric(metrics, "hostpool_broker_web_relayed_bytes_total", f'direction="{d}"')
        for d in ("to_host", "to_browser")
    )


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "median": statistics.median(values),
        "p95": percentile(values, 0.95),
        "max": max(values),
        "all": values,
    }


#: The page's clock at each change of its state and each frame drawn after a reconnect.
WATCH_PAGE = """() => {
    window.benchSeen = [];
    const root = document.getElementById("desktop");
    const watched = ["data-desktop-state", "data-first-frame-ms"];
    new MutationObserver((changes) => {
        for (const c of changes) {
            const name = c.attributeName;
            window.benchSeen.push([name, root.getAttribute(name), performance.now()]);
        }
    }).observe(root, {attributes: true, attributeFilter: watched});
    return performance.now();
}"""


def drop_and_reconnect(page: Page, addresses: list[str]) -> float:
    """The relay's TCP connection to the host cut under the open desktop (``ss -K``, as a
    Wi-Fi blip would): milliseconds by the page's clock from the cut to the first frame of
    the desktop it reconnected to by itself."""
    cut = float(page.evaluate(WATCH_PAGE))
    for address in addresses:
        subprocess.run(
            ["ss", "-K", "dst", address, "dport", "=", "3389"], capture_output=True, check=False
        )
    page.wait_for_function(
        """() => window.benchSeen.some(([name, value]) => value === "reconnecting")
            && window.benchSeen.some(([name]) => name === "data-first-frame-ms")""",
        timeout=30_000,
    )
    seen = page.evaluate("window.benchSeen")
    framed = next(t for name, _, t in seen if name == "data-first-frame-ms")
    return round(float(framed) - cut)


SIZES: tuple[ViewportSize, ViewportSize] = (
    {"width": 800, "height": 600},
    {"width": 1024, "height": 768},
)


def resize(page: Page, size: ViewportSize) -> float:
    """The window resized: milliseconds the page measured from asking the host for the new
    size (after the resize settled) to drawing the desktop at that size."""
    page.evaluate("document.getElementById('desktop').removeAttribute('data-resize-ms')")
    page.set_viewport_size(size)
    wanted = f"{size['width']}x{size['height']}"
    page.wait_for_selector(
        f"#desktop[data-resize-ms][data-desktop-size='{wanted}']", state="attached", timeout=30_000
    )
    return float(page.locator("#desktop").get_attribute("data-resize-ms") or "nan")


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def verifier_seconds(tmp_path: Path, runs: int) -> dict[str, Any]:
    """hostpool-logon as pam_exec runs it (PAM_USER, the credential on stdin), timed: the
    first logon of a person (account and home made) and ``runs`` later ones."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    keys, state, homes = tmp_path / "keys.pem", tmp_path / "state", tmp_path / "homes"
    keys.write_bytes(credential.public_pem(key))
    homes.mkdir()
    # A name nobody has (the logon refuses an account that exists and is not its own).
    user = f"hpbench{secrets.token_hex(3)}"
    program = str(Path(sys.executable).with_name("hostpool-logon"))
    argv = [program, "--host", "bench", "--public-keys", str(keys), "--state", str(state)]
    argv += ["--home-root", str(homes)]

    def logon() -> float:
        grant = credential.Grant(user=user, host="bench", request_uid="bench", uid=61999)
        secret = credential.mint(key, grant, int(time.time()), 60, os.urandom(12))
        started = time.perf_counter()
        done = subprocess.run(
            argv, input=(secret + "\0").encode(), env={**os.environ, "PAM_USER": user},
            capture_output=True, check=False,
        )  # fmt: skip
        took = time.perf_counter() - started
        assert done.returncode == 0, done.stderr.decode()
        return took

    try:
        first = logon()
        later = [logon() for _ in range(runs)]
    finally:
        subprocess.run(["userdel", user], capture_output=True, check=False)
        subprocess.run(["groupdel", user], capture_output=True, check=False)
    return {
        "firstLogonMs": round(first * 1000),
        "logonMsMedian": round(statistics.median(later) * 1000),
        "logonMsMax": round(max(later) * 1000),
        "runs": runs,
    }


def test_bench_portal(
    cluster: Cluster,
    namespace: str,
    operator_process: OperatorProcess,
    agent_hosts: AgentHosts,
    brokers: Callable[..., BrokerProcess],
    keycloak: Keycloak,
    new_page: Callable[..., Page],
    tmp_path: Path,
) -> None:
    del operator_process
    client_dir = web_client_or_stop()
    desk = users()
    names = list(desk)
    host_names = [f"bw-{i + 1}" for i in range(math.ceil(len(names) / PER_HOST))]
    add_keycloak_users(keycloak, names)
    hosts, agents = agent_hosts(host_names, desk, first=FIRST_ADDRESS)
    cluster.setup_pool(
        POOL,
        "DepthFirst",
        PER_HOST,
        hosts=host_names,
        entitlements={"users": names, "groups": []},
        connection={"web": True},
    )
    # Single sign-on: its own pool and host, and a person no host knows yet.
    private, public, _ = make_keys(tmp_path)
    sso_user = f"webs{secrets.token_hex(3)}"  # a person no host knows yet
    add_keycloak_users(keycloak, [sso_user])
    _, sso_agents = agent_hosts([SSO_HOST], {}, first=FIRST_ADDRESS + 5, signon=public)
    cluster.setup_pool(
        SSO_POOL,
        "DepthFirst",
        PER_HOST,
        hosts=[SSO_HOST],
        entitlements={"users": [sso_user], "groups": []},
        connection={"web": True, "singleSignOn": True},
    )
    for agent in [*agents.values(), *sso_agents.values()]:
        agent.start()
    portal = portal_args(tmp_path / "portal")
    broker = brokers(
        *portal.args,
        "--web-client-dir", str(client_dir),
        "--logon-key-file", str(private),
        "--uid-namespace", namespace,
    )  # fmt: skip
    assert broker.proc is not None
    process = psutil.Process(broker.proc.pid)
    metrics = f"http://127.0.0.1:{broker.metrics_port}"
    path = f"/desktop/{namespace}/{POOL}"
    url = broker.url + path
    result: dict[str, Any] = {"desktops": len(names), "hosts": len(host_names), "runs": RUNS}

    # 1. click -> first frame: a new session, then reconnects.
    first = names[0]
    page = new_page(viewport=VIEWPORT)
    sign_in(page, broker.url, first, sign_in_password(first), next_path=path)
    context = page.context
    timings: list[int] = []
    for run in range(RUNS):
        if run:
            page = context.new_page()
            page.set_viewport_size(VIEWPORT)
        timings.append(open_desktop(page, url, desk[first]))
        if run == 0:
            wait_state(cluster, request_name(namespace, POOL, first), "Active", "first session")
        page.close()
        wait_for(lambda: metric(metrics, "hostpool_broker_web_sessions") == 0, 20, what="relay end")
    reconnects = [float(t) for t in timings[1:]] or [float(timings[0])]
    result["firstFrameMs"] = {
        "newSession": timings[0],
        "reconnectMedian": statistics.median(reconnects),
        "reconnectP95": percentile(reconnects, 0.95),
        "all": timings,
    }
    print(f"bench-portal: click -> first frame {result['firstFrameMs']}", flush=True)

    # 1b. The same with single sign-on: the page connects by itself, nothing typed.
    sso_url = f"{broker.url}/desktop/{namespace}/{SSO_POOL}"
    page = new_page(viewport=VIEWPORT)
    sign_in(page, broker.url, sso_user, sign_in_password(sso_user))
    sso_timings: list[int] = []
    for run in range(RUNS):
        if run:
            page = page.context.new_page()
            page.set_viewport_size(VIEWPORT)
        page.goto(sso_url)
        sso_timings.append(first_frame(page))
        page.close()
        wait_for(lambda: metric(metrics, "hostpool_broker_web_sessions") == 0, 20, what="relay end")
    sso_reconnects = [float(t) for t in sso_timings[1:]] or [float(sso_timings[0])]
    result["singleSignOn"] = {
        "firstFrameMs": {
            "newSession": sso_timings[0],
            "reconnectMedian": statistics.median(sso_reconnects),
            "reconnectP95": percentile(sso_reconnects, 0.95),
            "all": sso_timings,
        },
        "reconnectMedianVsTypedMs": statistics.median(sso_reconnects)
        - result["firstFrameMs"]["reconnectMedian"],
        "verifier": verifier_seconds(tmp_path / "verifier", RUNS),
    }
    print(f"bench-portal: single sign-on {result['singleSignOn']}", flush=True)

    # 1c. Daily work: a dropped connection comes back by itself; a resized window is followed.
    page = context.new_page()
    page.set_viewport_size(VIEWPORT)
    open_desktop(page, url, desk[first])
    addresses = [hosts.hosts[h].address for h in host_names]
    result["daily"] = {
        "reconnectAfterDropMs": summary([drop_and_reconnect(page, addresses) for _ in range(RUNS)]),
        "resizeMs": summary([resize(page, SIZES[run % 2]) for run in range(RUNS)]),
    }
    print(f"bench-portal: daily work {result['daily']}", flush=True)

    # 2. The relay's CPU per MiB while one desktop draws.
    cpu0, bytes0, t0 = cpu_seconds(process), relayed(metrics), time.monotonic()
    drawing = draw(first, DRAW_SECONDS)
    drawing.wait(DRAW_SECONDS + 30)
    time.sleep(1)
    cpu1, bytes1, t1 = cpu_seconds(process), relayed(metrics), time.monotonic()
    mib = (bytes1 - bytes0) / MIB
    result["relayCpu"] = {
        "seconds": round(t1 - t0, 1),
        "relayedMiB": round(mib, 2),
        "brokerCpuSeconds": round(cpu1 - cpu0, 3),
        "cpuSecondsPerMiB": round((cpu1 - cpu0) / mib, 4) if mib else None,
        "MiBPerSecond": round(mib / (t1 - t0), 2),
    }
    print(f"bench-portal: relay CPU {result['relayCpu']}", flush=True)

    # 3. All desktops at once through the one broker.
    pages = {first: page}
    started = time.monotonic()
    for user in names[1:]:
        other = new_page(viewport=VIEWPORT)
        sign_in(other, broker.url, user, sign_in_password(user), next_path=path)
        open_desktop(other, url, desk[user], wait=False)
        pages[user] = other
    frames = {user: first_frame(p) for user, p in pages.items() if user != first}
    all_up = time.monotonic() - started
    ended_before = metric(metrics, "hostpool_broker_web_relays_total", 'outcome="Closed"')
    open_at_start = metric(metrics, "hostpool_broker_web_sessions")
    not_active = []
    for user in names:
        try:
            wait_state(cluster, request_name(namespace, POOL, user), "Active", user, 60)
        except pytest.fail.Exception:
            not_active.append(user)
    cpu0, bytes0, t0 = cpu_seconds(process), relayed(metrics), time.monotonic()
    drawers = [draw(user, HOLD) for user in names]
    rss = []
    while time.monotonic() - t0 < HOLD:
        rss.append(process.memory_info().rss)
        time.sleep(1)
    for drawer in drawers:
        drawer.wait(60)
    cpu1, bytes1, t1 = cpu_seconds(process), relayed(metrics), time.monotonic()
    states = {
        u: p.locator("#desktop").get_attribute("data-desktop-state") for u, p in pages.items()
    }
    dropped = sorted(u for u, s in states.items() if s != "connected")
    established = sum(hosts.established(h) for h in host_names)
    result["concurrent"] = {
        "desktops": len(pages),
        "dropped": dropped,
        "notActiveAtStart": not_active,
        "relaysOpenAtStart": open_at_start,
        "relaysOpen": metric(metrics, "hostpool_broker_web_sessions"),
        "relaysEnded": metric(metrics, "hostpool_broker_web_relays_total", 'outcome="Closed"')
        - ended_before,
        "hostConnections": established,
        "allFirstFramesSeconds": round(all_up, 1),
        "firstFrameMsMedian": statistics.median(frames.values()) if frames else None,
        "firstFrameMsMax": max(frames.values()) if frames else None,
        "holdSeconds": round(t1 - t0, 1),
        "relayedMiB": round((bytes1 - bytes0) / MIB, 2),
        "brokerCpuPercent": round(100 * (cpu1 - cpu0) / (t1 - t0), 1),
        "brokerRssMiBMax": round(max(rss) / MIB, 1) if rss else None,
    }
    print(f"bench-portal: concurrent {result['concurrent']}", flush=True)
    out = os.environ.get("BENCH_PORTAL_OUT")
    if out:
        Path(out).write_text(json.dumps(result, indent=2))
    assert not dropped, f"dropped desktops: {dropped}"
    assert result["concurrent"]["relaysOpen"] == len(names)
    assert result["concurrent"]["relaysEnded"] == 0
    assert established == len(names)
