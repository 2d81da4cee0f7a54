"""What an xrdp 0.9 host's process table and socket table say about its sessions.

xrdp's session manager (sesman) forks one root process per session; under it run the
user's Xorg (xorgxrdp, ``Xorg :N ... -config xrdp/xorg.conf``), ``xrdp-chansrv`` and the
window manager. xrdp itself reaches a session's Xorg over the unix socket
``xrdp_display_N``: while a client is attached, that socket has an established connection;
when the client goes, the connection goes and the session stays (Disconnected). sesman
0.9 writes no utmp and its ``xrdp-sesadmin`` cannot tell the two states apart, so this
reads the tables directly. A session ends when its window manager exits (sesman waits on
it), which is how a logoff is done.

Pure: the agent reads ``/proc`` (``agent.machine``) and passes the text and process facts
in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..api.base import SessionState

#: The unix socket state "connected" in /proc/net/unix (SS_CONNECTED), and the flag of a
#: listening socket (__SO_ACCEPTCON).
CONNECTED = "03"
ACCEPTS_CONNECTIONS = 0x10000
DISPLAY_SOCKET = "xrdp_display_"
XORG_CONFIG = "xrdp/xorg.conf"
CHANNEL_SERVER = "xrdp-chansrv"


@dataclass(frozen=True, slots=True)
class Process:
    """One process as the agent saw it."""

    pid: int
    parent: int
    user: str
    name: str
    cmdline: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class XrdpSession:
    """One xrdp session: its display, user, the sesman process that owns it and its Xorg."""

    display: int
    user: str
    leader: int  # sesman's per-session process
    xorg: int


def xorg_display(cmdline: Sequence[str]) -> int | None:
    """The display of an xorgxrdp X server (``Xorg :N ... -config xrdp/xorg.conf``), else
    None (any other X server on the machine is not a session of xrdp)."""
    if len(cmdline) < 2 or not cmdline[0].rsplit("/", 1)[-1].startswith("Xorg"):
        return None
    display = cmdline[1]
    if not display.startswith(":") or not display[1:].isdigit():
        return None
    args = list(cmdline[2:])
    if "-config" not in args:
        return None
    index = args.index("-config")
    if index + 1 >= len(args) or not args[index + 1].endswith(XORG_CONFIG):
        return None
    return int(display[1:])


def connected_displays(proc_net_unix: str) -> set[int]:
    """Displays whose ``xrdp_display_N`` socket has an established connection, from the text
    of /proc/net/unix (one network namespace's unix sockets; the listening socket itself is
    not connected)."""
    return _display_sockets(proc_net_unix, listening=False)


def listening_displays(proc_net_unix: str) -> set[int]:
    """Displays whose X server listens on ``xrdp_display_N`` in this network namespace: the
    sessions of this host, told without reading other processes' namespaces."""
    return _display_sockets(proc_net_unix, listening=True)


def _display_sockets(proc_net_unix: str, *, listening: bool) -> set[int]:
    displays: set[int] = set()
    for line in proc_net_unix.splitlines()[1:]:
        fields = line.split()
        # Num RefCount Protocol Flags Type St Inode Path
        if len(fields) < 8:
            continue
        try:
            accepts = bool(int(fields[3], 16) & ACCEPTS_CONNECTIONS)
        except ValueError:
            continue
        if listening != accepts or (not listening and fields[5] != CONNECTED):
            continue
        name = fields[7].rsplit("/", 1)[-1]
        if name.startswith(DISPLAY_SOCKET) and name[len(DISPLAY_SOCKET) :].isdigit():
            displays.add(int(name[len(DISPLAY_SOCKET) :]))
    return displays


def on_this_host(
    display: int, netns: int | None, own_netns: int | None, listening: set[int]
) -> bool:
    """Is an X server of this host? By its network namespace where that can be read; where
    it cannot (a container's root lacks CAP_SYS_PTRACE for other users' processes), by its
    display's socket listening in the agent's own namespace."""
    if netns is not None and own_netns is not None:
        return netns == own_netns
    return display in listening


def xrdp_sessions(processes: Iterable[Process]) -> list[XrdpSession]:
    """The xrdp sessions among these processes (those of the agent's own host)."""
    found = []
    for process in processes:
        display = xorg_display(process.cmdline)
        if display is not None:
            found.append(XrdpSession(display, process.user, process.parent, process.pid))
    return sorted(found, key=lambda s: s.display)


def session_states(sessions: Iterable[XrdpSession], connected: set[int]) -> dict[str, str]:
    """Sessions by user: Active while a client is attached to one of the user's sessions,
    else Disconnected."""
    states: dict[str, str] = {}
    for session in sessions:
        if session.display in connected:
            states[session.user] = SessionState.ACTIVE.value
        else:
            states.setdefault(session.user, SessionState.DISCONNECTED.value)
    return states


def window_managers(session: XrdpSession, processes: Iterable[Process]) -> list[int]:
    """The processes whose end ends the session: the session leader's children other than
    the X server and the channel server (the window manager, or the user's ~/.xsession)."""
    return sorted(
        p.pid
        for p in processes
        if p.parent == session.leader
        and p.pid != session.xorg
        and p.name != CHANNEL_SERVER
        and not (p.cmdline and p.cmdline[0].rsplit("/", 1)[-1] == CHANNEL_SERVER)
    )


def parse_passwd(text: str) -> dict[int, str]:
    """User names by uid from an /etc/passwd (malformed lines skipped)."""
    names: dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[0] and fields[2].isdigit():
            names.setdefault(int(fields[2]), fields[0])
    return names
