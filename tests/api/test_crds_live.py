"""The generated CRDs on a real kube-apiserver: examples apply, bad manifests are refused
with a message naming the field, defaults are filled in as documented, the status
subresource behaves, and the printer columns exist.

Every test gets its own namespace (the ``namespace`` fixture); the API server is shared
(the session-scoped ``kube`` fixture, see tests/conftest.py).
"""

from __future__ import annotations

import copy
import datetime as dt
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hostpool_operator import api
from support.builders import host, pool, request
from support.kube import (
    PLURALS,
    ApiError,
    Kube,
    example_documents,
    resource_path,
)

MODELS: dict[str, api.KindModel] = {
    "HostPool": api.HostPool,
    "SessionHost": api.SessionHost,
    "SessionRequest": api.SessionRequest,
    "ScalingPlan": api.ScalingPlan,
}

REQUIRED_COLUMNS = {
    "HostPool": ["Type", "Hosts", "Updated", "Sessions", "Free", "Ready", "Age"],
    "SessionHost": ["Pool", "Sessions", "Load", "Drain", "Available"],
    "SessionRequest": ["Pool", "User", "Phase", "Host", "Reason"],
    "ScalingPlan": ["Pools", "Phase", "Ready", "Age"],
}

SHORT_NAMES = {"HostPool": "hp", "SessionHost": "sh", "SessionRequest": "sr", "ScalingPlan": "spl"}

ALL_PROTOCOLS = ["RDP", "PCOIP", "BLAST"]


# ---------------------------------------------------------------------------------------
# Manifests (pool, host and request come from builders.py)


def without(obj: dict[str, Any], *path: str) -> dict[str, Any]:
    """A copy of ``obj`` with the key at ``path`` removed."""
    out = copy.deepcopy(obj)
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


def horizon_pool(name: str = "pool", **horizon: Any) -> dict[str, Any]:
    return pool(name, loadBalancer={"type": "Horizon"}, horizon=horizon)


def refused(call: Any, *args: Any) -> ApiError:
    """Run an API call that must fail; return the error."""
    with pytest.raises(ApiError) as info:
        call(*args)
    return info.value


def now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------
# Examples


def _examples_in_apply_order() -> list[tuple[Path, dict[str, Any]]]:
    order = {"HostPool": 0, "ScalingPlan": 1, "SessionHost": 2, "SessionRequest": 3}
    return sorted(example_documents(), key=lambda pd: order[pd[1]["kind"]])


def test_every_example_applies(kube: Kube, namespace: str) -> None:
    examples = _examples_in_apply_order()
    assert examples, "no examples in crds/examples"
    for path, doc in examples:
        try:
            created = kube.create(namespace, doc)
        except ApiError as exc:
            pytest.fail(f"{path.name} {doc['metadata']['name']}: refused: {exc}")
        # What the server stores is what the models make of the manifest: the CRD's
        # defaults are the models' defaults.
        expected = MODELS[doc["kind"]].model_validate({"spec": doc["spec"]})
        assert created["spec"] == expected.spec.to_api(), (
            f"{path.name} {doc['metadata']['name']}: server and models disagree on defaults"
        )
    for kind, plural in PLURALS.items():
        listed = kube.call("GET", resource_path(kind, namespace))
        names = {item["metadata"]["name"] for item in listed["items"]}
        wanted = {d["metadata"]["name"] for _, d in examples if d["kind"] == kind}
        assert names == wanted, f"{plural}: {names} != {wanted}"


# ---------------------------------------------------------------------------------------
# Refusals


@dataclass(frozen=True)
class Refusal:
    """A manifest the API server must refuse at create time."""

    obj: dict[str, Any]
    field: str  # the field path the message must name
    text: str = ""  # further text the message must contain
    status: int = 422


USER_257 = "u" * 257

