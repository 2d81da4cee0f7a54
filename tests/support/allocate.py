"""Allocating what a test run takes of the machine (a hosts' bridge and its subnet), so two
runs on one machine (a developer's and CI's, two clones, a demo beside the suite) never
pick the same one.

Each bridge has a lock file under :data:`LOCK_DIR`; whoever holds ``flock`` on it has the
bridge. The kernel drops the lock when its holder exits, however it exits, so no lock is ever
left behind. A name or subnet in use all the same (someone else's bridge, a demo's, or one a
killed run left) is passed over.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

LOCK_DIR = Path("/tmp/hostpool-test-locks")
#: The subnets 10.251.N.0/24 the suite's bridges may have. 0 is make demo-desktop's.
BRIDGE_SUBNETS = range(1, 64)

#: The locks this process holds (their files stay open for its life).
_held: list[int] = []


@dataclass(frozen=True, slots=True)
class Bridge:
    name: str
    cidr: str

    @property
    def spec(self) -> str:
        """As HOSTPOOL_HOSTS_BRIDGE wants it: NAME:ADDRESS/PREFIX."""
        return f"{self.name}:{self.cidr}"


def _in_use(name: str, subnet: int) -> bool:
    """An interface of that name, or any address in 10.251.subnet.0/24, exists already."""
    links = subprocess.run(
        ["ip", "-o", "link", "show", name], capture_output=True, text=True, check=False
    )
    if links.returncode == 0 and links.stdout.strip():
        return True
    addresses = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=False
    ).stdout
    return f" 10.251.{subnet}." in addresses


def hold(key: str) -> bool:
    """Take the lock ``key`` for this process's life; False when another process has it."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK_DIR / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held.append(fd)
    return True


def bridge(prefix: str = "hptest", subnets: Iterable[int] = BRIDGE_SUBNETS) -> Bridge:
    """A bridge name and subnet nobody else holds or uses, held until this process exits."""
    for subnet in subnets:
        name = f"{prefix}{subnet}"
        if not hold(f"bridge-{subnet}"):
            continue
        if _in_use(name, subnet):
            continue  # someone's that is not ours to take: the lock stays held, unused
        return Bridge(name, f"10.251.{subnet}.1/24")
    raise RuntimeError(f"no free hosts' bridge subnet in 10.251.{{{subnets}}}.0/24")
