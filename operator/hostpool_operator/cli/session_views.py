"""What ``kubectl hostpool`` prints, as functions of the objects read and ``now`` (no I/O,
no clock): sessions as rows, the rows as kubectl's tables (aligned columns, ages as
kubectl prints them) or as the stable JSON, ``top``'s pools and hosts, a drain's
progress, and the durations its flags take (``10m``, ``1h30m``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..api.timestamps import parse_time

Obj = Mapping[str, Any]
#: What a table shows for a value that is not there (kubectl's word).
NONE = "<none>"
#: kubectl's tab writer: each column at least this wide, and this many spaces between two.
MIN_WIDTH = 6
PADDING = 3


# --------------------------------------------------------------------------- durations


def human_duration(elapsed: timedelta) -> str:
    """An age as kubectl prints it (apimachinery's HumanDuration): ``45s``, ``5m30s``,
    ``42m``, ``2h3m``, ``20h``, ``3d4h``, ``30d``, ``2y10d``; two seconds in the future is
    still ``0s`` (clocks disagree a little), more is ``<invalid>``."""
    seconds = int(elapsed.total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        rest = days % 365
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{years}y"


def age(value: Any, now: datetime) -> str:
    """The age of an RFC 3339 timestamp at ``now``; ``<none>`` when absent or unreadable."""
    moment = parse_time(value)
    return NONE if moment is None else human_duration(now - moment)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> timedelta:
    """A duration as kubectl's flags take them: ``90s``, ``10m``, ``2h``, ``1h30m``.
    ValueError for anything else (a bare number has no unit: say which)."""
    value = text.strip()
    if not value or _DURATION.sub("", value):
        raise ValueError(f"{text!r} is not a duration: give e.g. 90s, 10m, 2h or 1h30m")
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(value))
    return timedelta(seconds=seconds)


# --------------------------------------------------------------------------- tables


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Rows under a header, aligned as kubectl aligns them: every column but the last
    padded to its widest cell plus three spaces (at least six wide); no trailing spaces."""
    lines = [list(header), *(list(row) for row in rows)]
    widths = [
        max(MIN_WIDTH, max(len(line[i]) for line in lines) + PADDING)
        for i in range(len(header) - 1)
    ]
    out = []
    for line in lines:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(line[:-1])]
        out.append(("".join(cells) + line[-1]).rstrip())
    return "\n".join(out)


# --------------------------------------------------------------------------- sessions


def _get(obj: Obj, *path: str) -> Any:
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def is_session(request: Obj) -> bool:
    """A request that holds a session: assigned to a host."""
    return _get(request, "status", "phase") == "Assigned" and bool(_get(request, "status", "host"))


@dataclass(frozen=True, slots=True)
class Session:
    """One assigned SessionRequest, as the plugin shows it."""

    user: str
    namespace: str
    pool: str
    host: str
    state: str
    state_changed_at: str | None
    logon_at: str | None
    request: str
    idle_since: str | None = None
    notice: Obj | None = None
    logoff: Obj | None = None
    disconnect: Obj | None = None

    def json(self) -> dict[str, Any]:
        """The stable JSON item (``sessions -o json``): the contract's keys, then the
        admin fields as they are on the request."""
        return {
            "user": self.user,
            "namespace": self.namespace,
            "pool": self.pool,
            "host": self.host,
            "state": self.state,
            "stateChangedAt": self.state_changed_at,
            "logonAt": self.logon_at,
            "request": self.request,
            "idleSince": self.idle_since,
            "notice": dict(self.notice) if self.notice else None,
            "logoff": dict(self.logoff) if self.logoff else None,
            "disconnect": dict(self.disconnect) if self.disconnect else None,
        }


def _mapping(value: Any) -> Obj | None:
    return value if isinstance(value, Mapping) and value else None


