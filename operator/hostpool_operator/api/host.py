"""The SessionHost kind and a session host's own properties: what it supports, its own
logon-storm policy, and the load figures its agent reports.

These are parts of a SessionHost (``spec.features``, ``spec.logonStorm``,
``status.metrics``) and of the spec a pool gives the hosts it creates; the SessionHost kind
itself is at the end.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import Field

from .address import HOST_ADDRESS_PATTERN, NO_CONTROL_PATTERN
from .base import (
    ALL_PROTOCOLS,
    MAX_ADDRESS,
    MAX_THRESHOLD,
    MAX_USER,
    ApiModel,
    Conditions,
    PoolRef,
    PowerState,
    Protocol,
    SessionCounts,
)
from .workload import WorkloadRef

#: A certificate's fingerprint as hosts publish it and the relay compares it: the SHA-256 of
#: the DER certificate in lowercase hex, one form only (no colons, no upper case).
RDP_CERTIFICATE_SHA256_PATTERN = "^[0-9a-f]{64}$"


class HostFeatures(ApiModel):
    """What a session host supports; Horizon puts hosts with every default feature first."""

    multi_session: bool = Field(default=True, description="The host runs many sessions at once.")
    unauthenticated_access: bool = Field(
        default=True, description="The host accepts unauthenticated users."
    )
    protocols: list[Protocol] = Field(
        default_factory=lambda: list(ALL_PROTOCOLS),
        max_length=3,
        description="Display protocols the host supports: RDP, PCOIP, BLAST.",
    )

    @property
    def all_default(self) -> bool:
        """Supports every default feature: multi-session, unauthenticated, all protocols."""
        return (
            self.multi_session
            and self.unauthenticated_access
            and all(p in self.protocols for p in ALL_PROTOCOLS)
        )


class HostLogonStorm(ApiModel):
    """This host's own logon-storm thresholds, as a Horizon agent-side policy sets them: each
    field set here wins over the pool's horizon.logonStorm field of the same name for this
    host; a field left out is the pool's. Horizon pools only (ignored in other pools)."""

    connecting_session_threshold: int | None = Field(
        default=None,
        ge=0,
        le=150,
        description=(
            "Most sessions logging on at once on this host; at it, the host takes no new "
            "session. 0 disables it for this host; absent: the pool's."
        ),
    )
    load_index_threshold: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description=(
            "At or above this load index the host takes no new session. 0 disables it for "
            "this host; absent: the pool's."
        ),
    )


class HostMetrics(ApiModel):
    """Load figures reported by the host's agent (the operator never writes them)."""

    cpu_percent: int | None = Field(default=None, ge=0, le=100, description="CPU usage, %.")
    memory_percent: int | None = Field(default=None, ge=0, le=100, description="Memory usage, %.")
    disk_queue_length: int | None = Field(
        default=None, ge=0, le=MAX_THRESHOLD, description="Average queued disk reads+writes."
    )
    disk_read_latency_ms: int | None = Field(
        default=None, ge=0, le=MAX_THRESHOLD, description="Disk read latency, ms."
    )
    disk_write_latency_ms: int | None = Field(
        default=None, ge=0, le=MAX_THRESHOLD, description="Disk write latency, ms."
    )
    custom_load_value: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="The host's own load value, used when the pool uses a custom script.",
    )
    sampled_at: datetime | None = Field(default=None, description="When these were sampled.")


class LogonRefusal(ApiModel):
    """A logon the host refused, as its agent read it from the host's verifier."""

    at: datetime = Field(description="When the logon was refused.")
    reason: str = Field(
        max_length=64,
        pattern=r"^[A-Za-z][A-Za-z0-9]*$",
        description="Why, in the verifier's word (UidMismatch, Expired, "
        "HomeOwnedByAnotherUser...).",
    )


class HostAgent(ApiModel):
    """What the host's agent says about itself (written by the agent, not the operator)."""

    version: str | None = Field(default=None, max_length=64, description="The agent's version.")
    address: str | None = Field(
        default=None,
        max_length=MAX_ADDRESS,
        pattern=HOST_ADDRESS_PATTERN,
        description="The address clients reach the host at, as the agent sees it (an IP "
        "address, IPv6 without brackets, or a DNS name); used only when neither spec.address "
        "nor the workload gives one.",
    )
    rdp_certificate_sha256: str | None = Field(
        default=None,
        min_length=64,
        max_length=64,
        pattern=RDP_CERTIFICATE_SHA256_PATTERN,
        description="The SHA-256 of the host's RDP TLS certificate (of the DER certificate, "
        "64 lowercase hex digits: `openssl x509 -outform DER | sha256sum`), as the agent reads "
        "it (for xrdp: xrdp.ini's certificate=). The broker relays a browser's desktop only to "
        "a host presenting this certificate; absent: to none.",
    )
    last_logon_refusal: LogonRefusal | None = Field(
        default=None,
        description="The last logon the host refused (single sign-on: the credential, the "
        "uid, the home), as the agent reports it: an image update's canary fails on one "
        "refused while it is watched.",
    )


