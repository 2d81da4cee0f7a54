"""The scaling decision on top of hosts_to_add/hosts_to_remove (tested in test_scaling.py):
add or remove, never both, what ScalingLimited says; and the manifest of a host to create."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.api import API_VERSION, HostTemplate, Scaling, SessionHostSpec
from hostpool_operator.api.vocabulary import MANAGED_LABEL, MANAGER, POOL_LABEL
from hostpool_operator.scaling.rules import (
    ScaleHost,
    ScalingDecision,
    decide_scaling,
    host_manifest,
    hosts_to_add,
    hosts_to_remove,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LONG_AGO = NOW - timedelta(hours=2)


def scaling(**kw: Any) -> Scaling:
    return Scaling.model_validate(kw)


def full(n: int, limit: int = 5) -> list[ScaleHost]:
    return [ScaleHost(f"h{i}", sessions=limit) for i in range(n)]


def empty_managed(*names: str, since: datetime = LONG_AGO) -> list[ScaleHost]:
    return [ScaleHost(n, managed=True, empty_since=since) for n in names]


# ---------------------------------------------------------------------------- decide_scaling


@pytest.mark.parametrize(
    ("spec", "hosts", "waiting", "expected"),
    [
        pytest.param(
            scaling(maxHosts=10),
            full(2),
            11,
            ScalingDecision(3, [], False, "2 of at most 10 hosts"),
            id="adds-for-waiting-requests",
        ),
        pytest.param(
            scaling(maxHosts=3),
            full(2),
            20,
            ScalingDecision(1, [], True, "maxHosts 3 reached; 3 more host(s) would be needed"),
            id="adds-up-to-maxHosts-and-says-limited",
        ),
        pytest.param(
            scaling(maxHosts=2),
            full(2),
            1,
            ScalingDecision(0, [], True, "maxHosts 2 reached; 1 more host(s) would be needed"),
            id="at-maxHosts-adds-nothing-still-limited",
        ),
        pytest.param(
            scaling(minHosts=3, maxHosts=5),
            [],
            0,
            ScalingDecision(3, [], False, "0 of at most 5 hosts"),
            id="adds-up-to-minHosts",
        ),
        pytest.param(
            scaling(maxHosts=4, bufferSessions=6),
            [ScaleHost("h0", sessions=3)],
            0,
            ScalingDecision(1, [], False, "1 of at most 4 hosts"),
            id="adds-for-the-buffer",
        ),
        pytest.param(
            scaling(maxHosts=4, scaleDownDelaySeconds=60),
            [*full(1), *empty_managed("m1", "m2")],
            0,
            ScalingDecision(0, ["m2", "m1"], False, "3 of at most 4 hosts"),
            id="removes-empty-managed-newest-first",
        ),
        pytest.param(
            scaling(maxHosts=4, scaleDownDelaySeconds=60),
            [*full(1), *empty_managed("m1")],
            0,
            ScalingDecision(0, ["m1"], False, "2 of at most 4 hosts"),
            id="removes-when-nothing-is-needed",
        ),
        pytest.param(
            scaling(maxHosts=2, scaleDownDelaySeconds=60),
            [*full(2), *empty_managed("m1")],
            0,
            ScalingDecision(0, ["m1"], False, "3 of at most 2 hosts"),
            id="over-maxHosts-removes-and-is-not-limited",
        ),
        pytest.param(
            scaling(maxHosts=4, scaleDownDelaySeconds=60),
            [*full(1), *empty_managed("m1", since=NOW - timedelta(seconds=59))],
            0,
            ScalingDecision(0, [], False, "2 of at most 4 hosts"),
            id="keeps-hosts-empty-for-less-than-the-delay",
        ),
        pytest.param(
            scaling(maxHosts=3, scaleDownDelaySeconds=0),
            [ScaleHost("h0", sessions=2), *empty_managed("m1")],
            3,
            ScalingDecision(0, [], False, "2 of at most 3 hosts"),
            id="waiting-requests-that-fit-neither-add-nor-remove",
        ),
        pytest.param(
            scaling(maxHosts=3, scaleDownDelaySeconds=0),
            [*full(2), *empty_managed("m1")],
            6,
            ScalingDecision(0, [], True, "maxHosts 3 reached; 1 more host(s) would be needed"),
            id="limited-and-waiting-removes-nothing",
        ),
    ],
)
def test_decide_scaling(
    spec: Scaling, hosts: list[ScaleHost], waiting: int, expected: ScalingDecision
) -> None:
    assert decide_scaling(spec, 5, hosts, waiting, NOW) == expected


def test_decision_settles_once_the_new_hosts_exist() -> None:
    spec = scaling(maxHosts=10, scaleDownDelaySeconds=60)
    hosts = full(2)
    first = decide_scaling(spec, 5, hosts, 7, NOW)
    assert first.add == 2
    hosts += [ScaleHost(f"new{i}", managed=True, empty_since=NOW) for i in range(first.add)]
    again = decide_scaling(spec, 5, hosts, 7, NOW)
    assert again == ScalingDecision(0, [], False, "4 of at most 10 hosts")


hosts_strategy = st.lists(
    st.builds(
        lambda i, sessions, drain, managed, age: ScaleHost(
            f"h{i}",
            sessions=sessions,
            drain_mode=drain,
            managed=managed,
            empty_since=NOW - timedelta(seconds=age) if sessions == 0 else None,
        ),
        st.integers(0, 10_000),
        st.integers(0, 6),
        st.booleans(),
        st.booleans(),
        st.integers(0, 120),
    ),
    max_size=10,
    unique_by=lambda h: h.name,
)


@settings(max_examples=300, deadline=None)
@given(
    hosts=hosts_strategy,
    waiting=st.integers(0, 30),
    lo=st.integers(0, 8),
    span=st.integers(0, 8),
    buffer=st.integers(0, 15),
    delay=st.integers(0, 90),
)
def test_property_decision_is_add_or_remove_never_both(
    hosts: list[ScaleHost], waiting: int, lo: int, span: int, buffer: int, delay: int
) -> None:
    spec = scaling(
        minHosts=lo, maxHosts=lo + span, bufferSessions=buffer, scaleDownDelaySeconds=delay
    )
    decision = decide_scaling(spec, 5, hosts, waiting, NOW)
    up = hosts_to_add(spec, 5, hosts, waiting)
    assert decision.add == up.add
    assert decision.limited is up.limited
    assert not (decision.add and decision.remove)
    if decision.add == 0:
        assert decision.remove == hosts_to_remove(spec, 5, hosts, waiting, NOW)
    if decision.limited:
        assert decision.message.startswith(f"maxHosts {spec.max_hosts} reached; ")
    else:
        assert decision.message == f"{len(hosts)} of at most {spec.max_hosts} hosts"


# ---------------------------------------------------------------------------- host_manifest


def template(**kw: Any) -> HostTemplate:
    return HostTemplate.model_validate(kw)


MANAGED = {MANAGED_LABEL: MANAGER, POOL_LABEL: "desk"}


def test_host_manifest() -> None:
    tmpl = template(
        metadata={"labels": {"team": "vdi"}, "annotations": {"note": "gold image"}},
        spec={"address": "rds.example", "features": {"protocols": ["RDP"]}},
    )
    manifest = host_manifest(tmpl, pool="desk", namespace="ns", pool_uid="uid-1", labels=MANAGED)
    assert manifest == {
        "apiVersion": API_VERSION,
        "kind": "SessionHost",
        "metadata": {
            "generateName": "desk-",
            "namespace": "ns",
            "labels": {"team": "vdi", MANAGED_LABEL: MANAGER, POOL_LABEL: "desk"},
            "annotations": {"note": "gold image"},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "HostPool",
                    "name": "desk",
                    "uid": "uid-1",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "poolRef": {"name": "desk"},
            "drainMode": False,
            "address": "rds.example",
            "features": {
                "multiSession": True,
                "unauthenticatedAccess": True,
                "protocols": ["RDP"],
            },
        },
    }


def test_host_manifest_spec_is_a_valid_host_of_the_pool() -> None:
    manifest = host_manifest(
        template(spec={"drainMode": True}), pool="desk", namespace="ns", pool_uid="u", labels={}
    )
    spec = SessionHostSpec.model_validate(manifest["spec"])
    assert spec.pool_ref.name == "desk"
    assert spec.drain_mode is True
    assert "address" not in manifest["spec"]  # unset optionals are left out


@pytest.mark.parametrize(
    ("pool", "generate_name"),
    [
        ("desk", "desk-"),
        ("p" * 57, "p" * 57 + "-"),
        ("p" * 58, "p" * 58),
        ("q" * 63, "q" * 58),
    ],
    ids=["short", "57-fits-with-dash", "58-drops-the-dash", "63-cut"],
)
def test_generate_name_is_cut_to_58_characters(pool: str, generate_name: str) -> None:
    manifest = host_manifest(template(), pool=pool, namespace="ns", pool_uid="u", labels={})
    assert manifest["metadata"]["generateName"] == generate_name
    assert len(generate_name) <= 58  # room for the API server's 5 random characters


def test_given_labels_win_over_the_templates() -> None:
    tmpl = template(metadata={"labels": {POOL_LABEL: "other", MANAGED_LABEL: "someone", "a": "1"}})
    manifest = host_manifest(tmpl, pool="desk", namespace="ns", pool_uid="u", labels=MANAGED)
    assert manifest["metadata"]["labels"] == {**MANAGED, "a": "1"}


def test_host_manifest_leaves_the_template_and_labels_alone() -> None:
    tmpl = template(metadata={"labels": {"a": "1"}, "annotations": {"n": "x"}})
    labels = {"b": "2"}
    manifest = host_manifest(tmpl, pool="desk", namespace="ns", pool_uid="u", labels=labels)
    manifest["metadata"]["labels"]["c"] = "3"
    manifest["metadata"]["annotations"]["m"] = "y"
    manifest["spec"]["drainMode"] = True
    assert tmpl.metadata.labels == {"a": "1"}
    assert tmpl.metadata.annotations == {"n": "x"}
    assert tmpl.spec.drain_mode is False
    assert labels == {"b": "2"}
