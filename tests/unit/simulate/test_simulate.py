"""The simulator: run_scenario, the CLI, its errors, its plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hostpool_operator.simulate import ScenarioError, run_scenario
from support.paths import REPO_ROOT

SCENARIOS = sorted(
    p
    for p in (REPO_ROOT / "docs" / "scenarios").glob("*.yaml")
    if not p.name.endswith(".timeline.yaml")  # timelines: test_timeline
)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hostpool_operator", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )


def test_shipped_scenarios_exist() -> None:
    assert len(SCENARIOS) >= 3


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_shipped_scenarios_run_as_json(path: Path) -> None:
    done = cli("simulate", str(path), "--output", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == {"assignments", "hosts", "scaleUp"}
    for host in result["hosts"]:
        assert set(host) == {"name", "sessions", "connecting", "loadIndex", "bucket"}


def test_depth_first_scenario_scales_up(tmp_path: Path) -> None:
    done = cli(
        "simulate", str(REPO_ROOT / "docs/scenarios/depth-first-scale-up.yaml"), "--output", "json"
    )
    result = json.loads(done.stdout)
    reasons = [a["reason"] for a in result["assignments"]]
    assert reasons.count("PoolSaturated") == 2
    assert "Reconnected" in reasons
    assert result["scaleUp"] == 1


def test_table_output_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "plot.png"
    done = cli(
        "simulate", str(REPO_ROOT / "docs/scenarios/horizon-logon-storm.yaml"), "--plot", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert "SESSIONS  CONNECTING  LOAD  BUCKET" in done.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"pool": {"loadBalancer": {"type": "DepthFirst"}}}, "pool.loadBalancer"),
        ({"pool": {"loadBalancer": {"type": "Sideways"}}}, "pool.loadBalancer.type"),
        (
            {"pool": {"loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 0}}},
            "maxSessionLimit",
        ),
        (
            {
                "pool": {"loadBalancer": {"type": "BreadthFirst"}},
                "hosts": [{"name": "a", "users": ["x", "y"], "sessions": 1}],
            },
            "hosts.0",
        ),
        (
            {"pool": {"loadBalancer": {"type": "BreadthFirst"}}, "requests": [{"user": ""}]},
            "requests.0.user",
        ),
        (
            {
                "pool": {"loadBalancer": {"type": "BreadthFirst"}},
                "requests": [{"user": "u", "protocol": "VNC"}],
            },
            "requests.0.protocol",
        ),
        ({"hosts": []}, "pool"),
        (
            {
                "pool": {"loadBalancer": {"type": "BreadthFirst"}},
                "hosts": [{"name": "a"}, {"name": "a"}],
            },
            "appears twice",
        ),
        (
            {"pool": {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 2}, "horizon": {}}},
            "horizon is only allowed",
        ),
    ],
)
def test_invalid_scenarios_name_the_field(document: dict[str, object], field: str) -> None:
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        run_scenario(document)


def test_cli_invalid_scenario_exits_2_with_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("pool: {loadBalancer: {type: DepthFirst}}\nrequests: [{user: a}]\n")
    done = cli("simulate", str(bad))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "pool.loadBalancer" in done.stderr
    assert "maxSessionLimit is required" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("content", ["pool: [unclosed", "- just\n- a list\n", ""])
def test_cli_malformed_files_exit_2(tmp_path: Path, content: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    done = cli("simulate", str(bad))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr


def test_cli_missing_file_exits_2(tmp_path: Path) -> None:
    done = cli("simulate", str(tmp_path / "nope.yaml"))
    assert done.returncode == 2
    assert "cannot read" in done.stderr
