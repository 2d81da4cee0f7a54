"""The clipboard between a person's device and the desktop (issue 50, item 2), end to end:
real xrdp hosts in network namespaces with their agents, the operator, Keycloak, the broker
with the portal and the web client, headless chromium (clipboard permissions granted, as a
person grants them), and FreeRDP.

In the browser: text the page puts on its clipboard is on the desktop's X clipboard (read in
the session with xclip), and text copied in the desktop (xclip) reaches the page's clipboard.
With ``connection.clipboard: Disabled`` nothing crosses either way, on a host whose own
clipboard is on (so it is the page and the relay that keep it closed): neither with the page
as served (it opens no clipboard channel) nor with a page changed to open one (the relay
renames the channel in the Connect Initial; the broker says so).

With FreeRDP and the broker's .rdp file: a pool with the clipboard carries text both ways; one
without it says ``redirectclipboard:i:0``, and xfreerdp forced on with ``+clipboard`` carries
nothing, its host's clipboard channel being off (as the session-host image turns it off when
the operator tells it, HOSTPOOL_CLIPBOARD=Disabled, which the image is shown to follow); on a
host whose own clipboard is on, the same forced client does carry text (a native client at a
host decides for itself: the host's setting is what holds)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page

from hostpool_operator.access.names import request_name
from support.broker_helpers import BrokerProcess
from support.cluster import Cluster
from support.desktop import RdpClient, VirtualDisplay
from support.desktop_sessions import AgentHosts, session_env, wait_state
from support.kube import unique_name, wait_for
from support.operator_process import OperatorProcess
from support.podman import build_image, podman
from support.portal import sign_in
from support.report_logs import EXTRA_LOGS
from support.web_desktop import WebDesktop, WebDesktops, open_desktop

PASSWORD = "alice-clip-desk-pw"
#: How long text is given to cross where it must not (it crosses in well under a second
#: where it may).
QUIET = 6.0
CLIPBOARD_PERMISSIONS = ["clipboard-read", "clipboard-write"]


def desktop_clipboard(env: dict[str, str]) -> str:
    """The X clipboard of a display ('' when nobody holds it)."""
    proc = subprocess.run(
        ["xclip", "-o", "-selection", "clipboard"],
        capture_output=True,
        text=True,
        env=env,
        timeout=10,
        check=False,
    )
    return proc.stdout if proc.returncode == 0 else ""


def copy_on(env: dict[str, str], text: str) -> None:
    """Copy ``text`` on a display, as a program there does (xclip holds the selection in the
    background until another program takes it, or the display ends)."""
    subprocess.run(
        ["xclip", "-i", "-selection", "clipboard"],
        input=text.encode(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        timeout=10,
        check=True,
    )


def page_clipboard(page: Page) -> str:
    text: str = page.evaluate("() => navigator.clipboard.readText().catch(() => '')")
    return text


def page_copies(page: Page, text: str) -> None:
    page.bring_to_front()
    page.evaluate("t => navigator.clipboard.writeText(t)", text)


#: The desktop page as a changed page would be: its client opens the clipboard (the page's
#: attribute flipped once the document is parsed, before its module script runs).
OPENS_THE_CLIPBOARD_ANYWAY = """
document.addEventListener("readystatechange", () => {
  const root = document.getElementById("desktop");
  if (root) root.dataset.clipboard = "true";
});
"""


def stays_apart(what: Callable[[], str], text: str, seconds: float = QUIET) -> None:
    """``what()`` never shows ``text`` for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert what() != text
        time.sleep(0.5)


def nothing_crosses(page: Page, session: dict[str, str], label: str) -> None:
    """Text copied in the page and in the desktop each stays where it was copied."""
    to_desktop, to_page = f"page text ({label})", f"desktop text ({label})"
    page_copies(page, to_desktop)
    copy_on(session, to_page)
    stays_apart(lambda: desktop_clipboard(session), to_desktop)
    stays_apart(lambda: page_clipboard(page), to_page, 1.0)
    assert desktop_clipboard(session) == to_page
    assert page_clipboard(page) == to_desktop


