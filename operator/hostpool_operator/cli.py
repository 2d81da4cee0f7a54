"""The ``hostpool-operator`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .controller.settings import ControllerSettings


def _cmd_crds(args: argparse.Namespace) -> int:
    from .api import crdgen

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

    from .simulate import scenario as simulate

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

    from .simulate import report as timeline_report
    from .simulate import timeline

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


def _cmd_run(args: argparse.Namespace) -> int:
    from .controller import handlers
    from .logs import setup_logging

    setup_logging(json_logs=args.log_format == "json", verbose=args.verbose)
    settings = ControllerSettings(
        status_interval=args.status_interval,
        metrics_stale_after=args.metrics_stale_after,
        write_concurrency=args.write_concurrency,
        status_concurrency=args.status_concurrency,
    )
    metrics = None
    if args.metrics_address:
        from .controller.metrics import PrometheusMetrics

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
