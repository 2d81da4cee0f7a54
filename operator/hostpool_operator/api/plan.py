"""The API of scaling plans (``ScalingPlan``, short name ``spl``): Azure Virtual Desktop's
autoscale plans, a weekly schedule of four phases (ramp-up, peak, ramp-down, off-peak),
each with its own load-balancing algorithm and capacity rules, applied to pools.

As in ``api``, cross-field rules live twice: as CEL on the schema (the API server refuses a
bad plan naming the field) and as pydantic validators (the simulator refuses the same input
the same way). One check lives only here: whether the time zone exists. The schema checks
the IANA name's format; an unknown zone is reported by the operator with a condition
(``UnknownTimeZone``), and the simulator refuses it through ``zone_of`` (``SimulatedPlan``).

``plans`` holds the decisions made from these models.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, Field, field_validator, model_validator

from .base import (
    MAX_COUNT,
    MAX_HOSTS,
    MAX_NAME,
    ApiModel,
    Conditions,
    LoadBalancerType,
    PoolRef,
)

#: "HH:MM", 00:00..23:59, always two digits each (so CEL can order them as strings).
START_TIME_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
#: An IANA time zone name: letter-led components joined by "/" (UTC, Europe/Stockholm,
#: America/Argentina/Buenos_Aires, Etc/GMT+5, America/Port-au-Prince).
TIME_ZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z][A-Za-z0-9_+-]*)*$"
MAX_TIME_ZONE = 64
MAX_SCHEDULES = 7
MAX_POOL_REFS = 100
MAX_NOTIFICATION = 1024  # as SessionRequest.status.logoff.message
MAX_WAIT_MINUTES = 1440
#: The algorithms a phase may use: a plan's phases are AVD's, which has no Horizon buckets.
PLAN_LOAD_BALANCER_TYPES = (LoadBalancerType.BREADTH_FIRST, LoadBalancerType.DEPTH_FIRST)

_TIME_ZONE_RE = re.compile(TIME_ZONE_PATTERN)


def zone_of(name: str) -> ZoneInfo:
    """The time zone of an IANA name; ValueError when the name is malformed or no such zone
    is known (to the tz database this process has)."""
    if len(name) > MAX_TIME_ZONE or not _TIME_ZONE_RE.match(name):
        raise ValueError(f"{name!r} is not an IANA time zone name (e.g. Europe/Stockholm)")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {name!r}") from None


class DayOfWeek(enum.StrEnum):
    MONDAY = "Monday"
    TUESDAY = "Tuesday"
    WEDNESDAY = "Wednesday"
    THURSDAY = "Thursday"
    FRIDAY = "Friday"
    SATURDAY = "Saturday"
    SUNDAY = "Sunday"


#: Python's weekday() number -> the day's name.
WEEKDAYS: tuple[DayOfWeek, ...] = tuple(DayOfWeek)


class PlanPhase(enum.StrEnum):
    """A phase of a schedule, in the order they follow each other in a day."""

    RAMP_UP = "RampUp"
    PEAK = "Peak"
    RAMP_DOWN = "RampDown"
    OFF_PEAK = "OffPeak"


class StopHostsWhen(enum.StrEnum):
    """When a host drained by the plan is deleted."""

    ZERO_SESSIONS = "ZeroSessions"
    ZERO_ACTIVE_SESSIONS = "ZeroActiveSessions"


class PlanConditionReason(enum.StrEnum):
    """Why a plan's Ready condition is False (or True: Applied)."""

    APPLIED = "Applied"
    POOL_NOT_FOUND = "PoolNotFound"
    POOL_CONFLICT = "PoolConflict"
    SCALING_REQUIRED = "ScalingRequired"
    UNKNOWN_TIME_ZONE = "UnknownTimeZone"
    #: The operator's writes for the plan (drains, logoffs) keep failing for a pool.
    WRITES_FAILED = "WritesFailed"


