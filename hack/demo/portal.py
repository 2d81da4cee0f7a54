"""`make demo-portal` (after `make demo`): the portal, in your browser.

Starts Keycloak (realm ``corp``: alice and carol in /finance-desk, bob in none; with the
desktops also dave, in no group) with two clients, ``hostpool-desktops`` (the API's, as
``make demo-broker``) and ``hostpool-portal`` (the portal's: confidential, standard flow,
redirect URI ``<url>/auth/callback``), and ``hostpool-broker`` with the portal on
http://127.0.0.1:8443 (its client secret and cookie key as files, the browser RDP client of
``hack/portal/web-client.sh``). The pool ``desktops`` of ``make demo-broker`` (two hosts that
are only names: Connect hands out an .rdp file) is shown as "Finance desktops".

As root, with the demo's hosts' bridge, it also brings up what ``make demo-desktop`` does:
the xrdp host ``xrdp-1`` with its agent, a real kubelet node for the pool's pod-backed host,
and the pool ``xrdp-desks`` ("Linux desktops", for alice, bob and carol, local accounts of
its hosts who type the host's password), here with ``connection.web: true``, so that "Open in
browser" draws the desktop in the page. It does not open FreeRDP sessions for the users as
``make demo-desktop`` does: they log on from the portal. ``--no-desktops`` leaves that part
out (and so does a machine that cannot run it, saying why).

With the desktops comes single sign-on: a second xrdp host, ``xrdp-sso``, on the same
bridge with no local users and the project's verifier (``hostpool-logon``) first in its PAM
stack, trusting the public half of a logon key made once for the demo; its agent keeps the
logon state (the host's refusals become Events). The pool ``sso-desks`` ("Linux desktops,
one sign-in", ``connection: {web: true, singleSignOn: true}``) is dave's alone, and the
broker signs his one-time credentials with that key and allocates his uid, recorded in the
demo's namespace. dave is no account on the machine until his first logon makes it.

It checks that the portal answers and hands the sign-in to Keycloak; alice signs in with
headless chromium, downloads the .rdp file and opens her Linux desktop in the page after
typing the host's password; dave signs in and opens his desktop with no password anywhere,
and the demo shows on the host that the session runs as dave with the uid the broker
recorded. It prints the URL, the users and their passwords, and then shows the users'
sessions as they change until Ctrl-C (``--no-wait``: it returns at once). Everything keeps
running; ``make demo-down`` stops it, and removes the account dave's logon made.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The tests' support package (control plane, Keycloak, desktops) does the set-up here too.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hack/: the other demos

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from kubernetes import client, config

from demo import broker as demo_broker
from demo import desktop as demo_desktop
from hostpool_operator.access.names import request_name
from hostpool_operator.logon import credential, uids
from support.desktop import XrdpHosts, session_processes, why_not
from support.keycloak import User, portal_client

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / ".cluster"
WORK = CLUSTER / "demo-portal"
NAMESPACE = demo_broker.NAMESPACE
#: The address to open: the redirect URI, the cookie and the CSRF origin are made of it.
PUBLIC_URL = f"http://127.0.0.1:{demo_broker.BROKER_PORT}"
PORTAL_CLIENT, PORTAL_SECRET = "hostpool-portal", "demo-portal-secret"
#: Single sign-on: the pool, its host (on the demo's bridge next to xrdp-1, with the
#: verifier first in its PAM stack) and its person, whom Keycloak knows and no host does.
SSO_POOL, SSO_HOST = "sso-desks", demo_desktop.SSO_HOSTS[0]
SSO_USER: User = ("dave", "dave-pw", [])
#: The comment the verifier gives the accounts it makes (xrdp-hosts.sh down removes them).
SSO_ACCOUNT = "hostpool single sign-on"
#: The broker's logon key (made once, owner-only) and its public half, which the host trusts.
LOGON_KEY, LOGON_PUBLIC = WORK / "logon-key.pem", WORK / "logon-keys.pem"
#: The pools' names on the page.
DISPLAY_NAMES = {
    demo_broker.POOL: "Finance desktops",
    demo_desktop.POOL: "Linux desktops",
    SSO_POOL: "Linux desktops, one sign-in",
}
GROUP, VERSION = demo_broker.GROUP, demo_broker.VERSION


def say(message: str) -> None:
    print(f"demo-portal: {message}", flush=True)


def demo_portal_client() -> dict[str, Any]:
    """The portal's client as docs/portal.md ("Install") sets it up: confidential, standard
    flow only, PKCE S256, the exact redirect URI, and the groups and audience mappers."""
    return portal_client(
        PORTAL_CLIENT, PORTAL_SECRET, redirect_uris=[f"{PUBLIC_URL}/auth/callback"]
    )


def secret_file(name: str, value: str) -> Path:
    """A secret the broker reads from a file (as the chart mounts them), owner-only."""
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / name
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(value)
    return path


def web_client_dir() -> str | None:
    """The browser RDP client (npm, hack/portal's lockfile; cached), or None with a reason."""
    script = ROOT / "hack" / "portal" / "web-client.sh"
    started = time.monotonic()
    proc = subprocess.run([str(script)], stdout=subprocess.PIPE, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        say("no browser RDP client (hack/portal/web-client.sh failed, above)")
        return None
    say(f"browser RDP client: {time.monotonic() - started:.1f} s")
    return lines[-1]


def logon_key() -> Path:
    """The broker's Ed25519 logon key, made once under the demo's directory (0600), with its
    public half next to it; returns the public half's path."""
    WORK.mkdir(parents=True, exist_ok=True)
    if not LOGON_KEY.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        fd = os.open(LOGON_KEY, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        LOGON_PUBLIC.write_bytes(credential.public_pem(key))
        say(f"the broker's logon key made: {os.path.relpath(LOGON_KEY, Path.cwd())}")
    LOGON_KEY.chmod(0o600)
    return LOGON_PUBLIC


def signon_flags() -> list[str]:
    """Single sign-on: the broker signs one-time logon credentials with the key, and
    allocates each person's uid, recorded as ConfigMaps in the demo's namespace."""
    return ["--logon-key-file", str(LOGON_KEY), "--uid-namespace", NAMESPACE]


def why_no_signon() -> str:
    """Why the single sign-on host cannot be shown here ('' when it can)."""
    verifier = Path(sys.executable).with_name("hostpool-logon")
    if not os.access(verifier, os.X_OK):
        return f"no verifier {verifier} (pip install -e . makes it)"
    name = SSO_USER[0]
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        return ""
    if account.pw_gecos != SSO_ACCOUNT:
        # The verifier refuses a person whose name is a local account of another uid.
        return f"{name} is a local account here already (uid {account.pw_uid})"
    return ""


def portal_flags(web_client: str | None) -> list[str]:
    cookie = secret_file("cookie-secret", secrets.token_urlsafe(48))
    client_secret = secret_file("client-secret", PORTAL_SECRET)
    flags = [
        "--portal-client-id",
        PORTAL_CLIENT,
        "--portal-client-secret-file",
        str(client_secret),
        "--cookie-secret-file",
        str(cookie),
        "--public-url",
        PUBLIC_URL,
    ]
    if web_client:
        flags += ["--web-client-dir", web_client]
    return flags


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def check_portal(issuer: str) -> None:
    """The page answers, and /auth/login sends the browser to Keycloak with the redirect URI
    registered for the portal's client."""
    with urllib.request.urlopen(f"{PUBLIC_URL}/", timeout=10) as answer:
        kind = answer.headers.get("Content-Type", "")
        if answer.status != 200 or not kind.startswith("text/html"):
            raise SystemExit(f"demo-portal: GET / answered {answer.status} {kind}")
    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(f"{PUBLIC_URL}/auth/login", timeout=10)
        raise SystemExit("demo-portal: GET /auth/login did not redirect to Keycloak")
    except urllib.error.HTTPError as redirect:
        location = redirect.headers.get("Location", "")
        if redirect.code not in (302, 303) or not location.startswith(issuer):
            raise SystemExit(
                f"demo-portal: GET /auth/login answered {redirect.code} to {location!r}"
            ) from None
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
    if query.get("redirect_uri") != [f"{PUBLIC_URL}/auth/callback"]:
        raise SystemExit(f"demo-portal: the sign-in's redirect_uri is {query.get('redirect_uri')}")
    say(f"the portal answers; its sign-in goes to {issuer}")


@contextlib.contextmanager
def signed_in_page(user: str, password: str) -> Iterator[Any]:
    """The user's portal page, signed in as a person would (headless chromium, Keycloak's
    own form), its pools listed; None, saying why, where chromium cannot run."""
    try:
        from playwright.sync_api import sync_playwright

        from support.browser import BrowserError, chromium
        from support.portal import sign_in

        executable = chromium()
    except (ImportError, BrowserError) as error:
        say(f"no sign-in check in a browser here: {error}")
        yield None
        return
    started = time.monotonic()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(executable), headless=True, args=["--no-sandbox"]
        )
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            sign_in(page, PUBLIC_URL, user, password)
            page.wait_for_selector("[data-pool] h3:not(:empty)", timeout=30_000)
            tiles = page.eval_on_selector_all(
                "[data-pool] h3", "headings => headings.map(h => h.textContent)"
            )
            say(
                f"{user} signed in with headless chromium through Keycloak's form in "
                f"{time.monotonic() - started:.1f} s; the page shows {', '.join(tiles)}"
            )
            yield page
        finally:
            browser.close()


def sign_in_check(user: str, password: str, *, desktop: bool) -> None:
    """One user signs in, Connect on the pool of names downloads its .rdp file and, with
    ``desktop``, "Open in browser" draws their Linux desktop (then Disconnect leaves the
    session for them to take up). Skipped, saying why, where chromium cannot run."""
    with signed_in_page(user, password) as page:
        if page is None:
            return
        connect_check(page, user)
        if desktop:
            browser_desktop_check(page, user)
        page_shot(page, user)


def connect_check(page: Any, user: str) -> None:
    """Connect on the pool of names: the .rdp file the browser downloads."""
    tile = f'[data-pool="{NAMESPACE}/{demo_broker.POOL}"]'
    with page.expect_download(timeout=60_000) as download:
        page.click(f'{tile} [data-action="connect"]')
    rdp = WORK / download.value.suggested_filename
    download.value.save_as(rdp)
    address = next(
        (line for line in rdp.read_text().splitlines() if line.startswith("full address")),
        "no full address",
    )
    name = page.text_content(f"{tile} h3")
    say(f"{user} clicked Connect on {name}: {rdp.name} downloaded ({address})")


def screenshot(page: Any, name: str, settle_ms: int) -> str:
    """A screenshot of ``page`` once ``settle_ms`` have passed (what was last changed drawn),
    saved as ``name``.png in the demo's directory; its path, to show."""
    page.wait_for_timeout(settle_ms)
    shot = WORK / f"{name}.png"
    page.screenshot(path=str(shot))
    return os.path.relpath(shot, Path.cwd())


def page_shot(page: Any, user: str) -> None:
    """A screenshot of the user's page as it stands now (their sessions on the tiles)."""
    page.bring_to_front()
    say(f"{user}'s page: screenshot {screenshot(page, f'{user}-portal', 1500)}")


def browser_desktop_check(page: Any, user: str) -> None:
    """Open in browser on the Linux desktops: the desktop page in a new tab, the desktop
    password, the first frame (a screenshot), then Disconnect."""
    from support.web_desktop import first_frame_or_none

    tile = f'[data-pool="{NAMESPACE}/{demo_desktop.POOL}"]'
    with page.context.expect_page(timeout=30_000) as opened:
        page.click(f'{tile} [data-action="browser"]')
    desk = opened.value
    desk.wait_for_selector("#desktop[data-client=ready]", state="attached", timeout=60_000)
    desk.fill("#password", demo_desktop.USERS[user])
    desk.click('[data-action="connect"]')
    first_ms = first_frame_or_none(desk)
    if first_ms is None:
        say(f"{user}'s desktop in the browser did not connect: {desk.inner_text('#status')}")
        return
    shot = screenshot(desk, f"{user}-in-the-browser", 2000)  # drawn past its first frame
    say(
        f"{user} opened {page.text_content(f'{tile} h3')} in the browser: first frame "
        f"{first_ms} ms after Connect; screenshot {shot}"
    )
    follow_the_window(desk, user)
    desk.click('[data-action="disconnect"]')
    desk.wait_for_selector("#desktop[data-desktop-state=closed]", state="attached")
    say(f"{user} disconnected: the session waits, Disconnected, for {user} to come back")


#: The window the demo's desktop is resized to: the desktop follows it, in the same session.
RESIZED = {"width": 1100, "height": 660}


def follow_the_window(desk: Any, user: str) -> None:
    """The browser window resized: the desktop takes the new size (RDP display control,
    no new logon), and a screenshot shows it fitted."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    root = desk.locator("#desktop")
    before = root.get_attribute("data-desktop-size")
    desk.set_viewport_size(RESIZED)
    wanted = f"{RESIZED['width']}x{RESIZED['height']}"
    try:
        desk.wait_for_selector(
            f"#desktop[data-desktop-size='{wanted}'][data-resize-ms]",
            state="attached",
            timeout=20_000,
        )
    except PlaywrightTimeout:  # the demo says what it saw and goes on
        say(f"{user}'s desktop did not follow the window to {wanted} (it is {before})")
        return
    shot = screenshot(desk, f"{user}-fitted-in-the-browser", 1000)  # drawn at its new size
    say(
        f"{user} resized the window: the desktop went from {before} to {wanted} in "
        f"{root.get_attribute('data-resize-ms')} ms, the same session; screenshot {shot}"
    )


def single_sign_on_check(objects: Any, core: Any) -> None:
    """dave signs in at the portal and opens the single sign-on pool's desktop in the
    browser: the page asks for no password and connects by itself, the broker's one-time
    credential logs him on, and on the host the session is his, under the uid the broker
    recorded for him. Then Disconnect leaves the session for him to take up."""
    from support.web_desktop import first_frame_or_none

    user, password, _ = SSO_USER
    with signed_in_page(user, password) as page:
        if page is None:
            return
        tile = f'[data-pool="{NAMESPACE}/{SSO_POOL}"]'
        opened_at = time.monotonic()
        with page.context.expect_page(timeout=30_000) as opened:
            page.click(f'{tile} [data-action="browser"]')
        desk = opened.value
        desk.wait_for_selector("#desktop[data-client=ready]", state="attached", timeout=60_000)
        if desk.locator("#password").is_visible():
            raise SystemExit(f"demo-portal: {user}'s desktop page asks for a password")
        first_ms = first_frame_or_none(desk)
        total = time.monotonic() - opened_at
        if first_ms is None:
            say(f"{user}'s single sign-on desktop did not connect: {desk.inner_text('#status')}")
            return
        shot = screenshot(desk, f"{user}-signed-on-in-the-browser", 2000)
        say(
            f"{user} opened {page.text_content(f'{tile} h3')} in the browser with no password "
            f"asked or typed (the page connected by itself): first frame {first_ms} ms after "
            f"its connect, {total:.1f} s after Open in browser; screenshot {shot}"
        )
        on_the_host(objects, core, user)
        desk.click('[data-action="disconnect"]')
        desk.wait_for_selector("#desktop[data-desktop-state=closed]", state="attached")
        say(f"{user} disconnected: the session waits, Disconnected, for {user} to come back")
        page_shot(page, user)


def on_the_host(objects: Any, core: Any, user: str) -> None:
    """What the host shows of the session: the agent reports it Active on the single
    sign-on host, the account the verifier made has the uid the broker recorded, and the
    session's processes (its Xorg) run as that account in the host's network namespace."""

    def active() -> str | None:
        request = objects.get_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "sessionrequests", request_name(NAMESPACE, SSO_POOL, user)
        )
        status = request.get("status") or {}
        return status.get("host") if status.get("sessionState") == "Active" else None

    host = demo_desktop.wait_for(f"{user}'s session to be Active", active)
    record = core.read_namespaced_config_map(uids.record_name(user), NAMESPACE)
    recorded = int(record.data["uid"])
    account = pwd.getpwnam(user)
    env = demo_desktop.WORK / "hosts" / SSO_HOST / "host.env"
    netns = dict(line.split("=", 1) for line in env.read_text().splitlines())["NETNS"]
    xorg = [pid for pid, args in session_processes(user) if "Xorg" in args]
    where = {
        subprocess.run(
            ["ip", "netns", "identify", str(pid)], capture_output=True, text=True, check=False
        ).stdout.strip()
        for pid in xorg
    }
    same = "the same" if account.pw_uid == recorded else "NOT the same"
    say(
        f"on the host: the agent reports {user}'s session Active on {host}; the broker "
        f"recorded uid {recorded} for {user} (ConfigMap {record.metadata.name}), and the "
        f"account the verifier made at the first logon ({account.pw_gecos!r}, home "
        f"{account.pw_dir}) has uid {account.pw_uid}: {same}; the session's Xorg runs as "
        f"{user} in {', '.join(sorted(where)) or 'no network namespace'} ({SSO_HOST}'s is {netns})"
    )
    if account.pw_uid != recorded or where != {netns}:
        raise SystemExit("demo-portal: the single sign-on session is not as the broker decided")


def show_pools(objects: Any) -> None:
    """Each pool's name on the page (spec.displayName)."""
    found = objects.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "hostpools")
    for pool in found["items"]:
        name = pool["metadata"]["name"]
        if name in DISPLAY_NAMES:
            patch = {"spec": {"displayName": DISPLAY_NAMES[name]}}
            objects.patch_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, "hostpools", name, patch
            )


