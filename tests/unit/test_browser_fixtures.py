"""The browser fixtures have one definition: tests/conftest.py's plugin.

A test module that imports or re-binds ``browser`` makes a second fixture of its own, and a
second Playwright started while the first still runs refuses ("Sync API inside the asyncio
loop") and leaves the test thread with a running loop that breaks every later
``asyncio.run`` in the session.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _rebinds_browser_fixtures(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("support.browser", "support"):
            names = {alias.name for alias in node.names}
            if node.module == "support.browser" or "browser" in names:
                found.append(f"{path.relative_to(TESTS)}:{node.lineno}: imports {sorted(names)}")
    return found


def test_no_test_module_imports_the_browser_fixtures() -> None:
    offenders = [
        line
        for path in sorted(TESTS.rglob("*.py"))
        if path.parent.name != "support"
        for line in _rebinds_browser_fixtures(path)
    ]
    assert offenders == [], "\n".join(offenders)


def test_the_plugin_is_registered_once() -> None:
    conftest = (TESTS / "conftest.py").read_text()
    assert conftest.count('"support.browser"') == 1
