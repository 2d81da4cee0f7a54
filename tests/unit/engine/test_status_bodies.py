"""What the operator writes into status: request statuses, session counts, host and pool
statuses with every condition reason, and when a condition's lastTransitionTime moves.

Every function under test is pure; ``now`` is fixed. Earlier statuses are fed back in as
the record's stored status, as the operator does after a write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.api import HostPoolSpec, Reason
from hostpool_operator.api.conditions import Cond, find, merge
from hostpool_operator.api.timestamps import rfc3339
from hostpool_operator.engine.balancer_view import BalancerHost, Placement
from hostpool_operator.engine.balancing import PoolBalancer
from hostpool_operator.engine.ledger import SessionLedger
from hostpool_operator.engine.records import HostRecord, PoolRecord, RequestRecord
from hostpool_operator.engine.status import (
    PoolFacts,
    PoolForHosts,
    SessionCounts,
    assigned_status,
    failed_status,
    host_status,
    is_saturated,
    ours,
    pending_message,
    pending_status,
    pool_status,
    same_status,
    says_pending,
    session_counts,
    zero_counts,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)
NOW_TEXT = "2026-11-29T12:00:00Z"
LATER_TEXT = "2026-11-29T12:05:00Z"

# Distinct generations per kind, so a status can only get its own.
REQUEST_GENERATION = 3
HOST_GENERATION = 2
POOL_GENERATION = 4

LIMIT_2: dict[str, Any] = {"loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 2}}
LIMIT_4: dict[str, Any] = {"loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 4}}
HORIZON_CONNECTING_2: dict[str, Any] = {
    "loadBalancer": {"type": "Horizon", "maxSessionLimit": 10},
    "horizon": {"logonStorm": {"connectingSessionThreshold": 2}},
}
HORIZON_LOAD_50: dict[str, Any] = {
    "loadBalancer": {"type": "Horizon", "maxSessionLimit": 10},
    "horizon": {"logonStorm": {"loadIndexThreshold": 50}},
}
TOO_OLD = "metrics older than 90s are ignored: the load index treats them as never reported"
FOREIGN = {
    "type": "AgentHealthy",
    "status": "True",
    "reason": "Heartbeat",
    "message": "seen 3s ago",
    "lastTransitionTime": "2026-11-01T00:00:00Z",
}


# ---------------------------------------------------------------------------- builders


def metadata(name: str, generation: int) -> dict[str, Any]:
    return {
        "namespace": "ns",
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": "7",
        "generation": generation,
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }


def request(
    status: Mapping[str, Any] | None = None, *, name: str = "r1", user: str = "alice"
) -> RequestRecord:
    return RequestRecord.of(
        {
            "metadata": metadata(name, REQUEST_GENERATION),
            "spec": {"poolRef": {"name": "desk"}, "user": user},
            "status": dict(status or {}),
        }
    )


def host(name: str = "h1", *, status: Mapping[str, Any] | None = None, **spec: Any) -> HostRecord:
    return HostRecord.of(
        {
            "metadata": metadata(name, HOST_GENERATION),
            "spec": {"poolRef": {"name": "desk"}, **spec},
            "status": dict(status or {}),
        }
    )


def pool(spec: Mapping[str, Any], *, status: Mapping[str, Any] | None = None) -> PoolRecord:
    return PoolRecord.of(
        {"metadata": metadata("desk", POOL_GENERATION), "spec": dict(spec), "status": status or {}}
    )


def engine(spec: Mapping[str, Any], views: Iterable[BalancerHost]) -> PoolBalancer:
    return PoolBalancer(HostPoolSpec.model_validate(spec), views)


def condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    found = find(status.get("conditions"), type_)
    assert found is not None, f"no {type_} condition in {status.get('conditions')}"
    return found


def gist(status: Mapping[str, Any], type_: str) -> tuple[str, str, str]:
    """A condition's (status, reason, message)."""
    c = condition(status, type_)
    return c["status"], c["reason"], c["message"]


def counts_of(total: int = 0, **states: int) -> dict[str, int]:
    return {**zero_counts(), "total": total, **states}


# ---------------------------------------------------------------------------- requests


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        (Reason.NEW_SESSION, "new session on h1"),
        (Reason.RECONNECTED, "reconnected to the session on h1"),
    ],
    ids=["NewSession", "Reconnected"],
)
def test_assigned_status_says_where_and_why(reason: Reason, message: str) -> None:
    record = request({"phase": "Pending", "reason": "PoolSaturated", "message": "wait"})
    status = assigned_status(record, Placement("h1", reason), "10.0.0.1", NOW)
    # Made without the broker: the connect begins at the request's creation, and the
    # assignment writes its queue.
    (connect,) = status.pop("connects")
    assert set(connect["phases"]) == {"queue"}
    assert connect.get("reconnect", False) is (reason is Reason.RECONNECTED)
    assert status == {
        "observedGeneration": REQUEST_GENERATION,
        "phase": "Assigned",
        "host": "h1",
        "hostAddress": "10.0.0.1",
        "reason": reason.value,
        "message": message,
        "sessionState": "Connecting",
        "assignedAt": NOW_TEXT,
        "stateChangedAt": NOW_TEXT,  # written with sessionState
        "conditions": [
            {
                "type": "Assigned",
                "status": "True",
                "reason": reason.value,
                "message": message,
                "lastTransitionTime": NOW_TEXT,
                "observedGeneration": REQUEST_GENERATION,
            }
        ],
    }


