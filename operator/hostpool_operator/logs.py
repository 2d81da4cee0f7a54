"""Logging set-up: readable text by default, one JSON object per line on request."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class RetriedRequestsAreWarnings(logging.Filter):
    """kopf logs each failed try of a request it will send again at ERROR, so a short API
    server outage fills an ERROR-based alert with requests that then succeeded. Those
    become WARNING; the try kopf gives up on ("escalating") stays an ERROR."""

    RETRIED = ("failed; will retry", "failed; TCP closed;", "failed; SSL closed;")

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.levelno == logging.ERROR
            and record.name.startswith("kopf")
            and isinstance(record.msg, str)
            and record.msg.startswith("Request attempt")
            and any(marker in record.msg for marker in self.RETRIED)
        ):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def setup_logging(*, json_logs: bool = False, verbose: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RetriedRequestsAreWarnings())
    if json_logs:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # kopf is chatty at INFO about every handler it runs; keep its warnings and errors.
    logging.getLogger("kopf").setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("aiohttp").setLevel(logging.WARNING)
