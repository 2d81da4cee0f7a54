"""The static virtual channels a browser's client asks the host for, and withholding some.

A client names its channels in the MCS Connect Initial it sends right after TLS (the GCC
Conference Create Request's Client Network Data, TS_UD_CS_NET: a count, then per channel an
8-byte name and 4 bytes of options). The host opens a channel by its name. To withhold one
(the clipboard, ``cliprdr``, in a pool without it) the relay renames it in that list, in
place: the host then knows no such channel and never starts its protocol on it, while every
other channel keeps its position (the host numbers the channels in the order listed, so
removing one would shift the rest). Nothing else in the PDU changes, no length with it.

Read as the host reads it, strictly: a Connect Initial whose user data cannot be found (BER)
or whose data blocks do not add up is :class:`ChannelsUnreadableError`, so that a client
cannot hide a channel from the relay in a PDU the host would still take."""

from __future__ import annotations

#: The clipboard's static virtual channel (MS-RDPECLIP).
CLIPBOARD = "cliprdr"
#: What a withheld channel is called instead: no host has a channel of that name.
WITHHELD = b"_noclip\x00"

_X224_DT = 0xF0
_MCS_CONNECT_INITIAL = b"\x7f\x65"
_CS_NET = 0xC003
_CHANNEL_DEF = 12
_NAME = 8
#: The GCC Conference Create Request before its user data blocks: the T.124 header (7
#: bytes), a PER length, the H.221 key (8 bytes of the choice and "Duca") and a PER length.
_H221_CLIENT_KEY = b"Duca"


class ChannelsUnreadableError(ValueError):
    """A Connect Initial whose channel list cannot be read."""


def _ber_length(data: bytes, at: int) -> tuple[int, int]:
    """A BER length at ``at``: (length, where its value starts)."""
    if at >= len(data):
        raise ChannelsUnreadableError("the Connect Initial ends in a length")
    first = data[at]
    if first < 0x80:
        return first, at + 1
    size = first & 0x7F
    if not 1 <= size <= 2 or at + 1 + size > len(data):
        raise ChannelsUnreadableError("a BER length the relay does not read")
    return int.from_bytes(data[at + 1 : at + 1 + size], "big"), at + 1 + size


def _ber_skip(data: bytes, at: int, tag: int) -> tuple[int, int]:
    """The value of the BER field with ``tag`` at ``at``: (start, end)."""
    if at >= len(data) or data[at] != tag:
        raise ChannelsUnreadableError("the Connect Initial is not as MCS writes it")
    length, start = _ber_length(data, at + 1)
    if start + length > len(data):
        raise ChannelsUnreadableError("a Connect Initial field runs past the packet")
    return start, start + length


def is_connect_initial(packet: bytes) -> bool:
    """Whether ``packet`` (one whole TPKT packet) is an MCS Connect Initial."""
    return (
        len(packet) >= 9
        and packet[4] == 2
        and packet[5] & 0xF0 == _X224_DT
        and packet[7:9] == _MCS_CONNECT_INITIAL
    )


def _user_data(packet: bytes) -> tuple[int, int]:
    """Where the Connect Initial's user data (the GCC request) is: (start, end)."""
    start, end = _ber_skip_initial(packet)
    at = start
    # callingDomainSelector, calledDomainSelector, upwardFlag; the three domain parameters.
    for tag in (0x04, 0x04, 0x01, 0x30, 0x30, 0x30):
        _, at = _ber_skip(packet, at, tag)
    begin, finish = _ber_skip(packet, at, 0x04)
    if finish > end:
        raise ChannelsUnreadableError("the user data runs past the Connect Initial")
    return begin, finish


def _ber_skip_initial(packet: bytes) -> tuple[int, int]:
    length, start = _ber_length(packet, 9)
    if start + length > len(packet):
        raise ChannelsUnreadableError("the Connect Initial runs past its packet")
    return start, start + length


def _blocks_at(packet: bytes, begin: int, end: int) -> int:
    """Where the client data blocks start in the GCC request at ``begin:end``."""
    key = begin + 17
    if packet[key : key + 4] != _H221_CLIENT_KEY:
        raise ChannelsUnreadableError("the user data is not a GCC Conference Create Request")
    at = key + 4
    if at >= end:
        raise ChannelsUnreadableError("the GCC request ends early")
    return at + (2 if packet[at] & 0x80 else 1)


def _channel_offsets(packet: bytes) -> list[int]:
    """Where each channel's name starts, in every Client Network Data block."""
    begin, end = _user_data(packet)
    at = _blocks_at(packet, begin, end)
    names: list[int] = []
    while at + 4 <= end:
        kind = int.from_bytes(packet[at : at + 2], "little")
        size = int.from_bytes(packet[at + 2 : at + 4], "little")
        if size < 4 or at + size > end:
            raise ChannelsUnreadableError("a client data block runs past the user data")
        if kind == _CS_NET:
            if size < 8:
                raise ChannelsUnreadableError("a channel list without its count")
            count = int.from_bytes(packet[at + 4 : at + 8], "little")
            if 8 + count * _CHANNEL_DEF > size:
                raise ChannelsUnreadableError("more channels than the channel list holds")
            names += [at + 8 + i * _CHANNEL_DEF for i in range(count)]
        at += size
    return names


def _name(packet: bytes, at: int) -> str:
    raw = packet[at : at + _NAME].split(b"\x00", 1)[0]
    return raw.decode("latin-1").lower()


def channel_names(packet: bytes) -> list[str] | None:
    """The channels a Connect Initial asks for, lower case (None: ``packet`` is not one);
    ChannelsUnreadableError when it is one that cannot be read."""
    if not is_connect_initial(packet):
        return None
    return [_name(packet, at) for at in _channel_offsets(packet)]


def without_channels(packet: bytes, names: frozenset[str]) -> tuple[bytes, int] | None:
    """``packet`` with the channels named in ``names`` (lower case) renamed to no channel,
    and how many were; None when ``packet`` is not a Connect Initial.
    ChannelsUnreadableError when it is one whose channels cannot be read."""
    if not is_connect_initial(packet):
        return None
    out = bytearray(packet)
    withheld = 0
    for at in _channel_offsets(packet):
        if _name(packet, at) in names:
            out[at : at + _NAME] = WITHHELD
            withheld += 1
    return bytes(out), withheld


__all__ = [
    "CLIPBOARD",
    "WITHHELD",
    "ChannelsUnreadableError",
    "channel_names",
    "is_connect_initial",
    "without_channels",
]