# ---------------------------------------------------------------------------------------
# SessionHost


class SessionHostSpec(ApiModel):
    """A multi-session remote-desktop host in a pool."""

    pool_ref: PoolRef = Field(
        description="The HostPool this host belongs to. Immutable.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "poolRef is immutable"}
            ]
        },
    )
    drain_mode: bool = Field(
        default=False,
        description="True: the host takes no new sessions; users with a session may reconnect.",
    )
    address: str | None = Field(
        default=None,
        max_length=MAX_ADDRESS,
        pattern=HOST_ADDRESS_PATTERN,
        description="Address handed to the client: an IP address (IPv6 without brackets) or "
        "a DNS name. Wins over the workload's and the agent's.",
    )
    features: HostFeatures = Field(
        default_factory=HostFeatures, description="What the host supports."
    )
    logon_storm: HostLogonStorm | None = Field(
        default=None,
        description=(
            "This host's own logon-storm thresholds (Horizon pools only): each field set "
            "wins over the pool's horizon.logonStorm field of the same name; absent: the pool's."
        ),
    )
    workload_ref: WorkloadRef | None = Field(
        default=None,
        description=(
            "The workload this host stands for (set by the operator on hosts it creates with "
            "a workload). The host takes new sessions only while it exists and is Ready."
        ),
    )
    assigned_user: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_USER,
        pattern=NO_CONTROL_PATTERN,
        description="Personal pools: the host's one user (set by the operator on a user's "
        "first connect with Automatic assignment, by an administrator with Direct). Cannot "
        "change while a session is on the host.",
    )
    keep_data: bool | None = Field(
        default=None,
        description="Personal pools: true keeps the files of the user whose data the host "
        "holds (annotation hostpool.io/data-of) when the host has no user: its workload and "
        "volume claims stay, and only that user may be given it again (kubectl hostpool "
        "unassign --keep-data). Absent or false: taking the host from its user deletes its "
        "workload and volume claims before anyone else is given it.",
    )


class SessionHostStatus(ApiModel):
    """The observed state of a session host."""

    observed_generation: int | None = Field(
        default=None, ge=0, le=2**53, description="The generation this status describes."
    )
    metrics: HostMetrics | None = Field(
        default=None, description="Written by the host's agent, not by the operator."
    )
    agent: HostAgent | None = Field(
        default=None,
        description="The agent's version, address and RDP certificate, written by the agent.",
    )
    sessions: SessionCounts = Field(default_factory=SessionCounts, description="Sessions.")
    address: str | None = Field(
        default=None,
        max_length=MAX_ADDRESS,
        pattern=HOST_ADDRESS_PATTERN,
        description=(
            "The address in force: spec.address, else the workload's (workloadRef.addressFrom), "
            "else the one the agent reports; a value that is not an IP address or a DNS name "
            "is skipped. Copied to requests on assignment."
        ),
    )
    load_index: int | None = Field(
        default=None,
        ge=-1,
        le=100,
        description="0 (no load) to 100 (full); -1 when an input the pool needs is missing.",
    )
    bucket: int | None = Field(
        default=None, ge=1, le=3, description="Horizon pools only: bucket 1, 2 or 3."
    )
    power: PowerState | None = Field(
        default=None,
        description="Personal pools, workload-backed hosts: Running, Starting (the workload "
        "is being made or is not Ready yet) or Stopped (the workload was deleted after "
        "personal.stopAfterMinutes without a session; the volumes are kept).",
    )
    conditions: Conditions


class SessionHost(ApiModel):
    """A session host: one machine of a pool."""

    kind: ClassVar[str] = "SessionHost"
    plural: ClassVar[str] = "sessionhosts"
    short_names: ClassVar[tuple[str, ...]] = ("sh",)

    # A user's host is theirs while a session is on it: giving it to someone else (or
    # taking it away) waits until the host is empty. On a spec write the stored status is
    # what oldSelf and self both carry.
    x_kubernetes_validations: ClassVar[list[dict[str, str]]] = [
        {
            "rule": "!has(oldSelf.spec.assignedUser) || (has(self.spec.assignedUser) && "
            "self.spec.assignedUser == oldSelf.spec.assignedUser) || !has(oldSelf.status) || "
            "!has(oldSelf.status.sessions) || !has(oldSelf.status.sessions.total) || "
            "oldSelf.status.sessions.total == 0",
            "message": "spec.assignedUser cannot change while a session is on the host "
            "(log the session off first)",
            "fieldPath": ".spec.assignedUser",
            "reason": "FieldValueForbidden",
        }
    ]

    spec: SessionHostSpec = Field(description="The host's desired state.")
    status: SessionHostStatus = Field(
        default_factory=SessionHostStatus, description="The host's observed state."
    )