def alice_on_the_page(
    new_page: Callable[..., Page], web: WebDesktop, broker: BrokerProcess, *, changed: bool = False
) -> tuple[Page, dict[str, str]]:
    """alice signed in on a page granted the clipboard, her desktop open in it and her
    session Active: the page, and her session's display environment (for xclip). With
    ``changed``, the page is changed to open the clipboard whatever the pool says."""
    page = new_page(permissions=CLIPBOARD_PERMISSIONS)
    if changed:
        page.add_init_script(OPENS_THE_CLIPBOARD_ANYWAY)
    sign_in(page, broker.url, "alice", "alice-pw", next_path=web.path)
    open_desktop(page, broker.url + web.path, PASSWORD)
    request = request_name(web.cluster.namespace, web.pool, "alice")
    wait_state(web.cluster, request, "Active", "alice to be Active")
    return page, session_env("alice")


def test_text_crosses_both_ways_between_the_page_and_the_desktop(
    web_desktop: WebDesktops, new_page: Callable[..., Page]
) -> None:
    opened = {"clipboard": "Enabled"}
    web = web_desktop(["clip-1"], {"alice": PASSWORD}, first=101, pool="clip", connection=opened)
    page, session = alice_on_the_page(new_page, web, web.start_broker())
    assert page.locator("#desktop").get_attribute("data-clipboard") == "true"

    # Copied in the page, it is on the desktop's clipboard (what Ctrl+V pastes there).
    to_desktop = "from the page: Grüße, 你好 #1"
    started = time.monotonic()
    page_copies(page, to_desktop)
    wait_for(lambda: desktop_clipboard(session) == to_desktop, 15, what="the page's text")
    print(f"page to desktop in {time.monotonic() - started:.1f}s")

    # Copied in the desktop, it is on the page's clipboard.
    to_page = "from the desktop: ÅÄÖ #2"
    started = time.monotonic()
    copy_on(session, to_page)
    wait_for(lambda: page_clipboard(page) == to_page, 15, what="the desktop's text")
    print(f"desktop to page in {time.monotonic() - started:.1f}s")


def test_without_the_clipboard_nothing_crosses_in_the_browser_even_from_a_changed_page(
    web_desktop: WebDesktops, new_page: Callable[..., Page], cluster: Cluster, namespace: str
) -> None:
    # The host's own clipboard is on: only the page and the relay keep it closed.
    users, closed = {"alice": PASSWORD}, {"clipboard": "Disabled"}
    web = web_desktop(["noclip-1"], users, first=104, pool="noclip", connection=closed)
    broker = web.start_broker()
    request = request_name(namespace, "noclip", "alice")

    for changed in (False, True):
        page, session = alice_on_the_page(new_page, web, broker, changed=changed)
        assert page.locator("#desktop").get_attribute("data-clipboard") == str(changed).lower()
        nothing_crosses(page, session, f"changed page {changed}")
        page.click('[data-action="disconnect"]')
        wait_state(cluster, request, "Disconnected", "alice to be Disconnected")
        page.close()
    log = broker.log_path.read_text(errors="replace")
    # The changed page asked for the channel and the relay withheld it; the page as served
    # never asked.
    assert log.count("asked for the clipboard, which the pool does not allow") == 1, log[-3000:]


#: FreeRDP's sessions: (user, pool, its clipboard, host, the host's clipboard, first address).
#: carol's host is one the operator did not start (its clipboard on): a client forced on
#: carries text there whatever the pool says, as docs/broker.md warns; it shows that the host's
#: setting is what holds bob's closed.
FREERDP = [
    ("alice", "rdpopen", "Enabled", "rdp-open", "Enabled", 107),
    ("bob", "rdpclosed", "Disabled", "rdp-closed", "Disabled", 109),
    ("carol", "rdpforced", "Disabled", "rdp-forced", "Enabled", 111),
]


def crosses_both_ways(local: dict[str, str], remote: dict[str, str], user: str) -> None:
    copy_on(local, f"{user}: freerdp to the desktop")
    wait_for(lambda: desktop_clipboard(remote) == f"{user}: freerdp to the desktop", 15, what="up")
    copy_on(remote, f"{user}: the desktop to freerdp")
    wait_for(lambda: desktop_clipboard(local) == f"{user}: the desktop to freerdp", 15, what="down")


