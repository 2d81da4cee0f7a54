"""The sessions of the xrdp instance beside the agent, read from this machine's ``/proc``,
and its logoff (see ``agent.xrdp`` for what the tables mean).

"Beside the agent" is the agent's own network namespace: several hosts may share one
kernel (network namespaces on a test machine, containers on a node), each with its own
xrdp; only X servers and sesman processes in the agent's namespace are its host's. Reading
another user's ``/proc/PID/ns/net`` needs root, as xrdp does.

Which processes are sessions and which a logoff signals is decided in ``agent.xrdp`` from
the table read here: each process's uid and its ``/proc/PID/exe`` read with readlink (never
guessed from its command line, as psutil's ``exe()`` does when the link is unreadable). A
signal goes through a pidfd after the process's uid was read again, so a pid reused since
the table was read is not signalled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass

import psutil

from .commands import CommandResult
from .desktop import XServer, idle_seconds
from .x11 import X11Error
from .xrdp import (
    DELETED,
    MIXED_UIDS,
    SESSION_MANAGERS,
    XRDP_INI,
    Process,
    SocketTableError,
    UnixSocket,
    XrdpSession,
    certificate_path,
    certificate_sha256,
    connected_displays,
    display_peers,
    listening_displays,
    logoff_plan,
    may_be_xrdp,
    on_this_host,
    parse_homes,
    parse_passwd,
    parse_unix_diag,
    protected_pids,
    session_states,
    unix_diag_request,
    xorg_display,
    xrdp_binary,
    xrdp_sessions,
)

SESMAN = "xrdp-sesman"
NETLINK_SOCK_DIAG = 4
PROC_NET_UNIX = "/proc/net/unix"
#: How long a logoff waits for the session's X server to exit after the window manager was
#: asked to (TERM) before killing what is left, of the command timeout's share.
LOGOFF_TERM_SHARE = 0.5
#: Symbolic links followed in one path at most (the kernel's own limit), and the most of a
#: file read for a certificate (a chain is a few KiB).
MAX_LINKS = 40
MAX_CERTIFICATE = 1 << 20


def netns_of(pid: int | str) -> int | None:
    with contextlib.suppress(OSError):
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    return None


def exe_of(pid: int) -> str | None:
    """What /proc/PID/exe links to; None where it cannot be read (another user's process
    without CAP_SYS_PTRACE, a kernel thread, a process gone)."""
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/exe")
    return None


def one_uid(uids: object) -> int:
    """A process's uid when its real, effective and saved uids agree, else MIXED_UIDS."""
    if uids is None:
        return MIXED_UIDS
    real, effective, saved = (int(u) for u in uids)  # type: ignore[attr-defined]
    return real if real == effective == saved else MIXED_UIDS


