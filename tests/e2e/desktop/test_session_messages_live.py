"""The agent in real desktops, on its own (no operator): an administrator's notice appears
as a window in the users' desktops, a disconnect ends the RDP connection and keeps the
session (a reconnect returns to the same X server), the idle time of a session is its X
server's, a forced logoff's message is shown once even across an agent restart, and the
logoff is still carried out.

One xrdp host (a network namespace of hack/cluster/xrdp-hosts.sh) with its agent
(``--sessions-from xrdp``) inside it as root; FreeRDP clients on virtual displays. The test
writes the requests' status as the operator and an administrator would (Assigned to the
host; ``status.notice``, ``status.disconnect``, ``status.logoff``).
"""

from __future__ import annotations

import re
import shutil
import socket
import struct
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hostpool_operator.agent.x11 import (
    extension_opcode,
    parse_setup,
    query_extension,
    setup_length,
    setup_request,
)
from hostpool_operator.api.timestamps import parse_time
from support.cluster import Cluster
from support.desktop import (
    NetnsAgent,
    RdpClient,
    VirtualDisplay,
    XrdpHosts,
    xorg_displays,
)
from support.desktop_sessions import (
    LOGOFF_TITLE,
    NOTICE_TITLE,
    AgentHosts,
    Desktop,
    session_env,
    stamp,
    status_of,
    wait_state,
    windows_titled,
    xorg_pid,
)
from support.kube import Kube, unique_name, wait_for
from support.operator_process import OperatorProcess
from support.podman import build_image, podman
from support.report_logs import EXTRA_LOGS

POOL = "msg"
HOST = "msg-1"
USERS = {"alice": "alice-desk-pw", "bob": "bob-desk-pw"}
AGENT_INTERVAL = 1.0
#: The message window's heading band (agent.desktop.HEADER), as a screenshot shows it.
HEADER_COLOUR = "#1f3a5f"
Obj = dict[str, Any]


@pytest.fixture
def host(agent_hosts: AgentHosts, cluster: Cluster) -> tuple[XrdpHosts, NetnsAgent]:
    """One xrdp host with the users, its SessionHost, and its agent running inside it."""
    hosts, agents = agent_hosts([HOST], USERS, first=41)
    cluster.create_pool(POOL, "DepthFirst", 4)
    cluster.create_host(HOST, POOL, address=hosts.hosts[HOST].address)
    agents[HOST].start()
    return hosts, agents[HOST]


def assign(cluster: Cluster, user: str) -> None:
    """A request of ``user`` on the host, as the operator would place it."""
    cluster.create_request(user, POOL, user)
    cluster.patch_status(
        "SessionRequest",
        user,
        {"phase": "Assigned", "host": HOST, "sessionState": "Connecting",
         "stateChangedAt": stamp()},
    )  # fmt: skip


def session_screenshot(user: str, path: Path) -> Path:
    """The session's own screen (its X server's root window), as the user sees it."""
    subprocess.run(
        ["import", "-window", "root", str(path)],
        env=session_env(user),
        check=True,
        capture_output=True,
        timeout=30,
    )
    return path


