"""Log set-up: kopf's retried requests are warnings, its give-ups stay errors."""

from __future__ import annotations

import inspect
import io
import json
import logging
from collections.abc import Iterator

import kopf._cogs.clients.api as kopf_api
import pytest

from hostpool_operator import logs


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    logs.setup_logging(json_logs=True)
    stream = io.StringIO()
    root.handlers[0].setStream(stream)  # type: ignore[attr-defined]
    try:
        yield stream
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])


def levels(stream: io.StringIO) -> list[tuple[str, str]]:
    return [
        (entry["level"], entry["message"])
        for entry in map(json.loads, stream.getvalue().splitlines())
    ]


def test_a_request_kopf_sends_again_is_logged_as_a_warning(captured: io.StringIO) -> None:
    logger = logging.getLogger(kopf_api.__name__)
    logger.error("Request attempt #1/9 failed; will retry: GET /apis -> ConnectionRefused")
    logger.error("Request attempt #2/9 failed; TCP closed; will re-authenticate: GET /apis")
    logger.error("Request attempt #3/9 failed; SSL closed; will re-authenticate: GET /apis")
    assert [level for level, _ in levels(captured)] == ["warning"] * 3


def test_the_try_kopf_gives_up_on_stays_an_error(captured: io.StringIO) -> None:
    logger = logging.getLogger(kopf_api.__name__)
    logger.error("Request attempt #9/9 failed; escalating: GET /apis -> ConnectionRefused")
    logging.getLogger("hostpool_operator.controller").error("will retry this, say")
    assert [level for level, _ in levels(captured)] == ["error", "error"]


def test_kopf_still_words_its_retries_as_the_filter_expects() -> None:
    # If kopf rewords these messages the filter silently stops working; this says so.
    source = inspect.getsource(kopf_api)
    assert 'f"Request attempt {idx} failed; will retry' in source
    assert 'f"Request attempt {idx} failed; escalating' in source