def why_no_desktops() -> str:
    if os.geteuid() != 0:
        return "not root (network namespaces, local users and a kubelet need it)"
    if not demo_desktop.cluster_state().get("HOSTS_BRIDGE"):
        return (
            "the demo's control plane serves on no hosts' bridge "
            "(`make demo-down && make demo` as root)"
        )
    return demo_desktop.real_node_problem() or why_not()


def make_sso_pool(objects: Any) -> None:
    """The single sign-on pool: its host, for dave alone, in the browser and signing him on."""
    pool = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HostPool",
        "metadata": {"name": SSO_POOL},
        "spec": {
            "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 2},
            "entitlements": {"users": [SSO_USER[0]]},
            "connection": {"web": True, "singleSignOn": True},
        },
    }
    demo_desktop.apply(objects, "hostpools", pool)
    host = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SessionHost",
        "metadata": {"name": SSO_HOST},
        "spec": {"poolRef": {"name": SSO_POOL}},
    }
    demo_desktop.apply(objects, "sessionhosts", host)
    say(f"pool {SSO_POOL}: {SSO_HOST}, for {SSO_USER[0]}, connection web and singleSignOn")


def bring_up_desktops(kubeconfig: Path, objects: Any, core: Any, *, signon: bool) -> None:
    """make demo-desktop's hosts, agents and pool, the pool opened to the browser; no
    FreeRDP logons (the users log on from the portal). With ``signon`` also the single
    sign-on host (no local users; it trusts the broker's logon key), its agent and pool."""
    bridge = demo_desktop.bridge_of_cluster()
    demo_desktop.WORK.mkdir(parents=True, exist_ok=True)
    image = demo_desktop.ensure_real_node(kubeconfig)
    hosts = XrdpHosts(demo_desktop.WORK / "hosts", bridge)
    made = dict(hosts.up(demo_desktop.HOSTS, demo_desktop.USERS))
    if signon:
        # The hosts already up are left as they are: only the new one takes credentials.
        made = hosts.up((*demo_desktop.HOSTS, SSO_HOST), {}, signon=logon_key())
    for host in made.values():
        kind = ", single sign-on: hostpool-logon first in PAM" if host.name == SSO_HOST else ""
        say(f"xrdp host {host.name} at {host.address} (network namespace {host.netns}{kind})")
    demo_desktop.make_pool(objects, core)
    objects.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        NAMESPACE,
        "hostpools",
        demo_desktop.POOL,
        {"spec": {"connection": {"web": True}}},
    )
    if signon:
        make_sso_pool(objects)
    demo_desktop.start_agents(kubeconfig, hosts)
    if signon:
        demo_desktop.start_agents(kubeconfig, hosts, (SSO_HOST,), logon=True)
    # After make demo-desktop its users' sessions may fill a host: up and full is up.
    demo_desktop.wait_for(
        f"{', '.join(demo_desktop.HOSTS)} to take sessions",
        lambda: demo_desktop.hosts_taking_sessions(objects, full_ok=True),
        timeout=120,
    )
    if signon:
        demo_desktop.wait_for(
            f"{SSO_HOST} to take sessions",
            lambda: demo_desktop.hosts_taking_sessions(objects, full_ok=True, pool=SSO_POOL),
            timeout=120,
        )
    demo_desktop.let_pool_scale(objects, image)