REFUSALS: dict[str, Refusal] = {
    "depth-first-without-maxSessionLimit": Refusal(
        pool(loadBalancer={"type": "DepthFirst"}),
        "spec.loadBalancer.maxSessionLimit",
        "maxSessionLimit is required when type is DepthFirst",
    ),
    "maxSessionLimit-0": Refusal(
        pool(loadBalancer={"type": "BreadthFirst", "maxSessionLimit": 0}),
        "spec.loadBalancer.maxSessionLimit",
    ),
    "maxSessionLimit-1000000": Refusal(
        pool(loadBalancer={"type": "DepthFirst", "maxSessionLimit": 1_000_000}),
        "spec.loadBalancer.maxSessionLimit",
    ),
    "unknown-type": Refusal(
        pool(loadBalancer={"type": "RoundRobin"}), "spec.loadBalancer.type", "RoundRobin"
    ),
    "missing-loadBalancer": Refusal(without(pool(), "spec", "loadBalancer"), "spec.loadBalancer"),
    "horizon-on-depth-first": Refusal(
        pool(loadBalancer={"type": "DepthFirst", "maxSessionLimit": 5}, horizon={}),
        "spec.horizon",
        "horizon is only allowed when loadBalancer.type is Horizon",
    ),
    "horizon-on-breadth-first": Refusal(
        pool(horizon={"loadIndex": {"cpuThresholdPercent": 50}}),
        "spec.horizon",
        "horizon is only allowed when loadBalancer.type is Horizon",
    ),
    "cpuThresholdPercent-101": Refusal(
        horizon_pool(loadIndex={"cpuThresholdPercent": 101}),
        "spec.horizon.loadIndex.cpuThresholdPercent",
    ),
    "memoryThresholdPercent-negative": Refusal(
        horizon_pool(loadIndex={"memoryThresholdPercent": -1}),
        "spec.horizon.loadIndex.memoryThresholdPercent",
    ),
    "connectingSessionThreshold-151": Refusal(
        horizon_pool(logonStorm={"connectingSessionThreshold": 151}),
        "spec.horizon.logonStorm.connectingSessionThreshold",
    ),
    "loadIndexThreshold-101": Refusal(
        horizon_pool(logonStorm={"loadIndexThreshold": 101}),
        "spec.horizon.logonStorm.loadIndexThreshold",
    ),
    "rdsLoadIndexThreshold-negative": Refusal(
        horizon_pool(connectionServer={"rdsLoadIndexThreshold": -1}),
        "spec.horizon.connectionServer.rdsLoadIndexThreshold",
    ),
    "rdsConnectingSessionThreshold-151": Refusal(
        horizon_pool(connectionServer={"rdsConnectingSessionThreshold": 151}),
        "spec.horizon.connectionServer.rdsConnectingSessionThreshold",
    ),
    "minRdsServersInLbQueue-1001": Refusal(
        horizon_pool(connectionServer={"minRdsServersInLbQueue": 1001}),
        "spec.horizon.connectionServer.minRdsServersInLbQueue",
    ),
    "bufferSessions-negative": Refusal(
        pool(scaling={"bufferSessions": -1}), "spec.scaling.bufferSessions"
    ),
    "scaleDownDelaySeconds-negative": Refusal(
        pool(scaling={"scaleDownDelaySeconds": -1}), "spec.scaling.scaleDownDelaySeconds"
    ),
    "maxHosts-below-minHosts": Refusal(
        pool(scaling={"minHosts": 5, "maxHosts": 2}),
        "spec.scaling.maxHosts",
        "maxHosts must be greater than or equal to minHosts",
    ),
    # maxHosts defaults to 10, and the rule sees the defaulted object.
    "minHosts-above-default-maxHosts": Refusal(
        pool(scaling={"minHosts": 11}),
        "spec.scaling.maxHosts",
        "maxHosts must be greater than or equal to minHosts",
    ),
    "hostTemplate-unknown-protocol": Refusal(
        pool(scaling={"hostTemplate": {"spec": {"features": {"protocols": ["VNC"]}}}}),
        "spec.scaling.hostTemplate.spec.features.protocols",
        "VNC",
    ),
    "connectingTimeoutSeconds-0": Refusal(
        pool(connectingTimeoutSeconds=0), "spec.connectingTimeoutSeconds"
    ),
    "connectingTimeoutSeconds-3601": Refusal(
        pool(connectingTimeoutSeconds=3601), "spec.connectingTimeoutSeconds"
    ),
    "request-empty-user": Refusal(request(user=""), "spec.user"),
    "request-user-257-chars": Refusal(request(user=USER_257), "spec.user"),
    "request-missing-user": Refusal(without(request(), "spec", "user"), "spec.user"),
    "request-unknown-protocol": Refusal(request(protocol="VNC"), "spec.protocol", "VNC"),
    "request-missing-poolRef": Refusal(without(request(), "spec", "poolRef"), "spec.poolRef"),
    "host-unknown-protocol": Refusal(
        host(features={"protocols": ["RDP", "VNC"]}), "spec.features.protocols", "VNC"
    ),
    "host-duplicate-protocols": Refusal(
        host(features={"protocols": ["RDP", "BLAST", "RDP"]}),
        "spec.features.protocols",
        "Duplicate value",
    ),
    "host-missing-poolRef": Refusal(without(host(), "spec", "poolRef"), "spec.poolRef"),
    "host-empty-poolRef-name": Refusal(host(pool_name=""), "spec.poolRef.name"),
    "host-address-254-chars": Refusal(host(address="a" * 254), "spec.address"),
    "workload-without-kind": Refusal(
        pool(scaling={"hostTemplate": {"workload": {"apiVersion": "v1"}}}),
        "spec.scaling.hostTemplate.workload.kind",
    ),
    "workload-bad-apiVersion": Refusal(
        pool(scaling={"hostTemplate": {"workload": {"apiVersion": "V1", "kind": "Pod"}}}),
        "spec.scaling.hostTemplate.workload.apiVersion",
    ),
    "workload-addressFrom-outside-status": Refusal(
        pool(
            scaling={
                "hostTemplate": {
                    "workload": {"apiVersion": "v1", "kind": "Pod", "addressFrom": "spec.nodeName"}
                }
            }
        ),
        "spec.scaling.hostTemplate.workload.addressFrom",
    ),
    "hostReadyTimeoutSeconds-0": Refusal(
        pool(scaling={"hostReadyTimeoutSeconds": 0}), "spec.scaling.hostReadyTimeoutSeconds"
    ),
    "host-workloadRef-without-name": Refusal(
        host(workloadRef={"apiVersion": "v1", "kind": "Pod"}), "spec.workloadRef.name"
    ),
    "entitlements-1001-users": Refusal(
        pool(entitlements={"users": [f"u{i}" for i in range(1001)]}),
        "spec.entitlements.users",
    ),
    "entitlements-101-groups": Refusal(
        pool(entitlements={"groups": [f"g{i}" for i in range(101)]}),
        "spec.entitlements.groups",
    ),
    "entitlements-empty-user": Refusal(
        pool(entitlements={"users": [""]}), "spec.entitlements.users[0]"
    ),
    "connection-port-0": Refusal(pool(connection={"port": 0}), "spec.connection.port"),
    "connection-port-65536": Refusal(pool(connection={"port": 65536}), "spec.connection.port"),
    "connection-protocol-blast": Refusal(
        pool(connection={"protocol": "BLAST"}), "spec.connection.protocol", "BLAST"
    ),
    "rdpProperties-not-name-type-value": Refusal(
        pool(connection={"rdpProperties": "audiomode:i:0;redirectclipboard"}),
        "spec.connection.rdpProperties",
        "name:type:value",
    ),
    "rdpProperties-integer-not-a-number": Refusal(
        pool(connection={"rdpProperties": "audiomode:i:yes"}),
        "spec.connection.rdpProperties",
        "name:type:value",
    ),
    "rdpProperties-unknown-type": Refusal(
        pool(connection={"rdpProperties": "audiomode:x:0"}),
        "spec.connection.rdpProperties",
        "name:type:value",
    ),
    "rdpProperties-full-address": Refusal(
        pool(connection={"rdpProperties": "audiomode:i:0;full address:s:evil.example:3389"}),
        "spec.connection.rdpProperties",
        "the broker writes",
    ),
    "rdpProperties-username-any-case": Refusal(
        pool(connection={"rdpProperties": "UserName:s:admin"}),
        "spec.connection.rdpProperties",
        "the broker writes",
    ),
    "rdpProperties-gateway": Refusal(
        pool(connection={"rdpProperties": "gatewayhostname:s:rdgw.evil.example"}),
        "spec.connection.rdpProperties",
        "the broker writes",
    ),
    "rdpProperties-4097-chars": Refusal(
        pool(connection={"rdpProperties": "a:s:" + "x" * 4093}),
        "spec.connection.rdpProperties",
    ),
    "gateway-hostname-with-path": Refusal(
        pool(connection={"gateway": {"hostname": "rdgw.example/evil"}}),
        "spec.connection.gateway.hostname",
    ),
    "host-workloadRef-lowercase-kind": Refusal(
        host(workloadRef={"apiVersion": "v1", "kind": "pod", "name": "p"}),
        "spec.workloadRef.kind",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS.values()), ids=list(REFUSALS))
