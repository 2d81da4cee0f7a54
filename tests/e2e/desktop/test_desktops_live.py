"""Real desktops end to end: two xrdp hosts in network namespaces, each with its agent
(``--sessions-from xrdp``, under the host's own ServiceAccount token, reaching the API
server over the hosts' bridge), the operator, the broker with Keycloak, and FreeRDP clients
on a virtual display opening the ``.rdp`` file the broker hands out.

One story, in the order a day goes: alice, bob and carol log on (depth-first: alice and bob
share a host); alice's client dies and her session waits Disconnected, slot kept; her host is
drained and she reconnects to the same session (same X server, her xterm still running)
while a new user lands elsewhere; she logs off from inside the desktop and a waiting user
gets her slot; bob is logged off by force and his real session ends. Each host paints its
desktop in its own colour, so a screenshot tells which host a client reached.

A watch on the requests runs through it all: no request is assigned to a second host, none
disappears except by a logoff, no host ever has more than its limit assigned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from support.agent_objects import apply_agent_objects, delete_objects, run_tool
from support.broker_helpers import BrokerProcess, Reply
from support.cluster import Cluster
from support.desktop import (
    Host,
    NetnsAgent,
    RdpClient,
    VirtualDisplay,
    XrdpHosts,
    end_window_manager,
    pixel,
    session_processes,
    xorg_displays,
)
from support.identity import token_kubeconfig
from support.kube import GROUP, VERSION, Kube, unique_name, wait_for
from support.operator_process import OperatorProcess
from support.podman import build_image, podman
from support.report_logs import EXTRA_LOGS

POOL = "desk"
LIMIT = 2
HOSTS = ("dt-1", "dt-2")
#: Desktop (Linux) passwords of the users; their sign-in passwords are Keycloak's.
DESKTOP_USERS = {
    "alice": "alice-desk-pw",
    "bob": "bob-desk-pw",
    "carol": "carol-desk-pw",
    "dave": "dave-desk-pw",
}
AGENT_INTERVAL = 1.0
#: A point of the screen outside the xterm: the desktop's own colour.
BACKGROUND = (1000, 740)
Obj = dict[str, Any]


class RequestWatch(threading.Thread):
    """A real watch on the namespace's requests: the hosts each request (by uid) was ever
    assigned to, the most requests assigned to a host at once, and the deleted ones."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api = kubernetes.client.CustomObjectsApi(kube.api_client)
        self.namespace = namespace
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.current: dict[str, Obj] = {}
        self.hosts_of: dict[str, set[str]] = {}
        self.users: dict[str, str] = {}
        self.deleted: set[str] = set()
        self.most: dict[str, int] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        version = ""
        while not self.stopping.is_set():
            try:
                watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
                for event in watch.stream(  # type: ignore[no-untyped-call]
                    self.api.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.namespace,
                    "sessionrequests",
                    resource_version=version or None,
                    timeout_seconds=5,
                ):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    self.take(event["type"], obj)
                    if self.stopping.is_set():
                        break
            except kubernetes.client.ApiException as error:
                if error.status == 410:
                    version = ""
                    continue
                self.error = error
                return
            except BaseException as error:  # reported by the test
                self.error = error
                return

    def take(self, kind: str, obj: Obj) -> None:
        uid = obj["metadata"]["uid"]
        status = obj.get("status") or {}
        with self.lock:
            self.users[uid] = obj["spec"]["user"]
            if kind == "DELETED":
                self.current.pop(uid, None)
                self.deleted.add(uid)
                return
            self.current[uid] = obj
            if status.get("phase") == "Assigned" and status.get("host"):
                self.hosts_of.setdefault(uid, set()).add(status["host"])
            counts: dict[str, int] = {}
            for o in self.current.values():
                s = o.get("status") or {}
                if s.get("phase") == "Assigned" and s.get("host"):
                    counts[s["host"]] = counts.get(s["host"], 0) + 1
            for host, n in counts.items():
                self.most[host] = max(self.most.get(host, 0), n)

    def check(self, logged_off: set[str]) -> None:
        """Nothing moved, over the limit, or lost (only ``logged_off`` users' requests went)."""
        assert self.error is None, f"the request watch failed: {self.error!r}"
        with self.lock:
            moved = {self.users[u]: h for u, h in self.hosts_of.items() if len(h) > 1}
            assert not moved, f"requests assigned to more than one host: {moved}"
            over = {h: n for h, n in self.most.items() if n > LIMIT}
            assert not over, f"hosts over their limit of {LIMIT}: {over}"
            gone = sorted(self.users[u] for u in self.deleted)
            assert gone == sorted(logged_off), f"requests deleted: {gone}, expected {logged_off}"

    def host_of(self, user: str) -> str | None:
        with self.lock:
            for obj in self.current.values():
                status = obj.get("status") or {}
                if obj["spec"]["user"] == user and status.get("phase") == "Assigned":
                    return str(status["host"])
        return None