def _start_time(description: str) -> Any:
    return Field(min_length=5, max_length=5, pattern=START_TIME_PATTERN, description=description)


def _load_balancer_type() -> Any:
    return Field(
        description="BreadthFirst or DepthFirst: how the pool places new sessions in this "
        "phase (the pool's maxSessionLimit stays; DepthFirst needs it set explicitly).",
        # The schema offers the two algorithms a phase may use (Horizon is refused).
        json_schema_extra={"enum": [t.value for t in PLAN_LOAD_BALANCER_TYPES]},
    )


class _PhaseBase(ApiModel):
    start_time: str = _start_time("When the phase starts, local time of the plan's zone, HH:MM.")
    load_balancer_type: LoadBalancerType = _load_balancer_type()

    @field_validator("load_balancer_type")
    @classmethod
    def _no_horizon(cls, value: LoadBalancerType) -> LoadBalancerType:
        if value not in PLAN_LOAD_BALANCER_TYPES:
            raise ValueError("a plan's phase uses BreadthFirst or DepthFirst, not Horizon")
        return value


class RampUp(_PhaseBase):
    """The phase in which users arrive: its minimum and threshold apply in Peak too."""

    minimum_hosts_percent: int = Field(
        ge=0,
        le=100,
        description="Percent of the pool's scaling.maxHosts to keep taking sessions in "
        "ramp-up and peak (rounded up); it takes the place of minHosts.",
    )
    capacity_threshold_percent: int = Field(
        ge=1,
        le=100,
        description="Used capacity (sessions per slot of the hosts taking sessions) above "
        "which hosts are undrained or added, in ramp-up and peak.",
    )


class Peak(_PhaseBase):
    """The busiest phase: its own algorithm, ramp-up's minimum and threshold."""


class RampDown(_PhaseBase):
    """The phase in which users leave: hosts are drained and removed, down to the minimum;
    its settings apply in OffPeak too."""

    minimum_hosts_percent: int = Field(
        ge=0,
        le=100,
        description="Percent of the pool's scaling.maxHosts to keep taking sessions in "
        "ramp-down and off-peak (rounded up).",
    )
    capacity_threshold_percent: int = Field(
        ge=1,
        le=100,
        description="Used capacity above which hosts are undrained or added, and which "
        "draining one more host must not exceed, in ramp-down and off-peak.",
    )
    force_logoff_users: bool = Field(
        default=False,
        description="Tell the users of drained hosts, and log them off waitTimeMinutes "
        "after the drain (by the host's agent).",
    )
    wait_time_minutes: int = Field(
        default=30,
        ge=0,
        le=MAX_WAIT_MINUTES,
        description="Minutes from a host's drain to the forced logoff of its users.",
    )
    notification_message: str = Field(
        default="",
        max_length=MAX_NOTIFICATION,
        description="What users of a drained host are told before a forced logoff.",
    )
    stop_hosts_when: StopHostsWhen = Field(
        default=StopHostsWhen.ZERO_SESSIONS,
        description="ZeroSessions: a drained host is deleted once it has no session; "
        "ZeroActiveSessions: once it has no Connecting or Active session (its Disconnected "
        "requests are deleted first).",
    )


class OffPeak(_PhaseBase):
    """The quiet phase, until the next phase start (a weekend without a schedule included):
    its own algorithm, ramp-down's other settings."""


_ORDER = (("rampUp", "peak"), ("peak", "rampDown"), ("rampDown", "offPeak"))