def test_invalid_manifest_is_refused(kube: Kube, namespace: str, case: Refusal) -> None:
    status, body = kube.request("POST", resource_path(case.obj["kind"], namespace), body=case.obj)
    assert 400 <= status < 500, f"expected a refusal, got {status}: {body}"
    assert status == case.status, f"expected {case.status}, got {status}: {body}"
    message = body.get("message", "") if isinstance(body, dict) else str(body)
    assert case.field in message, f"the message does not name {case.field}: {message}"
    assert case.text in message, f"the message lacks {case.text!r}: {message}"
    assert not kube.exists(case.obj["kind"], namespace, case.obj["metadata"]["name"])


@dataclass(frozen=True)
class RefusedUpdate:
    """An object that is accepted, and a change to it that must be refused."""

    obj: dict[str, Any]
    change: dict[str, Any]  # merged into .spec
    field: str
    text: str
    status: int = 422


REFUSED_UPDATES: dict[str, RefusedUpdate] = {
    "host-poolRef-change": RefusedUpdate(
        host(), {"poolRef": {"name": "other-pool"}}, "spec.poolRef", "poolRef is immutable"
    ),
    "request-user-change": RefusedUpdate(
        request(), {"user": "mallory"}, "spec", "spec is immutable"
    ),
    "request-protocol-change": RefusedUpdate(
        request(protocol="RDP"), {"protocol": "BLAST"}, "spec", "spec is immutable"
    ),
    "request-poolRef-change": RefusedUpdate(
        request(), {"poolRef": {"name": "other-pool"}}, "spec", "spec is immutable"
    ),
    "request-unauthenticated-change": RefusedUpdate(
        request(), {"unauthenticated": True}, "spec", "spec is immutable"
    ),
}


