"""`recommend-plan` against weeks of a generated history (issue 27), a benchmark, not a test.

Two histories, both seeded:

* ``--history bench`` (the default): four weeks of 5,000 sessions every day (140,000) for a
  pool of 16 sessions a host, up to 400 hosts. It shows the search's run time: the issue
  asks for under 60 s on two cores.
* ``--history office``: the worked example of docs/scaling-plans.md, four weeks of a
  3,000-user office (Europe/Stockholm) with a Monday peak (everyone in, early and at once)
  and quiet weekends, for a pool of 12 sessions a host, up to 300 hosts. Besides the
  recommendation it replays the hand-written plan of crds/examples/scaling-plan.yaml on the
  same pool and history, as written (its forced logoff included) and without the forced
  logoff.

Each run writes the history (JSON lines) and the pool (YAML) to ``--out``, runs
``hostpool-operator recommend-plan`` on them as a user would (JSON output and the plot;
its wall time is the run time quoted), then replays the plans in this process for the
figures the JSON does not carry (worst wait). The last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import yaml

ROOT = Path(__file__).resolve().parents[2]
MONDAY = "2026-11-02"  # no DST change in the four weeks after it
ZONE = "Europe/Stockholm"


def _clock(rng: random.Random, mean_hours: float, sd_minutes: float) -> float:
    """Minutes after midnight, normally spread around ``mean_hours``, within the day."""
    return min(23 * 60 + 50.0, max(10.0, rng.gauss(mean_hours * 60, sd_minutes)))


def office_day(
    rng: random.Random, weekday: int, user: str, *, quiet_weekend: bool
) -> list[tuple[float, float]]:
    """One user's sessions of a day, (start, end) in minutes after local midnight: in by
    08:20 give or take 40 minutes (Monday: 08:00 give or take 15, everyone for the week's
    start), out about 8 hours later, some with a lunch break (two sessions), a few back in
    the evening; at weekends (quiet) a short session around noon."""
    if weekday >= 5 and quiet_weekend:
        start = _clock(rng, 11.5, 150)
        return [(start, min(start + max(15.0, rng.gauss(80, 40)), 24 * 60 - 1.0))]
    arrive = _clock(rng, 8.0, 15) if weekday == 0 else _clock(rng, 8.33, 40)
    leave = min(arrive + max(120.0, rng.gauss(8.25 * 60, 45)), 23 * 60 + 55.0)
    sessions: list[tuple[float, float]] = []
    lunch = _clock(rng, 11.75, 20)
    back = lunch + max(20.0, rng.gauss(50, 15))
    if rng.random() < 0.4 and arrive + 30 < lunch and back + 30 < leave:
        sessions += [(arrive, lunch), (back, leave)]
    else:
        sessions.append((arrive, leave))
    if rng.random() < 0.05:
        evening = _clock(rng, 20.5, 45)
        sessions.append((evening, min(evening + max(10.0, rng.gauss(45, 20)), 24 * 60 - 1.0)))
    return sessions


def history(kind: str, weeks: int, seed: int) -> list[tuple[datetime, datetime, str]]:
    """The sessions of the chosen history, sorted by start (aware, local times)."""
    rng = random.Random(seed)
    zone = ZoneInfo(ZONE)
    first = datetime.fromisoformat(MONDAY)
    out: list[tuple[datetime, datetime, str]] = []
    for d in range(7 * weeks):
        day = first + timedelta(days=d)
        weekday = day.weekday()
        if kind == "office":
            attend = {0: 0.95, 4: 0.7}.get(weekday, 0.82) if weekday < 5 else 0.03
            users = [f"user{u:04d}@corp.example" for u in range(3000) if rng.random() < attend]
            todays = [
                (s, e, user)
                for user in users
                for s, e in office_day(rng, weekday, user, quiet_weekend=True)
            ]
        else:
            # 5,000 sessions a day, every day: users drawn until there are as many.
            todays = []
            order = list(range(6000))
            rng.shuffle(order)
            for u in order:
                user = f"user{u:04d}@corp.example"
                todays += [
                    (s, e, user)
                    for s, e in office_day(rng, min(weekday, 4), user, quiet_weekend=False)
                ]
                if len(todays) >= 5000:
                    break
            todays = todays[:5000]
        for start, end, user in todays:
            begin = (day + timedelta(minutes=start)).replace(tzinfo=zone)
            finish = (day + timedelta(minutes=end)).replace(tzinfo=zone)
            out.append((begin, finish, user))
    out.sort()
    return out


def pool_manifest(kind: str) -> dict[str, Any]:
    limit, hosts = (12, 300) if kind == "office" else (16, 400)
    return {
        "apiVersion": "hostpool.io/v1alpha1",
        "kind": "HostPool",
        "metadata": {"name": "office" if kind == "office" else "bench"},
        "spec": {
            "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": limit},
            "scaling": {
                "minHosts": 1,
                "maxHosts": hosts,
                "bufferSessions": 2 * limit,
                "scaleDownDelaySeconds": 900,
            },
        },
    }


def result_peak(past: Any) -> int:
    from hostpool_operator.recommend.demand_curve import peak_concurrency

    return int(peak_concurrency(past))


def _row(name: str, evaluation: Any) -> dict[str, Any]:
    return {
        "plan": name,
        "hostHours": evaluation.host_hours,
        "worstWaitMinutes": evaluation.waits["max"],
        "p99WaitMinutes": evaluation.waits["p99"],
        "waitedOverMaxPercent": evaluation.waited_over_percent,
    }


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", choices=("bench", "office"), default="bench")
    parser.add_argument("--weeks", type=int, default=4)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--host-start-minutes", type=float, default=10)
    parser.add_argument("--max-wait-minutes", type=float, default=5)
    parser.add_argument("--out", type=Path, help="directory for the files (default: a temp one)")
    parser.add_argument("--plot", type=Path, help="the plot (default: OUT/plan.png)")
    return parser.parse_args()


def write_history(path: Path, sessions: list[tuple[datetime, datetime, str]]) -> None:
    """The history as ``recommend-plan --history`` reads it: one JSON object a line."""
    with path.open("w") as f:
        for start, end, user in sessions:
            f.write(
                json.dumps(
                    {
                        "user": user,
                        "start": start.isoformat(timespec="seconds"),
                        "end": end.isoformat(timespec="seconds"),
                    }
                )
                + "\n"
            )


def run_command(
    args: argparse.Namespace, pool_path: Path, history_path: Path, plot: Path
) -> tuple[dict[str, Any], float] | None:
    """``recommend-plan`` on the files, as a user would run it: its JSON and wall time;
    None (its stderr printed) when it fails."""
    command = [
        sys.executable, "-m", "hostpool_operator", "recommend-plan",
        "--pool", str(pool_path), "--history", str(history_path),
        "--max-wait-minutes", f"{args.max_wait_minutes:g}",
        "--host-start-minutes", f"{args.host_start_minutes:g}",
        "--time-zone", ZONE, "--output", "json", "--plot", str(plot),
    ]  # fmt: skip
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return None
    print(done.stderr.strip(), file=sys.stderr)
    return json.loads(done.stdout), seconds


def replayed_rows(
    args: argparse.Namespace,
    manifest: dict[str, Any],
    history_path: Path,
    result: dict[str, Any],
) -> list[dict[str, Any]]:
    """The figures the JSON does not carry (worst wait), from the same replays in-process:
    the recommended plan, the example plan (office), no plan and always on."""
    from hostpool_operator.api import HostPoolSpec
    from hostpool_operator.api.plan import PlanRules
    from hostpool_operator.recommend.history import parse_history
    from hostpool_operator.recommend.recommender import Options, evaluate_plan

    spec = HostPoolSpec.model_validate(manifest["spec"])
    past = parse_history(history_path.read_text().splitlines(), ZoneInfo(ZONE))
    options = Options(args.max_wait_minutes, args.host_start_minutes, ZONE)
    plans: list[tuple[str, PlanRules | None]] = [
        (
            "recommended",
            PlanRules.model_validate({k: result["plan"][k] for k in ("timeZone", "schedules")}),
        ),
    ]
    if args.history == "office":
        example = yaml.safe_load((ROOT / "crds/examples/scaling-plan.yaml").read_text())["spec"]
        written = PlanRules.model_validate({k: example[k] for k in ("timeZone", "schedules")})
        plans.append(("example plan, as written", written))
        gentle = json.loads(json.dumps(written.to_api()))
        for schedule in gentle["schedules"]:
            schedule["rampDown"]["forceLogoffUsers"] = False
        plans.append(("example plan, no forced logoff", PlanRules.model_validate(gentle)))
    rows = [_row(name, evaluate_plan(plan, spec, past, options)) for name, plan in plans if plan]
    rows.append(_row("no plan (the pool's own scaling)", evaluate_plan(None, spec, past, options)))
    peak_hosts = -(-result_peak(past) // spec.load_balancer.session_limit)
    fixed = spec.model_copy(update={"scaling": None})
    always = evaluate_plan(None, fixed, past, options, hosts=peak_hosts)
    rows.append(_row(f"always on ({peak_hosts} hosts)", always))
    return rows


def main() -> int:
    args = _arguments()
    out = args.out or Path(tempfile.mkdtemp(prefix="recommend-"))
    out.mkdir(parents=True, exist_ok=True)
    sessions = history(args.history, args.weeks, args.seed)
    history_path = out / "history.jsonl"
    write_history(history_path, sessions)
    manifest = pool_manifest(args.history)
    pool_path = out / "pool.yaml"
    pool_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    days = len({s.date() for s, _, _ in sessions})
    print(
        f"{len(sessions)} sessions over {days} days with sessions, "
        f"{len(sessions) / (7 * args.weeks):.0f} a day; files in {out}; cpus {os.cpu_count()}",
        file=sys.stderr,
    )
    ran = run_command(args, pool_path, history_path, args.plot or out / "plan.png")
    if ran is None:
        return 1
    result, seconds = ran
    (out / "recommendation.json").write_text(json.dumps(result, indent=2))
    rows = replayed_rows(args, manifest, history_path, result)
    print(f"{'PLAN':<32} {'HOST-HOURS':>10} {'WORST WAIT':>10} {'P99':>6} {'OVER %':>7}")
    for row in rows:
        print(
            f"{row['plan']:<32} {row['hostHours']:>10g} {row['worstWaitMinutes']:>10g} "
            f"{row['p99WaitMinutes']:>6g} {row['waitedOverMaxPercent']:>7g}"
        )
    print(f"recommend-plan took {seconds:.1f} s (wall, the whole command)")
    print(
        json.dumps(
            {
                "history": args.history,
                "sessions": len(sessions),
                "weeks": args.weeks,
                "seconds": round(seconds, 1),
                "cpus": os.cpu_count(),
                "rows": rows,
                "out": str(out),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
