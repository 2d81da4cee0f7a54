"""``recommend-plan --prometheus``: a pool's session history read from the operator's own
metrics in a Prometheus server, over its HTTP API (``/api/v1/query_range`` and
``/api/v1/query``, standard library only).

The queries (``queries``), for namespace ``NS`` and pool ``P``:

* ``hostpool_assignments_total{namespace="NS", pool="P", reason="NewSession"}``, the
  sessions that started, and ``hostpool_session_ends_total{namespace="NS", pool="P"}``, the
  sessions that ended: each a ``query_range`` over the range with a step of 60 s, the raw
  counters, whose growth per step (resets and new series included) the pure
  :mod:`..metric_history` turns into minutes and sessions;
* ``sum(hostpool_sessions{namespace="NS", pool="P"})`` at the range's start (an instant
  query): the sessions already open then, whose ends are not part of the history.

A query of the whole range would ask for more points per series than Prometheus answers
(11,000): the range goes in chunks of ``CHUNK_STEPS`` steps. Everything that goes wrong
(no answer, an HTTP error, Prometheus's own ``{"status": "error"}``, no series) is a
``PrometheusError`` (a ``SourceError``) whose message says what and where.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from ..history import HistoryError, PastSession, require_days
from ..metric_history import (
    STEP_SECONDS,
    Point,
    minute_counts,
    sessions_from_counts,
)
from . import SourceError

#: Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS = 11_000
#: Steps per range query: its points are one more (both ends are steps).
CHUNK_STEPS = 10_000
DEFAULT_TIMEOUT = 30.0
#: The history's length when only one end of its range is given, or neither.
DEFAULT_DAYS = 28.0
STARTS_METRIC = "hostpool_assignments_total"
ENDS_METRIC = "hostpool_session_ends_total"
OPEN_METRIC = "hostpool_sessions"


class PrometheusError(SourceError):
    """The history could not be read from Prometheus; the message says why."""


@dataclass(frozen=True, slots=True)
class Queries:
    starts: str
    ends: str
    open: str


def _label(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def queries(namespace: str, pool: str) -> Queries:
    """The PromQL that reads the pool's history back."""
    selector = f"namespace={_label(namespace)}, pool={_label(pool)}"
    return Queries(
        starts=f'{STARTS_METRIC}{{{selector}, reason="NewSession"}}',
        ends=f"{ENDS_METRIC}{{{selector}}}",
        open=f"sum({OPEN_METRIC}{{{selector}}})",
    )


def whole_minute(instant: datetime) -> datetime:
    """``instant`` (aware) down to its minute, in UTC."""
    return instant.astimezone(UTC).replace(second=0, microsecond=0)


def chunks(first: datetime, steps: int) -> list[tuple[datetime, datetime]]:
    """(start, end) of each range query covering the steps ``first`` .. ``first + steps``,
    both ends included, none of more than ``CHUNK_STEPS + 1`` points."""
    step = timedelta(seconds=STEP_SECONDS)
    out = []
    for begin in range(0, steps + 1, CHUNK_STEPS):
        end = min(steps, begin + CHUNK_STEPS)
        out.append((first + begin * step, first + end * step))
        if end == steps:
            break
    return out


