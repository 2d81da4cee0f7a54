"""The HostPool kind: a pool of session hosts and how sessions are spread over them.

The CRDs in ``crds/`` are generated from these models (``hostpool-operator crds``), and a
test fails when they drift. Cross-field rules live twice on purpose: as CEL on the CRD (so
the API server refuses bad manifests with a message naming the field) and as pydantic
validators (so the simulator and the operator refuse the same input the same way).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import (
    Field,
    GetJsonSchemaHandler,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from .access import Connection, Entitlements
from .address import HOST_ADDRESS_PATTERN, NO_CONTROL_PATTERN
from .base import (
    DEFAULT_CONNECTING_TIMEOUT_SECONDS,
    MAX_ADDRESS,
    MAX_COUNT,
    MAX_HOSTS,
    MAX_SESSION_LIMIT,
    MAX_THRESHOLD,
    ApiModel,
    Conditions,
    LimitAction,
    LoadBalancerType,
    PersonalAssignment,
    PoolType,
    SessionCounts,
)
from .host import HostFeatures, HostLogonStorm
from .plan import PoolScalingPlan
from .update import UpdateSpec, UpdateStatus
from .workload import (
    MAX_CLAIM_TEMPLATES,
    TemplateMetadata,
    VolumeClaimTemplate,
    WorkloadTemplate,
)

# ---------------------------------------------------------------------------------------
# HostPool

#: The longest display name the portal shows for a pool.
MAX_DISPLAY_NAME = 64
#: The longest pool selector: the label key, "=" and a name of up to 253 characters.
MAX_SELECTOR = 300


class LoadBalancer(ApiModel):
    """The pool's load-balancing algorithm and session limit."""

    x_kubernetes_validations: ClassVar[list[dict[str, str]]] = [
        {
            "rule": "self.type != 'DepthFirst' || has(self.maxSessionLimit)",
            "message": "maxSessionLimit is required when type is DepthFirst",
            "fieldPath": ".maxSessionLimit",
            "reason": "FieldValueRequired",
        }
    ]

    type: LoadBalancerType = Field(
        description=(
            "BreadthFirst spreads sessions (a random host among the least-loaded half); "
            "DepthFirst fills the fullest host first; Horizon uses load-index buckets."
        )
    )
    max_session_limit: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SESSION_LIMIT,
        description=(
            "Most sessions per host, 1..999999. Absent means 999999. Must be set when type "
            "is DepthFirst. Lowering it ends no session; a host above it just takes no new ones."
        ),
    )

    @model_validator(mode="after")
    def _depth_first_needs_limit(self) -> LoadBalancer:
        if self.type is LoadBalancerType.DEPTH_FIRST and self.max_session_limit is None:
            raise ValueError("maxSessionLimit is required when type is DepthFirst")
        return self

    @property
    def session_limit(self) -> int:
        """The limit in force: the configured one, or 999999 when none is set."""
        return MAX_SESSION_LIMIT if self.max_session_limit is None else self.max_session_limit


class LoadIndexSettings(ApiModel):
    """Which inputs make up a host's load index (0..100)."""

    use_custom_script: bool = Field(
        default=False,
        description=(
            "Use the host's own status.metrics.customLoadValue as its load index and ignore "
            "every other input."
        ),
    )
    include_session_count: bool = Field(
        default=True,
        description=(
            "Count sessions/maxSessionLimit as a factor. The session count is also used when "
            "no metric threshold is set."
        ),
    )
    cpu_threshold_percent: int = Field(
        default=0, ge=0, le=100, description="CPU percent that counts as full load; 0 = ignore."
    )
    memory_threshold_percent: int = Field(
        default=0, ge=0, le=100, description="Memory percent that counts as full load; 0 = ignore."
    )
    disk_queue_length_threshold: int = Field(
        default=0,
        ge=0,
        le=MAX_THRESHOLD,
        description="Average disk queue length that counts as full load; 0 = ignore.",
    )
    disk_read_latency_threshold_ms: int = Field(
        default=0,
        ge=0,
        le=MAX_THRESHOLD,
        description="Disk read latency (ms) that counts as full load; 0 = ignore.",
    )
    disk_write_latency_threshold_ms: int = Field(
        default=0,
        ge=0,
        le=MAX_THRESHOLD,
        description="Disk write latency (ms) that counts as full load; 0 = ignore.",
    )


