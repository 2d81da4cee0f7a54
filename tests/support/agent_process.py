"""``python -m hostpool_operator.agent`` as a real process for the tests and demos: one host,
its kubeconfig, a log file; optionally run through a prefix (``ip netns exec NS``: inside a
host's network namespace)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


class AgentProcess:
    """The agent for ``host`` in ``namespace``, logging (appending) to ``log_path``."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        host: str,
        log_path: Path,
        prefix: Sequence[str] = (),
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.host = host
        self.log_path = log_path
        self.prefix = list(prefix)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *args: str, interval: float = 1.0) -> int:
        command = [
            *self.prefix, sys.executable, "-m", "hostpool_operator.agent",
            "--host", self.host, "--namespace", self.namespace,
            "--interval", str(interval), "--verbose", *args,
        ]  # fmt: skip
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM, then (its stacks to its log, SIGUSR1) SIGKILL after 15 s; the exit code
        (None: never started)."""
        if self.proc is None:
            return None
        self.proc.terminate()
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            # Its stacks to its log first (SIGUSR1, faulthandler): where it hung.
            self.proc.send_signal(signal.SIGUSR1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(1)
            self.proc.kill()
            return self.proc.wait(5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
