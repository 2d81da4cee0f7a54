"""What the broker keeps of each object it watches: only what its answers need (a broker
in front of 100,000 sessions keeps one small record each, not the objects)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from ..api import (
    Connection,
    Entitlements,
    HostPoolSpec,
    LoadBalancerType,
    PersonalAssignment,
    Phase,
    Reason,
)
from ..api.address import is_host_address
from ..api.host import RDP_CERTIFICATE_SHA256_PATTERN
from ..api.timestamps import parse_time
from ..api.vocabulary import CONNECT_ANNOTATION
from ..diagnostics.connects import BrokerMark

JSON = dict[str, Any]
_SHA256 = re.compile(RDP_CERTIFICATE_SHA256_PATTERN)


@dataclass(frozen=True, slots=True)
class PoolView:
    namespace: str
    name: str
    load_balancer_type: LoadBalancerType
    entitlements: Entitlements | None
    connection: Connection
    #: Free session slots by the pool's last status; None before the operator wrote one.
    free: int | None
    #: The name the portal shows (spec.displayName); None: the pool's name.
    display_name: str | None = None
    #: Hosts are starting for the pool by its last status: hosts whose workload is not
    #: Ready yet (status.hosts.notReady), or requests waiting for hosts being started
    #: (condition Saturated, reason HostsStarting).
    hosts_starting: bool = False
    #: A personal pool (spec.type Personal): each user has a desktop of their own, and the
    #: assignment that gives it (Automatic or Direct).
    personal: PersonalAssignment | None = None

    @classmethod
    def from_api(cls, obj: JSON) -> PoolView:
        """ValueError when the spec does not validate (the API server's schema keeps that
        from happening; a broker older than the CRD is how it could)."""
        meta = obj.get("metadata") or {}
        try:
            spec = HostPoolSpec.model_validate(obj.get("spec") or {})
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"spec.{where}: {first['msg']}") from None
        status = obj.get("status")
        status = status if isinstance(status, dict) else {}
        free = _field(status, "capacity", "free")
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            load_balancer_type=spec.load_balancer.type,
            entitlements=spec.entitlements,
            connection=spec.connection or Connection(),
            free=free if isinstance(free, int) else None,
            display_name=spec.display_name,
            hosts_starting=_hosts_starting(status),
            personal=spec.personal_settings.assignment if spec.is_personal else None,
        )

    def admits(self, user: str, groups: frozenset[str]) -> bool:
        """Entitled by name or by group; nobody when the pool names no one."""
        return self.entitlements is not None and self.entitlements.admits(user, groups)


@dataclass(frozen=True, slots=True)
class HostView:
    namespace: str
    name: str
    #: An agent reported for this host once (status.agent).
    has_agent: bool
    #: When the agent's figures were sampled, by its clock (status.metrics.sampledAt).
    sampled_at: datetime | None = None
    #: The pool it belongs to (spec.poolRef.name).
    pool: str = ""
    #: A personal host's user (spec.assignedUser).
    assigned_user: str | None = None
    #: A personal, workload-backed host's power (status.power).
    power: str | None = None
    #: The SHA-256 of the host's RDP certificate as its agent publishes it
    #: (status.agent.rdpCertificateSha256, lowercase hex): the browser relay's pin. None: none
    #: published, or not in that form (then the relay trusts no certificate of the host).
    rdp_certificate_sha256: str | None = None
    #: The address in force as the operator writes it (status.address; None: none yet, or
    #: not an IP address or DNS name).
    address: str | None = None

    @classmethod
    def from_api(cls, obj: JSON) -> HostView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec")
        spec = spec if isinstance(spec, dict) else {}
        status = obj.get("status")
        status = status if isinstance(status, dict) else {}
        metrics = status.get("metrics")
        sampled = parse_time(metrics.get("sampledAt")) if isinstance(metrics, dict) else None
        pool_ref = spec.get("poolRef")
        user, power = spec.get("assignedUser"), status.get("power")
        agent = status.get("agent")
        pin = agent.get("rdpCertificateSha256") if isinstance(agent, dict) else None
        address = status.get("address")
        return cls(
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            "agent" in status,
            sampled,
            pool=str(pool_ref.get("name", "")) if isinstance(pool_ref, dict) else "",
            assigned_user=user if isinstance(user, str) and user else None,
            power=power if isinstance(power, str) else None,
            rdp_certificate_sha256=pin if isinstance(pin, str) and _SHA256.fullmatch(pin) else None,
            address=address if isinstance(address, str) and is_host_address(address) else None,
        )

    def agent_alive(self, now: datetime, stale_after: float) -> bool:
        """An agent reports for this host now, so it carries out logoffs (status.logoff):
        its figures are no older than ``stale_after`` seconds, the operator's rule for
        figures it still believes (``--metrics-stale-after``). An agent that reported once
        and went silent does not count, nor one whose figures carry no time. Ages are by
        the agent's clock: one running ahead looks alive longer, which the operator's
        grace after a logoff's deadline bounds."""
        if not self.has_agent or self.sampled_at is None:
            return False
        return (now - self.sampled_at).total_seconds() <= stale_after