@pytest.mark.parametrize("case", list(REFUSED_UPDATES.values()), ids=list(REFUSED_UPDATES))
def test_immutable_field_update_is_refused(kube: Kube, namespace: str, case: RefusedUpdate) -> None:
    created = kube.create(namespace, case.obj)
    changed = copy.deepcopy(created)
    changed["spec"].update(copy.deepcopy(case.change))
    error = refused(kube.replace, namespace, changed)
    assert error.status == case.status, error
    assert case.field in error.message, error.message
    assert case.text in error.message, error.message
    # A merge patch is refused the same way, and the object is unchanged.
    name = created["metadata"]["name"]
    error = refused(kube.merge_patch, case.obj["kind"], namespace, name, {"spec": case.change})
    assert error.status == case.status, error
    assert case.text in error.message, error.message
    assert kube.get(case.obj["kind"], namespace, name)["spec"] == created["spec"]


def test_mutable_changes_are_accepted(kube: Kube, namespace: str) -> None:
    """Controls for the immutability rules: what may change does."""
    kube.create(namespace, host())
    patched = kube.merge_patch(
        "SessionHost", namespace, "host", {"spec": {"drainMode": True, "address": "h.example"}}
    )
    assert patched["spec"]["drainMode"] is True
    assert patched["spec"]["address"] == "h.example"
    kube.create(namespace, request())
    relabelled = kube.merge_patch(
        "SessionRequest", namespace, "req", {"metadata": {"labels": {"team": "finance"}}}
    )
    assert relabelled["metadata"]["labels"] == {"team": "finance"}
    # Re-sending the same spec is no change.
    same = kube.replace(namespace, kube.get("SessionRequest", namespace, "req"))
    assert same["spec"]["user"] == "alice"


