"""The SessionRequest kind: a user's request for a session in a pool, and where it went."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import Field

from .address import HOST_ADDRESS_PATTERN, NO_CONTROL_PATTERN
from .base import (
    MAX_ADDRESS,
    MAX_MESSAGE,
    MAX_NAME,
    MAX_USER,
    ApiModel,
    Conditions,
    Phase,
    PoolRef,
    Protocol,
    Reason,
    SessionLimit,
    SessionState,
)

#: The longest text of a notice or a logoff message.
MAX_NOTICE = 1024


class SessionRequestSpec(ApiModel):
    """A user's request for a session in a pool. Immutable."""

    pool_ref: PoolRef = Field(description="The HostPool to place the session in.")
    user: str = Field(
        min_length=1,
        max_length=MAX_USER,
        pattern=NO_CONTROL_PATTERN,
        description="Who the session is for; a second request of the same user reconnects. "
        "No control characters (line breaks, tabs, escapes).",
    )
    protocol: Protocol | None = Field(
        default=None, description="RDP, PCOIP or BLAST; the host must support it."
    )
    unauthenticated: bool = Field(
        default=False, description="True needs a host with unauthenticatedAccess."
    )


class Logoff(ApiModel):
    """A forced logoff of the session: notice, then logoff at the deadline."""

    message: str = Field(
        default="", max_length=MAX_NOTICE, description="What the user is told before the logoff."
    )
    deadline: datetime = Field(description="When the user is logged off.")
    limit: SessionLimit | None = Field(
        default=None,
        description="The pool's session limit that asked for it (absent: a person or a "
        "scaling plan did). An Idle logoff is not done if the user was active since.",
    )
    shown_at: datetime | None = Field(
        default=None,
        description="When the host's agent told the user (set by the agent; a new logoff "
        "clears it).",
    )


class Disconnect(ApiModel):
    """Disconnect the session now and keep it: its slot stays, a reconnect returns to it."""

    requested_at: datetime = Field(description="When the disconnect was asked for.")
    limit: SessionLimit | None = Field(
        default=None,
        description="The pool's session limit that asked for it (absent: a person did). An "
        "Idle disconnect is not done if the user was active since.",
    )
    done_at: datetime | None = Field(
        default=None,
        description="When the host's agent acted on it (set by the agent; a new request "
        "clears it).",
    )


class Notice(ApiModel):
    """A message shown once in the session's desktop."""

    message: str = Field(min_length=1, max_length=MAX_NOTICE, description="What the user is told.")
    sent_at: datetime = Field(description="When it was sent.")
    limit: SessionLimit | None = Field(
        default=None,
        description="The pool's session limit this warns of (absent: a person sent it).",
    )
    shown_at: datetime | None = Field(
        default=None,
        description="When the host's agent showed it (set by the agent; a new notice clears it).",
    )


class SessionRequestStatus(ApiModel):
    """Where the session was placed, or why it is waiting."""

    observed_generation: int | None = Field(
        default=None, ge=0, le=2**53, description="The generation this status describes."
    )
    phase: Phase | None = Field(default=None, description="Pending, Assigned or Failed.")
    host: str | None = Field(
        default=None, max_length=MAX_NAME, description="The SessionHost's name, once assigned."
    )
    host_address: str | None = Field(
        default=None,
        max_length=MAX_ADDRESS,
        pattern=HOST_ADDRESS_PATTERN,
        description="The host's address (an IP address or a DNS name), once assigned.",
    )
    reason: Reason | None = Field(
        default=None,
        description=(
            "NewSession or Reconnected when assigned; PoolNotFound, PoolSaturated, "
            "NoEligibleHost or HostsStarting while pending; HostLost when failed."
        ),
    )
    message: str | None = Field(
        default=None, max_length=MAX_MESSAGE, description="A human-readable explanation."
    )
    session_state: SessionState | None = Field(
        default=None,
        description="Connecting (set on assignment), then Active or Disconnected from the agent.",
    )
    assigned_at: datetime | None = Field(default=None, description="When the host was assigned.")
    state_changed_at: datetime | None = Field(
        default=None,
        description="When sessionState last changed (written with it, by whoever changes it).",
    )
    logon_at: datetime | None = Field(
        default=None, description="When the host first reported the session (its agent)."
    )
    idle_since: datetime | None = Field(
        default=None,
        description="Since when the session has had no user input, once that is a minute or "
        "more (its agent; absent while the user is active).",
    )
    logoff: Logoff | None = Field(
        default=None,
        description="A forced logoff: the host's agent tells the user, and logs them off at "
        "the deadline (set by a scaling plan's ramp-down, a session limit or an "
        "administrator).",
    )
    disconnect: Disconnect | None = Field(
        default=None,
        description="Disconnect the session and keep it (a session limit or an administrator).",
    )
    notice: Notice | None = Field(
        default=None,
        description="A message the host's agent shows once in the session (a session limit's "
        "warning, or an administrator's message).",
    )
    conditions: Conditions


class SessionRequest(ApiModel):
    """A user's session: creating it asks for a host, deleting it logs off."""

    kind: ClassVar[str] = "SessionRequest"
    plural: ClassVar[str] = "sessionrequests"
    short_names: ClassVar[tuple[str, ...]] = ("sr",)
    spec_validations: ClassVar[list[dict[str, str]]] = [
        {"rule": "self == oldSelf", "message": "spec is immutable"}
    ]

    spec: SessionRequestSpec = Field(description="The request. Immutable.")
    status: SessionRequestStatus = Field(
        default_factory=SessionRequestStatus, description="Placement result."
    )
