"""The portal's page, end to end: headless chromium signed in through Keycloak's own form, the
broker with the portal against the suite's API server, the operator placing the requests.

Each user sees exactly the pools they are entitled to, by display name; a tile follows its
session live (no reload: the operator's and an agent's writes reach it through /v1/events);
Connect downloads the .rdp file of the assigned host; Log off ends the session; the page comes
in Swedish and Korean by Accept-Language; Tab reaches every button; with the event stream
refused the page polls. ``/v1/events`` itself: a bearer caller's stream, coalescing, the cap
per user, and a broker that stops promptly with streams open.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import pytest
from playwright.sync_api import Locator, Page, Route, expect

from hostpool_operator.access.names import request_name
from hostpool_operator.broker.pages import i18n
from hostpool_operator.logon import credential
from support.broker_helpers import BrokerProcess, Connecting, entitled_pool
from support.cluster import Cluster
from support.kube import MERGE_PATCH, Kube
from support.portal import portal_args, sign_in
from support.signon import make_keys
from support.web_desktop import web_client_or_stop

Obj = dict[str, Any]
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
#: Milliseconds a live change may take to reach the page (the operator's write, the watch,
#: the stream, the page; all on a busy two-core machine).
LIVE_MS = 15_000
#: How long the broker holds a connect before it answers 202 (its default).
CONNECT_TIMEOUT_MS = 30_000


class Site(NamedTuple):
    cluster: Cluster
    broker: BrokerProcess
    tokens: Callable[[str], str]


@pytest.fixture
def site(connecting: Connecting, tmp_path: Path) -> Site:
    """A broker with the portal and the browser's client in this test's namespace (the
    operator running)."""
    cluster, brokers, tokens = connecting
    flags = portal_args(tmp_path / f"portal-{secrets.token_hex(3)}")
    client = web_client_or_stop()
    return Site(cluster, brokers(*flags.args, "--web-client-dir", str(client)), tokens)


def signed_in(new_page: Callable[..., Page], site: Site, user: str, **options: Any) -> Page:
    """A fresh browser of ``user``, signed in and on the portal's page."""
    page = new_page(**options)
    sign_in(page, site.broker.url, user, PASSWORDS[user])
    expect(page.locator("#pools")).to_be_attached()
    return page


def tile(page: Page, cluster: Cluster, pool: str) -> Locator:
    return page.locator(f'[data-pool="{cluster.namespace}/{pool}"]')


def pools_shown(page: Page) -> set[str]:
    return set(page.locator("[data-pool]").evaluate_all("els => els.map(e => e.dataset.pool)"))


# ---------------------------------------------------------------------------------------
# what each user sees


def test_each_user_sees_exactly_their_pools_by_display_name(
    site: Site, new_page: Callable[..., Page]
) -> None:
    cluster = site.cluster
    ns = cluster.namespace
    entitled_pool(
        cluster,
        ["h1"],
        groups=["/finance-desk"],
        name="desk",
        displayName="Finance desktops",
        connection={"web": True},
    )
    entitled_pool(cluster, ["h2"], users=["bob"], name="bobs")
    entitled_pool(cluster, ["h3"], users=["alice"], name="small", limit=1)
    cluster.setup_pool("nobody", "DepthFirst", 2, hosts=["h4"])  # entitles no one

    alice = signed_in(new_page, site, "alice")
    bob = signed_in(new_page, site, "bob")
    expect(alice.locator("[data-pool]")).to_have_count(2)
    assert pools_shown(alice) == {f"{ns}/desk", f"{ns}/small"}
    assert pools_shown(bob) == {f"{ns}/bobs"}

    desk = tile(alice, cluster, "desk")
    expect(desk.locator("h3")).to_have_text("Finance desktops")
    expect(desk.locator(".availability")).to_have_text("Ready")
    expect(desk.locator('[data-action="browser"]')).to_be_visible()  # connection.web
    expect(desk.locator('[data-action="connect"]')).to_be_visible()
    expect(desk.locator('[data-action="logoff"]')).to_be_hidden()  # no session yet
    assert desk.get_attribute("data-state") == ""
    bobs = tile(bob, cluster, "bobs")
    expect(bobs.locator("h3")).to_have_text("bobs")  # no displayName: the name
    expect(bobs.locator('[data-action="browser"]')).to_be_hidden()
    expect(alice.locator("html")).to_have_attribute("lang", "en")
    expect(alice.locator('[data-action="signout"]')).to_be_visible()

    # A connect elsewhere (alice's own, by the API) takes the small pool's only slot: the
    # open page says Full and shows the session, live; a new display name shows too.
    taken = site.broker.connect(ns, "small", site.tokens("alice"))
    assert taken.status == 200, taken.text
    cluster.patch("HostPool", "desk", {"spec": {"displayName": "Finance (new)"}})
    expect(tile(alice, cluster, "small").locator(".availability")).to_have_text(
        "Full", timeout=LIVE_MS
    )
    expect(desk.locator("h3")).to_have_text("Finance (new)", timeout=LIVE_MS)
    expect(tile(alice, cluster, "small")).to_have_attribute(
        "data-state", re.compile("Connecting|Assigned"), timeout=LIVE_MS
    )


