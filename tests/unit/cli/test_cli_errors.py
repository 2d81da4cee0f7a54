"""The command line's one error style, in-process (``main([...])``): for every command, a
bad flag or a bad file is one line on stderr, ``hostpool-operator: error: ...``, nothing on
stdout, no traceback, exit 2 (usage: the command line or a file it names is wrong) or 1 (a
failure: nothing to fix in the command line). Offline: Prometheus is a closed local port."""

from __future__ import annotations

import importlib.util
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from hostpool_operator.cli.main import main
from support.paths import REPO_ROOT

SCENARIO = REPO_ROOT / "docs" / "scenarios" / "depth-first-scale-up.yaml"
PREFIX = "hostpool-operator: error: "
POOL = {
    "apiVersion": "hostpool.io/v1alpha1",
    "kind": "HostPool",
    "metadata": {"name": "finance", "namespace": "vdi"},
    "spec": {
        "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 5},
        "scaling": {"maxHosts": 4},
    },
}


def _line(day: int) -> str:
    start, end = f"2026-11-0{day}T08:00:00Z", f"2026-11-0{day}T16:00:00Z"
    return json.dumps({"user": "alice", "start": start, "end": end})


@dataclass(frozen=True)
class Files:
    """Inputs in a temporary directory, good and bad, and a local port nothing listens on."""

    dir: Path
    pool: Path
    history: Path
    closed_port: int

    def write(self, name: str, content: str | bytes) -> str:
        path = self.dir / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return str(path)


@pytest.fixture
def files(tmp_path: Path) -> Files:
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump(POOL))
    history = tmp_path / "history.jsonl"
    history.write_text("".join(_line(day) + "\n" for day in range(2, 9)))
    with socket.socket() as probe:  # a port that was free; closed, nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return Files(tmp_path, pool, history, port)


def _recommend(f: Files, *args: str, history: str | None = None) -> list[str]:
    history = str(f.history) if history is None else history
    return ["recommend-plan", "--pool", str(f.pool), "--history", history, *args]


def _from_prometheus(f: Files, *args: str) -> list[str]:
    url = f"http://127.0.0.1:{f.closed_port}"
    return ["recommend-plan", "--pool", str(f.pool), "--prometheus", url, *args]


