"""Who may connect to a pool through the broker, and what the broker hands their client.

``HostPool.spec.entitlements`` names the users and groups allowed in (absent or empty means
nobody: like an AVD application group with no assignments, a pool is closed until someone
is named). ``HostPool.spec.connection`` is what goes into the ``.rdp`` file: the port, the
pool's own RDP properties and an optional RD Gateway.

The RDP properties are checked twice, like every rule of the API: as CEL on the CRD (the API
server refuses a bad manifest naming the field) and here (the broker and the tests parse the
same text the same way).
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, ClassVar

from pydantic import Field, field_validator, model_validator

from .address import CONTROL_CHARACTERS, GATEWAY_PATTERN
from .base import MAX_USER, ApiModel

#: Most users and groups one pool may name (a pool for more people names a group).
MAX_ENTITLED_USERS = 1000
MAX_ENTITLED_GROUPS = 100
MAX_GROUP = 256
MAX_RDP_PROPERTIES = 4096

#: The properties the broker writes itself: a pool may not set them, or its .rdp file
#: would carry two answers to "where do I connect" and "as whom".
BROKER_RDP_PROPERTIES: tuple[str, ...] = (
    "full address",
    "alternate full address",
    "server port",
    "username",
    "gatewayhostname",
    "gatewayusagemethod",
    "gatewayprofileusagemethod",
)

#: One property: a name of letters, digits and spaces; type i (an integer), s (text without
#: line breaks or other control characters) or b (hex).
RDP_PROPERTY = rf"^[A-Za-z][A-Za-z0-9 ]*:(i:-?[0-9]+|s:[^{CONTROL_CHARACTERS}]*|b:[0-9A-Fa-f]*)$"
_RDP_PROPERTY = re.compile(RDP_PROPERTY)

UserName = Annotated[str, Field(min_length=1, max_length=MAX_USER)]
GroupName = Annotated[str, Field(min_length=1, max_length=MAX_GROUP)]

_BROKER_NAMES = ", ".join(f"'{name}'" for name in BROKER_RDP_PROPERTIES)


class RdpType(enum.StrEnum):
    """The type letter of an .rdp property."""

    INTEGER = "i"
    STRING = "s"
    BINARY = "b"


def parse_rdp_properties(text: str) -> list[tuple[str, RdpType, str]]:
    """``name:type:value`` items separated by ';' (empty items ignored), as
    ``(name, type, value)``; ValueError naming the first bad item."""
    out: list[tuple[str, RdpType, str]] = []
    for item in text.split(";"):
        if not item:
            continue
        if not _RDP_PROPERTY.fullmatch(item):
            raise ValueError(
                f"rdpProperties: {item[:80]!r} is not name:type:value with type i (an "
                "integer), s (text) or b (hex)"
            )
        name, kind, value = item.split(":", 2)
        if name.lower() in BROKER_RDP_PROPERTIES:
            raise ValueError(f"rdpProperties: {name!r} is written by the broker")
        out.append((name, RdpType(kind), value))
    return out


class Entitlements(ApiModel):
    """Who may connect through the broker: a user named here, or one in a group named here."""

    users: list[UserName] = Field(
        default_factory=list,
        max_length=MAX_ENTITLED_USERS,
        description="Exact user names (the broker's user claim).",
    )
    groups: list[GroupName] = Field(
        default_factory=list,
        max_length=MAX_ENTITLED_GROUPS,
        description="Groups: a user whose token lists any of them may connect.",
    )

    def admits(self, user: str, groups: frozenset[str]) -> bool:
        """Whether this user, with these groups from their token, may connect."""
        return user in self.users or not groups.isdisjoint(self.groups)


class ConnectionProtocol(enum.StrEnum):
    """The protocol the broker hands clients a connection for."""

    RDP = "RDP"


class Clipboard(enum.StrEnum):
    """Whether text may be copied between the user's device and the desktop."""

    ENABLED = "Enabled"
    DISABLED = "Disabled"


#: The .rdp property of the clipboard: the broker writes it from ``connection.clipboard``.
CLIPBOARD_PROPERTY = "redirectclipboard"


def _clipboard_settings(text: str | None) -> list[bool]:
    """What each ``redirectclipboard`` item of ``rdpProperties`` says: False for an integer
    0 (off), True for any other value."""
    if not text:
        return []
    try:
        parsed = parse_rdp_properties(text)
    except ValueError:
        return []
    return [
        not (kind is RdpType.INTEGER and int(value) == 0)
        for name, kind, value in parsed
        if name.lower() == CLIPBOARD_PROPERTY
    ]


