"""The ``hostpool-operator`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _cmd_crds(args: argparse.Namespace) -> int:
    from . import crdgen

    for path in crdgen.write_all(Path(args.output_dir)):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hostpool-operator",
        description="Load-balanced remote-desktop session hosts on Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    crds = sub.add_parser("crds", help="write the CustomResourceDefinitions generated from the API")
    crds.add_argument("--output-dir", default="crds", help="directory to write (default: crds)")
    crds.set_defaults(func=_cmd_crds)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
