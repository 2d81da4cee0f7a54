"""The relay authenticates the host (the second security review, item 5), end to end: a real
xrdp host in a network namespace with its agent, the operator, Keycloak, the broker with the
portal and the web client, and headless chromium.

The agent publishes the SHA-256 of the certificate xrdp serves (read as xrdp reads it:
xrdp.ini's ``certificate=``, here empty, so ``/etc/xrdp/cert.pem``), and it is the one the
host presents at its address. alice opens her desktop in the page: the normal path works.
Then the host's SessionHost publishes another certificate than the one presented at its
address (what the relay sees when someone else answers there, between the broker and the
host): bob's desktop is refused after TLS and before his logon, which never reaches the
host (no session of his, his name in none of the host's logs); with no fingerprint
published, refused before the relay connects at all. Each is the relay's outcome
``HostNotTrusted`` with a warning naming the host. His agent again, the real fingerprint
published again: bob's desktop opens."""

from __future__ import annotations

import hashlib
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, ViewportSize

from e2e.desktop.test_browser_desktop_live import host_colour, shows_colour
from hostpool_operator.access.names import request_name
from support.cluster import Cluster
from support.conditions import status
from support.desktop import XrdpHosts, session_processes
from support.desktop_sessions import wait_state
from support.kube import wait_for
from support.portal import sign_in
from support.tls import self_signed
from support.web_desktop import (
    WebDesktops,
    connections_received,
    first_frame_or_none,
    metric,
    open_desktop,
    x224_request,
)

HOST = "pin-1"
POOL = "pindesk"
FIRST_ADDRESS = 71
#: Desktop (Linux) passwords; the sign-in passwords are Keycloak's (support.keycloak).
USERS = {"alice": "alice-pin-desk-pw", "bob": "bob-pin-desk-pw"}
SIGN_IN = {"alice": "alice-pw", "bob": "bob-pw"}
VIEWPORT: ViewportSize = {"width": 1024, "height": 768}
NOT_TRUSTED = 'outcome="HostNotTrusted"'


def presented_certificate(address: str) -> bytes:
    """The certificate xrdp at ``address`` presents in TLS (after the X.224 exchange that
    RDP's TLS starts with), as DER."""
    with socket.create_connection((address, 3389), timeout=10) as sock:
        sock.sendall(x224_request())
        header = sock.recv(4, socket.MSG_WAITALL)
        sock.recv(int.from_bytes(header[2:4], "big") - 4, socket.MSG_WAITALL)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with context.wrap_socket(sock) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der
    return der


def published(cluster: Cluster) -> str | None:
    agent = status(cluster.host(HOST)).get("agent")
    value = agent.get("rdpCertificateSha256") if isinstance(agent, dict) else None
    return value if isinstance(value, str) else None


def host_logs(hosts: XrdpHosts) -> str:
    return "".join(
        f.read_text(errors="replace") for f in (hosts.directory / HOST / "logs").iterdir()
    )


def refused(page: Page) -> str:
    """The desktop page ended in its error state; its text."""
    assert first_frame_or_none(page, 60_000) is None, "the desktop opened"
    text = page.inner_text("#desktop")
    assert "connection failed" in text, text
    return text


