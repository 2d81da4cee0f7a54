"""``hostpool-operator simulate``: place a scenario's requests (``FILE``), or run a timeline
(``--timeline FILE``), with the engine; a table or JSON on stdout, ``--plot`` a PNG."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .errors import UsageError
from .files import read_document, write_plot


def command(args: argparse.Namespace) -> int:
    if args.timeline is not None:
        if args.file is not None:
            raise UsageError("simulate: give a scenario FILE or --timeline FILE, not both")
        return _timeline(args)
    if args.file is None:
        raise UsageError("simulate: give a scenario FILE or --timeline FILE")
    return _scenario(args)


def _scenario(args: argparse.Namespace) -> int:
    from ..simulate import scenario as simulate

    document = read_document(args.file)
    try:
        result = simulate.run_scenario(document)  # type: ignore[arg-type]
    except simulate.ScenarioError as error:
        raise UsageError(f"{args.file}: {error}") from None
    if args.output == "json":
        print(json.dumps(result))
    else:
        print(simulate.format_table(result))
    if args.plot:
        spec = simulate.parse_scenario(document).pool
        write_plot(
            args.plot,
            lambda out: simulate.plot(
                result,
                out,
                title=f"{Path(args.file).name}: {spec.load_balancer.type.value}",
                limit=spec.load_balancer.max_session_limit,
            ),
        )
    return 0


def _timeline(args: argparse.Namespace) -> int:
    from ..simulate import report as timeline_report
    from ..simulate import timeline
    from ..simulate.timeline_document import TimelineError

    document = read_document(args.timeline)
    try:
        result = timeline.run_timeline(document)  # type: ignore[arg-type]
    except TimelineError as error:
        raise UsageError(f"{args.timeline}: {error}") from None
    if args.output == "json":
        print(json.dumps(result))
    else:
        print(timeline_report.format_timeline_table(result))
    if args.plot:
        title = Path(args.timeline).name
        write_plot(args.plot, lambda out: timeline_report.plot_timeline(result, out, title=title))
    return 0
