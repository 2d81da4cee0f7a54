"""podman for the tests: the project's images (``hack/cluster/image.sh``) and containers.

runc with cgroupfs, and image.sh's containers.conf (lowered default ulimits, which the
sandbox cannot raise): crun fails on these machines (docs/install.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

IMAGE_SCRIPT = REPO_ROOT / "hack" / "cluster" / "image.sh"
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]


def podman_unavailable() -> str:
    """Why podman cannot be had here ('' when it can: present, or installable with apt-get)."""
    proc = subprocess.run(
        [str(IMAGE_SCRIPT), "--check"], capture_output=True, text=True, check=False, timeout=60
    )
    return proc.stdout.strip() or proc.stderr.strip() if proc.returncode != 0 else ""


def cache_dir() -> Path:
    """hack/cluster/image.sh's cache (the convention of hack/cluster/tools.sh)."""
    root = os.environ.get("HOSTPOOL_TOOLS_CACHE")
    if root:
        return Path(root) / "image"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "hostpool-operator" / "image"


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(cache_dir() / "containers.conf")}


def podman(*args: str, timeout: float = 120, check: bool = True) -> str:
    proc = subprocess.run(
        [*PODMAN, *args],
        capture_output=True,
        text=True,
        env=podman_env(),
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}"
        )
    return proc.stdout + proc.stderr if not check else proc.stdout


def build_image(*args: str) -> str:
    """An image of the project built by image.sh (``--session-host`` for the desktop host's;
    a second or two when cached). Fails under CI where apt-get is (the image must be built
    there), else skips, when podman cannot be had."""
    reason = podman_unavailable()
    if reason and os.environ.get("CI") == "true" and shutil.which("apt-get"):
        pytest.fail(f"CI=true and apt-get is here, but no podman: {reason}")
    if reason:
        pytest.skip(f"no podman here: {reason}")
    started = time.monotonic()
    proc = subprocess.run(
        [str(IMAGE_SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HOSTPOOL_PYTHON": sys.executable},
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"hack/cluster/image.sh failed ({proc.returncode}):\n{proc.stderr}")
    name = proc.stdout.strip().splitlines()[-1]
    sys.stderr.write(f"{proc.stderr.strip()} ({time.monotonic() - started:.1f}s)\n")
    return name
