"""A real Prometheus server for the tests, its TSDB backfilled from OpenMetrics text.

``hack/cluster/tools.sh`` builds ``prometheus`` and ``promtool`` from the same module
(github.com/prometheus/prometheus, hack/cluster/promtool). ``backfill`` writes blocks with
``promtool tsdb create-blocks-from openmetrics``; ``PrometheusServer`` runs
``prometheus --storage.tsdb.path=DIR`` on a free local port as a process of its own, waits
for ``/-/ready`` and stops it (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support.ports import free_port

#: A retention far beyond any test's data: nothing backfilled is deleted at start-up.
RETENTION = "3650d"
CONFIG = "global:\n  scrape_interval: 1m\n  evaluation_interval: 1m\n"


def require_binary(bin_dir: Path, name: str) -> Path:
    """``name`` next to the other tools (hack/cluster/tools.sh builds it).

    Missing: the test skips, saying how to get it; under CI (CI=true) it fails instead, since
    `make test` builds it there (as ``chart.monitoring.require_promtool``)."""
    path = bin_dir / name
    if path.exists():
        return path
    message = f"{name} not found at {path}: run `make tools` (hack/cluster/tools.sh)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def backfill(promtool: Path, openmetrics: Path, tsdb: Path) -> None:
    """Blocks from the OpenMetrics file (which ends with ``# EOF``) into ``tsdb``."""
    tsdb.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            str(promtool),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=24h",
            str(openmetrics),
            str(tsdb),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"promtool tsdb create-blocks-from openmetrics failed ({proc.returncode}):\n"
            f"{proc.stderr}{proc.stdout}"
        )


class PrometheusServer:
    def __init__(self, binary: Path, tsdb: Path, workdir: Path) -> None:
        self.binary = binary
        self.tsdb = tsdb
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        self.log_path = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20_000:]
        except OSError as error:
            return f"(no log: {error})"

    def start(self, timeout: float = 60.0) -> None:
        self.config.write_text(CONFIG)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(self.binary),
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.tsdb}",
                    f"--storage.tsdb.retention.time={RETENTION}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=info",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"prometheus exited with {self.proc.returncode} before it was ready:\n"
                    f"{self.log()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus was not ready within {timeout:g} s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
