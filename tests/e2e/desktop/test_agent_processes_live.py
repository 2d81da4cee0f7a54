"""Which processes the agent takes for xrdp sessions, and which it signals at a logoff, on a
real xrdp host (a network namespace of hack/cluster/xrdp-hosts.sh with its own xrdp and
sesman) with the agent (``--sessions-from xrdp``) running inside it as root.

A session user can start a process that looks like an xorgxrdp X server: a bash script
named ``:99`` run as ``exec -a Xorg bash :99 -config xrdp/xorg.conf`` has the command line
``Xorg :99 -config xrdp/xorg.conf``. Here it runs beside a root process (a ``sleep``) under
a root parent, as a process re-parented to a pod's init or to the agent's own parent would.
The agent must not report it as a session of its user, and the user's forced logoff must not
signal the root process. A real logon (FreeRDP to the host) is still a session, and its
forced logoff ends it.

No operator runs: the test writes the requests' status (Assigned to the host, a logoff) as
the operator would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from support.cluster import Cluster
from support.desktop import (
    DesktopError,
    NetnsAgent,
    RdpClient,
    VirtualDisplay,
    XrdpHosts,
    install_client,
    xorg_displays,
)
from support.desktop_sessions import AgentHosts

POOL = "sec"
HOST = "sec-1"
USERS = {"mallory": "mallory-desk-pw", "alice": "alice-desk-pw"}
AGENT_INTERVAL = 1.0
#: What the fake X server's command line says: an xorgxrdp X server on display 99.
FAKE_ARGS = (":99", "-config", "xrdp/xorg.conf")
Obj = dict[str, Any]


@pytest.fixture
def host(agent_hosts: AgentHosts, cluster: Cluster) -> tuple[XrdpHosts, NetnsAgent]:
    """One xrdp host with the users, its SessionHost, and its agent running inside it."""
    hosts, agents = agent_hosts([HOST], USERS, first=31)
    cluster.create_pool(POOL, "DepthFirst", 4)
    cluster.create_host(HOST, POOL, address=hosts.hosts[HOST].address)
    agents[HOST].start()
    reports(cluster, 1)
    return hosts, agents[HOST]


def sampled_at(cluster: Cluster) -> str | None:
    metrics = (cluster.host(HOST).get("status") or {}).get("metrics") or {}
    return metrics.get("sampledAt")


def reports(cluster: Cluster, count: int) -> None:
    """Wait until the agent has reported ``count`` more times (each report is one sample of
    the host's sessions too)."""
    first = sampled_at(cluster)
    seen: set[str] = set()
    deadline = time.monotonic() + 20 + 3 * count * AGENT_INTERVAL
    while len(seen) < count:
        assert time.monotonic() < deadline, f"the agent did not report {count} more times"
        now = sampled_at(cluster)
        if now is not None and now != first:
            seen.add(now)
        time.sleep(0.2)


def assign(cluster: Cluster, name: str, user: str) -> None:
    """A request of ``user`` on the host, as the operator would place it."""
    cluster.create_request(name, POOL, user)
    cluster.patch_status("SessionRequest", name, {"phase": "Assigned", "host": HOST})


def session_state(cluster: Cluster, name: str) -> str | None:
    return (cluster.request(name).get("status") or {}).get("sessionState")


def log_off_now(cluster: Cluster, name: str) -> None:
    deadline = (datetime.now(UTC) - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.patch_status(
        "SessionRequest", name, {"logoff": {"message": "test logoff", "deadline": deadline}}
    )


class FakeXServer:
    """Under a root parent in the host's namespace: a root ``sleep`` and the user's fake X
    server (``exec -a Xorg bash :99 -config xrdp/xorg.conf``, the script ``:99`` in the
    user's home)."""

    def __init__(self, hosts: XrdpHosts, user: str) -> None:
        home = Path(f"/home/{user}")
        script = home / FAKE_ARGS[0]
        script.write_text("sleep 1000\n")
        shutil.chown(script, user, user)
        as_user = f"cd {home} && exec -a Xorg bash {' '.join(FAKE_ARGS)}"
        inner = (
            "sleep 1000 & "
            f"setpriv --reuid={user} --regid={user} --init-groups bash -c '{as_user}' & wait"
        )
        self.parent = subprocess.Popen(
            [*hosts.in_host(HOST), "bash", "-c", inner], start_new_session=True
        )
        self.user = user
        deadline = time.monotonic() + 10
        while True:
            children = psutil.Process(self.parent.pid).children()
            roots = [c for c in children if c.uids().real == 0]
            fakes = [c for c in children if c.uids().real != 0 and c.cmdline()[:1] == ["Xorg"]]
            if roots and fakes:
                self.root_child, self.fake = roots[0], fakes[0]
                self.commands = {p.pid: " ".join(p.cmdline()) for p in (roots[0], fakes[0])}
                break
            assert time.monotonic() < deadline, f"the fake X server did not start: {children}"
            time.sleep(0.05)

    def describe(self) -> str:
        def state(proc: psutil.Process) -> str:
            return "running" if proc.is_running() else "gone"

        return (
            f"root parent {self.parent.pid} ({'running' if self.parent.poll() is None else 'gone'}"
            f"), root child {self.root_child.pid} ({self.commands[self.root_child.pid]}: "
            f"{state(self.root_child)}), {self.user}'s fake {self.fake.pid} "
            f"({self.commands[self.fake.pid]}: {state(self.fake)})"
        )

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.parent.pid, signal.SIGKILL)
        self.parent.wait(10)
        for proc in (self.root_child, self.fake):
            with contextlib.suppress(psutil.Error):
                proc.kill()


@pytest.fixture
def mallorys_fake(cluster: Cluster, host: tuple[XrdpHosts, NetnsAgent]) -> Iterator[FakeXServer]:
    """mallory's request Assigned to the host, and her fake X server running beside root's
    process."""
    hosts, _ = host
    assign(cluster, "mallory", "mallory")
    fake = FakeXServer(hosts, "mallory")
    try:
        yield fake
    finally:
        fake.stop()


def test_a_fake_x_server_of_a_user_is_not_a_session(
    cluster: Cluster, mallorys_fake: FakeXServer
) -> None:
    reports(cluster, 3)
    state = session_state(cluster, "mallory")
    assert state is None, (
        f"the agent took mallory's fake X server for a session (sessionState {state}): "
        + mallorys_fake.describe()
    )


def test_a_logoff_signals_no_process_of_another_user(
    cluster: Cluster, mallorys_fake: FakeXServer
) -> None:
    fake = mallorys_fake
    reports(cluster, 2)
    log_off_now(cluster, "mallory")
    cluster.wait(
        lambda: "mallory" not in cluster.requests(),
        "the agent to carry out mallory's logoff (delete her request)",
        timeout=30,
    )
    reports(cluster, 1)
    assert fake.root_child.is_running(), (
        "the logoff of mallory signalled root's process: " + fake.describe()
    )
    assert fake.parent.poll() is None, f"the root parent ended: {fake.describe()}"


def test_a_real_session_is_reported_and_its_logoff_ends_only_it(
    cluster: Cluster, host: tuple[XrdpHosts, NetnsAgent], tmp_path: Path
) -> None:
    """alice logs on with FreeRDP: Active; mallory's fake X server and the root process
    beside it run meanwhile; alice's forced logoff ends her X server and nothing else."""
    hosts, _ = host
    try:
        install_client()
    except DesktopError as error:
        pytest.fail(f"the RDP client cannot be installed: {error}", pytrace=False)
    assign(cluster, "alice", "alice")
    fake = FakeXServer(hosts, "mallory")
    rdp = tmp_path / "alice.rdp"
    rdp.write_text(f"full address:s:{hosts.hosts[HOST].address}:3389\r\nusername:s:alice\r\n")
    display = VirtualDisplay(tmp_path / "xvfb.log")
    try:
        with display:
            client = RdpClient(
                display, rdp, USERS["alice"], tmp_path / "xfreerdp.log", tmp_path / "home"
            )
            client.start()
            try:
                cluster.wait(
                    lambda: session_state(cluster, "alice") == "Active",
                    "the agent to report alice's real session Active",
                    timeout=45,
                )
                assert xorg_displays("alice"), "alice has no X server"
                log_off_now(cluster, "alice")
                cluster.wait(
                    lambda: "alice" not in cluster.requests() and not xorg_displays("alice"),
                    "alice's session to end and her request to go",
                    timeout=30,
                )
            finally:
                client.kill()
        assert fake.root_child.is_running(), "alice's logoff signalled root's process"
        assert fake.fake.is_running(), "alice's logoff signalled mallory's process"
        assert fake.parent.poll() is None, "alice's logoff signalled the root parent"
    finally:
        fake.stop()
