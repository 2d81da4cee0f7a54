"""Desktops in the browser, in tests and the portal bench: the web client's install
(``hack/portal/web-client.sh``), a bare RDCleanPath client of the broker's relay (what a
forger or a replayer would send), what a host saw, the broker's relay metrics, and the
desktop page driven as a person would (open, type the password, Connect, the first frame)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import aiohttp
import pytest
from playwright.sync_api import Page

from hostpool_operator.broker.relay import rdcleanpath as rcp
from support.desktop import XrdpHosts
from support.paths import REPO_ROOT

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
