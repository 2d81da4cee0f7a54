"""The ``hostpool-operator`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING

from ..controller.settings import ControllerSettings

if TYPE_CHECKING:
    from ..recommend.history import PastSession


def _cmd_crds(args: argparse.Namespace) -> int:
    from ..api import crdgen

    for path in crdgen.write_all(Path(args.output_dir)):
        print(path)
    return 0


def _read_document(path: str) -> tuple[object, str | None]:
    """The YAML/JSON document in ``path``, or why it cannot be read."""
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as error:
        return None, f"{path}: cannot read: {error.strerror or error}"
    try:
        return yaml.safe_load(text), None
    except yaml.YAMLError as error:
        return None, f"{path}: not valid YAML/JSON: {error}"


def _cmd_simulate(args: argparse.Namespace) -> int:
    import json

    from ..simulate import scenario as simulate

    if args.timeline is not None:
        if args.file is not None:
            return _fail("simulate: give a scenario FILE or --timeline FILE, not both")
        return _simulate_timeline(args)
    if args.file is None:
        return _fail("simulate: give a scenario FILE or --timeline FILE")
    document, problem = _read_document(args.file)
    if problem is not None:
        return _fail(problem)
    try:
        result = simulate.run_scenario(document)  # type: ignore[arg-type]
    except simulate.ScenarioError as error:
        return _fail(f"{args.file}: {error}")
    if args.output == "json":
        print(json.dumps(result))
    else:
        print(simulate.format_table(result))
    if args.plot:
        spec = simulate.parse_scenario(document).pool
        simulate.plot(
            result,
            Path(args.plot),
            title=f"{Path(args.file).name}: {spec.load_balancer.type.value}",
            limit=spec.load_balancer.max_session_limit,
        )
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _simulate_timeline(args: argparse.Namespace) -> int:
    import json

    from ..simulate import report as timeline_report
    from ..simulate import timeline

    document, problem = _read_document(args.timeline)
    if problem is not None:
        return _fail(problem)
    try:
        result = timeline.run_timeline(document)  # type: ignore[arg-type]
    except timeline.TimelineError as error:
        return _fail(f"{args.timeline}: {error}")
    if args.output == "json":
        print(json.dumps(result))
    else:
        print(timeline_report.format_timeline_table(result))
    if args.plot:
        timeline_report.plot_timeline(result, Path(args.plot), title=Path(args.timeline).name)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _read_pool(path: str) -> tuple[str, str | None, object]:
    """(name, namespace, spec) of the HostPool manifest in ``path``; ValueError naming the
    problem."""
    from pydantic import ValidationError

    from ..api import HostPoolSpec, describe_validation_error

    document, problem = _read_document(path)
    if problem is not None:
        raise ValueError(" ".join(problem.split()))  # one line: YAML's errors have several
    if not isinstance(document, dict) or document.get("kind") != "HostPool":
        raise ValueError(f"{path}: not a HostPool manifest (kind: HostPool)")
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError(f"{path}: metadata.name: the pool needs a name (the plan names it)")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    try:
        spec = HostPoolSpec.model_validate(document.get("spec"))
    except ValidationError as error:
        raise ValueError(f"{path}: {describe_validation_error(error, under='spec')}") from None
    return name, namespace if isinstance(namespace, str) else None, spec


def _cmd_recommend_plan(args: argparse.Namespace) -> int:
    import json
    import time
    from concurrent.futures import ProcessPoolExecutor

    from ..api import HostPoolSpec
    from ..api.plan import zone_of
    from ..recommend import recommender
    from ..recommend.history import HistoryError, parse_history
    from ..simulate.replay import ReplayInput, ReplayResult, replay

    began = time.perf_counter()
    try:
        name, namespace, spec = _read_pool(args.pool)
    except ValueError as error:
        return _fail(str(error))
    assert isinstance(spec, HostPoolSpec)
    try:
        zone = zone_of(args.time_zone)
    except ValueError as error:
        return _fail(f"--time-zone: {error}")
    if args.max_wait_minutes < 0 or args.host_start_minutes < 0:
        return _fail("--max-wait-minutes and --host-start-minutes must not be negative")
    if args.prometheus is not None:
        if not args.namespace:
            return _fail("--prometheus needs --namespace NS (the pool's namespace)")
        namespace = args.namespace  # the plan goes where the pool is
        read = _history_from_prometheus(args, name, zone)
        if isinstance(read, str):
            return _fail(read)
        sessions = read
    else:
        if args.since is not None or args.until is not None or args.days is not None:
            return _fail("--since, --until and --days go with --prometheus")
        try:
            with open(args.history, encoding="utf-8") as history:
                sessions = parse_history(history, zone)
        except OSError as error:
            return _fail(f"{args.history}: cannot read: {error.strerror or error}")
        except UnicodeDecodeError:
            return _fail(f"{args.history}: not UTF-8 text")
        except HistoryError as error:
            return _fail(f"{args.history}: {error}")
    options = recommender.Options(
        max_wait_minutes=args.max_wait_minutes,
        host_start_minutes=args.host_start_minutes,
        time_zone=args.time_zone,
    )
    # Replays are independent and each takes seconds: two processes run them.
    with ProcessPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as workers:

        def run(jobs: Sequence[ReplayInput]) -> Callable[[], list[ReplayResult]]:
            futures = [workers.submit(replay, job) for job in jobs]
            return lambda: [future.result() for future in futures]

        try:
            found = recommender.recommend(name, spec, sessions, options, run=run)
        except recommender.RecommendError as error:
            return _fail(f"{args.pool}: {error}")
    if args.output == "json":
        print(json.dumps(found.to_json()))
    else:
        comments = "".join(f"# {reason}\n" for reason in found.reasons)
        print(comments + _dump_manifest(found.manifest(namespace)), end="")
    if args.plot:
        _plot_recommendation(found, Path(args.plot), name)
        print(f"plot written to {args.plot}", file=sys.stderr)
    print(
        f"recommended {found.evaluation.host_hours:g} host-hours (no plan "
        f"{found.no_plan.host_hours:g}, always on {found.always_on.host_hours:g}); "
        f"worst wait {found.evaluation.waits['max']:g} min; took "
        f"{time.perf_counter() - began:.1f} s",
        file=sys.stderr,
    )
    return 0


def _history_from_prometheus(
    args: argparse.Namespace, pool: str, zone: tzinfo
) -> list[PastSession] | str:
    """The pool's history read from Prometheus (``--prometheus``), or why it cannot be."""
    from datetime import UTC, datetime

    from ..recommend.history import HistoryError
    from ..recommend.sources import prometheus as source

    try:
        since, until = source.history_range(args.since, args.until, args.days, datetime.now(UTC))
    except ValueError as error:
        return str(error)
    if not args.prometheus_timeout > 0:
        return "--prometheus-timeout must be positive"
    client = source.Client(args.prometheus, timeout=args.prometheus_timeout)
    where = f"Prometheus at {args.prometheus}, pool {args.namespace}/{pool}"
    try:
        sessions = source.read_history(client, args.namespace, pool, since, until, zone)
    except source.PrometheusError as error:
        return str(error)
    except HistoryError as error:
        return f"{where}: {error}"
    finally:
        for warning in client.warnings:
            print(f"Prometheus warned: {warning}", file=sys.stderr)
    print(
        f"{where}: {len(sessions)} sessions from {since:%Y-%m-%dT%H:%MZ} to "
        f"{until:%Y-%m-%dT%H:%MZ} (user names are not in the metrics: each session has a "
        "name of its own)",
        file=sys.stderr,
    )
    return sessions


