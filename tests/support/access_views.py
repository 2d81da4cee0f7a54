"""The broker's views of a pool and of a request (``hostpool_operator.access.views``), built
from the objects the API server would hand it, for the tests of its pure decisions: pool
``ns/desk`` (depth-first, two sessions a host) and its requests."""

from __future__ import annotations

from typing import Any

from hostpool_operator.access.views import HostView, PoolView, RequestView


def pool_view(
    users: list[str] | None = None,
    groups: list[str] | None = None,
    *,
    free: int | None = 3,
    connection: dict[str, object] | None = None,
) -> PoolView:
    """Pool ``ns/desk``: entitlements only when users or groups are given, ``free`` slots by
    its status (None: the operator wrote no status yet)."""
    spec: dict[str, object] = {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 2}}
    if users is not None or groups is not None:
        spec["entitlements"] = {"users": users or [], "groups": groups or []}
    if connection is not None:
        spec["connection"] = connection
    return PoolView.from_api(
        {
            "metadata": {"namespace": "ns", "name": "desk"},
            "spec": spec,
            "status": {"capacity": {"free": free}} if free is not None else {},
        }
    )


def request_view(
    name: str = "r",
    user: str = "alice",
    *,
    phase: str | None = None,
    host: str | None = None,
    address: str | None = None,
    reason: str | None = None,
    logoff: dict[str, Any] | None = None,
    deleted_at: str | None = None,
) -> RequestView:
    """A request of ``user`` in pool ``ns/desk``: the status fields given (``logoff`` is
    status.logoff as it stands), deleted at ``deleted_at`` (its deletionTimestamp)."""
    status: dict[str, object] = {}
    if phase:
        status["phase"] = phase
    if host:
        status["host"] = host
    if address:
        status["hostAddress"] = address
    if reason:
        status["reason"] = reason
    if logoff:
        status["logoff"] = logoff
    meta: dict[str, object] = {"namespace": "ns", "name": name, "uid": "u1", "resourceVersion": "7"}
    if deleted_at:
        meta["deletionTimestamp"] = deleted_at
    return RequestView.from_api(
        {"metadata": meta, "spec": {"poolRef": {"name": "desk"}, "user": user}, "status": status}
    )


def host_view(
    name: str = "h1",
    *,
    status: dict[str, Any] | None = None,
    pool: str | None = None,
    user: str | None = None,
) -> HostView:
    """Host ``ns/name``: its status as given (None: none written yet), in ``pool`` when
    given, assigned to ``user`` when given."""
    obj: dict[str, Any] = {"metadata": {"namespace": "ns", "name": name}}
    spec: dict[str, Any] = {}
    if pool is not None:
        spec["poolRef"] = {"name": pool}
    if user is not None:
        spec["assignedUser"] = user
    if spec:
        obj["spec"] = spec
    if status is not None:
        obj["status"] = status
    return HostView.from_api(obj)
