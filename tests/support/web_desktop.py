"""Desktops in the browser, in tests and the portal bench: the web client's install
(``hack/portal/web-client.sh``), the set-up every browser-desktop test starts with (xrdp hosts
and their agents, pools offering their desktops in the browser, brokers with the web client and
the portal: :class:`WebDesktops`), a bare RDCleanPath client of the broker's relay (what a
forger or a replayer would send), what a host saw, the broker's relay metrics, and the
desktop page driven as a person would (open, type the password, Connect, the first frame)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import aiohttp
import pytest
from playwright.sync_api import Page

from hostpool_operator.broker.relay import rdcleanpath as rcp
from support.broker_helpers import BrokerProcess
from support.cluster import Cluster
from support.desktop import NetnsAgent, XrdpHosts
from support.desktop_sessions import AgentHosts
from support.paths import REPO_ROOT
from support.portal import PortalFlags, portal_args
from support.signon import make_keys

WEB_CLIENT_SCRIPT = REPO_ROOT / "hack" / "portal" / "web-client.sh"


class WebClientError(RuntimeError):
    """The web client could not be installed; the message says why."""


def web_client_dir() -> Path:
    """The web client's directory (installed from the lockfile where missing)."""
    proc = subprocess.run(
        [str(WEB_CLIENT_SCRIPT)], capture_output=True, text=True, timeout=600, check=False
    )
    if proc.returncode != 0:
        raise WebClientError(f"web-client.sh failed: {proc.stderr.strip()[-800:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def cannot_run(reason: str) -> NoReturn:
    """Skip saying why; under CI (the desktops must run there) fail instead."""
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def web_client_or_stop() -> Path:
    """The web client's directory, or the test stops saying why (cannot_run)."""
    try:
        return web_client_dir()
    except WebClientError as error:
        cannot_run(str(error))


class WebDesktop:
    """One test's xrdp hosts with their agents (``hosts``, ``agents``), its pools that offer
    their desktops in the browser, and the brokers it starts to open them (``start_broker``).
    ``pool`` is the first pool made, ``path`` its desktop page."""

    def __init__(
        self,
        cluster: Cluster,
        brokers: Callable[..., BrokerProcess],
        hosts: XrdpHosts,
        agents: dict[str, NetnsAgent],
        *,
        web_flags: tuple[str, ...],
        portal: PortalFlags,
        signon_flags: tuple[str, ...],
    ) -> None:
        self.cluster = cluster
        self.hosts = hosts
        self.agents = agents
        self.pool = ""
        self._brokers = brokers
        self._web_flags = web_flags
        self._portal = portal
        self._signon_flags = signon_flags

    @property
    def path(self) -> str:
        """The first pool's desktop page, ``/desktop/{namespace}/{pool}``."""
        return f"/desktop/{self.cluster.namespace}/{self.pool}"

    def add_pool(
        self,
        name: str,
        hosts: Sequence[str],
        users: Sequence[str],
        *,
        limit: int = 2,
        connection: Mapping[str, object] | None = None,
    ) -> None:
        """A depth-first pool of ``hosts`` for ``users`` with ``connection.web`` on (and
        ``connection``'s other fields), then the agents of its hosts started: the
        SessionHosts exist before their agents report on them. On hosts that take one-time
        logon credentials the agents keep the logon state where the hosts' logon reads it."""
        self.cluster.setup_pool(
            name,
            "DepthFirst",
            limit,
            hosts=hosts,
            entitlements={"users": list(users), "groups": []},
            connection={"web": True, **(connection or {})},
        )
        self.pool = self.pool or name
        for host in hosts:
            logon = ("--logon-state", str(self.hosts.directory / host / "logon"))
            self.agents[host].start(*(logon if self._signon_flags else ()))

    def start_broker(self, *extra: str, portal: bool = True) -> BrokerProcess:
        """A broker serving the web client (with the portal unless ``portal`` is False, the
        logon key when the hosts take one-time credentials, then ``extra`` flags). The
        brokers of one WebDesktop share the portal's cookie secret: each is a replica of the
        others."""
        portal_flags = self._portal.args if portal else []
        return self._brokers(*portal_flags, *self._web_flags, *self._signon_flags, *extra)


class WebDesktops:
    """The browser-desktop tests' ``web_desktop`` fixture: called, it brings up xrdp hosts
    with their agents and, given ``pool``, a pool of them all with its agents started (see
    :meth:`WebDesktop.add_pool`). The test stops first, saying why, when the web client
    cannot be installed."""

    def __init__(
        self,
        cluster: Cluster,
        agent_hosts: AgentHosts,
        brokers: Callable[..., BrokerProcess],
        directory: Path,
    ) -> None:
        self._cluster = cluster
        self._agent_hosts = agent_hosts
        self._brokers = brokers
        self._directory = directory

    def __call__(
        self,
        hosts: Sequence[str],
        users: Mapping[str, str],
        *,
        first: int,
        pool: str | None = None,
        entitled: Sequence[str] | None = None,
        limit: int = 2,
        connection: Mapping[str, object] | None = None,
        signon: bool = False,
    ) -> WebDesktop:
        """``hosts`` with ``users`` (name: desktop password) from address ``first`` on;
        with ``pool``, that pool of them all for ``entitled`` (by default the users). With
        ``signon`` the hosts take one-time logon credentials signed by a key made here, and
        the brokers sign with it (uids recorded in this test's namespace)."""
        client_dir = web_client_or_stop()
        public: Path | None = None
        signon_flags: tuple[str, ...] = ()
        if signon:
            keys = self._directory / f"signon-{first}"
            keys.mkdir()
            private, public, _ = make_keys(keys)
            namespace = self._cluster.namespace
            signon_flags = ("--logon-key-file", str(private), "--uid-namespace", namespace)
        made, agents = self._agent_hosts(hosts, users, first=first, signon=public)
        desktop = WebDesktop(
            self._cluster,
            self._brokers,
            made,
            agents,
            web_flags=("--web-client-dir", str(client_dir)),
            portal=portal_args(self._directory / f"portal-{first}"),
            signon_flags=signon_flags,
        )
        if pool is not None:
            people = list(users) if entitled is None else entitled
            desktop.add_pool(pool, hosts, people, limit=limit, connection=connection)
        return desktop


def x224_request() -> bytes:
    """An X.224 Connection Request asking for TLS only (what the web client sends with
    CredSSP off)."""
    body = bytes([0x0E, 0xE0, 0, 0, 0, 0, 0, 0x01, 0x00, 0x08, 0x00, 1, 0, 0, 0])
    return bytes([3, 0]) + (len(body) + 4).to_bytes(2, "big") + body


@dataclass(frozen=True)
class RelayAnswer:
    """What the relay answered: the HTTP status of a refused upgrade (101 when it was
    upgraded) and, once upgraded, its first RDCleanPath PDU."""

    status: int
    pdu: rcp.Pdu | None = None
    body: str = ""


async def _try_relay(
    url: str, ticket: str, destination: str, headers: Mapping[str, str]
) -> RelayAnswer:
    async with aiohttp.ClientSession() as session:
        try:
            ws = await session.ws_connect(
                url, headers=dict(headers), timeout=aiohttp.ClientWSTimeout(ws_close=5)
            )
        except aiohttp.WSServerHandshakeError as refused:
            return RelayAnswer(refused.status, body=refused.message)
        async with ws:
            request = rcp.Pdu(destination=destination, proxy_auth=ticket, x224=x224_request())
            await ws.send_bytes(rcp.encode(request))
            message = await ws.receive(timeout=30)
            if message.type is not aiohttp.WSMsgType.BINARY:
                return RelayAnswer(101)
            return RelayAnswer(101, rcp.decode(message.data))


def try_relay(url: str, ticket: str, destination: str, headers: Mapping[str, str]) -> RelayAnswer:
    """One RDCleanPath request to the relay at ``url`` (ws://...), with ``headers``
    (Cookie and Origin, or Authorization); the connection is closed after the first answer."""
    # In a thread of its own: Playwright's sync API keeps an event loop in this one.
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, _try_relay(url, ticket, destination, headers)).result()