def test_boundary_values_are_accepted(kube: Kube, namespace: str) -> None:
    """The limits themselves are allowed (the refusals above are one step outside)."""
    edge = [
        pool("limit-1", loadBalancer={"type": "DepthFirst", "maxSessionLimit": 1}),
        pool("limit-max", loadBalancer={"type": "DepthFirst", "maxSessionLimit": 999_999}),
        pool("timeout-1", connectingTimeoutSeconds=1),
        pool("timeout-3600", connectingTimeoutSeconds=3600),
        horizon_pool(
            "horizon-max",
            loadIndex={"cpuThresholdPercent": 100, "memoryThresholdPercent": 100},
            logonStorm={"connectingSessionThreshold": 150, "loadIndexThreshold": 100},
            connectionServer={
                "rdsLoadIndexThreshold": 100,
                "rdsConnectingSessionThreshold": 150,
                "minRdsServersInLbQueue": 1000,
            },
        ),
        pool("equal-hosts", scaling={"minHosts": 3, "maxHosts": 3}),
        request("user-256", user="u" * 256),
        host("one-protocol", features={"protocols": ["PCOIP"]}),
        host("no-protocols", features={"protocols": []}),
        host("address-253", address="a" * 253),
        pool(
            "entitled",
            entitlements={
                "users": [f"user-{i}" for i in range(1000)],
                "groups": [f"group-{i}" for i in range(100)],
            },
            connection={
                "protocol": "RDP",
                "port": 65535,
                "rdpProperties": "audiomode:i:0;redirectclipboard:i:1;screen mode id:i:2;"
                "drivestoredirect:s:*;camerastoredirect:s:;x:b:0aFF;",
                "gateway": {"hostname": "rdgw.corp.example:443"},
            },
        ),
        pool("rdp-4096", connection={"rdpProperties": "a:s:" + "x" * 4092}),
    ]
    for obj in edge:
        kube.create(namespace, obj)


# ---------------------------------------------------------------------------------------
# Defaults


def test_pool_defaults(kube: Kube, namespace: str) -> None:
    created = kube.create(namespace, pool("plain"))
    spec = created["spec"]
    assert spec["connectingTimeoutSeconds"] == 60
    assert spec["loadBalancer"] == {"type": "BreadthFirst"}, "maxSessionLimit has no default"
    assert "horizon" not in spec
    assert "scaling" not in spec


def test_horizon_defaults(kube: Kube, namespace: str) -> None:
    created = kube.create(namespace, horizon_pool())
    horizon = created["spec"]["horizon"]
    assert horizon["loadIndex"] == {
        "useCustomScript": False,
        "includeSessionCount": True,
        "cpuThresholdPercent": 0,
        "memoryThresholdPercent": 0,
        "diskQueueLengthThreshold": 0,
        "diskReadLatencyThresholdMs": 0,
        "diskWriteLatencyThresholdMs": 0,
    }
    assert horizon["logonStorm"] == {"connectingSessionThreshold": 0, "loadIndexThreshold": 0}
    assert horizon["connectionServer"] == {
        "rdsLoadIndexThreshold": 20,
        "rdsConnectingSessionThreshold": 20,
        "minRdsServersInLbQueue": 4,
    }
    assert created["spec"]["connectingTimeoutSeconds"] == 60


def test_partial_horizon_block_keeps_values_and_fills_the_rest(kube: Kube, namespace: str) -> None:
    obj = horizon_pool(
        loadIndex={"cpuThresholdPercent": 70}, connectionServer={"minRdsServersInLbQueue": 2}
    )
    horizon = kube.create(namespace, obj)["spec"]["horizon"]
    assert horizon["loadIndex"]["cpuThresholdPercent"] == 70
    assert horizon["loadIndex"]["includeSessionCount"] is True
    assert horizon["loadIndex"]["memoryThresholdPercent"] == 0
    assert horizon["connectionServer"] == {
        "rdsLoadIndexThreshold": 20,
        "rdsConnectingSessionThreshold": 20,
        "minRdsServersInLbQueue": 2,
    }
    assert horizon["logonStorm"] == {"connectingSessionThreshold": 0, "loadIndexThreshold": 0}


def test_workload_template_spec_is_kept_as_written(kube: Kube, namespace: str) -> None:
    """The workload's own spec is not pruned: its kind's API server validates it later."""
    workload = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "spec": {"domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}}},
    }
    created = kube.create(namespace, pool("vms", scaling={"hostTemplate": {"workload": workload}}))
    stored = created["spec"]["scaling"]["hostTemplate"]["workload"]
    assert stored == {
        **workload,
        "metadata": {"labels": {}, "annotations": {}},
        "addressFrom": "status.podIP",
    }


