"""The import-linter contracts in pyproject.toml bind every module of a package, including
one nobody has listed yet.

Each case copies the package to a temporary directory, drops one new module into it and runs
``lint-imports`` with the project's own contracts over the copy: the unchanged copy passes,
every offending module breaks the contract it should, by name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "operator" / "hostpool_operator"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def copy_with(tmp_path: Path, extra: dict[str, str]) -> Path:
    """A copy of the package with ``extra`` files (path -> source) added; its source root."""
    source_root = tmp_path / "src"
    copy = source_root / "hostpool_operator"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for relative, text in extra.items():
        (copy / relative).write_text(textwrap.dedent(text))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return source_root


def lint(tmp_path: Path, source_root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """lint-imports with the project's contracts (only ``contracts`` when given) over a copy."""
    selected = [arg for contract in contracts for arg in ("--contract", contract)]
    return subprocess.run(
        [str(LINT_IMPORTS), str(tmp_path / "pyproject.toml"), "--no-cache", *selected],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(source_root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_package_as_it_is_keeps_every_contract(tmp_path: Path) -> None:
    result = lint(tmp_path, copy_with(tmp_path, {}))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("path", "source", "contracts"),
    [
        pytest.param("engine/new_rule.py", "import asyncio\n", ["pure"], id="pure-imports-asyncio"),
        pytest.param(
            "scaling/new_rule.py",
            "import time\n\nNOW = time.time\n",
            ["pure"],
            id="pure-imports-time",
        ),
        pytest.param(
            "engine/new_rule.py",
            "from ..kube.client import KubeClient\n",
            ["pure", "packages"],
            id="new-engine-module-imports-kube",
        ),
        pytest.param(
            "agent/new_part.py",
            "from ..controller import manager\n",
            ["agent", "programs"],
            id="agent-imports-the-controller",
        ),
        pytest.param(
            "api/new_kind.py", "import kopf\n", ["pure", "io-libraries"], id="api-imports-kopf"
        ),
        pytest.param(
            "kube/new_part.py",
            "from ..engine import placement\n",
            ["kube"],
            id="kube-imports-the-engine",
        ),
        pytest.param(
            "access/new_rule.py",
            "import aiohttp\n",
            ["pure", "io-libraries"],
            id="access-imports-aiohttp",
        ),
        pytest.param(
            "access/new_rule.py", "import jwt\n", ["pure"], id="access-checks-tokens-itself"
        ),
        pytest.param(
            "broker/new_part.py",
            "from ..controller import manager\n",
            ["broker", "programs"],
            id="broker-imports-the-controller",
        ),
        pytest.param(
            "broker/new_part.py",
            "from ..engine import placement\n",
            ["broker"],
            id="broker-places-sessions-itself",
        ),
    ],
)
def test_a_new_module_is_bound_by_its_package(
    tmp_path: Path, path: str, source: str, contracts: list[str]
) -> None:
    """No contract names the new module: its package's contracts catch it all the same."""
    source_root = copy_with(tmp_path, {path: source})
    module = "hostpool_operator." + path.removesuffix(".py").replace("/", ".")
    for contract in contracts:
        result = lint(tmp_path, source_root, contract)
        assert result.returncode != 0, f"{contract} kept with {path}:\n{result.stdout}"
        assert "1 broken" in result.stdout, result.stdout
        assert module in result.stdout, f"{contract} broken, not naming {module}:\n{result.stdout}"
