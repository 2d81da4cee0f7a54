"""What an xrdp 0.9 host's process table and socket table say about its sessions.

xrdp's session manager (sesman) forks one root process per session; under it run the
user's Xorg (xorgxrdp, ``Xorg :N ... -config xrdp/xorg.conf``), ``xrdp-chansrv`` and the
window manager. xrdp itself reaches a session's Xorg over the unix socket
``xrdp_display_N``: while a client is attached, that socket has an established connection;
when the client goes, the connection goes and the session stays (Disconnected). sesman
0.9 writes no utmp and its ``xrdp-sesadmin`` cannot tell the two states apart, so this
reads the tables directly. A session ends when its window manager exits (sesman waits on
it), which is how a logoff is done.

Anyone can start a process whose command line looks like an X server's (``exec -a Xorg``),
so a command line alone proves nothing. A session's X server is the real Xorg binary (its
``/proc/PID/exe``) and was started by sesman's session process: every process between the
two is root's, which no user can arrange for a process of their own. Where a user's exe
cannot be read (a container's root without CAP_SYS_PTRACE), the X server must be a direct
child of the session process and carry the name Xorg (the kernel's, from the file it runs):
the only child of a session process its user controls is their own window manager, so a
fake there is a session of a user who has one. A logoff signals only processes of the
session's uid, and never the agent, its ancestors or pid 1, whatever the tree says
(systemd-logind ends a session by its cgroup for the same reason: a tree can be arranged).

Pure: the agent reads ``/proc`` (``agent.machine``) and passes the text and process facts
in.
"""

from __future__ import annotations

import base64
import hashlib
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cryptography import x509

from ..api.base import SessionState

#: The unix socket state "connected" in /proc/net/unix (SS_CONNECTED), and the flag of a
#: listening socket (__SO_ACCEPTCON).
CONNECTED = "03"
ACCEPTS_CONNECTIONS = 0x10000
DISPLAY_SOCKET = "xrdp_display_"
XORG_CONFIG = "xrdp/xorg.conf"
CHANNEL_SERVER = "xrdp-chansrv"
#: Where distributions install the X server binary that xorgxrdp runs, and sesman (0.10's
#: per-session ``xrdp-sesexec`` too). Only root can write there.
XORG_BINARIES = frozenset(
    {"/usr/lib/xorg/Xorg", "/usr/libexec/Xorg", "/usr/lib/Xorg", "/usr/bin/Xorg"}
)
SESSION_MANAGERS = frozenset(
    f"{directory}/{name}"
    for directory in (
        "/usr/sbin",
        "/usr/local/sbin",
        "/usr/libexec/xrdp",
        "/usr/local/libexec/xrdp",
    )
    for name in ("xrdp-sesman", "xrdp-sesexec")
)
XORG_NAME = "Xorg"
#: The suffix the kernel adds to /proc/PID/exe when the file was replaced (a package upgrade).
DELETED = " (deleted)"
#: A uid that is no one's: a process whose real, effective and saved uids differ (a setuid
#: program) is never counted as a user's, so never signalled for one.
MIXED_UIDS = -1
ROOT = 0
#: Parent links followed at most (a table read while processes come and go may hold a loop).
MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class Process:
    """One process as the agent saw it: ``uid`` is its uid when its real, effective and saved
    uids agree (else ``MIXED_UIDS``); ``exe`` what /proc/PID/exe names (None: unreadable);
    ``name`` the kernel's name for it (from the file it runs, not from its arguments)."""

    pid: int
    parent: int
    user: str
    name: str
    cmdline: tuple[str, ...]
    uid: int = MIXED_UIDS
    exe: str | None = None


@dataclass(frozen=True, slots=True)
class XrdpSession:
    """One xrdp session: its display, user, the sesman process that owns it, its Xorg and
    the uid the X server runs as (the session's)."""

    display: int
    user: str
    leader: int  # sesman's per-session process
    xorg: int
    uid: int = MIXED_UIDS
    auth: str | None = None  # the X server's -auth file (relative: to its working directory)


@dataclass(frozen=True, slots=True)
class LogoffPlan:
    """A user's logoff: the displays of their sessions and their X servers (gone: the
    sessions ended), the processes to TERM (window managers), and those to KILL when the
    sessions have not ended in time (what is left of them: X servers and window managers)."""

    displays: tuple[int, ...]
    term: tuple[int, ...]
    kill: tuple[int, ...]
    servers: tuple[int, ...] = ()


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


def _binary(exe: str | None) -> str | None:
    return exe.removesuffix(DELETED) if exe is not None else None


