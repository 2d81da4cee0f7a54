"""``recommend-plan --prometheus`` against a real Prometheus server (issue 27).

Two weeks of a generated office history (recent: they end days before today) become the
series the operator exports, ``hostpool_assignments_total{namespace, pool, reason}``,
``hostpool_session_ends_total{namespace, pool}`` and ``hostpool_sessions{namespace, pool,
state}``, as a Prometheus scraping it every minute would have stored them: with ``job`` and
``instance`` labels, an operator restart that resets the counters, a leader change to
another instance, a scrape gap, and reconnects (which start no session). That OpenMetrics
text is backfilled with ``promtool tsdb create-blocks-from openmetrics``, a ``prometheus``
process (built by hack/cluster/tools.sh from the same module as promtool) serves the
TSDB, and ``hostpool-operator recommend-plan --prometheus`` must recommend exactly what
``--history`` does for the same sessions written as JSON lines. The history's times are
whole minutes (the metrics' resolution), so the recovered sessions are the history's to the
second and the comparison is exact; only the user count of the first reason differs (user
names are not in the metrics).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from hostpool_operator.controller.metrics import PrometheusMetrics
from hostpool_operator.recommend.demand_curve import concurrency, frame_of
from hostpool_operator.recommend.history import PastSession
from hostpool_operator.recommend.sources.prometheus import (
    Client,
    PrometheusError,
    read_history,
    read_series,
)
from support.controlplane import ensure_tools
from support.monitoring import exported_sample_names, require_promtool
from support.paths import REPO_ROOT
from support.ports import free_port
from support.prometheus_server import PrometheusServer, backfill, require_binary
from support.report_logs import EXTRA_LOGS

NAMESPACE = "vdi"
POOL = "office"
JOB = "hostpool-hostpool-operator-metrics"
MINUTE = timedelta(minutes=1)
#: The replays of a recovered history against the original's (see the test).
HOST_HOURS_TOLERANCE = 0.05


@dataclass(frozen=True)
class Session:
    user: str
    start: datetime
    end: datetime


def first_monday(today: datetime) -> datetime:
    """Midnight (UTC) of the Monday three weeks before ``today``'s week."""
    midnight = today.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight - timedelta(days=midnight.weekday() + 21)


def office(monday: datetime, *, days: int = 14, users: int = 40, seed: int = 27) -> list[Session]:
    """An office of ``users`` on whole minutes: in around 08:00 (Mondays everyone early and
    at once), out about eight hours later, some with a lunch break (two sessions), a few at
    weekends around noon. One session at a time per user."""
    rng = random.Random(seed)
    out: list[Session] = []
    for d in range(days):
        day = monday + timedelta(days=d)
        for u in range(users):
            user = f"user{u:02d}@corp.example"
            if day.weekday() >= 5:
                if rng.random() < 0.1:
                    start = rng.randint(10 * 60, 14 * 60)
                    out.append(session(user, day, start, start + rng.randint(20, 120)))
                continue
            arrive = (
                rng.randint(7 * 60 + 50, 8 * 60 + 5)
                if d % 7 == 0
                else rng.randint(7 * 60 + 30, 9 * 60 + 15)
            )
            leave = arrive + rng.randint(7 * 60 + 30, 8 * 60 + 45)
            if rng.random() < 0.3:
                lunch = rng.randint(11 * 60 + 30, 12 * 60 + 15)
                back = lunch + rng.randint(0, 50)
                out.append(session(user, day, arrive, lunch))
                out.append(session(user, day, back + 1, leave))
            else:
                out.append(session(user, day, arrive, leave))
    out.sort(key=lambda s: (s.start, s.user))
    return out


def session(user: str, day: datetime, start: int, end: int) -> Session:
    return Session(user, day + start * MINUTE, day + end * MINUTE)


def history_lines(sessions: list[Session]) -> str:
    return "".join(
        json.dumps(
            {
                "user": s.user,
                "start": s.start.isoformat().replace("+00:00", "Z"),
                "end": s.end.isoformat().replace("+00:00", "Z"),
            }
        )
        + "\n"
        for s in sessions
    )


# ------------------------------------------------------------------------------ the series


@dataclass(frozen=True)
class Process:
    """One operator process: its instance label and the minutes it was scraped."""

    instance: str
    begin: datetime
    end: datetime  # exclusive


