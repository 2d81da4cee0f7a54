"""The tests' log search (support/log_lines.py): a status code in a timestamp's
milliseconds is not found, one in the message is, in text and JSON lines alike."""

from __future__ import annotations

import json
import logging

import pytest

from hostpool_operator.logs import JsonFormatter
from support.log_lines import lines_saying

TEXT = (
    "2026-12-03 07:50:44,403 WARNING hostpool_operator.agent: the load script printed "
    "'nonsense', not an integer\n"
    "2026-12-03 07:50:45,419 INFO    hostpool_operator.agent: user ra1 logged off: deleting ra1"
)


def test_the_milliseconds_of_a_text_line_are_no_status() -> None:
    assert lines_saying(TEXT, "403", "401") == []


@pytest.mark.parametrize(
    "message",
    ["could not write status: 403 Forbidden", "the API server answered 401", "(403)"],
)
def test_a_status_in_the_message_is_found(message: str) -> None:
    line = f"2026-12-03 07:50:46,100 WARNING hostpool_operator.agent: {message}"
    assert lines_saying(f"{TEXT}\n{line}", "403", "401") == [line]


def test_json_lines_are_searched_without_their_time() -> None:
    formatter = JsonFormatter()
    quiet = logging.LogRecord("agent", logging.INFO, "", 0, "reported", None, None)
    quiet.created = 1_764_748_244.403  # .403 seconds
    loud = logging.LogRecord("agent", logging.WARNING, "", 0, "denied: %s", ("403",), None)
    lines = [formatter.format(quiet), formatter.format(loud)]
    assert "403" in json.loads(lines[0])["time"]
    assert lines_saying("\n".join(lines), "403") == [lines[1]]


def test_words_are_whole_words() -> None:
    line = "2026-12-03 07:50:46,100 INFO x: Forbiddenness 4030 x403"
    assert lines_saying(line, "403", "Forbidden") == []