def test_scaling_defaults(kube: Kube, namespace: str) -> None:
    scaling = kube.create(namespace, pool("scaled", scaling={}))["spec"]["scaling"]
    assert scaling == {
        "minHosts": 0,
        "maxHosts": 10,
        "bufferSessions": 0,
        "scaleDownDelaySeconds": 600,
        "hostReadyTimeoutSeconds": 600,
        "hostTemplate": {
            "metadata": {"labels": {}, "annotations": {}},
            "spec": {
                "drainMode": False,
                "features": {
                    "multiSession": True,
                    "unauthenticatedAccess": True,
                    "protocols": ALL_PROTOCOLS,
                },
            },
        },
    }


def test_host_defaults(kube: Kube, namespace: str) -> None:
    spec = kube.create(namespace, host("bare"))["spec"]
    assert spec == {
        "poolRef": {"name": "pool"},
        "drainMode": False,
        "features": {
            "multiSession": True,
            "unauthenticatedAccess": True,
            "protocols": ALL_PROTOCOLS,
        },
    }
    partial = kube.create(namespace, host("partial", features={"multiSession": False}))
    assert partial["spec"]["features"] == {
        "multiSession": False,
        "unauthenticatedAccess": True,
        "protocols": ALL_PROTOCOLS,
    }


def test_request_defaults(kube: Kube, namespace: str) -> None:
    spec = kube.create(namespace, request())["spec"]
    assert spec == {"poolRef": {"name": "pool"}, "user": "alice", "unauthenticated": False}


def test_unknown_fields_are_pruned(kube: Kube, namespace: str) -> None:
    """No part of the schema preserves unknown fields: a typo is dropped, not stored."""
    obj = pool("typo")
    obj["spec"]["loadBalancr"] = {"type": "DepthFirst"}
    obj["spec"]["loadBalancer"]["maxSesionLimit"] = 3
    created = kube.create(namespace, obj)
    assert "loadBalancr" not in created["spec"]
    assert created["spec"]["loadBalancer"] == {"type": "BreadthFirst"}
    # With strict field validation the same manifest is refused, naming the fields.
    status, body = kube.request(
        "POST",
        resource_path("HostPool", namespace),
        body={**obj, "metadata": {"name": "typo-strict"}},
        query={"fieldValidation": "Strict"},
    )
    assert status == 400, body
    assert "loadBalancr" in body["message"], body


# ---------------------------------------------------------------------------------------
# Status subresource


def _pool_status() -> dict[str, Any]:
    return {
        "observedGeneration": 1,
        "hosts": {"total": 4, "available": 3, "draining": 1, "full": 1},
        "sessions": {"total": 31, "connecting": 2, "active": 27, "disconnected": 2},
        "capacity": {"total": 40, "free": 9},
        "pendingRequests": 0,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "HostsAvailable",
                "message": "3 of 4 hosts take new sessions",
                "lastTransitionTime": now(),
                "observedGeneration": 1,
            },
            {
                "type": "Saturated",
                "status": "False",
                "reason": "FreeCapacity",
                "message": "",
                "lastTransitionTime": now(),
            },
        ],
    }


def test_status_is_ignored_on_create(kube: Kube, namespace: str) -> None:
    obj = {**pool("with-status"), "status": _pool_status()}
    created = kube.create(namespace, obj)
    assert created.get("status") in (None, {}), created.get("status")


def test_status_subresource(kube: Kube, namespace: str) -> None:
    created = kube.create(namespace, pool("st"))
    assert created["metadata"]["generation"] == 1

    # A write to /status is kept, and does not bump the generation.
    with_status = {**created, "status": _pool_status()}
    written = kube.replace_status(namespace, with_status)
    assert written["status"]["hosts"]["total"] == 4
    stored = kube.get("HostPool", namespace, "st")
    assert stored["status"]["capacity"] == {"total": 40, "free": 9}
    assert [c["type"] for c in stored["status"]["conditions"]] == ["Ready", "Saturated"]
    assert stored["metadata"]["generation"] == 1

    # A status in a main-resource update is ignored; the spec change is kept.
    update = copy.deepcopy(stored)
    update["spec"]["connectingTimeoutSeconds"] = 30
    update["status"]["hosts"]["total"] = 99
    updated = kube.replace(namespace, update)
    assert updated["spec"]["connectingTimeoutSeconds"] == 30
    assert updated["status"]["hosts"]["total"] == 4
    assert updated["metadata"]["generation"] == 2

    # The same through a merge patch of the main resource.
    patched = kube.merge_patch(
        "HostPool", namespace, "st", {"status": {"pendingRequests": 7}, "metadata": {}}
    )
    assert patched["status"]["pendingRequests"] == 0

    # And a spec in a /status write is ignored.
    status_update = kube.get("HostPool", namespace, "st")
    status_update["spec"]["connectingTimeoutSeconds"] = 45
    status_update["status"]["pendingRequests"] = 2
    after = kube.replace_status(namespace, status_update)
    assert after["spec"]["connectingTimeoutSeconds"] == 30
    assert after["status"]["pendingRequests"] == 2


