"""A pool's update, read from its state: the operator's hosts as the update sees them, what
the pool's status remembers of the update, and the step.

Pure functions of a :class:`PoolState` and ``now``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from ..api.timestamps import parse_time
from ..api.update import UpdatePhase
from ..api.vocabulary import (
    REPLACED_BY_ANNOTATION,
    TEMPLATE_REVISION_LABEL,
    UPDATE_DRAINED_ANNOTATION,
)
from ..engine.pool_state import PoolState
from ..engine.records import HostRecord
from ..engine.workloads import Gate
from .step import RolloutHost, RolloutStep, UpdateHistory, decide


def annotation(host: HostRecord, key: str) -> str | None:
    metadata = host.body.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    value = annotations.get(key) if isinstance(annotations, Mapping) else None
    return value if isinstance(value, str) and value else None


def ready_since(state: PoolState, host: HostRecord) -> datetime | None:
    """When the host's workload last became Ready (its Ready condition's transition), or
    when the host was made, for a host without a workload."""
    if host.spec is None or host.spec.workload_ref is None:
        return parse_time(host.meta.created)
    workload = state.workloads.get(host.meta.name)
    if workload is None or not workload.ready:
        return None
    conditions = workload.readable.get("status", {}).get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return parse_time(condition.get("lastTransitionTime")) or workload.created
    return workload.created


def rollout_hosts(state: PoolState, now: datetime) -> list[RolloutHost]:
    """The hosts the operator made for the pool, except those being removed."""
    hosts = []
    for name, record in sorted(state.hosts.items()):
        if not record.managed or name in state.removing:
            continue
        view = state.views.view(record, now)
        workload = state.workload_state(record, now)
        not_ready = None
        if workload is not None and workload.gate is not Gate.OPEN:
            not_ready = workload.message
        hosts.append(
            RolloutHost(
                name=name,
                revision=record.meta.labels.get(TEMPLATE_REVISION_LABEL),
                sessions=state.ledger.count_on(name),
                serving=view is not None and not view.drain_mode,
                created=parse_time(record.meta.created),
                not_ready=not_ready,
                ready_since=ready_since(state, record),
                replaced_by=annotation(record, REPLACED_BY_ANNOTATION),
                drained_at=parse_time(annotation(record, UPDATE_DRAINED_ANNOTATION)),
            )
        )
    return hosts


def history(state: PoolState) -> UpdateHistory:
    """What the pool's status.update says (nothing, when it is missing or malformed)."""
    status = state.pool.status.get("update") if state.pool is not None else None
    if not isinstance(status, Mapping):
        return UpdateHistory()
    try:
        phase: UpdatePhase | None = UpdatePhase(str(status.get("phase")))
    except ValueError:
        phase = None
    revision = status.get("revision")
    message = status.get("message")
    return UpdateHistory(
        phase=phase,
        revision=revision if isinstance(revision, str) else None,
        message=message if isinstance(message, str) else None,
        canary_passed=status.get("canaryPassed") is True,
    )


def step(state: PoolState, now: datetime) -> RolloutStep | None:
    """The update's step now (None: the pool has no template, so no hosts of its own to
    update)."""
    spec = state.spec
    if spec is None or spec.scaling is None or state.revision is None:
        return None
    return decide(
        spec.update_settings, state.revision, rollout_hosts(state, now), history(state), now
    )
