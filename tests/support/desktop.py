"""Real remote desktops for tests and the desktop demo: xrdp session hosts in network
namespaces (``hack/cluster/xrdp-hosts.sh``), agents running inside them, and FreeRDP
clients on a virtual X display whose screen can be photographed.

    hosts = XrdpHosts(state_dir, bridge="hptest0")
    hosts.up(["dt-1", "dt-2"], {"alice": "pw"})
    with VirtualDisplay(tmp / "xvfb.log") as display:
        client = RdpClient(display, rdp_file, password="pw", log=path)
        client.start(); ...; display.screenshot(png); client.kill()
    hosts.down()

Every process started here writes a log file of its own, for a failing test to print.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from support.agent_process import AgentProcess
from support.paths import REPO_ROOT

HOSTS_SCRIPT = REPO_ROOT / "hack" / "cluster" / "xrdp-hosts.sh"
#: Installs Debian packages one apt-get at a time (the images and tools may install at once).
APT_INSTALL = REPO_ROOT / "hack" / "cluster" / "apt-install.sh"
#: Debian packages of the client side (the hosts' are installed by the hosts script).
CLIENT_PACKAGES = ("freerdp2-x11", "xvfb", "imagemagick")
CLIENT_COMMANDS = ("xfreerdp", "Xvfb", "convert")


class DesktopError(RuntimeError):
    """A desktop part could not be set up; the message says why."""


def why_not() -> str:
    """Why real desktops cannot run here ('' when they can)."""
    proc = subprocess.run(
        [str(HOSTS_SCRIPT), "check"], capture_output=True, text=True, check=False, timeout=30
    )
    return proc.stdout.strip() if proc.returncode != 0 else ""


def install_client() -> None:
    """FreeRDP, Xvfb and ImageMagick with apt-get where missing."""
    if all(shutil.which(c) for c in CLIENT_COMMANDS):
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise DesktopError(
            f"{', '.join(CLIENT_COMMANDS)} missing and cannot be installed (needs apt-get and root)"
        )
    argv = [str(APT_INSTALL), "--no-install-recommends", *CLIENT_PACKAGES]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DesktopError(f"{' '.join(argv)} failed: {proc.stderr.strip()[-800:]}")


def why_no_client() -> str:
    """Why the RDP client cannot run here ('' when it can): it is installed where missing."""
    try:
        install_client()
    except DesktopError as error:
        return str(error)
    return ""


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    netns: str


class XrdpHosts:
    """A set of xrdp hosts on ``bridge`` with their state under ``directory``."""

    def __init__(self, directory: Path, bridge: str, *, first: int = 11) -> None:
        self.directory = directory
        self.bridge = bridge
        self.first = first
        self.hosts: dict[str, Host] = {}

    def _run(self, *args: str, timeout: float = 300) -> str:
        proc = subprocess.run(
            [str(HOSTS_SCRIPT), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise DesktopError(
                f"xrdp-hosts.sh {args[0]} failed ({proc.returncode}): {proc.stderr.strip()}"
            )
        return proc.stdout

    def up(
        self,
        names: Sequence[str],
        users: Mapping[str, str],
        *,
        signon: Path | None = None,
        clipboard: str = "Enabled",
    ) -> dict[str, Host]:
        """Start the hosts with these users; with ``signon`` (the broker's public keys) they
        take one-time logon credentials too, checked by the project's ``hostpool-logon``;
        ``clipboard`` Disabled: their clipboard channel off, as the session-host image does
        for a pool without one."""
        args = [
            "up", str(self.directory), "--bridge", self.bridge, "--hosts", " ".join(names),
            "--first", str(self.first), "--users", " ".join(f"{u}:{p}" for u, p in users.items()),
            "--clipboard", clipboard,
        ]  # fmt: skip
        if signon is not None:
            verifier = Path(sys.executable).with_name("hostpool-logon")
            args += ["--signon", str(signon), "--verifier", str(verifier)]
        out = self._run(*args)
        for line in out.splitlines():
            name, address, netns = line.split()
            self.hosts[name] = Host(name, address, netns)
        return self.hosts

    def down(self) -> None:
        self._run("down", str(self.directory), timeout=120)

    def in_host(self, name: str) -> list[str]:
        """The command prefix that runs a command in host ``name``'s network namespace."""
        return ["ip", "netns", "exec", self.hosts[name].netns]

    def logs(self, name: str) -> str:
        """The last lines of the host's xrdp and sesman logs."""
        parts = []
        for path in sorted((self.directory / name / "logs").glob("*")):
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").splitlines()[-30:]
                parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)

    def established(self, name: str) -> int:
        """RDP connections the host has right now (clients attached)."""
        proc = subprocess.run(
            [*self.in_host(name), "ss", "-Htn", "state", "established", "sport", "= :3389"],
            capture_output=True,
            text=True,
            check=False,
        )
        return len([line for line in proc.stdout.splitlines() if line.strip()])