def print_users(desktops: bool, signon: bool, web_client: str | None) -> None:
    finance = DISPLAY_NAMES[demo_broker.POOL]
    linux = DISPLAY_NAMES[demo_desktop.POOL]
    sso = DISPLAY_NAMES[SSO_POOL]
    in_browser = " (also in the browser)" if web_client else ""
    print(f"\nOpen {PUBLIC_URL}/ (exactly: the cookie and the redirect URI are for it)\n")
    print(f"  {'user':<6} {'sign-in password':<17} {'desktop password':<22} pools")
    rows: list[tuple[User, str]] = [
        (person, demo_desktop.USERS.get(person[0], "") if desktops else "")
        for person in demo_broker.USERS
    ]
    if signon:
        rows.append((SSO_USER, "none (single sign-on)"))
    for (user, password, groups), desk in rows:
        pools = [finance] if "/finance-desk" in groups else []
        if desktops and user in demo_desktop.USERS:
            pools.append(linux + in_browser)
        if signon and user == SSO_USER[0]:
            pools.append(sso + " (in the browser)")
        print(f"  {user:<6} {password:<17} {desk or '-':<22} {', '.join(pools) or '(none)'}")
    print(f"\nThe sign-in password is Keycloak's. The hosts of {finance} are names only:")
    print("Connect gives an .rdp file, nothing answers it.")
    if desktops:
        print(
            f"{linux} asks for the host's own password (the desktop page has a field for it;"
            "\nalice, bob and carol are local accounts of its hosts)."
        )
    if signon:
        print(
            f"{sso} signs the person on by itself: the broker signs a one-time\n"
            "credential, the host checks it first in PAM and, at the first logon, makes the\n"
            f"account with the uid the broker recorded ({SSO_USER[0]} is no local account before)."
            "\nThere is no desktop password; the page asks for none."
        )
    if not desktops:
        print(f"No real desktops this time: {linux} is not there.")
    print(
        "\nFrom another machine (both addresses must be the same as here):\n"
        f"  ssh -L {demo_broker.BROKER_PORT}:127.0.0.1:{demo_broker.BROKER_PORT} "
        f"-L {demo_broker.KEYCLOAK_PORT}:127.0.0.1:{demo_broker.KEYCLOAK_PORT} THIS-MACHINE\n"
        "Logs: .cluster/logs/broker.log, .cluster/keycloak/keycloak.log\n"
        "Tear down: make demo-down"
    )


