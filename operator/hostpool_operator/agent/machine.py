"""The sessions of the xrdp instance beside the agent, read from this machine's ``/proc``,
and its logoff (see ``agent.xrdp`` for what the tables mean).

"Beside the agent" is the agent's own network namespace: several hosts may share one
kernel (network namespaces on a test machine, containers on a node), each with its own
xrdp; only X servers and sesman processes in the agent's namespace are its host's. Reading
another user's ``/proc/PID/ns/net`` needs root, as xrdp does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from dataclasses import dataclass

import psutil

from .commands import CommandResult
from .xrdp import (
    Process,
    connected_displays,
    listening_displays,
    on_this_host,
    parse_passwd,
    session_states,
    window_managers,
    xorg_display,
    xrdp_sessions,
)

SESMAN = "xrdp-sesman"
PROC_NET_UNIX = "/proc/net/unix"
#: How long a logoff waits for the session's X server to exit after the window manager was
#: asked to (TERM) before killing what is left, of the command timeout's share.
LOGOFF_TERM_SHARE = 0.5


def netns_of(pid: int | str) -> int | None:
    with contextlib.suppress(OSError):
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    return None


@dataclass
class XrdpMachine:
    """This host's xrdp sessions and their logoff."""

    netns: int | None = None

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
            cmdline = tuple(info.get("cmdline") or ())
            name = str(info.get("name") or "")
            is_sesman = name == SESMAN or (bool(cmdline) and cmdline[0].endswith("/" + SESMAN))
            display = xorg_display(cmdline)
            if display is not None and not on_this_host(
                display, netns_of(info["pid"]), self.netns, listening
            ):
                continue  # another host's
            if is_sesman:
                if netns_of(info["pid"]) not in (self.netns, None):
                    continue
                sesmen.append(int(info["pid"]))
            if info.get("uids") is not None:
                uids[int(info["pid"])] = int(info["uids"].real)
            found.append(
                Process(
                    pid=int(info["pid"]),
                    parent=int(info.get("ppid") or 0),
                    user=str(info.get("username") or ""),
                    name=name,
                    cmdline=cmdline,
                )
            )
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
        return session_states(xrdp_sessions(processes), connected_displays(sockets)), ""

    def logoff(self, user: str, timeout: float) -> CommandResult:
        """End every xrdp session of ``user`` here: TERM its window manager (sesman then
        stops the X server), and KILL what is left when that does not end it in time."""
        processes, _ = self.processes()
        sessions = [s for s in xrdp_sessions(processes) if s.user == user]
        if not sessions:
            return CommandResult(True, "")  # nothing to end: logged off already
        targets = {s.xorg: window_managers(s, processes) for s in sessions}
        signal_all([pid for pids in targets.values() for pid in pids], signal.SIGTERM)
        if wait_gone(list(targets), timeout * LOGOFF_TERM_SHARE):
            return CommandResult(True, "")
        left = [pid for pid in targets if alive(pid)]
        managers = [pid for pids in targets.values() for pid in pids]
        signal_all(left + managers, signal.SIGKILL)
        if wait_gone(left, timeout * (1 - LOGOFF_TERM_SHARE)):
            return CommandResult(True, "")
        displays = ", ".join(f":{s.display}" for s in sessions)
        return CommandResult(False, "", f"the sessions of {user} ({displays}) did not end")


def users_beside(sesmen: list[int]) -> dict[int, str]:
    """User names by uid as sesman's own file system has them: an agent in a sidecar (a
    pod's shared process namespace) has another /etc/passwd than the desktop container
    whose users log on; sesman's root (/proc/PID/root) is readable, being root's."""
    for pid in sesmen:
        path = f"/proc/{pid}/root/etc/passwd"
        with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as f:
            return parse_passwd(f.read())
    return {}


def signal_all(pids: list[int], signum: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


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
