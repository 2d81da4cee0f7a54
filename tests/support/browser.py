"""A real browser for the portal's tests: Debian's chromium, headless, driven by Playwright.

Playwright comes from PyPI (the ``test`` extra); its own browser downloads are never used
(``playwright install`` is not run): the browser is Debian's ``chromium``, installed with
``hack/cluster/apt-install.sh`` where missing. Missing and not installable, a test that
needs it skips saying why; under CI (``CI=true``) it fails instead.

Fixtures (a plugin of tests/conftest.py: every test module has them, none imports them):

- ``browser``: one chromium per test module (``--no-sandbox``: the tests run as root).
  Not one per session: Playwright's sync API runs its event loop in a greenlet of the main
  thread, and while it is started that loop counts as the thread's running loop, so every
  later ``asyncio.run`` in the session (any unit test) would fail. Leaving the module stops
  it and clears the loop.
- ``new_page``: a factory of pages, each in a fresh context (its own cookies: one context
  is one person's browser). A failing test's report gets each page's console log, its URL
  and a screenshot (saved in the test's temporary directory; the report names the file).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from support.paths import REPO_ROOT
from support.report_logs import EXTRA_LOGS

APT_INSTALL = REPO_ROOT / "hack" / "cluster" / "apt-install.sh"
#: Debian packages of the browser (apt-install.sh lists them in its TEST_PACKAGES).
BROWSER_PACKAGES = ("chromium",)
#: The browser itself (Debian's /usr/bin/chromium is a shell wrapper around it).
CHROMIUM = Path("/usr/lib/chromium/chromium")
#: Console lines kept per page for a failure report.
CONSOLE_LINES = 200


class BrowserError(RuntimeError):
    """The browser cannot run here; the message says why."""


def chromium() -> Path:
    """The chromium binary, installed with apt-install.sh where missing."""
    if CHROMIUM.is_file():
        return CHROMIUM
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise BrowserError(f"{CHROMIUM} missing and cannot be installed (needs apt-get and root)")
    argv = [str(APT_INSTALL), "--no-install-recommends", *BROWSER_PACKAGES]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0 or not CHROMIUM.is_file():
        raise BrowserError(f"{' '.join(argv)} failed: {proc.stderr.strip()[-800:]}")
    return CHROMIUM


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true, but the browser cannot run: {reason}", pytrace=False)
    pytest.skip(f"the browser cannot run: {reason}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless chromium for one test module (see the module's docstring for why)."""
    try:
        binary = chromium()
    except BrowserError as exc:
        _unavailable(str(exc))
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(binary),
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        try:
            yield launched
        finally:
            launched.close()
    if _running_loop() is not None:
        pytest.fail("Playwright left an event loop running in the test thread", pytrace=False)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _Watched:
    """A page's console log and, on demand, a screenshot: for a failing test's report."""

    def __init__(self, page: Page, shot: Path) -> None:
        self.page = page
        self.shot = shot
        self.console: list[str] = []
        page.on("console", lambda message: self._add(f"{message.type}: {message.text}"))
        page.on("pageerror", lambda error: self._add(f"page error: {error}"))

    def _add(self, line: str) -> None:
        self.console.append(line[:2000])
        del self.console[:-CONSOLE_LINES]

    def report(self) -> str:
        try:
            self.page.screenshot(path=str(self.shot), full_page=True)
            shot = f"screenshot: {self.shot}"
        except Exception as exc:  # the page may be gone: the log still counts
            shot = f"(no screenshot: {exc})"
        try:
            url = self.page.url
        except Exception:
            url = "(closed)"
        return "\n".join([f"url: {url}", shot, *self.console])


@pytest.fixture
def new_page(
    browser: Browser, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Page]]:
    """``new_page(**context_options)``: a page in a fresh browser context (Playwright's
    ``new_context`` options, e.g. ``locale="sv-SE"``, ``extra_http_headers``)."""
    contexts: list[BrowserContext] = []
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])

    def make(**options: Any) -> Page:
        context = browser.new_context(**options)
        contexts.append(context)
        page = context.new_page()
        watched = _Watched(page, tmp_path / f"page-{len(contexts) - 1}.png")
        logs.append((f"browser page {len(contexts) - 1}", watched.report))
        return page

    yield make
    for context in contexts:
        with contextlib.suppress(Exception):  # already closed with the browser
            context.close()