def session_leader(xorg: Process, by_pid: dict[int, Process]) -> int | None:
    """The sesman process whose session ``xorg`` is the X server of, or None when it is none:
    the nearest ancestor that is root's and runs sesman, reached through root's processes
    only; the X server runs the real Xorg binary (where its exe cannot be read: a direct
    child of that sesman process, named Xorg)."""
    if xorg.uid == MIXED_UIDS or xorg_display(xorg.cmdline) is None:
        return None
    exe = _binary(xorg.exe)
    if exe is None:
        if xorg.name != XORG_NAME:
            return None
    elif exe not in XORG_BINARIES:
        return None
    step = by_pid.get(xorg.parent)
    for depth in range(MAX_DEPTH):
        if step is None or step.uid != ROOT or step.pid == xorg.pid:
            return None
        if _binary(step.exe) in SESSION_MANAGERS:
            return step.pid
        if exe is None and depth == 0:
            return None  # unverified X server: only a direct child of sesman's process
        step = by_pid.get(step.parent)
    return None


def xrdp_sessions(processes: Iterable[Process]) -> list[XrdpSession]:
    """The xrdp sessions among these processes (those of the agent's own host)."""
    by_pid = {p.pid: p for p in processes}
    found = []
    for process in by_pid.values():
        display = xorg_display(process.cmdline)
        if display is None:
            continue
        leader = session_leader(process, by_pid)
        if leader is not None:
            found.append(
                XrdpSession(
                    display,
                    process.user,
                    leader,
                    process.pid,
                    process.uid,
                    auth_argument(process.cmdline),
                )
            )
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
    the X server and the channel server (the window manager, or the user's ~/.xsession),
    of the session's uid."""
    return sorted(
        p.pid
        for p in processes
        if p.parent == session.leader
        and p.uid == session.uid
        and p.pid != session.xorg
        and p.name != CHANNEL_SERVER
        and not (p.cmdline and p.cmdline[0].rsplit("/", 1)[-1] == CHANNEL_SERVER)
    )


def protected_pids(processes: Iterable[Process], agent: int) -> set[int]:
    """Processes no logoff may signal: the agent, its ancestors, pid 1 (and 0, no process)."""
    parents = {p.pid: p.parent for p in processes}
    found = {0, 1}
    pid = agent
    while pid not in found:
        found.add(pid)
        pid = parents.get(pid, 0)
    return found


def logoff_plan(user: str, processes: Iterable[Process], agent: int) -> LogoffPlan:
    """What a logoff of ``user`` signals: only processes of each session's uid, never a
    protected one (see ``protected_pids``)."""
    table = list(processes)
    sessions = [s for s in xrdp_sessions(table) if s.user == user]
    uid_of = {p.pid: p.uid for p in table}
    keep = protected_pids(table, agent)

    def allowed(pid: int, session: XrdpSession) -> bool:
        return pid not in keep and session.uid >= ROOT and uid_of.get(pid) == session.uid

    term = sorted({pid for s in sessions for pid in window_managers(s, table) if allowed(pid, s)})
    xorgs = {s.xorg for s in sessions if allowed(s.xorg, s)}
    return LogoffPlan(
        displays=tuple(s.display for s in sessions),
        term=tuple(term),
        kill=tuple(sorted(xorgs | set(term))),
        servers=tuple(s.xorg for s in sessions),
    )


def parse_passwd(text: str) -> dict[int, str]:
    """User names by uid from an /etc/passwd (malformed lines skipped)."""
    names: dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[0] and fields[2].isdigit():
            names.setdefault(int(fields[2]), fields[0])
    return names


def parse_homes(text: str) -> dict[int, str]:
    """Home directories by uid from an /etc/passwd (malformed lines skipped)."""
    homes: dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 6 and fields[2].isdigit() and fields[5].startswith("/"):
            homes.setdefault(int(fields[2]), fields[5])
    return homes


def auth_argument(cmdline: Sequence[str]) -> str | None:
    """The file an X server was told to take its cookies from (``-auth FILE``)."""
    args = list(cmdline[1:])
    if "-auth" not in args:
        return None
    index = args.index("-auth")
    value = args[index + 1] if index + 1 < len(args) else ""
    return value or None


# ------------------------------------------------------------------ xrdp's connections
#
# xrdp forks a process per client connection; it reaches the session's X server over the
# unix socket xrdp_display_N. Ending that process ends the client's connection and leaves
# the session (a disconnect). Which process it is: the kernel's socket table (sock_diag,
# NETLINK_SOCK_DIAG) names each unix socket's peer; the X server's end of an established
# xrdp_display_N connection is one of the X server's own descriptors, its peer is xrdp's.

XRDP_BINARIES = frozenset({"/usr/sbin/xrdp", "/usr/local/sbin/xrdp", "/usr/bin/xrdp"})
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
UDIAG_SHOW_NAME, UDIAG_SHOW_PEER = 0x1, 0x4
UNIX_DIAG_NAME, UNIX_DIAG_PEER = 0, 2
AF_UNIX = 1
ESTABLISHED = 1  # TCP_ESTABLISHED, as unix sockets report a connection


@dataclass(frozen=True, slots=True)
class UnixSocket:
    inode: int
    state: int
    name: str  # the bound path ('' for none; abstract names start with '@')
    peer: int  # the other end's inode (0: none)


def unix_diag_request(sequence: int) -> bytes:
    """A dump of every unix socket of the network namespace, with names and peers."""
    request = struct.pack(
        "<BBxxIIIII", AF_UNIX, 0, 0xFFFFFFFF, 0, UDIAG_SHOW_NAME | UDIAG_SHOW_PEER, 0, 0
    )
    header = struct.pack(
        "<IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, sequence, 0
    )
    return header + request


class SocketTableError(Exception):
    """The kernel refused the dump, or sent what cannot be read."""


def parse_unix_diag(data: bytes) -> tuple[list[UnixSocket], bool]:
    """The sockets in one read of the dump's answer, and whether the dump is done."""
    found: list[UnixSocket] = []
    offset = 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("<IH", data, offset)
        if length < 16 or offset + length > len(data):
            raise SocketTableError("a truncated netlink message")
        if kind == NLMSG_DONE:
            return found, True
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("<i", data, offset + 16) if length >= 20 else (0,)
            raise SocketTableError(f"the kernel answered error {-code}")
        if kind == SOCK_DIAG_BY_FAMILY and length >= 32:
            found.append(_unix_socket(data[offset + 16 : offset + length]))
        offset += (length + 3) & ~3
    return found, False


def _unix_socket(message: bytes) -> UnixSocket:
    _, _, state, inode = struct.unpack_from("<BBBxI", message, 0)
    name, peer = "", 0
    offset = 16
    while offset + 4 <= len(message):
        length, kind = struct.unpack_from("<HH", message, offset)
        if length < 4 or offset + length > len(message):
            break
        payload = message[offset + 4 : offset + length]
        if kind == UNIX_DIAG_NAME:
            raw = payload.split(b"\0", 1)[0] if payload[:1] != b"\0" else b"@" + payload[1:]
            name = raw.decode("utf-8", "replace")
        elif kind == UNIX_DIAG_PEER and len(payload) >= 4:
            (peer,) = struct.unpack_from("<I", payload, 0)
        offset += (length + 3) & ~3
    return UnixSocket(int(inode), int(state), name, int(peer))


def display_peers(sockets: Iterable[UnixSocket], display: int, server_inodes: set[int]) -> set[int]:
    """The inodes of xrdp's ends of the connections to ``display``: peers of the established
    ``xrdp_display_N`` sockets that the session's X server holds (``server_inodes``)."""
    suffix = f"/{DISPLAY_SOCKET}{display}"
    return {
        s.peer
        for s in sockets
        if s.state == ESTABLISHED
        and s.name.endswith(suffix)
        and s.inode in server_inodes
        and s.peer
    }


XRDP_NAME = "xrdp"


def is_xrdp(process: Process) -> bool:
    """xrdp itself (its listener or a connection's process): the xrdp binary, run by root or
    by the user xrdp drops to."""
    return process.uid != MIXED_UIDS and _binary(process.exe) in XRDP_BINARIES


def may_be_xrdp(process: Process) -> bool:
    """xrdp, or a process of another user named xrdp whose exe could not be read (to be
    read as its user: see ``agent.machine``)."""
    return is_xrdp(process) or (
        process.exe is None and process.name == XRDP_NAME and process.uid not in (ROOT, MIXED_UIDS)
    )


def xrdp_binary(exe: str) -> bool:
    return _binary(exe) in XRDP_BINARIES


# ---------------------------------------------------------------------- the TLS certificate

#: xrdp's configuration, and the certificate it serves when xrdp.ini names none (or a path
#: that is not absolute, which xrdp 0.9 replaces with this one: "should use absolute path").
XRDP_INI = "/etc/xrdp/xrdp.ini"
DEFAULT_CERTIFICATE = "/etc/xrdp/cert.pem"
_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN (?:X509 )?CERTIFICATE-----([A-Za-z0-9+/=\s]*?)-----END (?:X509 )?CERTIFICATE-----"
)


