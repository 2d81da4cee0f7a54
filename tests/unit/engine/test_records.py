"""Records: what the operator keeps of each object the API sends, a malformed spec or
metrics block becoming an error message that names the field instead of an exception."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from hostpool_operator.api import LoadBalancerType, Protocol
from hostpool_operator.api.timestamps import parse_time
from hostpool_operator.api.vocabulary import MANAGED_LABEL, MANAGER
from hostpool_operator.engine.demand import Demand
from hostpool_operator.engine.records import (
    HostRecord,
    Meta,
    PlanRecord,
    PoolRecord,
    RequestRecord,
    kept_body,
    newer_or_same,
    pool_ref,
    query_order,
)

METADATA: dict[str, Any] = {
    "namespace": "ns",
    "name": "h1",
    "uid": "u1",
    "resourceVersion": "7",
    "generation": 2,
    "creationTimestamp": "2026-01-01T00:00:00Z",
    "labels": {"team": "vdi"},
}


def obj(spec: Any, status: Any = None, **metadata: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {**METADATA, **metadata}, "spec": spec}
    if status is not None:
        out["status"] = status
    return out


# ---------------------------------------------------------------------------- Meta


def test_meta_of_an_api_object() -> None:
    meta = Meta.of(obj({}))
    assert meta == Meta(
        namespace="ns",
        name="h1",
        uid="u1",
        resource_version="7",
        generation=2,
        created="2026-01-01T00:00:00Z",
        labels={"team": "vdi"},
    )


@pytest.mark.parametrize("metadata", [{}, {"generation": None, "labels": None}], ids=str)
def test_meta_defaults_when_fields_are_missing(metadata: dict[str, Any]) -> None:
    meta = Meta.of({"metadata": metadata})
    assert meta == Meta("", "", "", "", 0, "", {})


def test_meta_without_metadata() -> None:
    assert Meta.of({}) == Meta("", "", "", "", 0, "", {})


def test_meta_labels_are_a_copy() -> None:
    body = obj({})
    meta = Meta.of(body)
    assert meta.labels == {"team": "vdi"}
    assert meta.labels is not body["metadata"]["labels"]


def test_meta_reference_names_the_object_for_an_event() -> None:
    assert Meta.of(obj({})).reference() == {
        "metadata": {"namespace": "ns", "name": "h1", "uid": "u1", "resourceVersion": "7"}
    }


# ---------------------------------------------------------------------------- requests


def test_request_record_of_a_valid_request() -> None:
    status = {"phase": "Assigned", "host": "h2", "sessionState": "Active"}
    record = RequestRecord.of(
        obj(
            {
                "poolRef": {"name": "desk"},
                "user": "ann",
                "protocol": "RDP",
                "unauthenticated": True,
            },
            status,
        )
    )
    assert record.pool == "desk"
    assert record.demand == Demand("ann", Protocol.RDP, True)
    assert record.spec_error is None
    assert record.status == status
    assert record.status is not status  # a copy
    assert (record.phase, record.host, record.session_state) == ("Assigned", "h2", "Active")
    assert record.meta.generation == 2


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"poolRef": {"name": "desk"}}, "spec.user: Field required"),
        ({"poolRef": {"name": "desk"}, "user": ""}, "spec.user: String should have at least 1"),
        (
            {"poolRef": {"name": "desk"}, "user": "a", "protocol": "SSH"},
            "spec.protocol: Input should be 'RDP', 'PCOIP' or 'BLAST'",
        ),
        ({"user": "a"}, "spec.poolRef: Field required"),
        ("junk", "spec: Input should be a valid dictionary"),
    ],
    ids=["no-user", "empty-user", "protocol", "no-poolRef", "not-a-mapping"],
)
def test_request_record_with_an_invalid_spec(spec: Any, error: str) -> None:
    record = RequestRecord.of(obj(spec))
    assert record.demand is None
    assert record.spec_error is not None
    assert record.spec_error.startswith(error)


@pytest.mark.parametrize("status", [None, "junk", ["a"], 5], ids=str)
def test_request_record_status_that_is_no_mapping_is_empty(status: Any) -> None:
    body = obj({"poolRef": {"name": "desk"}, "user": "a"})
    body["status"] = status
    assert RequestRecord.of(body).status == {}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({}, (None, None, None, None)),
        (
            {
                "phase": "Assigned",
                "host": "h1",
                "sessionState": "Active",
                "assignedAt": "2026-11-29T12:00:00Z",
            },
            ("Assigned", "h1", "Active", datetime(2026, 11, 29, 12, 0, tzinfo=UTC)),
        ),
        (
            {"phase": 1, "host": ["h1"], "sessionState": {}, "assignedAt": "soon"},
            (None, None, None, None),
        ),
    ],
    ids=["empty", "set", "wrong-types"],
)
def test_request_record_properties(status: dict[str, Any], expected: tuple[Any, ...]) -> None:
    record = RequestRecord.of(obj({"poolRef": {"name": "desk"}, "user": "a"}, status))
    assert (record.phase, record.host, record.session_state, record.assigned_at) == expected


@pytest.mark.parametrize(
    "status",
    [
        {},
        {
            "observedGeneration": 2,
            "phase": "Assigned",
            "host": "h1",
            "hostAddress": "10.0.0.1",
            "reason": "NewSession",
            "message": "new session on h1",
            "sessionState": "Active",
            "assignedAt": "2026-11-29T12:00:00Z",
            "logoff": {"message": "bye", "notifiedAt": "2026-11-29T13:00:00Z"},
            "conditions": [{"type": "Assigned", "status": "True", "reason": "NewSession"}],
            "someFieldOfALaterVersion": {"kept": True},
        },
        {"phase": 1, "host": ["h1"], "reason": None, "sessionState": {}, "message": "x"},
    ],
    ids=["empty", "whole", "wrong-types"],
)
def test_request_record_keeps_the_whole_status_for_its_writes(status: dict[str, Any]) -> None:
    """The record keeps some fields apart and the rest encoded: the status a write starts
    from is still the stored one, every field and value of it."""
    record = RequestRecord.of(obj({"poolRef": {"name": "desk"}, "user": "a"}, status))
    assert record.status == status
    assert record.logoff is bool(status.get("logoff"))
    assert record.reason == (
        status.get("reason") if isinstance(status.get("reason"), str) else None
    )


# ---------------------------------------------------------------------------- hosts


MANAGED_FIELDS = [
    {
        "manager": "kubectl",
        "operation": "Update",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:poolRef": {"f:name": {}}}},
    }
]


def test_kept_body_leaves_out_managed_fields_only() -> None:
    body = obj({"poolRef": {"name": "desk"}}, {"x": 1}, managedFields=MANAGED_FIELDS)
    kept = kept_body(body)
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"] == METADATA
    assert (kept["spec"], kept["status"]) == (body["spec"], body["status"])
    assert body["metadata"]["managedFields"] == MANAGED_FIELDS  # the object is untouched


@pytest.mark.parametrize(
    "of",
    [HostRecord.of, PoolRecord.of, PlanRecord.of],
    ids=["host", "pool", "plan"],
)
def test_records_keep_no_managed_fields(of: Any) -> None:
    record = of(obj({"poolRef": {"name": "desk"}}, managedFields=MANAGED_FIELDS))
    assert "managedFields" not in record.body["metadata"]
    assert record.body["metadata"]["uid"] == "u1"


def test_request_record_keeps_no_labels() -> None:
    # No decision reads a request's labels; 100,000 requests would each hold a copy.
    record = RequestRecord.of(obj({"poolRef": {"name": "desk"}, "user": "ann"}))
    assert dict(record.meta.labels) == {}
    with pytest.raises(TypeError):
        record.meta.labels["x"] = "y"  # type: ignore[index]


def test_creation_times_are_shared() -> None:
    first, second = (
        RequestRecord.of(obj({"poolRef": {"name": "d"}, "user": u}, name=u)) for u in ("a", "b")
    )
    assert first.meta.created == METADATA["creationTimestamp"]
    assert first.meta.created is second.meta.created


def test_host_record_of_a_valid_host() -> None:
    body = obj(
        {"poolRef": {"name": "desk"}, "drainMode": True, "address": "10.0.0.1"},
        {"metrics": {"cpuPercent": 40, "sampledAt": "2026-11-29T12:00:00Z"}, "x": 1},
        labels={MANAGED_LABEL: MANAGER},
    )
    record = HostRecord.of(body)
    assert record.pool == "desk"
    assert record.spec is not None
    assert (record.spec.drain_mode, record.spec.address) == (True, "10.0.0.1")
    assert record.spec_error is None
    assert record.metrics is not None
    assert record.metrics.cpu_percent == 40
    assert record.metrics.sampled_at == datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    assert record.metrics_error is None
    assert record.status == body["status"]
    assert record.body == body
    assert record.managed


@pytest.mark.parametrize(
    ("labels", "managed"),
    [
        ({MANAGED_LABEL: MANAGER}, True),
        ({MANAGED_LABEL: "someone-else"}, False),
        ({}, False),
    ],
    ids=["ours", "other-manager", "unlabelled"],
)
def test_host_record_managed(labels: dict[str, str], managed: bool) -> None:
    assert HostRecord.of(obj({"poolRef": {"name": "p"}}, labels=labels)).managed is managed


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({}, "spec.poolRef: Field required"),
        ({"poolRef": {"name": ""}}, "spec.poolRef.name: String should have at least 1"),
        (
            {"poolRef": {"name": "p"}, "features": {"protocols": ["SSH"]}},
            "spec.features.protocols.0: Input should be 'RDP', 'PCOIP' or 'BLAST'",
        ),
        ({"poolRef": {"name": "p"}, "color": "red"}, "spec.color: Extra inputs are not permitted"),
    ],
    ids=["no-poolRef", "empty-pool-name", "protocol", "unknown-field"],
)
def test_host_record_with_an_invalid_spec(spec: dict[str, Any], error: str) -> None:
    record = HostRecord.of(obj(spec, {"metrics": {"cpuPercent": 10}}))
    assert record.spec is None
    assert record.spec_error is not None
    assert record.spec_error.startswith(error)
    assert record.metrics is not None  # metrics are read all the same
    assert record.metrics_error is None


@pytest.mark.parametrize(
    ("metrics", "error"),
    [
        ({"cpuPercent": 200}, "status.metrics.cpuPercent: Input should be less than or equal"),
        ({"memoryPercent": -1}, "status.metrics.memoryPercent: Input should be greater"),
        ({"sampledAt": "yesterday"}, "status.metrics.sampledAt: Input should be a valid datetime"),
        ({"gpuPercent": 5}, "status.metrics.gpuPercent: Extra inputs are not permitted"),
        ("junk", "status.metrics: Input should be a valid dictionary"),
    ],
    ids=["cpu", "memory", "sampledAt", "unknown-field", "not-a-mapping"],
)
def test_host_record_with_invalid_metrics(metrics: Any, error: str) -> None:
    record = HostRecord.of(obj({"poolRef": {"name": "p"}}, {"metrics": metrics}))
    assert record.metrics is None
    assert record.metrics_error is not None
    assert record.metrics_error.startswith(error)
    assert record.spec is not None  # the spec is fine
    assert record.spec_error is None


@pytest.mark.parametrize("status", [None, {}, {"metrics": None}], ids=str)
def test_host_record_without_metrics(status: dict[str, Any] | None) -> None:
    record = HostRecord.of(obj({"poolRef": {"name": "p"}}, status))
    assert (record.metrics, record.metrics_error) == (None, None)


# ---------------------------------------------------------------------------- pools


def test_pool_record_of_a_valid_pool() -> None:
    body = obj(
        {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 3}},
        {"pendingRequests": 2},
        name="desk",
    )
    record = PoolRecord.of(body)
    assert record.spec is not None
    assert record.spec.load_balancer.type is LoadBalancerType.DEPTH_FIRST
    assert record.spec.load_balancer.session_limit == 3
    assert record.spec_error is None
    assert record.status == {"pendingRequests": 2}
    assert record.body == body
    assert record.meta.name == "desk"


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (
            {"loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 0}},
            "spec.loadBalancer.maxSessionLimit: Input should be greater than or equal to 1",
        ),
        (
            {"loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 1_000_000}},
            "spec.loadBalancer.maxSessionLimit: Input should be less than or equal to 999999",
        ),
        (
            {"loadBalancer": {"type": "DepthFirst"}},
            "spec.loadBalancer: maxSessionLimit is required when type is DepthFirst",
        ),
        (
            {"loadBalancer": {"type": "RoundRobin"}},
            "spec.loadBalancer.type: Input should be 'BreadthFirst', 'DepthFirst' or 'Horizon'",
        ),
        ({}, "spec.loadBalancer: Field required"),
        (
            {"loadBalancer": {"type": "BreadthFirst"}, "horizon": {}},
            "spec: horizon is only allowed when loadBalancer.type is Horizon",
        ),
        (
            {"loadBalancer": {"type": "BreadthFirst"}, "scaling": {"minHosts": 3, "maxHosts": 2}},
            "spec.scaling: maxHosts must be greater than or equal to minHosts",
        ),
        (
            {
                "loadBalancer": {"type": "Horizon"},
                "horizon": {"logonStorm": {"loadIndexThreshold": 101}},
            },
            "spec.horizon.logonStorm.loadIndexThreshold: Input should be less than or equal to 100",
        ),
        ("junk", "spec: Input should be a valid dictionary"),
    ],
    ids=[
        "limit-zero",
        "limit-too-big",
        "depth-first-without-limit",
        "unknown-type",
        "no-loadBalancer",
        "horizon-on-breadth-first",
        "max-below-min",
        "logon-storm-threshold",
        "not-a-mapping",
    ],
)
def test_pool_record_with_an_invalid_spec(spec: Any, error: str) -> None:
    record = PoolRecord.of(obj(spec))
    assert record.spec is None
    assert record.spec_error is not None
    assert record.spec_error.startswith(error)


def test_pool_record_spec_error_counts_the_further_errors() -> None:
    spec = {"loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 0, "x": 1}}
    assert PoolRecord.of(obj(spec)).spec_error == (
        "spec.loadBalancer.maxSessionLimit: Input should be greater than or equal to 1 "
        "(and 1 more error)"
    )


# ---------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-01T00:00:00Z", datetime(2026, 1, 1, tzinfo=UTC)),
        ("2026-01-01T00:00:00.250Z", datetime(2026, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)),
        ("2026-01-01T00:00:00", datetime(2026, 1, 1, tzinfo=UTC)),  # naive: UTC
        (
            "2026-01-01T02:00:00+02:00",
            datetime(2026, 1, 1, 2, tzinfo=timezone(timedelta(hours=2))),
        ),
        ("", None),
        ("yesterday", None),
        (None, None),
        (1767225600, None),
    ],
    ids=["utc", "fraction", "naive", "offset", "empty", "malformed", "none", "number"],
)
def test_parse_time(value: Any, expected: datetime | None) -> None:
    parsed = parse_time(value)
    assert parsed == expected
    if expected is not None:
        assert parsed is not None
        assert parsed.utcoffset() == expected.utcoffset()  # aware, with the offset given


@pytest.mark.parametrize(
    ("created", "expected"),
    [
        ("2026-01-01T00:00:00Z", 1_767_225_600),
        ("2026-01-01T00:00:00.999Z", 1_767_225_600),  # whole seconds
        ("2026-01-01T00:00:01Z", 1_767_225_601),
        ("2026-01-01T02:00:00+02:00", 1_767_225_600),
        ("", 0),
        ("garbage", 0),
    ],
    ids=["utc", "fraction", "next-second", "offset", "empty", "malformed"],
)
def test_query_order(created: str, expected: int) -> None:
    assert query_order(created) == expected


@pytest.mark.parametrize(
    ("new", "old", "expected"),
    [
        ("8", "7", True),
        ("7", "7", True),
        ("7", "8", False),
        ("10", "9", True),  # integers, not strings
        ("9", "10", False),
        (None, "5", True),
        ("5", None, True),
        (None, None, True),
        ("abc", "5", True),  # not an etcd revision: trust arrival order
        ("5", "abc", True),
        ("", "5", True),
    ],
    ids=[
        "newer",
        "same",
        "older",
        "newer-more-digits",
        "older-fewer-digits",
        "no-new",
        "no-old",
        "neither",
        "new-not-integer",
        "old-not-integer",
        "new-empty",
    ],
)
def test_newer_or_same(new: str | None, old: str | None, expected: bool) -> None:
    assert newer_or_same(new, old) is expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"spec": {"poolRef": {"name": "desk"}}}, "desk"),
        ({"spec": {"poolRef": {"name": None}}}, ""),
        ({"spec": {"poolRef": {}}}, ""),
        ({"spec": {"poolRef": "desk"}}, ""),
        ({"spec": {}}, ""),
        ({"spec": "junk"}, ""),
        ({}, ""),
    ],
    ids=["named", "name-none", "no-name", "ref-not-mapping", "no-ref", "spec-not-mapping", "none"],
)
def test_pool_ref(body: dict[str, Any], expected: str) -> None:
    assert pool_ref(body) == expected


def test_records_know_their_pool_even_when_the_spec_is_invalid() -> None:
    body = obj({"poolRef": {"name": "desk"}, "color": "red"})
    assert HostRecord.of(body).pool == "desk"
    assert RequestRecord.of(body).pool == "desk"
