"""A desktop in the browser, end to end: a real xrdp host in a network namespace with its
agent, the operator, Keycloak, the broker with the portal and the web client, and headless
chromium running IronRDP's web component through the broker's relay.

alice signs in through Keycloak's form and opens her desktop in the page: the canvas shows
her host's colour and her typing reaches her xterm. She closes the tab (the agent reports
her session Disconnected), opens it again (the same X server) and logs off (the session
ends). bob, signed in with a session of his own on the same host, tries the relay with a
forged ticket, a replayed one, alice's, and his own with another destination: each is
refused before the relay connects to any host (the host's xrdp accepted no connection and
has no more established than before). bob's .rdp file from the portal, opened by FreeRDP,
reaches his desktop on the same host.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, ViewportSize

from hostpool_operator.access import tickets
from hostpool_operator.access.names import request_name
from support.cluster import Cluster
from support.desktop import RdpClient, VirtualDisplay, XrdpHosts, pixel, xorg_displays
from support.desktop_sessions import wait_state, xorg_pid
from support.kube import wait_for
from support.portal import CSRF_HEADER, csrf_token, session_cookies, sign_in
from support.report_logs import EXTRA_LOGS
from support.web_desktop import (
    WebDesktops,
    connections_received,
    cookie_header,
    metric,
    open_desktop,
    try_relay,
)

HOST = "web-1"
POOL = "webdesk"
FIRST_ADDRESS = 61
#: Desktop (Linux) passwords; the sign-in passwords are Keycloak's (support.keycloak).
USERS = {"alice": "alice-web-desk-pw", "bob": "bob-web-desk-pw"}
SIGN_IN = {"alice": "alice-pw", "bob": "bob-pw"}
VIEWPORT: ViewportSize = {"width": 1024, "height": 768}


def host_colour(hosts: XrdpHosts, host: str) -> str:
    env = (hosts.directory / host / "run" / "host.env").read_text()
    return env.split('HOSTPOOL_DESKTOP_COLOUR="', 1)[1].split('"', 1)[0].lower()


def near(seen: str, colour: str) -> bool:
    """The same colour but for what 16 bits a pixel keep of it (the web client's session is
    16 bpp: 5-6-5 bits a channel)."""
    pairs = zip(bytes.fromhex(seen[1:]), bytes.fromhex(colour[1:]), strict=True)
    return all(abs(a - b) <= 8 for a, b in pairs)


def shows_colour(page: Page, colour: str, shot: Path) -> None:
    """The canvas shows the desktop's background colour (a point away from the xterm)."""
    box = page.locator("#screen").bounding_box()
    assert box is not None
    x, y = int(box["x"] + box["width"] - 30), int(box["y"] + box["height"] - 30)

    def looks() -> bool:
        page.screenshot(path=str(shot))
        return near(pixel(shot, x, y), colour)

    wait_for(looks, 20, what=f"the canvas to show the host's colour {colour}")


def post(page: Page, url: str, path: str, csrf: str, **options: object) -> dict[str, object]:
    answer = page.request.post(
        url + path,
        headers={CSRF_HEADER: csrf, "Origin": url},
        **options,  # type: ignore[arg-type]
    )
    assert answer.status == 200, f"POST {path}: {answer.status} {answer.text()[:300]}"
    body = answer.json()
    assert isinstance(body, dict)
    return body