def test_assigned_status_keeps_unknown_fields_and_foreign_conditions() -> None:
    stored = {
        "phase": "Pending",
        "reason": "PoolSaturated",
        "agentNote": "kept",
        "clientHints": {"codec": "h264"},
        "conditions": [FOREIGN],
    }
    status = assigned_status(request(stored), Placement("h1", Reason.NEW_SESSION), None, NOW)
    assert status["agentNote"] == "kept"
    assert status["clientHints"] == {"codec": "h264"}
    assert find(status["conditions"], "AgentHealthy") == FOREIGN
    assert status["phase"] == "Assigned"  # the decision wins over the stored fields
    assert status["reason"] == "NewSession"


def test_assigned_status_drops_none_values_old_and_new() -> None:
    stored = {"hostAddress": "10.9.9.9", "leftover": None, "message": "wait"}
    status = assigned_status(request(stored), Placement("h1", Reason.NEW_SESSION), None, NOW)
    assert "hostAddress" not in status  # no address now: the stale one is not kept either
    assert "leftover" not in status
    assert None not in status.values()


def test_assigned_after_pending_flips_the_condition_time() -> None:
    pending = pending_status(request(), Reason.POOL_SATURATED, "full", NOW)
    status = assigned_status(request(pending), Placement("h1", Reason.NEW_SESSION), "a", LATER)
    assert condition(status, "Assigned")["lastTransitionTime"] == LATER_TEXT
    assert status["assignedAt"] == LATER_TEXT


def test_pending_status_is_a_merge_patch_that_clears_the_host() -> None:
    record = request({"phase": "Assigned", "host": "h1", "hostAddress": "a", "x": 1})
    status = pending_status(record, Reason.NO_ELIGIBLE_HOST, "all draining", NOW)
    assert status == {
        "observedGeneration": REQUEST_GENERATION,
        "phase": "Pending",
        "reason": "NoEligibleHost",
        "message": "all draining",
        "host": None,
        "hostAddress": None,
        "conditions": [
            {
                "type": "Assigned",
                "status": "False",
                "reason": "NoEligibleHost",
                "message": "all draining",
                "lastTransitionTime": NOW_TEXT,
                "observedGeneration": REQUEST_GENERATION,
            }
        ],
    }


def test_pending_again_for_another_reason_keeps_the_condition_time() -> None:
    first = pending_status(request(), Reason.POOL_SATURATED, "full", NOW)
    second = pending_status(request(first), Reason.NO_ELIGIBLE_HOST, "draining", LATER)
    assert gist(second, "Assigned") == ("False", "NoEligibleHost", "draining")
    assert condition(second, "Assigned")["lastTransitionTime"] == NOW_TEXT


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        (Reason.POOL_SATURATED, "every host that could take this session is at maxSessionLimit"),
        (
            Reason.NO_ELIGIBLE_HOST,
            "no host can take a new session now (drain mode, features or logon-storm limits)",
        ),
    ],
    ids=["PoolSaturated", "NoEligibleHost"],
)
def test_pending_message(reason: Reason, message: str) -> None:
    assert pending_message(reason) == message


def test_failed_status_is_phase_failed_with_the_reason_in_the_condition() -> None:
    record = request({"conditions": [FOREIGN]})
    status = failed_status(record, "HostDeleted", "SessionHost 'h1' was deleted", NOW)
    assert status["observedGeneration"] == REQUEST_GENERATION
    assert status["phase"] == "Failed"
    assert status["message"] == "SessionHost 'h1' was deleted"
    assert gist(status, "Assigned") == ("False", "HostDeleted", "SessionHost 'h1' was deleted")
    assert condition(status, "Assigned")["observedGeneration"] == REQUEST_GENERATION
    assert find(status["conditions"], "AgentHealthy") == FOREIGN


@pytest.mark.parametrize(
    ("stored", "asked", "expected"),
    [
        ({"phase": "Pending", "reason": "PoolSaturated"}, Reason.POOL_SATURATED, True),
        ({"phase": "Pending", "reason": "NoEligibleHost"}, Reason.POOL_SATURATED, False),
        ({"phase": "Assigned", "reason": "PoolSaturated"}, Reason.POOL_SATURATED, False),
        ({"reason": "PoolSaturated"}, Reason.POOL_SATURATED, False),
        ({"phase": "Pending"}, Reason.POOL_SATURATED, False),
        ({}, Reason.NO_ELIGIBLE_HOST, False),
    ],
    ids=["same", "other-reason", "assigned", "no-phase", "no-reason", "empty"],
)
def test_says_pending(stored: dict[str, Any], asked: Reason, expected: bool) -> None:
    assert says_pending(request(stored), asked) is expected


# ---------------------------------------------------------------------------- sessions


def ledger_with(
    sessions: Iterable[tuple[str, str, bool, list[str | None]]],
) -> tuple[SessionLedger, dict[str, RequestRecord]]:
    """(user, host, connecting, holder sessionStates): one request per holder."""
    ledger = SessionLedger()
    requests: dict[str, RequestRecord] = {}
    for user, host_name, connecting, states in sessions:
        until = NOW + timedelta(seconds=60) if connecting else None
        ledger.open(user, host_name, assigned_at=NOW, connecting_until=until)
        for i, state in enumerate(states):
            name = f"{user}-{i}"
            ledger.hold(user, name)
            requests[name] = request({} if state is None else {"sessionState": state}, name=name)
    return ledger, requests


