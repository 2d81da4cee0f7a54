"""The command line's parser: one sub-parser per command, whose function (``func``) is in
the command's module. The defaults that a settings object already holds are taken from it."""

from __future__ import annotations

import argparse
from typing import NoReturn

from ..controller.settings import ControllerSettings
from ..kube.program import add_logging_flags
from ..recommend.recommender import Options
from ..recommend.sources import prometheus
from . import crds, recommend, run, simulate
from .errors import UsageError

PROG = "hostpool-operator"


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors raised for ``main`` to print in the one style (sub-parsers
    are of the same class)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Load-balanced remote-desktop session hosts on Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    crds_parser = sub.add_parser(
        "crds", help="write the CustomResourceDefinitions generated from the API"
    )
    crds_parser.add_argument(
        "--output-dir", default="crds", help="directory to write (default: crds)"
    )
    crds_parser.set_defaults(func=crds.command)

    _add_run(sub.add_parser("run", help="run the operator (KUBECONFIG or in-cluster credentials)"))
    _add_simulate(
        sub.add_parser(
            "simulate", help="place a scenario's requests, or run a timeline, with the engine"
        )
    )
    _add_recommend(
        sub.add_parser(
            "recommend-plan",
            help="propose the ScalingPlan with the fewest host-hours that keeps every logon "
            "of a pool's history within a wait",
        )
    )
    return parser


def _add_run(parser: argparse.ArgumentParser) -> None:
    defaults = ControllerSettings()
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        metavar="NS",
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    parser.add_argument(
        "--liveness",
        metavar="URL",
        default=None,
        help="serve a liveness probe, e.g. http://0.0.0.0:8080/healthz",
    )
    parser.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        default=None,
        help="serve Prometheus metrics on /metrics there, e.g. 0.0.0.0:9090",
    )
    parser.add_argument(
        "--status-interval",
        type=float,
        default=defaults.status_interval,
        help="seconds between pool/host status writes (debounce; default %(default)g)",
    )
    parser.add_argument(
        "--metrics-stale-after",
        type=float,
        default=defaults.metrics_stale_after,
        help="host metrics sampled longer ago are ignored (default %(default)g s)",
    )
    parser.add_argument(
        "--logoff-grace",
        type=float,
        default=defaults.logoff_grace,
        help="seconds past a logoff's deadline after which the operator deletes a request "
        "no agent logged off (default %(default)g)",
    )
    parser.add_argument(
        "--lease-namespace",
        metavar="NS",
        help="namespace of the leader-election Lease (default: the operator's own namespace "
        "in a cluster, else the first --namespace, else default)",
    )
    parser.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        help="seconds a Lease not renewed stays another instance's (default %(default)g; "
        "renewals every 2 s, give-up after 2/3 of this)",
    )
    parser.add_argument(
        "--no-leader-election",
        action="store_true",
        help="place without holding the Lease (only when a single instance is guaranteed)",
    )
    parser.add_argument(
        "--write-concurrency",
        type=int,
        default=defaults.write_concurrency,
        help="request status writes in flight at once, shared by all pools (default %(default)s)",
    )
    parser.add_argument(
        "--status-concurrency",
        type=int,
        default=defaults.status_concurrency,
        help="pool and host status writes in flight at once, shared by all pools "
        "(default %(default)s)",
    )
    add_logging_flags(parser)
    parser.set_defaults(func=run.command)


def _add_simulate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="scenario file (YAML or JSON)")
    parser.add_argument(
        "--timeline",
        metavar="FILE",
        help="run a timeline instead: a day or a week of logons, scaling and plans",
    )
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.add_argument(
        "--plot",
        metavar="OUT.png",
        help="also draw sessions per host (a timeline: hosts, sessions, pending, capacity)",
    )
    parser.set_defaults(func=simulate.command)


def _add_recommend(parser: argparse.ArgumentParser) -> None:
    defaults = Options()
    parser.add_argument("--pool", required=True, metavar="POOL.yaml", help="the HostPool manifest")
    source = parser.add_mutually_exclusive_group(required=True)
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
    parser.add_argument("--namespace", metavar="NS", help="with --prometheus: the pool's namespace")
    parser.add_argument(
        "--since",
        metavar="RFC3339",
        help="with --prometheus: the history's start (default: --days before --until)",
    )
    parser.add_argument(
        "--until", metavar="RFC3339", help="with --prometheus: the history's end (default: now)"
    )
    parser.add_argument(
        "--days",
        type=float,
        help="with --prometheus: the history's length in days "
        f"(default {prometheus.DEFAULT_DAYS:g})",
    )
    parser.add_argument(
        "--prometheus-timeout",
        type=float,
        default=prometheus.DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="with --prometheus: how long to wait for each answer (default %(default)g)",
    )
    parser.add_argument(
        "--max-wait-minutes",
        type=float,
        default=defaults.max_wait_minutes,
        help="the longest a logon may wait for a host (default %(default)g)",
    )
    parser.add_argument(
        "--host-start-minutes",
        type=float,
        default=defaults.host_start_minutes,
        help="how long an added host takes to start taking sessions (default %(default)g)",
    )
    parser.add_argument(
        "--time-zone",
        default=defaults.time_zone,
        help="the plan's time zone, in which the history's days are read (default %(default)s)",
    )
    parser.add_argument("--output", choices=("yaml", "json"), default="yaml")
    parser.add_argument(
        "--plot",
        metavar="OUT.png",
        help="also draw the demand and the hosts of the plan and both baselines over a week",
    )
    parser.set_defaults(func=recommend.command)
