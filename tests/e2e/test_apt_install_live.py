"""``hack/cluster/apt-install.sh`` waits for another apt instead of failing on its locks.

Another apt on the machine (an unattended upgrade, a user's apt-get, a second clone's
``make test``) holds apt's locks while it runs: the package lists' (``apt-get update``), the
download cache's and dpkg's. ``DPkg::Lock::Timeout`` makes apt-get wait for dpkg's only;
``apt-get update`` fails at once with ``Could not get lock /var/lib/apt/lists/lock``, the
failure that stopped ``make test`` on a fresh machine. Here a process takes those locks the
way apt does (``fcntl`` locks on the same files) and holds them for a few seconds, while two
installs run through the script at once: both must wait and succeed. The packages are ones
that are installed already, and ``--even-if-installed`` makes the script run apt-get anyway
(``--no-upgrade``: nothing changes). Root and apt-get only (elsewhere it skips saying why).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from support.paths import REPO_ROOT

APT_INSTALL = REPO_ROOT / "hack" / "cluster" / "apt-install.sh"
#: The locks apt-get update and apt-get install take (besides dpkg's own, under the frontend's).
APT_LOCKS = (
    "/var/lib/apt/lists/lock",
    "/var/cache/apt/archives/lock",
    "/var/lib/dpkg/lock-frontend",
)
HOLD_SECONDS = 6
HOLDER = """
import fcntl, os, sys, time
fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o640) for p in sys.argv[2:]]
for fd in fds:
    fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[1]))
"""


@pytest.fixture
def apt_here() -> None:
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.skip("needs apt-get and root (the script installs with apt-get)")


def test_installs_wait_for_another_apt_holding_its_locks(apt_here: None) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(HOLD_SECONDS), *APT_LOCKS],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        installs = [
            subprocess.Popen(
                [str(APT_INSTALL), "--even-if-installed", *packages],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for packages in (["coreutils"], ["--no-install-recommends", "procps"])
        ]
        outputs = [p.communicate(timeout=900) for p in installs]
        results = [
            (p.returncode, out, err) for p, (out, err) in zip(installs, outputs, strict=True)
        ]
        took = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    for rc, _, err in results:
        assert rc == 0, err
    # They waited for the other apt (it held the locks for HOLD_SECONDS) rather than failing.
    assert took >= HOLD_SECONDS - 1, (took, results)
    assert any("waiting for another apt" in err for _, _, err in results), results
    print(f"\ntwo installs while another apt held its locks {HOLD_SECONDS} s: {took:.1f} s")
