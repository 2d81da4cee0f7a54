"""``hostpool-operator recommend-plan``: the pool's manifest and its history (a source: the
``--history`` file or ``--prometheus``) in, ``recommend()``, the ScalingPlan out (YAML with
the reasons as comments, or JSON), ``--plot`` a PNG; a summary on stderr."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .files import read_document, write_plot

if TYPE_CHECKING:
    from ..api import HostPoolSpec
    from ..recommend.history import PastSession
    from ..recommend.recommender import Recommendation


def command(args: argparse.Namespace) -> int:
    from ..api.plan import zone_of

    began = time.perf_counter()
    name, namespace, spec = read_pool(args.pool)
    try:
        zone = zone_of(args.time_zone)
    except ValueError as error:
        raise UsageError(f"--time-zone: {error}") from None
    if args.max_wait_minutes < 0 or args.host_start_minutes < 0:
        raise UsageError("--max-wait-minutes and --host-start-minutes must not be negative")
    if args.prometheus is not None:
        if not args.namespace:
            raise UsageError("--prometheus needs --namespace NS (the pool's namespace)")
        namespace = args.namespace  # the plan goes where the pool is
        sessions = _from_prometheus(args, name, zone)
    else:
        if args.since is not None or args.until is not None or args.days is not None:
            raise UsageError("--since, --until and --days go with --prometheus")
        sessions = _from_file(args.history, zone)
    found = _recommend(args, name, spec, sessions)
    if args.output == "json":
        print(json.dumps(found.to_json()))
    else:
        comments = "".join(f"# {reason}\n" for reason in found.reasons)
        print(comments + dump_manifest(found.manifest(namespace)), end="")
    if args.plot:
        write_plot(args.plot, lambda out: _plot(found, out, name))
    print(
        f"recommended {found.evaluation.host_hours:g} host-hours (no plan "
        f"{found.no_plan.host_hours:g}, always on {found.always_on.host_hours:g}); "
        f"worst wait {found.evaluation.waits['max']:g} min; took "
        f"{time.perf_counter() - began:.1f} s",
        file=sys.stderr,
    )
    return 0


def read_pool(path: str) -> tuple[str, str | None, HostPoolSpec]:
    """(name, namespace, spec) of the HostPool manifest in ``path``; ``UsageError`` naming
    the problem."""
    from pydantic import ValidationError

    from ..api import HostPoolSpec, describe_validation_error

    document = read_document(path)
    if not isinstance(document, dict) or document.get("kind") != "HostPool":
        raise UsageError(f"{path}: not a HostPool manifest (kind: HostPool)")
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise UsageError(f"{path}: metadata.name: the pool needs a name (the plan names it)")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    try:
        spec = HostPoolSpec.model_validate(document.get("spec"))
    except ValidationError as error:
        raise UsageError(f"{path}: {describe_validation_error(error, under='spec')}") from None
    return name, namespace if isinstance(namespace, str) else None, spec


def _from_file(path: str, zone: tzinfo) -> list[PastSession]:
    from ..recommend.sources import SourceError
    from ..recommend.sources.history_file import read_history_file

    try:
        return read_history_file(path, zone)
    except SourceError as error:
        raise UsageError(str(error)) from None


def _from_prometheus(args: argparse.Namespace, pool: str, zone: tzinfo) -> list[PastSession]:
    from ..recommend.sources import SourceError
    from ..recommend.sources import prometheus as source

    try:
        since, until = source.history_range(args.since, args.until, args.days, datetime.now(UTC))
    except ValueError as error:
        raise UsageError(str(error)) from None
    if not args.prometheus_timeout > 0:
        raise UsageError("--prometheus-timeout must be positive")
    client = source.Client(args.prometheus, timeout=args.prometheus_timeout)
    try:
        sessions = source.read_history(client, args.namespace, pool, since, until, zone)
    except SourceError as error:
        # Exit 2, as documented: what to fix is the address, the namespace or the range.
        raise UsageError(str(error)) from None
    finally:
        for warning in client.warnings:
            print(f"Prometheus warned: {warning}", file=sys.stderr)
    print(
        f"{source.pool_at(client, args.namespace, pool)}: {len(sessions)} sessions from "
        f"{since:%Y-%m-%dT%H:%MZ} to {until:%Y-%m-%dT%H:%MZ} (user names are not in the "
        "metrics: each session has a name of its own)",
        file=sys.stderr,
    )
    return sessions


def _recommend(
    args: argparse.Namespace, name: str, spec: HostPoolSpec, sessions: Sequence[PastSession]
) -> Recommendation:
    from concurrent.futures import ProcessPoolExecutor

    from ..recommend import recommender
    from ..simulate.replay import replay
    from ..simulate.replay_state import ReplayInput, ReplayResult

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
            return recommender.recommend(name, spec, sessions, options, run=run)
        except recommender.RecommendError as error:
            raise UsageError(f"{args.pool}: {error}") from None


def dump_manifest(manifest: dict[str, Any]) -> str:
    """YAML with the phases' "HH:MM" start times quoted, as the docs ask (a YAML 1.1
    reader takes some unquoted ones for numbers)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = '"' if re.fullmatch(r"[0-9]{2}:[0-9]{2}", value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    dumped: str = yaml.dump(manifest, Dumper=Dumper, sort_keys=False)
    return dumped


def _plot(found: Recommendation, out: Path, pool: str) -> None:
    from ..recommend.report import plot_recommendation

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