@pytest.mark.parametrize(
    ("connecting", "states", "expected"),
    [
        (True, ["Connecting"], "connecting"),
        (True, ["Disconnected"], "connecting"),  # the ledger's deadline decides first
        (False, ["Active"], "active"),
        (False, [None], "active"),
        (False, ["Connecting"], "active"),
        (False, [], "active"),
        (False, ["Disconnected"], "disconnected"),
        (False, ["Disconnected", "Disconnected"], "disconnected"),
        (False, ["Disconnected", "Active"], "active"),
        (False, ["Active", "Disconnected"], "active"),
        (False, ["Disconnected", None], "active"),
    ],
    ids=[
        "connecting",
        "connecting-though-disconnected",
        "active",
        "no-state",
        "settled-connecting",
        "no-holders",
        "disconnected",
        "all-disconnected",
        "one-still-active",
        "one-still-active-first",
        "one-without-state",
    ],
)
def test_session_state_of_one_session(
    connecting: bool, states: list[str | None], expected: str
) -> None:
    ledger, requests = ledger_with([("alice", "h1", connecting, states)])
    counts = session_counts(ledger, requests)
    assert counts == {"h1": counts_of(1, **{expected: 1}), None: counts_of(1, **{expected: 1})}


def test_session_counts_per_host_and_pool_wide() -> None:
    ledger, requests = ledger_with(
        [
            ("a", "h1", True, ["Connecting"]),
            ("b", "h1", False, ["Disconnected", "Disconnected"]),
            ("c", "h1", False, ["Disconnected", "Active"]),
            ("d", "h2", False, ["Active"]),
            ("e", "h2", False, ["Disconnected"]),
            ("f", "h3", True, [None]),
        ]
    )
    assert session_counts(ledger, requests) == {
        "h1": counts_of(3, connecting=1, active=1, disconnected=1),
        "h2": counts_of(2, active=1, disconnected=1),
        "h3": counts_of(1, connecting=1),
        None: counts_of(6, connecting=2, active=2, disconnected=2),
    }


def test_session_counts_of_an_empty_ledger() -> None:
    assert session_counts(SessionLedger(), {}) == {}


# ---------------------------------------------------------------------------- hosts


def host_status_of(
    record: HostRecord,
    *,
    pool_spec: Mapping[str, Any] | None = LIMIT_2,
    view: Mapping[str, Any] | None = None,
    pool_exists: bool = True,
    counts: SessionCounts | None = None,
    buckets: Mapping[str, int] | None = None,
    metrics_stale: bool = False,
    now: datetime = NOW,
) -> dict[str, Any]:
    """The status of ``record``; ``view`` (BalancerHost fields) puts it into the pool's engine."""
    balancer = None
    if pool_spec is not None:
        views = [] if view is None else [BalancerHost(record.meta.name, **view)]
        balancer = engine(pool_spec, views)
    pool = PoolForHosts(
        pool_name="desk",
        pool_exists=pool_exists,
        balancer=balancer,
        counts=counts or {},
        buckets=buckets or {},
        metrics_stale_after=90.0,
        now=now,
    )
    return host_status(record, pool, metrics_stale=metrics_stale)