@pytest.fixture
def desktops(
    hosts_bridge: str,
    rdp_client: None,
    namespace: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[tuple[XrdpHosts, dict[str, Host]]]:
    hosts = XrdpHosts(tmp_path / "hosts", hosts_bridge)
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    try:
        made = hosts.up(HOSTS, DESKTOP_USERS)
        for name in HOSTS:
            logs.append((f"xrdp host {name} logs", lambda n=name: hosts.logs(n)))
        yield hosts, made
    finally:
        hosts.down()


@pytest.fixture
def agent_credentials(
    kube: Kube, namespace: str, tmp_path: Path
) -> Iterator[Callable[[list[str]], dict[str, Path]]]:
    """Kubeconfigs of the ServiceAccounts hostpool-agent-<host> that the chart makes for
    machines outside the cluster (``agents.hosts``), each holding only that account's token
    (made as docs/install.md shows); the chart's policy is deleted afterwards."""
    assert kube.bin_dir is not None
    bin_dir = kube.bin_dir
    kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(kube.kubeconfig)]
    applied: list[Obj] = []

    def make(hosts: list[str]) -> dict[str, Path]:
        values = {"agents.hosts": hosts, "agents.namespaces": [namespace]}
        release = unique_name("desk", max_length=20)
        applied.extend(apply_agent_objects(bin_dir, kube.kubeconfig, release, namespace, values))
        configs = {}
        for host in hosts:
            account = f"hostpool-agent-{host}"
            token = wait_for(
                lambda a=account: run_tool(  # type: ignore[misc]
                    [*kubectl, "create", "token", a, "-n", namespace, "--duration", "1h"]
                ).strip(),
                30,
                what=f"a token of {account}",
                retry_on=(AssertionError,),
            )
            target = tmp_path / f"{host}.kubeconfig"
            configs[host] = token_kubeconfig(kube.kubeconfig, token, target)
        return configs

    yield make
    policies = [d for d in applied if d["kind"].startswith("ValidatingAdmissionPolicy")]
    delete_objects(bin_dir, kube.kubeconfig, policies)


@pytest.fixture
def agents(
    namespace: str,
    desktops: tuple[XrdpHosts, dict[str, Host]],
    agent_credentials: Callable[[list[str]], dict[str, Path]],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, NetnsAgent]]:
    """Each host's agent in its network namespace, under the host's own credential."""
    hosts, _ = desktops
    made: dict[str, NetnsAgent] = {}
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    for host, config in agent_credentials(list(HOSTS)).items():
        agent = NetnsAgent(
            hosts, host, namespace, config, tmp_path / f"agent-{host}.log", AGENT_INTERVAL
        )
        made[host] = agent
        logs.append((f"agent {host} log", lambda a=agent: a.text()[-4000:]))
    yield made
    codes = {host: agent.stop() for host, agent in made.items()}
    bad = {h: c for h, c in codes.items() if c not in (0, None)}
    assert not bad, f"agents exited uncleanly: {bad}"