def uid_now(pid: int) -> int:
    """The process's uid as /proc says now (MIXED_UIDS: mixed, or unreadable)."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    real, effective, saved = (int(u) for u in line.split()[1:4])
                    return real if real == effective == saved else MIXED_UIDS
    except (OSError, ValueError):
        pass
    return MIXED_UIDS


@dataclass
class XrdpMachine:
    """This host's xrdp sessions and their logoff."""

    netns: int | None = None
    #: The sessions as the last reading of them found (``sessions``): the idle time, sampled
    #: more often than the sessions are read, is asked of these X servers.
    known: list[XrdpSession] | None = None
    #: An xrdp-sesman of this host as the last reading of the processes found (its root is
    #: the file system xrdp serves from).
    sesman: int | None = None

    def __post_init__(self) -> None:
        if self.netns is None:
            self.netns = netns_of("self")

    def processes(self) -> tuple[list[Process], bool]:
        """The processes of this host's sessions (X servers on this host, and every process
        whose parent may be a session leader), and whether sesman runs here."""
        try:
            with open(PROC_NET_UNIX, encoding="utf-8", errors="replace") as handle:
                listening = listening_displays(handle.read())
        except OSError:
            listening = set()
        found: list[Process] = []
        sesmen: list[int] = []
        uids: dict[int, int] = {}
        for proc in psutil.process_iter(["pid", "ppid", "username", "uids", "name", "cmdline"]):
            info = proc.info
            pid = int(info["pid"])
            cmdline = tuple(info.get("cmdline") or ())
            name = str(info.get("name") or "")
            uid = one_uid(info.get("uids"))
            exe = exe_of(pid)
            is_sesman = uid == 0 and (exe or "").removesuffix(DELETED) in SESSION_MANAGERS
            display = xorg_display(cmdline)
            if display is not None and not on_this_host(
                display, netns_of(pid), self.netns, listening
            ):
                continue  # another host's
            if is_sesman:
                if netns_of(pid) not in (self.netns, None):
                    continue
                sesmen.append(pid)
            uids[pid] = uid
            found.append(
                Process(
                    pid=pid,
                    parent=int(info.get("ppid") or 0),
                    user=str(info.get("username") or ""),
                    name=name,
                    cmdline=cmdline,
                    uid=uid,
                    exe=exe,
                )
            )
        self.sesman = sesmen[0] if sesmen else None
        names = users_beside(sesmen)
        found = [
            dataclasses.replace(p, user=names[uids[p.pid]])
            if p.pid in uids and uids[p.pid] in names
            else p
            for p in found
        ]
        return found, bool(sesmen)

    def sessions(self) -> tuple[dict[str, str] | None, str]:
        """Sessions by user (Active / Disconnected), or None and why it could not be told
        (no sesman here: a stopped xrdp must not look like everyone logged off)."""
        processes, sesman = self.processes()
        if not sesman:
            return None, f"no {SESMAN} runs in this network namespace"
        try:
            with open(PROC_NET_UNIX, encoding="utf-8", errors="replace") as handle:
                sockets = handle.read()
        except OSError as error:
            return None, f"could not read {PROC_NET_UNIX}: {error}"
        self.known = xrdp_sessions(processes)
        return session_states(self.known, connected_displays(sockets)), ""

    def rdp_certificate(self, path: str | None) -> tuple[str | None, str]:
        """The SHA-256 of the certificate the xrdp beside the agent serves (``path``, else
        what its xrdp.ini names), read in the root of its xrdp-sesman: a sidecar's own files
        are not the desktop container's. None and why, when it cannot be read."""
        if not self._sesman_still_runs():
            self.processes()
        if self.sesman is None:
            return None, f"no {SESMAN} runs in this network namespace: no certificate to read"
        return rdp_certificate_in(f"/proc/{self.sesman}/root", path)

    def _sesman_still_runs(self) -> bool:
        """The sesman found last is still one (its pid not reused), run by root, here."""
        pid = self.sesman
        if pid is None or uid_now(pid) != 0:
            return False
        exe = (exe_of(pid) or "").removesuffix(DELETED)
        return exe in SESSION_MANAGERS and netns_of(pid) in (self.netns, None)

    def user_sessions(self, users: set[str] | None = None) -> list[XrdpSession]:
        """The xrdp sessions here (of ``users`` only, when given)."""
        processes, _ = self.processes()
        return [s for s in xrdp_sessions(processes) if users is None or s.user in users]

    def idle(self, users: set[str]) -> tuple[dict[str, float], dict[str, str]]:
        """Seconds since each user's last input: the least over their sessions' X servers
        (input in any of them is the user's). Users whose X servers could not be asked are
        missing; the second item says why, by user."""
        idle: dict[str, float] = {}
        problems: dict[str, str] = {}
        if self.known is None:
            sessions = self.user_sessions(users)
        else:  # those still running (a session gone since is no problem)
            sessions = [
                s for s in self.known if s.user in users and os.path.exists(f"/proc/{s.xorg}")
            ]
        for session in sessions:
            try:
                seconds = idle_seconds(server_of(session))
            except X11Error as error:
                problems[session.user] = str(error)
                continue
            idle[session.user] = min(seconds, idle.get(session.user, seconds))
        return idle, problems

    def disconnect(self, user: str, timeout: float) -> CommandResult:
        """End xrdp's connections to every session of ``user`` (the process xrdp forked for
        each client): the clients are disconnected, the sessions stay."""
        processes, _ = self.processes()
        sessions = [s for s in xrdp_sessions(processes) if s.user == user]
        if not sessions:
            return CommandResult(True, "")  # no session: nothing to disconnect
        try:
            sockets = unix_sockets()
        except (OSError, SocketTableError) as error:
            return CommandResult(False, "", f"could not read the socket table: {error}")
        peers: set[int] = set()
        for session in sessions:
            inodes = socket_inodes(session.xorg)
            if not inodes:  # another user's descriptors: read as the session's user
                inodes = {
                    i
                    for _, _, found in read_as(session.uid, [session.xorg], timeout)
                    for i in found
                }
            peers |= display_peers(sockets, session.display, inodes)
        if not peers:
            if connected_displays(read_unix_table()) & {s.display for s in sessions}:
                return CommandResult(False, "", f"could not find xrdp's connection of {user}")
            return CommandResult(True, "")  # no client attached: Disconnected already
        keep = protected_pids(processes, os.getpid())
        candidates = [p for p in processes if p.pid not in keep and may_be_xrdp(p)]
        held = holders(candidates, peers, timeout)
        if not held:
            return CommandResult(False, "", f"no xrdp process holds the connection of {user}")
        targets = [pid for pid, _ in held]
        signal_all(held, signal.SIGTERM)
        if wait_gone(targets, timeout * LOGOFF_TERM_SHARE):
            return CommandResult(True, "")
        signal_all([(pid, uid) for pid, uid in held if alive(pid)], signal.SIGKILL)
        if wait_gone(targets, timeout * (1 - LOGOFF_TERM_SHARE)):
            return CommandResult(True, "")
        return CommandResult(False, "", f"xrdp's connection of {user} did not end")

    def logoff(self, user: str, timeout: float) -> CommandResult:
        """End every xrdp session of ``user`` here: TERM its window manager (sesman then
        stops the X server), and KILL what is left when that does not end it in time. Only
        processes of the session's uid are signalled, never the agent or its ancestors
        (``xrdp.logoff_plan``)."""
        processes, _ = self.processes()
        plan = logoff_plan(user, processes, os.getpid())
        if not plan.displays:
            return CommandResult(True, "")  # nothing to end: logged off already
        uid_of = {p.pid: p.uid for p in processes}
        signal_all([(pid, uid_of[pid]) for pid in plan.term], signal.SIGTERM)
        if wait_gone(list(plan.servers), timeout * LOGOFF_TERM_SHARE):
            return CommandResult(True, "")
        left = [(pid, uid_of[pid]) for pid in plan.kill if alive(pid)]
        signal_all(left, signal.SIGKILL)
        if wait_gone(list(plan.servers), timeout * (1 - LOGOFF_TERM_SHARE)):
            return CommandResult(True, "")
        displays = ", ".join(f":{d}" for d in plan.displays)
        return CommandResult(False, "", f"the sessions of {user} ({displays}) did not end")