@pytest.mark.parametrize(
    ("host_spec", "pool_exists", "pool_spec", "view", "expected"),
    [
        pytest.param(
            {"features": {"protocols": ["SSH"]}},
            True,
            LIMIT_2,
            None,
            (
                "False",
                "InvalidSpec",
                "spec.features.protocols.0: Input should be 'RDP', 'PCOIP' or 'BLAST'",
            ),
            id="InvalidSpec",
        ),
        pytest.param(
            {"features": {"protocols": ["SSH"]}},
            False,
            None,
            None,
            (
                "False",
                "InvalidSpec",
                "spec.features.protocols.0: Input should be 'RDP', 'PCOIP' or 'BLAST'",
            ),
            id="InvalidSpec-before-PoolNotFound",
        ),
        pytest.param(
            {},
            False,
            None,
            None,
            ("False", "PoolNotFound", "HostPool 'desk' does not exist"),
            id="PoolNotFound",
        ),
        pytest.param(
            {},
            True,
            None,
            None,
            ("False", "PoolInvalid", "the pool's spec is invalid"),
            id="PoolInvalid",
        ),
        pytest.param(
            {"drainMode": True},
            True,
            LIMIT_2,
            {"drain_mode": True},
            ("False", "Draining", "drain mode: no new sessions; reconnects still allowed"),
            id="Draining",
        ),
        pytest.param(
            {"drainMode": True},
            True,
            LIMIT_2,
            {"drain_mode": True, "sessions": 2},
            ("False", "Draining", "drain mode: no new sessions; reconnects still allowed"),
            id="Draining-before-SessionLimitReached",
        ),
        pytest.param(
            {},
            True,
            LIMIT_2,
            {"sessions": 2},
            ("False", "SessionLimitReached", "2 sessions, limit 2"),
            id="SessionLimitReached-at-limit",
        ),
        pytest.param(
            {},
            True,
            LIMIT_2,
            {"sessions": 3},
            ("False", "SessionLimitReached", "3 sessions, limit 2"),
            id="SessionLimitReached-over-limit",
        ),
        pytest.param(
            {},
            True,
            HORIZON_CONNECTING_2,
            {"sessions": 2, "connecting": 2},
            (
                "False",
                "LogonStormThreshold",
                "turning new logons away: 2 sessions connecting, at or above the pool's "
                "horizon.logonStorm.connectingSessionThreshold (2)",
            ),
            id="LogonStormThreshold-connecting",
        ),
        pytest.param(
            {},
            True,
            HORIZON_LOAD_50,
            {"sessions": 5},
            (
                "False",
                "LogonStormThreshold",
                "turning new logons away: load index 50, at or above the pool's "
                "horizon.logonStorm.loadIndexThreshold (50)",
            ),
            id="LogonStormThreshold-load-index",
        ),
        pytest.param(
            {},
            True,
            HORIZON_CONNECTING_2,
            {"sessions": 2, "connecting": 1},
            ("True", "AcceptingSessions", "2 of 10 sessions"),
            id="AcceptingSessions-horizon-under-threshold",
        ),
        pytest.param(
            {},
            True,
            LIMIT_2,
            {"sessions": 1},
            ("True", "AcceptingSessions", "1 of 2 sessions"),
            id="AcceptingSessions",
        ),
    ],
)
def test_host_available_condition(
    host_spec: dict[str, Any],
    pool_exists: bool,
    pool_spec: dict[str, Any] | None,
    view: dict[str, Any] | None,
    expected: tuple[str, str, str],
) -> None:
    record = host(**host_spec)
    status = host_status_of(record, pool_spec=pool_spec, view=view, pool_exists=pool_exists)
    assert gist(status, "Available") == expected
    assert status["observedGeneration"] == HOST_GENERATION
    assert all(c["observedGeneration"] == HOST_GENERATION for c in status["conditions"])
    assert all(c["lastTransitionTime"] == NOW_TEXT for c in status["conditions"])


def test_a_host_the_engine_does_not_have_is_not_available() -> None:
    """A valid host withdrawn from the engine (being removed) takes nothing."""
    status = host_status_of(host(), pool_spec=LIMIT_2, view=None)
    assert condition(status, "Available")["status"] == "False"
    assert "loadIndex" not in status


@pytest.mark.parametrize(
    ("metrics", "stale", "expected"),
    [
        pytest.param(
            {"cpuPercent": 200},
            False,
            (
                "True",
                "InvalidMetrics",
                "status.metrics.cpuPercent: Input should be less than or equal to 100",
            ),
            id="InvalidMetrics",
        ),
        pytest.param(
            {"cpuPercent": 200},
            True,
            (
                "True",
                "InvalidMetrics",
                "status.metrics.cpuPercent: Input should be less than or equal to 100",
            ),
            id="InvalidMetrics-before-SampleTooOld",
        ),
        pytest.param(
            {"cpuPercent": 20, "sampledAt": "2026-11-29T11:00:00Z"},
            True,
            ("True", "SampleTooOld", TOO_OLD),
            id="SampleTooOld",
        ),
        pytest.param(
            {"cpuPercent": 20, "sampledAt": "2026-11-29T11:59:30Z"},
            False,
            ("False", "Fresh", ""),
            id="Fresh",
        ),
        pytest.param(None, False, ("False", "Fresh", ""), id="Fresh-no-metrics"),
    ],
)
def test_host_metrics_stale_condition(
    metrics: dict[str, Any] | None, stale: bool, expected: tuple[str, str, str]
) -> None:
    record = host(status={} if metrics is None else {"metrics": metrics})
    status = host_status_of(record, view={"sessions": 1}, metrics_stale=stale)
    assert gist(status, "MetricsStale") == expected
    assert condition(status, "MetricsStale")["observedGeneration"] == HOST_GENERATION


def test_host_load_index_and_sessions() -> None:
    counts: SessionCounts = {
        "h1": counts_of(1, active=1),
        "h2": counts_of(3, connecting=3),
        None: counts_of(4, connecting=3, active=1),
    }
    status = host_status_of(host(), pool_spec=LIMIT_4, view={"sessions": 1}, counts=counts)
    assert status["loadIndex"] == 25  # sessions/limit, by default
    assert status["sessions"] == counts_of(1, active=1)
    assert "bucket" not in status  # only hosts named in buckets (Horizon pools) have one


def test_host_without_sessions_counts_zero() -> None:
    status = host_status_of(host(), view={}, counts={None: counts_of(2, active=2)})
    assert status["sessions"] == counts_of(0)


@pytest.mark.parametrize("bucket", [1, 2, 3])
def test_host_bucket_comes_from_the_horizon_buckets(bucket: int) -> None:
    status = host_status_of(
        host(), pool_spec=HORIZON_CONNECTING_2, view={"sessions": 1}, buckets={"h1": bucket}
    )
    assert status["bucket"] == bucket
    assert status["loadIndex"] == 10


