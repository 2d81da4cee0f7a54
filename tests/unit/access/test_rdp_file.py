"""The .rdp file the broker hands out: every value it writes stays on its own line.

A value with a line break (or any other control character) would add a property of its
writer's choosing to every file handed out for that host: ``drivestoredirect:s:*`` to take
the user's drives, another ``full address`` to send them elsewhere. The writer refuses such
a value (``RdpValueError``, naming the field) instead of writing the file, and the connect
answer turns that into a refusal with a reason.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator import api
from hostpool_operator.access import connect
from hostpool_operator.access.rdp import RdpValueError, rdp_file
from hostpool_operator.access.views import RequestView
from support.access_views import pool_view

INJECTION = "\r\ndrivestoredirect:s:*\r\nredirectclipboard:i:1"
BREAKS = ["\r", "\n", "\r\n", "\x0b", "\x0c", "\x00", "\x1c", "\x85", "\u2028", "\u2029", "\x7f"]


def connection(
    properties: str | None = None, gateway: str | None = None, port: int = 3389
) -> api.Connection:
    """A connection built without validation: the writer must not rely on the model's."""
    return api.Connection.model_construct(
        port=port,
        rdp_properties=properties,
        gateway=api.Gateway.model_construct(hostname=gateway) if gateway is not None else None,
    )


def expected_lines(
    address: str,
    user: str,
    properties: list[str],
    gateway: str | None,
    port: int = 3389,
    clipboard: int = 1,
) -> list[str]:
    host = f"[{address}]" if ":" in address else address
    lines = [
        f"full address:s:{host}:{port}",
        f"username:s:{user}",
        *properties,
        f"redirectclipboard:i:{clipboard}",
    ]
    if gateway is not None:
        lines += [
            f"gatewayhostname:s:{gateway}",
            "gatewayusagemethod:i:1",
            "gatewayprofileusagemethod:i:1",
        ]
    return lines


def lines_of(text: str) -> list[str]:
    assert text.endswith("\r\n")
    body = text[:-2]
    # Every line ends in CRLF and holds nothing any reader takes for a line end.
    assert body.splitlines() == body.split("\r\n")
    return body.split("\r\n")


# ------------------------------------------------------------------------------- table


@pytest.mark.parametrize(
    ("address", "user", "properties", "gateway", "field"),
    [
        ("10.0.0.5" + INJECTION, "alice", None, None, "address"),
        ("10.0.0.5\n", "alice", None, None, "address"),
        ("rds.example\rfull address:s:evil.example:3389", "alice", None, None, "address"),
        ("evil.example:443", "alice", None, None, "address"),
        ("[fd00::5]", "alice", None, None, "address"),
        ("10.0.0.5 ", "alice", None, None, "address"),
        ("", "alice", None, None, "address"),
        ("10.0.0.5", "alice" + INJECTION, None, None, "username"),
        ("10.0.0.5", "alice\n", None, None, "username"),
        ("10.0.0.5", "alice\x00", None, None, "username"),
        ("10.0.0.5", "alice", "audiomode:i:0;x:s:y" + INJECTION, None, "rdpProperties"),
        ("10.0.0.5", "alice", "x:s:y\n", None, "rdpProperties"),
        ("10.0.0.5", "alice", "x:s:y\x0bz", None, "rdpProperties"),
        ("10.0.0.5", "alice", "x:s:y\u2028z", None, "rdpProperties"),
        ("10.0.0.5", "alice", None, "gw.example" + INJECTION, "gateway.hostname"),
        ("10.0.0.5", "alice", None, "gw.example\n", "gateway.hostname"),
    ],
)
def test_a_value_that_would_add_a_line_is_refused(
    address: str, user: str, properties: str | None, gateway: str | None, field: str
) -> None:
    with pytest.raises(RdpValueError) as refused:
        rdp_file(address, user, connection(properties, gateway))
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("address", "full"),
    [
        ("10.0.0.5", "10.0.0.5:3389"),
        ("fd00::5", "[fd00::5]:3389"),
        ("::ffff:10.0.0.5", "[::ffff:10.0.0.5]:3389"),
        ("rds-01.corp.example", "rds-01.corp.example:3389"),
        ("h1", "h1:3389"),
    ],
)
def test_valid_addresses_are_written_as_host_port(address: str, full: str) -> None:
    text = rdp_file(address, "alice", connection())
    assert lines_of(text) == [
        f"full address:s:{full}",
        "username:s:alice",
        "redirectclipboard:i:1",
    ]


