"""Looking for words in a program's log without tripping over its timestamps (a line
logged at 07:50:44,403 is no 403). Text lines (``2026-12-03 07:50:44,403 WARNING ...``) lose
their leading time; JSON lines (``--log-format json``) are searched without their ``time``."""

from __future__ import annotations

import json
import re

#: The time a text log line starts with: the project's format (2026-12-03 07:50:44,403) or
#: RFC 3339 (2026-12-03T07:50:44.403Z).
TIMESTAMP = re.compile(
    r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[,.]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s*"
)


def _without_time(line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return TIMESTAMP.sub("", line)
    if not isinstance(record, dict):
        return line
    return " ".join(str(v) for k, v in record.items() if k not in ("time", "ts", "timestamp"))


def lines_saying(text: str, *words: str) -> list[str]:
    """The log lines whose message (the line without its time) has any of ``words`` as a
    whole word."""
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\b")
    return [line for line in text.splitlines() if pattern.search(_without_time(line))]