def test_freerdp_carries_text_only_where_the_pool_and_its_host_have_a_clipboard(
    cluster: Cluster,
    namespace: str,
    operator_process: OperatorProcess,
    agent_hosts: AgentHosts,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    del operator_process
    passwords = {user: f"{user}-clip-desk-pw" for user, *_ in FREERDP}
    for user, pool, clipboard, host, host_clipboard, first in FREERDP:
        hosts, agents = agent_hosts(
            [host], {user: passwords[user]}, first=first, clipboard=host_clipboard
        )
        cluster.setup_pool(
            pool,
            "DepthFirst",
            2,
            hosts=[host],
            entitlements={"users": [user], "groups": []},
            connection={"clipboard": clipboard},
        )
        agents[host].start()
        address = hosts.hosts[host].address
        cluster.wait(
            lambda h=host, a=address: (  # type: ignore[misc]
                ((cluster.host(h).get("status") or {}).get("agent") or {}).get("address") == a
            ),
            f"the agent of {host} to report its address {address}",
        )
    broker = brokers()
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    clients: list[RdpClient] = []
    displays: list[VirtualDisplay] = []
    try:
        sessions = {}
        for user, pool, clipboard, *_ in FREERDP:
            answer = broker.connect(namespace, pool, tokens(user))
            assert answer.status == 200, answer.text
            rdp_text = answer.body["rdpFile"]
            want = f"redirectclipboard:i:{int(clipboard == 'Enabled')}"
            assert want in rdp_text.split("\r\n"), rdp_text
            rdp = tmp_path / f"{user}.rdp"
            rdp.write_text(rdp_text, newline="")
            display = VirtualDisplay(tmp_path / f"xvfb-{user}.log")
            display.__enter__()
            displays.append(display)
            # Forced on, whatever the file says.
            client = RdpClient(
                display, rdp, passwords[user], tmp_path / f"xfreerdp-{user}.log",
                tmp_path / f"home-{user}", extra=("+clipboard",),
            )  # fmt: skip
            logs.append((f"xfreerdp {user} log", client.log_text))
            clients.append(client)
            client.start()
            wait_state(cluster, answer.body["request"], "Active", f"{user} to be Active")
            local = {**os.environ, "DISPLAY": display.name}
            sessions[user] = (local, session_env(user))

        # Where the pool and its host have a clipboard: both ways.
        crosses_both_ways(*sessions["alice"], "alice")
        # Where the pool has none and the operator's host has its channel off: neither way.
        local, remote = sessions["bob"]
        copy_on(local, "bob's device text")
        copy_on(remote, "bob's desktop text")
        stays_apart(lambda: desktop_clipboard(remote), "bob's device text")
        stays_apart(lambda: desktop_clipboard(local), "bob's desktop text", 1.0)
        # A host with its own clipboard on, and a client that ignores the file: it crosses.
        crosses_both_ways(*sessions["carol"], "carol")
    finally:
        for client in clients:
            client.kill()
        for display in displays:
            display.__exit__(None, None, None)


def test_the_session_host_image_turns_its_clipboard_off_when_the_operator_says() -> None:
    """The session-host image as the operator starts it for a pool without a clipboard
    (HOSTPOOL_CLIPBOARD=Disabled): xrdp's clipboard channel and chansrv's clipboard are off
    before xrdp starts; a value it does not know stops the container, saying why."""
    image = build_image("--session-host")
    name = unique_name("clipboard", max_length=30)
    try:
        podman("run", "-d", "--name", name, "-e", "HOSTPOOL_CLIPBOARD=Disabled", image)
        wait_for(
            lambda: "RDP on port 3389" in podman("logs", name, check=False),
            60,
            what="xrdp to start in the container",
        )
        settings = podman(
            "exec", name, "grep", "-h", "-e", "^cliprdr=", "-e", "^Restrict.*Clipboard=",
            "/etc/xrdp/xrdp.ini", "/etc/xrdp/sesman.ini",
        ).split()  # fmt: skip
        assert settings == [
            "cliprdr=false",
            "RestrictOutboundClipboard=all",
            "RestrictInboundClipboard=all",
        ]
        assert "clipboard Disabled" in podman("logs", name, check=False)
    finally:
        podman("rm", "--force", "--time", "5", name, check=False)
    bad = unique_name("clipboard", max_length=30)
    try:
        podman("run", "--name", bad, "-e", "HOSTPOOL_CLIPBOARD=off", image, check=False, timeout=60)
        code = podman("inspect", "--format", "{{.State.ExitCode}}", bad).strip()
        assert code == "1"
        assert "HOSTPOOL_CLIPBOARD is neither Enabled nor Disabled" in podman(
            "logs", bad, check=False
        )
    finally:
        podman("rm", "--force", "--time", "5", bad, check=False)
