"""``hostpool-operator``: parse the command line, run the command, and report its error in
the one style (``errors``): one line on stderr, exit 2 for usage and 1 for a failure."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .errors import CliError
from .parser import build_parser, build_plugin_parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv)


def plugin_main(argv: Sequence[str] | None = None) -> int:
    """``kubectl-hostpool``, the kubectl plugin (``kubectl hostpool ...``)."""
    return run_command(build_plugin_parser(), argv)


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    try:
        args = parser.parse_args(argv)
        code: int = args.func(args)
    except CliError as error:
        # One line, even for YAML's and pydantic's messages of several.
        print(f"{parser.prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return error.exit_code
    return code


if __name__ == "__main__":
    sys.exit(main())
