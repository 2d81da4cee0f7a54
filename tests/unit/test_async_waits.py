"""No long-lived loop of the operator, the broker or the agent sleeps in ``asyncio.wait_for``.

On Python 3.11 ``wait_for`` returns the awaited result when that result and a cancel land in
the same turn: the cancel is lost and whoever stops the loop waits for ever (a pool loop did
this; ``tests/api/test_controller_stop_live.py`` shows it). ``asyncio.timeout`` is the safe
form.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "hostpool_operator"


def test_no_long_lived_loop_sleeps_in_wait_for() -> None:
    """The same trap elsewhere: the agent's and the broker's loops, the plan writer."""
    uses = [
        f"{path.relative_to(PACKAGE.parent)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\basyncio\.wait_for\(", line)
    ]
    assert uses == [], f"asyncio.wait_for can swallow a cancel on 3.11; use asyncio.timeout: {uses}"