class LogonStorm(ApiModel):
    """Per-host limits that turn new logons away during a logon storm (reconnects exempt)."""

    connecting_session_threshold: int = Field(
        default=0,
        ge=0,
        le=150,
        description=(
            "Most sessions logging on at once on one host; a host at it takes no new session. "
            "0 disables."
        ),
    )
    load_index_threshold: int = Field(
        default=0,
        ge=0,
        le=100,
        description="A host whose load index is at or above this takes no new session. 0 disables.",
    )


class ConnectionServer(ApiModel):
    """Pool-level bucketing of hosts, as Horizon's Connection Server does it."""

    rds_load_index_threshold: int = Field(
        default=20,
        ge=0,
        le=100,
        description="Hosts below this load index (and the connecting threshold) are bucket 1/2.",
    )
    rds_connecting_session_threshold: int = Field(
        default=20,
        ge=0,
        le=150,
        description="Hosts with fewer connecting sessions than this (and below the load "
        "threshold) are bucket 1/2.",
    )
    min_rds_servers_in_lb_queue: int = Field(
        default=4,
        ge=0,
        le=1000,
        description=(
            "If fewer hosts than this make bucket 1, the load-index threshold is raised until "
            "this many do (or no more can)."
        ),
    )


class HorizonSettings(ApiModel):
    """Settings of the Horizon algorithm; allowed only when loadBalancer.type is Horizon."""

    load_index: LoadIndexSettings = Field(
        default_factory=LoadIndexSettings, description="How each host's load index is computed."
    )
    logon_storm: LogonStorm = Field(
        default_factory=LogonStorm, description="Per-host logon-storm thresholds."
    )
    connection_server: ConnectionServer = Field(
        default_factory=ConnectionServer, description="Pool-level bucketing thresholds."
    )


class SessionHostTemplateSpec(ApiModel):
    """A SessionHost spec without poolRef (the pool fills it in)."""

    drain_mode: bool = Field(default=False, description="Create new hosts in drain mode.")
    address: str | None = Field(
        default=None,
        max_length=MAX_ADDRESS,
        pattern=HOST_ADDRESS_PATTERN,
        description="Address handed to clients (an IP address or a DNS name); usually left "
        "out for generated hosts.",
    )
    features: HostFeatures = Field(
        default_factory=HostFeatures, description="Features of the new hosts."
    )
    logon_storm: HostLogonStorm | None = Field(
        default=None,
        description="The new hosts' own logon-storm thresholds (Horizon pools only).",
    )


class HostTemplate(ApiModel):
    """The template new SessionHosts are made from."""

    x_kubernetes_validations: ClassVar[list[dict[str, str]]] = [
        {
            "rule": "!has(self.volumeClaimTemplates) || size(self.volumeClaimTemplates) == 0 "
            "|| has(self.workload)",
            "message": "volumeClaimTemplates needs a workload to mount them",
            "fieldPath": ".volumeClaimTemplates",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "!has(self.volumeClaimTemplates) || self.volumeClaimTemplates.all(c, "
            "self.volumeClaimTemplates.exists_one(d, d.metadata.name == c.metadata.name))",
            "message": "volumeClaimTemplates names must be unique",
            "fieldPath": ".volumeClaimTemplates",
            "reason": "FieldValueDuplicate",
        },
    ]

    metadata: TemplateMetadata = Field(
        default_factory=TemplateMetadata, description="Labels and annotations for new hosts."
    )
    spec: SessionHostTemplateSpec = Field(
        default_factory=SessionHostTemplateSpec, description="Spec of new hosts."
    )
    workload: WorkloadTemplate | None = Field(
        default=None,
        description="Created with each new host, named after it; the host takes sessions "
        "only while the workload has condition Ready=True.",
    )
    volume_claim_templates: list[VolumeClaimTemplate] | None = Field(
        default=None,
        max_length=MAX_CLAIM_TEMPLATES,
        description="PersistentVolumeClaims made once per host, named <name>-<host>, owned "
        "by the host (kept while its workload is stopped, deleted with it); a Pod workload "
        "gets each as the volume <name>, for its containers to mount.",
    )

    @model_validator(mode="after")
    def _claims_need_a_workload(self) -> HostTemplate:
        names = [claim.metadata.name for claim in self.volume_claim_templates or ()]
        if names and self.workload is None:
            raise ValueError("volumeClaimTemplates needs a workload to mount them")
        if len(names) != len(set(names)):
            raise ValueError("volumeClaimTemplates names must be unique")
        return self


