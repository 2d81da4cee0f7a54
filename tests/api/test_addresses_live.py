"""The API server refuses what would let a host address, or a user name, add lines to the
.rdp file the broker hands out: every address field takes an IP address or a DNS name only,
``spec.user`` of a request no control character, the pool's connection settings neither.

The rule's pure side is tests/unit/api/test_addresses.py; here the generated CRDs on a real
kube-apiserver (Go's regular expressions), which must agree with Python's check value for
value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostpool_operator.api.address import HOST_ADDRESS_PATTERN, is_host_address
from support.builders import host, pool, request
from support.kube import ApiError, Kube

Obj = dict[str, Any]

INJECTED = "10.0.0.5\r\ndrivestoredirect:s:*\r\nredirectclipboard:i:1"

#: Values either side of the rule, for the server and Python to agree on.
VALUES = [
    "10.0.0.5",
    "255.255.255.255",
    "fd00::5",
    "::",
    "1:2:3:4:5:6:7::",
    "::ffff:10.0.0.5",
    "rds-01.corp.example",
    "h1",
    "1e100.net",
    INJECTED,
    "10.0.0.5\n",
    "10.0.0.5\r",
    "\n10.0.0.5",
    "10.0.0.5\x00",
    "10.0.0.5\u2028",
    "10.0.0.256",
    "10.0.0.05",
    "10.0.0.5:3389",
    "[fd00::5]",
    "fd00::5%eth0",
    "1::2::3",
    "rds example",
    "rds..example",
    "rds.example.",
    "-rds.example",
    "evil.example;drivestoredirect:s:*",
]


def refused(call: Callable[..., Any], *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        call(*args, **kwargs)
    return info.value


def agent_reports(kube: Kube, namespace: str, name: str, address: str) -> Obj:
    """What an agent writes: a merge patch of status.agent on the status subresource."""
    patch = {"status": {"agent": {"version": "test", "address": address}}}
    return kube.merge_patch("SessionHost", namespace, name, patch, status=True)


def server_takes(kube: Kube, namespace: str, name: str, address: str) -> bool:
    """Whether the API server stores ``address`` as the agent's (False: a 422)."""
    try:
        agent_reports(kube, namespace, name, address)
    except ApiError as error:
        if error.status != 422:
            raise
        return False
    return True


def test_an_agent_cannot_report_an_address_that_adds_lines(kube: Kube, namespace: str) -> None:
    kube.create(namespace, host("h1"))
    error = refused(agent_reports, kube, namespace, "h1", INJECTED)
    assert error.status == 422, error
    assert "status.agent.address" in error.message, error.message
    assert "agent" not in kube.get("SessionHost", namespace, "h1").get("status", {})
    assert agent_reports(kube, namespace, "h1", "10.0.0.5")["status"]["agent"]["address"] == (
        "10.0.0.5"
    )


@pytest.mark.parametrize("value", [INJECTED, "evil.example:443", "[fd00::5]"])
def test_every_address_field_refuses_what_is_not_an_address(
    kube: Kube, namespace: str, value: str
) -> None:
    # spec.address, on create
    error = refused(kube.create, namespace, host("spec", address=value))
    assert (error.status, "spec.address" in error.message) == (422, True), error.message
    # the pool's host template
    template = {"hostTemplate": {"spec": {"address": value}}, "maxHosts": 2}
    error = refused(kube.create, namespace, pool("tpl", "BreadthFirst", 2, scaling=template))
    assert error.status == 422, error
    assert "spec.scaling.hostTemplate.spec.address" in error.message, error.message
    # status.address, written by the operator
    kube.create(namespace, host("st"))
    patch = {"status": {"address": value}}
    error = refused(kube.merge_patch, "SessionHost", namespace, "st", patch, status=True)
    assert (error.status, "status.address" in error.message) == (422, True), error.message
    # a request's status.hostAddress, written by the operator on assignment
    kube.create(namespace, request("r"))
    patch = {"status": {"phase": "Assigned", "host": "st", "hostAddress": value}}
    error = refused(kube.merge_patch, "SessionRequest", namespace, "r", patch, status=True)
    assert (error.status, "status.hostAddress" in error.message) == (422, True), error.message


def test_the_api_server_and_python_agree_on_every_address(kube: Kube, namespace: str) -> None:
    kube.create(namespace, host("agree"))
    disagree = [
        (value, taken)
        for value in VALUES
        if (taken := server_takes(kube, namespace, "agree", value)) != is_host_address(value)
    ]
    assert not disagree, f"(value, taken by the API server), Python says otherwise: {disagree}"


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.one_of(
        st.ip_addresses().map(str),
        st.from_regex(HOST_ADDRESS_PATTERN, fullmatch=True).filter(lambda v: len(v) <= 253),
        st.text(st.sampled_from("0123456789abcdef.:-[]\r\n "), min_size=1, max_size=24),
    )
)
def test_generated_addresses_the_server_and_python_agree_on(
    kube: Kube, namespace: str, value: str
) -> None:
    name = "gen"
    try:
        kube.get("SessionHost", namespace, name)
    except ApiError:
        kube.create(namespace, host(name))
    taken = server_takes(kube, namespace, name, value)
    assert taken == is_host_address(value), (value, taken)


@pytest.mark.parametrize("user", ["alice\r\n", "alice\nfull address:s:evil", "al\x1b[2Jice"])
def test_a_request_user_with_a_control_character_is_refused(
    kube: Kube, namespace: str, user: str
) -> None:
    error = refused(kube.create, namespace, request("bad", user=user))
    assert error.status == 422, error
    assert "spec.user" in error.message, error.message


@pytest.mark.parametrize("user", ["a&b", "a|b", "CORP\\alice", "o'brien", "zoë"])
def test_a_request_user_with_shell_characters_is_accepted(
    kube: Kube, namespace: str, user: str
) -> None:
    """Names may hold & and |: a logoff command reads the user safely (docs/agent.md)."""
    made = kube.create(namespace, request("ok", user=user))
    assert made["spec"]["user"] == user


@pytest.mark.parametrize(
    ("connection", "field"),
    [
        ({"rdpProperties": "audiomode:i:0;x:s:a\x0bb"}, "rdpProperties"),
        ({"rdpProperties": "x:s:a\u2028drivestoredirect:s:*"}, "rdpProperties"),
        ({"gateway": {"hostname": "gw.example\r\nx:s:y"}}, "gateway.hostname"),
        ({"gateway": {"hostname": "gw..example"}}, "gateway.hostname"),
    ],
)
def test_a_pools_connection_that_would_add_lines_is_refused(
    kube: Kube, namespace: str, connection: Obj, field: str
) -> None:
    error = refused(kube.create, namespace, pool("c", "BreadthFirst", 2, connection=connection))
    assert error.status == 422, error
    assert f"spec.connection.{field}" in error.message, error.message
