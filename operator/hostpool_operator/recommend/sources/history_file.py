"""``recommend-plan --history FILE``: a pool's session history from a JSON-lines file,
parsed by the pure :func:`~..history.parse_history`."""

from __future__ import annotations

import os
from datetime import tzinfo

from ..history import HistoryError, PastSession, parse_history
from . import SourceError


def read_history_file(path: str | os.PathLike[str], zone: tzinfo) -> list[PastSession]:
    """The sessions in ``path`` (UTF-8, one JSON object a line in any order, at least
    seven local days in ``zone``), in start order; a ``SourceError`` naming the file (and
    the line) else."""
    try:
        with open(path, encoding="utf-8") as lines:
            return parse_history(lines, zone)
    except OSError as error:
        raise SourceError(f"{os.fspath(path)}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise SourceError(f"{os.fspath(path)}: not UTF-8 text") from None
    except HistoryError as error:
        raise SourceError(f"{os.fspath(path)}: {error}") from None