@dataclass(frozen=True, slots=True)
class RequestView:
    namespace: str
    name: str
    uid: str
    resource_version: str
    pool: str
    user: str
    phase: Phase | None
    reason: Reason | None
    host: str | None
    address: str | None
    session_state: str | None
    #: Being deleted (metadata.deletionTimestamp).
    deleting: bool
    #: A logoff was asked for (status.logoff): the host's agent is to end the session.
    logoff: bool
    #: When a disconnect was last asked for (status.disconnect.requestedAt, as written; a
    #: session limit's): a page does not reconnect a session disconnected on purpose.
    disconnect_requested_at: str | None = None
    #: The reference of the connect the broker began with it (its hostpool.io/connect mark):
    #: what a person is shown, for the help desk's ``diagnose --id``.
    connect_ref: str | None = None

    @classmethod
    def from_api(cls, obj: JSON) -> RequestView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        pool_ref = spec.get("poolRef") or {}
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            pool=str(pool_ref.get("name", "")),
            user=str(spec.get("user", "")),
            phase=_enum(Phase, status.get("phase")),
            reason=_enum(Reason, status.get("reason")),
            host=status.get("host") if isinstance(status.get("host"), str) else None,
            address=(
                status.get("hostAddress") if isinstance(status.get("hostAddress"), str) else None
            ),
            session_state=(
                status.get("sessionState") if isinstance(status.get("sessionState"), str) else None
            ),
            deleting=bool(meta.get("deletionTimestamp")),
            logoff=bool(status.get("logoff")),
            disconnect_requested_at=_text(_field(status, "disconnect", "requestedAt")),
            connect_ref=_connect_ref(meta),
        )

    @property
    def ending(self) -> bool:
        """Being deleted, or a logoff was asked for: the session is ending."""
        return self.deleting or self.logoff

    @property
    def live(self) -> bool:
        """Counts as the user's session in the pool: not failed, not ending."""
        return self.phase is not Phase.FAILED and not self.ending


def _connect_ref(meta: Mapping[str, Any]) -> str | None:
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping):
        return None
    mark = BrokerMark.parse(annotations.get(CONNECT_ANNOTATION))
    return mark.ref if mark is not None else None


def addressed(request: RequestView, hosts: Mapping[tuple[str, str], HostView]) -> RequestView:
    """The request with its host's address where the operator placed it before the host had
    one (its agent had not reported yet): the operator writes a request's address once, at
    placement, so without this the user's connects would say HostAddressUnknown until the
    session ended. The address comes from the host's status, as the operator writes it."""
    if request.host is None or request.address is not None:
        return request
    host = hosts.get((request.namespace, request.host))
    if host is None or host.address is None:
        return request
    return replace(request, address=host.address)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _field(status: JSON, part: str, name: str) -> Any:
    section = status.get(part)
    return section.get(name) if isinstance(section, dict) else None


def _hosts_starting(status: JSON) -> bool:
    """Whether the pool's status says hosts are on their way (see PoolView.hosts_starting)."""
    not_ready = _field(status, "hosts", "notReady")
    if isinstance(not_ready, int) and not_ready > 0:
        return True
    conditions = status.get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, dict)
        and c.get("type") == "Saturated"
        and c.get("status") == "True"
        and c.get("reason") == Reason.HOSTS_STARTING.value
        for c in conditions
    )


_E = TypeVar("_E", Phase, Reason)


def _enum(kind: type[_E], value: Any) -> _E | None:
    try:
        return kind(value) if isinstance(value, str) else None
    except ValueError:
        return None
