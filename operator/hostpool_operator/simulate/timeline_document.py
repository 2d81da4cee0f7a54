"""The timeline document of the contract's "Timeline simulation": its models, its limits and
``parse_timeline``, which refuses a bad document naming the field (``TimelineError``).

A document gives either synthetic logons (``arrivals`` windows and ``sessionMinutes``) or a
recorded history (``sessions``, each with its own start and end). Times without an offset
are local wall-clock times of the plan's ``timeZone`` (UTC without a plan).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from ..api import MAX_HOSTS, ApiModel, HostPoolSpec, describe_validation_error
from ..api.base import MAX_USER
from ..api.plan import SimulatedPlan
from ..api.update import UpdateSpec

MAX_HOURS = 168
MAX_PER_HOUR = 100_000
MAX_WINDOWS = 48
MAX_SESSION_MINUTES = 7 * 24 * 60
#: Logons in one run, all windows and days together (or recorded sessions).
MAX_LOGONS = 2_000_000
#: How long an added host may take to start taking sessions (a VM booting).
MAX_HOST_START_MINUTES = 24 * 60
#: The largest wait bound a run reports against.
MAX_WAIT_MINUTES = 7 * 24 * 60

_CLOCK = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
_CLOCK_OR_MIDNIGHT = r"^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$"


class TimelineError(ValueError):
    """An invalid timeline document; the message names the offending field."""


def _clock_minutes(value: str) -> int:
    hours, minutes = value.split(":")
    return int(hours) * 60 + int(minutes)


def _must_be_text(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError('must be a string "HH:MM" (quote it in YAML: "07:00")')
    return value


class ArrivalWindow(ApiModel):
    """Logons every simulated day from ``from`` to ``to`` (local "HH:MM"; ``to`` may be
    "24:00", or earlier than ``from`` for a window across midnight), ``perHour`` an hour."""

    start: str = Field(alias="from", pattern=_CLOCK)
    end: str = Field(alias="to", pattern=_CLOCK_OR_MIDNIGHT)
    per_hour: int = Field(ge=0, le=MAX_PER_HOUR)

    _text = field_validator("start", "end", mode="before")(_must_be_text)

    @model_validator(mode="after")
    def _not_empty(self) -> ArrivalWindow:
        if _clock_minutes(self.start) == _clock_minutes(self.end):
            raise ValueError("to must differ from from")
        return self

    @property
    def minutes(self) -> tuple[int, int]:
        """(start, end) in minutes after local midnight; end > start (past 24:00 when the
        window crosses midnight)."""
        begin, end = _clock_minutes(self.start), _clock_minutes(self.end)
        return begin, end if end > begin else end + 24 * 60


class RecordedSession(ApiModel):
    """One session of a recorded history: who, when it started and when it ended, and
    optionally when it was left Disconnected (``disconnectedAt``: from then until ``end``
    it held its slot with nobody at it). Times without an offset are local times (like
    ``start``); with one, instants."""

    user: str = Field(min_length=1, max_length=MAX_USER)
    start: datetime
    end: datetime
    disconnected_at: datetime | None = None

    @field_validator("disconnected_at")
    @classmethod
    def _within_the_session(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        start, end = info.data.get("start"), info.data.get("end")
        if value is None or not isinstance(start, datetime) or not isinstance(end, datetime):
            return value  # start or end is invalid: that error is the one reported
        if (start.tzinfo is None) != (end.tzinfo is None) or end <= start:
            return value  # as above, from _ends_after_it_starts
        if (value.tzinfo is None) != (start.tzinfo is None):
            raise ValueError(
                "must have an offset when start and end have one, and none when they have none"
            )
        if not start <= value <= end:
            raise ValueError(
                f"must be within the session, from start ({start.isoformat()}) "
                f"to end ({end.isoformat()})"
            )
        return value

    @model_validator(mode="after")
    def _ends_after_it_starts(self) -> RecordedSession:
        if (self.start.tzinfo is None) != (self.end.tzinfo is None):
            raise ValueError("start and end must both have an offset or both have none")
        if self.end <= self.start:
            raise ValueError("end must be after start")
        return self


class SimulatedUpdate(UpdateSpec):
    """An image update in a timeline: the pool's template changes at ``at`` (a local time,
    like ``start``), and ``spec.update``'s fields say how its hosts follow. Hosts are made
    ready at once (or after ``hostStartMinutes``), so a canary passes when watched long
    enough."""

    at: datetime

    @field_validator("at")
    @classmethod
    def _local_time(cls, value: datetime) -> datetime:
        if value.tzinfo is not None:
            raise ValueError("must be a local time without an offset, like start")
        return value


class Timeline(ApiModel):
    """The contract's timeline document."""

    seed: int | None = None
    start: datetime
    hours: int = Field(default=24, ge=1, le=MAX_HOURS)
    step_minutes: int = Field(default=5, ge=1, le=60)
    pool: HostPoolSpec
    plan: SimulatedPlan | None = None
    hosts: int = Field(default=0, ge=0, le=MAX_HOSTS)
    arrivals: list[ArrivalWindow] = Field(default_factory=list, max_length=MAX_WINDOWS)
    #: Required with arrivals; a recorded history brings each session's own length.
    session_minutes: int | None = Field(default=None, ge=1, le=MAX_SESSION_MINUTES)
    #: An added host takes sessions this long after it was added (0: at once).
    host_start_minutes: float = Field(default=0, ge=0, le=MAX_HOST_START_MINUTES)
    #: Replayed instead of arrivals: the sessions of a recorded history.
    sessions: list[RecordedSession] | None = Field(default=None, max_length=MAX_LOGONS)
    #: The wait bound that ``waitedOverMaxPercent`` reports against.
    max_wait_minutes: float | None = Field(default=None, ge=0, le=MAX_WAIT_MINUTES)
    #: An image update during the run (the pool needs scaling: its hosts are the operator's).
    update: SimulatedUpdate | None = None

    @field_validator("start")
    @classmethod
    def _local(cls, value: datetime) -> datetime:
        if value.tzinfo is not None:
            raise ValueError(
                "must be a local time without an offset, e.g. 2026-12-07T00:00:00 "
                "(the plan's timeZone applies, UTC without a plan)"
            )
        return value

    @model_validator(mode="after")
    def _bounded(self) -> Timeline:
        if self.sessions is not None:
            if self.arrivals or self.session_minutes is not None:
                raise ValueError(
                    "give arrivals and sessionMinutes, or sessions (a recorded history), not both"
                )
            return self
        days = math.ceil(self.hours / 24) + 1
        per_day = sum(w.per_hour * (w.minutes[1] - w.minutes[0]) / 60 for w in self.arrivals)
        if per_day * days > MAX_LOGONS:
            raise ValueError(
                f"arrivals: at most {MAX_LOGONS} logons in a run "
                f"(these windows make about {round(per_day * days)})"
            )
        return self