def openmetrics(
    sessions: list[Session],
    since: datetime,
    until: datetime,
    processes: list[Process],
    gap: tuple[datetime, datetime],
    reconnects: list[datetime],
) -> str:
    """The series a Prometheus scraping the operator once a minute, on the minute, stored.

    A scrape at ``T`` sees the sessions started before ``T`` and ended at or before it; a
    process counts from zero what happened after its predecessor's last scrape. No samples
    within ``gap``."""
    starts = sorted(s.start for s in sessions)
    ends = sorted(s.end for s in sessions)
    reconnected = sorted(reconnects)

    def before(times: list[datetime], t: datetime) -> int:
        import bisect

        return bisect.bisect_left(times, t)

    def at_or_before(times: list[datetime], t: datetime) -> int:
        import bisect

        return bisect.bisect_right(times, t)

    def open_at(t: datetime) -> int:
        return at_or_before(starts, t) - at_or_before(ends, t)

    families: dict[str, tuple[str, str, list[str]]] = {
        "hostpool_assignments": (
            "counter",
            "SessionRequests assigned to a host, by reason (NewSession, Reconnected).",
            [],
        ),
        "hostpool_session_ends": ("counter", "Assigned sessions that ended.", []),
        "hostpool_sessions": ("gauge", "Sessions in the pool, by state.", []),
    }
    for number, process in enumerate(processes):
        base = f'instance="{process.instance}",job="{JOB}",namespace="{NAMESPACE}",pool="{POOL}"'
        # What the process's predecessor scraped last: its counters count the rest.
        zero = process.begin - MINUTE if number else since - MINUTE
        lines: dict[str, list[str]] = {k: [] for k in ("new", "re", "ends", "c", "a", "d")}
        t = max(process.begin, since)
        while t < min(process.end, until + MINUTE):
            if not gap[0] <= t < gap[1]:
                stamp = int(t.timestamp())
                new = before(starts, t) - (before(starts, zero) if number else 0)
                again = before(reconnected, t) - (before(reconnected, zero) if number else 0)
                ended = at_or_before(ends, t) - (at_or_before(ends, zero) if number else 0)
                lines["new"].append(f'{{{base},reason="NewSession"}} {new} {stamp}')
                lines["re"].append(f'{{{base},reason="Reconnected"}} {again} {stamp}')
                lines["ends"].append(f"{{{base}}} {ended} {stamp}")
                lines["c"].append(f'{{{base},state="connecting"}} 0 {stamp}')
                lines["a"].append(f'{{{base},state="active"}} {open_at(t)} {stamp}')
                lines["d"].append(f'{{{base},state="disconnected"}} 0 {stamp}')
            t += MINUTE
        families["hostpool_assignments"][2].extend(
            "hostpool_assignments_total" + line for line in lines["new"] + lines["re"]
        )
        families["hostpool_session_ends"][2].extend(
            "hostpool_session_ends_total" + line for line in lines["ends"]
        )
        families["hostpool_sessions"][2].extend(
            "hostpool_sessions" + line for line in lines["c"] + lines["a"] + lines["d"]
        )
    out: list[str] = []
    for name, (kind, help_text, samples) in families.items():
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
    out.append("# EOF")
    return "\n".join(out) + "\n"


def test_the_series_are_named_and_labelled_as_the_operator_exports_them() -> None:
    """The names and labels written above are the operator's own (its registry's)."""
    exported = exported_sample_names()
    for name in ("hostpool_assignments_total", "hostpool_session_ends_total", "hostpool_sessions"):
        assert name in exported
    metrics = PrometheusMetrics()
    metrics.observe_assignment(NAMESPACE, POOL, "NewSession", 0.1, queued=0.01)
    metrics.sessions_ended(NAMESPACE, POOL, 1)
    metrics.pool_state(NAMESPACE, POOL, {"sessions": {"active": 1}})
    labels = {
        sample.name: set(sample.labels)
        for family in metrics.registry.collect()
        for sample in family.samples
    }
    assert labels["hostpool_assignments_total"] == {"namespace", "pool", "reason"}
    assert labels["hostpool_session_ends_total"] == {"namespace", "pool"}
    assert labels["hostpool_sessions"] == {"namespace", "pool", "state"}


# ------------------------------------------------------------------------------ the server


