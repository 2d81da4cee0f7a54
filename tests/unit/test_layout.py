"""The repository's ``operator/`` directory must never shadow the standard library's
``operator`` module.

The Python package lives in ``operator/hostpool_operator``. ``operator/`` itself is only a
source root: it has no ``__init__.py``, so it can at most be a namespace-package portion,
and a namespace portion never wins over a regular module found anywhere on ``sys.path``.
These tests run a fresh interpreter from the repository root, where ``''``/the cwd is the
first entry on ``sys.path``, which is where a shadowing ``operator`` package would bite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

_PROBE = (
    "import json, operator\n"
    "print(json.dumps({'file': getattr(operator, '__file__', None),"
    " 'path': list(getattr(operator, '__path__', []) or []),"
    " 'itemgetter': callable(getattr(operator, 'itemgetter', None)),"
    " 'getter': operator.itemgetter(1)([10, 20])}))\n"
)


def _probe(env: dict[str, str]) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"`import operator` failed in {REPO_ROOT}:\n{proc.stderr}"
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_operator_dir_exists_without_init() -> None:
    assert (REPO_ROOT / "operator").is_dir(), "the source root operator/ is expected"
    assert not (REPO_ROOT / "operator" / "__init__.py").exists(), (
        "operator/__init__.py would make operator/ a regular package that shadows the "
        "standard library's operator module for anything run from the repository root"
    )


@pytest.mark.parametrize(
    "extra_path",
    [pytest.param(None, id="cwd-on-sys-path"), pytest.param(".", id="repo-on-PYTHONPATH")],
)
def test_import_operator_is_the_standard_library(extra_path: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if extra_path is not None:
        env["PYTHONPATH"] = str(REPO_ROOT / extra_path)
    result = _probe(env)
    file = result["file"]
    assert isinstance(file, str), f"operator has no __file__ (a namespace package?): {result}"
    assert not Path(file).resolve().is_relative_to(REPO_ROOT), (
        f"`import operator` from the repository root loaded {file}, not the standard library"
    )
    assert result["path"] == [], f"operator is a package, not the stdlib module: {result}"
    assert result["itemgetter"] is True
    assert result["getter"] == 20
