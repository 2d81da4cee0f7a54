"""The API's vocabulary: group and version, bounds, enums, the base model and the pieces
every kind shares (conditions, pool references, session counts), and how a validation
error is put in one line. ``api`` builds the three kinds from these.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    ValidationError,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

GROUP = "hostpool.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: The largest session limit, and the limit of a pool that sets none.
MAX_SESSION_LIMIT = 999_999
DEFAULT_CONNECTING_TIMEOUT_SECONDS = 60

# Generous but finite bounds, so every number and string in the schema is bounded.
MAX_NAME = 253
MAX_USER = 256
MAX_ADDRESS = 253
MAX_MESSAGE = 32_768
MAX_REASON = 1_024
MAX_COUNT = 10_000_000
MAX_HOSTS = 10_000
MAX_THRESHOLD = 1_000_000
MAX_CONDITIONS = 16
MAX_LABELS = 64
MAX_LABEL_VALUE = 1_024
MAX_ANNOTATION_VALUE = 8_192


def pool_owner(pool: str, uid: str, *, block_deletion: bool) -> dict[str, object]:
    """The owner reference that makes ``pool`` the controller of an object the operator
    makes for it (so deleting the pool deletes it); ``block_deletion`` for those a
    foreground deletion of the pool must wait for (its hosts)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "HostPool",
        "name": pool,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": block_deletion,
    }


class ApiModel(BaseModel):
    """Base for every API model: camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
        validate_default=True,
    )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # Carry each model's CEL rules into its JSON schema, so the CRD generator sees them.
        schema = handler(core_schema)
        rules = cls.__dict__.get("x_kubernetes_validations")
        if rules:
            handler.resolve_ref_schema(schema)["x-kubernetes-validations"] = rules
        return schema

    def to_api(self) -> dict[str, Any]:
        """The wire form: camelCase keys, enums as strings, unset optionals left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class LoadBalancerType(enum.StrEnum):
    """How the pool chooses a host for a new session."""

    BREADTH_FIRST = "BreadthFirst"
    DEPTH_FIRST = "DepthFirst"
    HORIZON = "Horizon"


class PoolType(enum.StrEnum):
    """Pooled: any host takes any user, by the load balancer. Personal: each user has a host
    of their own (AVD's personal pools, Horizon's dedicated assignment)."""

    POOLED = "Pooled"
    PERSONAL = "Personal"


class PersonalAssignment(enum.StrEnum):
    """How a user of a personal pool comes to have a host."""

    #: Their first connect takes an unassigned host (or one the pool adds).
    AUTOMATIC = "Automatic"
    #: Only an administrator assigns hosts (``spec.assignedUser``).
    DIRECT = "Direct"


class PowerState(enum.StrEnum):
    """Whether a personal, workload-backed host's machine is there."""

    RUNNING = "Running"
    STARTING = "Starting"
    STOPPED = "Stopped"


class Protocol(enum.StrEnum):
    """A display protocol a session host supports and a client may ask for."""

    RDP = "RDP"
    PCOIP = "PCOIP"
    BLAST = "BLAST"


ALL_PROTOCOLS: tuple[Protocol, ...] = (Protocol.RDP, Protocol.PCOIP, Protocol.BLAST)


class Phase(enum.StrEnum):
    """Where a SessionRequest stands."""

    PENDING = "Pending"
    ASSIGNED = "Assigned"
    FAILED = "Failed"


class Reason(enum.StrEnum):
    """Why a request was placed where it was, or why it is still pending."""

    NEW_SESSION = "NewSession"
    RECONNECTED = "Reconnected"
    POOL_NOT_FOUND = "PoolNotFound"
    POOL_SATURATED = "PoolSaturated"
    NO_ELIGIBLE_HOST = "NoEligibleHost"
    #: Waiting while hosts the operator added are still starting (their workloads not Ready).
    HOSTS_STARTING = "HostsStarting"
    #: Failed: the workload under the session's host disappeared, and the session with it.
    HOST_LOST = "HostLost"
    #: Placed on the user's own host of a personal pool (load balancing does not apply).
    PERSONAL = "Personal"
    #: Waiting: the personal pool has no host for this user and none to give them.
    NO_HOST_ASSIGNED = "NoHostAssigned"