@dataclass
class Served:
    server: PrometheusServer
    sessions: list[Session]
    since: datetime
    until: datetime
    history: Path
    pool: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    bin_dir = ensure_tools(REPO_ROOT)
    promtool = require_promtool(bin_dir)
    prometheus = require_binary(bin_dir, "prometheus")
    work = tmp_path_factory.mktemp("prometheus")
    monday = first_monday(datetime.now(UTC))
    sessions = office(monday)
    since = monday - timedelta(days=1)
    until = monday + timedelta(days=15)
    day = timedelta(days=1)
    processes = [
        Process("10.0.0.7:8080", since, monday + 3 * day + timedelta(hours=12)),
        # A leader change: another instance, counters from zero, mid-morning.
        Process("10.0.0.9:8080", monday + 3 * day + timedelta(hours=12), monday + 8 * day),
        # The first instance again: same labels, counters reset, at midnight.
        Process("10.0.0.7:8080", monday + 8 * day, until + MINUTE),
    ]
    gap = (monday + 2 * day + timedelta(hours=2), monday + 2 * day + timedelta(hours=2, minutes=20))
    rng = random.Random(5)
    reconnects = sorted(
        s.start + rng.randint(1, 60) * MINUTE for s in sessions if rng.random() < 0.2
    )
    text = openmetrics(sessions, since, until, processes, gap, reconnects)
    (work / "series.om").write_text(text)
    began = time.monotonic()
    backfill(promtool, work / "series.om", work / "tsdb")
    print(f"backfilled {text.count(chr(10))} lines in {time.monotonic() - began:.1f} s")
    (work / "history.jsonl").write_text(history_lines(sessions))
    manifest = {
        "apiVersion": "hostpool.io/v1alpha1",
        "kind": "HostPool",
        "metadata": {"name": POOL},
        "spec": {
            "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 5},
            "scaling": {"maxHosts": 20, "scaleDownDelaySeconds": 600},
        },
    }
    (work / "pool.yaml").write_text(yaml.safe_dump(manifest))
    server = PrometheusServer(prometheus, work / "tsdb", work)
    server.start()
    try:
        yield Served(server, sessions, since, until, work / "history.jsonl", work / "pool.yaml")
    finally:
        server.stop()


@pytest.fixture
def prometheus(served: Served, request: pytest.FixtureRequest) -> Served:
    """The module's server, its log attached to the report of a test that fails."""
    request.node.stash.setdefault(EXTRA_LOGS, []).append(
        (f"prometheus log ({served.server.log_path})", served.server.log)
    )
    return served


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def recommend_plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hostpool_operator", "recommend-plan", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO_ROOT,
    )


def test_recommend_plan_from_prometheus_equals_the_one_from_the_history(
    prometheus: Served,
) -> None:
    began = time.monotonic()
    from_history = recommend_plan(
        "--pool", str(prometheus.pool), "--history", str(prometheus.history), "--output", "json"
    )
    assert from_history.returncode == 0, from_history.stderr
    history_seconds = time.monotonic() - began
    began = time.monotonic()
    from_metrics = recommend_plan(
        "--pool",
        str(prometheus.pool),
        "--prometheus",
        prometheus.server.url,
        "--namespace",
        NAMESPACE,
        "--since",
        rfc3339(prometheus.since),
        "--until",
        rfc3339(prometheus.until),
        "--output",
        "json",
    )
    assert from_metrics.returncode == 0, from_metrics.stderr
    print(
        f"--history {history_seconds:.1f} s, --prometheus {time.monotonic() - began:.1f} s; "
        f"{from_metrics.stderr.strip()}"
    )
    assert f"{len(prometheus.sessions)} sessions" in from_metrics.stderr
    expected = json.loads(from_history.stdout)
    found = json.loads(from_metrics.stdout)
    # The same plan, with the same waits. Which session ended when is not in the metrics
    # (ends are matched first in, first out), so the replays' hosts empty at other times:
    # host-hours within HOST_HOURS_TOLERANCE (3.5 % lower here, both for the plan and for
    # no plan); the hosts always on are the same.
    assert found["plan"] == expected["plan"]
    for got, want in [
        (found["evaluation"], expected["evaluation"]),
        (found["baselines"]["noPlan"], expected["baselines"]["noPlan"]),
    ]:
        assert {k: v for k, v in got.items() if k != "hostHours"} == {
            k: v for k, v in want.items() if k != "hostHours"
        }
        assert got["hostHours"] == pytest.approx(want["hostHours"], rel=HOST_HOURS_TOLERANCE)
    assert found["baselines"]["alwaysOn"] == expected["baselines"]["alwaysOn"]
    users = len({s.user for s in prometheus.sessions})
    assert f"sessions of {users} users" in expected["reasons"][0]
    assert (
        f"{len(prometheus.sessions)} sessions of {len(prometheus.sessions)} users"
        in (found["reasons"][0])
    )