class Scaling(ApiModel):
    """Lets the operator add and remove SessionHosts for this pool."""

    # Every write through the main resource has maxHosts (the API server fills in its
    # default). The /scale subresource does not default: `kubectl scale` on a pool without
    # scaling would store a scaling of minHosts alone, so that is refused by name, and the
    # comparison is only made when both bounds are there.
    x_kubernetes_validations: ClassVar[list[dict[str, str]]] = [
        {
            "rule": "has(self.maxHosts)",
            "message": "scaling.maxHosts is required: /scale (kubectl scale) sets "
            "spec.scaling.minHosts only on a pool that already has spec.scaling",
            "fieldPath": ".maxHosts",
            "reason": "FieldValueRequired",
        },
        {
            "rule": "!has(self.maxHosts) || !has(self.minHosts) || self.maxHosts >= self.minHosts",
            "message": "maxHosts must be greater than or equal to minHosts",
            "fieldPath": ".maxHosts",
        },
    ]

    min_hosts: int = Field(
        default=0,
        ge=0,
        le=MAX_HOSTS,
        description=(
            "The pool never has fewer hosts than this. The /scale subresource sets it: "
            "`kubectl scale hp NAME --replicas N` pre-warms N hosts."
        ),
    )
    max_hosts: int = Field(
        default=10,
        ge=0,
        le=MAX_HOSTS,
        description="The operator never grows the pool beyond this many hosts (all hosts count).",
    )
    buffer_sessions: int = Field(
        default=0,
        ge=0,
        le=MAX_COUNT,
        description="Free session slots to keep ahead of demand.",
    )
    scale_down_delay_seconds: int = Field(
        default=600,
        ge=0,
        le=604_800,
        description="How long an empty host the operator created must stay empty before removal.",
    )
    host_template: HostTemplate = Field(
        default_factory=HostTemplate, description="New SessionHosts are made from this."
    )
    host_ready_timeout_seconds: int = Field(
        default=600,
        ge=1,
        le=86_400,
        description=(
            "A new host whose workload is not Ready this long after it was created is "
            "reported (condition and Event) and no longer counted as capacity on its way."
        ),
    )

    @model_validator(mode="after")
    def _max_at_least_min(self) -> Scaling:
        if self.max_hosts < self.min_hosts:
            raise ValueError("maxHosts must be greater than or equal to minHosts")
        return self


#: The longest a session limit may be: a week, in minutes.
MAX_LIMIT_MINUTES = 10_080
MAX_WARNING_MINUTES = 60
DEFAULT_WARNING_MINUTES = 5
#: The longest warning text a pool may set.
MAX_LIMIT_MESSAGE = 512