def test_the_relay_takes_only_the_host_whose_certificate_its_agent_publishes(
    web_desktop: WebDesktops,
    new_page: Callable[..., Page],
    cluster: Cluster,
    namespace: str,
    tmp_path: Path,
) -> None:
    web = web_desktop([HOST], USERS, first=FIRST_ADDRESS, pool=POOL)
    hosts, agents = web.hosts, web.agents
    address = hosts.hosts[HOST].address

    # 1. The agent publishes the certificate the host presents: xrdp's default, this
    # machine's /etc/xrdp/cert.pem (a link to Debian's snakeoil certificate), read by the
    # agent through the root of the xrdp-sesman beside it.
    der = presented_certificate(address)
    assert der == ssl.PEM_cert_to_DER_cert(Path("/etc/xrdp/cert.pem").read_text())
    real = hashlib.sha256(der).hexdigest()
    # An agent publishes at its start; 60 s leave room for an API server slowed by a loaded
    # machine (a clean-clone run waited over 20 s for the agent's first write).
    wait_for(lambda: published(cluster) == real, 60, what="the agent to publish the fingerprint")

    broker = web.start_broker()
    metrics = f"http://127.0.0.1:{broker.metrics_port}"
    desktop_url = broker.url + web.path
    colour = host_colour(hosts, HOST)

    # 2. The normal path: alice's desktop opens in the page.
    alice_page = new_page(viewport=VIEWPORT)
    sign_in(alice_page, broker.url, "alice", SIGN_IN["alice"])
    assert 0 < open_desktop(alice_page, desktop_url, USERS["alice"]) < 60_000
    shows_colour(alice_page, colour, tmp_path / "alice.png")
    alices = request_name(namespace, POOL, "alice")
    wait_state(cluster, alices, "Active", "alice's session")
    # Logon diagnostics on the browser path: the relay's transport and the page's first
    # frame (the broker's), the session's start (the agent's), one connect, Succeeded.
    connect = wait_for(
        lambda: (lambda c: c if c and {"transport", "firstFrame", "sessionStart"} <= set(
            c[-1].get("phases", {})) else None)(
            (cluster.request(alices).get("status") or {}).get("connects")),
        15, what="alice's connect with its browser phases",
    )[-1]  # fmt: skip
    assert connect["outcome"] == "Succeeded", connect
    assert metric(metrics, "hostpool_broker_web_relays_total", NOT_TRUSTED) == 0
    alice_page.close()

    # 3. The SessionHost publishes another certificate than the one at the host's address
    # (the agent stopped first, so it does not put the real one back).
    agents[HOST].stop()
    _, _, impostor_der = self_signed("impostor", tmp_path / "impostor")
    impostor = hashlib.sha256(impostor_der).hexdigest()
    cluster.patch_status("SessionHost", HOST, {"agent": {"rdpCertificateSha256": impostor}})
    received = connections_received(hosts, HOST)
    bob_page = new_page(viewport=VIEWPORT)
    # Signing in takes seconds: the broker's watch has the new status long before.
    sign_in(bob_page, broker.url, "bob", SIGN_IN["bob"])
    open_desktop(bob_page, desktop_url, USERS["bob"], wait=False)
    refused(bob_page)
    wait_for(
        lambda: metric(metrics, "hostpool_broker_web_relays_total", NOT_TRUSTED) == 1,
        10,
        what="the relay to count the host not trusted",
    )
    # It did reach the host and saw its certificate in TLS: the refusal is the pin's.
    assert connections_received(hosts, HOST) == received + 1
    warning = [line for line in broker.log_tail(300).splitlines() if "not trusted" in line]
    assert len(warning) == 1, broker.log_tail(60)
    assert "WARNING" in warning[0]
    assert f"{namespace}/{HOST}" in warning[0]
    assert real in warning[0]
    assert impostor in warning[0]
    # bob's logon never reached the host: no session of his, his name in none of its logs.
    assert session_processes("bob") == []
    assert "bob" not in host_logs(hosts), "the logon reached the host"
    # Logon diagnostics: his connect failed in transport, HostNotTrusted.
    bobs = request_name(namespace, POOL, "bob")
    failed = wait_for(
        lambda: next(
            (c for c in (cluster.request(bobs).get("status") or {}).get("connects", [])
             if c.get("outcome") == "Failed"),
            None,
        ),
        10, what="bob's connect to fail",
    )  # fmt: skip
    assert (failed["failedPhase"], failed["reason"]) == ("transport", "HostNotTrusted"), failed

    # 4. No fingerprint published at all: refused before the relay connects.
    cluster.patch_status("SessionHost", HOST, {"agent": {"rdpCertificateSha256": None}})
    wait_for(lambda: published(cluster) is None, 10, what="the fingerprint removed")
    bob_page.wait_for_timeout(1000)  # the broker's watch: milliseconds, with room to spare
    received = connections_received(hosts, HOST)
    open_desktop(bob_page, desktop_url, USERS["bob"], wait=False)
    refused(bob_page)
    wait_for(
        lambda: metric(metrics, "hostpool_broker_web_relays_total", NOT_TRUSTED) == 2,
        10,
        what="the relay to count the second refusal",
    )
    assert connections_received(hosts, HOST) == received
    assert "publishes no RDP certificate" in broker.log_tail(100)
    assert session_processes("bob") == []

    # 5. The agent again: the real fingerprint is published and bob's desktop opens.
    agents[HOST].start()
    wait_for(lambda: published(cluster) == real, 60, what="the agent to publish it again")
    bob_page.wait_for_timeout(1000)
    assert 0 < open_desktop(bob_page, desktop_url, USERS["bob"]) < 60_000
    shows_colour(bob_page, colour, tmp_path / "bob.png")
    wait_state(cluster, request_name(namespace, POOL, "bob"), "Active", "bob's session")
    assert metric(metrics, "hostpool_broker_web_relays_total", NOT_TRUSTED) == 2
