"""The address rule (an IP literal or a DNS name) on every field that holds a host address,
and the rule on a request's user (no control characters), as the models check them.

The CRDs carry the same patterns (tests/api/test_addresses_live.py has the API server
refuse them); here the pure rule and the models, table and hypothesis.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from hostpool_operator import api
from hostpool_operator.api.address import (
    GATEWAY_PATTERN,
    HOST_ADDRESS_PATTERN,
    NO_CONTROL_PATTERN,
    has_control_character,
    is_gateway,
    is_host_address,
)

INJECTED = "10.0.0.5\r\ndrivestoredirect:s:*\r\nredirectclipboard:i:1"

GOOD = [
    "10.0.0.5",
    "0.0.0.0",
    "255.255.255.255",
    "fd00::5",
    "::1",
    "::",
    "1:2:3:4:5:6:7:8",
    "1:2:3:4:5:6:7::",
    "::2:3:4:5:6:7:8",
    "::ffff:10.0.0.5",
    "64:ff9b::192.0.2.33",
    "FD00:0:0:0:0:0:0:5",
    "rds-01.corp.example",
    "h1",
    "1e100.net",
    "desk-0.desk.pool.svc.cluster.local",
    "a" * 63 + ".example",
]
BAD = [
    INJECTED,
    "10.0.0.5\n",
    "10.0.0.5\r",
    "\n10.0.0.5",
    "10.0.0.5\x00",
    "10.0.0.256",
    "10.0.0.05",
    "10.0.0",
    "1.2.3.4.5",
    "10.0.0.5:3389",
    "[fd00::5]",
    "fd00::5%eth0",
    "1::2::3",
    "1:2:3:4:5:6:7:8:9",
    "12345::1",
    "",
    " 10.0.0.5",
    "10.0.0.5 ",
    "rds example",
    "rds_01.example",
    "-rds.example",
    "rds-.example",
    "rds..example",
    "rds.example.",
    ".rds.example",
    "rds.example/x",
    "evil.example;drivestoredirect:s:*",
    "r\u0430s.example",  # a Cyrillic a
    "a" * 254,
]


@pytest.mark.parametrize("value", GOOD)
def test_good_addresses(value: str) -> None:
    assert is_host_address(value)
    api.SessionHostSpec.model_validate({"poolRef": {"name": "p"}, "address": value})


@pytest.mark.parametrize("value", BAD)
def test_bad_addresses(value: str) -> None:
    assert not is_host_address(value)


# Every field that holds an address, as (model, the object around the value, field path).
def _host_spec(v: str) -> dict[str, Any]:
    return {"spec": {"poolRef": {"name": "p"}, "address": v}}


def _host_status(v: str) -> dict[str, Any]:
    return {"spec": {"poolRef": {"name": "p"}}, "status": {"address": v}}


def _agent(v: str) -> dict[str, Any]:
    return {"spec": {"poolRef": {"name": "p"}}, "status": {"agent": {"address": v}}}


def _request(v: str) -> dict[str, Any]:
    return {"spec": {"poolRef": {"name": "p"}, "user": "u"}, "status": {"hostAddress": v}}


def _template(v: str) -> dict[str, Any]:
    return {
        "spec": {
            "loadBalancer": {"type": "BreadthFirst"},
            "scaling": {"hostTemplate": {"spec": {"address": v}}},
        }
    }


FIELDS = [
    (api.SessionHost, _host_spec, "spec.address"),
    (api.SessionHost, _host_status, "status.address"),
    (api.SessionHost, _agent, "status.agent.address"),
    (api.SessionRequest, _request, "status.hostAddress"),
    (api.HostPool, _template, "spec.scaling.hostTemplate.spec.address"),
]


@pytest.mark.parametrize(("model", "build", "path"), FIELDS, ids=[f[2] for f in FIELDS])
@pytest.mark.parametrize("value", [INJECTED, "10.0.0.5\n", "evil.example:443", "[fd00::5]"])
def test_every_address_field_refuses_a_bad_address(
    model: type[api.ApiModel], build: Any, path: str, value: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(build(value))
    assert api.describe_validation_error(refused.value).startswith(path), refused.value


@pytest.mark.parametrize(("model", "build", "path"), FIELDS, ids=[f[2] for f in FIELDS])
@pytest.mark.parametrize("value", ["10.0.0.5", "fd00::5", "rds.corp.example"])
def test_every_address_field_takes_a_good_address(
    model: type[api.ApiModel], build: Any, path: str, value: str
) -> None:
    model.model_validate(build(value))


@given(st.ip_addresses())
def test_every_ip_address_python_knows_is_an_address(address: Any) -> None:
    assert is_host_address(str(address))
    assert is_host_address(address.exploded)
    if address.version == 6:
        assert not is_host_address(f"[{address}]")


@given(st.from_regex(HOST_ADDRESS_PATTERN, fullmatch=True))
def test_whatever_the_pattern_takes_is_an_ip_address_or_a_name(value: str) -> None:
    """Python's ``$`` also matches before a final line break (Go's and Rust's do not), so
    the Python check is a full match; the models (Rust) refuse ``10.0.0.5\\n`` above."""
    if len(value) > api.MAX_ADDRESS:
        return
    assert is_host_address(value)
    assert not has_control_character(value)
    if not re.search(r"[A-Za-z]", value.split(".")[-1]) or ":" in value:
        ipaddress.ip_address(value)  # not a DNS name: then an IP address Python reads


@given(st.text(max_size=20), st.sampled_from(["\r", "\n", "\x00", "\u2028"]), st.text(max_size=20))
def test_no_address_holds_a_line_break(before: str, brk: str, after: str) -> None:
    assert not is_host_address(before + brk + after)
    assert not is_gateway(before + brk + after)


# ---------------------------------------------------------------------------- gateway


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("rdgw.corp.example", True),
        ("rdgw.corp.example:443", True),
        ("10.0.0.9:443", True),
        ("[fd00::9]:443", True),
        ("[fd00::9]", True),
        ("fd00::9", False),
        ("rdgw.corp.example\r\nx:s:y", False),
        ("rdgw..corp", False),
        ("999.1.1.1", False),
    ],
)
def test_gateway_hostname(value: str, ok: bool) -> None:
    assert is_gateway(value) is ok
    assert re.fullmatch(GATEWAY_PATTERN, value) is not None if ok else True
    if ok:
        api.Gateway.model_validate({"hostname": value})
    else:
        with pytest.raises(ValidationError):
            api.Gateway.model_validate({"hostname": value})


# ------------------------------------------------------------------------- spec.user


@pytest.mark.parametrize(
    "user",
    [
        "alice\r\n",
        "alice\n",
        "al\rice",
        "alice\x00",
        "alice\x1b[31m",
        "alice\x7f",
        "a\x85",
        "a\u2028",
    ],
)
def test_a_request_user_with_a_control_character_is_refused(user: str) -> None:
    with pytest.raises(ValidationError) as refused:
        api.SessionRequest.model_validate({"spec": {"poolRef": {"name": "p"}, "user": user}})
    assert api.describe_validation_error(refused.value).startswith("spec.user"), refused.value


@pytest.mark.parametrize(
    "user", ["alice", "a&b", "a|b", "o'brien", "alice@corp.example", "CORP\\alice", "zoë", "%USER%"]
)
def test_a_request_user_with_shell_characters_is_a_name(user: str) -> None:
    """& and | are legal in names; the agent's docs say how to pass a name to a command."""
    api.SessionRequest.model_validate({"spec": {"poolRef": {"name": "p"}, "user": user}})
    assert re.fullmatch(NO_CONTROL_PATTERN, user)


@given(st.text(min_size=1, max_size=50))
def test_the_user_rule_is_exactly_no_control_character(user: str) -> None:
    body = {"spec": {"poolRef": {"name": "p"}, "user": user}}
    if has_control_character(user):
        with pytest.raises(ValidationError):
            api.SessionRequest.model_validate(body)
    else:
        api.SessionRequest.model_validate(body)