@pytest.mark.parametrize(
    ("host_spec", "pool_exists", "pool_spec"),
    [
        ({"features": {"protocols": ["SSH"]}}, True, HORIZON_CONNECTING_2),
        ({}, False, None),
        ({}, True, None),
    ],
    ids=["InvalidSpec", "PoolNotFound", "PoolInvalid"],
)
def test_host_outside_the_engine_has_no_load_index_or_bucket(
    host_spec: dict[str, Any], pool_exists: bool, pool_spec: dict[str, Any] | None
) -> None:
    record = host(**host_spec)
    status = host_status_of(record, pool_spec=pool_spec, pool_exists=pool_exists, buckets={"h1": 1})
    assert "loadIndex" not in status
    assert "bucket" not in status
    assert status["sessions"] == counts_of(0)


@pytest.mark.parametrize(
    ("before", "after", "moves"),
    [
        ({"drain_mode": True}, {"sessions": 2}, False),  # Draining -> SessionLimitReached
        ({"sessions": 0}, {"sessions": 1}, False),  # message only
        ({"sessions": 1}, {"sessions": 2}, True),  # AcceptingSessions -> SessionLimitReached
        ({"sessions": 2}, {"sessions": 1}, True),
        ({"drain_mode": True}, {}, True),
    ],
    ids=["reason-only", "message-only", "flip-to-full", "flip-to-free", "undrained"],
)
def test_host_available_transition_time(
    before: dict[str, Any], after: dict[str, Any], moves: bool
) -> None:
    first = host_status_of(host(), view=before, now=NOW)
    second = host_status_of(host(status=first), view=after, now=LATER)
    assert condition(second, "Available")["lastTransitionTime"] == (
        LATER_TEXT if moves else NOW_TEXT
    )
    assert condition(second, "MetricsStale")["lastTransitionTime"] == NOW_TEXT  # unchanged


def test_host_metrics_stale_transition_time() -> None:
    fresh = host_status_of(host(), view={}, now=NOW)
    stale = host_status_of(host(status=fresh), view={}, metrics_stale=True, now=LATER)
    assert condition(stale, "MetricsStale")["lastTransitionTime"] == LATER_TEXT
    # stale for another reason: still True, so the time stays
    invalid = host(status={**stale, "metrics": {"memoryPercent": -1}})
    again = host_status_of(invalid, view={}, now=LATER + timedelta(hours=1))
    assert gist(again, "MetricsStale")[:2] == ("True", "InvalidMetrics")
    assert condition(again, "MetricsStale")["lastTransitionTime"] == LATER_TEXT


def test_host_status_keeps_conditions_others_wrote() -> None:
    status = host_status_of(host(status={"conditions": [FOREIGN]}), view={})
    assert find(status["conditions"], "AgentHealthy") == FOREIGN
    types = {c["type"] for c in status["conditions"]}
    assert types == {"Available", "MetricsStale", "AgentHealthy"}


# ---------------------------------------------------------------------------- pools