def parse_timeline(document: Any) -> Timeline:
    """Validate a timeline document; raises TimelineError naming the field."""
    if not isinstance(document, dict):
        raise TimelineError(
            "timeline: must be a mapping with start, pool, hosts, arrivals and sessionMinutes"
        )
    try:
        timeline = Timeline.model_validate(document)
    except ValidationError as error:
        raise TimelineError(describe_validation_error(error, whole="timeline")) from None
    if timeline.sessions is None and timeline.session_minutes is None:
        # Said here, by name: the model cannot require it only when sessions are absent.
        raise TimelineError("sessionMinutes: Field required (or give sessions instead)")
    if timeline.update is not None:
        if timeline.pool.scaling is None:
            raise TimelineError("update: the pool needs scaling (its hosts are the operator's)")
        if not timeline.start <= timeline.update.at:
            raise TimelineError("update.at: must not be before start")
    if timeline.plan is not None:
        # What the operator reports as ScalingRequired on the plan.
        if timeline.pool.scaling is None:
            raise TimelineError("pool.scaling: a pool that follows a plan needs scaling")
        if timeline.pool.load_balancer.max_session_limit is None:
            raise TimelineError(
                "pool.loadBalancer.maxSessionLimit: a pool that follows a plan needs it set"
            )
    return timeline
