"""A pool's image-update settings (``spec.update``), as the API server takes them.

The generated CRD on a real kube-apiserver fills in the defaults (WaitForLogoff, one host
unavailable, one extra, 15 minutes' notice) and refuses, naming the field and saying what to
change, ``maxSurge: 0`` with ``maxUnavailable: 0``, a percentage that is not one, a logoff
message over 512 characters and a canary larger than ``maxHosts``. Each table is also given
to the pydantic models the operator reads pools with, which must take and refuse the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hostpool_operator.api import HostPoolSpec
from support.builders import pool
from support.kube import ApiError, Kube

Obj = dict[str, Any]

DEFAULTS: Obj = {
    "strategy": "WaitForLogoff",
    "maxUnavailable": 1,
    "maxSurge": 1,
    "logoffDelayMinutes": 15,
    "paused": False,
}
SCALING: Obj = {"maxHosts": 4}

#: Settings both the server and the model take, with what the server stores.
VALID: list[tuple[Obj, Obj]] = [
    ({}, DEFAULTS),
    (
        {"maxSurge": "25%", "maxUnavailable": "0%"},
        {**DEFAULTS, "maxSurge": "25%", "maxUnavailable": "0%"},
    ),
    (
        {"maxSurge": 0, "maxUnavailable": "100%"},
        {**DEFAULTS, "maxSurge": 0, "maxUnavailable": "100%"},
    ),
    (
        {"strategy": "ForceLogoff", "logoffDelayMinutes": 0, "logoffMessage": "m" * 512},
        {
            **DEFAULTS,
            "strategy": "ForceLogoff",
            "logoffDelayMinutes": 0,
            "logoffMessage": "m" * 512,
        },
    ),
    (
        {"strategy": "OnDelete", "paused": True},
        {**DEFAULTS, "strategy": "OnDelete", "paused": True},
    ),
    (
        {"notBefore": "2026-12-24T22:00:00Z", "canary": {"hosts": 4}},
        {
            **DEFAULTS,
            "notBefore": "2026-12-24T22:00:00Z",
            "canary": {"hosts": 4, "observeMinutes": 10, "readyTimeoutMinutes": 10},
        },
    ),
]

#: Settings both refuse, the field the refusal names, and words it says.
INVALID: list[tuple[Obj, str, str]] = [
    ({"maxSurge": 0, "maxUnavailable": 0}, "maxSurge", "cannot both be 0"),
    ({"maxSurge": "0%", "maxUnavailable": 0}, "maxSurge", "cannot both be 0"),
    ({"maxSurge": "25 percent"}, "maxSurge", "percentage"),
    ({"maxUnavailable": "150%"}, "maxUnavailable", "percentage"),
    ({"maxUnavailable": -1}, "maxUnavailable", ""),
    ({"logoffMessage": "m" * 513}, "logoffMessage", ""),
    ({"strategy": "Recreate"}, "strategy", ""),
    ({"canary": {"hosts": 5}}, "canary.hosts", "maxHosts"),
    ({"canary": {"hosts": 1, "readyTimeoutMinutes": 0}}, "canary.readyTimeoutMinutes", ""),
]


def spec(update: Obj) -> Obj:
    return {
        "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 4},
        "scaling": SCALING,
        "update": update,
    }


@pytest.mark.parametrize(("update", "stored"), VALID)
def test_the_model_takes_valid_settings(update: Obj, stored: Obj) -> None:
    parsed = HostPoolSpec.model_validate(spec(update))
    assert parsed.update is not None
    assert parsed.update.to_api() == stored


@pytest.mark.parametrize(("update", "field", "words"), INVALID)
def test_the_model_refuses_bad_settings(update: Obj, field: str, words: str) -> None:
    with pytest.raises(ValidationError) as info:
        HostPoolSpec.model_validate(spec(update))
    text = str(info.value)
    assert field.split(".")[-1] in text, text
    assert words in text, text


def test_the_server_takes_valid_settings_with_defaults(kube: Kube, namespace: str) -> None:
    for index, (update, stored) in enumerate(VALID):
        made = kube.create(namespace, pool(f"ok{index}", **spec(update)))
        assert made["spec"]["update"] == stored, update
    made = kube.create(namespace, pool("none", "DepthFirst", 4))
    assert "update" not in made["spec"]


def test_the_server_refuses_bad_settings_naming_the_field(kube: Kube, namespace: str) -> None:
    wrong: list[tuple[Any, ...]] = []
    for index, (update, field, words) in enumerate(INVALID):
        try:
            kube.create(namespace, pool(f"bad{index}", **spec(update)))
        except ApiError as error:
            named = f"spec.update.{field}" in error.message
            if error.status != 422 or not named or words not in error.message:
                wrong.append((update, error.status, error.message))
            continue
        wrong.append((update, 201, "taken"))
    assert not wrong, wrong


def test_lowering_max_hosts_below_the_canary_is_refused(kube: Kube, namespace: str) -> None:
    kube.create(namespace, pool("p", **spec({"canary": {"hosts": 3}})))
    with pytest.raises(ApiError) as info:
        kube.merge_patch("HostPool", namespace, "p", {"spec": {"scaling": {"maxHosts": 2}}})
    assert info.value.status == 422, info.value
    assert "spec.update.canary.hosts" in info.value.message, info.value.message
    assert kube.get("HostPool", namespace, "p")["spec"]["scaling"]["maxHosts"] == 4