def session_of(request: Obj) -> Session:
    status: Obj = _get(request, "status") or {}
    return Session(
        user=str(_get(request, "spec", "user") or ""),
        namespace=str(_get(request, "metadata", "namespace") or ""),
        pool=str(_get(request, "spec", "poolRef", "name") or ""),
        host=str(status.get("host") or ""),
        state=str(status.get("sessionState") or "Connecting"),
        # Before agents wrote stateChangedAt, the assignment is the last change known.
        state_changed_at=status.get("stateChangedAt") or status.get("assignedAt"),
        logon_at=status.get("logonAt"),
        request=str(_get(request, "metadata", "name") or ""),
        idle_since=status.get("idleSince"),
        notice=_mapping(status.get("notice")),
        logoff=_mapping(status.get("logoff")),
        disconnect=_mapping(status.get("disconnect")),
    )


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """Which sessions a command is about; None matches any."""

    pool: str | None = None
    host: str | None = None
    user: str | None = None

    def matches(self, session: Session) -> bool:
        return (
            (self.pool is None or session.pool == self.pool)
            and (self.host is None or session.host == self.host)
            and (self.user is None or session.user == self.user)
        )


def sessions(requests: Iterable[Obj], selected: SessionFilter = SessionFilter()) -> list[Session]:
    """The sessions among ``requests`` that ``selected`` matches, in a stable order:
    namespace, pool, host, user, request."""
    found = [session_of(r) for r in requests if is_session(r)]
    chosen = [s for s in found if selected.matches(s)]
    return sorted(chosen, key=lambda s: (s.namespace, s.pool, s.host, s.user, s.request))


def _limit(obj: Obj) -> str:
    limit = obj.get("limit")
    return f" ({limit})" if limit else ""


def notice_cell(notice: Obj | None, now: datetime) -> str:
    if not notice:
        return NONE
    shown = notice.get("shownAt")
    if shown:
        return f"shown {age(shown, now)} ago{_limit(notice)}"
    return f"sent {age(notice.get('sentAt'), now)} ago{_limit(notice)}"


def logoff_cell(logoff: Obj | None, now: datetime) -> str:
    if not logoff:
        return NONE
    deadline = parse_time(logoff.get("deadline"))
    if deadline is None:
        return NONE
    if deadline > now:
        return f"in {human_duration(deadline - now)}{_limit(logoff)}"
    return f"due {human_duration(now - deadline)} ago{_limit(logoff)}"


def disconnect_cell(disconnect: Obj | None, now: datetime) -> str:
    if not disconnect:
        return NONE
    done = disconnect.get("doneAt")
    if done:
        return f"done {age(done, now)} ago{_limit(disconnect)}"
    return f"asked {age(disconnect.get('requestedAt'), now)} ago{_limit(disconnect)}"


SESSION_HEADER = ("USER", "POOL", "HOST", "STATE", "SINCE", "LOGON")
WIDE_HEADER = ("IDLE", "NOTICE", "LOGOFF", "DISCONNECT", "REQUEST")


def session_table(
    found: Sequence[Session], now: datetime, *, wide: bool = False, namespaces: bool = False
) -> str:
    """``kubectl hostpool sessions`` (``-o wide`` adds the admin fields and the request;
    ``-A`` the namespace first, as kubectl does)."""
    header = [*(("NAMESPACE",) if namespaces else ()), *SESSION_HEADER]
    if wide:
        header.extend(WIDE_HEADER)
    rows = []
    for s in found:
        row = [*((s.namespace,) if namespaces else ())]
        row += [s.user, s.pool, s.host, s.state, age(s.state_changed_at, now)]
        row.append(age(s.logon_at, now))
        if wide:
            idle = age(s.idle_since, now) if s.idle_since else NONE
            row += [idle, notice_cell(s.notice, now), logoff_cell(s.logoff, now)]
            row += [disconnect_cell(s.disconnect, now), s.request]
        rows.append(row)
    return table(header, rows)


def session_json(found: Sequence[Session]) -> dict[str, Any]:
    return {"items": [s.json() for s in found]}


# --------------------------------------------------------------------------- top


def _text_or_none(obj: Obj, *path: str) -> str:
    value = _get(obj, *path)
    return str(value) if isinstance(value, str) and value else NONE


def _count(obj: Obj, *path: str) -> str:
    value = _get(obj, *path)
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else NONE


