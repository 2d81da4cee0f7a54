"""Single sign-on in the browser, end to end: a person Keycloak knows and no host does signs
in to the portal through Keycloak's form, opens the desktop of a ``singleSignOn`` pool and
lands on it with no password typed anywhere (the page asks for none; the relay writes the
person's name and a one-time credential into the logon). In the desktop's xterm ``whoami``
and ``id -u`` print the signed-in user and the uid the broker recorded for them."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, ViewportSize

from e2e.desktop.test_browser_desktop_live import host_colour, shows_colour
from hostpool_operator.access.names import request_name
from hostpool_operator.logon import uids
from support.cluster import Cluster
from support.desktop import session_processes
from support.desktop_sessions import wait_state
from support.keycloak import Keycloak
from support.kube import wait_for
from support.portal import sign_in
from support.signon import new_user
from support.web_desktop import WebDesktops, first_frame

HOST = "ssoweb-1"
POOL = "ssoweb"
FIRST_ADDRESS = 51
VIEWPORT: ViewportSize = {"width": 1024, "height": 768}


def test_the_signed_in_person_lands_on_their_desktop_with_no_second_password(
    web_desktop: WebDesktops,
    keycloak: Keycloak,
    new_page: Callable[..., Page],
    cluster: Cluster,
    namespace: str,
    tmp_path: Path,
) -> None:
    user, password = new_user(keycloak)
    sso = {"singleSignOn": True}
    web = web_desktop(
        [HOST], {}, first=FIRST_ADDRESS, pool=POOL, entitled=[user], connection=sso, signon=True
    )
    broker = web.start_broker()
    desktop = web.path

    page = new_page(viewport=VIEWPORT)
    sign_in(page, broker.url, user, password, next_path=desktop)
    assert page.url == broker.url + desktop
    # No password is asked for: the page opens the desktop by itself.
    assert not page.locator("#password").is_visible()
    page.wait_for_selector("#desktop[data-client=ready]", state="attached", timeout=60_000)
    assert 0 < first_frame(page) < 60_000
    shows_colour(page, host_colour(web.hosts, HOST), tmp_path / "desktop.png")
    wait_state(cluster, request_name(namespace, POOL, user), "Active", "the session to be Active")

    record = cluster.kube.call(
        "GET", f"/api/v1/namespaces/{namespace}/configmaps/{uids.record_name(user)}"
    )
    uid = int(record["data"]["uid"])
    # What the xterm runs: only unshifted keys are typed (the web client's keyboard is the
    # desktop's US layout), so the redirections live in a script the test writes.
    name = f"hostpool-sso-{uuid.uuid4().hex[:8]}"
    marker, script = Path(f"/tmp/{name}.out"), Path(f"/tmp/{name}.sh")
    # Written aside and renamed: the test must never read whoami's line without id -u's.
    script.write_text(f"{{ whoami; id -u; }} > {marker}.part && mv {marker}.part {marker}\n")
    script.chmod(0o644)
    box = page.locator("#screen").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + 150, box["y"] + 150)  # over the xterm (twm: focus follows)
    page.mouse.click(box["x"] + 150, box["y"] + 150)
    page.keyboard.type(f"sh {script}\n", delay=20)
    try:
        text = wait_for(
            lambda: marker.read_text() if marker.exists() and marker.stat().st_size else None,
            20,
            what="whoami and id -u to run in the desktop's xterm",
        )
        assert text.split() == [user, str(uid)]
    finally:
        for path in (marker, script, Path(f"{marker}.part")):
            path.unlink(missing_ok=True)


def test_a_modified_client_naming_someone_else_gets_nothing_of_theirs(
    web_desktop: WebDesktops,
    keycloak: Keycloak,
    new_page: Callable[..., Page],
    cluster: Cluster,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A signed-in person whose browser client is modified to log on as someone else (the
    desktop page rewritten in transit: another user name, and that person's password where
    one is asked). On a pool without single sign-on the relay refuses the logon before it
    reaches the host: no session of the other person starts. On a single sign-on pool the
    relay writes the caller's own name and credential: the desktop that opens is the caller's."""
    user, password = new_user(keycloak)
    victim, victim_password = f"hpv{uuid.uuid4().hex[:6]}", "victims-own-pw"
    sso_host, typed_host = "ssomod-1", "pwmod-1"
    web = web_desktop(
        [sso_host, typed_host], {victim: victim_password}, first=FIRST_ADDRESS + 5, signon=True
    )
    hosts = web.hosts
    for pool, host, signs_on in (("ssomod", sso_host, True), ("pwmod", typed_host, False)):
        web.add_pool(pool, [host], [user], connection={"singleSignOn": signs_on})
    broker = web.start_broker()
    page = new_page(viewport=VIEWPORT)

    sign_in(page, broker.url, user, password)
    # The modification: the page's user name rewritten as soon as the page is parsed, before
    # its client reads it (an init script runs ahead of the page's own).
    page.add_init_script(
        "new MutationObserver((_, seen) => {"
        "  const root = document.getElementById('desktop');"
        f"  if (root) {{ root.dataset.user = '{victim}'; seen.disconnect(); }}"
        "}).observe(document, {childList: true, subtree: true});"
    )
    page.goto(f"{broker.url}/desktop/{namespace}/pwmod")
    assert page.get_attribute("#desktop", "data-user") == victim
    page.wait_for_selector("#desktop[data-client=ready]", state="attached", timeout=60_000)
    page.fill("#password", victim_password)
    page.click("[data-action=connect]")

    def ended() -> str | None:
        if page.get_attribute("#desktop", "data-desktop-state") in ("error", "closed"):
            return page.inner_text("#desktop")
        return None

    state = wait_for(
        ended,
        30,
        what="the modified logon to end",
        show=lambda: (
            f"{page.get_attribute('#desktop', 'data-desktop-state')}: {page.inner_text('#desktop')}"
        ),
    )
    assert "connection failed" in state, state
    # The relay said why, in its log (the refusal is the relay's, not the host's).
    wait_for(
        lambda: (
            "logon refused for " + user + ": the browser's logon names another user"
            in broker.log_tail(200)
        ),
        10,
        what="the relay's refusal in the broker's log",
    )
    assert session_processes(victim) == []
    host_logs = "".join(
        f.read_text(errors="replace") for f in (hosts.directory / typed_host / "logs").iterdir()
    )
    assert victim not in host_logs, "the logon reached the host"

    # The single sign-on pool: the caller's own desktop, whatever name the client sent.
    page.goto(f"{broker.url}/desktop/{namespace}/ssomod")
    assert page.get_attribute("#desktop", "data-user") == victim
    page.wait_for_selector("#desktop[data-client=ready]", state="attached", timeout=60_000)
    assert 0 < first_frame(page) < 60_000
    shows_colour(page, host_colour(hosts, sso_host), tmp_path / "desktop.png")
    wait_state(cluster, request_name(namespace, "ssomod", user), "Active", "the caller's session")
    assert any("Xorg" in args for _, args in session_processes(user))
    assert session_processes(victim) == []
