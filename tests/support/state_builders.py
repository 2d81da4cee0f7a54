"""Builders for the pure per-pool tests (tests/unit/engine/test_pool_state.py,
test_placement.py and their neighbours): API-shaped objects with uid, resourceVersion and
creationTimestamp (``support.builders`` has the manifests sent to a cluster, without them),
and a ``PoolState`` fed with observations the way the operator feeds it. Every time is
``T0`` plus an offset: no clock is read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from hostpool_operator.api import Phase
from hostpool_operator.engine.placement import Assign, Intent, Wait, place_pending
from hostpool_operator.engine.pool_state import PoolState
from hostpool_operator.engine.records import HostRecord, PoolRecord, RequestRecord
from hostpool_operator.engine.status import assigned_status

Obj = dict[str, Any]

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NS = "ns"
POOL = "p"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def metadata(
    name: str, *, rv: int = 1, uid: str | None = None, created: int = 0, labels: Obj | None = None
) -> Obj:
    return {
        "namespace": NS,
        "name": name,
        "uid": uid or f"uid-{name}",
        "resourceVersion": str(rv),
        "generation": 1,
        "creationTimestamp": (T0 + timedelta(seconds=created)).isoformat().replace("+00:00", "Z"),
        "labels": labels or {},
    }


def pool_obj(limit: int | None = 2, lb_type: str = "DepthFirst", **spec: Any) -> Obj:
    lb: Obj = {"type": lb_type}
    if limit is not None:
        lb["maxSessionLimit"] = limit
    return {"metadata": metadata(POOL), "spec": {"loadBalancer": lb, **spec}}


def host_obj(name: str, *, created: int = 0, labels: Obj | None = None, **spec: Any) -> Obj:
    return {
        "metadata": metadata(name, created=created, labels=labels),
        "spec": {"poolRef": {"name": POOL}, **spec},
    }


def request_obj(
    name: str, user: str = "alice", *, rv: int = 1, status: Obj | None = None, **spec: Any
) -> Obj:
    obj: Obj = {
        "metadata": metadata(name, rv=rv),
        "spec": {"poolRef": {"name": POOL}, "user": user, **spec},
    }
    if status is not None:
        obj["status"] = status
    return obj


def assigned(host: str, *, state: str = "Active", reason: str = "NewSession", when: int = 0) -> Obj:
    """The status of a request the operator assigned (``when`` seconds after T0)."""
    return {
        "phase": Phase.ASSIGNED.value,
        "host": host,
        "reason": reason,
        "sessionState": state,
        "assignedAt": (T0 + timedelta(seconds=when)).isoformat().replace("+00:00", "Z"),
    }


class Pool:
    """A PoolState fed with observations, with the operator's arrival sequence."""

    def __init__(
        self, pool: Obj | None = None, hosts: Iterable[Obj] = (), *, now: datetime = T0
    ) -> None:
        self.state = PoolState(NS, POOL)
        self._seq = itertools.count(1)
        if pool is not None:
            self.state.set_pool(PoolRecord.of(pool), now)
        for host in hosts:
            self.state.put_host(HostRecord.of(host), now)

    def put(self, obj: Obj, *, now: datetime = T0, seq: int | None = None) -> RequestRecord | None:
        number = next(self._seq) if seq is None else seq
        record = RequestRecord.of(obj)
        return self.state.put_request(record, now, seq=lambda: number, seen=0.0)

    def arrive(
        self, name: str, user: str = "alice", *, now: datetime = T0, seq: int | None = None
    ) -> None:
        assert self.put(request_obj(name, user), now=now, seq=seq) is None

    def session(self, name: str, user: str, host: str, *, now: datetime = T0) -> None:
        """A request observed Assigned (and Active) on ``host``."""
        assert self.put(request_obj(name, user, status=assigned(host)), now=now) is None

    def place(self, now: datetime = T0) -> list[Intent]:
        return place_pending(self.state, now)

    def written(self, intent: Intent, now: datetime = T0) -> None:
        """The assignment write succeeded: the request is Assigned as the API answered."""
        assert isinstance(intent, Assign)
        record = intent.record
        obj = request_obj(
            record.meta.name,
            record_user(record),
            rv=int(record.meta.resource_version) + 1,
            status=assigned_status(record, intent.placement, None, now),
        )
        fresh = RequestRecord.of(obj)
        fresh.seq, fresh.seen = record.seq, record.seen
        self.state.inflight.discard(record.meta.name)
        self.state.requests[record.meta.name] = fresh


def record_user(record: RequestRecord) -> str:
    assert record.demand is not None
    return record.demand.user


def summary(intents: list[Intent]) -> list[tuple[str, str, str | None, bool]]:
    """Placement's intents, in a form a table can name: ("assign", request, host, claimed)
    or ("wait", request, reason, False)."""
    out: list[tuple[str, str, str | None, bool]] = []
    for intent in intents:
        if isinstance(intent, Assign):
            out.append(("assign", intent.record.meta.name, intent.placement.host, intent.claim))
        else:
            assert isinstance(intent, Wait)
            out.append(("wait", intent.record.meta.name, intent.reason.value, False))
    return out