# ---------------------------------------------------------------------------------------
# a session, live: connect, its state, log off


def test_connect_downloads_the_rdp_file_and_the_tile_follows_the_session_live(
    site: Site, new_page: Callable[..., Page]
) -> None:
    cluster = site.cluster
    entitled_pool(cluster, ["h1", "h2"], groups=["/finance-desk"], name="desk", limit=2)
    page = signed_in(new_page, site, "alice")
    page.evaluate("window.notReloaded = true")
    desk = tile(page, cluster, "desk")
    expect(desk).to_have_attribute("data-state", "")

    with page.expect_download(timeout=60_000) as download:
        desk.locator('[data-action="connect"]').click()
    assert download.value.suggested_filename == "desk.rdp"
    rdp = Path(download.value.path()).read_text(encoding="utf-8-sig")
    placed = cluster.request(request_name(cluster.namespace, "desk", "alice"))
    host, address = placed["status"]["host"], placed["status"]["hostAddress"]
    assert f"full address:s:{address}:3389" in rdp
    assert "username:s:alice" in rdp
    expect(desk.locator(".message")).to_contain_text("desk.rdp")

    # The operator's Connecting, then an agent's Active: each reaches the open page.
    expect(desk).to_have_attribute("data-state", re.compile("Connecting|Assigned"), timeout=LIVE_MS)
    expect(desk.locator(".session")).to_contain_text(host)
    written = time.monotonic()
    cluster.patch_status("SessionRequest", placed["metadata"]["name"], {"sessionState": "Active"})
    expect(desk).to_have_attribute("data-state", "Active", timeout=LIVE_MS)
    took = time.monotonic() - written
    expect(desk.locator(".session")).to_have_text(f"Session: Active on {host}")
    expect(page.locator("#announce")).to_contain_text("Active")  # said to screen readers
    print(f"agent's write to the tile: {took * 1000:.0f} ms")

    # Log off: no agent reports for the host, so the broker deletes the request.
    desk.locator('[data-action="logoff"]').click()
    expect(desk).to_have_attribute("data-state", "", timeout=LIVE_MS)
    expect(desk.locator('[data-action="logoff"]')).to_be_hidden()
    cluster.wait(
        lambda: placed["metadata"]["name"] not in cluster.requests() or None, "request gone"
    )
    assert page.evaluate("window.notReloaded") is True  # all of it without a reload
    assert page.evaluate("document.documentElement.dataset.live") == "events"


def test_connect_on_a_single_sign_on_pool_shows_a_one_time_password_not_in_the_file(
    connecting: Connecting, new_page: Callable[..., Page], tmp_path: Path
) -> None:
    cluster, brokers, tokens = connecting
    private, _, key = make_keys(tmp_path)
    flags = portal_args(tmp_path / "portal")
    site = Site(
        cluster,
        brokers(
            *flags.args, "--logon-key-file", str(private), "--uid-namespace", cluster.namespace
        ),
        tokens,
    )
    entitled_pool(
        cluster, ["h1"], groups=["/finance-desk"], name="desk", connection={"singleSignOn": True}
    )
    page = signed_in(new_page, site, "alice")
    desk = tile(page, cluster, "desk")
    with page.expect_download(timeout=60_000) as download:
        desk.locator('[data-action="connect"]').click()
    rdp = Path(download.value.path()).read_text(encoding="utf-8-sig")
    secret = desk.locator('[data-logon="password"]')
    expect(secret).to_be_visible()
    password = secret.inner_text()
    assert password not in rdp
    placed = cluster.request(request_name(cluster.namespace, "desk", "alice"))
    claims = credential.verify(
        password, "alice", placed["status"]["host"], [key.public_key()], time.time()
    )
    assert claims.uid >= 1000
    expect(desk.locator(".message")).to_contain_text("one-time password")
    expect(desk.locator('[data-action="copy-password"]')).to_be_visible()