def test_host_status_written_by_an_agent(kube: Kube, namespace: str) -> None:
    kube.create(namespace, host("agent"))
    metrics = {
        "cpuPercent": 35,
        "memoryPercent": 40,
        "diskQueueLength": 1,
        "diskReadLatencyMs": 4,
        "diskWriteLatencyMs": 6,
        "customLoadValue": 20,
        "sampledAt": now(),
    }
    patched = kube.merge_patch(
        "SessionHost", namespace, "agent", {"status": {"metrics": metrics}}, status=True
    )
    assert patched["status"]["metrics"] == metrics
    # Only metrics were sent: no other status field was invented.
    assert set(patched["status"]) == {"metrics"}


STATUS_REFUSALS: dict[str, tuple[str, dict[str, Any], str]] = {
    "host-loadIndex-101": ("SessionHost", {"loadIndex": 101}, "status.loadIndex"),
    "host-loadIndex-minus-2": ("SessionHost", {"loadIndex": -2}, "status.loadIndex"),
    "host-bucket-4": ("SessionHost", {"bucket": 4}, "status.bucket"),
    "host-cpuPercent-101": ("SessionHost", {"metrics": {"cpuPercent": 101}}, "status.metrics"),
    # The relay's pin has one form: lowercase hex (not openssl's upper case and colons).
    "host-rdpCertificateSha256-uppercase": (
        "SessionHost",
        {"agent": {"rdpCertificateSha256": "AB" * 32}},
        "status.agent.rdpCertificateSha256",
    ),
    "request-unknown-phase": ("SessionRequest", {"phase": "Running"}, "status.phase"),
    "request-unknown-reason": ("SessionRequest", {"reason": "Because"}, "status.reason"),
    "request-unknown-sessionState": (
        "SessionRequest",
        {"sessionState": "Gone"},
        "status.sessionState",
    ),
    "pool-negative-pending": ("HostPool", {"pendingRequests": -1}, "status.pendingRequests"),
    "condition-unknown-status": (
        "HostPool",
        {"conditions": [{"type": "Ready", "status": "Maybe"}]},
        "status.conditions",
    ),
    "condition-duplicate-type": (
        "HostPool",
        {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}]},
        "status.conditions",
    ),
}


@pytest.mark.parametrize("case", list(STATUS_REFUSALS.values()), ids=list(STATUS_REFUSALS))
def test_invalid_status_is_refused(
    kube: Kube, namespace: str, case: tuple[str, dict[str, Any], str]
) -> None:
    kind, status, field_path = case
    obj = {"HostPool": pool(), "SessionHost": host(), "SessionRequest": request()}[kind]
    kube.create(namespace, obj)
    name = obj["metadata"]["name"]
    with pytest.raises(ApiError) as info:
        kube.merge_patch(kind, namespace, name, {"status": status}, status=True)
    error = info.value
    assert error.status == 422, error
    assert field_path in error.message, error.message


# ---------------------------------------------------------------------------------------
# Printer columns


@pytest.mark.parametrize("kind", sorted(REQUIRED_COLUMNS))
def test_printer_columns_on_the_server(kube: Kube, kind: str) -> None:
    crd = kube.read_crd(f"{PLURALS[kind]}.{api.GROUP}")
    (version,) = crd["spec"]["versions"]
    names = [c["name"] for c in version.get("additionalPrinterColumns", [])]
    assert set(REQUIRED_COLUMNS[kind]) <= set(names), names
    assert crd["spec"]["names"]["shortNames"] == [SHORT_NAMES[kind]]
    expected: dict[str, Any] = {"status": {}}
    if kind == "HostPool":
        expected["scale"] = {
            "specReplicasPath": ".spec.scaling.minHosts",
            "statusReplicasPath": ".status.hosts.total",
            "labelSelectorPath": ".status.selector",
        }
    assert version["subresources"] == expected


