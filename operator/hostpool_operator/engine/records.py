"""What the operator keeps of each observed object: the parts its decisions read.

Pure: built from the JSON the API sends (a watch event or a LIST item), validated once with
the pydantic models, so a malformed object becomes a record with an error message instead
of an exception in the decision loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from sys import intern
from types import MappingProxyType
from typing import Any

import orjson
from pydantic import ValidationError

from ..api import (
    HostMetrics,
    HostPoolSpec,
    SessionHostSpec,
    SessionRequestSpec,
    describe_validation_error,
)
from ..api.plan import ScalingPlanSpec
from ..api.timestamps import parse_time
from ..api.vocabulary import (
    CONNECT_ANNOTATION,
    DATA_OF_ANNOTATION,
    MANAGED_LABEL,
    MANAGER,
    PLAN_DRAINED_ANNOTATION,
)
from .demand import Demand


def query_order(created: str) -> int:
    """Hosts are in query order by creationTimestamp (whole seconds), then name."""
    moment = parse_time(created)
    return int(moment.timestamp()) if moment is not None else 0


def newer_or_same(new: str | None, old: str | None) -> bool:
    """Is resourceVersion ``new`` at least as recent as ``old``? resourceVersions are etcd
    revisions (integers) on every etcd-backed API server; if either is not, trust arrival
    order."""
    if new is None or old is None:
        return True
    try:
        return int(new) >= int(old)
    except ValueError:
        return True


#: The labels of a record that keeps none (requests: no decision reads them).
NO_LABELS: Mapping[str, str] = MappingProxyType({})


def kept_body(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as a record keeps it (Events name it, owner references point at it):
    without ``metadata.managedFields``, which nothing here reads and which is most of a
    listed object (an entry per writer, each a tree of field names)."""
    body = dict(obj)
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping) and "managedFields" in metadata:
        body["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return body


def _status(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object's status, or an empty one when it is missing or not an object."""
    status = obj.get("status")
    return dict(status) if isinstance(status, Mapping) else {}


def pool_ref(obj: Mapping[str, Any]) -> str:
    """The name in ``spec.poolRef`` of a host or request ("" when missing or malformed)."""
    spec = obj.get("spec")
    if isinstance(spec, Mapping) and isinstance(spec.get("poolRef"), Mapping):
        return str(spec["poolRef"].get("name") or "")
    return ""


@dataclass(slots=True)
class Meta:
    namespace: str
    name: str
    uid: str
    resource_version: str
    generation: int
    created: str
    labels: Mapping[str, str]

    @classmethod
    def of(cls, obj: Mapping[str, Any], *, labels: bool = True) -> Meta:
        """``labels=False``: keep none (see ``NO_LABELS``)."""
        meta = obj.get("metadata") or {}
        given = meta.get("labels") if labels else None
        return cls(
            namespace=intern(str(meta.get("namespace", ""))),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            generation=int(meta.get("generation") or 0),
            # Interned: objects created in one second (a logon storm) share one string.
            created=intern(str(meta.get("creationTimestamp", ""))),
            labels=dict(given) if given else NO_LABELS,
        )

    def reference(self) -> dict[str, Any]:
        """The object's identity, as an Event's involvedObject needs it."""
        return {
            "metadata": {
                "namespace": self.namespace,
                "name": self.name,
                "uid": self.uid,
                "resourceVersion": self.resource_version,
            }
        }


#: The status fields of a request its record keeps as (interned) strings of their own; the
#: rest of the status is kept encoded (see ``RequestRecord``).
_REQUEST_FIELDS = ("phase", "host", "sessionState", "reason", "assignedAt")


@dataclass(slots=True)
class RequestRecord:
    """A SessionRequest: of its status, the fields decisions read as interned strings, and
    the rest (conditions, message, address, logoff...) as compact JSON, decoded only when a
    status write needs the whole status (``status``). 100,000 of these are held at once."""

    meta: Meta
    pool: str
    demand: Demand | None
    spec_error: str | None
    phase: str | None = None
    host: str | None = None
    session_state: str | None = None
    reason: str | None = None
    assigned: str | None = None  # status.assignedAt as stored
    logoff: bool = False  # status.logoff is set
    rest: bytes | None = None  # every other status field, orjson-encoded (None: none)
    #: The broker's mark of the connect it began (annotation hostpool.io/connect), as written.
    connect_mark: str | None = None
    seq: int = 0
    seen: float = 0.0  # monotonic time the operator first saw the request

    @property
    def status(self) -> dict[str, Any]:
        """The stored status, whole (a new dict at each call)."""
        status: dict[str, Any] = orjson.loads(self.rest) if self.rest is not None else {}
        for key, value in zip(
            _REQUEST_FIELDS,
            (self.phase, self.host, self.session_state, self.reason, self.assigned),
            strict=True,
        ):
            if value is not None:
                status[key] = value
        return status

    @property
    def assigned_at(self) -> datetime | None:
        return parse_time(self.assigned)

    @property
    def logoff_deadline(self) -> datetime | None:
        """The deadline of ``status.logoff`` (None: no logoff, or no readable deadline);
        decoded from the rest of the status, so read only where ``logoff`` is set."""
        if not self.logoff or self.rest is None:
            return None
        logoff = orjson.loads(self.rest).get("logoff")
        return parse_time(logoff.get("deadline")) if isinstance(logoff, Mapping) else None

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> RequestRecord:
        demand: Demand | None = None
        error: str | None = None
        try:
            parsed = SessionRequestSpec.model_validate(obj.get("spec") or {})
            demand = Demand(parsed.user, parsed.protocol, parsed.unauthenticated)
        except ValidationError as exc:
            error = describe_validation_error(exc, under="spec")
        record = cls(Meta.of(obj, labels=False), intern(pool_ref(obj)), demand, error)
        annotations = (obj.get("metadata") or {}).get("annotations")
        if isinstance(annotations, Mapping):
            mark = annotations.get(CONNECT_ANNOTATION)
            record.connect_mark = mark if isinstance(mark, str) and len(mark) <= 256 else None
        status = obj.get("status")
        if not isinstance(status, Mapping) or not status:
            return record
        rest = dict(status)
        fields = [
            intern(value) if isinstance(value := rest.get(key), str) else None
            for key in _REQUEST_FIELDS
        ]
        for key, value in zip(_REQUEST_FIELDS, fields, strict=True):
            if value is not None:
                del rest[key]
        record.phase, record.host, record.session_state, record.reason, record.assigned = fields
        record.logoff = bool(rest.get("logoff"))
        # A copy: orjson's own bytes keep its whole (4 KiB) buffer allocated.
        record.rest = memoryview(orjson.dumps(rest)).tobytes() if rest else None
        return record


@dataclass(slots=True)
class HostRecord:
    meta: Meta
    pool: str
    spec: SessionHostSpec | None
    spec_error: str | None
    metrics: HostMetrics | None
    metrics_error: str | None
    status: dict[str, Any]
    body: dict[str, Any]

    @property
    def managed(self) -> bool:
        return self.meta.labels.get(MANAGED_LABEL) == MANAGER

    @property
    def plan_drained_at(self) -> datetime | None:
        """When a scaling plan drained this host (None: it did not, or the mark is bad)."""
        return parse_time(self._annotation(PLAN_DRAINED_ANNOTATION))

    @property
    def data_of(self) -> str | None:
        """Personal pools: whose files the host's workload and claims hold (None: nobody's)."""
        return self._annotation(DATA_OF_ANNOTATION) or None

    @property
    def holds_data(self) -> bool:
        """Its workload is one the operator made: it holds its user's files, which the
        operator deletes or keeps when the user changes. (Another's machine is theirs to
        look after.)"""
        return self.managed and self.spec is not None and self.spec.workload_ref is not None

    def _annotation(self, key: str) -> str | None:
        metadata = self.body.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        if not isinstance(annotations, Mapping):
            return None
        value = annotations.get(key)
        return value if isinstance(value, str) else None

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> HostRecord:
        spec: SessionHostSpec | None = None
        error: str | None = None
        try:
            spec = SessionHostSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            error = describe_validation_error(exc, under="spec")
        status = _status(obj)
        metrics: HostMetrics | None = None
        metrics_error: str | None = None
        if status.get("metrics") is not None:
            try:
                metrics = HostMetrics.model_validate(status["metrics"])
            except ValidationError as exc:
                metrics_error = describe_validation_error(exc, under="status.metrics")
        return cls(
            Meta.of(obj),
            pool_ref(obj),
            spec,
            error,
            metrics,
            metrics_error,
            status,
            kept_body(obj),
        )


@dataclass(slots=True)
class PoolRecord:
    meta: Meta
    spec: HostPoolSpec | None
    spec_error: str | None
    status: dict[str, Any]
    body: dict[str, Any]

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> PoolRecord:
        spec: HostPoolSpec | None = None
        error: str | None = None
        try:
            spec = HostPoolSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            error = describe_validation_error(exc, under="spec")
        return cls(Meta.of(obj), spec, error, _status(obj), kept_body(obj))


@dataclass(slots=True)
class PlanRecord:
    """A ScalingPlan: its spec (None when invalid, with the error) and its status."""

    meta: Meta
    spec: ScalingPlanSpec | None
    spec_error: str | None
    status: dict[str, Any]
    body: dict[str, Any]

    @property
    def pools(self) -> tuple[str, ...]:
        return () if self.spec is None else tuple(ref.name for ref in self.spec.host_pool_refs)

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> PlanRecord:
        spec: ScalingPlanSpec | None = None
        error: str | None = None
        try:
            spec = ScalingPlanSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            error = describe_validation_error(exc, under="spec")
        return cls(Meta.of(obj), spec, error, _status(obj), kept_body(obj))


#: Deleted objects remembered by uid. A write's answer arrives within seconds of the write;
#: this many deletions inside that window is far beyond any storm measured.
TOMBSTONES = 20_000


class Tombstones:
    """The uids of objects whose deletion was observed, the newest ``limit`` of them.

    The operator feeds the answers of its own writes (a plan's drain or logoff) through the
    same path as watch events. An answer that arrives after the object's DELETED event must
    not bring it back: a request re-added so would hold a slot that nothing ever frees (the
    informer no longer knows it, so no relist removes it). A uid is never reused, so any
    later version of a buried uid is stale."""

    def __init__(self, limit: int = TOMBSTONES) -> None:
        self._limit = limit
        self._uids: dict[str, None] = {}

    def bury(self, uid: str) -> None:
        if not uid:
            return
        self._uids.pop(uid, None)
        self._uids[uid] = None
        if len(self._uids) > self._limit:
            del self._uids[next(iter(self._uids))]  # the oldest

    def __contains__(self, uid: object) -> bool:
        return uid in self._uids

    def __len__(self) -> int:
        return len(self._uids)
