"""The command line's parser: one sub-parser per command, whose function (``func``) is in
the command's module. The defaults that a settings object already holds are taken from it."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from ..controller.settings import LEASE_DURATION, ControllerSettings
from ..kube.program import add_logging_flags
from ..recommend.recommender import Options
from ..recommend.sources import prometheus
from . import assignment, crds, recommend, run, sessions, simulate
from . import diagnose as diagnose_cli
from . import rollout as rollout_cli
from .errors import UsageError

PROG = "hostpool-operator"
#: The kubectl plugin's name as kubectl runs it (the console script ``kubectl-hostpool``).
PLUGIN_PROG = "kubectl hostpool"


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
    admin = sub.add_parser(
        "sessions",
        help="administer users' sessions: list, log off, disconnect, message, drain, top, assign "
        "(also the kubectl plugin `kubectl hostpool`)",
    )
    commands = admin.add_subparsers(dest="action", required=True, metavar="COMMAND")
    add_session_commands(commands)
    add_assignment_commands(commands)
    add_rollout_commands(commands)
    return parser


def add_rollout_commands(sub: argparse._SubParsersAction[Any]) -> None:
    """``rollout status|history|pause|resume|undo POOL``: a pool's image update."""
    rollout = sub.add_parser(
        "rollout", help="a pool's image update: follow it, list its templates, pause, undo"
    )
    actions = rollout.add_subparsers(dest="rollout_action", required=True, metavar="ACTION")
    status = actions.add_parser(
        "status", help="follow the update until Complete (exit 0) or Failed (exit 1)"
    )
    status.add_argument(
        "-w",
        "--watch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait for the update to end (--no-watch: say where it stands and exit)",
    )
    status.add_argument(
        "--timeout", metavar="DURATION", help="give up after this long (exit 1; e.g. 30m)"
    )
    status.set_defaults(func=rollout_cli.status_command)
    history = actions.add_parser("history", help="the host templates kept (the last 10)")
    history.set_defaults(func=rollout_cli.history_command)
    pause = actions.add_parser("pause", help="hold the update where it is")
    pause.set_defaults(func=rollout_cli.pause_command)
    resume = actions.add_parser("resume", help="let a paused update go on")
    resume.set_defaults(func=rollout_cli.resume_command)
    undo = actions.add_parser("undo", help="put an earlier host template back")
    undo.add_argument(
        "--to-revision", type=int, metavar="N", help="this revision (default: the previous one)"
    )
    undo.set_defaults(func=rollout_cli.undo_command)
    for action in (status, history, pause, resume, undo):
        action.add_argument("pool", metavar="POOL")
        _add_login(action)


def build_plugin_parser() -> argparse.ArgumentParser:
    """``kubectl hostpool``: the session commands at the top."""
    parser = _Parser(
        prog=PLUGIN_PROG,
        description="Administer the sessions of hostpool.io pools: who is on which host, "
        "log users off, disconnect them, send them a message, drain a host, give a personal "
        "pool's host to its user.",
    )
    commands = parser.add_subparsers(dest="action", required=True, metavar="COMMAND")
    add_session_commands(commands)
    add_assignment_commands(commands)
    add_rollout_commands(commands)
    return parser


def _add_login(parser: argparse.ArgumentParser, *, all_namespaces: bool = False) -> None:
    """kubectl's flags for where to work: the kubeconfig, the context, the namespace."""
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="the kubeconfig (default: $KUBECONFIG, else ~/.kube/config)",
    )
    parser.add_argument(
        "--context", metavar="NAME", help="the kubeconfig context (default: its current one)"
    )
    if not all_namespaces:
        parser.add_argument(
            "-n", "--namespace", metavar="NS", help="the namespace (default: the context's)"
        )
        return
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "-n", "--namespace", metavar="NS", help="the namespace (default: the context's)"
    )
    where.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")


def add_assignment_commands(sub: argparse._SubParsersAction[Any]) -> None:
    """``assign`` and ``unassign``: a personal pool's hosts and their users."""
    assign = sub.add_parser(
        "assign", help="give a personal pool's host to its one user (spec.assignedUser)"
    )
    assign.add_argument("host", metavar="HOST")
    assign.add_argument("user", metavar="USER", help="the user, as their requests name them")
    _add_login(assign)
    assign.set_defaults(func=assignment.assign_command)

    unassign = sub.add_parser(
        "unassign", help="take a personal pool's host back from its user (no session on it)"
    )
    unassign.add_argument("host", metavar="HOST")
    unassign.add_argument(
        "--keep-data",
        action="store_true",
        help="keep the host's workload and volume claims (its user's files) for that user: "
        "only they may be assigned it again. Without it, the operator deletes them before "
        "anyone else is given the host",
    )
    _add_login(unassign)
    unassign.set_defaults(func=assignment.unassign_command)