def test_a_desktop_in_the_browser(
    web_desktop: WebDesktops,
    new_page: Callable[..., Page],
    cluster: Cluster,
    namespace: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    web = web_desktop([HOST], USERS, first=FIRST_ADDRESS, pool=POOL)
    hosts = web.hosts
    address = hosts.hosts[HOST].address
    colour = host_colour(hosts, HOST)
    broker = web.start_broker()
    url = broker.url
    metrics = f"http://127.0.0.1:{broker.metrics_port}"
    desktop_url = url + web.path
    base = f"/v1/namespaces/{namespace}/pools/{POOL}"
    relay_url = f"ws://127.0.0.1:{broker.port}{base}/session/web"
    alice_request = request_name(namespace, POOL, "alice")
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])

    # 1. alice signs in and opens her desktop: her host's colour, her typing in her xterm.
    alice_page = new_page(viewport=VIEWPORT)
    sign_in(alice_page, url, "alice", SIGN_IN["alice"], next_path=web.path)
    assert alice_page.url == desktop_url
    first_ms = open_desktop(alice_page, desktop_url, USERS["alice"])
    assert 0 < first_ms < 60_000
    shows_colour(alice_page, colour, tmp_path / "alice-1.png")
    wait_state(cluster, alice_request, "Active", "alice's browser session to be Active")
    assert hosts.established(HOST) == 1
    (display,) = xorg_displays("alice")
    server = xorg_pid("alice")
    marker = Path(f"/tmp/hostpool-web-typed-{uuid.uuid4().hex[:8]}")
    box = alice_page.locator("#screen").bounding_box()
    assert box is not None
    alice_page.mouse.move(box["x"] + 150, box["y"] + 150)  # over the xterm (twm: focus follows)
    alice_page.mouse.click(box["x"] + 150, box["y"] + 150)
    alice_page.keyboard.type(f"touch {marker}\n", delay=20)
    try:
        wait_for(marker.exists, 20, what="the typed command to run in alice's xterm")
        assert marker.owner() == "alice"
    finally:
        marker.unlink(missing_ok=True)
    assert metric(metrics, "hostpool_broker_web_sessions") == 1
    assert metric(metrics, "hostpool_broker_web_first_frame_seconds_count") >= 1

    # 2. She closes the tab: the session waits, Disconnected.
    context = alice_page.context
    alice_page.close()
    wait_state(cluster, alice_request, "Disconnected", "alice's session to be Disconnected")
    wait_for(lambda: hosts.established(HOST) == 0, 10, what="the relay to close its connection")
    wait_for(lambda: metric(metrics, "hostpool_broker_web_sessions") == 0, 10, what="relay end")

    # 3. She opens it again: the same X server.
    alice_page = context.new_page()
    alice_page.set_viewport_size(VIEWPORT)
    open_desktop(alice_page, desktop_url, USERS["alice"])
    shows_colour(alice_page, colour, tmp_path / "alice-2.png")
    wait_state(cluster, alice_request, "Active", "alice's session to be Active again")
    assert xorg_displays("alice") == [display]
    assert xorg_pid("alice") == server

    # 4. bob, signed in, with a session of his own on the same host.
    bob_page = new_page(viewport=VIEWPORT)
    sign_in(bob_page, url, "bob", SIGN_IN["bob"])
    bob_csrf = csrf_token(bob_page, url)
    placed = post(bob_page, url, f"{base}/connect", bob_csrf, data="{}")
    assert placed["host"] == HOST
    bob_headers = {
        "Cookie": cookie_header(session_cookies(bob_page.context, url)),
        "Origin": url,
    }
    alice_csrf = csrf_token(alice_page, url)
    alice_ticket = str(post(alice_page, url, f"{base}/session/web-ticket", alice_csrf)["ticket"])
    bob_answer = post(bob_page, url, f"{base}/session/web-ticket", bob_csrf)
    destination = str(bob_answer["destination"])
    assert destination == f"{address}:3389"
    bob_ticket = str(bob_answer["ticket"])
    forged = tickets.mint(
        tickets.ticket_key(b"not the broker's secret, but 32+ bytes long"),
        tickets.Ticket(
            user="bob",
            namespace=namespace,
            pool=POOL,
            request=str(placed["request"]),
            uid="any",
            expires=int(time.time()) + 30,
            id="forged",
        ),
    )
    bob_other = str(post(bob_page, url, f"{base}/session/web-ticket", bob_csrf)["ticket"])
    other_address = address.rsplit(".", 1)[0] + ".250:3389"

    # 5. Each refused before the relay connects anywhere.
    received, established = connections_received(hosts, HOST), hosts.established(HOST)
    cases = [
        ("forged", forged, destination, "TicketInvalid"),
        ("alice's", alice_ticket, destination, "TicketNotYours"),
        ("another destination", bob_other, other_address, "DestinationRefused"),
        ("replayed", bob_other, destination, "TicketUsed"),
    ]
    for what, ticket, target, outcome in cases:
        before = metric(metrics, "hostpool_broker_web_relays_total", f'outcome="{outcome}"')
        answer = try_relay(relay_url, ticket, target, bob_headers)
        assert answer.status == 101, f"{what}: {answer}"
        assert answer.pdu is not None
        assert answer.pdu.error is not None, f"{what}: the relay did not refuse it"
        assert answer.pdu.error.http_status == 403, f"{what}: {answer.pdu.error}"
        assert answer.pdu.x224 is None
        after = metric(metrics, "hostpool_broker_web_relays_total", f'outcome="{outcome}"')
        assert after == before + 1, f"{what}: outcome {outcome} not counted"
    evil = {**bob_headers, "Origin": "http://evil.example"}
    cross_site = try_relay(relay_url, bob_ticket, destination, evil)
    assert cross_site.status == 403, cross_site
    assert connections_received(hosts, HOST) == received
    assert hosts.established(HOST) == established
    # bob's own unused ticket still works: the relay reaches his host.
    good = try_relay(relay_url, bob_ticket, destination, bob_headers)
    assert good.pdu is not None
    assert good.pdu.error is None, good.pdu
    assert good.pdu.server_addr == address
    assert good.pdu.cert_chain
    assert connections_received(hosts, HOST) == received + 1

    # 6. bob's .rdp file from the portal, opened by FreeRDP, shows his desktop on that host.
    rdp = bob_page.request.post(
        f"{url}{base}/connect",
        headers={CSRF_HEADER: bob_csrf, "Origin": url, "Accept": "application/x-rdp"},
        data="{}",
    )
    assert rdp.status == 200, rdp.text()
    assert f"full address:s:{address}:3389" in rdp.text()
    rdp_file = tmp_path / "bob.rdp"
    rdp_file.write_bytes(rdp.body())
    with VirtualDisplay(tmp_path / "xvfb.log") as screen:
        client = RdpClient(
            screen, rdp_file, USERS["bob"], tmp_path / "xfreerdp.log", tmp_path / "home"
        )
        logs.append(("xfreerdp bob log", client.log_text))
        client.start()
        try:
            shot = tmp_path / "bob-freerdp.png"
            wait_for(
                lambda: pixel(screen.screenshot(shot), 1000, 740) == colour,
                30,
                what="bob's FreeRDP client to show his host's desktop",
            )
        finally:
            client.kill()

    # 7. alice logs off from the portal: her session ends.
    ended = alice_page.request.delete(
        f"{url}{base}/session", headers={CSRF_HEADER: alice_csrf, "Origin": url}
    )
    assert ended.status == 202, ended.text()
    wait_for(lambda: not xorg_displays("alice"), 30, what="alice's X server to end")
    wait_for(lambda: alice_request not in cluster.requests(), 30, what="alice's request to be gone")
    alice_page.wait_for_selector(
        "#desktop[data-desktop-state=closed], #desktop[data-desktop-state=error]",
        state="attached",
        timeout=20_000,
    )