def test_table_api_shows_the_columns(kube: Kube, namespace: str) -> None:
    created = kube.create(
        namespace, pool(loadBalancer={"type": "DepthFirst", "maxSessionLimit": 8})
    )
    kube.replace_status(namespace, {**created, "status": _pool_status()})
    h = kube.create(namespace, host("h1", drainMode=True))
    kube.replace_status(
        namespace,
        {
            **h,
            "status": {
                "sessions": {"total": 5, "connecting": 0, "active": 5, "disconnected": 0},
                "loadIndex": 63,
                "conditions": [
                    {"type": "Available", "status": "False", "reason": "Draining", "message": ""}
                ],
            },
        },
    )
    r = kube.create(namespace, request("r1", user="bob@corp.example"))
    kube.replace_status(
        namespace,
        {
            **r,
            "status": {
                "phase": "Assigned",
                "host": "h1",
                "reason": "NewSession",
                "sessionState": "Connecting",
                "assignedAt": now(),
            },
        },
    )
    expected_cells: dict[str, dict[str, object]] = {
        "HostPool": {"Name": "pool", "Type": "DepthFirst", "Hosts": 4, "Sessions": 31,
                     "Free": 9, "Ready": "True"},
        "SessionHost": {"Name": "h1", "Pool": "pool", "Sessions": 5, "Load": 63, "Drain": True,
                        "Available": "False"},
        "SessionRequest": {"Name": "r1", "Pool": "pool", "User": "bob@corp.example",
                           "Phase": "Assigned", "Host": "h1", "Reason": "NewSession"},
    }  # fmt: skip
    for kind, cells in expected_cells.items():
        table = kube.table(kind, namespace)
        assert table["kind"] == "Table", table
        columns = [c["name"] for c in table["columnDefinitions"]]
        assert set(REQUIRED_COLUMNS[kind]) <= set(columns), columns
        (row,) = table["rows"]
        shown = dict(zip(columns, row["cells"], strict=True))
        for column, value in cells.items():
            assert shown[column] == value, f"{kind} column {column}: {shown}"


def _kubectl(kube: Kube) -> str | None:
    if kube.bin_dir is not None and (kube.bin_dir / "kubectl").exists():
        return str(kube.bin_dir / "kubectl")
    return shutil.which("kubectl")


def test_kubectl_get_short_names(kube: Kube, namespace: str) -> None:
    kubectl = _kubectl(kube)
    if kubectl is None:
        pytest.skip("no kubectl (neither the suite's tools nor on PATH)")
    kube.create(namespace, pool())
    kube.create(namespace, host())
    kube.create(namespace, request())
    proc = subprocess.run(
        [kubectl, "--kubeconfig", str(kube.kubeconfig), "-n", namespace, "get", "hp,sh,sr"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    headers = [line.split() for line in proc.stdout.splitlines() if line.startswith("NAME")]
    assert len(headers) == 3, proc.stdout
    for header, kind in zip(headers, ["HostPool", "SessionHost", "SessionRequest"], strict=True):
        want = [c.upper() for c in REQUIRED_COLUMNS[kind]]
        assert set(want) <= set(header), f"{kind}: {header}\n{proc.stdout}"


def test_kubectl_get_hostpool_lists_only_pools(kube: Kube, namespace: str) -> None:
    """A CRD category named like a resource would shadow it: kubectl expands categories
    first (this was once the case with the category 'hostpool')."""
    kubectl = _kubectl(kube)
    if kubectl is None:
        pytest.skip("no kubectl (neither the suite's tools nor on PATH)")
    kube.create(namespace, pool())
    kube.create(namespace, host())
    proc = subprocess.run(
        [kubectl, "--kubeconfig", str(kube.kubeconfig), "-n", namespace, "get", "hostpool"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "sessionhost" not in proc.stdout, proc.stdout
    # The category itself lists every kind of the project.
    categories = kube.read_crd(f"hostpools.{api.GROUP}")["spec"]["names"].get("categories", [])
    for category in categories:
        proc = subprocess.run(
            [kubectl, "--kubeconfig", str(kube.kubeconfig), "-n", namespace, "get", category],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "hostpool.hostpool.io/pool" in proc.stdout, proc.stdout
        assert "sessionhost.hostpool.io/host" in proc.stdout, proc.stdout
