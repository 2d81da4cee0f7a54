"""Each command's success path, in-process (``main([...])``) and offline: crds writes what
is in crds/, simulate runs the shipped scenarios and timelines, recommend-plan prints a
ScalingPlan for the pool, and run hands the operator its settings (the operator itself is a
stand-in here: it needs a cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hostpool_operator.cli.main import main
from hostpool_operator.controller.settings import ControllerSettings, LeaseSettings
from support.paths import REPO_ROOT

SCENARIOS = REPO_ROOT / "docs" / "scenarios"


def finance_pool(tmp_path: Path, limit: int) -> Path:
    """A pool file for recommend-plan: HostPool vdi/finance, depth-first with ``limit``
    sessions a host, at most 4 hosts."""
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        yaml.safe_dump(
            {
                "kind": "HostPool",
                "metadata": {"name": "finance", "namespace": "vdi"},
                "spec": {
                    "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": limit},
                    "scaling": {"maxHosts": 4},
                },
            }
        )
    )
    return pool


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for command in ("run", "crds", "simulate", "recommend-plan"):
        assert command in out


def test_crds_writes_the_shipped_definitions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["crds", "--output-dir", str(tmp_path / "crds")]) == 0
    written = [Path(line) for line in capsys.readouterr().out.splitlines()]
    assert written
    assert {p.name for p in written} == {p.name for p in (REPO_ROOT / "crds").glob("*.yaml")}
    for path in written:
        assert path.read_text() == (REPO_ROOT / "crds" / path.name).read_text(), path.name


def test_simulate_a_shipped_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = str(SCENARIOS / "depth-first-scale-up.yaml")
    assert main(["simulate", scenario, "--output", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert main(["simulate", scenario]) == 0
    table, err = capsys.readouterr()
    assert err == ""
    assert table.strip()
    assert isinstance(result, dict)


def test_simulate_a_shipped_timeline(capsys: pytest.CaptureFixture[str]) -> None:
    timeline = str(SCENARIOS / "weekday-plan.timeline.yaml")
    assert main(["simulate", "--timeline", timeline]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["AT", "PHASE"]
    assert lines[-1].startswith("host-hours ")


def test_recommend_plan_prints_a_scaling_plan_for_the_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = finance_pool(tmp_path, limit=5)
    history = tmp_path / "history.jsonl"
    history.write_text(
        "".join(
            json.dumps(
                {
                    "user": "alice",
                    "start": f"2026-11-0{d}T08:00:00Z",
                    "end": f"2026-11-0{d}T16:00:00Z",
                }
            )
            + "\n"
            for d in range(2, 9)
        )
    )
    assert main(["recommend-plan", "--pool", str(pool), "--history", str(history)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# ")  # the reasons, as comments
    plan = yaml.safe_load(out)
    assert plan["kind"] == "ScalingPlan"
    assert plan["metadata"] == {"name": "finance-recommended", "namespace": "vdi"}
    assert err.startswith("recommended ")
    assert "took" in err


def test_recommend_plan_reads_an_unsorted_history_as_the_sorted_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A connection log's export is rarely in start order (by user, by the end of the session):
    # the same sessions in any order give the same plan.
    pool = finance_pool(tmp_path, limit=2)
    records = [
        {"user": user, "start": f"2026-11-{d:02}T0{h}:00:00Z", "end": f"2026-11-{d:02}T1{h}:00:00Z"}
        for d in range(2, 16)
        for user, h in (("carol", 7), ("alice", 8), ("bob", 9))
    ]
    ordered, shuffled = tmp_path / "ordered.jsonl", tmp_path / "shuffled.jsonl"
    ordered.write_text("".join(json.dumps(r) + "\n" for r in records))
    by_user = sorted(records, key=lambda r: (r["user"], r["start"]), reverse=True)
    assert by_user != records
    shuffled.write_text("".join(json.dumps(r) + "\n" for r in by_user))
    outputs = []
    for history in (ordered, shuffled):
        code = main(
            ["recommend-plan", "--pool", str(pool), "--history", str(history), "--output", "json"]
        )
        out, err = capsys.readouterr()
        assert code == 0, err
        outputs.append(json.loads(out))
    assert outputs[1] == outputs[0]


def test_run_hands_the_operator_the_flags_settings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import hostpool_operator.controller.handlers as handlers
    import hostpool_operator.logs as logs

    calls: list[tuple[list[str], ControllerSettings, dict[str, Any]]] = []

    def operator(namespaces: list[str], settings: ControllerSettings, **given: Any) -> int:
        calls.append((namespaces, settings, given))
        return 0

    monkeypatch.setattr(logs, "setup_logging", lambda **_: None)
    monkeypatch.setattr(handlers, "run", operator)
    assert main(["run"]) == 0
    assert (
        main(["run", "-n", "a", "-n", "b", "--status-interval", "0.5", "--lease-duration", "3"])
        == 0
    )
    assert main(["run", "--no-leader-election", "--lease-renew-deadline", "2"]) == 0
    (all_namespaces, defaults, first), (two, settings, given), (_, _, alone) = calls
    assert all_namespaces == []
    assert defaults == ControllerSettings()  # the flags' defaults are the settings' own
    assert first["lease"] == LeaseSettings()  # and the Lease's
    assert two == ["a", "b"]
    assert settings == ControllerSettings(status_interval=0.5)
    assert given["lease"] == LeaseSettings(duration=3.0)
    assert alone["lease"] is None
    assert given["metrics"] is None
    assert capsys.readouterr().err == ""