def server_of(session: XrdpSession) -> XServer:
    return XServer(
        session.display,
        session.xorg,
        session.uid,
        session.auth,
        leader=session.leader,
        home=homes_beside(session.leader).get(session.uid),
    )


def homes_beside(leader: int) -> dict[int, str]:
    """Home directories by uid as the session's own file system has them (see
    ``users_beside``)."""
    path = f"/proc/{leader}/root/etc/passwd"
    with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as f:
        return parse_homes(f.read())
    return {}


def unix_sockets() -> list[UnixSocket]:
    """Every unix socket of the agent's network namespace, with its peer (sock_diag)."""
    found: list[UnixSocket] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as sock:
        sock.settimeout(5.0)
        sock.sendall(unix_diag_request(1))
        for _ in range(100_000):
            batch, done = parse_unix_diag(sock.recv(1 << 16))
            found.extend(batch)
            if done:
                return found
    raise SocketTableError("the socket table did not end")


#: Run as the user of processes whose /proc entries the agent may not follow (a container's
#: root without CAP_SYS_PTRACE; xrdp drops to its own user): each pid's exe and socket inodes.
AS_THEIR_USER = """
import os, sys
for pid in sys.argv[1:]:
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        continue
    print(pid, exe.replace(" ", "_"), *[l[8:-1] for l in links if l.startswith("socket:[")])
"""


def holders(candidates: list[Process], peers: set[int], timeout: float) -> list[tuple[int, int]]:
    """(pid, uid) of the xrdp processes among ``candidates`` holding one of ``peers``. A
    process whose entries the agent may not follow is read by a helper run as its user."""
    found = [
        (p.pid, p.uid) for p in candidates if p.exe is not None and socket_inodes(p.pid) & peers
    ]
    unread: dict[int, list[int]] = {}
    for p in candidates:
        if p.exe is None:
            unread.setdefault(p.uid, []).append(p.pid)
    for uid, pids in unread.items():
        for pid, exe, inodes in read_as(uid, pids, timeout):
            if xrdp_binary(exe) and inodes & peers:
                found.append((pid, uid))
    return found


