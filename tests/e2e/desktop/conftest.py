"""What the desktop tests need of this machine: the suite's hosts' bridge, for real xrdp
hosts in network namespaces, and the RDP client. Each fails under CI (the desktops must run
there) and skips elsewhere, saying why, when it cannot be had. On them: xrdp hosts with their
agents (``agent_hosts``), and the browser-desktop tests' set-up (``web_desktop``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from support.broker_helpers import BrokerProcess
from support.cluster import Cluster
from support.desktop import NetnsAgent, XrdpHosts, why_no_client, why_not
from support.desktop_sessions import AgentHosts
from support.kube import Kube
from support.operator_process import OperatorProcess
from support.report_logs import EXTRA_LOGS
from support.web_desktop import WebDesktops, cannot_run

#: How often the agents of the desktop tests report and act (seconds).
AGENT_INTERVAL = 1.0


@pytest.fixture
def hosts_bridge(kube: Kube) -> str:
    """The name of the suite's control plane's hosts' bridge: xrdp hosts in network
    namespaces go on it, and their agents reach the API server over it."""
    problem = why_not()
    if not problem and (kube.control_plane is None or not kube.control_plane.hosts_bridge):
        problem = (
            "the control plane does not serve on a hosts' bridge (an external cluster, or "
            "not root): the agents inside network namespaces cannot reach it"
        )
    if problem:
        cannot_run(f"real xrdp hosts cannot run here: {problem}")
    assert kube.control_plane is not None
    assert kube.control_plane.hosts_bridge
    return kube.control_plane.hosts_bridge.split(":", 1)[0]


@pytest.fixture
def rdp_client() -> None:
    """FreeRDP, Xvfb and ImageMagick, installed where missing."""
    problem = why_no_client()
    if problem:
        cannot_run(f"the RDP client cannot run here: {problem}")


@pytest.fixture
def agent_hosts(
    kube: Kube,
    hosts_bridge: str,
    rdp_client: None,
    namespace: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[AgentHosts]:
    """Brings up xrdp hosts (network namespaces from address ``first`` on, with these users
    and passwords) and an agent for each, in this test's namespace, not yet started (the
    test creates the SessionHosts first). The hosts' and agents' logs go with a failure;
    after the test the agents are stopped (an agent that exited uncleanly fails it) and the
    hosts taken down."""
    made: list[tuple[XrdpHosts, dict[str, NetnsAgent]]] = []
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])

    def up(
        names: Sequence[str],
        users: Mapping[str, str],
        *,
        first: int,
        signon: Path | None = None,
        clipboard: str = "Enabled",
    ) -> tuple[XrdpHosts, dict[str, NetnsAgent]]:
        hosts = XrdpHosts(tmp_path / f"hosts-{first}", hosts_bridge, first=first)
        agents: dict[str, NetnsAgent] = {}
        made.append((hosts, agents))
        hosts.up(names, users, signon=signon, clipboard=clipboard)
        for name in names:
            logs.append((f"xrdp host {name} logs", lambda n=name: hosts.logs(n)))
            agents[name] = NetnsAgent(
                hosts, name, namespace, kube.kubeconfig, tmp_path / f"agent-{name}.log",
                AGENT_INTERVAL,
            )  # fmt: skip
            logs.append((f"agent {name} log", lambda a=agents[name]: a.text()[-6000:]))
        return hosts, agents

    try:
        yield up
    finally:
        codes = {}
        for hosts, agents in made:
            codes.update({name: agent.stop() for name, agent in agents.items()})
            hosts.down()
        bad = {n: c for n, c in codes.items() if c not in (0, None)}
        assert not bad, f"agents exited uncleanly: {bad}"


@pytest.fixture
def web_desktop(
    cluster: Cluster,
    operator_process: OperatorProcess,
    agent_hosts: AgentHosts,
    brokers: Callable[..., BrokerProcess],
    tmp_path: Path,
) -> WebDesktops:
    """Desktops in the browser: xrdp hosts with their agents, a pool of them with
    ``connection.web`` on, and brokers with the web client and the portal
    (support.web_desktop.WebDesktops), in this test's namespace with its operator running."""
    del operator_process
    return WebDesktops(cluster, agent_hosts, brokers, tmp_path)
