"""A request's connects (``status.connects``) as each component writes its part.

A connect begins at the broker (the click), which names it (its reference) and times its
own phase; the operator adds the queue and a host's start when it assigns the request; the
host's agent adds authentication and the session's start when it sees the session run; the
broker adds the relay's transport and, from the page, the first frame. Each writes only its
own phases and never one already there, so nobody overwrites another's figure (a page
cannot rewrite the host's). The list keeps the last :data:`MAX_CONNECTS`: a user who
reconnects a thousand times keeps five.

Pure: the JSON of ``status.connects`` in, the JSON to write out.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..api.request import (
    CONNECT_REF_PATTERN,
    MAX_CONNECTS,
    MAX_PHASE_SECONDS,
    ConnectOutcome,
    ConnectPhase,
)
from ..api.timestamps import parse_time, rfc3339

Obj = dict[str, Any]

#: The phases each component measures (and may write).
BROKER_PHASES = frozenset({ConnectPhase.BROKER, ConnectPhase.TRANSPORT, ConnectPhase.FIRST_FRAME})
OPERATOR_PHASES = frozenset({ConnectPhase.QUEUE, ConnectPhase.HOST_START})
AGENT_PHASES = frozenset({ConnectPhase.AUTHENTICATION, ConnectPhase.SESSION_START})
REF = re.compile(CONNECT_REF_PATTERN)
#: A reason as status.connects takes it: one word of letters and digits.
WORD = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")
#: The phases in order, as the contract names them.
ORDER: tuple[ConnectPhase, ...] = tuple(ConnectPhase)


#: The longest broker mark read (a longer one is not the broker's).
MAX_MARK = 256


@dataclass(frozen=True, slots=True)
class BrokerMark:
    """The connect the broker began when it created the request (its annotation)."""

    ref: str
    started: datetime
    broker: float

    def annotation(self) -> str:
        return json.dumps(
            {"ref": self.ref, "startedAt": rfc3339(self.started), "broker": self.broker},
            separators=(",", ":"),
        )

    @classmethod
    def parse(cls, text: object) -> BrokerMark | None:
        """The mark, or None when there is none or it is not one (never trusted further)."""
        if not isinstance(text, str) or len(text) > MAX_MARK:
            return None
        try:
            found = json.loads(text)
        except ValueError:
            return None
        if not isinstance(found, dict):
            return None
        ref, started = found.get("ref"), parse_time(found.get("startedAt"))
        broker = seconds(found.get("broker"))
        if not isinstance(ref, str) or not REF.fullmatch(ref) or started is None or broker is None:
            return None
        return cls(ref, started, broker)


def reference(seed: str) -> str:
    """A connect's reference: 8 letters and digits of base32, from ``seed`` (the request's
    uid and the connect's start): short to read out, stable across writers."""
    digest = hashlib.sha256(seed.encode()).digest()
    return base64.b32encode(digest).decode()[:8]


