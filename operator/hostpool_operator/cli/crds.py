"""``hostpool-operator crds``: write the CustomResourceDefinitions generated from the API."""

from __future__ import annotations

import argparse
from pathlib import Path

from .errors import CliError


def command(args: argparse.Namespace) -> int:
    from ..api import crdgen

    try:
        written = crdgen.write_all(Path(args.output_dir))
    except OSError as error:
        where = error.filename or args.output_dir
        raise CliError(f"{where}: cannot write: {error.strerror or error}") from None
    for path in written:
        print(path)
    return 0