#: Where the clients' displays are looked for, from the first up: above the xrdp hosts'
#: (hack/cluster/xrdp-hosts.sh gives host i the ten displays from 10 * (i + 1)), so a client
#: never takes a display a host's session manager counts on.
CLIENT_DISPLAYS = range(200, 1000)
#: How long one Xvfb may take to say it is ready.
XVFB_START_SECONDS = 10.0


class VirtualDisplay:
    """An Xvfb display for RDP clients, and screenshots of it.

    The display number is allocated, not chosen: each candidate of :data:`CLIENT_DISPLAYS`
    is tried in turn (from a random one on), and the X server's own lock (an atomic create
    of ``/tmp/.X<n>-lock``) decides who has it. This Xvfb is ready when it writes the number
    it serves on ``-displayfd`` (its own search may move it on from a number whose sockets
    are partly taken); one that exits, or says nothing in time, is stopped and the next
    number tried. A socket file is never taken as the sign: anyone may have left it."""

    def __init__(self, log: Path, size: str = "1024x768") -> None:
        self.log = log
        self.size = size
        self.number: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        if self.number is None:
            raise DesktopError("the virtual display is not started: no display number yet")
        return f":{self.number}"

    def __enter__(self) -> VirtualDisplay:
        # From a random place in the range: processes starting at once rarely try the same
        # number first (the X server's lock decides either way).
        first = random.randrange(len(CLIENT_DISPLAYS))
        for offset in range(len(CLIENT_DISPLAYS)):
            number = CLIENT_DISPLAYS[(first + offset) % len(CLIENT_DISPLAYS)]
            if self._try(number):
                return self
        raise DesktopError(
            f"no free X display in {CLIENT_DISPLAYS.start}..{CLIENT_DISPLAYS.stop - 1}: "
            f"{self.log.read_text()[-500:]}"
        )

    def _try(self, number: int) -> bool:
        """Start Xvfb on ``number``: True once it says it serves there, False when it exits
        (the display is another's)."""
        read_end, write_end = os.pipe()
        try:
            with self.log.open("ab") as out:
                proc = subprocess.Popen(
                    [
                        "Xvfb", f":{number}", "-displayfd", str(write_end),
                        "-screen", "0", f"{self.size}x24", "-nolisten", "tcp",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    pass_fds=(write_end,),
                    start_new_session=True,
                )  # fmt: skip
            os.close(write_end)
            write_end = -1
            answer = _read_line(read_end, XVFB_START_SECONDS)
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        served = answer.strip()
        if served.isdigit() and proc.poll() is None:
            # Where it serves: this number, or (-displayfd's own search, when only part of
            # this one's sockets could be had) the next it found whole.
            self.number, self.proc = int(served), proc
            return True
        # Gone (the display is another's), or silent past the time: the next number.
        _stop(proc)
        return False

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            _stop(self.proc)
        self.proc = None
        self.number = None

    def screenshot(self, path: Path) -> Path:
        subprocess.run(
            ["import", "-display", self.name, "-window", "root", str(path)],
            check=True,
            capture_output=True,
            timeout=30,
        )
        return path


def _read_line(fd: int, timeout: float) -> str:
    """What a child writes on ``fd`` up to its first newline (or its exit), within ``timeout``."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 64)
        if not chunk:  # every writer closed it: the child exited
            break
        data += chunk
    return data.decode(errors="replace")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def pixel(png: Path, x: int, y: int) -> str:
    """The colour at (x, y) of a picture, as ``#rrggbb``."""
    out = subprocess.run(
        ["convert", str(png), "-format", f"%[hex:p{{{x},{y}}}]", "info:"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()
    return "#" + out[:6].lower()


class RdpClient:
    """``xfreerdp`` opening an ``.rdp`` file on a virtual display (the password is given
    on the command line: xrdp asks for it, as a real user would type it)."""

    def __init__(
        self,
        display: VirtualDisplay,
        rdp_file: Path,
        password: str,
        log: Path,
        home: Path,
        extra: Sequence[str] = (),
    ) -> None:
        self.display = display
        self.rdp_file = rdp_file
        self.password = password
        self.log = log
        self.home = home  # FreeRDP keeps its known hosts there
        #: More xfreerdp options, after the file's (e.g. +clipboard, whatever the file says).
        self.extra = tuple(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DISPLAY": self.display.name, "HOME": str(self.home)}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    "xfreerdp",
                    str(self.rdp_file),
                    f"/p:{self.password}",
                    "/cert:ignore",
                    f"/size:{self.display.size}",
                    "-grab-keyboard",
                    *self.extra,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """The user's client dies (closed, crashed, network gone): the session stays."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def wait_exit(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def log_text(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return re.sub(r"/p:\S+", "/p:***", text)


class NetnsAgent(AgentProcess):
    """``hostpool-agent --sessions-from xrdp`` inside a host's network namespace."""

    def __init__(
        self,
        hosts: XrdpHosts,
        host: str,
        namespace: str,
        kubeconfig: Path,
        log: Path,
        interval: float,
    ) -> None:
        super().__init__(kubeconfig, namespace, host, log, prefix=hosts.in_host(host))
        self.interval = interval

    def start(self, *args: str, interval: float | None = None) -> int:
        return super().start("--sessions-from", "xrdp", *args, interval=interval or self.interval)

    def cpu_and_memory(self) -> tuple[float, int, float]:
        """(CPU seconds, RSS bytes, seconds running) of the agent (`ip netns exec` execs it)."""
        assert self.proc is not None
        process = psutil.Process(self.proc.pid)
        times = process.cpu_times()
        return (
            times.user + times.system,
            process.memory_info().rss,
            time.time() - process.create_time(),
        )

    def text(self) -> str:
        return self.log()


def session_processes(user: str) -> list[tuple[int, str]]:
    """(pid, command) of a user's processes on this machine."""
    proc = subprocess.run(
        ["ps", "-u", user, "-o", "pid=,args="], capture_output=True, text=True, check=False
    )
    found = []
    for line in proc.stdout.splitlines():
        pid, _, args = line.strip().partition(" ")
        if pid.isdigit():
            found.append((int(pid), args))
    return found


def xorg_displays(user: str) -> list[int]:
    """The displays of a user's xrdp sessions (their Xorg servers)."""
    displays = []
    for _, args in session_processes(user):
        match = re.search(r"Xorg :(\d+) .*xrdp/xorg\.conf", args)
        if match:
            displays.append(int(match.group(1)))
    return sorted(displays)


def end_window_manager(user: str) -> None:
    """The user logs off from inside the desktop: their window manager ends."""
    for pid, args in session_processes(user):
        if args.split()[:1] == ["twm"]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def stop_all(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
