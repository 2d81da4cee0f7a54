"""Users' sessions on real xrdp hosts, as the desktop tests look at them: a user's FreeRDP
client on a virtual display of its own (:class:`Desktop`), the user's X server on the host
(its process, its display), and the windows the agent draws in it (by title, in the X
server's window tree).

The tests run as root on the same machine as the hosts' sessions (network namespaces share
the process table and the file system), so they read a session's X server with the user's
own cookie.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from support.cluster import Cluster
from support.desktop import NetnsAgent, RdpClient, VirtualDisplay, XrdpHosts, xorg_displays

#: The title of the agent's window for an administrator's notice.
NOTICE_TITLE = "Message from your administrator"
#: The title of the agent's window for a forced logoff's message.
LOGOFF_TITLE = "Your session will end"
Obj = dict[str, Any]


class AgentHosts(Protocol):
    """The desktop tests' ``agent_hosts`` fixture: xrdp hosts ``names`` with ``users``
    (name: password), network addresses from ``first`` on, taking one-time logon credentials
    of the broker whose public keys are ``signon``, with their clipboard channel as
    ``clipboard`` says (Enabled or Disabled); the hosts and their agents (not started) by
    name."""

    def __call__(
        self,
        names: Sequence[str],
        users: Mapping[str, str],
        *,
        first: int,
        signon: Path | None = None,
        clipboard: str = "Enabled",
    ) -> tuple[XrdpHosts, dict[str, NetnsAgent]]: ...


def stamp(moment: datetime | None = None) -> str:
    """A status time as the API has it (RFC 3339, seconds, UTC)."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_of(cluster: Cluster, name: str) -> Obj:
    """The request's status now ({} when it has none)."""
    return cluster.request(name).get("status") or {}


def wait_state(cluster: Cluster, name: str, state: str, what: str, timeout: float = 45) -> None:
    """Wait until the agent reports the session of request ``name`` in ``state``."""
    cluster.wait(
        lambda: status_of(cluster, name).get("sessionState") == state, what, timeout=timeout
    )


class Desktop:
    """A user's RDP client on a virtual display of its own, for a session on ``host``."""

    def __init__(
        self,
        hosts: XrdpHosts,
        user: str,
        tmp_path: Path,
        *,
        host: str,
        password: str,
    ) -> None:
        self.user = user
        self.password = password
        self.tmp_path = tmp_path
        self.rdp = tmp_path / f"{user}.rdp"
        self.rdp.write_text(
            f"full address:s:{hosts.hosts[host].address}:3389\r\nusername:s:{user}\r\n"
        )
        self.display = VirtualDisplay(tmp_path / f"xvfb-{user}.log")
        self.clients: list[RdpClient] = []

    def connect(self, logs: list[Any]) -> RdpClient:
        """A new FreeRDP client of the user (its log registered in ``logs``), started."""
        n = len(self.clients)
        client = RdpClient(
            self.display,
            self.rdp,
            self.password,
            self.tmp_path / f"xfreerdp-{self.user}-{n}.log",
            self.tmp_path / f"home-{self.user}",
        )
        logs.append((f"xfreerdp {self.user} #{n} log", client.log_text))
        self.clients.append(client)
        client.start()
        return client

    def stop(self) -> None:
        for client in self.clients:
            client.kill()


def xorg_pid(user: str) -> int:
    """The process id of the user's one xrdp X server."""
    out = subprocess.run(
        ["pgrep", "-u", user, "-f", "Xorg :[0-9]+ .*xrdp/xorg.conf"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert len(out) == 1, f"{user} has X servers {out}"
    return int(out[0])


def session_env(user: str) -> dict[str, str]:
    """The environment of an X client of the user's one session (display and cookie)."""
    (display,) = xorg_displays(user)
    return {**os.environ, "DISPLAY": f":{display}", "XAUTHORITY": f"/home/{user}/.Xauthority"}


def windows_titled(user: str, title: str) -> int:
    """How many top-level windows of the user's session carry this title (xwininfo)."""
    out = subprocess.run(
        ["xwininfo", "-root", "-tree"],
        capture_output=True,
        text=True,
        env=session_env(user),
        check=True,
        timeout=20,
    ).stdout
    return len(re.findall(rf'^\s+0x[0-9a-f]+ "{re.escape(title)}":', out, re.MULTILINE))
