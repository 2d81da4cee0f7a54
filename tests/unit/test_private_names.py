"""No module of the package uses another module's private names: a leading underscore says
"this file's own", and a name another file needs is made public where it is defined (or the
concern moves). Read from the source (``ast``), so a new offender fails here by file and
line."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "operator" / "hostpool_operator"
TESTS = REPO_ROOT / "tests"


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_privates(tree: ast.AST) -> set[str]:
    """The private names a file defines: functions, classes, module and class variables,
    and attributes it assigns to (``self._x = ...``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return {name for name in names if private(name)}


def borrowed(path: Path, tree: ast.AST, project: set[str]) -> Iterator[str]:
    """Each use in ``path`` of a private name another file of the project defines: imported
    from a module of the project, or read as an attribute the file does not define itself."""
    own = defined_privates(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            inside = node.level > 0 or module.startswith(("hostpool_operator", "support"))
            for alias in node.names:
                if inside and private(alias.name):
                    yield f"{path}:{node.lineno}: imports {alias.name} from {module or '.'}"
        elif isinstance(node, ast.Attribute) and private(node.attr):
            # An object's own (self, cls) are its class's business, inherited ones included.
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in own or node.attr not in project:
                continue
            yield f"{path}:{node.lineno}: uses {ast.unparse(node)}"


def offences(root: Path) -> list[str]:
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(root.rglob("*.py"))}
    project: set[str] = set()
    for tree in trees.values():
        project |= defined_privates(tree)
    return [
        line
        for path, tree in trees.items()
        for line in borrowed(path.relative_to(root.parent), tree, project)
    ]


def test_no_module_of_the_package_uses_another_modules_private_names() -> None:
    assert offences(PACKAGE) == []


def test_the_check_finds_a_borrowed_private_name(tmp_path: Path) -> None:
    package = tmp_path / "hostpool_operator"
    package.mkdir()
    (package / "a.py").write_text("def _secret() -> int:\n    return 1\n")
    (package / "b.py").write_text(
        "from . import a\nfrom .a import _secret\n\nVALUE = a._secret() + _secret()\n"
    )
    (package / "c.py").write_text("class C:\n    def _own(self) -> None:\n        self._own()\n")
    found = offences(package)
    assert len(found) == 2, found
    assert "imports _secret" in found[0]
    assert "uses a._secret" in found[1]
