"""The browser desktop for daily work (issue 50), end to end: a real xrdp host in a network
namespace with its agent, the operator, Keycloak, the broker with the portal and the web
client, and headless chromium.

Fit to the window: the page at 1280x720 gives a 1280x720 desktop (the X server's own size, read
on the host); the fullscreen control is offered once connected; the window resized to 1024x640
gives a 1024x640 desktop, in the same X server (no new logon), by RDP display control.

High DPI: a page at device pixel ratio 2 gets a desktop of its size in device pixels at
connect and when its window changes; Turkish Q chosen there while connected connects again
to the same session, whose X server then has the Turkish layout (xrdp's map as the test hosts
extend it).

Keyboard: Swedish chosen in the page's selector (remembered across a reload) is sent at
connect; the session's X server has the Swedish layout, and the keys of å, ä and ö on a
Swedish keyboard (by their physical codes) type åäö in an xterm of the desktop, which writes
them into a file read on the host.

Reconnect by itself: the relay's TCP connection to the host killed mid-session (``ss -K``)
leaves the page ``reconnecting``, then ``connected`` to the same X server within 5 s. The
Disconnect button ends it for good: no reconnect."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Page, ViewportSize

from e2e.desktop.test_browser_desktop_live import host_colour, shows_colour
from hostpool_operator.access.names import request_name
from support.cluster import Cluster
from support.desktop import XrdpHosts
from support.desktop_sessions import session_env, wait_state, windows_titled, xorg_pid
from support.kube import wait_for
from support.portal import sign_in
from support.web_desktop import WebDesktops, open_desktop

HOST = "daily-1"
POOL = "daily"
FIRST_ADDRESS = 86
#: A user no other desktop test signs on (host accounts are the machine's: tests that run at
#: once must not share one).
USER = "frank"
PASSWORD = "frank-daily-desk-pw"
WIDE: ViewportSize = {"width": 1280, "height": 720}
NARROW: ViewportSize = {"width": 1024, "height": 640}
#: At device pixel ratio 2: 1280x720 and 1024x640 device pixels.
DENSE: ViewportSize = {"width": 640, "height": 360}
DENSE_NARROW: ViewportSize = {"width": 512, "height": 320}
SWEDISH = "041D"
TURKISH = "041F"
#: The keys of å, ä and ö on a Swedish keyboard, by their physical codes (KeyboardEvent.code).
SWEDISH_KEYS = ("BracketLeft", "Quote", "Semicolon")
TYPED = "åäö"
#: Records the page's states from now on (window.seenStates).
WATCH_STATES = """() => {
    window.seenStates = [];
    const root = document.getElementById("desktop");
    new MutationObserver(() => window.seenStates.push(root.dataset.desktopState))
        .observe(root, {attributes: true, attributeFilter: ["data-desktop-state"]});
}"""


def x_screen_size(user: str) -> str:
    """The size of the user's X server's screen as the X server itself says (xdpyinfo)."""
    out = subprocess.run(
        ["xdpyinfo"], capture_output=True, text=True, env=session_env(user), timeout=20, check=True
    ).stdout
    match = re.search(r"dimensions:\s+(\d+x\d+) pixels", out)
    assert match, out[:400]
    return match.group(1)


def xkb_layout(user: str) -> str:
    """The XKB layout of the user's X server (setxkbmap -query)."""
    out = subprocess.run(
        ["setxkbmap", "-query"],
        capture_output=True,
        text=True,
        env=session_env(user),
        timeout=20,
        check=True,
    ).stdout
    match = re.search(r"^layout:\s+(\S+)", out, re.MULTILINE)
    assert match, out
    return match.group(1)


def keep_logs(hosts: XrdpHosts, user: str, into: Path) -> None:
    """The host's xrdp and sesman logs and the session's Xorg log, kept in the test's
    directory (xrdp logs at DEBUG here: its display-control and keyboard lines)."""
    into.mkdir(exist_ok=True)
    for path in (hosts.directory / HOST / "logs").glob("*"):
        shutil.copy(path, into / path.name)
    for path in Path(f"/home/{user}").glob(".xorgxrdp.*.log"):
        shutil.copy(path, into / path.name.lstrip("."))


