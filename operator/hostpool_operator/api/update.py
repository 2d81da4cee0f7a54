"""Image updates: how a pool's hosts follow a new ``spec.scaling.hostTemplate``
(``HostPool.spec.update``), and what the operator says of one (``status.update``).

A host made from an older template is *outdated*; the strategy says what becomes of it:
replaced once its last session ends (``WaitForLogoff``), its users logged off after a notice
first (``ForceLogoff``), or left alone until someone deletes it (``OnDelete``).
``maxUnavailable`` and ``maxSurge`` bound the hosts out of service and the extra hosts, as a
Deployment's rolling update does; both take a count or a percentage of the pool's size.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import re
from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import Field, WithJsonSchema, field_validator, model_validator

from .base import MAX_HOSTS, MAX_MESSAGE, ApiModel

#: A count, or a percentage of the pool's size such as "25%".
PERCENT_PATTERN = re.compile(r"^(100|[1-9]?[0-9])%$")
#: The longest logoff notice a pool may set (what a desktop notice shows in full).
MAX_LOGOFF_MESSAGE = 512
MAX_LOGOFF_DELAY_MINUTES = 1_440
MAX_CANARY_MINUTES = 1_440
#: How many earlier templates a pool keeps (ControllerRevisions) for an undo.
REVISION_HISTORY = 10


class UpdateStrategy(enum.StrEnum):
    """What becomes of a host made from an older template."""

    WAIT_FOR_LOGOFF = "WaitForLogoff"
    FORCE_LOGOFF = "ForceLogoff"
    ON_DELETE = "OnDelete"


class UpdatePhase(enum.StrEnum):
    """Where a pool's update stands."""

    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    COMPLETE = "Complete"
    FAILED = "Failed"


#: The CRD's int-or-string (as a Deployment's maxSurge); the validator below checks the string.
IntOrPercent = Annotated[
    int | str,
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "description": 'A count of hosts, or a percentage of the pool\'s size ("25%").',
        }
    ),
]


def resolve_count(value: int | str, size: int, *, round_up: bool) -> int:
    """``value`` as a count of hosts of a pool of ``size``: a percentage rounds up (maxSurge)
    or down (maxUnavailable), as a Deployment's do."""
    if isinstance(value, int):
        return value
    share = int(value.removesuffix("%")) * size / 100
    return math.ceil(share) if round_up else math.floor(share)


def _check_int_or_percent(value: int | str, field: str) -> int | str:
    if isinstance(value, bool):
        raise ValueError(f'{field} must be a count or a percentage such as "25%"')
    if isinstance(value, int):
        if not 0 <= value <= MAX_HOSTS:
            raise ValueError(f"{field} must be between 0 and {MAX_HOSTS}")
        return value
    if not PERCENT_PATTERN.match(value):
        raise ValueError(f"{field} must be a count or a percentage from 0% to 100%, not {value!r}")
    return value


# CEL sees an int-or-string as either; these say what a percentage must look like.
_PERCENT_RULE = (
    "type(self.{f}) == int ? (self.{f} >= 0 && self.{f} <= {max}) "
    ": self.{f}.matches('^(100|[1-9]?[0-9])%$')"
)
_ZERO_RULE = (
    "(type(self.{f}) == int && self.{f} == 0) || (type(self.{f}) == string && self.{f} == '0%')"
)


class Canary(ApiModel):
    """The first hosts of an update, made alone and watched before the rest follow."""

    hosts: int = Field(
        default=1, ge=1, le=MAX_HOSTS, description="How many hosts are updated first, alone."
    )
    observe_minutes: int = Field(
        default=10,
        ge=0,
        le=MAX_CANARY_MINUTES,
        description="How long the canary hosts take sessions without a failure (a logon "
        "refused, a session that did not start, as their agents report) before the rest follow.",
    )
    ready_timeout_minutes: int = Field(
        default=10,
        ge=1,
        le=MAX_CANARY_MINUTES,
        description="A canary host not Ready this long after it was made fails the update.",
    )