def pool_table(pools: Sequence[Obj], *, namespaces: bool = False) -> str:
    """``top``'s pools: hosts (all, available, draining), sessions by state, free slots and
    requests waiting, as the operator last counted them in each pool's status."""
    header = [*(("NAMESPACE",) if namespaces else ())]
    header += ["POOL", "HOSTS", "AVAILABLE", "DRAINING", "SESSIONS", "CONNECTING"]
    header += ["ACTIVE", "DISCONNECTED", "FREE", "PENDING"]
    rows = []
    for pool in sorted(pools, key=_name_key):
        row = [*((str(_get(pool, "metadata", "namespace")),) if namespaces else ())]
        row.append(str(_get(pool, "metadata", "name")))
        row += [_count(pool, "status", "hosts", k) for k in ("total", "available", "draining")]
        states = ("total", "connecting", "active", "disconnected")
        row += [_count(pool, "status", "sessions", k) for k in states]
        row += [
            _count(pool, "status", "capacity", "free"),
            _count(pool, "status", "pendingRequests"),
        ]
        rows.append(row)
    return table(header, rows)


def _name_key(obj: Obj) -> tuple[str, str]:
    return (str(_get(obj, "metadata", "namespace")), str(_get(obj, "metadata", "name")))


def host_state(host: Obj) -> str:
    """Draining, Available, or the reason the Available condition gives for not."""
    if _get(host, "spec", "drainMode"):
        return "Draining"
    for condition in _get(host, "status", "conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Available":
            if condition.get("status") == "True":
                return "Available"
            return str(condition.get("reason") or "Unavailable")
    return NONE


def host_table(hosts: Sequence[Obj], *, namespaces: bool = False) -> str:
    """``top``'s hosts: state, sessions by state, load index and the agent's CPU and memory."""
    header = [*(("NAMESPACE",) if namespaces else ())]
    header += ["HOST", "POOL", "STATE", "SESSIONS", "ACTIVE", "DISCONNECTED", "LOAD"]
    header += ["CPU%", "MEMORY%"]
    # Personal pools' hosts have a user each (and may be stopped): shown when there are any.
    personal = any(_get(h, "spec", "assignedUser") is not None for h in hosts)
    if personal:
        header += ["USER", "POWER"]
    rows = []
    key = lambda h: (_name_key(h)[0], str(_get(h, "spec", "poolRef", "name")), _name_key(h)[1])  # noqa: E731
    for host in sorted(hosts, key=key):
        row = [*((str(_get(host, "metadata", "namespace")),) if namespaces else ())]
        row += [str(_get(host, "metadata", "name")), str(_get(host, "spec", "poolRef", "name"))]
        row.append(host_state(host))
        row += [_count(host, "status", "sessions", k) for k in ("total", "active", "disconnected")]
        row.append(_count(host, "status", "loadIndex"))
        row += [_count(host, "status", "metrics", k) for k in ("cpuPercent", "memoryPercent")]
        if personal:
            row += [_text_or_none(host, "spec", "assignedUser")]
            row += [_text_or_none(host, "status", "power")]
        rows.append(row)
    return table(header, rows)


# --------------------------------------------------------------------------- drain


def users_on(requests: Iterable[Obj], host: str) -> set[str]:
    """The users with a session on ``host`` (a host's sessions are its distinct users)."""
    return {s.user for s in sessions(requests, SessionFilter(host=host))}


def _sessions_word(n: int) -> str:
    return f"{n} session{'s' if n != 1 else ''}"


def drain_progress(host: str, before: set[str], after: set[str]) -> list[str]:
    """The lines a waiting drain prints when the host's users change from ``before`` to
    ``after``: one per user gone, counting down to what is left (users who left together
    are told one by one), one per user that came (a reconnect is still allowed on a
    draining host)."""
    gone = sorted(before - after)
    came = sorted(after - before)
    left = len(before) + len(came)
    lines = []
    for user in gone:
        left -= 1
        lines.append(f"{user} left {host} ({_sessions_word(left)} left)")
    lines += [f"{user} is on {host} again (reconnected)" for user in came]
    return lines
