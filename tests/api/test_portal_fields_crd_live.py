"""The pool fields the portal reads, as the API server takes them: ``spec.displayName`` (1 to
64 characters, counted as characters, not bytes; no control characters) and
``spec.connection.web`` (a boolean, false when the connection says nothing). Each table is
also given to the pydantic model, which must take and refuse the same values."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hostpool_operator.api.pool import HostPoolSpec
from support.builders import pool
from support.kube import ApiError, Kube

Obj = dict[str, Any]

GOOD_NAMES = ["Finance desktops", "d", "x" * 64, "데" * 64, "财务桌面 — Ekonomi (ÅÄÖ) & <b>"]
BAD_NAMES = ["", "x" * 65, "데" * 65, "line\nbreak", "tab\there", "nul\x00", "c1\x85", "sep\u2028"]


def spec(**fields: Any) -> Obj:
    return {"loadBalancer": {"type": "BreadthFirst", "maxSessionLimit": 2}, **fields}


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_the_model_takes_display_names(name: str) -> None:
    assert HostPoolSpec.model_validate(spec(displayName=name)).display_name == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_the_model_refuses_display_names(name: str) -> None:
    with pytest.raises(ValidationError, match="displayName"):
        HostPoolSpec.model_validate(spec(displayName=name))


def test_the_model_web_defaults_to_false() -> None:
    connection = HostPoolSpec.model_validate(spec(connection={})).connection
    assert connection is not None
    assert connection.web is False
    with pytest.raises(ValidationError, match="web"):
        HostPoolSpec.model_validate(spec(connection={"web": "sometimes"}))


def test_the_server_takes_and_refuses_display_names(kube: Kube, namespace: str) -> None:
    wrong: list[tuple[str, Any]] = []
    for index, name in enumerate(GOOD_NAMES):
        made = kube.create(namespace, pool(f"good{index}", "BreadthFirst", 2, displayName=name))
        if made["spec"].get("displayName") != name:
            wrong.append((name, made["spec"].get("displayName")))
    for index, name in enumerate(BAD_NAMES):
        try:
            kube.create(namespace, pool(f"bad{index}", "BreadthFirst", 2, displayName=name))
        except ApiError as error:
            if error.status != 422 or "spec.displayName" not in error.message:
                wrong.append((name, (error.status, error.message)))
            continue
        wrong.append((name, "taken"))
    assert not wrong, wrong
    # Absent: nothing stored (the portal shows the name).
    assert "displayName" not in kube.create(namespace, pool("plain", "BreadthFirst", 2))["spec"]


def test_the_server_defaults_web_to_false_and_takes_only_a_boolean(
    kube: Kube, namespace: str
) -> None:
    made = kube.create(namespace, pool("p1", "BreadthFirst", 2, connection={"port": 3390}))
    assert made["spec"]["connection"]["web"] is False
    made = kube.create(namespace, pool("p2", "BreadthFirst", 2, connection={"web": True}))
    assert made["spec"]["connection"] == {
        "web": True,
        "singleSignOn": False,
        "clipboard": "Enabled",
        "port": 3389,
        "protocol": "RDP",
    }
    assert "connection" not in kube.create(namespace, pool("p3", "BreadthFirst", 2))["spec"]
    with pytest.raises(ApiError) as info:
        kube.create(namespace, pool("p4", "BreadthFirst", 2, connection={"web": "yes"}))
    assert info.value.status == 422, info.value
    assert "spec.connection.web" in info.value.message, info.value.message
    # Turned on later, on the pool as it is.
    patched = kube.merge_patch("HostPool", namespace, "p1", {"spec": {"connection": {"web": True}}})
    assert patched["spec"]["connection"] == {
        "web": True,
        "singleSignOn": False,
        "clipboard": "Enabled",
        "port": 3390,
        "protocol": "RDP",
    }