def read_as(uid: int, pids: list[int], timeout: float) -> list[tuple[int, str, set[int]]]:
    """What ``AS_THEIR_USER`` reads of ``pids`` as ``uid`` (its primary group, no others)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", AS_THEIR_USER, *map(str, pids)],
            user=uid,
            group=gid_of(pids[0]),
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in proc.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0].isdigit():
            inodes = {int(f) for f in fields[2:] if f.isdigit()}
            found.append((int(fields[0]), fields[1].replace("_", " "), inodes))
    return found


def gid_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("Gid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 65534  # nogroup


def read_unix_table() -> str:
    with contextlib.suppress(OSError), open(PROC_NET_UNIX, encoding="utf-8", errors="replace") as f:
        return f.read()
    return ""


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets a process holds (its descriptors ``socket:[N]``)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(entry.path)
                if link.startswith("socket:[") and link.endswith("]"):
                    found.add(int(link[8:-1]))
    return found


def read_in_root(root: str, path: str, limit: int = MAX_CERTIFICATE) -> bytes:
    """The file at ``path`` as a process whose root directory is ``root`` sees it: each
    symbolic link followed inside ``root`` (an absolute target starts again at ``root``,
    ``..`` stops there), as openat2's RESOLVE_IN_ROOT does. The kernel would take an absolute
    link under /proc/PID/root from the agent's own root: the session-host image's
    /etc/xrdp/cert.pem -> /etc/hostpool/tls/tls.crt would be the sidecar's file, not the
    desktop container's. OSError when it cannot be read, is no regular file, has more than
    ``limit`` bytes or takes more than MAX_LINKS links."""
    pending = list(reversed(path.split("/")))
    walked: list[str] = []
    links = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if walked:
                walked.pop()
            continue
        try:
            target = os.readlink(os.path.join(root, *walked, part))
        except OSError as error:
            if error.errno != errno.EINVAL:  # EINVAL: there, and no link
                raise
            walked.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        if target.startswith("/"):
            walked = []
        pending.extend(reversed(target.split("/")))
    # O_NOFOLLOW: a link swapped in since is refused (read again next time), never followed
    # from the agent's root; O_NONBLOCK: a FIFO planted there cannot hold the agent.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    handle = os.open(os.path.join(root, *walked), flags)
    with os.fdopen(handle, "rb") as file:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        data = file.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", path)
    return data


def rdp_certificate_in(root: str | None, path: str | None) -> tuple[str | None, str]:
    """The SHA-256 (``xrdp.certificate_sha256``) of the RDP certificate at ``path`` (None:
    the one xrdp serves by its xrdp.ini) in the file system whose root is ``root`` (None:
    the agent's own, read as it is); or None and why not, for a log line and an Event."""
    if path is None:
        try:
            ini = _read(root, XRDP_INI).decode("utf-8", "replace")
        except FileNotFoundError:
            ini = ""  # no xrdp.ini: xrdp's defaults
        except OSError as error:
            return None, f"could not read {XRDP_INI}: {_why(error)}"
        path = certificate_path(ini)
    try:
        pem = _read(root, path)
    except OSError as error:
        return None, f"could not read the RDP certificate {path}: {_why(error)}"
    try:
        return certificate_sha256(pem), ""
    except ValueError:
        return None, f"the RDP certificate {path} holds no PEM certificate"


def _read(root: str | None, path: str) -> bytes:
    if root is not None:
        return read_in_root(root, path)
    with open(path, "rb") as file:  # any platform's path (a Windows agent's too)
        data = file.read(MAX_CERTIFICATE + 1)
    if len(data) > MAX_CERTIFICATE:
        raise OSError(errno.EFBIG, f"larger than {MAX_CERTIFICATE} bytes", path)
    return data


def _why(error: OSError) -> str:
    """An OSError's reason without the path (the message names the path as asked for, not
    as the agent reached it under /proc)."""
    return (error.strerror or str(error)).lower()


def users_beside(sesmen: list[int]) -> dict[int, str]:
    """User names by uid as sesman's own file system has them: an agent in a sidecar (a
    pod's shared process namespace) has another /etc/passwd than the desktop container
    whose users log on; sesman's root (/proc/PID/root) is readable, being root's."""
    for pid in sesmen:
        path = f"/proc/{pid}/root/etc/passwd"
        with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as f:
            return parse_passwd(f.read())
    return {}


def signal_all(targets: list[tuple[int, int]], signum: signal.Signals) -> None:
    """Signal each (pid, uid) through a pidfd, only while the process has that uid: a pid
    reused by another process since the table was read is left alone (the pidfd holds the
    process whose uid was checked; a process gone meanwhile cannot be signalled)."""
    for pid, uid in targets:
        try:
            handle = os.pidfd_open(pid)
        except OSError:
            continue  # gone
        try:
            if uid_now(pid) == uid:
                signal.pidfd_send_signal(handle, signum)
        except OSError:
            pass
        finally:
            os.close(handle)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        if not any(alive(pid) for pid in pids):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
