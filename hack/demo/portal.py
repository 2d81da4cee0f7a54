"""`make demo-portal` (after `make demo`): the portal, in your browser.

Starts Keycloak (realm ``corp``: alice and carol in /finance-desk, bob in none) with two
clients, ``hostpool-desktops`` (the API's, as ``make demo-broker``) and ``hostpool-portal``
(the portal's: confidential, standard flow, redirect URI ``<url>/auth/callback``), and
``hostpool-broker`` with the portal on http://127.0.0.1:8443 (its client secret and cookie
key as files, the browser RDP client of ``hack/portal/web-client.sh``). The pool
``desktops`` of ``make demo-broker`` (two hosts that are only names: Connect hands out an
.rdp file) is shown as "Finance desktops".

As root, with the demo's hosts' bridge, it also brings up what ``make demo-desktop`` does:
the xrdp host ``xrdp-1`` with its agent, a real kubelet node for the pool's pod-backed host,
and the pool ``xrdp-desks`` ("Linux desktops", for alice, bob and carol), here with
``connection.web: true``, so that "Open in browser" draws the desktop in the page. It does
not open FreeRDP sessions for the users as ``make demo-desktop`` does: they log on from the
portal. ``--no-desktops`` leaves that part out (and so does a machine that cannot run it,
saying why).

It checks that the portal answers and hands the sign-in to Keycloak, prints the URL, the
users and their passwords, and then shows the users' sessions as they change until Ctrl-C
(``--no-wait``: it returns at once). Everything keeps running; ``make demo-down`` stops it.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

# The tests' support package (control plane, Keycloak, desktops) does the set-up here too.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hack/: the other demos

from kubernetes import client, config

from demo import broker as demo_broker
from demo import desktop as demo_desktop
from support.desktop import XrdpHosts, why_not
from support.keycloak import portal_client

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / ".cluster"
WORK = CLUSTER / "demo-portal"
NAMESPACE = demo_broker.NAMESPACE
#: The address to open: the redirect URI, the cookie and the CSRF origin are made of it.
PUBLIC_URL = f"http://127.0.0.1:{demo_broker.BROKER_PORT}"
PORTAL_CLIENT, PORTAL_SECRET = "hostpool-portal", "demo-portal-secret"
#: The pools' names on the page.
DISPLAY_NAMES = {demo_broker.POOL: "Finance desktops", demo_desktop.POOL: "Linux desktops"}
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


def sign_in_check(user: str, password: str, *, desktop: bool) -> None:
    """One user signs in as a person would (headless chromium, Keycloak's own form), the
    pools on their page are shown, Connect on the pool of names downloads its .rdp file and,
    with ``desktop``, "Open in browser" draws their Linux desktop (then Disconnect leaves
    the session for them to take up). Skipped, saying why, where chromium cannot run."""
    try:
        from playwright.sync_api import sync_playwright

        from support.browser import BrowserError, chromium
        from support.portal import sign_in

        executable = chromium()
    except (ImportError, BrowserError) as error:
        say(f"no sign-in check in a browser here: {error}")
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
            connect_check(page, user)
            if desktop:
                browser_desktop_check(page, user)
            page_shot(page, user)
        finally:
            browser.close()


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


def bring_up_desktops(kubeconfig: Path, objects: Any, core: Any) -> None:
    """make demo-desktop's hosts, agents and pool, the pool opened to the browser; no
    FreeRDP logons (the users log on from the portal)."""
    bridge = demo_desktop.bridge_of_cluster()
    demo_desktop.WORK.mkdir(parents=True, exist_ok=True)
    image = demo_desktop.ensure_real_node(kubeconfig)
    hosts = XrdpHosts(demo_desktop.WORK / "hosts", bridge)
    made = hosts.up(demo_desktop.HOSTS, demo_desktop.USERS)
    for host in made.values():
        say(f"xrdp host {host.name} at {host.address} (network namespace {host.netns})")
    demo_desktop.make_pool(objects, core)
    objects.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        NAMESPACE,
        "hostpools",
        demo_desktop.POOL,
        {"spec": {"connection": {"web": True}}},
    )
    demo_desktop.start_agents(kubeconfig, hosts)
    # After make demo-desktop its users' sessions may fill a host: up and full is up.
    demo_desktop.wait_for(
        f"{', '.join(demo_desktop.HOSTS)} to take sessions",
        lambda: demo_desktop.hosts_taking_sessions(objects, full_ok=True),
        timeout=120,
    )
    demo_desktop.let_pool_scale(objects, image)


def print_users(desktops: bool, web_client: str | None) -> None:
    finance = DISPLAY_NAMES[demo_broker.POOL]
    linux = DISPLAY_NAMES[demo_desktop.POOL]
    print(f"\nOpen {PUBLIC_URL}/ (exactly: the cookie and the redirect URI are for it)\n")
    print(f"  {'user':<6} {'sign-in password':<17} {'desktop password':<17} pools")
    for user, password, groups in demo_broker.USERS:
        pools = [finance] if "/finance-desk" in groups else []
        desk = demo_desktop.USERS.get(user, "") if desktops else ""
        if desktops:
            pools.append(linux + (" (also in the browser)" if web_client else ""))
        print(f"  {user:<6} {password:<17} {desk or '-':<17} {', '.join(pools) or '(none)'}")
    print(
        "\nThe sign-in password is Keycloak's; the desktop password is the host's, which the"
        "\ndesktop page asks for (xrdp has no single sign-on). The hosts of"
        f" {finance} are names\nonly: Connect gives an .rdp file, nothing answers it."
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
    if not why:
        # First: a real node's joining restarts the API server.
        bring_up_desktops(kubeconfig, objects, core)
    issuer = demo_broker.start_keycloak(more_clients=[demo_portal_client()])
    demo_broker.start_broker(kubeconfig, issuer, portal_flags(web_client))
    check_portal(issuer)
    demo_broker.apply_pool(objects)
    show_pools(objects)
    user, password, _ = demo_broker.USERS[0]
    sign_in_check(user, password, desktop=not why and web_client is not None)
    print_users(not why, web_client)
    if not args.no_wait:
        watch_sessions(objects)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
