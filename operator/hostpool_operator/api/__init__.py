"""The hostpool.io/v1alpha1 API: pydantic models, the single source of truth.

One module per kind (``pool``, ``host``, ``request``, ``plan``), their shared parts
(``base``, ``workload``, ``update``), the names written on objects (``vocabulary``), conditions and
timestamps in the API conventions, and the CRD generator (``crdgen``). Everything a caller
needs is importable from here: ``from hostpool_operator.api import HostPool``.
"""

from __future__ import annotations

from typing import TypeAlias

from .access import (
    BROKER_RDP_PROPERTIES as BROKER_RDP_PROPERTIES,
)
from .access import (
    MAX_ENTITLED_GROUPS as MAX_ENTITLED_GROUPS,
)
from .access import (
    MAX_ENTITLED_USERS as MAX_ENTITLED_USERS,
)
from .access import (
    MAX_RDP_PROPERTIES as MAX_RDP_PROPERTIES,
)
from .access import (
    Clipboard as Clipboard,
)
from .access import (
    Connection as Connection,
)
from .access import (
    ConnectionProtocol as ConnectionProtocol,
)
from .access import (
    Entitlements as Entitlements,
)
from .access import (
    Gateway as Gateway,
)
from .access import (
    RdpType as RdpType,
)
from .access import (
    parse_rdp_properties as parse_rdp_properties,
)
from .base import *  # noqa: F403  (enums, bounds and the base model of every kind)
from .host import (
    HostAgent as HostAgent,
)
from .host import (
    HostFeatures as HostFeatures,
)
from .host import (
    HostLogonStorm as HostLogonStorm,
)
from .host import (
    HostMetrics as HostMetrics,
)
from .host import (
    SessionHost as SessionHost,
)
from .host import (
    SessionHostSpec as SessionHostSpec,
)
from .host import (
    SessionHostStatus as SessionHostStatus,
)
from .plan import (
    MAX_NOTIFICATION as MAX_NOTIFICATION,
)
from .plan import (
    MAX_POOL_REFS as MAX_POOL_REFS,
)
from .plan import (
    MAX_SCHEDULES as MAX_SCHEDULES,
)
from .plan import (
    MAX_TIME_ZONE as MAX_TIME_ZONE,
)
from .plan import (
    MAX_WAIT_MINUTES as MAX_WAIT_MINUTES,
)
from .plan import (
    PLAN_LOAD_BALANCER_TYPES as PLAN_LOAD_BALANCER_TYPES,
)
from .plan import (
    START_TIME_PATTERN as START_TIME_PATTERN,
)
from .plan import (
    TIME_ZONE_PATTERN as TIME_ZONE_PATTERN,
)
from .plan import (
    WEEKDAYS as WEEKDAYS,
)
from .plan import (
    DayOfWeek as DayOfWeek,
)
from .plan import (
    OffPeak as OffPeak,
)
from .plan import (
    Peak as Peak,
)
from .plan import (
    PlanConditionReason as PlanConditionReason,
)
from .plan import (
    PlanPhase as PlanPhase,
)
from .plan import (
    PlanPoolStatus as PlanPoolStatus,
)
from .plan import (
    PlanRules as PlanRules,
)
from .plan import (
    PoolScalingPlan as PoolScalingPlan,
)
from .plan import (
    RampDown as RampDown,
)
from .plan import (
    RampUp as RampUp,
)
from .plan import (
    ScalingPlan as ScalingPlan,
)
from .plan import (
    ScalingPlanSpec as ScalingPlanSpec,
)
from .plan import (
    ScalingPlanStatus as ScalingPlanStatus,
)
from .plan import (
    Schedule as Schedule,
)
from .plan import (
    SimulatedPlan as SimulatedPlan,
)
from .plan import (
    StopHostsWhen as StopHostsWhen,
)
from .plan import (
    zone_of as zone_of,
)
from .pool import (
    DEFAULT_WARNING_MINUTES as DEFAULT_WARNING_MINUTES,
)
from .pool import (
    MAX_LIMIT_MESSAGE as MAX_LIMIT_MESSAGE,
)
from .pool import (
    MAX_LIMIT_MINUTES as MAX_LIMIT_MINUTES,
)
from .pool import (
    MAX_SELECTOR as MAX_SELECTOR,
)
from .pool import (
    Capacity as Capacity,
)
from .pool import (
    ConnectionServer as ConnectionServer,
)
from .pool import (
    HorizonSettings as HorizonSettings,
)
from .pool import (
    HostCounts as HostCounts,
)
from .pool import (
    HostPool as HostPool,
)
from .pool import (
    HostPoolSpec as HostPoolSpec,
)
from .pool import (
    HostPoolStatus as HostPoolStatus,
)
from .pool import (
    HostTemplate as HostTemplate,
)
from .pool import (
    LoadBalancer as LoadBalancer,
)
from .pool import (
    LoadIndexSettings as LoadIndexSettings,
)
from .pool import (
    LogonStorm as LogonStorm,
)
from .pool import (
    Scaling as Scaling,
)
from .pool import (
    SessionHostTemplateSpec as SessionHostTemplateSpec,
)
from .pool import (
    SessionLimits as SessionLimits,
)
from .request import (
    MAX_NOTICE as MAX_NOTICE,
)
from .request import (
    Disconnect as Disconnect,
)
from .request import (
    Logoff as Logoff,
)
from .request import (
    Notice as Notice,
)
from .request import (
    SessionRequest as SessionRequest,
)
from .request import (
    SessionRequestSpec as SessionRequestSpec,
)
from .request import (
    SessionRequestStatus as SessionRequestStatus,
)
from .update import (
    MAX_LOGOFF_MESSAGE as MAX_LOGOFF_MESSAGE,
)
from .update import (
    REVISION_HISTORY as REVISION_HISTORY,
)
from .update import (
    Canary as Canary,
)
from .update import (
    UpdatePhase as UpdatePhase,
)
from .update import (
    UpdateSpec as UpdateSpec,
)
from .update import (
    UpdateStatus as UpdateStatus,
)
from .update import (
    UpdateStrategy as UpdateStrategy,
)
from .update import (
    resolve_count as resolve_count,
)
from .update import (
    template_revision as template_revision,
)
from .workload import (
    ADDRESS_FROM_PATTERN as ADDRESS_FROM_PATTERN,
)
from .workload import (
    API_VERSION_PATTERN as API_VERSION_PATTERN,
)
from .workload import (
    DEFAULT_ADDRESS_FROM as DEFAULT_ADDRESS_FROM,
)
from .workload import (
    KIND_PATTERN as KIND_PATTERN,
)
from .workload import (
    TemplateMetadata as TemplateMetadata,
)
from .workload import (
    WorkloadRef as WorkloadRef,
)
from .workload import (
    WorkloadTemplate as WorkloadTemplate,
)

#: The model class of one of the kinds the API serves.
KindModel: TypeAlias = type[HostPool] | type[SessionHost] | type[SessionRequest] | type[ScalingPlan]

KINDS: tuple[KindModel, ...] = (
    HostPool,
    SessionHost,
    SessionRequest,
    ScalingPlan,
)