def session_rows(objects: Any) -> dict[str, str]:
    found = objects.list_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "sessionrequests", label_selector="hostpool.io/broker=true"
    )
    rows = {}
    for request in found["items"]:
        spec, status = request["spec"], request.get("status") or {}
        state = status.get("sessionState") or status.get("phase") or "Pending"
        host = status.get("host") or "-"
        rows[request["metadata"]["name"]] = (
            f"{spec.get('user', '?'):<6} {spec.get('poolRef', {}).get('name', '?'):<11} "
            f"{state:<12} {host}"
        )
    return rows


def watch_sessions(objects: Any) -> None:
    """The users' sessions, a line each time one changes, until Ctrl-C."""
    say("the users' sessions as they change (Ctrl-C stops watching; everything keeps running)")
    seen: dict[str, str] = {}
    try:
        while True:
            rows = session_rows(objects)
            for name, row in rows.items():
                if seen.get(name) != row:
                    print(f"  {time.strftime('%H:%M:%S')}  {row}", flush=True)
            for name in seen.keys() - rows.keys():
                user = seen[name].split()[0]
                print(f"  {time.strftime('%H:%M:%S')}  {user:<6} ended", flush=True)
            seen = rows
            time.sleep(1.0)
    except KeyboardInterrupt:
        print()
        say("stopped watching; the portal keeps running (make demo-down stops it)")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--no-desktops", action="store_true", help="no make demo-desktop part")
    parser.add_argument("--no-wait", action="store_true", help="return once it is up")
    args = parser.parse_args(argv)
    kubeconfig = CLUSTER / "kubeconfig"
    if not kubeconfig.exists() or not (CLUSTER / "operator.pid").exists():
        raise SystemExit("demo-portal: run `make demo` first (it starts the cluster and operator)")
    config.load_kube_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    objects = client.CustomObjectsApi(client.ApiClient())
    core = client.CoreV1Api(client.ApiClient())
    why = "--no-desktops" if args.no_desktops else why_no_desktops()
    if why:
        say(f"no real desktops: {why}")
    web_client = web_client_dir()
    why_sso = why or ("no browser RDP client" if web_client is None else why_no_signon())
    if why_sso and not why:
        say(f"no single sign-on desktop: {why_sso}")
    signon = not why_sso
    if not why:
        # First: a real node's joining restarts the API server.
        bring_up_desktops(kubeconfig, objects, core, signon=signon)
    issuer = demo_broker.start_keycloak(
        more_clients=[demo_portal_client()], more_users=[SSO_USER] if signon else []
    )
    flags = portal_flags(web_client) + (signon_flags() if signon else [])
    demo_broker.start_broker(kubeconfig, issuer, flags)
    check_portal(issuer)
    demo_broker.apply_pool(objects)
    show_pools(objects)
    user, password, _ = demo_broker.USERS[0]
    sign_in_check(user, password, desktop=not why and web_client is not None)
    if signon:
        single_sign_on_check(objects, core)
    print_users(not why, signon, web_client)
    if not args.no_wait:
        watch_sessions(objects)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