class SessionLimits(ApiModel):
    """When sessions end by time: the disconnected, idle and session-time limits of RDS,
    Horizon and AVD, declared on the pool. Absent fields never act."""

    x_kubernetes_validations: ClassVar[list[dict[str, str]]] = [
        {
            "rule": "!has(self.warningMinutes) || !has(self.idleMinutes) "
            "|| self.warningMinutes < self.idleMinutes",
            "message": "warningMinutes must be less than idleMinutes (the warning is given "
            "that long before the idle limit acts)",
            "fieldPath": ".warningMinutes",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.warningMinutes) || !has(self.maxSessionMinutes) "
            "|| self.warningMinutes < self.maxSessionMinutes",
            "message": "warningMinutes must be less than maxSessionMinutes (the warning is "
            "given that long before the session limit acts)",
            "fieldPath": ".warningMinutes",
            "reason": "FieldValueInvalid",
        },
    ]

    disconnected_minutes: int | None = Field(
        default=None,
        ge=0,
        le=MAX_LIMIT_MINUTES,
        description="A session Disconnected this long is logged off (0 = at once; absent = never).",
    )
    idle_minutes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_LIMIT_MINUTES,
        description="An Active session with no user input this long gets idleAction "
        "(absent = never).",
    )
    idle_action: LimitAction = Field(
        default=LimitAction.DISCONNECT,
        description="What the idle limit does: Disconnect (the session stays) or Logoff.",
    )
    max_session_minutes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_LIMIT_MINUTES,
        description="A session this long after its logon gets maxSessionAction (absent = never).",
    )
    max_session_action: LimitAction = Field(
        default=LimitAction.LOGOFF,
        description="What the session-time limit does: Disconnect or Logoff (the default).",
    )
    warning_minutes: int | None = Field(
        default=None,
        ge=0,
        le=MAX_WARNING_MINUTES,
        description="Users of an Active session are told this long before the idle or "
        "session-time limit acts (0 = no warning). Set, it must be less than both limits; "
        "absent, 5 minutes, or one minute less than the shorter limit where that is 5 "
        "minutes or less.",
    )
    message: str | None = Field(
        default=None,
        max_length=MAX_LIMIT_MESSAGE,
        description="The warning's text; default: what will happen, and when.",
    )

    @model_validator(mode="after")
    def _warning_before_limits(self) -> SessionLimits:
        for name, minutes in (
            ("idleMinutes", self.idle_minutes),
            ("maxSessionMinutes", self.max_session_minutes),
        ):
            if (
                self.warning_minutes is not None
                and minutes is not None
                and self.warning_minutes >= minutes
            ):
                raise ValueError(f"warningMinutes must be less than {name}")
        return self

    def warning(self) -> int:
        """The warning's minutes: as set, else the default, clamped below the shorter limit
        (a default never makes a valid limit invalid: idleMinutes 5 warns after 4)."""
        if self.warning_minutes is not None:
            return self.warning_minutes
        limits = [m for m in (self.idle_minutes, self.max_session_minutes) if m is not None]
        return min([DEFAULT_WARNING_MINUTES, *(m - 1 for m in limits)])


class Personal(ApiModel):
    """How the hosts of a personal pool are given to users and when they are stopped."""

    assignment: PersonalAssignment = Field(
        default=PersonalAssignment.AUTOMATIC,
        description="Automatic: a user's first connect takes an unassigned host (or one the "
        "pool adds from scaling.hostTemplate); Direct: only hosts an administrator assigned "
        "(spec.assignedUser).",
    )
    stop_after_minutes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_LIMIT_MINUTES,
        description="A workload-backed host with no session this long is stopped (its "
        "workload deleted, its volumes kept) and started again on its user's next connect; "
        "absent = never stopped.",
    )


#: What a Personal pool is given when it names no load balancer (none applies to it).
PERSONAL_LOAD_BALANCER: dict[str, str] = {"type": LoadBalancerType.BREADTH_FIRST.value}