@pytest.mark.parametrize(
    ("clipboard", "properties", "written"),
    [
        (api.Clipboard.ENABLED, None, 1),
        (api.Clipboard.DISABLED, None, 0),
        (api.Clipboard.ENABLED, "redirectclipboard:i:1", 1),
        # A pool that turned it off in its properties before `clipboard` keeps it off.
        (api.Clipboard.ENABLED, "RedirectClipboard:i:0", 0),
        (api.Clipboard.DISABLED, "redirectclipboard:i:0", 0),
    ],
)
def test_the_clipboard_line_is_the_pools_and_there_is_one(
    clipboard: api.Clipboard, properties: str | None, written: int
) -> None:
    connection = api.Connection(clipboard=clipboard, rdp_properties=properties)
    lines = lines_of(rdp_file("10.0.0.5", "alice", connection))
    assert [line for line in lines if line.lower().startswith("redirectclipboard:")] == [
        f"redirectclipboard:i:{written}"
    ]
    assert connection.clipboard_allowed is bool(written)


def test_the_pools_settings_and_gateway_each_on_their_line() -> None:
    text = rdp_file(
        "10.0.0.7",
        "alice@corp.example",
        connection("audiomode:i:0;;drivestoredirect:s:", "rdgw.corp.example:443"),
    )
    assert lines_of(text) == expected_lines(
        "10.0.0.7",
        "alice@corp.example",
        ["audiomode:i:0", "drivestoredirect:s:"],
        "rdgw.corp.example:443",
    )


# --------------------------------------------------------------------------- properties

ADDRESSES = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
    st.ip_addresses(v=6).map(lambda a: a.exploded),
    st.from_regex(
        r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?(\.[a-z]([a-z0-9-]{0,10}[a-z0-9])?){0,3}", fullmatch=True
    ),
)
#: Text without a control character: a user name, an s-value.
PLAIN = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=40)
PROPERTY = st.tuples(
    st.from_regex(r"[a-z][a-z0-9 ]{0,12}", fullmatch=True).filter(
        lambda n: n.lower() not in api.BROKER_RDP_PROPERTIES
    ),
    st.sampled_from(["i", "s", "b"]),
    PLAIN.filter(lambda v: ";" not in v),
    st.integers(-5, 10**6),
).map(
    lambda t: (
        f"{t[0]}:{t[1]}:"
        + (str(t[3]) if t[1] == "i" else t[2] if t[1] == "s" else format(abs(t[3]), "x"))
    )
)
GATEWAYS = st.one_of(
    st.none(),
    st.from_regex(r"[a-z][a-z0-9]{0,8}(\.[a-z][a-z0-9]{0,8}){0,2}(:[0-9]{1,5})?", fullmatch=True),
)


@given(ADDRESSES, PLAIN.filter(bool), st.lists(PROPERTY, max_size=6), GATEWAYS)
def test_every_valid_input_yields_exactly_its_lines(
    address: str, user: str, properties: list[str], gateway: str | None
) -> None:
    text = rdp_file(address, user, connection(";".join(properties) or None, gateway))
    assert lines_of(text) == expected_lines(address, user, properties, gateway)


SLOTS = ("address", "username", "rdpProperties", "gateway.hostname")


@given(
    st.sampled_from(SLOTS),
    PLAIN,
    st.sampled_from(BREAKS),
    PLAIN,
)
def test_a_control_character_anywhere_never_yields_an_extra_line(
    slot: str, before: str, brk: str, after: str
) -> None:
    """Whatever the value around it, a line break in any slot is refused, never written."""
    value = before + brk + after
    address, user, properties, gateway = "10.0.0.5", "alice", "x:s:y", "gw.example"
    if slot == "address":
        address = value
    elif slot == "username":
        user = value
    elif slot == "rdpProperties":
        properties = f"x:s:{value}"
    else:
        gateway = value
    with pytest.raises(RdpValueError) as refused:
        rdp_file(address, user, connection(properties, gateway))
    assert refused.value.field == slot


# ------------------------------------------------------------------------- the answer


def placed(address: str) -> RequestView:
    return RequestView.from_api(
        {
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"poolRef": {"name": "desk"}, "user": "alice"},
            "status": {
                "phase": "Assigned",
                "host": "h1",
                "hostAddress": address,
                "reason": "NewSession",
            },
        }
    )


def test_connect_refuses_a_host_whose_address_would_inject_lines() -> None:
    got = connect.answer(
        placed("10.0.0.5" + INJECTION),
        pool_view(["alice"], free=None),
        connect.Caller("alice", frozenset()),
        reused=False,
    )
    assert (got.status, got.reason) == (503, "HostAddressInvalid")
    assert got.rdp is None
    assert "rdpFile" not in got.body
    assert got.retry_after is not None
    assert got.retry_after > 0
    assert got.body["reason"] == "HostAddressInvalid"
    # The user is told what is wrong and by whom it is fixed, without the bad value itself.
    assert "h1" in got.body["message"]
    assert "drivestoredirect" not in got.body["message"]


def test_connect_refuses_a_user_name_with_a_line_break() -> None:
    got = connect.answer(
        placed("10.0.0.5"),
        pool_view(["alice"], free=None),
        connect.Caller("alice\r\nx:s:y", frozenset()),
        reused=False,
    )
    assert (got.status, got.reason, got.rdp) == (400, "UserNameInvalid", None)
