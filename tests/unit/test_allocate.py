"""The suite's allocation of what it takes of the machine (support.allocate): a lock held by
one process is refused to another while it lives, and free again the moment it dies."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid

from support import allocate
from support.paths import REPO_ROOT

HOLDER = """
import sys, time
sys.path.insert(0, {tests!r})
from support import allocate
assert allocate.hold({key!r})
print("held", flush=True)
time.sleep(60)
"""


def test_a_lock_is_one_processes_and_free_again_when_it_dies() -> None:
    key = f"unit-{uuid.uuid4().hex}"
    code = HOLDER.format(tests=str(REPO_ROOT / "tests"), key=key)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        assert not allocate.hold(key)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    assert allocate.hold(key)  # the kernel dropped the dead holder's lock
    (allocate.LOCK_DIR / f"{key}.lock").unlink()
