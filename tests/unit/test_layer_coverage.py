"""Every module of the package is named in a layers contract of import-linter: each package
(the top level too) has one, and it lists every module and subpackage in it. A module nobody
placed is bound by its package's forbidden contracts (tests/unit/test_layers.py) but not by
the order of its siblings; this test names it, so its place is chosen when it is added.

Also: no import cycle between the package's modules (a circle of files that import each
other, at run time or for typing alike)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "operator" / "hostpool_operator"


def layered(pyproject: Path) -> dict[str, set[str]]:
    """container -> the names its layers contracts list."""
    config = tomllib.loads(pyproject.read_text())
    named: dict[str, set[str]] = {}
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] != "layers":
            continue
        names = {part.strip() for layer in contract["layers"] for part in layer.split("|")}
        for container in contract["containers"]:
            named.setdefault(container, set()).update(names)
    return named


def placed(package: Path) -> list[tuple[str, str]]:
    """(container, name) of every module and subpackage of ``package``."""
    found = []
    for path in sorted(package.rglob("*")):
        if "__pycache__" in path.parts:
            continue
        is_module = path.suffix == ".py" and not path.stem.startswith("__")
        is_package = path.is_dir() and (path / "__init__.py").exists()
        if not (is_module or is_package):
            continue
        parent = path.parent.relative_to(package.parent)
        found.append((".".join(parent.parts), path.stem if is_module else path.name))
    return found


def unplaced(package: Path, pyproject: Path) -> list[str]:
    named = layered(pyproject)
    return [
        f"{container}.{name}"
        for container, name in placed(package)
        if name not in named.get(container, set())
    ]


def imports(package: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports (relative imports resolved)."""
    graph: dict[str, set[str]] = {}
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    for name, path in modules.items():
        is_init = path.name == "__init__.py"
        base = name.split(".") if is_init else name.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                root = base[: len(base) - node.level + 1] if node.level else []
                module = ".".join([*root, *(node.module or "").split(".")]).strip(".")
                if not node.level:
                    module = node.module or ""
                for alias in node.names:
                    candidate = f"{module}.{alias.name}"
                    targets.add(candidate if candidate in modules else module)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_is_named_in_a_layers_contract() -> None:
    assert unplaced(PACKAGE, REPO_ROOT / "pyproject.toml") == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    # A package imports its own modules to re-export them; that is no circle between files.
    graph = {
        module: {t for t in targets if not module.startswith(f"{t}.")}
        for module, targets in imports(PACKAGE).items()
    }
    assert cycles(graph) == []


def test_a_module_added_without_a_place_is_named(tmp_path: Path) -> None:
    package = tmp_path / "hostpool_operator"
    (package / "engine").mkdir(parents=True)
    for path in ("__init__.py", "engine/__init__.py", "engine/placement.py", "engine/new.py"):
        (package / path).write_text("")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "[[tool.importlinter.contracts]]\nid = 'p'\nname = 'p'\ntype = 'layers'\n"
        "containers = ['hostpool_operator']\nlayers = ['engine']\n\n"
        "[[tool.importlinter.contracts]]\nid = 'e'\nname = 'e'\ntype = 'layers'\n"
        "containers = ['hostpool_operator.engine']\nlayers = ['placement']\n"
    )
    assert unplaced(package, pyproject) == ["hostpool_operator.engine.new"]


def test_a_circle_of_imports_is_found(tmp_path: Path) -> None:
    package = tmp_path / "hostpool_operator"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("from .c import thing\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n"
    )
    (package / "d.py").write_text("from . import a\n")
    found = cycles(imports(package))
    assert found == [["hostpool_operator.a", "hostpool_operator.b", "hostpool_operator.c"]]