INVALID_POOL: dict[str, Any] = {"loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 0}}
INVALID_POOL_ERROR = "spec.loadBalancer.maxSessionLimit: Input should be greater than or equal to 1"


def pool_status_of(
    record: PoolRecord,
    sessions: Iterable[int | tuple[int, bool]] = (),
    *,
    host_count: int | None = None,
    pending: int = 0,
    waiting: Iterable[Any] = (),
    scaling_limited: tuple[bool, str] | None = None,
    counts: SessionCounts | None = None,
    now: datetime = NOW,
) -> dict[str, Any]:
    """The pool's status with hosts h0, h1... in its engine; each host is its session count,
    or (sessions, drain mode)."""
    views = [
        BalancerHost(f"h{i}", sessions=s[0], drain_mode=s[1])
        if isinstance(s, tuple)
        else BalancerHost(f"h{i}", sessions=s)
        for i, s in enumerate(sessions)
    ]
    balancer = PoolBalancer(record.spec, views) if record.spec is not None else None
    facts = PoolFacts(
        host_count=len(views) if host_count is None else host_count,
        balancer=balancer,
        pending=pending,
        waiting_reasons=tuple(waiting),
        scaling_limited=scaling_limited,
        counts=counts or {},
    )
    return pool_status(record, facts, now=now)


@pytest.mark.parametrize(
    ("spec", "sessions", "host_count", "expected"),
    [
        pytest.param(
            INVALID_POOL, [], 2, ("False", "InvalidSpec", INVALID_POOL_ERROR), id="InvalidSpec"
        ),
        pytest.param(
            LIMIT_2, [], 0, ("True", "NoHosts", "the pool has no SessionHost yet"), id="NoHosts"
        ),
        pytest.param(
            LIMIT_2,
            [1, 2],
            2,
            ("True", "Reconciled", "1 of 2 hosts take new sessions"),
            id="Reconciled",
        ),
        pytest.param(
            LIMIT_2,
            [0],
            3,
            ("True", "Reconciled", "1 of 3 hosts take new sessions"),
            id="Reconciled-hosts-outside-the-engine",
        ),
    ],
)
def test_pool_ready_condition(
    spec: dict[str, Any], sessions: list[int], host_count: int, expected: tuple[str, str, str]
) -> None:
    status = pool_status_of(pool(spec), sessions, host_count=host_count)
    assert gist(status, "Ready") == expected


@pytest.mark.parametrize(
    ("spec", "sessions", "pending", "waiting", "expected"),
    [
        pytest.param(
            INVALID_POOL,
            [],
            0,
            [],
            ("Unknown", "InvalidSpec", "the spec is invalid"),
            id="InvalidSpec",
        ),
        pytest.param(
            LIMIT_2,
            [2, 2],
            3,
            ["PoolSaturated", "NoEligibleHost"],
            ("True", "RequestsWaiting", "3 request(s) wait for a free session slot"),
            id="RequestsWaiting",
        ),
        pytest.param(
            LIMIT_2,
            [2, 1],
            1,
            ["PoolSaturated"],
            ("True", "RequestsWaiting", "1 request(s) wait for a free session slot"),
            id="RequestsWaiting-though-a-slot-is-free",
        ),
        pytest.param(
            LIMIT_2,
            [2, 2],
            0,
            [],
            ("True", "NoFreeSessions", "every slot is taken"),
            id="NoFreeSessions",
        ),
        pytest.param(
            LIMIT_2,
            [2, 2],
            2,
            ["NoEligibleHost", None],
            ("True", "NoFreeSessions", "every slot is taken"),
            id="NoFreeSessions-others-waiting",
        ),
        pytest.param(
            LIMIT_2,
            [2, 1],
            1,
            ["NoEligibleHost"],
            ("False", "CapacityAvailable", "1 free slots"),
            id="CapacityAvailable",
        ),
        pytest.param(
            LIMIT_2,
            [],
            0,
            [],
            ("False", "CapacityAvailable", "0 free slots"),
            id="CapacityAvailable-no-hosts",
        ),
    ],
)
def test_pool_saturated_condition(
    spec: dict[str, Any],
    sessions: list[int],
    pending: int,
    waiting: list[Any],
    expected: tuple[str, str, str],
) -> None:
    status = pool_status_of(pool(spec), sessions, pending=pending, waiting=waiting)
    assert gist(status, "Saturated") == expected
    assert status["pendingRequests"] == pending


@pytest.mark.parametrize(
    ("scaling_limited", "expected"),
    [
        (
            (True, "maxHosts 3 reached; 2 more host(s) would be needed"),
            ("True", "MaxHostsReached", "maxHosts 3 reached; 2 more host(s) would be needed"),
        ),
        ((False, "2 of at most 10 hosts"), ("False", "WithinLimits", "2 of at most 10 hosts")),
    ],
    ids=["MaxHostsReached", "WithinLimits"],
)
def test_pool_scaling_limited_condition(
    scaling_limited: tuple[bool, str], expected: tuple[str, str, str]
) -> None:
    status = pool_status_of(pool(LIMIT_2), [1, 1], scaling_limited=scaling_limited)
    assert gist(status, "ScalingLimited") == expected


def test_pool_without_scaling_has_no_scaling_limited_condition() -> None:
    status = pool_status_of(pool(LIMIT_2), [1])
    assert find(status["conditions"], "ScalingLimited") is None
    assert {c["type"] for c in status["conditions"]} == {"Ready", "Saturated"}


def test_pool_counts() -> None:
    # h0 empty, h1 full, h2 draining, h3 draining and full; 5 hosts (one outside the engine)
    counts: SessionCounts = {
        "h1": counts_of(2, active=2),
        None: counts_of(5, connecting=1, active=3, disconnected=1),
    }
    status = pool_status_of(
        pool(LIMIT_2),
        [0, 2, (1, True), (2, True)],
        host_count=5,
        pending=4,
        counts=counts,
    )
    assert status["hosts"] == {
        "total": 5,
        "available": 1,
        "draining": 2,
        "full": 2,
        "notReady": 0,
        "agentSilent": 0,
    }
    assert status["capacity"] == {"total": 4, "free": 2}  # draining hosts give no slots
    assert status["sessions"] == counts_of(5, connecting=1, active=3, disconnected=1)
    assert status["pendingRequests"] == 4


def test_pool_counts_with_an_invalid_spec() -> None:
    status = pool_status_of(pool(INVALID_POOL), host_count=3, pending=2)
    assert status["hosts"] == {
        "total": 3,
        "available": 0,
        "draining": 0,
        "full": 0,
        "notReady": 0,
        "agentSilent": 0,
    }
    assert status["capacity"] == {"total": 0, "free": 0}
    assert status["sessions"] == counts_of(0)
    assert status["observedGeneration"] == POOL_GENERATION


@pytest.mark.parametrize("spec", [LIMIT_2, INVALID_POOL], ids=["valid", "invalid"])
def test_pool_observed_generation(spec: dict[str, Any]) -> None:
    status = pool_status_of(pool(spec), [1], scaling_limited=(False, "ok"))
    assert status["observedGeneration"] == POOL_GENERATION
    assert [c["observedGeneration"] for c in status["conditions"]] == [POOL_GENERATION] * 3


@pytest.mark.parametrize(
    ("before", "after", "moved"),
    [
        # Ready stays True (message changes), Saturated flips False -> True
        ([1], [2], {"Ready": False, "Saturated": True}),
        # Ready stays True with a new reason; Saturated stays False with a new message
        ([], [0], {"Ready": False, "Saturated": False}),
        # Saturated flips back True -> False
        ([2], [0], {"Ready": False, "Saturated": True}),
    ],
    ids=["saturates", "first-host", "recovers"],
)
def test_pool_condition_transition_times(
    before: list[int], after: list[int], moved: dict[str, bool]
) -> None:
    first = pool_status_of(pool(LIMIT_2), before, now=NOW)
    second = pool_status_of(pool(LIMIT_2, status=first), after, now=LATER)
    for type_, moves in moved.items():
        assert condition(second, type_)["lastTransitionTime"] == (
            LATER_TEXT if moves else NOW_TEXT
        ), type_


def test_pool_saturated_reason_change_keeps_the_time() -> None:
    first = pool_status_of(pool(LIMIT_2), [2], pending=1, waiting=["PoolSaturated"], now=NOW)
    assert gist(first, "Saturated")[:2] == ("True", "RequestsWaiting")
    second = pool_status_of(pool(LIMIT_2, status=first), [2], now=LATER)
    assert gist(second, "Saturated")[:2] == ("True", "NoFreeSessions")
    assert condition(second, "Saturated")["lastTransitionTime"] == NOW_TEXT


def test_pool_scaling_limited_transition_time() -> None:
    first = pool_status_of(pool(LIMIT_2), [1], scaling_limited=(False, "1 of at most 1"), now=NOW)
    record = pool(LIMIT_2, status=first)
    same = pool_status_of(record, [1], scaling_limited=(False, "2 of at most 3"), now=LATER)
    flipped = pool_status_of(record, [1], scaling_limited=(True, "maxHosts 1 reached"), now=LATER)
    assert condition(same, "ScalingLimited")["lastTransitionTime"] == NOW_TEXT
    assert condition(flipped, "ScalingLimited")["lastTransitionTime"] == LATER_TEXT


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], (False, "")),
        ([{"type": "Saturated", "status": "True", "message": "full"}], (True, "full")),
        ([{"type": "Saturated", "status": "False", "message": "2 free"}], (False, "2 free")),
        ([{"type": "Saturated", "status": "Unknown", "message": "?"}], (False, "?")),
        ([{"type": "Ready", "status": "True", "message": "ok"}], (False, "")),
        ([{"type": "Saturated", "status": "True"}], (True, "")),
    ],
    ids=["none", "true", "false", "unknown", "other-type", "no-message"],
)
def test_is_saturated(conditions: list[dict[str, Any]], expected: tuple[bool, str]) -> None:
    assert is_saturated({"conditions": conditions}) == expected