# ---------------------------------------------------------------------------------------
# languages and the keyboard


def test_a_full_pool_says_hosts_are_starting_and_connect_waits_for_the_new_host(
    site: Site, new_page: Callable[..., Page], kube: Kube
) -> None:
    """Connect's 202 path in the browser: a full pool that adds a host for alice shows
    "Hosts are starting" and "Waiting for a host…" while the host's Pod cannot be
    scheduled (a node label nobody has yet), then downloads the .rdp file once the Pod is
    Ready and the host takes her, with no reload."""
    cluster = site.cluster
    ns = cluster.namespace
    label = f"hostpool-e2e/portal-{secrets.token_hex(3)}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {label: "yes"},
            "containers": [{"name": "desktop", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    scaling = {"minHosts": 0, "maxHosts": 3, "hostTemplate": {"workload": pod}}
    entitled_pool(cluster, ["h1"], users=["alice", "bob"], name="grow", limit=1, scaling=scaling)
    taken = site.broker.connect(ns, "grow", site.tokens("bob"))  # h1's only slot
    assert taken.status == 200, taken.text

    page = signed_in(new_page, site, "alice")
    page.evaluate("window.notReloaded = true")
    grow = tile(page, cluster, "grow")
    expect(grow.locator(".availability")).to_have_text("Full", timeout=LIVE_MS)
    nodes = [n["metadata"]["name"] for n in kube.call("GET", "/api/v1/nodes")["items"]]
    try:
        with page.expect_download(timeout=120_000) as download:
            grow.locator('[data-action="connect"]').click()
            expect(grow.locator('[data-action="connect"]')).to_be_disabled()
            expect(grow.locator(".availability")).to_have_text(
                "Hosts are starting", timeout=LIVE_MS
            )
            expect(grow).to_have_attribute("data-state", "Pending", timeout=LIVE_MS)
            # The broker holds a connect up to its connect timeout, then answers 202; the
            # page says what the connect is waiting for, with the seconds so far, and asks
            # again after the Retry-After.
            expect(grow.locator(".message")).to_have_text(
                re.compile(r"Starting your desktop… \(\d+ s\)"),
                timeout=CONNECT_TIMEOUT_MS + LIVE_MS,
            )
            ref = grow.get_attribute("data-connect")
            for node in nodes:  # now the host's Pod can be scheduled and become Ready
                patch = {"metadata": {"labels": {label: "yes"}}}
                kube.call("PATCH", f"/api/v1/nodes/{node}", body=patch, content_type=MERGE_PATCH)
        assert download.value.suggested_filename == "grow.rdp"
    finally:
        for node in nodes:
            unlabel: Obj = {"metadata": {"labels": {label: None}}}
            kube.request("PATCH", f"/api/v1/nodes/{node}", body=unlabel, content_type=MERGE_PATCH)
    placed = cluster.request(request_name(ns, "grow", "alice"))
    assert placed["status"]["host"] != "h1"  # the host that was started for her
    # The reference the page was given finds her connect for the help desk: its wait for
    # the new host is its hostStart, the slowest phase.
    assert ref is not None
    assert re.fullmatch(r"[A-Z2-7]{8}", ref), ref
    (connect,) = placed["status"]["connects"]
    assert connect["ref"] == ref
    assert connect["phases"]["hostStart"] > 0, connect
    login = ["--kubeconfig", str(cluster.kube.kubeconfig), "-n", ns, "--id", ref]
    report = subprocess.run(
        [sys.executable, "-m", "hostpool_operator", "sessions", "diagnose", "alice", *login],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert f"connect {ref}  pool grow" in report, report
    assert any("hostStart" in line and "<- slowest" in line for line in report.splitlines())
    expect(grow.locator(".message")).to_contain_text("grow.rdp")
    expect(grow).to_have_attribute("data-state", re.compile("Connecting|Assigned"))
    assert page.evaluate("window.notReloaded") is True


def test_a_personal_pool_shows_the_callers_own_desktop_live(
    site: Site, new_page: Callable[..., Page], tmp_path: Path
) -> None:
    """A personal pool with Direct assignment: a user without a host reads that none is
    assigned to them; an administrator assigns one to alice and her tile says so without a
    reload, and Connect gets her .rdp file of that host; bob's tile is unchanged."""
    cluster = site.cluster
    ns = cluster.namespace
    entitled_pool(
        cluster,
        ["own-1"],
        users=["alice", "bob"],
        name="own",
        type="Personal",
        personal={"assignment": "Direct"},
    )
    alice, bob = signed_in(new_page, site, "alice"), signed_in(new_page, site, "bob")
    alice.evaluate("window.notReloaded = true")
    for page in (alice, bob):
        shown = tile(page, cluster, "own").locator(".availability")
        expect(shown).to_have_attribute("data-availability", "desktop_none", timeout=LIVE_MS)
        expect(shown).to_have_text("No desktop is assigned to you yet")

    cluster.patch("SessionHost", "own-1", {"spec": {"assignedUser": "alice"}})
    own = tile(alice, cluster, "own")
    shown = own.locator(".availability")
    expect(shown).to_have_attribute("data-availability", "desktop_running", timeout=LIVE_MS)
    expect(shown).to_have_text("Your desktop own-1 is running")
    with alice.expect_download(timeout=CONNECT_TIMEOUT_MS + LIVE_MS) as download:
        own.locator('[data-action="connect"]').click()
    assert download.value.suggested_filename == "own.rdp"
    placed = cluster.request(request_name(ns, "own", "alice"))
    assert (placed["status"]["host"], placed["status"]["reason"]) == ("own-1", "Personal")
    expect(own).to_have_attribute("data-state", re.compile("Connecting|Assigned"), timeout=LIVE_MS)
    alice.screenshot(path=str(tmp_path / "personal-page.png"))  # the README's picture
    assert alice.evaluate("window.notReloaded") is True
    expect(tile(bob, cluster, "own").locator(".availability")).to_have_attribute(
        "data-availability", "desktop_none"
    )


@pytest.mark.parametrize(
    ("accept", "lang", "connect", "signin"),
    [("sv-SE,sv;q=0.9,en;q=0.5", "sv", "Anslut", "Logga in"), ("ko-KR,ko", "ko", "연결", "로그인")],
)
def test_the_page_in_the_language_the_browser_asks_for(
    site: Site,
    new_page: Callable[..., Page],
    accept: str,
    lang: str,
    connect: str,
    signin: str,
) -> None:
    entitled_pool(site.cluster, ["h1"], groups=["/finance-desk"], name="desk")
    headers = {"Accept-Language": accept}
    visitor = new_page(extra_http_headers=headers)
    visitor.goto(site.broker.url + "/")
    expect(visitor.locator("html")).to_have_attribute("lang", lang)
    expect(visitor.locator('[data-action="signin"]')).to_have_text(signin)

    page = signed_in(new_page, site, "alice", extra_http_headers=headers)
    expect(page.locator("html")).to_have_attribute("lang", lang)
    button = tile(page, site.cluster, "desk").locator('[data-action="connect"]')
    expect(button).to_contain_text(connect)


def test_the_desktop_page_in_the_language_the_browser_asks_for(
    site: Site, new_page: Callable[..., Page]
) -> None:
    # Issue 50, item 5: the desktop page was English only.
    entitled_pool(site.cluster, ["h1"], users=["alice"], name="desk", connection={"web": True})
    page = signed_in(new_page, site, "alice", extra_http_headers={"Accept-Language": "tr"})
    page.goto(f"{site.broker.url}/desktop/{site.cluster.namespace}/desk")
    turkish = i18n.strings("tr")
    expect(page.locator("html")).to_have_attribute("lang", "tr")
    expect(page.locator('[data-action="connect"]')).to_have_text(turkish["connect"])
    label = turkish["desktop_password"].replace("{user}", "alice")
    expect(page.locator("label[for=password]")).to_have_text(label)
    expect(page.locator("#status")).to_have_text(turkish["desktop_not_connected"])
    # The script read its strings (the page's JSON) and loaded the client.
    expect(page.locator("#desktop")).to_have_attribute("data-client", "ready", timeout=60_000)


def test_tab_reaches_every_button_and_shows_where_the_focus_is(
    site: Site, new_page: Callable[..., Page]
) -> None:
    cluster = site.cluster
    entitled_pool(cluster, ["h1"], groups=["/finance-desk"], name="desk", connection={"web": True})
    entitled_pool(cluster, ["h2"], users=["alice"], name="mine")
    assert site.broker.connect(cluster.namespace, "mine", site.tokens("alice")).status == 200
    page = signed_in(new_page, site, "alice")
    expect(tile(page, cluster, "mine").locator('[data-action="logoff"]')).to_be_visible()

    wanted = set(
        page.locator("button:visible").evaluate_all(
            "els => els.map(e => `${e.closest('[data-pool]')?.dataset.pool ?? ''}`"
            " + ` ${e.dataset.action}`)"
        )
    )
    assert len(wanted) == 5, wanted  # connect x2, browser, logoff, sign out
    reached: set[str] = set()
    outlines: set[str] = set()
    for _ in range(40):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "() => { const e = document.activeElement;"
            " return e && e.tagName === 'BUTTON' ? [`${e.closest('[data-pool]')?.dataset.pool"
            " ?? ''} ${e.dataset.action}`, getComputedStyle(e).outlineStyle] : null; }"
        )
        if focused:
            reached.add(focused[0])
            outlines.add(focused[1])
        if reached >= wanted:
            break
    assert reached >= wanted, wanted - reached
    assert "none" not in outlines, outlines
    # Each button's name says which pool it acts on (the label, then the pool's name).
    names = page.get_by_role("button", name="Connect desk")
    expect(names).to_have_count(1)


# ---------------------------------------------------------------------------------------
# the fallback: polling while the event stream is refused


def test_without_the_event_stream_the_page_polls(site: Site, new_page: Callable[..., Page]) -> None:
    cluster = site.cluster
    entitled_pool(cluster, ["h1"], groups=["/finance-desk"], name="desk")
    page = new_page()

    def refuse(route: Route) -> None:
        route.fulfill(status=503, body="no stream")

    page.route("**/v1/events", refuse)
    sign_in(page, site.broker.url, "alice", PASSWORDS["alice"])
    expect(page.locator("html")).to_have_attribute("data-live", "polling", timeout=LIVE_MS)
    expect(page.locator("#live-paused")).to_be_visible()
    cluster.patch("HostPool", "desk", {"spec": {"displayName": "Polled"}})
    expect(tile(page, cluster, "desk").locator("h3")).to_have_text("Polled", timeout=LIVE_MS)


# ---------------------------------------------------------------------------------------
# /v1/events over HTTP


class EventStream:
    """One ``GET /v1/events``, read on a thread: the events' data, with when they came."""

    def __init__(self, broker: BrokerProcess, headers: dict[str, str]) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", broker.port, timeout=60)
        self.connection.request("GET", "/v1/events", headers=headers)
        self.socket = self.connection.sock
        self.response = self.connection.getresponse()
        self.events: list[tuple[float, Obj]] = []
        self.comments = 0
        self.ended = threading.Event()
        if self.response.status == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for raw in self.response:
                line = raw.decode().rstrip("\n")
                if line.startswith("data: "):
                    self.events.append((time.monotonic(), orjson.loads(line[6:])))
                elif line.startswith(":"):
                    self.comments += 1
        except (OSError, ValueError, AttributeError):
            pass  # closed by the test (http.client drops its file under the reader)
        self.ended.set()

    def wait(self, check: Callable[[Obj], bool], timeout: float = 30.0) -> Obj:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _, body in reversed(self.events):
                if check(body):
                    return body
            time.sleep(0.05)
        raise AssertionError(f"no such event in {timeout}s: {self.events[-3:]}")

    def close(self) -> None:
        # Shut down first: closing alone waits for the reader's blocked read to return,
        # which is the broker's next keep-alive comment (seconds for every stream).
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)
        self.connection.close()


@pytest.fixture
def streams() -> Iterator[Callable[[BrokerProcess, dict[str, str]], EventStream]]:
    opened: list[EventStream] = []

    def open_stream(broker: BrokerProcess, headers: dict[str, str]) -> EventStream:
        stream = EventStream(broker, headers)
        opened.append(stream)
        return stream

    yield open_stream
    for stream in opened:
        stream.close()


@pytest.mark.solo  # it times the events as the client reads them
def test_events_for_a_bearer_caller_coalesced_and_capped(
    site: Site, streams: Callable[[BrokerProcess, dict[str, str]], EventStream]
) -> None:
    cluster, broker = site.cluster, site.broker
    entitled_pool(cluster, ["h1"], groups=["/finance-desk"], name="desk")
    auth = {"Authorization": f"Bearer {site.tokens('alice')}"}
    stream = streams(broker, auth)
    assert stream.response.status == 200
    assert stream.response.getheader("Content-Type") == "text/event-stream"
    first = stream.wait(lambda body: len(body["pools"]) == 1)
    assert first["pools"][0]["session"] is None
    assert first["pools"][0]["displayName"] == "desk"

    assert broker.connect(cluster.namespace, "desk", auth["Authorization"][7:]).status == 200
    placed = stream.wait(lambda body: body["pools"][0]["session"] is not None)
    assert placed["pools"][0]["session"]["host"] == "h1"
    # The same body as /v1/pools, key for key.
    listed = broker.pools(auth["Authorization"][7:]).body
    assert stream.wait(lambda body: body == listed) == listed

    # Twenty changes in about two seconds: at most one event per half second.
    before = len(stream.events)
    started = time.monotonic()
    for i in range(20):
        cluster.patch("HostPool", "desk", {"spec": {"displayName": f"name {i}"}})
        time.sleep(0.1)
    stream.wait(lambda body: body["pools"][0]["displayName"] == "name 19")
    took = time.monotonic() - started
    sent = stream.events[before:]
    assert len(sent) <= took / 0.5 + 2, (len(sent), took)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(sent)]
    # Times are the client's: one event read late shortens the next gap by as much as it
    # lengthened its own, so the gaps are half a second on average, none much shorter.
    assert all(gap >= 0.25 for gap in gaps), gaps
    assert sum(gaps) / len(gaps) >= 0.45, gaps

    # Eight streams a user at once; the ninth is refused, as is a caller with no token.
    more = [streams(broker, auth) for _ in range(7)]
    assert all(s.response.status == 200 for s in more)
    ninth = streams(broker, auth)
    assert ninth.response.status == 429
    assert orjson.loads(ninth.response.read())["reason"] == "TooManyStreams"
    nobody = streams(broker, {})
    assert nobody.response.status == 401
    assert orjson.loads(nobody.response.read())["reason"] == "Unauthorized"
    # Another user's stream tells them nothing of alice's pool.
    bob = streams(broker, {"Authorization": f"Bearer {site.tokens('bob')}"})
    assert bob.wait(lambda body: True) == {"pools": []}
    metrics = broker.metrics()
    assert "hostpool_broker_event_streams 9.0" in metrics  # alice's eight and bob's
    refused = '{code="429",endpoint="events",reason="TooManyStreams"} 1.0'
    assert f"hostpool_broker_answers_total{refused}" in metrics


def test_a_broker_with_streams_open_stops_at_once(
    site: Site, streams: Callable[[BrokerProcess, dict[str, str]], EventStream]
) -> None:
    entitled_pool(site.cluster, ["h1"], groups=["/finance-desk"], name="desk")
    auth = {"Authorization": f"Bearer {site.tokens('alice')}"}
    opened = [streams(site.broker, auth) for _ in range(5)]
    for stream in opened:
        stream.wait(lambda body: bool(body["pools"]))
    started = time.monotonic()
    site.broker.stop()
    took = time.monotonic() - started
    assert took < 5, f"the broker took {took:.1f}s to stop with streams open"
    assert all(stream.ended.wait(5) for stream in opened)
