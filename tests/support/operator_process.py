"""The operator as a subprocess (``python -m hostpool_operator run``) for one namespace.

:class:`OperatorProcess` starts it and waits for its log line, stops it (SIGTERM, then
SIGKILL), kills it (SIGKILL: no clean-up, the Lease not released), starts it as a
leader-election standby (:meth:`OperatorProcess.launch` and :meth:`OperatorProcess.wait_line`),
pauses and resumes it (SIGSTOP, SIGCONT), reads its metrics and measures its memory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path

import pytest

#: The log line the operator prints once its initial LIST is done and placement runs.
STARTED_LINE = "hostpool-operator started"
#: kopf's log line once every task and the cleanup handler are done, after SIGTERM.
SHUTDOWN_LINE = "Root tasks are stopped"
#: What a leader-election standby logs once, while it waits for the Lease (its watches run
#: and its pools' state is built: it writes nothing).
STANDBY_LINE = "waiting as a standby"
#: What an instance logs once its initial LIST is done, before it seeks the Lease.
SYNCED_LINE = "standby: "
#: What an instance logs when it holds the Lease.
LEADER_LINE = "leader election:"

#: Threads still waiting for stopped operators to exit (joined at the end of the session).
_REAPERS: list[threading.Thread] = []


def join_reapers(timeout: float = 30.0) -> None:
    """Wait for every operator stopped with ``wait=False`` to have exited."""
    deadline = time.monotonic() + timeout
    while _REAPERS:
        _REAPERS.pop().join(timeout=max(0.0, deadline - time.monotonic()))


class OperatorProcess:
    """``python -m hostpool_operator run`` for one namespace, logging to a file.

    :meth:`start` waits for :data:`STARTED_LINE`; :meth:`stop` sends SIGTERM, then SIGKILL
    after ``kill_after`` seconds; :meth:`restart` does both; :meth:`kill` sends SIGKILL.
    Every run appends to the same log. ``kubeconfig`` is the identity it runs as (the admin's,
    or one of :func:`identity.install_identity`)."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        log_path: Path,
        *,
        status_interval: float = 0.2,
        extra_args: Iterable[str] = (),
        metrics_port: int | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.log_path = log_path
        self.status_interval = status_interval
        self.extra_args = list(extra_args)
        self.metrics_port = metrics_port
        if metrics_port is not None:
            self.extra_args += ["--metrics-address", f"127.0.0.1:{metrics_port}"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0
        self.exit_codes: list[int] = []
        self.peak_rss_kb = 0

    @property
    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "hostpool_operator",
            "run",
            "--namespace",
            self.namespace,
            "--status-interval",
            str(self.status_interval),
            "--log-format",
            "text",
            "-v",
            *self.extra_args,
        ]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def _note(self, text: str) -> None:
        with self.log_path.open("ab") as log:
            log.write(f"==== tests: {text}\n".encode())

    def launch(self) -> int:
        """Start the process without waiting; return the log offset its output starts at."""
        if self.running:
            raise RuntimeError("the operator is already running")
        offset = self._log_size()
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("KUBERNETES_SERVICE_HOST", None)  # never an in-cluster login
        self.starts += 1
        self._note(f"operator start #{self.starts}: {self.command}")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        return offset

    def wait_line(self, line: str, offset: int, timeout: float) -> float:
        """Wait until ``line`` appears in the log after ``offset``; return the seconds waited.
        Fails the test if the process exits first, or stops it and fails on timeout."""
        t0 = time.monotonic()
        while line not in self._log_since(offset):
            proc = self.proc
            if proc is None or proc.poll() is not None:
                if proc is not None:
                    self.exit_codes.append(proc.returncode)
                    self.proc = None
                code = None if proc is None else proc.returncode
                pytest.fail(
                    f"the operator exited ({code}) before logging {line!r}:\n{self.log_tail(80)}",
                    pytrace=False,
                )
            if time.monotonic() - t0 > timeout:
                self.stop()
                pytest.fail(
                    f"the operator did not log {line!r} within {timeout:.0f}s:\n"
                    + self.log_tail(80),
                    pytrace=False,
                )
            time.sleep(0.05)
        return time.monotonic() - t0

    def start(self, timeout: float = 60.0) -> None:
        self.wait_line(STARTED_LINE, self.launch(), timeout)

    def stop(self, kill_after: float = 10.0, *, wait: bool = True) -> int | None:
        """SIGTERM, then SIGKILL after ``kill_after`` s. Returns the exit code (None if it was
        not running, or when not waiting).

        With ``wait=False`` it returns as soon as the operator has finished its shutdown
        (kopf logs :data:`SHUTDOWN_LINE` after the cleanup handler; kopf then idles a few
        seconds for stray tasks before exiting), and a background thread reaps the process
        (SIGKILL at ``kill_after``): teardown need not wait for that idle time."""
        proc = self.proc
        if proc is None:
            return None
        self.proc = None
        offset = self._log_size()
        deadline = time.monotonic() + kill_after
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        if not wait:
            while proc.poll() is None and time.monotonic() < deadline:
                if SHUTDOWN_LINE in self._log_since(offset):
                    break
                time.sleep(0.05)
            if proc.poll() is None:
                reaper = threading.Thread(
                    target=self._reap, args=(proc, deadline), name="operator-reaper", daemon=True
                )
                reaper.start()
                _REAPERS.append(reaper)
                return None
        return self._reap(proc, deadline)

    def _reap(self, proc: subprocess.Popen[bytes], deadline: float) -> int:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        code = proc.returncode
        self.exit_codes.append(code)
        self._note(f"operator stopped, exit code {code}")
        return code

    def restart(self, timeout: float = 60.0) -> None:
        self.stop()
        self.start(timeout=timeout)

    def kill(self) -> None:
        """kill -9: no clean-up handler runs, the Lease is not released."""
        proc = self.proc
        if proc is None:
            raise RuntimeError("the operator is not running")
        self.sample_memory()
        self.proc = None
        proc.send_signal(signal.SIGKILL)
        code = proc.wait(timeout=30)
        self.exit_codes.append(code)
        self.kills += 1
        self._note(f"operator killed with SIGKILL (exit code {code})")

    def pause(self) -> None:
        """SIGSTOP: the process is frozen where it is (a stalled VM, a stop-the-world pause)."""
        proc = self.proc
        if proc is None:
            raise RuntimeError("the operator is not running")
        proc.send_signal(signal.SIGSTOP)
        self._note("operator paused with SIGSTOP")

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        proc = self.proc
        if proc is None:
            raise RuntimeError("the operator is not running")
        self._note("operator resumed with SIGCONT")
        proc.send_signal(signal.SIGCONT)

    def wait_exit(self, timeout: float) -> int:
        """Wait for the process to exit by itself; its exit code (fails on timeout)."""
        proc = self.proc
        if proc is None:
            raise RuntimeError("the operator is not running")
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the operator did not exit within {timeout:.0f}s:\n{self.log_tail(60)}")
        self.proc = None
        self.exit_codes.append(code)
        self._note(f"operator exited by itself, exit code {code}")
        return code

    def memory_kb(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) of the running process in kB, from /proc/<pid>/status."""
        proc = self.proc
        if proc is None:
            raise RuntimeError("the operator is not running")
        values: dict[str, int] = {}
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
        return values["VmRSS"], values["VmHWM"]

    def sample_memory(self) -> int:
        """Remember the peak resident set size seen so far (kB); return the current one."""
        try:
            rss, hwm = self.memory_kb()
        except (RuntimeError, OSError, KeyError):
            return 0
        self.peak_rss_kb = max(self.peak_rss_kb, rss, hwm)
        return rss

    def metrics(self) -> str:
        """The operator's Prometheus metrics, as text."""
        assert self.metrics_port is not None, "started without --metrics-address"
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text: str = answer.read().decode()
            return text

    def log_text(self) -> str:
        return self._log_since(0)

    def log_tail(self, lines: int = 80) -> str:
        text = self.log_text().splitlines()
        status_line = (
            "(running)"
            if self.running
            else f"(not running; exit codes so far: {self.exit_codes or 'none'})"
        )
        return "\n".join([*text[-lines:], f"==== tests: operator {status_line}"])

    def problems(self) -> list[str]:
        """Log lines that mean the operator hit an unexpected error."""
        markers = ("Traceback (most recent call last)", " ERROR ", "CRITICAL")
        return [line for line in self.log_text().splitlines() if any(m in line for m in markers)]