def _dump_manifest(manifest: dict[str, object]) -> str:
    """YAML with the phases' "HH:MM" start times quoted, as the docs ask (a YAML 1.1
    reader takes some unquoted ones for numbers)."""
    import re

    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = '"' if re.fullmatch(r"[0-9]{2}:[0-9]{2}", value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    dumped: str = yaml.dump(manifest, Dumper=Dumper, sort_keys=False)
    return dumped


def _plot_recommendation(found: object, out: Path, pool: str) -> None:
    from ..recommend.recommender import Recommendation
    from ..recommend.report import plot_recommendation

    assert isinstance(found, Recommendation)
    limit = found.limit
    plot_recommendation(
        out,
        title=(
            f"{pool}: recommended {found.evaluation.host_hours:g} host-hours, no plan "
            f"{found.no_plan.host_hours:g}, always on {found.always_on.host_hours:g}"
        ),
        demand=[[v / limit for v in day] for day in found.demand],
        series=[
            ("recommended plan", found.evaluation.weekly_hosts),
            ("no plan (the pool's own scaling)", found.no_plan.weekly_hosts),
            (f"always on ({found.always_on_hosts} hosts)", found.always_on.weekly_hosts),
        ],
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from ..controller import handlers
    from ..logs import setup_logging

    setup_logging(json_logs=args.log_format == "json", verbose=args.verbose)
    settings = ControllerSettings(
        status_interval=args.status_interval,
        metrics_stale_after=args.metrics_stale_after,
        write_concurrency=args.write_concurrency,
        status_concurrency=args.status_concurrency,
    )
    metrics = None
    if args.metrics_address:
        from ..controller.metrics import PrometheusMetrics

        metrics = PrometheusMetrics()
        metrics.serve(args.metrics_address)
    return handlers.run(
        args.namespace or [],
        settings,
        liveness_endpoint=args.liveness,
        metrics=metrics,
        leader_election=not args.no_leader_election,
        lease_namespace=args.lease_namespace,
        lease_duration=args.lease_duration,
    )


def _fail(message: str) -> int:
    print(f"hostpool-operator: error: {message}", file=sys.stderr)
    return 2


def build_parser() -> argparse.ArgumentParser:
    defaults = ControllerSettings()

    parser = argparse.ArgumentParser(
        prog="hostpool-operator",
        description="Load-balanced remote-desktop session hosts on Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    crds = sub.add_parser("crds", help="write the CustomResourceDefinitions generated from the API")
    crds.add_argument("--output-dir", default="crds", help="directory to write (default: crds)")
    crds.set_defaults(func=_cmd_crds)

    run = sub.add_parser("run", help="run the operator (KUBECONFIG or in-cluster credentials)")
    run.add_argument(
        "--namespace",
        "-n",
        action="append",
        metavar="NS",
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    run.add_argument(
        "--liveness",
        metavar="URL",
        default=None,
        help="serve a liveness probe, e.g. http://0.0.0.0:8080/healthz",
    )
    run.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        default=None,
        help="serve Prometheus metrics on /metrics there, e.g. 0.0.0.0:9090",
    )
    run.add_argument(
        "--status-interval",
        type=float,
        default=1.0,
        help="seconds between pool/host status writes (debounce; default 1)",
    )
    run.add_argument(
        "--metrics-stale-after",
        type=float,
        default=120.0,
        help="host metrics sampled longer ago are ignored (default 120 s)",
    )
    run.add_argument(
        "--lease-namespace",
        metavar="NS",
        help="namespace of the leader-election Lease (default: the operator's own namespace "
        "in a cluster, else the first --namespace, else default)",
    )
    run.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        help="seconds a Lease not renewed stays another instance's (default 15; renewals "
        "every 2 s, give-up after 2/3 of this)",
    )
    run.add_argument(
        "--no-leader-election",
        action="store_true",
        help="place without holding the Lease (only when a single instance is guaranteed)",
    )
    run.add_argument(
        "--write-concurrency",
        type=int,
        default=defaults.write_concurrency,
        help="request status writes in flight at once, shared by all pools (default %(default)s)",
    )
    run.add_argument(
        "--status-concurrency",
        type=int,
        default=defaults.status_concurrency,
        help="pool and host status writes in flight at once, shared by all pools "
        "(default %(default)s)",
    )
    run.add_argument("--log-format", choices=("text", "json"), default="text")
    run.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    run.set_defaults(func=_cmd_run)

    sim = sub.add_parser(
        "simulate", help="place a scenario's requests, or run a timeline, with the engine"
    )
    sim.add_argument("file", nargs="?", help="scenario file (YAML or JSON)")
    sim.add_argument(
        "--timeline",
        metavar="FILE",
        help="run a timeline instead: a day or a week of logons, scaling and plans",
    )
    sim.add_argument("--output", choices=("table", "json"), default="table")
    sim.add_argument(
        "--plot",
        metavar="OUT.png",
        help="also draw sessions per host (a timeline: hosts, sessions, pending, capacity)",
    )
    sim.set_defaults(func=_cmd_simulate)

    rec = sub.add_parser(
        "recommend-plan",
        help="propose the ScalingPlan with the fewest host-hours that keeps every logon of a "
        "pool's history within a wait",
    )
    rec.add_argument("--pool", required=True, metavar="POOL.yaml", help="the HostPool manifest")
    source = rec.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--history",
        metavar="FILE",
        help='past sessions, one JSON object a line: {"user", "start", "end"} (RFC 3339), '
        "sorted by start, at least seven days",
    )
    source.add_argument(
        "--prometheus",
        metavar="URL",
        help="read the history from the operator's own metrics in the Prometheus server at "
        "URL (needs --namespace; docs/scaling-plans.md)",
    )
    rec.add_argument("--namespace", metavar="NS", help="with --prometheus: the pool's namespace")
    rec.add_argument(
        "--since",
        metavar="RFC3339",
        help="with --prometheus: the history's start (default: --days before --until)",
    )
    rec.add_argument(
        "--until", metavar="RFC3339", help="with --prometheus: the history's end (default: now)"
    )
    rec.add_argument(
        "--days",
        type=float,
        help="with --prometheus: the history's length in days (default 28)",
    )
    rec.add_argument(
        "--prometheus-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="with --prometheus: how long to wait for each answer (default %(default)g)",
    )
    rec.add_argument(
        "--max-wait-minutes",
        type=float,
        default=5.0,
        help="the longest a logon may wait for a host (default %(default)g)",
    )
    rec.add_argument(
        "--host-start-minutes",
        type=float,
        default=0.0,
        help="how long an added host takes to start taking sessions (default %(default)g)",
    )
    rec.add_argument(
        "--time-zone",
        default="UTC",
        help="the plan's time zone, in which the history's days are read (default UTC)",
    )
    rec.add_argument("--output", choices=("yaml", "json"), default="yaml")
    rec.add_argument(
        "--plot",
        metavar="OUT.png",
        help="also draw the demand and the hosts of the plan and both baselines over a week",
    )
    rec.set_defaults(func=_cmd_recommend_plan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
