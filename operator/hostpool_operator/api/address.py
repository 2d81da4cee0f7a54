"""What counts as a host address, and what counts as a user name, in every field that holds one.

An address is handed to clients in the ``.rdp`` file (``full address:s:HOST:PORT``), so it
is either an IP literal or a DNS name and nothing else: never a line break, a ``:`` that
is not part of an IPv6 address, or a space.

- IPv4: dotted quad, each part 0..255 without leading zeros (``10.0.0.5``).
- IPv6: the RFC 4291 text forms, without brackets and without a zone (``fd00::5``,
  ``::ffff:10.0.0.5``); the writer of the ``.rdp`` file adds the brackets. Brackets are
  refused because the API's address fields hold a host, never ``host:port``, and a pod's
  ``status.podIP`` has none.
- A DNS name: labels of letters, digits and hyphens (not at either end of a label)
  separated by single dots, no trailing dot; the last label is not all digits, so
  ``10.0.0.256`` is neither an IPv4 address nor a name.

The same pattern is the CRD's (the API server refuses a bad value naming the field) and
``is_host_address`` (the operator, the agent and the broker check what they read with it).
Patterns here use only what Python's ``re``, the Rust regex engine pydantic validates with
and Go's RE2 in the API server all read the same way.
"""

from __future__ import annotations

import re
from typing import Final

from .base import MAX_ADDRESS

_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4: Final = rf"{_OCTET}(\.{_OCTET}){{3}}"

_H16 = r"[0-9A-Fa-f]{1,4}"
_LS32 = rf"({_H16}:{_H16}|{IPV4})"


def _h16s(n: int) -> str:
    """``n`` groups each followed by a colon (``n`` may be 0)."""
    return f"({_H16}:){{{n}}}" if n else ""


def _head(most: int) -> str:
    """Up to ``most + 1`` groups joined by colons, or nothing: what comes before ``::``."""
    more = f"({_H16}:){{0,{most}}}" if most else ""
    return f"({more}{_H16})?"


# RFC 3986 section 3.2.2's grammar of an IPv6 address, one alternative per line.
IPV6: Final = (
    "("
    + "|".join(
        [
            f"{_h16s(6)}{_LS32}",
            f"::{_h16s(5)}{_LS32}",
            f"{_head(0)}::{_h16s(4)}{_LS32}",
            f"{_head(1)}::{_h16s(3)}{_LS32}",
            f"{_head(2)}::{_h16s(2)}{_LS32}",
            f"{_head(3)}::{_h16s(1)}{_LS32}",
            f"{_head(4)}::{_LS32}",
            f"{_head(5)}::{_H16}",
            f"{_head(6)}::",
        ]
    )
    + ")"
)

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
# The last label has a letter: it starts with one, or starts with a digit and has one later.
_LAST_LABEL = r"([A-Za-z]|[0-9][A-Za-z0-9-]*[A-Za-z])([A-Za-z0-9-]*[A-Za-z0-9])?"
DNS_NAME: Final = rf"({_LABEL}\.)*{_LAST_LABEL}"

#: An IP literal (v4, or v6 without brackets) or a DNS name: the CRD pattern of every
#: address field.
HOST_ADDRESS_PATTERN: Final = rf"^({IPV4}|{IPV6}|{DNS_NAME})$"
_HOST_ADDRESS = re.compile(HOST_ADDRESS_PATTERN)

#: A gateway: a DNS name or an IPv4 address, or an IPv6 address in brackets, then
#: optionally ``:port``.
GATEWAY_PATTERN: Final = rf"^({IPV4}|{DNS_NAME}|\[{IPV6}\])(:[0-9]{{1,5}})?$"
_GATEWAY = re.compile(GATEWAY_PATTERN)

#: C0 and C1 control characters, DEL, and the Unicode line and paragraph separators: what
#: may end a line for some reader of a text file.
CONTROL_CHARACTERS: Final = "\\x00-\\x1f\\x7f-\\x9f\u2028\u2029"
#: Text without control characters (a user name): the CRD pattern of ``spec.user``.
NO_CONTROL_PATTERN: Final = f"^[^{CONTROL_CHARACTERS}]*$"
_CONTROL = re.compile(f"[{CONTROL_CHARACTERS}]")

#: What the API server says when a value fails the address pattern is the pattern itself:
#: this is the sentence the operator and the broker use instead.
ADDRESS_RULE: Final = (
    "an IPv4 address, an IPv6 address without brackets, or a DNS name "
    "(letters, digits, hyphens and dots)"
)


def is_host_address(value: str) -> bool:
    """Whether ``value`` is an IP literal or a DNS name, at most ``MAX_ADDRESS`` long."""
    return len(value) <= MAX_ADDRESS and _HOST_ADDRESS.fullmatch(value) is not None


def is_gateway(value: str) -> bool:
    """Whether ``value`` is a gateway host, optionally with ``:port``."""
    return len(value) <= MAX_ADDRESS and _GATEWAY.fullmatch(value) is not None


def has_control_character(value: str) -> bool:
    """Whether ``value`` holds a character that may end a line or control a terminal."""
    return _CONTROL.search(value) is not None


__all__ = [
    "ADDRESS_RULE",
    "CONTROL_CHARACTERS",
    "DNS_NAME",
    "GATEWAY_PATTERN",
    "HOST_ADDRESS_PATTERN",
    "IPV4",
    "IPV6",
    "NO_CONTROL_PATTERN",
    "has_control_character",
    "is_gateway",
    "is_host_address",
]
