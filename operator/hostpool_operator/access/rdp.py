"""The ``.rdp`` file a client opens: where to connect, as whom, and the pool's settings.

Written the way mstsc and FreeRDP read it: one ``name:type:value`` a line, CRLF line ends,
``full address`` as ``host:port`` (an IPv6 address in brackets)."""

from __future__ import annotations

from ..api import Connection, parse_rdp_properties


def full_address(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"{host}:{port}"


def rdp_file(address: str, user: str, connection: Connection) -> str:
    """The file for ``user`` to connect to ``address`` with the pool's ``connection``."""
    lines = [
        f"full address:s:{full_address(address, connection.port)}",
        f"username:s:{_one_line(user)}",
    ]
    if connection.rdp_properties:
        lines += [
            f"{name}:{kind}:{value}"
            for name, kind, value in parse_rdp_properties(connection.rdp_properties)
        ]
    if connection.gateway is not None:
        lines += [
            f"gatewayhostname:s:{connection.gateway.hostname}",
            "gatewayusagemethod:i:1",
            "gatewayprofileusagemethod:i:1",
        ]
    return "\r\n".join(lines) + "\r\n"


def _one_line(text: str) -> str:
    # A user name comes from a signed token, but a line break in it would still add a
    # property of its own choosing to the file.
    return text.replace("\r", " ").replace("\n", " ")