class HostPoolSpec(ApiModel):
    """The desired state of a pool of session hosts."""

    x_kubernetes_validations: ClassVar[list[dict[str, str]]] = [
        {
            "rule": "!has(self.horizon) || (has(self.loadBalancer) && "
            "self.loadBalancer.type == 'Horizon')",
            "message": "horizon is only allowed when loadBalancer.type is Horizon",
            "fieldPath": ".horizon",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "self.type == 'Personal' || has(self.loadBalancer)",
            "message": "loadBalancer is required when type is Pooled",
            "fieldPath": ".loadBalancer",
            "reason": "FieldValueRequired",
        },
        {
            "rule": "self.type == 'Personal' || !has(self.personal)",
            "message": "personal is only allowed when type is Personal",
            "fieldPath": ".personal",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "!has(self.update) || !has(self.update.canary) || !has(self.scaling) "
            "|| self.update.canary.hosts <= self.scaling.maxHosts",
            "message": "update.canary.hosts must not exceed scaling.maxHosts: the canary "
            "could never be made; lower canary.hosts or raise maxHosts",
            "fieldPath": ".update.canary.hosts",
        },
    ]

    type: PoolType = Field(
        default=PoolType.POOLED,
        description="Pooled: hosts are shared and the load balancer places each session. "
        "Personal: each user has a host of their own (spec.assignedUser) and load balancing "
        "does not apply. Immutable.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "type is immutable"}
            ]
        },
    )
    personal: Personal | None = Field(
        default=None,
        description="How users get their hosts and when idle ones stop; only with type "
        "Personal (absent there: Automatic, never stopped).",
    )

    display_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DISPLAY_NAME,
        pattern=NO_CONTROL_PATTERN,
        description="The name the portal shows users (absent: the pool's name); up to 64 "
        "characters, no control characters.",
    )
    # Required for Pooled pools; a Personal pool may leave it out, as nothing is balanced
    # there, and is given PERSONAL_LOAD_BALANCER (the validator below).
    load_balancer: LoadBalancer = Field(
        description="The algorithm and the session limit; required when type is Pooled, "
        "ignored when Personal.",
    )
    connecting_timeout_seconds: int = Field(
        default=DEFAULT_CONNECTING_TIMEOUT_SECONDS,
        ge=1,
        le=3600,
        description=(
            "How long an assigned session counts as connecting when no agent reports it Active."
        ),
    )
    horizon: HorizonSettings | None = Field(
        default=None, description="Horizon settings; only when loadBalancer.type is Horizon."
    )
    scaling: Scaling | None = Field(
        default=None, description="Automatic host creation and removal; absent = never."
    )
    entitlements: Entitlements | None = Field(
        default=None,
        description="Who may connect through the broker; absent or empty = nobody.",
    )
    connection: Connection | None = Field(
        default=None, description="What the broker hands a client: port, .rdp settings, gateway."
    )
    session_limits: SessionLimits | None = Field(
        default=None,
        description="When sessions end by time (disconnected, idle, session length); absent "
        "= sessions never end by time.",
    )
    update: UpdateSpec | None = Field(
        default=None,
        description="How hosts made from an earlier scaling.hostTemplate are replaced "
        "(absent: WaitForLogoff, one host at a time, one extra host).",
    )

    #: The load balancer was not given but implied (a Personal pool without one): the wire
    #: form leaves it out again, as the API server stores the pool without it.
    _load_balancer_implied: bool = PrivateAttr(default=False)

    @model_validator(mode="wrap")
    @classmethod
    def _load_balancer_of_personal(
        cls, data: object, handler: ModelWrapValidatorHandler[HostPoolSpec]
    ) -> HostPoolSpec:
        # A Pooled pool without one gets pydantic's own "Field required" on loadBalancer.
        implied = False
        if (
            isinstance(data, dict)
            and data.get("type") == PoolType.PERSONAL
            and data.get("loadBalancer", data.get("load_balancer")) is None
        ):
            data, implied = {**data, "loadBalancer": dict(PERSONAL_LOAD_BALANCER)}, True
        spec = handler(data)
        spec._load_balancer_implied = implied
        return spec

    @model_serializer(mode="wrap")
    def _without_implied_load_balancer(self, handler: SerializerFunctionWrapHandler) -> Any:
        dumped = handler(self)
        if self._load_balancer_implied and isinstance(dumped, dict):
            dumped.pop("loadBalancer", None)
            dumped.pop("load_balancer", None)
        return dumped

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # Required of Pooled pools only: CEL says so on the CRD, not the schema's "required".
        schema = super().__get_pydantic_json_schema__(core_schema, handler)
        target = handler.resolve_ref_schema(schema)
        required = [name for name in target.get("required", []) if name != "loadBalancer"]
        if required:
            target["required"] = required
        else:
            target.pop("required", None)
        return schema

    @model_validator(mode="after")
    def _personal_only_for_personal(self) -> HostPoolSpec:
        if self.personal is not None and self.type is not PoolType.PERSONAL:
            raise ValueError("personal is only allowed when type is Personal")
        return self

    @property
    def is_personal(self) -> bool:
        return self.type is PoolType.PERSONAL

    @property
    def personal_settings(self) -> Personal:
        """The personal settings in force (defaults when the pool sets none)."""
        return self.personal if self.personal is not None else Personal()

    @model_validator(mode="after")
    def _horizon_only_for_horizon(self) -> HostPoolSpec:
        if self.horizon is not None and self.load_balancer.type is not LoadBalancerType.HORIZON:
            raise ValueError("horizon is only allowed when loadBalancer.type is Horizon")
        return self

    @property
    def update_settings(self) -> UpdateSpec:
        """The update settings in force (defaults when the pool sets none)."""
        return self.update if self.update is not None else UpdateSpec()

    @model_validator(mode="after")
    def _canary_fits(self) -> HostPoolSpec:
        canary = self.update.canary if self.update is not None else None
        if (
            canary is not None
            and self.scaling is not None
            and canary.hosts > self.scaling.max_hosts
        ):
            raise ValueError(
                "update.canary.hosts must not exceed scaling.maxHosts: the canary could "
                "never be made; lower canary.hosts or raise maxHosts"
            )
        return self

    @property
    def horizon_settings(self) -> HorizonSettings:
        """The Horizon settings in force (defaults when the pool sets none)."""
        return self.horizon if self.horizon is not None else HorizonSettings()


