"""The ``.rdp`` file a client opens: where to connect, as whom, and the pool's settings.

Written the way mstsc and FreeRDP read it: one ``name:type:value`` a line, CRLF line ends,
``full address`` as ``host:port`` (an IPv6 address in brackets), and ``redirectclipboard``
as the pool's ``connection.clipboard`` says.

Every value is checked here, where the file is written, whatever checked it before (the
CRD's patterns, the token's verifier): a line break in any of them would add a property of
its writer's choosing to the file of every user sent to that host (``drivestoredirect:s:*``,
a second ``full address``). A value that cannot be written as it is raises
``RdpValueError`` naming the field, and no file is written at all.
"""

from __future__ import annotations

from ..api import Connection, parse_rdp_properties
from ..api.access import CLIPBOARD_PROPERTY
from ..api.address import ADDRESS_RULE, has_control_character, is_gateway, is_host_address


class RdpValueError(ValueError):
    """A value the ``.rdp`` file cannot carry; ``field`` says which (address, username,
    rdpProperties, gateway.hostname). The message never repeats the value."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


def full_address(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"{host}:{port}"


def rdp_file(address: str, user: str, connection: Connection) -> str:
    """The file for ``user`` to connect to ``address`` with the pool's ``connection``;
    RdpValueError when any of them holds what the file cannot carry."""
    if not is_host_address(address):
        raise RdpValueError("address", f"not {ADDRESS_RULE}")
    if has_control_character(user):
        raise RdpValueError("username", "holds a control character (a line break?)")
    lines = [
        f"full address:s:{full_address(address, connection.port)}",
        f"username:s:{user}",
    ]
    lines += _properties(connection.rdp_properties)
    # One clipboard line, the pool's (clipboard, or a redirectclipboard:i:0 of its
    # properties): the properties' own is left out, so no client reads two answers.
    lines.append(f"{CLIPBOARD_PROPERTY}:i:{1 if connection.clipboard_allowed else 0}")
    if connection.gateway is not None:
        hostname = connection.gateway.hostname
        if not is_gateway(hostname):
            raise RdpValueError("gateway.hostname", f"not {ADDRESS_RULE}, optionally with :port")
        lines += [
            f"gatewayhostname:s:{hostname}",
            "gatewayusagemethod:i:1",
            "gatewayprofileusagemethod:i:1",
        ]
    return "\r\n".join(lines) + "\r\n"


def _properties(text: str | None) -> list[str]:
    if not text:
        return []
    try:
        parsed = parse_rdp_properties(text)
    except ValueError as exc:
        message = str(exc).removeprefix("rdpProperties: ")
        raise RdpValueError("rdpProperties", message) from None
    for name, _, value in parsed:
        if has_control_character(value):
            raise RdpValueError("rdpProperties", f"the value of {name!r} holds a control character")
    return [
        f"{name}:{kind}:{value}"
        for name, kind, value in parsed
        if name.lower() != CLIPBOARD_PROPERTY
    ]