def _rfc3339(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class Client:
    """Prometheus's query API at ``url`` (its base: ``http://host:9090``, or with the path
    prefix of its ``--web.route-prefix``)."""

    url: str
    timeout: float = DEFAULT_TIMEOUT
    warnings: list[str] = field(default_factory=list)

    def get(self, path: str, params: Mapping[str, str]) -> Any:
        """The ``data`` of a successful answer to ``GET path?params``."""
        address = self.url.rstrip("/") + path
        request = urllib.request.Request(
            address + "?" + urllib.parse.urlencode(params),
            headers={"Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                body = answer.read()
        except urllib.error.HTTPError as error:
            body = error.read()
            problem = _api_error(body)
            if problem is not None:
                raise PrometheusError(
                    f"Prometheus at {self.url} refused a query: {problem}"
                ) from None
            raise PrometheusError(
                f"HTTP {error.code} {error.reason} from {address} (is {self.url} a Prometheus "
                "server's address?)"
            ) from None
        except TimeoutError:
            raise PrometheusError(
                f"no answer from Prometheus at {self.url} within {self.timeout:g} s"
            ) from None
        except urllib.error.URLError as error:
            reason = error.reason
            if isinstance(reason, TimeoutError):
                raise PrometheusError(
                    f"no answer from Prometheus at {self.url} within {self.timeout:g} s"
                ) from None
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {reason}") from None
        except (OSError, ValueError) as error:
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {error}") from None
        try:
            document = json.loads(body)
        except ValueError:
            raise PrometheusError(
                f"{address} did not answer JSON (is {self.url} a Prometheus server's address?)"
            ) from None
        if not isinstance(document, dict) or document.get("status") != "success":
            problem = _api_error(body) or "an answer without status success"
            raise PrometheusError(f"Prometheus at {self.url} refused a query: {problem}")
        for warning in document.get("warnings") or ():
            if isinstance(warning, str) and warning not in self.warnings:
                self.warnings.append(warning)
        return document.get("data")

    def query_range(self, query: str, start: datetime, end: datetime) -> list[dict[str, Any]]:
        """The series of a range query, step ``STEP_SECONDS``."""
        data = self.get(
            "/api/v1/query_range",
            {
                "query": query,
                "start": _rfc3339(start),
                "end": _rfc3339(end),
                "step": f"{STEP_SECONDS}s",
            },
        )
        return _result(data, "matrix", self.url)

    def query(self, query: str, at: datetime) -> list[dict[str, Any]]:
        """The series of an instant query at ``at``."""
        return _result(
            self.get("/api/v1/query", {"query": query, "time": _rfc3339(at)}), "vector", self.url
        )


def _api_error(body: bytes) -> str | None:
    """Prometheus's ``errorType: error`` of an error answer, or None if it is not one."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("status") != "error":
        return None
    return f"{document.get('errorType', 'error')}: {document.get('error', '(no message)')}"


def _result(data: Any, kind: str, url: str) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or data.get("resultType") != kind:
        raise PrometheusError(f"Prometheus at {url} answered no {kind} (resultType)")
    result = data.get("result")
    if not isinstance(result, list):
        raise PrometheusError(f"Prometheus at {url} answered a {kind} without a result list")
    return [series for series in result if isinstance(series, dict)]


def _series_key(series: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    labels = series.get("metric")
    if not isinstance(labels, dict):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def read_series(client: Client, query: str, first: datetime, steps: int) -> list[list[Point]]:
    """Every series of ``query`` at the steps ``first`` .. ``first + steps`` (chunked),
    each its points in time order."""
    points: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
    for start, end in chunks(first, steps):
        for series in client.query_range(query, start, end):
            merged = points.setdefault(_series_key(series), {})
            for pair in series.get("values") or ():
                try:
                    at, value = float(pair[0]), float(pair[1])
                except (TypeError, ValueError, IndexError):
                    raise PrometheusError(
                        f"Prometheus at {client.url} answered a point that is not "
                        f"[time, value]: {pair!r}"
                    ) from None
                if math.isfinite(value):
                    merged[at] = value
    return [sorted(merged.items()) for merged in points.values()]


def open_sessions(client: Client, query: str, at: datetime) -> int:
    """The value of the instant query (sessions open at ``at``), 0 when it has none."""
    result = client.query(query, at)
    if not result:
        return 0
    value = result[0].get("value")
    try:
        number = float(value[1])  # type: ignore[index]
    except (TypeError, ValueError, IndexError):
        raise PrometheusError(
            f"Prometheus at {client.url} answered a sample without a value"
        ) from None
    return max(0, round(number)) if math.isfinite(number) else 0


def read_history(
    client: Client,
    namespace: str,
    pool: str,
    since: datetime,
    until: datetime,
    zone: tzinfo,
) -> list[PastSession]:
    """The pool's sessions that started between ``since`` and ``until`` (both to the minute,
    down), as recovered from its metrics; at least seven local days (otherwise the same
    message as for a history file, after the server and the pool)."""
    first = whole_minute(since)
    last = whole_minute(until)
    steps = int((last - first).total_seconds()) // STEP_SECONDS
    if steps < 1:
        raise PrometheusError(f"the range {_rfc3339(since)} to {_rfc3339(until)} is under a minute")
    q = queries(namespace, pool)
    starts = read_series(client, q.starts, first, steps)
    ends = read_series(client, q.ends, first, steps)
    between = f"between {_rfc3339(first)} and {_rfc3339(last)}"
    if not starts and not ends:
        raise PrometheusError(
            f"no series for pool {pool} in namespace {namespace} {between} in Prometheus at "
            f"{client.url} (queried {q.starts} and {q.ends}; is the operator scraped, with "
            "its namespace label kept, and is the range within the retention?)"
        )
    if not ends:
        raise PrometheusError(
            f"no {ENDS_METRIC} series for pool {pool} in namespace {namespace} {between} in "
            f"Prometheus at {client.url}, only {STARTS_METRIC}: an operator older than this "
            "metric ran then, and the sessions' ends cannot be told"
        )
    counts = minute_counts(starts, ends, first, steps)
    sessions = sessions_from_counts(counts, open_before=open_sessions(client, q.open, first))
    try:
        require_days(sessions, zone)
    except HistoryError as error:
        raise PrometheusError(f"{pool_at(client, namespace, pool)}: {error}") from None
    return sessions


def pool_at(client: Client, namespace: str, pool: str) -> str:
    """Where a pool's history is read from, as messages name it."""
    return f"Prometheus at {client.url}, pool {namespace}/{pool}"


def parse_instant(value: str, flag: str) -> datetime:
    """An RFC 3339 time with an offset (``--since``, ``--until``)."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{flag}: {value!r} is not an RFC 3339 time (e.g. 2026-11-02T00:00:00Z)"
        ) from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError(f"{flag}: {value!r} has no offset (give Z or +01:00)")
    return parsed.astimezone(UTC)


def history_range(
    since: str | None, until: str | None, days: float | None, now: datetime
) -> tuple[datetime, datetime]:
    """The range of ``--since``/``--until``/``--days`` (default: the ``DEFAULT_DAYS`` up to
    now)."""
    if since is not None and until is not None and days is not None:
        raise ValueError("--days: give two of --since, --until and --days, not all three")
    if days is not None and not (math.isfinite(days) and days > 0):
        raise ValueError("--days must be a positive number")
    length = timedelta(days=DEFAULT_DAYS if days is None else days)
    end = parse_instant(until, "--until") if until is not None else None
    start = parse_instant(since, "--since") if since is not None else None
    if start is None:
        end = end or now
        start = end - length
    elif end is None:
        end = start + length if days is not None else now
    if end <= start:
        raise ValueError(f"--until {_rfc3339(end)} is not after --since {_rfc3339(start)}")
    return start, end