class UpdateSpec(ApiModel):
    """How the pool's hosts follow a new host template."""

    x_kubernetes_validations: ClassVar[list[dict[str, str]]] = [
        {
            "rule": _PERCENT_RULE.format(f="maxUnavailable", max=MAX_HOSTS),
            "message": "maxUnavailable must be a count (0 or more) or a percentage such as '25%'",
            "fieldPath": ".maxUnavailable",
        },
        {
            "rule": _PERCENT_RULE.format(f="maxSurge", max=MAX_HOSTS),
            "message": "maxSurge must be a count (0 or more) or a percentage such as '25%'",
            "fieldPath": ".maxSurge",
        },
        {
            "rule": "!(("
            + _ZERO_RULE.format(f="maxSurge")
            + ") && ("
            + _ZERO_RULE.format(f="maxUnavailable")
            + "))",
            "message": "maxSurge and maxUnavailable cannot both be 0: the update could never "
            "replace a host; set maxSurge: 1 (an extra host first) or maxUnavailable: 1",
            "fieldPath": ".maxSurge",
        },
    ]

    strategy: UpdateStrategy = Field(
        default=UpdateStrategy.WAIT_FOR_LOGOFF,
        description="WaitForLogoff: an outdated host is replaced once its last session ends. "
        "ForceLogoff: its users are logged off after a notice (logoffDelayMinutes), then it "
        "is replaced. OnDelete: nothing is replaced by itself; a host deleted by hand comes "
        "back on the new template.",
    )
    max_unavailable: IntOrPercent = Field(
        default=1,
        description="Hosts out of service for the update at once: a count, or a percentage "
        "of the pool's wanted size (rounded down).",
    )
    max_surge: IntOrPercent = Field(
        default=1,
        description="Extra hosts made for the update beyond the pool's wanted size: a "
        "count, or a percentage (rounded up). Not both 0 with maxUnavailable.",
    )
    logoff_delay_minutes: int = Field(
        default=15,
        ge=0,
        le=MAX_LOGOFF_DELAY_MINUTES,
        description="ForceLogoff: how long after its notice a user of an outdated host is "
        "logged off.",
    )
    logoff_message: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_LOGOFF_MESSAGE,
        description="ForceLogoff: what the notice tells the user (up to 512 characters; "
        "absent: a standard text with the time).",
    )
    not_before: datetime | None = Field(
        default=None,
        description="Nothing is drained, logged off or replaced before this time (RFC 3339); "
        "new sessions still go to updated hosts first.",
    )
    canary: Canary | None = Field(
        default=None,
        description="Update these first hosts alone and watch them before the rest; absent: "
        "no canary.",
    )
    paused: bool = Field(
        default=False,
        description="Hold the update where it is (placement still prefers "
        "updated hosts); false again to resume.",
    )

    @field_validator("max_unavailable", "max_surge", mode="before")
    @classmethod
    def _count_or_percentage(cls, value: Any, info: Any) -> Any:
        name = "maxUnavailable" if info.field_name == "max_unavailable" else "maxSurge"
        if isinstance(value, int | str):
            return _check_int_or_percent(value, name)
        raise ValueError(f'{name} must be a count or a percentage such as "25%"')

    @model_validator(mode="after")
    def _some_room(self) -> UpdateSpec:
        if _is_zero(self.max_surge) and _is_zero(self.max_unavailable):
            raise ValueError(
                "maxSurge and maxUnavailable cannot both be 0: the update could never "
                "replace a host; set maxSurge: 1 (an extra host first) or maxUnavailable: 1"
            )
        return self


def _is_zero(value: int | str) -> bool:
    return value in (0, "0%")


class UpdateStatus(ApiModel):
    """Where the pool's hosts stand against its host template."""

    revision: str | None = Field(
        default=None,
        max_length=63,
        description="The revision of the effective host template (a hash); the hosts made "
        "from it carry it in the label hostpool.io/template-revision.",
    )
    updated_hosts: int = Field(
        default=0, ge=0, le=MAX_HOSTS, description="Hosts made from the current revision."
    )
    outdated_hosts: int = Field(
        default=0, ge=0, le=MAX_HOSTS, description="Hosts made from an earlier revision."
    )
    phase: UpdatePhase | None = Field(
        default=None,
        description="Progressing, Paused, Complete or Failed; absent before the pool's first "
        "template change.",
    )
    message: str | None = Field(
        default=None,
        max_length=MAX_MESSAGE,
        description="What the update is doing or why it stopped.",
    )
    canary_passed: bool | None = Field(
        default=None,
        description="The canary hosts of this revision were watched without a failure: the "
        "rest follow (absent without a canary).",
    )


#: Hex digits of a template's revision: as short as a label stays readable, long enough that
#: two templates of one pool never share one by chance.
REVISION_DIGITS = 10


def template_revision(template: ApiModel) -> str:
    """The revision of a host template: a hash of its wire form with sorted keys, so the
    same template always has the same revision, whoever wrote it and in what order."""
    wire = json.dumps(template.to_api(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(wire.encode()).hexdigest()[:REVISION_DIGITS]