def test_is_saturated_reads_what_pool_status_wrote() -> None:
    full = pool_status_of(pool(LIMIT_2), [2, 2])
    free = pool_status_of(pool(LIMIT_2), [2, 1])
    assert is_saturated(full) == (True, "every slot is taken")
    assert is_saturated(free) == (False, "1 free slots")


# ---------------------------------------------------------------------------- comparing


def test_ours_takes_the_template_keys_from_current() -> None:
    current = {"phase": "Assigned", "metrics": {"cpuPercent": 1}, "sessions": {"total": 1}}
    template = {"sessions": {"total": 2}, "loadIndex": 5}
    assert ours(current, template) == {"sessions": {"total": 1}, "loadIndex": None}


def test_same_status_of_a_rewritten_host_status() -> None:
    """What the flusher compares: a status recomputed later with no change is the same."""
    first = host_status_of(host(), view={"sessions": 1}, now=NOW)
    again = host_status_of(host(), view={"sessions": 1}, now=LATER)  # no stored status: new times
    assert again != first
    assert same_status(first, again)
    assert not same_status(first, host_status_of(host(), view={"sessions": 2}, now=NOW))


@pytest.mark.parametrize(
    "change",
    [
        {"observedGeneration": 9},
        {"sessions": {"total": 1}},
        {"conditions": [{"type": "Ready", "status": "False", "reason": "R", "message": "m"}]},
        {"conditions": [{"type": "Ready", "status": "True", "reason": "S", "message": "m"}]},
        {"conditions": [{"type": "Ready", "status": "True", "reason": "R", "message": "n"}]},
        {"conditions": []},
    ],
    ids=["generation", "counts", "cond-status", "cond-reason", "cond-message", "cond-gone"],
)
def test_same_status_sees_every_other_change(change: dict[str, Any]) -> None:
    base = {
        "observedGeneration": 1,
        "sessions": {"total": 0},
        "conditions": [{"type": "Ready", "status": "True", "reason": "R", "message": "m"}],
    }
    assert same_status(base, base)
    assert not same_status(base, {**base, **change})


times = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)
).map(rfc3339)
condition_bodies = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["Ready", "Saturated", "ScalingLimited", "AgentHealthy"]),
        "status": st.sampled_from(["True", "False", "Unknown"]),
        "reason": st.sampled_from(["Reconciled", "NoHosts", "RequestsWaiting", ""]),
        "message": st.text(max_size=8),
    }
)
other_fields = st.dictionaries(
    st.sampled_from(["observedGeneration", "pendingRequests", "phase", "loadIndex"]),
    st.one_of(st.integers(-5, 5), st.text(max_size=4)),
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(
    fields=other_fields,
    bodies=st.lists(condition_bodies, max_size=4),
    times_a=st.lists(st.one_of(st.none(), times), min_size=4, max_size=4),
    times_b=st.lists(st.one_of(st.none(), times), min_size=4, max_size=4),
    flip=st.integers(0, 3),
)
def test_property_same_status_ignores_only_transition_times(
    fields: dict[str, Any],
    bodies: list[dict[str, Any]],
    times_a: list[str | None],
    times_b: list[str | None],
    flip: int,
) -> None:
    def with_times(ts: list[str | None]) -> dict[str, Any]:
        conds = [
            body if t is None else {**body, "lastTransitionTime": t}
            for body, t in zip(bodies, ts, strict=False)
        ]
        return {**fields, "conditions": conds}

    a, b = with_times(times_a), with_times(times_b)
    assert same_status(a, b)
    assert same_status(b, a)
    if bodies:
        i = flip % len(bodies)
        other = {"True": "False", "False": "Unknown", "Unknown": "True"}[bodies[i]["status"]]
        changed = [dict(c) for c in b["conditions"]]
        changed[i]["status"] = other
        assert not same_status(a, {**b, "conditions": changed})


CONDITION_TYPES = ["Ready", "Saturated", "Available", "AgentHealthy"]
existing_conditions = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(CONDITION_TYPES),
            "status": st.sampled_from(["True", "False", "Unknown"]),
            "reason": st.sampled_from(["A", "B"]),
            "message": st.text(max_size=4),
        },
        optional={"lastTransitionTime": st.one_of(times, st.just(""))},
    ),
    max_size=6,
)
desired_conditions = st.lists(
    st.builds(
        Cond,
        st.sampled_from(CONDITION_TYPES[:3]),
        st.sampled_from(["True", "False", "Unknown"]),
        st.sampled_from(["A", "B", "C"]),
        st.text(max_size=4),
    ),
    max_size=3,
    unique_by=lambda c: c.type,
)


@settings(max_examples=200, deadline=None)
@given(
    existing=existing_conditions,
    desired=desired_conditions,
    generation=st.one_of(st.none(), st.integers(0, 10)),
)
def test_property_merge_moves_transition_time_only_on_a_status_flip(
    existing: list[dict[str, Any]], desired: list[Cond], generation: int | None
) -> None:
    out = merge(existing, desired, now=LATER, generation=generation)
    before = {c["type"]: c for c in existing}  # the last of a type counts, as in merge
    for want in desired:
        got = find(out, want.type)
        assert got is not None
        assert (got["status"], got["reason"], got["message"]) == tuple(want[1:])
        old = before.get(want.type)
        if old is not None and old["status"] == want.status and old.get("lastTransitionTime"):
            assert got["lastTransitionTime"] == old["lastTransitionTime"]
        else:
            assert got["lastTransitionTime"] == LATER_TEXT
        assert got.get("observedGeneration") == generation
    wanted = {c.type for c in desired}
    kept = [c for c in out if c["type"] not in wanted]
    assert kept == [c for t, c in before.items() if t not in wanted]  # others' untouched


# ---------------------------------------------------------------------------- scaling plan

NIGHT_PLAN = {"name": "night", "schedule": "weekdays", "phase": "OffPeak",
              "loadBalancerType": "DepthFirst"}  # fmt: skip


def pool_status_with_plan(
    record: PoolRecord, scaling_plan: Mapping[str, Any] | None
) -> dict[str, Any]:
    facts = PoolFacts(
        host_count=0,
        balancer=engine(LIMIT_2, []),
        pending=0,
        waiting_reasons=(),
        scaling_limited=None,
        counts={},
        scaling_plan=scaling_plan,
    )
    return pool_status(record, facts, now=NOW)


def test_pool_scaling_plan_written_when_given() -> None:
    status = pool_status_with_plan(pool(LIMIT_2), NIGHT_PLAN)
    assert status["scalingPlan"] == NIGHT_PLAN
    # Another plan or phase replaces the stored one.
    peak = {"name": "night", "schedule": "weekdays", "phase": "Peak",
            "loadBalancerType": "BreadthFirst"}  # fmt: skip
    stored = pool(LIMIT_2, status={"scalingPlan": NIGHT_PLAN})
    assert pool_status_with_plan(stored, peak)["scalingPlan"] == peak


def test_pool_scaling_plan_cleared_with_none_when_stored_and_not_given() -> None:
    stored = pool(LIMIT_2, status={"scalingPlan": NIGHT_PLAN})
    status = pool_status_with_plan(stored, None)
    assert "scalingPlan" in status
    assert status["scalingPlan"] is None  # a merge patch's null removes it


def test_pool_scaling_plan_absent_when_neither_stored_nor_given() -> None:
    assert "scalingPlan" not in pool_status_with_plan(pool(LIMIT_2), None)
    assert "scalingPlan" not in pool_status_of(pool(LIMIT_2), [1])
    # A stored null (cleared before) is not cleared again.
    assert "scalingPlan" not in pool_status_with_plan(
        pool(LIMIT_2, status={"scalingPlan": None}), None
    )


def test_a_request_that_fails_ends_its_connect_under_way_where_it_was() -> None:
    waiting = request({"phase": "Pending", "reason": "HostsStarting", "connects": [
        {"ref": "ABCDEFGH", "startedAt": "2026-01-01T00:00:00Z"}]})  # fmt: skip
    (connect,) = failed_status(waiting, "PoolDeleted", "the pool was deleted", NOW)["connects"]
    assert (connect["outcome"], connect["failedPhase"], connect["reason"]) == (
        "Failed",
        "queue",
        "PoolDeleted",
    )
    ended = {"ref": "ABCDEFGH", "startedAt": "2026-01-01T00:00:00Z", "outcome": "Succeeded"}
    done = request({"phase": "Assigned", "connects": [ended]})
    assert "connects" not in failed_status(done, "HostDeleted", "gone", NOW)