def clipboard_off_in(text: str | None) -> bool:
    """Whether ``rdpProperties`` turns the clipboard off (``redirectclipboard:i:0``): a pool
    that did so before ``clipboard`` existed keeps it off everywhere."""
    return False in _clipboard_settings(text)


def clipboard_on_in(text: str | None) -> bool:
    """Whether ``rdpProperties`` sets ``redirectclipboard`` to anything but 0."""
    return True in _clipboard_settings(text)


class Gateway(ApiModel):
    """An RD Gateway the client goes through to reach the host."""

    hostname: str = Field(
        min_length=1,
        max_length=253,
        pattern=GATEWAY_PATTERN,
        description="The gateway's host name or IP address (IPv6 in brackets), optionally "
        "with :port.",
    )


class Connection(ApiModel):
    """What the broker hands a client: the protocol, the port and the .rdp settings."""

    x_kubernetes_validations: ClassVar[list[dict[str, str]]] = [
        {
            "rule": "!has(self.rdpProperties) || self.rdpProperties.split(';').all(p, "
            f"p == '' || p.matches('{RDP_PROPERTY.replace(chr(92), chr(92) * 2)}'))",
            "message": "rdpProperties: each ';'-separated item must be name:type:value with "
            "type i (an integer), s (text) or b (hex)",
            "fieldPath": ".rdpProperties",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.rdpProperties) || !self.rdpProperties.split(';').exists(p, "
            f"p.split(':')[0].lowerAscii() in [{_BROKER_NAMES}])",
            "message": "rdpProperties: the broker writes full address, username, server port "
            "and the gateway settings itself",
            "fieldPath": ".rdpProperties",
            "reason": "FieldValueForbidden",
        },
        {
            # The two say opposite things: refused rather than one silently winning.
            "rule": "!has(self.clipboard) || self.clipboard != 'Disabled' || "
            "!has(self.rdpProperties) || !self.rdpProperties.split(';').exists(p, "
            "p.split(':')[0].lowerAscii() == 'redirectclipboard' && "
            "!p.matches('^[^:]*:i:-?0+$'))",
            "message": "rdpProperties: redirectclipboard turns the clipboard on, but clipboard "
            "is Disabled",
            "fieldPath": ".rdpProperties",
            "reason": "FieldValueInvalid",
        },
    ]

    protocol: ConnectionProtocol = Field(
        default=ConnectionProtocol.RDP, description="RDP (the only one for now)."
    )
    port: int = Field(default=3389, ge=1, le=65535, description="The hosts' RDP port.")
    rdp_properties: str | None = Field(
        default=None,
        max_length=MAX_RDP_PROPERTIES,
        description=(
            "Extra .rdp settings, ';'-separated name:type:value (type i, s or b), e.g. "
            "audiomode:i:0;redirectclipboard:i:1."
        ),
    )
    gateway: Gateway | None = Field(default=None, description="An optional RD Gateway.")
    web: bool = Field(
        default=False,
        description="The portal may open the pool's sessions in the browser: the broker relays "
        "the browser's connection to the user's own assigned host (a WebSocket).",
    )
    single_sign_on: bool = Field(
        default=False,
        description="The broker signs its callers on to the host: a one-time logon credential "
        "(signed, for this user on this host, at most 120 s) instead of a password, and the "
        "account made from the identity with the same uid on every host.",
    )
    clipboard: Clipboard = Field(
        default=Clipboard.ENABLED,
        description="Whether text may be copied between the user's device and the desktop: "
        "the desktop page in the browser, the .rdp file (redirectclipboard) and the hosts the "
        "operator starts. rdpProperties' redirectclipboard:i:0 also turns it off.",
    )

    @field_validator("rdp_properties")
    @classmethod
    def _rdp_properties(cls, text: str | None) -> str | None:
        if text is not None:
            parse_rdp_properties(text)
        return text

    @model_validator(mode="after")
    def _clipboard(self) -> Connection:
        if self.clipboard is Clipboard.DISABLED and clipboard_on_in(self.rdp_properties):
            raise ValueError(
                "rdpProperties: redirectclipboard turns the clipboard on, but clipboard is Disabled"
            )
        return self

    @property
    def clipboard_allowed(self) -> bool:
        """Whether the pool's clipboard is on: ``clipboard`` Enabled and no
        ``redirectclipboard:i:0`` in rdpProperties (the stricter of the two wins)."""
        return self.clipboard is Clipboard.ENABLED and not clipboard_off_in(self.rdp_properties)