def seconds(value: object) -> float | None:
    """A phase figure as kept: a finite number of seconds from 0 to a day, to the
    millisecond; anything else is no figure."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    if not math.isfinite(number) or number < 0:
        return None
    return round(min(number, float(MAX_PHASE_SECONDS)), 3)


def connects_of(status: Mapping[str, Any]) -> list[Obj]:
    """The connects a stored status holds (anything not shaped like one is dropped)."""
    found = status.get("connects")
    if not isinstance(found, list):
        return []
    return [dict(c) for c in found if isinstance(c, Mapping) and isinstance(c.get("ref"), str)]


def begin(
    connects: Sequence[Obj],
    ref: str,
    started: datetime,
    phases: Mapping[ConnectPhase, float] | None = None,
    *,
    reconnect: bool = False,
) -> list[Obj]:
    """The connects with connect ``ref`` begun (kept as it is if it is there already: a
    client polling the same connect). An earlier connect still under way that a new one
    replaces was abandoned."""
    kept = [dict(c) for c in connects]
    if any(c.get("ref") == ref for c in kept):
        return kept
    for connect in kept:
        if connect.get("outcome") is None:
            connect["outcome"] = ConnectOutcome.ABANDONED.value
    entry: Obj = {"ref": ref, "startedAt": rfc3339(started)}
    if reconnect:
        entry["reconnect"] = True
    figures = _figures(phases or {}, ORDER)
    if figures:
        entry["phases"] = figures
    return [*kept, entry][-MAX_CONNECTS:]


@dataclass(frozen=True, slots=True)
class Ending:
    """How a connect ended: Succeeded, or Failed in a phase for a reason (one word) with
    words for people, or Abandoned."""

    outcome: ConnectOutcome
    failed_phase: ConnectPhase | None = None
    reason: str | None = None
    message: str | None = None

    def fields(self) -> Obj:
        found: Obj = {"outcome": self.outcome.value}
        if self.outcome is ConnectOutcome.FAILED:
            if self.failed_phase is not None:
                found["failedPhase"] = self.failed_phase.value
            if self.reason and WORD.fullmatch(self.reason):
                found["reason"] = self.reason
            if self.message:
                found["message"] = self.message[:1024]
        return found


SUCCEEDED = Ending(ConnectOutcome.SUCCEEDED)


def record(
    connects: Sequence[Obj],
    phases: Mapping[ConnectPhase, float],
    *,
    owner: frozenset[ConnectPhase],
    ref: str | None = None,
    ending: Ending | None = None,
) -> list[Obj]:
    """The connects with ``phases`` written on the connect ``ref`` (else the latest one
    under way): only ``owner``'s phases, and none already there. With ``ending`` the
    connect ends (a connect that has ended keeps its outcome). Unchanged when there is no
    such connect."""
    kept = [dict(c) for c in connects]
    target = next(
        (c for c in reversed(kept) if (c.get("ref") == ref if ref else c.get("outcome") is None)),
        None,
    )
    if target is None:
        return kept
    stored = target.get("phases")
    merged: Obj = dict(stored) if isinstance(stored, Mapping) else {}
    for name, value in _figures(phases, owner).items():
        merged.setdefault(name, value)
    if merged:
        target["phases"] = merged
    if ending is not None and target.get("outcome") is None:
        target.update(ending.fields())
    return kept


def under_way(connects: Sequence[Obj]) -> Obj | None:
    """The latest connect not ended yet (None: none)."""
    return next((c for c in reversed(connects) if c.get("outcome") is None), None)


def started_at(connect: Mapping[str, Any]) -> datetime | None:
    return parse_time(connect.get("startedAt"))


def phases_of(connect: Mapping[str, Any]) -> dict[ConnectPhase, float]:
    """A connect's phase figures, in the contract's order (bad ones dropped)."""
    stored = connect.get("phases")
    if not isinstance(stored, Mapping):
        return {}
    found = {}
    for phase in ORDER:
        value = seconds(stored.get(phase.value))
        if value is not None:
            found[phase] = value
    return found


def total(connect: Mapping[str, Any]) -> float:
    """The connect's time, its phases added up."""
    return round(sum(phases_of(connect).values()), 3)


def _figures(phases: Mapping[ConnectPhase, float], owner: Iterable[ConnectPhase]) -> Obj:
    allowed = frozenset(owner)
    figures: Obj = {}
    for phase in ORDER:
        if phase in allowed and phase in phases:
            value = seconds(phases[phase])
            if value is not None:
                figures[phase.value] = value
    return figures


def assigned(
    connects: Sequence[Obj],
    *,
    mark: BrokerMark | None,
    seed: str,
    created: datetime | None,
    now: datetime,
    host_start: float | None = None,
    reconnect: bool = False,
) -> list[Obj]:
    """The operator's share, written with its assignment: the connect the broker began
    (its mark), or, for a request made without the broker (kubectl, a script), one that
    begins at the request's creation (named from ``seed``); then its queue, and the host's
    start when the request waited for one (``host_start`` seconds)."""
    if mark is not None:
        connects = begin(
            connects,
            mark.ref,
            mark.started,
            {ConnectPhase.BROKER: mark.broker},
            reconnect=reconnect,
        )
    elif under_way(connects) is None:
        started = created or now
        ref = reference(f"{seed}/{rfc3339(started)}")
        connects = begin(connects, ref, started, reconnect=reconnect)
    current = under_way(connects)
    began = started_at(current) if current is not None else None
    if current is None or began is None:
        return list(connects)
    broker = phases_of(current).get(ConnectPhase.BROKER, 0.0)
    waited = max(0.0, (now - began).total_seconds() - broker)
    phases = {ConnectPhase.QUEUE: waited}
    if host_start is not None:
        starting = min(max(0.0, host_start), waited)
        phases = {ConnectPhase.QUEUE: waited - starting, ConnectPhase.HOST_START: starting}
    return record(connects, phases, owner=OPERATOR_PHASES)


def ended_since(before: Sequence[Obj], after: Sequence[Obj]) -> list[Obj]:
    """The connects of ``after`` that have ended and had not in ``before`` (under way
    there, or not there yet)."""
    done_before = {c.get("ref") for c in before if c.get("outcome") is not None}
    return [c for c in after if c.get("outcome") is not None and c.get("ref") not in done_before]