class Schedule(ApiModel):
    """The four phases of the days it names."""

    x_kubernetes_validations: ClassVar[list[dict[str, str]]] = [
        {
            "rule": f"self.{first}.startTime < self.{then}.startTime",
            "message": f"{then}.startTime must be after {first}.startTime",
            "fieldPath": f".{then}.startTime",
        }
        for first, then in _ORDER
    ]

    name: str = Field(
        min_length=1, max_length=MAX_NAME, description="The schedule's name, unique in the plan."
    )
    days_of_week: list[DayOfWeek] = Field(
        min_length=1,
        max_length=7,
        description="The days (Monday..Sunday) whose phases this schedule sets, each once.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    ramp_up: RampUp = Field(description="Users arrive: algorithm, minimum and threshold.")
    peak: Peak = Field(description="The busiest hours: algorithm (ramp-up's other settings).")
    ramp_down: RampDown = Field(
        description="Users leave: algorithm, minimum, threshold, draining and logoff."
    )
    off_peak: OffPeak = Field(description="Quiet hours: algorithm (ramp-down's other settings).")

    @field_validator("days_of_week")
    @classmethod
    def _days_once(cls, days: list[DayOfWeek]) -> list[DayOfWeek]:
        twice = sorted({d.value for d in days if days.count(d) > 1})
        if twice:
            raise ValueError(f"daysOfWeek names {', '.join(twice)} more than once")
        return days

    @model_validator(mode="after")
    def _phases_in_order(self) -> Schedule:
        starts = {
            "rampUp": self.ramp_up.start_time,
            "peak": self.peak.start_time,
            "rampDown": self.ramp_down.start_time,
            "offPeak": self.off_peak.start_time,
        }
        for first, then in _ORDER:
            if not starts[first] < starts[then]:
                raise ValueError(f"{then}.startTime must be after {first}.startTime")
        return self


_PLAN_RULES: list[dict[str, str]] = [
    {
        "rule": "self.schedules.all(s, s.daysOfWeek.all(d, "
        "self.schedules.exists_one(t, d in t.daysOfWeek)))",
        "message": "a weekday appears in at most one schedule",
        "fieldPath": ".schedules",
    }
]


class PlanRules(ApiModel):
    """The time zone and the schedules: what a plan decides, without the pools it is for."""

    x_kubernetes_validations: ClassVar[list[dict[str, str]]] = _PLAN_RULES

    time_zone: str = Field(
        min_length=1,
        max_length=MAX_TIME_ZONE,
        pattern=TIME_ZONE_PATTERN,
        description="IANA time zone of the start times, e.g. Europe/Stockholm. An unknown "
        "zone is reported by the Ready condition (UnknownTimeZone).",
    )
    schedules: list[Schedule] = Field(
        min_length=1,
        max_length=MAX_SCHEDULES,
        description="1..7 schedules; a weekday appears in at most one. A phase lasts until "
        "the next phase start of any schedule (Friday's off-peak through a weekend "
        "without a schedule).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @model_validator(mode="after")
    def _days_and_names_once(self) -> PlanRules:
        names = [s.name for s in self.schedules]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"schedule name {twice[0]!r} is used more than once")
        days = [d for s in self.schedules for d in s.days_of_week]
        repeated = [d.value for d in WEEKDAYS if days.count(d) > 1]
        if repeated:
            raise ValueError(
                f"a weekday appears in at most one schedule ({', '.join(repeated)} "
                "in more than one)"
            )
        return self

    @property
    def zone(self) -> ZoneInfo:
        """The plan's time zone; ValueError when it is unknown."""
        return zone_of(self.time_zone)


class ScalingPlanSpec(PlanRules):
    """A weekly schedule of phases applied to pools; a pool follows at most one plan."""

    x_kubernetes_validations: ClassVar[list[dict[str, str]]] = _PLAN_RULES

    host_pool_refs: list[PoolRef] = Field(
        min_length=1,
        max_length=MAX_POOL_REFS,
        description="1..100 HostPools in this namespace that follow this plan; each needs "
        "scaling and (for DepthFirst phases) an explicit maxSessionLimit.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @field_validator("host_pool_refs")
    @classmethod
    def _pools_once(cls, refs: list[PoolRef]) -> list[PoolRef]:
        names = [r.name for r in refs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"pool {twice[0]!r} is named more than once")
        return refs


def _known_zone(name: str) -> str:
    zone_of(name)
    return name


class SimulatedPlan(PlanRules):
    """A plan in a timeline simulation: no pools, and an unknown time zone is refused (the
    API server cannot; the operator reports it by a condition)."""

    time_zone: Annotated[str, AfterValidator(_known_zone)] = Field(
        min_length=1,
        max_length=MAX_TIME_ZONE,
        pattern=TIME_ZONE_PATTERN,
        description="IANA time zone of the start times and of the timeline's local times.",
    )


class PlanPoolStatus(ApiModel):
    """The plan as it applies to one pool now."""

    name: str = Field(min_length=1, max_length=MAX_NAME, description="The HostPool's name.")
    schedule: str | None = Field(
        default=None, max_length=MAX_NAME, description="The schedule in force; absent: none."
    )
    phase: PlanPhase | None = Field(
        default=None, description="RampUp, Peak, RampDown or OffPeak; absent: none in force."
    )
    load_balancer_type: LoadBalancerType | None = Field(
        default=None, description="The algorithm the pool places with in this phase."
    )
    minimum_hosts: int | None = Field(
        default=None,
        ge=0,
        le=MAX_HOSTS,
        description="Hosts kept taking sessions: ceil(maxHosts x minimumHostsPercent / 100).",
    )
    capacity_threshold_percent: int | None = Field(
        default=None, ge=1, le=100, description="The capacity threshold in force."
    )
    used_capacity_percent: int | None = Field(
        default=None,
        ge=0,
        le=100 * MAX_COUNT,
        description="100 x sessions / (hosts taking sessions or full x maxSessionLimit), "
        "rounded up; 100 with sessions and no such host.",
    )


class PoolScalingPlan(ApiModel):
    """The scaling plan a pool follows and what it applies now (``HostPool.status``)."""

    name: str = Field(
        min_length=1, max_length=MAX_NAME, description="The ScalingPlan's name (same namespace)."
    )
    schedule: str | None = Field(
        default=None, max_length=MAX_NAME, description="The plan's schedule in force; absent: none."
    )
    phase: PlanPhase | None = Field(
        default=None,
        description="RampUp, Peak, RampDown or OffPeak; absent: no phase in force (the "
        "pool's own settings apply).",
    )
    load_balancer_type: LoadBalancerType | None = Field(
        default=None,
        description="The algorithm the pool places new sessions with now; absent: the "
        "pool's own loadBalancer.type.",
    )


class ScalingPlanStatus(ApiModel):
    """The observed state of a plan."""

    observed_generation: int | None = Field(
        default=None, ge=0, le=2**53, description="The generation this status describes."
    )
    schedule: str | None = Field(
        default=None,
        max_length=MAX_NAME,
        description="The schedule in force now (the one whose phase started last); absent: "
        "none in force.",
    )
    phase: PlanPhase | None = Field(
        default=None,
        description="The phase in force now for the whole plan, whatever its pools' state: "
        "RampUp, Peak, RampDown or OffPeak; absent: none worked out (e.g. an unknown time "
        "zone).",
    )
    pools: list[PlanPoolStatus] = Field(
        default_factory=list,
        max_length=MAX_POOL_REFS,
        description="Per pool: schedule and phase in force, algorithm, minimum, threshold "
        "and used capacity.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    conditions: Conditions


class ScalingPlan(ApiModel):
    """An autoscale plan: phases of the week with their algorithm and capacity rules."""

    kind: ClassVar[str] = "ScalingPlan"
    plural: ClassVar[str] = "scalingplans"
    short_names: ClassVar[tuple[str, ...]] = ("spl",)

    spec: ScalingPlanSpec = Field(description="The plan: zone, pools and schedules.")
    status: ScalingPlanStatus = Field(
        default_factory=ScalingPlanStatus, description="The plan's observed state."
    )