class SessionState(enum.StrEnum):
    """The state of an assigned session; the operator writes Connecting, agents the rest."""

    CONNECTING = "Connecting"
    ACTIVE = "Active"
    DISCONNECTED = "Disconnected"


class SessionLimit(enum.StrEnum):
    """Which of a pool's session limits acted (``spec.sessionLimits``): the ``limit`` label of
    ``hostpool_session_limit_actions_total`` and of an operator-set action on a request."""

    DISCONNECTED = "Disconnected"  # disconnectedMinutes
    IDLE = "Idle"  # idleMinutes
    MAX_SESSION = "MaxSession"  # maxSessionMinutes


class LimitAction(enum.StrEnum):
    """What a session limit does to a session."""

    DISCONNECT = "Disconnect"
    LOGOFF = "Logoff"


class ConditionStatus(enum.StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


# ---------------------------------------------------------------------------------------
# Shared pieces


class Condition(ApiModel):
    """A condition in the shape of metav1.Condition."""

    type: str = Field(
        min_length=1, max_length=316, description="Type of the condition, e.g. Ready."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        default="",
        max_length=MAX_REASON,
        description="A CamelCase word saying why the condition has this status.",
    )
    message: str = Field(
        default="", max_length=MAX_MESSAGE, description="A human-readable explanation."
    )
    last_transition_time: datetime | None = Field(
        default=None, description="When status last changed (not reason or message)."
    )
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        le=2**53,
        description="The .metadata.generation this condition was computed from.",
    )


Conditions = Annotated[
    list[Condition],
    Field(
        default_factory=list,
        max_length=MAX_CONDITIONS,
        description="The object's conditions, in the Kubernetes API conventions' shape.",
    ),
]


class PoolRef(ApiModel):
    """A reference to a HostPool in the same namespace."""

    name: str = Field(
        min_length=1,
        max_length=MAX_NAME,
        description="Name of the HostPool, in the same namespace as this object.",
    )


class SessionCounts(ApiModel):
    """Sessions by state."""

    total: int = Field(default=0, ge=0, le=MAX_COUNT, description="All sessions.")
    connecting: int = Field(
        default=0,
        ge=0,
        le=MAX_COUNT,
        description="Sessions still logging on (Connecting, within connectingTimeoutSeconds).",
    )
    active: int = Field(default=0, ge=0, le=MAX_COUNT, description="Active sessions.")
    disconnected: int = Field(
        default=0, ge=0, le=MAX_COUNT, description="Disconnected sessions, kept for reconnects."
    )


def describe_validation_error(error: ValidationError, *, under: str = "", whole: str = "") -> str:
    """One line naming the first invalid field (below ``under``, e.g. ``spec``; ``whole``
    when the document itself is wrong), its problem and how many more there are: what
    status conditions, Events and the simulator say."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in (under, *first["loc"]) if part != "") or whole
    message = first["msg"].removeprefix("Value error, ")
    more = len(error.errors()) - 1
    suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return f"{where}: {message}{suffix}"


__all__ = [
    "ALL_PROTOCOLS",
    "API_VERSION",
    "DEFAULT_CONNECTING_TIMEOUT_SECONDS",
    "GROUP",
    "MAX_ADDRESS",
    "MAX_ANNOTATION_VALUE",
    "MAX_CONDITIONS",
    "MAX_COUNT",
    "MAX_HOSTS",
    "MAX_LABELS",
    "MAX_LABEL_VALUE",
    "MAX_MESSAGE",
    "MAX_NAME",
    "MAX_REASON",
    "MAX_SESSION_LIMIT",
    "MAX_THRESHOLD",
    "MAX_USER",
    "VERSION",
    "ApiModel",
    "Condition",
    "ConditionStatus",
    "Conditions",
    "LimitAction",
    "LoadBalancerType",
    "PersonalAssignment",
    "Phase",
    "PoolRef",
    "PoolType",
    "PowerState",
    "Protocol",
    "Reason",
    "SessionCounts",
    "SessionLimit",
    "SessionState",
    "describe_validation_error",
]