def connections_received(hosts: XrdpHosts, name: str) -> int:
    """TCP connections host ``name``'s xrdp has accepted so far (its log's lines)."""
    log = hosts.directory / name / "logs" / "xrdp.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return text.count("connection received from")


def metric(metrics_url: str, name: str, labels: str = "") -> float:
    """A sample of the broker's /metrics (0 when absent), e.g. ``metric(url,
    "hostpool_broker_web_relays_total", 'outcome="TicketUsed"')``."""
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def cookie_header(cookies: Mapping[str, str]) -> str:
    return "; ".join(f"{k}={v}" for k, v in cookies.items() if re.fullmatch(r"[\w.-]+", k))


#: The desktop page's hooks: the first frame drawn, or the page's error.
FIRST_FRAME_OR_ERROR = "#desktop[data-first-frame-ms], #desktop[data-desktop-state=error]"


def open_desktop(page: Page, url: str, password: str, *, wait: bool = True) -> int:
    """Open the desktop page, type the desktop password and click Connect; with ``wait``,
    the milliseconds from the click to the first frame as the page measured them (an
    AssertionError with the page's status when it did not connect), else 0."""
    page.goto(url)
    page.wait_for_selector("#desktop[data-client=ready]", state="attached", timeout=60_000)
    page.fill("#password", password)
    page.click('[data-action="connect"]')
    return first_frame(page) if wait else 0


def first_frame(page: Page, timeout_ms: float = 120_000) -> int:
    """Wait for the desktop page's first frame; its click-to-frame milliseconds."""
    frame = first_frame_or_none(page, timeout_ms)
    assert frame is not None, page.inner_text("#status")
    return frame


def first_frame_or_none(page: Page, timeout_ms: float = 120_000) -> int | None:
    """The same, or None when the page ended in an error instead (its status says why)."""
    page.wait_for_selector(FIRST_FRAME_OR_ERROR, state="attached", timeout=timeout_ms)
    root = page.locator("#desktop")
    if root.get_attribute("data-desktop-state") != "connected":
        return None
    return int(root.get_attribute("data-first-frame-ms") or "0")
