"""The browser desktop for daily work (issue 50), end to end: a real xrdp host in a network
namespace with its agent, the operator, Keycloak, the broker with the portal and the web
client, and headless chromium.

Fit to the window: the page at 1280x720 gives a 1280x720 desktop (the X server's own size, read
on the host); the fullscreen control is offered once connected. (Following a resized window
is asked of xrdp by display control, but xrdp 0.9.21 here took the new size in some runs and
not in others: not yet tested here, issue 50 stays open for it.)

Reconnect by itself: the relay's TCP connection to the host killed mid-session (``ss -K``)
leaves the page ``reconnecting``, then ``connected`` to the same X server within 5 s. The
Disconnect button ends it for good: no reconnect."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, ViewportSize

from e2e.desktop.test_browser_desktop_live import host_colour, shows_colour
from hostpool_operator.access.names import request_name
from support.broker_helpers import BrokerProcess
from support.cluster import Cluster
from support.desktop_sessions import AgentHosts, session_env, wait_state, xorg_pid
from support.kube import wait_for
from support.operator_process import OperatorProcess
from support.portal import portal_args, sign_in
from support.web_desktop import open_desktop, web_client_or_stop

HOST = "daily-1"
POOL = "daily"
FIRST_ADDRESS = 86
PASSWORD = "alice-daily-desk-pw"
WIDE: ViewportSize = {"width": 1280, "height": 720}


def x_screen_size(user: str) -> str:
    """The size of the user's X server's screen as the X server itself says (xdpyinfo)."""
    out = subprocess.run(
        ["xdpyinfo"], capture_output=True, text=True, env=session_env(user), timeout=20, check=True
    ).stdout
    match = re.search(r"dimensions:\s+(\d+x\d+) pixels", out)
    assert match, out[:400]
    return match.group(1)


def test_the_desktop_fits_the_window_and_comes_back_by_itself(
    cluster: Cluster,
    namespace: str,
    operator_process: OperatorProcess,
    agent_hosts: AgentHosts,
    brokers: Callable[..., BrokerProcess],
    new_page: Callable[..., Page],
    tmp_path: Path,
) -> None:
    del operator_process
    client_dir = web_client_or_stop()
    hosts, agents = agent_hosts([HOST], {"alice": PASSWORD}, first=FIRST_ADDRESS)
    cluster.setup_pool(
        POOL,
        "DepthFirst",
        2,
        hosts=[HOST],
        entitlements={"users": ["alice"], "groups": []},
        connection={"web": True},
    )
    agents[HOST].start()
    broker = brokers(*portal_args(tmp_path / "portal").args, "--web-client-dir", str(client_dir))
    desktop = f"/desktop/{namespace}/{POOL}"

    page = new_page(viewport=WIDE)
    sign_in(page, broker.url, "alice", "alice-pw", next_path=desktop)
    open_desktop(page, broker.url + desktop, PASSWORD)
    wait_state(cluster, request_name(namespace, POOL, "alice"), "Active", "alice to be Active")
    root = page.locator("#desktop")
    assert root.get_attribute("data-desktop-size") == "1280x720"
    assert x_screen_size("alice") == "1280x720"
    assert page.locator('[data-action="fullscreen"]').is_visible()
    server = xorg_pid("alice")
    shows_colour(page, host_colour(hosts, HOST), tmp_path / "wide.png")

    # Reconnect by itself: the relay's connection to the host cut under the session.
    page.evaluate(
        """() => {
            window.seenStates = [];
            const root = document.getElementById("desktop");
            new MutationObserver(() => window.seenStates.push(root.dataset.desktopState))
                .observe(root, {attributes: true, attributeFilter: ["data-desktop-state"]});
        }"""
    )
    address = hosts.hosts[HOST].address
    killed = subprocess.run(
        ["ss", "-K", "dst", address, "dport", "=", "3389"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert address in killed.stdout, killed.stdout + killed.stderr
    cut = time.monotonic()
    wait_for(
        lambda: (
            "reconnecting" in page.evaluate("window.seenStates")
            and root.get_attribute("data-desktop-state") == "connected"
        ),
        5,
        what="the page to reconnect by itself",
    )
    took = time.monotonic() - cut
    assert xorg_pid("alice") == server  # the same X server: the same session
    shows_colour(page, host_colour(hosts, HOST), tmp_path / "reconnected.png")
    reason = root.get_attribute("data-end-reason")
    print(f"reconnected {took:.1f}s after the relay's connection was cut (ended: {reason!r})")

    # Disconnect on purpose: closed, and it stays closed.
    page.evaluate("window.seenStates = []")
    page.click('[data-action="disconnect"]')
    page.wait_for_selector("#desktop[data-desktop-state=closed]", state="attached", timeout=20_000)
    wait_state(cluster, request_name(namespace, POOL, "alice"), "Disconnected", "Disconnected")
    assert "reconnecting" not in page.evaluate("window.seenStates")