def certificate_path(ini: str) -> str:
    """The certificate xrdp serves by its xrdp.ini: ``certificate=`` of ``[Globals]``, read
    as xrdp 0.9 reads it (names without case, the last line wins; empty, absent or not an
    absolute path: the default)."""
    section, path = "", ""
    for raw in ini.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
        elif section == "globals" and "=" in line:
            key, _, value = line.partition("=")
            if key.strip().lower() == "certificate":
                path = value.strip()
    return path if path.startswith("/") else DEFAULT_CERTIFICATE


def certificate_sha256(pem: bytes) -> str:
    """The fingerprint of the certificate a TLS server presents from this PEM file (the
    first; a chain, or the key, may be in the file too): the SHA-256 of its DER form, in
    lowercase hex, what the broker's relay compares with what the host presents. ValueError
    when the file holds no certificate."""
    found = _PEM_CERTIFICATE.search(pem)
    try:
        if found is None:
            raise ValueError("no PEM block")
        der = base64.b64decode(b"".join(found.group(1).split()), validate=True)
        x509.load_der_x509_certificate(der)  # a certificate, not just any base64
    except ValueError:  # binascii.Error and cryptography's refusals are ValueErrors
        raise ValueError("holds no PEM certificate") from None
    return hashlib.sha256(der).hexdigest()
