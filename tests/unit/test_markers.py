"""The suite's markers come from where a test lives (tests/conftest.py), so ``make test-faults``
(``pytest -m faults``) and friends select by directory: every test under tests/e2e/faults is a
fault test, nothing under tests/unit needs a cluster.

Two fresh collections, run at once (each takes seconds): the whole suite with every test's
markers (a small plugin prints them), and ``pytest -m faults`` as make runs it, which also
shows the markers are there before ``-m`` selects.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support.paths import REPO_ROOT

MARKERS = ("cluster", "e2e", "faults", "desktop")

PLUGIN = f"""
def pytest_collection_finish(session):
    for item in session.items:
        names = sorted({{m.name for m in item.iter_markers()}} & {set(MARKERS)!r})
        print("MARKS", item.nodeid, ",".join(names), sep="\\t")
"""


def _collect(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _output(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"{proc.args!r} -> {proc.returncode}:\n{out}{err}"
    return out


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, set[str]], set[str]]:
    """(markers of every test by node id, node ids that ``-m faults`` selects)."""
    plugin_dir = tmp_path_factory.mktemp("plugin")
    (plugin_dir / "marker_dump.py").write_text(PLUGIN)
    path = os.pathsep.join(p for p in (str(plugin_dir), os.environ.get("PYTHONPATH")) if p)
    dump = _collect(["-p", "marker_dump"], {**os.environ, "PYTHONPATH": path})
    faults = _collect(["-m", "faults"])
    marks: dict[str, set[str]] = {}
    for line in _output(dump).splitlines():
        if line.startswith("MARKS\t"):
            _, nodeid, names = line.split("\t")
            marks[nodeid] = set(filter(None, names.split(",")))
    selected = {line for line in _output(faults).splitlines() if "::" in line}
    return marks, selected


def under(marks: dict[str, set[str]], directory: str) -> dict[str, set[str]]:
    return {i: m for i, m in marks.items() if i.startswith(directory + "/")}


def test_every_directory_has_tests(
    collected: tuple[dict[str, set[str]], set[str]],
) -> None:
    marks, _ = collected
    for directory in ("tests/unit", "tests/chart", "tests/api", "tests/e2e/faults"):
        assert under(marks, directory), f"no test collected under {directory}"
    assert under(marks, "tests/e2e/desktop"), "no test collected under tests/e2e/desktop"


def test_markers_follow_the_directories(collected: tuple[dict[str, set[str]], set[str]]) -> None:
    marks, _ = collected
    wrong: list[str] = []
    for nodeid, names in marks.items():
        in_e2e = nodeid.startswith("tests/e2e/")
        expected = {
            "e2e": in_e2e,
            "faults": nodeid.startswith("tests/e2e/faults/"),
            "desktop": nodeid.startswith("tests/e2e/desktop/"),
        }
        wrong += [f"{nodeid}: {m} {names}" for m, want in expected.items() if want > (m in names)]
        # Only a test under tests/e2e is an e2e or desktop test (faults may be marked by hand).
        wrong += [f"{nodeid}: {m}" for m in ("e2e", "desktop") if m in names and not in_e2e]
        if nodeid.startswith("tests/api/") and "cluster" not in names:
            wrong.append(f"{nodeid}: no cluster marker")
        if nodeid.startswith(("tests/unit/", "tests/chart/")) and names:
            wrong.append(f"{nodeid}: {names} on a test that needs no cluster")
    assert not wrong, "\n".join(wrong[:40])


def test_cluster_marks_e2e_tests_on_the_suites_api_server(
    collected: tuple[dict[str, set[str]], set[str]],
) -> None:
    marks, _ = collected
    # With the `kube` fixture it is a cluster test; one that starts its own control plane
    # (real nodes) or needs none (Keycloak alone) is not.
    depth_first = "tests/e2e/test_depth_first_live.py::test_depth_first_fills_hosts_in_query_order"
    assert "cluster" in marks[depth_first]
    for path in ("tests/e2e/test_keycloak_live.py", "tests/e2e/test_real_nodes_live.py"):
        tests = {i: m for i, m in marks.items() if i.startswith(path + "::")}
        assert tests, path
        assert not any("cluster" in m for m in tests.values()), tests


def test_minus_m_faults_selects_the_fault_directory_and_the_marked_api_test(
    collected: tuple[dict[str, set[str]], set[str]],
) -> None:
    marks, selected = collected
    assert selected == {i for i, m in marks.items() if "faults" in m}
    assert set(under(marks, "tests/e2e/faults")) <= selected
    # The one fault test outside it: an informer test that restarts the API server.
    assert {i for i in selected if not i.startswith("tests/e2e/faults/")} == {
        "tests/api/test_streamed_list_live.py::"
        "test_a_list_as_the_api_server_comes_back_gets_every_object"
    }