class HostCounts(ApiModel):
    """Hosts by state."""

    total: int = Field(default=0, ge=0, le=MAX_COUNT, description="All hosts of the pool.")
    available: int = Field(
        default=0, ge=0, le=MAX_COUNT, description="Hosts that can take a new session now."
    )
    draining: int = Field(default=0, ge=0, le=MAX_COUNT, description="Hosts in drain mode.")
    full: int = Field(
        default=0, ge=0, le=MAX_COUNT, description="Hosts at or above the session limit."
    )
    not_ready: int = Field(
        default=0,
        ge=0,
        le=MAX_COUNT,
        description="Hosts whose workload is missing or not Ready (starting, or lost).",
    )
    agent_silent: int = Field(
        default=0,
        ge=0,
        le=MAX_COUNT,
        description="Hosts whose agent reported metrics and then fell silent (MetricsStale).",
    )


class Capacity(ApiModel):
    """Session slots over the hosts not in drain mode."""

    total: int = Field(default=0, ge=0, le=2**53, description="Slots on hosts not draining.")
    free: int = Field(default=0, ge=0, le=2**53, description="Slots still free on them.")


class HostPoolStatus(ApiModel):
    """The observed state of a pool."""

    observed_generation: int | None = Field(
        default=None, ge=0, le=2**53, description="The generation this status describes."
    )
    hosts: HostCounts = Field(default_factory=HostCounts, description="Hosts by state.")
    sessions: SessionCounts = Field(default_factory=SessionCounts, description="Sessions.")
    capacity: Capacity = Field(default_factory=Capacity, description="Session slots.")
    pending_requests: int = Field(
        default=0, ge=0, le=MAX_COUNT, description="SessionRequests waiting for a host."
    )
    update: UpdateStatus | None = Field(
        default=None,
        description="The host template's revision and the hosts made from it and earlier ones.",
    )
    scaling_plan: PoolScalingPlan | None = Field(
        default=None,
        description="The scaling plan this pool follows, and the phase and algorithm it "
        "places with now; absent: the pool's own settings.",
    )
    selector: str | None = Field(
        default=None,
        max_length=MAX_SELECTOR,
        description=(
            "Label selector of the hosts the operator created for this pool "
            "(hostpool.io/pool=<name>), for the /scale subresource. SessionHosts created by "
            "hand without that label are counted in hosts.total but not matched by it."
        ),
    )
    conditions: Conditions


class HostPool(ApiModel):
    """A pool of session hosts and how sessions are spread over them."""

    kind: ClassVar[str] = "HostPool"
    plural: ClassVar[str] = "hostpools"
    short_names: ClassVar[tuple[str, ...]] = ("hp",)

    spec: HostPoolSpec = Field(description="The pool's desired state.")
    status: HostPoolStatus = Field(
        default_factory=HostPoolStatus, description="The pool's observed state."
    )