def test_the_recovered_history_has_the_histories_minutes(prometheus: Served) -> None:
    """Read from the real server: every session's start, and the sessions open in every
    minute, exactly the history's (through the restart, the leader change and the gap)."""
    sessions = read_history(
        Client(prometheus.server.url), NAMESPACE, POOL, prometheus.since, prometheus.until, UTC
    )
    original = [PastSession(s.user, s.start, s.end) for s in prometheus.sessions]
    assert len(sessions) == len(original)
    assert [s.start for s in sessions] == [s.start for s in original]
    frame = frame_of(original, UTC)
    assert concurrency(sessions, frame) == concurrency(original, frame)
    assert sorted(s.end for s in sessions) == sorted(s.end for s in original)


def test_the_range_goes_in_chunks_under_the_servers_points_limit(prometheus: Served) -> None:
    """The server refuses one query of the whole range (over 11,000 points a series); the
    chunked reader gets every step of it."""
    client = Client(prometheus.server.url)
    query = f'hostpool_session_ends_total{{namespace="{NAMESPACE}", pool="{POOL}"}}'
    steps = int((prometheus.until - prometheus.since) / MINUTE)
    assert steps > 20_000
    with pytest.raises(PrometheusError, match=r"bad_data: .*11,?000 points"):
        client.query_range(query, prometheus.since, prometheus.until)
    series = read_series(client, query, prometheus.since, steps)
    assert len(series) == 2  # two instances
    stamps = {at for points in series for at, _ in points}
    # Every step once, but the gap's: its first 4 steps still see the last sample before it
    # (the 5-minute lookback, left-open), the 16 others nothing.
    assert len(stamps) == steps + 1 - 16
    assert sum(len(points) for points in series) >= len(stamps)


def test_the_servers_error_answer_is_reported_with_its_type(prometheus: Served) -> None:
    client = Client(prometheus.server.url)
    with pytest.raises(PrometheusError, match=r"refused a query: bad_data: .*parse error"):
        client.query_range("sum(", prometheus.since, prometheus.since + timedelta(hours=1))


def test_a_wrong_namespace_is_a_clear_error(prometheus: Served) -> None:
    proc = recommend_plan(
        "--pool",
        str(prometheus.pool),
        "--prometheus",
        prometheus.server.url,
        "--namespace",
        "elsewhere",
        "--since",
        rfc3339(prometheus.since),
        "--until",
        rfc3339(prometheus.until),
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert (
        f"no series for pool {POOL} in namespace elsewhere between {rfc3339(prometheus.since)} "
        f"and {rfc3339(prometheus.until)}" in proc.stderr
    ), proc.stderr
    assert proc.stdout == ""


def test_fewer_than_seven_days_is_the_same_error_as_for_a_history_file(
    prometheus: Served, tmp_path: Path
) -> None:
    monday = prometheus.since + timedelta(days=1)
    proc = recommend_plan(
        "--pool",
        str(prometheus.pool),
        "--prometheus",
        prometheus.server.url,
        "--namespace",
        NAMESPACE,
        "--since",
        rfc3339(monday),
        "--days",
        "5",
    )
    assert proc.returncode == 2
    short = [s for s in prometheus.sessions if s.start < monday + timedelta(days=5)]
    (tmp_path / "short.jsonl").write_text(history_lines(short))
    file_proc = recommend_plan(
        "--pool", str(prometheus.pool), "--history", str(tmp_path / "short.jsonl")
    )
    assert file_proc.returncode == 2
    message = file_proc.stderr.split("short.jsonl: ", 1)[-1].strip()
    assert message.startswith("the history covers 5 days"), file_proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unreachable_server_is_a_clear_error(prometheus: Served) -> None:
    port = free_port()  # nothing listens there
    proc = recommend_plan(
        "--pool",
        str(prometheus.pool),
        "--prometheus",
        f"http://127.0.0.1:{port}",
        "--namespace",
        NAMESPACE,
        "--days",
        "14",
    )
    assert proc.returncode == 2
    assert f"cannot reach Prometheus at http://127.0.0.1:{port}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
