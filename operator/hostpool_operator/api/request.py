"""The SessionRequest kind: a user's request for a session in a pool, and where it went."""

from __future__ import annotations

import enum
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


class ConnectOutcome(enum.StrEnum):
    """How a connect ended (absent while it is under way)."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ABANDONED = "Abandoned"


class ConnectPhase(enum.StrEnum):
    """The parts of a connect, in order, each measured by the component that sees it."""

    BROKER = "broker"
    QUEUE = "queue"
    HOST_START = "hostStart"
    TRANSPORT = "transport"
    AUTHENTICATION = "authentication"
    SESSION_START = "sessionStart"
    FIRST_FRAME = "firstFrame"


#: Connects kept on a request (the latest).
MAX_CONNECTS = 5
#: The longest a phase may say it took (seconds): a day.
MAX_PHASE_SECONDS = 86400
#: A connect's reference, as the person is shown it: 8 of base32's letters and digits.
CONNECT_REF_PATTERN = r"^[A-Z2-7]{8}$"


class ConnectPhases(ApiModel):
    """Seconds spent in each phase; a phase that did not happen is absent (not zero)."""

    broker: float | None = Field(
        default=None, ge=0, le=MAX_PHASE_SECONDS,
        description="The broker: entitlement checked and the request written (the broker).",
    )  # fmt: skip
    queue: float | None = Field(
        default=None, ge=0, le=MAX_PHASE_SECONDS,
        description="Pending until assigned, less hostStart (the operator).",
    )  # fmt: skip
    host_start: float | None = Field(
        default=None, ge=0, le=MAX_PHASE_SECONDS,
        description="Waiting for a stopped or new host to take sessions (the operator).",
    )  # fmt: skip
    transport: float | None = Field(
        default=None, ge=0, le=MAX_PHASE_SECONDS,
        description="The relay's connection and TLS to the host, its pin checked (the broker; "
        "browser desktops).",
    )  # fmt: skip
    authentication: float | None = Field(
        default=None, ge=0, le=MAX_PHASE_SECONDS,
        description="The host's PAM: the credential checked, the account and home made (the "
        "host's agent, from its single sign-on verifier).",
    )  # fmt: skip
    session_start: float | None = Field(
        default=None, ge=0, le=MAX_PHASE_SECONDS,
        description="Until the desktop session runs, new or reattached, as the host's agent "
        "sees it.",
    )  # fmt: skip
    first_frame: float | None = Field(
        default=None, ge=0, le=MAX_PHASE_SECONDS,
        description="Browser desktops: until the page drew the first frame (the page, through "
        "the broker; bounded).",
    )  # fmt: skip


class Connect(ApiModel):
    """One connect of the request's user: where its time went, and how it ended."""

    ref: str = Field(
        min_length=8,
        max_length=8,
        pattern=CONNECT_REF_PATTERN,
        description="The connect's reference, shown to the person on a failure (kubectl "
        "hostpool diagnose --id).",
    )
    started_at: datetime = Field(description="When the connect began (the broker's click).")
    reconnect: bool | None = Field(default=None, description="To a session the user already had.")
    phases: ConnectPhases = Field(default_factory=ConnectPhases, description="Seconds by phase.")
    outcome: ConnectOutcome | None = Field(
        default=None, description="Succeeded, Failed or Abandoned; absent while under way."
    )
    failed_phase: ConnectPhase | None = Field(
        default=None, description="The phase a failed connect failed in."
    )
    reason: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[A-Za-z][A-Za-z0-9]*$",
        description="Why it failed, in one word (UidMismatch, HostNotTrusted, HostLost...).",
    )
    message: str | None = Field(
        default=None, max_length=MAX_MESSAGE, description="The failure in words."
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
    connects: list[Connect] | None = Field(
        default=None,
        max_length=MAX_CONNECTS,
        description="The last connects of this request's user, oldest first, each with the "
        "seconds of its phases (logon diagnostics: kubectl hostpool diagnose).",
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
