"""Personal pools as the API server takes them: ``spec.type``, ``spec.personal``, a host's
``spec.assignedUser`` and ``status.power``.

The generated CRDs on a real kube-apiserver: ``type`` defaults to Pooled and cannot change;
a Personal pool needs no ``loadBalancer`` (nothing is balanced) while a Pooled one does;
``personal`` is refused on a Pooled pool; a host's user can be given to an empty host, and
not changed or taken while a session is on it. Each pool table is also given to the pydantic
model the operator reads pools with, which must take and refuse the same specs.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hostpool_operator.api import HostPoolSpec, PoolType
from support.builders import host, manifest
from support.kube import ApiError, Kube

Obj = dict[str, Any]

BREADTH = {"type": "BreadthFirst"}

#: Specs both take, and what the server stores of the fields this test is about.
VALID: list[tuple[Obj, Obj]] = [
    ({"loadBalancer": BREADTH}, {"type": "Pooled"}),
    ({"type": "Personal"}, {"type": "Personal"}),
    (
        {"type": "Personal", "personal": {}},
        {"type": "Personal", "personal": {"assignment": "Automatic"}},
    ),
    (
        {"type": "Personal", "personal": {"assignment": "Direct", "stopAfterMinutes": 1}},
        {"type": "Personal", "personal": {"assignment": "Direct", "stopAfterMinutes": 1}},
    ),
    (
        {"type": "Personal", "loadBalancer": BREADTH, "personal": {"stopAfterMinutes": 10080}},
        {"type": "Personal", "personal": {"assignment": "Automatic", "stopAfterMinutes": 10080}},
    ),
]

#: Specs both refuse, and the field the refusal names.
INVALID: list[tuple[Obj, str]] = [
    ({}, "loadBalancer"),
    ({"type": "Pooled"}, "loadBalancer"),
    ({"type": "Shared", "loadBalancer": BREADTH}, "type"),
    ({"loadBalancer": BREADTH, "personal": {}}, "personal"),
    ({"type": "Personal", "personal": {"assignment": "Random"}}, "assignment"),
    ({"type": "Personal", "personal": {"stopAfterMinutes": 0}}, "stopAfterMinutes"),
    ({"type": "Personal", "personal": {"stopAfterMinutes": 10081}}, "stopAfterMinutes"),
]


def hostpool(name: str, spec: Obj) -> Obj:
    return manifest("HostPool", name, spec)


# ---------------------------------------------------------------------------------------
# the model, on the same tables (no cluster)


@pytest.mark.parametrize(("spec", "stored"), VALID)
def test_the_model_takes_valid_specs(spec: Obj, stored: Obj) -> None:
    parsed = HostPoolSpec.model_validate(spec)
    dumped = parsed.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert {key: dumped[key] for key in stored} == stored
    assert parsed.is_personal is (parsed.type is PoolType.PERSONAL)


@pytest.mark.parametrize(("spec", "field"), INVALID)
def test_the_model_refuses_bad_specs(spec: Obj, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        HostPoolSpec.model_validate(spec)
    assert field in str(info.value), info.value


# ---------------------------------------------------------------------------------------
# the API server


def test_the_server_takes_valid_specs_with_defaults(kube: Kube, namespace: str) -> None:
    for index, (spec, stored) in enumerate(VALID):
        made = kube.create(namespace, hostpool(f"ok{index}", spec))
        assert {key: made["spec"].get(key) for key in stored} == stored, spec


def test_the_server_refuses_bad_specs_naming_the_field(kube: Kube, namespace: str) -> None:
    wrong: list[tuple[Any, ...]] = []
    for index, (spec, field) in enumerate(INVALID):
        try:
            kube.create(namespace, hostpool(f"bad{index}", spec))
        except ApiError as error:
            if error.status != 422 or field not in error.message:
                wrong.append((spec, error.status, error.message))
            continue
        wrong.append((spec, 201, "taken"))
    assert not wrong, wrong


@pytest.mark.parametrize(("before", "after"), [("Pooled", "Personal"), ("Personal", "Pooled")])
def test_the_type_of_a_pool_cannot_change(
    kube: Kube, namespace: str, before: str, after: str
) -> None:
    kube.create(namespace, hostpool("p", {"type": before, "loadBalancer": BREADTH}))
    with pytest.raises(ApiError) as info:
        kube.merge_patch("HostPool", namespace, "p", {"spec": {"type": after}})
    assert info.value.status == 422, info.value
    assert "spec.type" in info.value.message, info.value.message
    assert "immutable" in info.value.message, info.value.message
    assert kube.get("HostPool", namespace, "p")["spec"]["type"] == before


def sessions(kube: Kube, namespace: str, name: str, total: int) -> None:
    status = {"sessions": {"total": total, "active": total}}
    kube.merge_patch("SessionHost", namespace, name, {"status": status}, status=True)


def assign(kube: Kube, namespace: str, name: str, user: str | None) -> Obj:
    return kube.merge_patch("SessionHost", namespace, name, {"spec": {"assignedUser": user}})


def test_a_hosts_user_changes_only_while_no_session_is_on_it(kube: Kube, namespace: str) -> None:
    kube.create(namespace, hostpool("p", {"type": "Personal"}))
    kube.create(namespace, host("h", "p"))
    # An empty host is given, and given to someone else.
    assert assign(kube, namespace, "h", "alice")["spec"]["assignedUser"] == "alice"
    assert assign(kube, namespace, "h", "bob")["spec"]["assignedUser"] == "bob"
    sessions(kube, namespace, "h", 1)
    for user in ("alice", None):  # neither changed nor taken away while bob is on it
        with pytest.raises(ApiError) as info:
            assign(kube, namespace, "h", user)
        assert info.value.status == 422, info.value
        assert "spec.assignedUser" in info.value.message, info.value.message
        assert "while a session is on the host" in info.value.message, info.value.message
    # Other spec fields still change, and the same user may be written again.
    kube.merge_patch("SessionHost", namespace, "h", {"spec": {"drainMode": True}})
    assert assign(kube, namespace, "h", "bob")["spec"]["assignedUser"] == "bob"
    sessions(kube, namespace, "h", 0)
    assert "assignedUser" not in assign(kube, namespace, "h", None)["spec"]


def test_a_user_name_with_a_control_character_is_refused(kube: Kube, namespace: str) -> None:
    kube.create(namespace, hostpool("p", {"type": "Personal"}))
    with pytest.raises(ApiError) as info:
        kube.create(namespace, host("h", "p", assignedUser="alice\nbob"))
    assert info.value.status == 422, info.value
    assert "spec.assignedUser" in info.value.message, info.value.message


def test_power_takes_only_its_states(kube: Kube, namespace: str) -> None:
    kube.create(namespace, hostpool("p", {"type": "Personal"}))
    kube.create(namespace, host("h", "p", assignedUser="alice"))
    for power in ("Starting", "Running", "Stopped"):
        written = kube.merge_patch(
            "SessionHost", namespace, "h", {"status": {"power": power}}, status=True
        )
        assert written["status"]["power"] == power
    with pytest.raises(ApiError) as info:
        kube.merge_patch("SessionHost", namespace, "h", {"status": {"power": "Off"}}, status=True)
    assert info.value.status == 422, info.value
    assert "status.power" in info.value.message, info.value.message