def add_session_commands(sub: argparse._SubParsersAction[Any]) -> None:
    """The session commands (``kubectl hostpool COMMAND``, ``hostpool-operator sessions
    COMMAND``)."""
    listing = sub.add_parser(
        "sessions",
        aliases=["list"],
        help="list sessions: who is on which host, in which state since when",
    )
    listing.add_argument("pool", nargs="?", metavar="POOL", help="only this pool's")
    listing.add_argument("--host", metavar="HOST", help="only the sessions on this host")
    listing.add_argument("--user", metavar="USER", help="only this user's sessions")
    listing.add_argument(
        "-o",
        "--output",
        choices=("wide", "json"),
        help="wide: also idle time, notice, logoff, disconnect, request; json: for scripts",
    )
    _add_login(listing, all_namespaces=True)
    listing.set_defaults(func=sessions.list_command)

    diagnose = sub.add_parser(
        "diagnose",
        help="why a user's logon was slow or failed: each recent connect, phase by phase",
    )
    diagnose.add_argument("user", metavar="USER")
    diagnose.add_argument("--pool", metavar="POOL", help="only this pool's connects")
    diagnose.add_argument(
        "--id", metavar="REF", help="the connect of this reference (as the person was shown)"
    )
    diagnose.add_argument("-o", "--output", choices=("json",), help="json: for scripts")
    _add_login(diagnose)
    diagnose.set_defaults(func=diagnose_cli.diagnose_command)

    logoff = sub.add_parser(
        "logoff", help="log a user off (the host's agent tells them, then logs them off)"
    )
    logoff.add_argument("user", metavar="USER")
    logoff.add_argument("--pool", required=True, metavar="POOL")
    logoff.add_argument(
        "--in",
        dest="in_",
        default="0s",
        metavar="DURATION",
        help="when, from now (e.g. 10m; default now)",
    )
    logoff.add_argument("--message", metavar="TEXT", help="what the user is told before")
    _add_login(logoff)
    logoff.set_defaults(func=sessions.logoff_command)

    disconnect = sub.add_parser(
        "disconnect", help="disconnect a user's session now and keep it (a reconnect returns to it)"
    )
    disconnect.add_argument("user", metavar="USER")
    disconnect.add_argument("--pool", required=True, metavar="POOL")
    _add_login(disconnect)
    disconnect.set_defaults(func=sessions.disconnect_command)

    message = sub.add_parser(
        "message", help="show a message once in sessions: a pool's, a host's, or one user's"
    )
    message.add_argument("text", metavar="TEXT")
    message.add_argument(
        "--pool", metavar="POOL", help="every session in this pool (with --user: that user's)"
    )
    message.add_argument("--host", metavar="HOST", help="every session on this host")
    message.add_argument("--user", metavar="USER", help="this user's session (needs --pool)")
    _add_login(message)
    message.set_defaults(func=sessions.message_command)

    drain = sub.add_parser(
        "drain",
        help="give a host no new sessions; optionally log its users off and wait until it is empty",
    )
    drain.add_argument("host", metavar="HOST")
    drain.add_argument(
        "--wait",
        action="store_true",
        help="wait until the host has no sessions, printing who leaves",
    )
    drain.add_argument(
        "--timeout",
        metavar="DURATION",
        help="with --wait: give up after this long (exit 1; default: no limit)",
    )
    drain.add_argument(
        "--logoff-after",
        metavar="DURATION",
        help="log the host's users off this long from now (e.g. 30m)",
    )
    drain.add_argument(
        "--message", metavar="TEXT", help="with --logoff-after: what the users are told"
    )
    _add_login(drain)
    drain.set_defaults(func=sessions.drain_command)

    undrain = sub.add_parser("undrain", help="let a drained host take new sessions again")
    undrain.add_argument("host", metavar="HOST")
    _add_login(undrain)
    undrain.set_defaults(func=sessions.undrain_command)

    top = sub.add_parser(
        "top",
        help="pools (hosts, sessions by state, free slots, pending) and hosts (state, "
        "sessions, load)",
    )
    _add_login(top, all_namespaces=True)
    top.set_defaults(func=sessions.top_command)


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
        "--update-placement",
        choices=("prefer-updated", "ignore-revisions"),
        default="prefer-updated",
        help="during an image update, new sessions go to updated hosts first (default); "
        "ignore-revisions places as if no update ran, only to measure the difference",
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
        default=LEASE_DURATION,
        help="seconds a Lease not renewed stays another instance's: a standby takes over this "
        "long after the leader was killed (default %(default)g)",
    )
    parser.add_argument(
        "--lease-renew-deadline",
        type=float,
        default=None,
        help="seconds after its last renewal was sent at which the leader stops writing and "
        "exits (default: the Lease duration less a quarter of it, at least 1 s less)",
    )
    parser.add_argument(
        "--lease-retry-period",
        type=float,
        default=None,
        help="seconds between renewals, and between a standby's looks at the Lease "
        "(default: 0.5, or an eighth of a shorter Lease)",
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