# (id, the arguments, exit code, what stderr says)
CASES: list[tuple[str, Callable[[Files], list[str]], int, str]] = [
    ("no-command", lambda f: [], 2, "required: command (see hostpool-operator --help)"),
    ("unknown-command", lambda f: ["deploy"], 2, "invalid choice: 'deploy'"),
    # crds
    ("crds-unknown-flag", lambda f: ["crds", "--force"], 2, "unrecognized arguments: --force"),
    (
        "crds-dir-is-a-file",
        lambda f: ["crds", "--output-dir", str(f.pool)],
        1,
        "pool.yaml: cannot write: File exists",
    ),
    # run: refused before logging is set up or anything is served
    (
        "run-bad-float",
        lambda f: ["run", "--status-interval", "soon"],
        2,
        "argument --status-interval: invalid float value: 'soon' "
        "(see hostpool-operator run --help)",
    ),
    ("run-bad-choice", lambda f: ["run", "--log-format", "xml"], 2, "invalid choice: 'xml'"),
    (
        "run-zero-writes",
        lambda f: ["run", "--write-concurrency", "0"],
        2,
        "--write-concurrency must be positive, not 0",
    ),
    (
        "run-negative-interval",
        lambda f: ["run", "--status-interval", "-1"],
        2,
        "--status-interval must be positive, not -1",
    ),
    (
        "run-zero-lease",
        lambda f: ["run", "--lease-duration", "0"],
        2,
        "--lease-duration must be positive",
    ),
    (
        "run-renew-past-lease",
        lambda f: ["run", "--lease-duration", "4", "--lease-renew-deadline", "4"],
        2,
        "--lease-renew-deadline 4 must be shorter than --lease-duration 4",
    ),
    (
        "run-metrics-address",
        lambda f: ["run", "--metrics-address", "0.0.0.0"],
        2,
        "--metrics-address '0.0.0.0': give HOST:PORT",
    ),
    # simulate
    ("simulate-no-file", lambda f: ["simulate"], 2, "give a scenario FILE or --timeline FILE"),
    (
        "simulate-both",
        lambda f: ["simulate", str(SCENARIO), "--timeline", str(SCENARIO)],
        2,
        "not both",
    ),
    (
        "simulate-missing",
        lambda f: ["simulate", str(f.dir / "nope.yaml")],
        2,
        "nope.yaml: cannot read: No such file or directory",
    ),
    (
        "simulate-bad-yaml",
        lambda f: ["simulate", f.write("bad.yaml", "pool: [unclosed")],
        2,
        "bad.yaml: not valid YAML/JSON",
    ),
    (
        "simulate-not-utf8",
        lambda f: ["simulate", f.write("bad.yaml", b"\xff\xfe\x00")],
        2,
        "bad.yaml: not UTF-8 text",
    ),
    (
        "simulate-invalid-scenario",
        lambda f: [
            "simulate",
            f.write("bad.yaml", "pool: {loadBalancer: {type: DepthFirst}}\nrequests: []\n"),
        ],
        2,
        "maxSessionLimit is required",
    ),
    (
        "simulate-invalid-timeline",
        lambda f: [
            "simulate",
            "--timeline",
            f.write("day.yaml", "start: '2026-12-07T00:00:00'\nhours: 0\npool: {}\n"),
        ],
        2,
        "day.yaml: ",
    ),
    (
        "simulate-bad-output",
        lambda f: ["simulate", str(SCENARIO), "--output", "csv"],
        2,
        "argument --output: invalid choice: 'csv'",
    ),
    # recommend-plan: the command line
    (
        "recommend-no-source",
        lambda f: ["recommend-plan", "--pool", str(f.pool)],
        2,
        "one of the arguments --history --prometheus is required",
    ),
    (
        "recommend-two-sources",
        lambda f: _recommend(f, "--prometheus", "http://127.0.0.1:9"),
        2,
        "not allowed with argument",
    ),
    (
        "recommend-bad-float",
        lambda f: _recommend(f, "--max-wait-minutes", "five"),
        2,
        "argument --max-wait-minutes: invalid float value: 'five'",
    ),
    (
        "recommend-negative-wait",
        lambda f: _recommend(f, "--max-wait-minutes", "-1"),
        2,
        "must not be negative",
    ),
    (
        "recommend-time-zone",
        lambda f: _recommend(f, "--time-zone", "Mars/Olympus"),
        2,
        "--time-zone: ",
    ),
    (
        "recommend-range-without-prometheus",
        lambda f: _recommend(f, "--days", "7"),
        2,
        "--since, --until and --days go with --prometheus",
    ),
    # recommend-plan: the files
    (
        "recommend-pool-missing",
        lambda f: ["recommend-plan", "--pool", str(f.dir / "no.yaml"), "--history", "h"],
        2,
        "no.yaml: cannot read",
    ),
    (
        "recommend-not-a-pool",
        lambda f: [
            "recommend-plan",
            "--pool",
            f.write("plan.yaml", "kind: ScalingPlan\n"),
            "--history",
            str(f.history),
        ],
        2,
        "plan.yaml: not a HostPool manifest",
    ),
    (
        "recommend-pool-without-scaling",
        lambda f: [
            "recommend-plan",
            "--pool",
            f.write(
                "p.yaml",
                "kind: HostPool\nmetadata: {name: p}\n"
                "spec: {loadBalancer: {type: DepthFirst, maxSessionLimit: 5}}\n",
            ),
            "--history",
            str(f.history),
        ],
        2,
        "p.yaml: spec.scaling",
    ),
    (
        "recommend-history-missing",
        lambda f: _recommend(f, history=str(f.dir / "none.jsonl")),
        2,
        "none.jsonl: cannot read: No such file or directory",
    ),
    (
        "recommend-history-not-utf8",
        lambda f: _recommend(f, history=f.write("h.jsonl", b"\xff\xfe\x00\n")),
        2,
        "h.jsonl: not UTF-8 text",
    ),
    (
        "recommend-history-bad-line",
        lambda f: _recommend(f, history=f.write("h.jsonl", _line(2) + "\n{}\n")),
        2,
        "h.jsonl: line 2: ",
    ),
    (
        "recommend-history-too-short",
        lambda f: _recommend(f, history=f.write("h.jsonl", _line(2) + "\n")),
        2,
        "h.jsonl: the history covers 1 day",
    ),
    # recommend-plan --prometheus
    (
        "prometheus-no-namespace",
        lambda f: _from_prometheus(f),
        2,
        "--prometheus needs --namespace NS",
    ),
    (
        "prometheus-bad-since",
        lambda f: _from_prometheus(f, "--namespace", "vdi", "--since", "monday"),
        2,
        "--since: 'monday' is not an RFC 3339 time",
    ),
    (
        "prometheus-zero-timeout",
        lambda f: _from_prometheus(f, "--namespace", "vdi", "--prometheus-timeout", "0"),
        2,
        "--prometheus-timeout must be positive",
    ),
    (
        "prometheus-unreachable",
        lambda f: _from_prometheus(f, "--namespace", "vdi", "--days", "14"),
        2,  # documented as 2 (docs/scaling-plans.md)
        "cannot reach Prometheus at http://127.0.0.1:",
    ),
]


@pytest.mark.parametrize(
    ("args", "code", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_an_error_is_one_line_with_its_exit_code(
    files: Files,
    capsys: pytest.CaptureFixture[str],
    args: Callable[[Files], list[str]],
    code: int,
    says: str,
) -> None:
    assert main(args(files)) == code
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(PREFIX), err
    assert says in err, err


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]


def test_run_cannot_listen_for_metrics_is_a_failure(
    listening_port: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import hostpool_operator.controller.handlers as handlers
    import hostpool_operator.logs as logs

    def never(*_args: object, **_kwargs: object) -> int:
        raise AssertionError("the operator started although its metrics could not be served")

    monkeypatch.setattr(logs, "setup_logging", lambda **_: None)
    monkeypatch.setattr(handlers, "run", never)
    assert main(["run", "--metrics-address", f"127.0.0.1:{listening_port}"]) == 1
    _, err = capsys.readouterr()
    assert err.splitlines() == [
        f"{PREFIX}--metrics-address 127.0.0.1:{listening_port}: cannot listen: "
        "Address already in use"
    ]


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_an_unwritable_plot_is_a_failure_after_the_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "missing" / "plot.png"
    assert main(["simulate", str(SCENARIO), "--plot", str(out)]) == 1
    stdout, err = capsys.readouterr()
    assert stdout  # the table came first
    assert err.splitlines() == [f"{PREFIX}{out}: cannot write the plot: No such file or directory"]