def typing_xterm(user: str, into: Path) -> subprocess.Popen[bytes]:
    """An xterm of the user's on their desktop at +300+200 (UTF-8) writing what is typed in
    it into ``into``."""
    env = session_env(user)
    display = [f"DISPLAY={env['DISPLAY']}", f"XAUTHORITY={env['XAUTHORITY']}", "LC_ALL=C.UTF-8"]
    xterm = ["xterm", "-u8", "-geometry", "30x4+300+200", "-title", "typing"]
    return subprocess.Popen(
        ["runuser", "-u", user, "--", "env", *display, *xterm, "-e", "sh", "-c", f"cat > {into}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_the_desktop_fits_the_window_types_swedish_and_comes_back_by_itself(
    web_desktop: WebDesktops,
    new_page: Callable[..., Page],
    cluster: Cluster,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOSTPOOL_XRDP_LOG_LEVEL", "DEBUG")
    web = web_desktop([HOST], {USER: PASSWORD}, first=FIRST_ADDRESS)
    hosts = web.hosts
    try:
        # The pool made inside the try: the hosts' logs are kept whatever fails once they are up.
        web.add_pool(POOL, [HOST], [USER])
        broker = web.start_broker()
        desktop = web.path

        page = new_page(viewport=WIDE)
        sign_in(page, broker.url, USER, f"{USER}-pw", next_path=desktop)
        # The person's choice of layout, remembered: chosen here, still chosen after a reload.
        page.goto(broker.url + desktop)
        page.wait_for_selector('[data-action="keyboard"] option[value="041D"]', state="attached")
        page.select_option('[data-action="keyboard"]', SWEDISH)
        open_desktop(page, broker.url + desktop, PASSWORD)
        assert page.input_value('[data-action="keyboard"]') == SWEDISH
        wait_state(cluster, request_name(namespace, POOL, USER), "Active", f"{USER} to be Active")
        root = page.locator("#desktop")
        sized = "#desktop[data-desktop-size='{}']"
        page.wait_for_selector(sized.format("1280x720"), state="attached", timeout=30_000)
        assert root.get_attribute("data-keyboard-layout") == SWEDISH
        assert x_screen_size(USER) == "1280x720"
        assert page.locator('[data-action="fullscreen"]').is_visible()
        server = xorg_pid(USER)
        shows_colour(page, host_colour(hosts, HOST), tmp_path / "wide.png")

        # Fit to the window: the window made smaller, the desktop follows, same X server, the
        # same connection (display control, not a reconnect at the new size).
        page.evaluate(WATCH_STATES)
        asked = time.monotonic()
        page.set_viewport_size(NARROW)
        page.wait_for_selector(sized.format("1024x640"), state="attached", timeout=30_000)
        took = time.monotonic() - asked
        assert page.evaluate("window.seenStates") == [], root.get_attribute("data-end-reason")
        assert x_screen_size(USER) == "1024x640"
        assert xorg_pid(USER) == server
        page.screenshot(path=str(tmp_path / "narrow.png"))
        shows_colour(page, host_colour(hosts, HOST), tmp_path / "narrow.png")
        print(
            f"resized to 1024x640 in {took:.2f}s (the page: its window resized to the new "
            f"size drawn in {root.get_attribute('data-resize-ms')} ms)"
        )

        # Keyboard: the session's layout is Swedish, and Swedish keys type Swedish letters.
        assert xkb_layout(USER) == "se"
        typed = Path(f"/home/{USER}/typed.txt")
        xterm = typing_xterm(USER, typed)
        try:
            wait_for(lambda: windows_titled(USER, "typing") == 1, 20, what="the xterm")
            canvas = page.locator("#screen canvas")
            box = canvas.bounding_box()
            assert box is not None
            scale = box["width"] / 1024
            # twm's focus follows the pointer: over the xterm, and the canvas takes the keys.
            # twm moves the focus a moment after the pointer: Enter until one reaches the
            # xterm (an empty line in the file), so that no letter goes elsewhere.
            page.mouse.click(box["x"] + 360 * scale, box["y"] + 230 * scale)

            def enter_reaches_the_xterm() -> bool:
                page.keyboard.press("Enter")
                time.sleep(0.3)
                return typed.exists() and typed.read_bytes().startswith(b"\n")

            wait_for(enter_reaches_the_xterm, 15, interval=0.2, what="the xterm to have the focus")
            for key in SWEDISH_KEYS:
                page.keyboard.press(key)
            page.keyboard.press("Enter")
            wait_for(
                lambda: typed.read_text(encoding="utf-8").lstrip("\n") == TYPED + "\n",
                15,
                what=f"{TYPED} in {typed}",
                show=lambda: repr(typed.read_bytes()),
            )
        finally:
            for process in psutil.Process(xterm.pid).children(recursive=True):
                process.kill()  # the xterm (runuser waits for it)
            xterm.kill()
            xterm.wait(timeout=10)

        # Reconnect by itself: the relay's connection to the host cut under the session.
        page.evaluate("window.seenStates = []")
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
        assert xorg_pid(USER) == server  # the same X server: the same session
        shows_colour(page, host_colour(hosts, HOST), tmp_path / "reconnected.png")
        reason = root.get_attribute("data-end-reason")
        print(f"reconnected {took:.1f}s after the relay's connection was cut (ended: {reason!r})")

        # Disconnect on purpose: closed, and it stays closed.
        page.evaluate("window.seenStates = []")
        page.click('[data-action="disconnect"]')
        page.wait_for_selector(
            "#desktop[data-desktop-state=closed]", state="attached", timeout=20_000
        )
        wait_state(cluster, request_name(namespace, POOL, USER), "Disconnected", "Disconnected")
        assert "reconnecting" not in page.evaluate("window.seenStates")

        # High DPI: a page at device pixel ratio 2 gets a desktop of its device pixels (the
        # same session again) and follows its window in them too.
        dense = new_page(viewport=DENSE, device_scale_factor=2)
        sign_in(dense, broker.url, USER, f"{USER}-pw", next_path=desktop)
        open_desktop(dense, broker.url + desktop, PASSWORD)
        dense.wait_for_selector(sized.format("1280x720"), state="attached", timeout=30_000)
        assert x_screen_size(USER) == "1280x720"
        dense.set_viewport_size(DENSE_NARROW)
        dense.wait_for_selector(sized.format("1024x640"), state="attached", timeout=30_000)
        assert x_screen_size(USER) == "1024x640"
        assert xorg_pid(USER) == server
        dense.screenshot(path=str(tmp_path / "dense.png"))

        # Another layout chosen while connected (Turkish Q): the page connects again to the
        # same session with it, and the session's keyboard is Turkish.
        assert dense.locator("#desktop").get_attribute("data-keyboard-layout") != TURKISH
        dense.select_option('[data-action="keyboard"]', TURKISH)
        dense.wait_for_selector(
            f"#desktop[data-desktop-state=connected][data-keyboard-layout='{TURKISH}']",
            state="attached",
            timeout=30_000,
        )
        wait_for(lambda: xkb_layout(USER) == "tr", 20, what="the session's layout to be tr")
        assert xorg_pid(USER) == server
    finally:
        keep_logs(hosts, USER, tmp_path / "logs")
