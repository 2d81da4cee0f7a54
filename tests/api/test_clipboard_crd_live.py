"""``spec.connection.clipboard`` as the API server takes it: Enabled or Disabled, Enabled
when the connection says nothing, and refused together with an ``rdpProperties``
``redirectclipboard`` that turns the clipboard on (the two would say opposite things). Each
table is also given to the pydantic model, which must take and refuse the same."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hostpool_operator.api.pool import HostPoolSpec
from support.builders import pool
from support.kube import ApiError, Kube

Obj = dict[str, Any]

#: (connection, the clipboard the pool ends up with: True on, False off).
TAKEN: list[tuple[Obj, bool]] = [
    ({}, True),
    ({"clipboard": "Enabled"}, True),
    ({"clipboard": "Disabled"}, False),
    ({"clipboard": "Disabled", "rdpProperties": "audiomode:i:0;redirectclipboard:i:0"}, False),
    ({"clipboard": "Disabled", "rdpProperties": "RedirectClipboard:i:00"}, False),
    ({"clipboard": "Enabled", "rdpProperties": "redirectclipboard:i:1"}, True),
    # The stricter wins: a pool that turned it off in its properties keeps it off.
    ({"rdpProperties": "redirectclipboard:i:0"}, False),
]
#: (connection, what the refusal names).
REFUSED: list[tuple[Obj, str]] = [
    ({"clipboard": "Off"}, "spec.connection.clipboard"),
    ({"clipboard": "disabled"}, "spec.connection.clipboard"),
    ({"clipboard": True}, "spec.connection.clipboard"),
    ({"clipboard": "Disabled", "rdpProperties": "redirectclipboard:i:1"}, "redirectclipboard"),
    (
        {"clipboard": "Disabled", "rdpProperties": "x:i:0;REDIRECTCLIPBOARD:i:-3"},
        "redirectclipboard",
    ),
    ({"clipboard": "Disabled", "rdpProperties": "redirectclipboard:s:0"}, "redirectclipboard"),
]


def spec(connection: Obj) -> Obj:
    return {
        "loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 2},
        "connection": connection,
    }


@pytest.mark.parametrize(("connection", "on"), TAKEN)
def test_the_model_takes(connection: Obj, on: bool) -> None:
    made = HostPoolSpec.model_validate(spec(connection)).connection
    assert made is not None
    assert made.clipboard_allowed is on


@pytest.mark.parametrize(("connection", "names"), REFUSED)
def test_the_model_refuses(connection: Obj, names: str) -> None:
    with pytest.raises(ValidationError, match=names.rsplit(".", 1)[-1]):
        HostPoolSpec.model_validate(spec(connection))


def test_the_server_takes_defaults_and_refuses(kube: Kube, namespace: str) -> None:
    wrong: list[tuple[Obj, Any]] = []
    for index, (connection, _) in enumerate(TAKEN):
        made = kube.create(
            namespace, pool(f"good{index}", "BreadthFirst", 2, connection=connection)
        )
        want = connection.get("clipboard", "Enabled")
        if made["spec"]["connection"].get("clipboard") != want:
            wrong.append((connection, made["spec"]["connection"]))
    for index, (connection, names) in enumerate(REFUSED):
        try:
            kube.create(namespace, pool(f"bad{index}", "BreadthFirst", 2, connection=connection))
        except ApiError as error:
            if error.status != 422 or names not in error.message:
                wrong.append((connection, (error.status, error.message)))
            continue
        wrong.append((connection, "taken"))
    assert not wrong, wrong
    # Turned off later, on the pool as it is; and refused while its properties say on.
    patched = kube.merge_patch(
        "HostPool", namespace, "good0", {"spec": {"connection": {"clipboard": "Disabled"}}}
    )
    assert patched["spec"]["connection"]["clipboard"] == "Disabled"
    with pytest.raises(ApiError) as info:
        kube.merge_patch(
            "HostPool", namespace, "good5", {"spec": {"connection": {"clipboard": "Disabled"}}}
        )
    assert info.value.status == 422, info.value
    assert "spec.connection.rdpProperties" in info.value.message, info.value.message