def rdp_reply(reply: Reply) -> Obj:
    assert reply.status == 200, f"connect answered {reply.status}: {reply.text[:400]}"
    assert isinstance(reply.body, dict)
    return reply.body


def state_of(cluster: Cluster, name: str) -> str | None:
    return (cluster.request(name).get("status") or {}).get("sessionState")


def host_colour(hosts: XrdpHosts, host: str) -> str:
    env = (hosts.directory / host / "run" / "host.env").read_text()
    return env.split('HOSTPOOL_DESKTOP_COLOUR="', 1)[1].split('"', 1)[0].lower()


def test_users_log_on_to_real_desktops_through_the_broker(
    kube: Kube,
    cluster: Cluster,
    namespace: str,
    operator_process: OperatorProcess,
    desktops: tuple[XrdpHosts, dict[str, Host]],
    agents: dict[str, NetnsAgent],
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    hosts, made = desktops
    timings: dict[str, float] = {}
    cluster.setup_pool(
        POOL,
        "DepthFirst",
        LIMIT,
        hosts=HOSTS,
        entitlements={"users": [*DESKTOP_USERS, "erin"], "groups": []},
    )
    for agent in agents.values():
        agent.start()
    for name, host in made.items():
        cluster.wait(
            lambda n=name, a=host.address: (  # type: ignore[misc]
                ((cluster.host(n).get("status") or {}).get("agent") or {}).get("address") == a
            ),
            f"the agent of {name} to report its address {host.address}",
        )
    broker = brokers()
    watch = RequestWatch(kube, namespace)
    watch.start()
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    display = VirtualDisplay(tmp_path / "xvfb.log")
    clients: list[RdpClient] = []
    try:
        with display:

            def log_on(user: str, step: str) -> tuple[Obj, RdpClient]:
                started = time.monotonic()
                answer = rdp_reply(broker.connect(namespace, POOL, tokens(user)))
                rdp = tmp_path / f"{user}-{len(clients)}.rdp"
                rdp.write_text(answer["rdpFile"], newline="")
                client_log = tmp_path / f"xfreerdp-{user}-{len(clients)}.log"
                client = RdpClient(
                    display, rdp, DESKTOP_USERS[user], client_log, tmp_path / "client-home"
                )
                clients.append(client)
                logs.append((f"xfreerdp {user} ({step}) log", client.log_text))
                client.start()
                cluster.wait(
                    lambda: state_of(cluster, answer["request"]) == "Active",
                    f"{user}'s session to be reported Active ({step})",
                    timeout=45,
                )
                timings[f"{step}: connect -> Active"] = time.monotonic() - started
                return answer, client

            def shows(host: str, step: str) -> None:
                # The client's screen is the remote desktop: that host's colour.
                shot = display.screenshot(tmp_path / f"{step}.png")
                colour = wait_for(
                    lambda: (
                        pixel(display.screenshot(shot), *BACKGROUND) == host_colour(hosts, host)
                    ),
                    15,
                    what=f"the client's screen to show {host}'s desktop ({step})",
                )
                assert colour

            # 1. alice signs in and gets her desktop on the host the operator chose.
            alice, alice_client = log_on("alice", "alice logs on")
            host_a = alice["host"]
            assert alice["reason"] == "NewSession"
            assert alice["address"] == made[host_a].address
            assert f"full address:s:{made[host_a].address}:3389" in alice["rdpFile"]
            shows(host_a, "alice-desktop")
            (alice_display,) = xorg_displays("alice")
            assert alice_display // 10 == HOSTS.index(host_a) + 1  # the host's displays
            alice_xterm = [p for p, a in session_processes("alice") if a.startswith("xterm")]
            assert alice_xterm, session_processes("alice")
            assert hosts.established(host_a) == 1

            # 2. bob lands beside her (depth-first), carol on the other host.
            bob, bob_client = log_on("bob", "bob logs on")
            assert bob["host"] == host_a
            carol, _ = log_on("carol", "carol logs on")
            host_b = carol["host"]
            assert host_b != host_a
            shows(host_b, "carol-desktop")  # the newest client's window is on top

            # 3. alice's client dies: Disconnected, her session and her slot kept.
            alice_client.kill()
            cluster.wait(
                lambda: state_of(cluster, alice["request"]) == "Disconnected",
                "alice's session to be reported Disconnected",
            )
            assert xorg_displays("alice") == [alice_display]
            cluster.wait(
                lambda: (
                    ((cluster.host(host_a).get("status") or {}).get("sessions") or {})
                    in ({"total": 2, "connecting": 0, "active": 1, "disconnected": 1},)
                ),
                f"{host_a} to count bob active and alice disconnected",
            )

            # 4. Her host is drained; she reconnects: same host, same X server, same xterm.
            cluster.patch("SessionHost", host_a, {"spec": {"drainMode": True}})
            again, _ = log_on("alice", "alice reconnects (drained host)")
            assert again["request"] == alice["request"]
            assert again["reason"] == "Reconnected"
            assert again["host"] == host_a
            assert xorg_displays("alice") == [alice_display]
            still = [p for p, a in session_processes("alice") if a.startswith("xterm")]
            assert still == alice_xterm, "her old windows are gone"
            shows(host_a, "alice-reconnected")
            # A new user does not land on the drained host.
            dave = rdp_reply(broker.connect(namespace, POOL, tokens("dave")))
            assert dave["host"] == host_b, dave

            # 5. Both hosts are full; erin waits. alice logs off inside her desktop: the agent
            #    deletes her request and erin gets the slot.
            cluster.patch("SessionHost", host_a, {"spec": {"drainMode": False}})
            waiting = broker.connect(namespace, POOL, tokens("erin"))
            assert waiting.status == 202, waiting.text
            erin_request = waiting.body["request"]
            logged_off = time.monotonic()
            end_window_manager("alice")
            cluster.wait(
                lambda: alice["request"] not in cluster.requests(),
                "the agent to delete alice's request after her logoff",
                timeout=20,
            )
            timings["alice logs off: window manager ends -> request deleted"] = (
                time.monotonic() - logged_off
            )
            deleted = time.monotonic()
            cluster.wait_request(erin_request, phase_="Assigned", host=host_a, timeout=20)
            timings["alice's request deleted -> erin assigned"] = time.monotonic() - deleted
            assert timings["alice's request deleted -> erin assigned"] < AGENT_INTERVAL + 1
            assert xorg_displays("alice") == []

            # 6. bob is logged off by force (the broker's DELETE .../session): his real
            #    session ends at the deadline.
            bob_display = xorg_displays("bob")
            assert bob_display, session_processes("bob")
            forced = time.monotonic()
            ended = broker.end_session(namespace, POOL, tokens("bob"))
            assert ended.status == 202, ended.text
            cluster.wait(
                lambda: bob["request"] not in cluster.requests() and not xorg_displays("bob"),
                "bob's session to end and his request to go",
                timeout=30,
            )
            timings["forced logoff: DELETE session -> session ended"] = time.monotonic() - forced
            assert bob_client.wait_exit(10) is not None, "bob's client still connected"

        watch.check(logged_off={"alice", "bob"})
        assert watch.host_of("erin") == host_a
        cpu = {h: agent.cpu_and_memory() for h, agent in agents.items()}
        report = [f"  {k}: {v:.2f} s" for k, v in timings.items()]
        report += [
            f"  agent {h}: {c:.2f} CPU-s in {up:.0f} s ({100 * c / up:.1f} % of a core), "
            f"{rss / 2**20:.1f} MiB RSS"
            for h, (c, rss, up) in cpu.items()
        ]
        print("desktop timings:\n" + "\n".join(report))
    finally:
        for client in clients:
            client.kill()
        watch.stopping.set()


# ---------------------------------------------------------------------------------------
# a container host: the session-host image run by podman

CONTAINER_HOST = "ct-1"
#: The session-host image's desktop colour (operator/session-host/xsession).
IMAGE_COLOUR = "#0a7d6c"


@pytest.mark.usefixtures("hosts_bridge", "rdp_client")
def test_a_user_gets_the_desktop_of_a_session_host_container(
    cluster: Cluster,
    namespace: str,
    operator_process: OperatorProcess,
    agent_credentials: Callable[[list[str]], dict[str, Path]],
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The session-host image (xrdp and hostpool-agent --sessions-from xrdp in one container,
    on podman's bridge network) as a host: its agent reports the address, alice connects
    through the broker and gets the container's desktop, her session is followed, and the
    container stops cleanly with her on it."""
    image = build_image("--session-host")
    config = agent_credentials([CONTAINER_HOST])[CONTAINER_HOST]
    users = tmp_path / "users"
    users.write_text(f"alice:{DESKTOP_USERS['alice']}\n")
    users.chmod(0o600)
    cluster.setup_pool(
        POOL, "DepthFirst", LIMIT, hosts=[CONTAINER_HOST], entitlements={"users": ["alice"]}
    )
    broker = brokers()
    name = unique_name("desktop", max_length=30)
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    logs.append((f"container {name} log", lambda: podman("logs", name, check=False)[-4000:]))
    display = VirtualDisplay(tmp_path / "xvfb.log")
    client: RdpClient | None = None
    started = time.monotonic()
    podman(
        "run", "-d", "--name", name,
        "-v", f"{users}:/etc/hostpool/users:ro",
        "-v", f"{config}:/etc/hostpool/kubeconfig:ro",
        "-e", "KUBECONFIG=/etc/hostpool/kubeconfig",
        "-e", f"HOSTPOOL_AGENT_HOST={CONTAINER_HOST}",
        "-e", f"HOSTPOOL_AGENT_ARGS=--namespace {namespace} --interval {AGENT_INTERVAL}",
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
        reported = time.monotonic() - started
        with display:
            connect = time.monotonic()
            answer = rdp_reply(broker.connect(namespace, POOL, tokens("alice")))
            assert answer["host"] == CONTAINER_HOST
            assert answer["address"] == address
            rdp = tmp_path / "alice.rdp"
            rdp.write_text(answer["rdpFile"], newline="")
            client = RdpClient(
                display, rdp, DESKTOP_USERS["alice"], tmp_path / "xfreerdp.log",
                tmp_path / "client-home",
            )  # fmt: skip
            logs.append(("xfreerdp log", client.log_text))
            client.start()
            cluster.wait(
                lambda: state_of(cluster, answer["request"]) == "Active",
                "the container's agent to report alice Active",
                timeout=45,
            )
            active = time.monotonic() - connect
            shot = tmp_path / "container-desktop.png"
            wait_for(
                lambda: pixel(display.screenshot(shot), *BACKGROUND) == IMAGE_COLOUR,
                15,
                what="the client's screen to show the container's desktop",
            )
            client.kill()
            cluster.wait(
                lambda: state_of(cluster, answer["request"]) == "Disconnected",
                "the container's agent to report alice Disconnected",
            )
        stopping = time.monotonic()
        podman("stop", "--time", "20", name, timeout=60)
        stopped = time.monotonic() - stopping
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).strip()
        assert code == "0", f"the container exited with {code}"
        print(
            f"container host: podman run -> agent reported {reported:.2f} s; "
            f"connect -> Active {active:.2f} s; stop with a session on it {stopped:.2f} s"
        )
    finally:
        if client is not None:
            client.kill()
        podman("rm", "--force", "--time", "5", name, check=False)