def header_pixels(png: Path) -> int:
    """Pixels of the message window's heading colour in a screenshot."""
    out = subprocess.run(
        ["convert", str(png), "-fill", "black", "+opaque", HEADER_COLOUR,
         "-fill", "white", "-opaque", HEADER_COLOUR, "-format", "%[fx:mean*w*h]", "info:"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    return round(float(out))


def fake_input(display: VirtualDisplay, x: int, y: int, *, click: bool = False) -> None:
    """Input in the client's display (XTEST), as a user moving the mouse there (and
    clicking): FreeRDP sends it to the session."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(f"/tmp/.X11-unix/X{display.number}")
        sock.sendall(setup_request(None))
        head = sock.recv(8, socket.MSG_WAITALL)
        setup = parse_setup(head, sock.recv(setup_length(head), socket.MSG_WAITALL))
        sock.sendall(query_extension(b"XTEST"))
        opcode = extension_opcode(sock.recv(32, socket.MSG_WAITALL))
        assert opcode is not None, "the virtual display has no XTEST"

        def fake(kind: int, detail: int) -> bytes:  # FakeInput, absolute, on the root
            return struct.pack("<BBHBBxxII8xhh7xB", opcode, 2, 9, kind, detail, 0, setup.root,
                               x, y, 0)  # fmt: skip

        events = [fake(6, 0)]  # MotionNotify
        if click:
            events += [fake(4, 1), fake(5, 1)]  # ButtonPress, ButtonRelease of button 1
        sock.sendall(b"".join(events) + struct.pack("<BxH", 43, 1))  # then a round trip
        sock.recv(32, socket.MSG_WAITALL)


def move_pointer(display: VirtualDisplay, x: int, y: int) -> None:
    fake_input(display, x, y)


def window_position(user: str, title: str) -> tuple[int, int, int, int]:
    """(x, y, width, height) on the screen of the user's window with this title."""
    out = subprocess.run(
        ["xwininfo", "-root", "-tree"], capture_output=True, text=True, env=session_env(user),
        check=True, timeout=20,
    ).stdout  # fmt: skip
    found = re.search(
        rf'^\s+0x[0-9a-f]+ "{re.escape(title)}":.*?'
        r"(\d+)x(\d+)[+-]-?\d+[+-]-?\d+\s+\+(-?\d+)\+(-?\d+)",
        out,
        re.MULTILINE,
    )
    assert found, f"no window {title!r} in {user}'s session:\n{out[-2000:]}"
    width, height, x, y = (int(v) for v in found.groups())
    return x, y, width, height


def test_a_notice_shows_in_desktops_and_a_disconnect_keeps_the_session(
    cluster: Cluster,
    host: tuple[XrdpHosts, NetnsAgent],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    hosts, agent = host
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    timings: dict[str, float] = {}
    desktops = {u: Desktop(hosts, u, tmp_path, host=HOST, password=USERS[u]) for u in USERS}
    try:
        for desktop in desktops.values():
            desktop.display.__enter__()
        # 1. alice and bob log on: Active, with stateChangedAt and logonAt.
        for user, desktop in desktops.items():
            assign(cluster, user)
            desktop.connect(logs)
        for user in USERS:
            wait_state(cluster, user, "Active", f"the agent to report {user}'s session Active")
        alice = status_of(cluster, "alice")
        assert parse_time(alice.get("logonAt")) is not None, alice
        assert parse_time(alice.get("stateChangedAt")) is not None, alice
        logon_at = alice["logonAt"]
        xorg = xorg_pid("alice")
        (display,) = xorg_displays("alice")

        # 2. An administrator's message to both: a window in each desktop, shown once.
        sent = time.monotonic()
        for user in USERS:
            cluster.patch_status(
                "SessionRequest",
                user,
                {"notice": {"message": f"Hello {user}: the host restarts at 22:00 tonight. "
                            "Please save your work before then.", "sentAt": stamp()}},
            )  # fmt: skip
        for user in USERS:
            cluster.wait(
                lambda u=user: (status_of(cluster, u).get("notice") or {}).get("shownAt"),  # type: ignore[misc]
                f"the agent to show {user} the notice (notice.shownAt)",
                timeout=20,
            )
        timings["notice set -> shownAt (both users)"] = time.monotonic() - sent
        for user in USERS:
            count = wait_for(
                lambda u=user: windows_titled(u, NOTICE_TITLE),  # type: ignore[misc]
                10,
                what=f"the message window in {user}'s desktop",
            )
            assert count == 1, f"{user}'s desktop has {count} message windows"
        shot = session_screenshot("alice", tmp_path / "notice-alice-session.png")
        assert header_pixels(shot) > 2000, "the session's screen shows no message window"
        # What alice sees: her client's screen shows the window too.
        client_shot = tmp_path / "notice-alice-client.png"
        wait_for(
            lambda: header_pixels(desktops["alice"].display.screenshot(client_shot)) > 2000,
            15,
            what="alice's RDP client to show the message window",
        )
        shutil.copy(client_shot, tmp_path / "warning.png")

        # bob reads his and clicks it away; it stays shown (no second window).
        bob_shown = status_of(cluster, "bob")["notice"]["shownAt"]
        x, y, width, height = window_position("bob", NOTICE_TITLE)
        fake_input(desktops["bob"].display, x + width // 2, y + height // 2, click=True)
        wait_for(
            lambda: windows_titled("bob", NOTICE_TITLE) == 0,
            10,
            what="bob's click to close his message window",
        )

        # 3. alice is disconnected: her client's connection ends, her session stays.
        asked = time.monotonic()
        cluster.patch_status("SessionRequest", "alice", {"disconnect": {"requestedAt": stamp()}})
        cluster.wait(
            lambda: (status_of(cluster, "alice").get("disconnect") or {}).get("doneAt"),
            "the agent to carry out the disconnect (disconnect.doneAt)",
            timeout=20,
        )
        timings["disconnect set -> doneAt"] = time.monotonic() - asked
        first = desktops["alice"].clients[0]
        assert first.wait_exit(15) is not None, "alice's client is still connected"
        wait_state(
            cluster,
            "alice",
            "Disconnected",
            "alice's request to show Disconnected",
            timeout=15,
        )
        timings["disconnect set -> Disconnected"] = time.monotonic() - asked
        assert xorg_pid("alice") == xorg, "alice's X server changed at the disconnect"
        assert hosts.established(HOST) == 1, "bob's connection went too"
        assert desktops["bob"].clients[0].running, "bob's client was disconnected"
        assert status_of(cluster, "bob").get("sessionState") == "Active"

        # 4. She reconnects: the same X server, Active again; logonAt unchanged; the notice
        #    is not shown a second time.
        changed = status_of(cluster, "alice")["stateChangedAt"]
        again = time.monotonic()
        desktops["alice"].connect(logs)
        wait_state(cluster, "alice", "Active", "alice's reconnected session to be Active")
        timings["reconnect -> Active"] = time.monotonic() - again
        assert xorg_displays("alice") == [display]
        assert xorg_pid("alice") == xorg, "alice got a new X server on reconnecting"
        after = status_of(cluster, "alice")
        assert after["logonAt"] == logon_at
        assert after["stateChangedAt"] >= changed
        assert windows_titled("alice", NOTICE_TITLE) == 1

        # 5. The agent restarts: no notice is shown again (shownAt is on the request).
        agent.stop()
        agent.start()
        reports_since = stamp()
        cluster.wait(
            lambda: (
                (cluster.host(HOST).get("status") or {}).get("metrics", {}).get("sampledAt", "")
                > reports_since
            ),
            "the restarted agent to report",
        )
        time.sleep(3 * AGENT_INTERVAL)
        for user in USERS:
            assert windows_titled(user, NOTICE_TITLE) == 0, (
                f"the restarted agent showed {user} the notice again"
            )
        assert (status_of(cluster, "bob").get("notice") or {}).get("shownAt") == bob_shown
        print(
            "session messages: "
            + "; ".join(f"{k} {v:.2f} s" for k, v in timings.items())
            + f"; screenshot {tmp_path / 'warning.png'}"
        )
    finally:
        for desktop in desktops.values():
            desktop.stop()
            desktop.display.__exit__()


def test_idle_time_is_the_x_servers_and_an_idle_disconnect_respects_input(
    cluster: Cluster,
    host: tuple[XrdpHosts, NetnsAgent],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """No input for a minute: idleSince (about when the input stopped). Input: idleSince
    cleared within seconds. An Idle disconnect decided before that input is not carried
    out: doneAt set, the client stays connected."""
    hosts, _ = host
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    desktop = Desktop(hosts, "alice", tmp_path, host=HOST, password=USERS["alice"])
    with desktop.display:
        try:
            assign(cluster, "alice")
            client = desktop.connect(logs)
            wait_state(cluster, "alice", "Active", "alice's session to be Active")
            move_pointer(desktop.display, 300, 300)
            last_input = datetime.now(UTC)
            since = cluster.wait(
                lambda: parse_time(status_of(cluster, "alice").get("idleSince")),
                "idleSince after a minute without input",
                timeout=90,
            )
            seen = datetime.now(UTC)
            assert seen - last_input >= timedelta(seconds=59), (
                f"idleSince set {seen - last_input} after the last input"
            )
            assert abs((since - last_input).total_seconds()) <= 5, (since, last_input)

            # The operator decided (earlier) to disconnect her for idleness; she moves the
            # mouse before the agent acts.
            decided = datetime.now(UTC) - timedelta(seconds=20)
            move_pointer(desktop.display, 500, 400)
            moved = time.monotonic()
            cluster.patch_status(
                "SessionRequest",
                "alice",
                {"disconnect": {"requestedAt": stamp(decided), "limit": "Idle"}},
            )
            cluster.wait(
                lambda: (status_of(cluster, "alice").get("disconnect") or {}).get("doneAt"),
                "the agent to settle the Idle disconnect",
                timeout=20,
            )
            status = status_of(cluster, "alice")
            assert status.get("idleSince") is None, status
            assert client.running, "alice was disconnected although she was active"
            assert hosts.established(HOST) == 1
            assert status.get("sessionState") == "Active"
            print(f"idle: settled {time.monotonic() - moved:.2f} s after the input")
        finally:
            desktop.stop()


def test_a_forced_logoffs_message_is_shown_once_across_a_restart(
    cluster: Cluster,
    host: tuple[XrdpHosts, NetnsAgent],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    hosts, agent = host
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    desktop = Desktop(hosts, "bob", tmp_path, host=HOST, password=USERS["bob"])
    with desktop.display:
        try:
            assign(cluster, "bob")
            client = desktop.connect(logs)
            wait_state(cluster, "bob", "Active", "bob's session to be Active")
            deadline = datetime.now(UTC) + timedelta(seconds=25)
            cluster.patch_status(
                "SessionRequest",
                "bob",
                {"logoff": {"message": "Maintenance: this host restarts.",
                            "deadline": stamp(deadline)}},
            )  # fmt: skip
            wait_for(
                lambda: windows_titled("bob", LOGOFF_TITLE),
                15,
                what="the logoff's message in bob's desktop",
            )
            logoff = cluster.wait(
                lambda: (
                    (status_of(cluster, "bob").get("logoff") or {}).get("shownAt")
                    and status_of(cluster, "bob")["logoff"]
                ),
                "the logoff marked shown (logoff.shownAt)",
            )
            assert logoff["message"] == "Maintenance: this host restarts."
            assert "notice" not in status_of(cluster, "bob"), "the logoff wrote a notice"
            session_screenshot("bob", tmp_path / "logoff-bob.png")
            agent.stop()
            agent.start()
            time.sleep(4 * AGENT_INTERVAL)
            assert windows_titled("bob", LOGOFF_TITLE) == 0, "the message was shown again"
            assert (status_of(cluster, "bob").get("logoff") or {}) == logoff
            cluster.wait(
                lambda: "bob" not in cluster.requests() and not xorg_displays("bob"),
                "bob's session to end at the deadline and his request to go",
                timeout=60,
            )
            assert client.wait_exit(10) is not None, "bob's client is still connected"
        finally:
            desktop.stop()


# ---------------------------------------------------------------------------------------
# the operator's session limits, carried out by the agents in real desktops

LIMIT_HOSTS = ("lim-1", "lim-2")
LIMIT_USERS = {"alice": "alice-desk-pw", "bob": "bob-desk-pw", "carol": "carol-desk-pw"}
WARNING_TITLE = "Session time limit"


class KeepsBusy(threading.Thread):
    """A user who works: the pointer moves in their client every few seconds."""

    def __init__(self, display: VirtualDisplay) -> None:
        super().__init__(daemon=True)
        self.display = display
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        step = 0
        while not self.stopping.wait(10):
            step += 1
            try:
                move_pointer(self.display, 200 + 40 * (step % 5), 300)
            except BaseException as error:  # reported by the test
                self.error = error
                return


@pytest.fixture
def limit_hosts(agent_hosts: AgentHosts) -> tuple[XrdpHosts, dict[str, NetnsAgent]]:
    """Two xrdp hosts, each with its agent inside it (started by the test)."""
    return agent_hosts(LIMIT_HOSTS, LIMIT_USERS, first=45)


def test_session_limits_warn_then_disconnect_or_log_off_real_desktops(
    cluster: Cluster,
    operator_process: OperatorProcess,
    limit_hosts: tuple[XrdpHosts, dict[str, NetnsAgent]],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Pool "idle" (lim-1): idleMinutes 2, warning 1 minute before. alice leaves her desktop
    alone: warned in her desktop, then disconnected; she reconnects to the same X server.
    carol works on the same host: untouched. Pool "max" (lim-2): maxSessionMinutes 2,
    warning 1 minute before: bob is warned in his desktop, then logged off."""
    del operator_process
    hosts, agents = limit_hosts
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    limits = {"warningMinutes": 1}
    cluster.setup_pool(
        "idle", "DepthFirst", 4, hosts=[LIMIT_HOSTS[0]],
        sessionLimits={**limits, "idleMinutes": 2, "idleAction": "Disconnect"},
    )  # fmt: skip
    cluster.setup_pool(
        "max", "DepthFirst", 4, hosts=[LIMIT_HOSTS[1]],
        sessionLimits={**limits, "maxSessionMinutes": 2},
    )  # fmt: skip
    for agent in agents.values():
        agent.start()
    pools = {"alice": "idle", "carol": "idle", "bob": "max"}
    for user, pool in pools.items():
        cluster.create_request(user, pool, user)
    cluster.wait_assigned(pools)
    desktops = {}
    for user in pools:
        host = (cluster.request(user).get("status") or {})["host"]
        desktop = Desktop(hosts, user, tmp_path, host=host, password=LIMIT_USERS[user])
        desktops[user] = desktop
    busy: KeepsBusy | None = None
    timings: dict[str, float] = {}
    try:
        for desktop in desktops.values():
            desktop.display.__enter__()
            desktop.connect(logs)
        for user in pools:
            wait_state(cluster, user, "Active", f"{user}'s session to be Active")
        start = time.monotonic()
        busy = KeepsBusy(desktops["carol"].display)
        busy.start()
        xorg = xorg_pid("alice")

        # bob (max session) and alice (idle) are warned in their desktops.
        for user, limit in (("bob", "MaxSession"), ("alice", "Idle")):
            notice = cluster.wait(
                lambda u=user: (  # type: ignore[misc]
                    (status_of(cluster, u).get("notice") or {}).get("shownAt")
                    and status_of(cluster, u)["notice"]
                ),
                f"{user}'s {limit} warning shown",
                timeout=150,
            )
            assert notice["limit"] == limit, notice
            timings[f"{user}: Active -> {limit} warning shown"] = time.monotonic() - start
            assert (
                wait_for(
                    lambda u=user: windows_titled(u, WARNING_TITLE),  # type: ignore[misc]
                    10,
                    what=f"the warning window in {user}'s desktop",
                )
                == 1
            )
        shot = tmp_path / "idle-warning-alice-client.png"
        wait_for(
            lambda: header_pixels(desktops["alice"].display.screenshot(shot)) > 2000,
            15,
            what="alice's RDP client to show the warning",
        )
        shutil.copy(shot, tmp_path / "warning.png")

        # alice is disconnected for idleness; her session stays; she comes back to it.
        cluster.wait(
            lambda: (status_of(cluster, "alice").get("disconnect") or {}).get("doneAt"),
            "alice's idle disconnect carried out",
            timeout=120,
        )
        timings["alice: Active -> disconnected for idleness"] = time.monotonic() - start
        assert status_of(cluster, "alice")["disconnect"]["limit"] == "Idle"
        assert desktops["alice"].clients[0].wait_exit(15) is not None, "alice still connected"
        wait_state(cluster, "alice", "Disconnected", "alice Disconnected")
        assert xorg_pid("alice") == xorg
        desktops["alice"].connect(logs)
        wait_state(cluster, "alice", "Active", "alice's reconnected session Active")
        assert xorg_pid("alice") == xorg, "alice got a new X server"
        reasons = [e.get("reason") for e in cluster.events_for("alice")]
        assert "SessionLimitReached" in reasons, reasons

        # bob is logged off at his session's limit: his session ends, his request goes.
        cluster.wait(
            lambda: "bob" not in cluster.requests() and not xorg_displays("bob"),
            "bob logged off at his session limit",
            timeout=120,
        )
        timings["bob: Active -> logged off (max session)"] = time.monotonic() - start
        assert desktops["bob"].clients[0].wait_exit(10) is not None

        # carol worked all along: no warning, no disconnect, still connected.
        assert busy.error is None, f"moving carol's pointer failed: {busy.error!r}"
        carol = status_of(cluster, "carol")
        assert carol.get("sessionState") == "Active", carol
        touched = {
            k: carol[k] for k in ("notice", "disconnect", "logoff", "idleSince") if carol.get(k)
        }
        assert not touched, f"carol was active, yet: {touched}"
        assert desktops["carol"].clients[0].running
        usage = [
            f"agent {name}: {cpu:.2f} CPU-s in {up:.0f} s ({100 * cpu / up:.1f} % of a core), "
            f"{rss / 2**20:.1f} MiB RSS"
            for name, (cpu, rss, up) in ((n, a.cpu_and_memory()) for n, a in agents.items())
        ]
        print(
            "session limits: "
            + "; ".join(f"{k} {v:.1f} s" for k, v in timings.items())
            + "; "
            + "; ".join(usage)
        )
    finally:
        if busy is not None:
            busy.stopping.set()
        for desktop in desktops.values():
            desktop.stop()
            desktop.display.__exit__()


# ---------------------------------------------------------------------------------------
# the agent in the session-host image (a container's root: no CAP_SYS_PTRACE)

CONTAINER_HOST = "ctm-1"


@pytest.mark.usefixtures("hosts_bridge", "rdp_client")
def test_the_agent_in_the_session_host_image_shows_a_notice_and_disconnects(
    kube: Kube,
    cluster: Cluster,
    namespace: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The agent inside the session-host container (xrdp and the agent in one container,
    podman's default capabilities: root there may not follow another user's /proc entries)
    finds alice's X server's cookie, draws the notice in her desktop (seen in her FreeRDP
    client) and disconnects her, her session kept."""
    image = build_image("--session-host")
    users = tmp_path / "users"
    users.write_text(f"alice:{USERS['alice']}\n")
    users.chmod(0o600)
    cluster.create_pool(POOL, "DepthFirst", 4)
    cluster.create_host(CONTAINER_HOST, POOL)
    name = unique_name("msg-desktop", max_length=30)
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    kept: list[str] = []  # the container's log, read before the container is removed
    logs.append((f"container {name} log", lambda: "".join(kept)[-8000:]))
    display = VirtualDisplay(tmp_path / "xvfb.log")
    client: RdpClient | None = None
    podman(
        "run", "-d", "--name", name,
        "-v", f"{users}:/etc/hostpool/users:ro",
        "-v", f"{kube.kubeconfig}:/etc/hostpool/kubeconfig:ro",
        "-e", "KUBECONFIG=/etc/hostpool/kubeconfig",
        "-e", f"HOSTPOOL_AGENT_HOST={CONTAINER_HOST}",
        "-e", f"HOSTPOOL_AGENT_ARGS=--namespace {namespace} --interval {AGENT_INTERVAL} --verbose",
        image,
    )  # fmt: skip
    try:
        address = cluster.wait(
            lambda: ((cluster.host(CONTAINER_HOST).get("status") or {}).get("agent") or {}).get(
                "address"
            ),
            "the container's agent to report its address",
            timeout=60,
        )
        cluster.create_request("alice", POOL, "alice")
        cluster.patch_status(
            "SessionRequest", "alice", {"phase": "Assigned", "host": CONTAINER_HOST}
        )
        rdp = tmp_path / "alice.rdp"
        rdp.write_text(f"full address:s:{address}:3389\r\nusername:s:alice\r\n")
        with display:
            client = RdpClient(
                display, rdp, USERS["alice"], tmp_path / "xfreerdp.log", tmp_path / "home"
            )
            logs.append(("xfreerdp log", client.log_text))
            client.start()
            wait_state(cluster, "alice", "Active", "the container's agent to report alice Active")
            cluster.patch_status(
                "SessionRequest",
                "alice",
                {"notice": {"message": "Hello from the container's agent.", "sentAt": stamp()}},
            )
            cluster.wait(
                lambda: (status_of(cluster, "alice").get("notice") or {}).get("shownAt"),
                "the notice shown (shownAt)",
                timeout=20,
            )
            shot = tmp_path / "container-notice.png"
            wait_for(
                lambda: header_pixels(display.screenshot(shot)) > 2000,
                15,
                what="alice's client to show the message window",
            )
            cluster.patch_status(
                "SessionRequest", "alice", {"disconnect": {"requestedAt": stamp()}}
            )
            cluster.wait(
                lambda: (
                    status_of(cluster, "alice").get("sessionState") == "Disconnected"
                    and (status_of(cluster, "alice").get("disconnect") or {}).get("doneAt")
                ),
                "alice disconnected by the container's agent",
                timeout=20,
            )
            assert client.wait_exit(15) is not None, "alice's client is still connected"
        log_text = podman("logs", name, check=False)
        assert "idle time unknown" not in log_text, log_text[-3000:]
        # The agent reads alice's idle time from her X server once it answers (a server
        # still setting up its screen may not, for a few seconds): from the notice on, it did.
        after_notice = log_text.split("showed the notice of alice", 1)[-1]
        assert "idle time of alice not known yet" not in after_notice, log_text[-3000:]
    finally:
        if client is not None:
            client.kill()
        kept.append(podman("logs", name, check=False))
        podman("rm", "--force", "--time", "5", name, check=False)
