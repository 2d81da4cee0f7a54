"""The files the commands read (YAML/JSON documents: scenarios, timelines, manifests) and
the plots they write."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from .errors import CliError, UsageError


def read_document(path: str) -> object:
    """The YAML/JSON document in ``path``; ``UsageError`` saying why it cannot be read."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"{path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise UsageError(f"{path}: not valid YAML/JSON: {error}") from None


def write_plot(out: str, draw: Callable[[Path], None]) -> None:
    """``draw(Path(out))`` (``--plot``), and say so on stderr; ``CliError`` when it cannot."""
    try:
        draw(Path(out))
    except ModuleNotFoundError as error:
        if error.name is None or error.name.partition(".")[0] != "matplotlib":
            raise
        # matplotlib is an optional dependency (the "plot" extra).
        raise CliError("--plot needs matplotlib: pip install 'hostpool-operator[plot]'") from None
    except OSError as error:
        raise CliError(f"{out}: cannot write the plot: {error.strerror or error}") from None
    print(f"plot written to {out}", file=sys.stderr)
