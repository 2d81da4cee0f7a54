"""RDCleanPath, the one message a browser's RDP client (IronRDP's web client) sends its
WebSocket relay before speaking RDP through it, and the relay's answer; and the one change
the relay makes to what the browser sends: the auto-logon flag of the Client Info PDU.

The PDU is a DER ``SEQUENCE`` of EXPLICIT context-tagged fields (IronRDP's
``ironrdp-rdcleanpath``): ``[0] version INTEGER`` (3390 only), ``[1] error``, ``[2]
destination``, ``[3] proxy_auth``, ``[4] server_auth``, ``[5] preconnection_blob`` (UTF8
strings), ``[6] x224_connection_pdu OCTET STRING``, ``[7] server_cert_chain SEQUENCE OF
OCTET STRING``, ``[9] server_addr UTF8String``. Reading is bounded (the PDU's size, each
field's) and never raises anything but :class:`RdCleanPathError` on bad input.

The relay also sets two fields of the MCS Connect Initial's Client Core Data: the keyboard
layout (the browser's, which IronRDP's web client does not send: it writes 0; xrdp maps it to
the session's XKB layout, xrdp_keyboard.ini), and a client build xrdp lets resize (the web
client sends its crate's version, 0.0.0: 0, and xrdp 0.9 takes a build up to 419 for a client
that cannot follow a new desktop size, so it would resize the X server and never tell the
client)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .channels import ChannelsUnreadableError, without_channels

VERSION = 3390
#: The largest PDU read or written (a request is a few hundred bytes; a response carries the
#: host's certificate chain).
MAX_PDU = 64 * 1024
#: The largest string field of a request (destination, ticket, blobs).
MAX_TEXT = 4096
#: The largest X.224 connection PDU either way.
MAX_X224 = 1024
MAX_CERTS = 8
GENERAL_ERROR = 1
NEGOTIATION_ERROR = 2

_SEQUENCE = 0x30
_INTEGER = 0x02
_OCTETS = 0x04
_UTF8 = 0x0C
_TEXT_FIELDS = {2: "destination", 3: "proxy_auth", 4: "server_auth", 5: "preconnection_blob"}

#: TS_INFO_PACKET flags: INFO_AUTOLOGON (xrdp logs the user on with the PDU's password),
#: INFO_UNICODE (its strings are UTF-16).
INFO_AUTOLOGON = 0x8
INFO_UNICODE = 0x10
#: Basic security header flag: the PDU is a Client Info PDU.
SEC_INFO_PKT = 0x40
SEC_ENCRYPT = 0x8
#: MCS Send Data Request's PER choice byte (DomainMCSPDU 25, shifted left by 2).
_MCS_SEND_DATA_REQUEST = 0x64
#: X.224 TPDU codes (with the top nibble only): Connection Request, Confirm, Data.
_X224_CR, _X224_CC, _X224_DT = 0xE0, 0xD0, 0xF0
#: RDP_NEG_RSP / RDP_NEG_FAILURE types in a Connection Confirm; PROTOCOL_SSL.
_NEG_RSP, _NEG_FAILURE = 0x02, 0x03
PROTOCOL_SSL = 0x1
#: An MCS Connect Initial (BER application tag 101), the GCC client key before its user
#: data, and the Client Core Data block's type (TS_UD_CS_CORE).
_MCS_CONNECT_INITIAL = b"\x7f\x65"
_H221_CLIENT_KEY = b"Duca"
_CS_CORE = 0xC001
#: keyboardLayout's offset in TS_UD_CS_CORE: header (4), version (4), desktopWidth,
#: desktopHeight, colorDepth, SASSequence (2 each); clientBuild after it.
_KEYBOARD_LAYOUT_AT = 16
_CLIENT_BUILD_AT = 20
#: The client build the relay writes where the browser's is one xrdp takes for a client that
#: cannot resize (xrdp 0.9: 419 and below); FreeRDP's.
CLIENT_BUILD = 2600
_OLD_CLIENT_BUILD = 419


class RdCleanPathError(ValueError):
    """Bytes that are not an RDCleanPath PDU this relay takes (the message says why)."""


@dataclass(frozen=True, slots=True)
class ErrorField:
    code: int
    http_status: int | None = None
    wsa_error: int | None = None
    tls_alert: int | None = None


@dataclass(frozen=True, slots=True)
class Pdu:
    version: int = VERSION
    error: ErrorField | None = None
    destination: str | None = None
    proxy_auth: str | None = None
    server_auth: str | None = None
    preconnection_blob: str | None = None
    x224: bytes | None = None
    cert_chain: tuple[bytes, ...] | None = None
    server_addr: str | None = None
    extra: tuple[int, ...] = field(default=())


# ---------------------------------------------------------------------- DER primitives


def _header(data: bytes, at: int, end: int) -> tuple[int, int, int]:
    """(tag, start of the content, end of the content) of the element at ``at``."""
    if at + 2 > end:
        raise RdCleanPathError("truncated element")
    tag, first = data[at], data[at + 1]
    at += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 3 or at + count > end:
            raise RdCleanPathError("unsupported length")
        length = int.from_bytes(data[at : at + count], "big")
        at += count
    if at + length > end:
        raise RdCleanPathError("element longer than its container")
    return tag, at, at + length


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def _tlv(tag: int, content: bytes) -> bytes:
    return bytes([tag]) + _length(len(content)) + content


def _integer(value: int) -> bytes:
    raw = value.to_bytes(max(1, (value.bit_length() + 8) // 8), "big", signed=False)
    return _tlv(_INTEGER, raw)


def _read_integer(data: bytes, at: int, end: int, limit: int) -> int:
    tag, start, stop = _header(data, at, end)
    if tag != _INTEGER or not 0 < stop - start <= 4 or stop != end:
        raise RdCleanPathError("not a small INTEGER")
    value = int.from_bytes(data[start:stop], "big", signed=True)
    if not 0 <= value <= limit:
        raise RdCleanPathError("INTEGER out of range")
    return value


def _read_text(data: bytes, at: int, end: int) -> str:
    tag, start, stop = _header(data, at, end)
    if tag != _UTF8 or stop != end or stop - start > MAX_TEXT:
        raise RdCleanPathError("not a UTF8String of at most 4096 bytes")
    try:
        return data[start:stop].decode("utf-8")
    except UnicodeDecodeError:
        raise RdCleanPathError("not UTF-8") from None


def _read_octets(data: bytes, at: int, end: int, limit: int) -> bytes:
    tag, start, stop = _header(data, at, end)
    if tag != _OCTETS or stop != end or stop - start > limit:
        raise RdCleanPathError("not an OCTET STRING within bounds")
    return bytes(data[start:stop])


def _read_chain(data: bytes, at: int, end: int) -> tuple[bytes, ...]:
    tag, start, stop = _header(data, at, end)
    if tag != _SEQUENCE or stop != end:
        raise RdCleanPathError("not a SEQUENCE OF certificates")
    certs = []
    while start < stop:
        _, _, cert_end = _header(data, start, stop)
        certs.append(_read_octets(data, start, cert_end, MAX_PDU))
        if len(certs) > MAX_CERTS:
            raise RdCleanPathError("too many certificates")
        start = cert_end
    return tuple(certs)


def _read_error(data: bytes, at: int, end: int) -> ErrorField:
    tag, start, stop = _header(data, at, end)
    if tag != _SEQUENCE or stop != end:
        raise RdCleanPathError("not an error SEQUENCE")
    values: dict[int, int] = {}
    while start < stop:
        tag, inner, field_end = _header(data, start, stop)
        number = tag - 0xA0
        if not 0 <= number <= 3 or number in values:
            raise RdCleanPathError("unknown or repeated error field")
        values[number] = _read_integer(data, inner, field_end, 0xFFFF)
        start = field_end
    if 0 not in values:
        raise RdCleanPathError("error without a code")
    return ErrorField(values[0], values.get(1), values.get(2), values.get(3))


# ---------------------------------------------------------------------- the PDU


def total_length(data: bytes) -> int | None:
    """The PDU's full length once its header is in ``data`` (None: not yet); raises when
    the start cannot be a PDU or it would be larger than :data:`MAX_PDU`."""
    if len(data) < 2:
        return None
    if data[0] != _SEQUENCE:
        raise RdCleanPathError("not a DER SEQUENCE")
    first = data[1]
    if first < 0x80:
        return 2 + first
    count = first & 0x7F
    if count == 0 or count > 3:
        raise RdCleanPathError("unsupported length")
    if len(data) < 2 + count:
        return None
    size = 2 + count + int.from_bytes(data[2 : 2 + count], "big")
    if size > MAX_PDU:
        raise RdCleanPathError("PDU too large")
    return size


def decode(data: bytes) -> Pdu:
    """The PDU in ``data`` (exactly one, nothing after it)."""
    if len(data) > MAX_PDU:
        raise RdCleanPathError("PDU too large")
    tag, at, end = _header(data, 0, len(data))
    if tag != _SEQUENCE or end != len(data):
        raise RdCleanPathError("not one DER SEQUENCE")
    values: dict[str, object] = {}
    extra: list[int] = []
    last = -1
    while at < end:
        tag, inner, field_end = _header(data, at, end)
        number = tag - 0xA0
        if not 0 <= number <= 30 or number <= last:
            raise RdCleanPathError("fields out of order or not context-tagged")
        last = number
        if number == 0:
            values["version"] = _read_integer(data, inner, field_end, 0xFFFFFFFF)
        elif number == 1:
            values["error"] = _read_error(data, inner, field_end)
        elif number in _TEXT_FIELDS:
            values[_TEXT_FIELDS[number]] = _read_text(data, inner, field_end)
        elif number == 6:
            values["x224"] = _read_octets(data, inner, field_end, MAX_X224)
        elif number == 7:
            values["cert_chain"] = _read_chain(data, inner, field_end)
        elif number == 9:
            values["server_addr"] = _read_text(data, inner, field_end)
        else:
            extra.append(number)
        at = field_end
    if values.get("version") != VERSION:
        raise RdCleanPathError(f"version is not {VERSION}")
    return Pdu(extra=tuple(extra), **values)  # type: ignore[arg-type]


def encode(pdu: Pdu) -> bytes:
    """The DER bytes of ``pdu`` (its ``extra`` field numbers are not written)."""
    parts = [_tlv(0xA0, _integer(pdu.version))]
    if pdu.error is not None:
        e = pdu.error
        inner = [
            _tlv(0xA0 + n, _integer(v))
            for n, v in enumerate((e.code, e.http_status, e.wsa_error, e.tls_alert))
            if v is not None
        ]
        parts.append(_tlv(0xA1, _tlv(_SEQUENCE, b"".join(inner))))
    texts = (pdu.destination, pdu.proxy_auth, pdu.server_auth, pdu.preconnection_blob)
    for number, text in zip(_TEXT_FIELDS, texts, strict=True):
        if text is not None:
            parts.append(_tlv(0xA0 + number, _tlv(_UTF8, text.encode())))
    if pdu.x224 is not None:
        parts.append(_tlv(0xA6, _tlv(_OCTETS, pdu.x224)))
    if pdu.cert_chain is not None:
        chain = b"".join(_tlv(_OCTETS, c) for c in pdu.cert_chain)
        parts.append(_tlv(0xA7, _tlv(_SEQUENCE, chain)))
    if pdu.server_addr is not None:
        parts.append(_tlv(0xA9, _tlv(_UTF8, pdu.server_addr.encode())))
    return _tlv(_SEQUENCE, b"".join(parts))


def request_problem(pdu: Pdu) -> str:
    """Why ``pdu`` is not a request this relay serves ('' when it is)."""
    if pdu.error is not None or pdu.cert_chain is not None or pdu.server_addr is not None:
        return "a response, not a request"
    if not pdu.proxy_auth:
        return "no ticket (proxy_auth)"
    if pdu.x224 is None or x224_code(pdu.x224) != _X224_CR:
        return "no X.224 Connection Request"
    if pdu.preconnection_blob is not None:
        return "preconnection blobs are not relayed"
    return ""


def response(x224: bytes, certs: tuple[bytes, ...], server_addr: str) -> bytes:
    return encode(Pdu(x224=x224, cert_chain=certs, server_addr=server_addr))


def error_response(http_status: int | None = None, *, x224: bytes | None = None) -> bytes:
    """A general error (with an HTTP status), or a negotiation error carrying the host's
    X.224 answer."""
    if x224 is not None:
        return encode(Pdu(error=ErrorField(NEGOTIATION_ERROR), x224=x224))
    return encode(Pdu(error=ErrorField(GENERAL_ERROR, http_status)))


# ---------------------------------------------------------------------- RDP: X.224, Client Info


def tpkt_length(data: bytes) -> int | None:
    """The length of the TPKT packet at the start of ``data`` (None: header incomplete);
    raises when ``data`` does not start with a TPKT header."""
    if len(data) < 4:
        return None
    if data[0] != 0x03 or data[1] != 0x00:
        raise RdCleanPathError("not a TPKT packet")
    length = int.from_bytes(data[2:4], "big")
    if length < 7:
        raise RdCleanPathError("TPKT packet too short")
    return length


def x224_code(packet: bytes) -> int | None:
    """The X.224 TPDU code (CR, CC, DT) of one whole TPKT packet, or None."""
    try:
        length = tpkt_length(packet)
    except RdCleanPathError:
        return None
    if length is None or length != len(packet) or packet[4] + 5 > length:
        return None
    return packet[5] & 0xF0


def selected_protocol(confirm: bytes) -> int | None:
    """The protocol a Connection Confirm selects (None: a negotiation failure, or no
    negotiation answer in it)."""
    if x224_code(confirm) != _X224_CC or len(confirm) < 19 or confirm[4] < 14:
        return None
    if confirm[11] != _NEG_RSP:
        return None
    return int.from_bytes(confirm[15:19], "little")


def _info_at(packet: bytes) -> int | None:
    """Where TS_INFO_PACKET starts in ``packet`` (one whole TPKT packet) when it is the
    Client Info PDU (TPKT, X.224 Data, MCS Send Data Request, a basic security header with
    SEC_INFO_PKT, then TS_INFO_PACKET); None when it is not that PDU."""
    if x224_code(packet) != _X224_DT or packet[4] != 2:
        return None
    at = 7  # after TPKT (4) and X.224 Data (LI=2, code, EOT)
    if len(packet) < at + 7 or packet[at] != _MCS_SEND_DATA_REQUEST:
        return None
    at += 6  # choice, initiator (2), channel id (2), priority and segmentation (1)
    first = packet[at]
    if first & 0xC0 == 0xC0:
        return None  # a fragmented PER length: never a Client Info PDU
    if first & 0x80:
        if len(packet) < at + 2:
            return None
        length = ((first & 0x3F) << 8) | packet[at + 1]
        at += 2
    else:
        length = first
        at += 1
    if at + length != len(packet) or length < 12:
        return None
    security = int.from_bytes(packet[at : at + 2], "little")
    high = int.from_bytes(packet[at + 2 : at + 4], "little")
    # Under TLS the header is flags and flagsHi (0), nothing encrypted: a Share Control
    # header in the same place (totalLength, pduType) has a pduType in flagsHi.
    if not security & SEC_INFO_PKT or security & SEC_ENCRYPT or high != 0:
        return None
    return at + 4


def autologon(packet: bytes) -> bytes | None:
    """``packet`` (one whole TPKT packet) with INFO_AUTOLOGON set when it is the Client
    Info PDU (TS_INFO_PACKET: CodePage, flags); every other byte the same. None when it is
    not that PDU."""
    info = _info_at(packet)
    if info is None:
        return None
    flags_at = info + 4  # after CodePage
    flags = int.from_bytes(packet[flags_at : flags_at + 4], "little")
    patched = bytearray(packet)
    patched[flags_at : flags_at + 4] = (flags | INFO_AUTOLOGON).to_bytes(4, "little")
    return bytes(patched)


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """What a Client Info PDU says of the logon (TS_INFO_PACKET), and where its own fields
    end in the packet (the extra info after them is kept as it is)."""

    flags: int
    domain: str
    user: str
    password: str
    #: TS_INFO_PACKET's offset in the packet, and the offset of what follows its five
    #: strings (alternate shell and working directory are the last two).
    info_at: int
    strings_end: int
    shell: bytes
    directory: bytes


#: The largest string of a Client Info PDU read or written (UTF-16: 255 characters).
MAX_INFO_FIELD = 512


def client_info(packet: bytes) -> ClientInfo | None:
    """The logon fields of ``packet`` when it is a Client Info PDU whose five strings can be
    read (Unicode, each within :data:`MAX_INFO_FIELD` bytes); None otherwise."""
    info = _info_at(packet)
    if info is None or len(packet) < info + 18:
        return None
    flags = int.from_bytes(packet[info + 4 : info + 8], "little")
    if not flags & INFO_UNICODE:
        return None  # IronRDP and FreeRDP send Unicode; no code page is guessed
    sizes = [
        int.from_bytes(packet[info + 8 + 2 * i : info + 10 + 2 * i], "little") for i in range(5)
    ]
    if any(size > MAX_INFO_FIELD or size % 2 for size in sizes):
        return None
    at = info + 18
    fields: list[bytes] = []
    for size in sizes:
        end = at + size + 2  # each with its null terminator
        if end > len(packet) or packet[end - 2 : end] != b"\0\0":
            return None
        fields.append(packet[at : end - 2])
        at = end
    try:
        domain, user, password = (f.decode("utf-16-le") for f in fields[:3])
    except UnicodeDecodeError:
        return None
    return ClientInfo(flags, domain, user, password, info, at, fields[3], fields[4])


def with_logon(packet: bytes, user: str, password: str, domain: str = "") -> bytes | None:
    """``packet`` (a Client Info PDU) with this user, password and domain, and auto-logon
    set: the host signs the user on with them, whatever the browser put there. The other
    fields and the extra info are kept; the lengths of the MCS and TPKT headers follow.
    None when ``packet`` is not a Client Info PDU that can be read."""
    info = client_info(packet)
    if info is None:
        return None
    strings = [s.encode("utf-16-le") for s in (domain, user, password)]
    strings += [info.shell, info.directory]
    if any(len(s) > MAX_INFO_FIELD for s in strings):
        raise ValueError("a logon field is longer than a Client Info PDU allows")
    head = packet[info.info_at : info.info_at + 4]  # CodePage
    flags = (info.flags | INFO_AUTOLOGON).to_bytes(4, "little")
    sizes = b"".join(len(s).to_bytes(2, "little") for s in strings)
    body = head + flags + sizes + b"".join(s + b"\0\0" for s in strings)
    data = packet[info.info_at - 4 : info.info_at] + body + packet[info.strings_end :]
    if len(data) > 0x3FFF:
        raise ValueError("the Client Info PDU would be too long")
    # PER's two-byte length whatever the size (as IronRDP and FreeRDP write it).
    mcs = packet[7:13] + (0x8000 | len(data)).to_bytes(2, "big")
    payload = packet[4:7] + mcs + data
    return bytes([3, 0]) + (len(payload) + 4).to_bytes(2, "big") + payload


def _core_at(packet: bytes) -> int | None:
    """Where TS_UD_CS_CORE starts in ``packet`` (one whole TPKT packet) when it is the MCS
    Connect Initial (TPKT, X.224 Data, BER Connect-Initial, the GCC Conference Create
    Request whose user data, after the client key ``Duca`` and a PER length, starts with the
    Client Core Data); None otherwise."""
    if x224_code(packet) != _X224_DT or packet[4] != 2 or packet[7:9] != _MCS_CONNECT_INITIAL:
        return None
    key = packet.find(_H221_CLIENT_KEY, 9)
    if key < 0 or key + 4 >= len(packet):
        return None
    at = key + 4
    at += 2 if packet[at] & 0x80 else 1
    if len(packet) < at + _CLIENT_BUILD_AT + 4:
        return None
    kind = int.from_bytes(packet[at : at + 2], "little")
    length = int.from_bytes(packet[at + 2 : at + 4], "little")
    if kind != _CS_CORE or length < _CLIENT_BUILD_AT + 4 or at + length > len(packet):
        return None
    return at


def keyboard_layout(packet: bytes) -> int | None:
    """The keyboard layout ``packet`` sends when it is the MCS Connect Initial (None: it is
    not that PDU)."""
    core = _core_at(packet)
    if core is None:
        return None
    at = core + _KEYBOARD_LAYOUT_AT
    return int.from_bytes(packet[at : at + 4], "little")


def client_build(packet: bytes) -> int | None:
    """The client build ``packet`` sends when it is the MCS Connect Initial (None: it is not
    that PDU)."""
    core = _core_at(packet)
    if core is None:
        return None
    at = core + _CLIENT_BUILD_AT
    return int.from_bytes(packet[at : at + 4], "little")


def with_keyboard_layout(packet: bytes, layout: int | None) -> bytes | None:
    """``packet`` with this keyboard layout (an input locale identifier, e.g. 0x041D
    Swedish; None: the client's own) and a client build above :data:`_OLD_CLIENT_BUILD`
    (:data:`CLIENT_BUILD` where it was not) in its Client Core Data when it is the MCS
    Connect Initial; every other byte the same. None when it is not that PDU."""
    if layout is not None and not 0 <= layout <= 0xFFFFFFFF:
        raise ValueError(f"not a keyboard layout: {layout}")
    core = _core_at(packet)
    if core is None:
        return None
    patched = bytearray(packet)
    if layout is not None:
        at = core + _KEYBOARD_LAYOUT_AT
        patched[at : at + 4] = layout.to_bytes(4, "little")
    at = core + _CLIENT_BUILD_AT
    if int.from_bytes(patched[at : at + 4], "little") <= _OLD_CLIENT_BUILD:
        patched[at : at + 4] = CLIENT_BUILD.to_bytes(4, "little")
    return bytes(patched)


def pdu_length(data: bytes) -> int | None:
    """The length of the RDP PDU at the start of ``data``: a TPKT packet (slow path) or a
    fast-path PDU (its action bits 0, a length of one or two bytes). None when the header
    is not whole yet; raises :class:`RdCleanPathError` when ``data`` starts with neither."""
    if not data:
        return None
    if data[0] == 0x03:
        return tpkt_length(data)
    if data[0] & 0x03:
        raise RdCleanPathError("neither a TPKT packet nor a fast-path PDU")
    if len(data) < 2:
        return None
    if not data[1] & 0x80:
        length = data[1]
    elif len(data) < 3:
        return None
    else:
        length = ((data[1] & 0x7F) << 8) | data[2]
    if length < 2:
        raise RdCleanPathError("fast-path PDU too short")
    return length


#: MCS Send Data Indication's PER choice byte (DomainMCSPDU 26, shifted left by 2).
_MCS_SEND_DATA_INDICATION = 0x68
#: Share Control pduTypes (the low 4 bits of pduType): Demand Active, Deactivate All, Data.
_PDUTYPE_DEMAND_ACTIVE = 0x1
_PDUTYPE_DEACTIVATE_ALL = 0x6
_PDUTYPE_DATA = 0x7
#: Share Data pduType2s of the connection finalization: Control, Synchronize, Font Map.
_FINALIZATION = frozenset({0x14, 0x1F, 0x28})
_PDUTYPE2_FONTMAP = 0x28
#: What the relay holds back at most while the client reactivates (then it gives up holding).
_HOLD_AT_MOST = 8 * 1024 * 1024
_SHARE_CONTROL_HEADER = 6
#: After the start, a PDU cut by a read is held until whole when it is at most this long (a
#: Deactivate All is 17 bytes), passed on as it comes when longer.
_SMALL_PDU = 64


def _share_control_at(packet: bytes) -> int | None:
    """Where the Share Control Header starts in ``packet`` (one whole TPKT packet from the
    host: X.224 Data, MCS Send Data Indication, a PER length, and under TLS no security
    header); None when it is not such a packet."""
    if x224_code(packet) != _X224_DT or packet[4] != 2 or len(packet) < 15:
        return None
    if packet[7] != _MCS_SEND_DATA_INDICATION:
        return None
    at = 13  # after TPKT, X.224, the choice, initiator, channel id, priority/segmentation
    first = packet[at]
    if first & 0xC0 == 0xC0:
        return None
    if first & 0x80:
        length = ((first & 0x3F) << 8) | packet[at + 1]
        at += 2
    else:
        length = first
        at += 1
    if at + length != len(packet) or length < _SHARE_CONTROL_HEADER:
        return None
    return at


def share_control_type(packet: bytes) -> int | None:
    """The Share Control pduType (low 4 bits) of a slow-path PDU from the host, or None."""
    at = _share_control_at(packet)
    if at is None:
        return None
    return int.from_bytes(packet[at + 2 : at + 4], "little") & 0x0F


def deactivate_all_completed(packet: bytes, share_id: int) -> bytes | None:
    """xrdp 0.9's Deactivate All PDU (its Share Control Header alone: no shareId, no source
    descriptor) with the fields MS-RDPBCGR gives it (this shareId, a one-byte source
    descriptor 0); the MCS and TPKT lengths follow. None when ``packet`` is not a
    header-only Deactivate All."""
    at = _share_control_at(packet)
    if at is None or len(packet) - at != _SHARE_CONTROL_HEADER:
        return None
    if int.from_bytes(packet[at + 2 : at + 4], "little") & 0x0F != _PDUTYPE_DEACTIVATE_ALL:
        return None
    rest = share_id.to_bytes(4, "little") + (1).to_bytes(2, "little") + b"\0"
    body = (_SHARE_CONTROL_HEADER + len(rest)).to_bytes(2, "little") + packet[at + 2 : at + 6]
    body += rest
    payload = packet[4:13] + bytes([len(body)]) + body
    return bytes([3, 0]) + (len(payload) + 4).to_bytes(2, "big") + payload


@dataclass
class HostStream:
    """What the host sends, made fit for IronRDP's web client (0.7.0), PDU by PDU.

    - **One PDU a message at the start** (the first :attr:`pdus`). The client drops whatever
      follows the Font Map PDU in the WebSocket message that carries it (its connector's
      buffer is dropped when the session starts). xrdp 0.9.21 sends its dynamic channels'
      Capabilities Request right after the Font Map, often in the same TLS read: lost, the
      client never opens the dynamic channels, and the display-control channel (the desktop
      following the window) is not there.
    - **A whole Deactivate All.** xrdp 0.9 sends the Deactivate All PDU (the start of a
      resize) as a Share Control Header alone; the client cannot decode it ("received 6
      bytes, expected 10") and ends the session. It goes on with the shareId (the Demand
      Active's) and a source descriptor.
    - **Nothing but the reactivation until it is done.** After the Deactivate All xrdp draws
      the resized desktop while the client is still in the connection finalization, and the
      client ends the session on the first slow-path update it gets there ("unexpected
      server message"). From the Deactivate All to the Font Map the relay passes on only
      the Demand Active and the finalization's PDUs on the I/O channel (Synchronize,
      Control, Font Map) and holds everything else back (at most 8 MiB), then sends it, in
      its order, one PDU a message.

    Afterwards the data goes on as it comes but for a small PDU cut by a read (held until
    whole); a stream that is not RDP goes on untouched."""

    pdus: int = 200
    cut: int = 0
    share_id: int = 0
    #: The I/O channel (the Demand Active's MCS channel).
    io_channel: int | None = None
    rdp: bool = True
    #: Bytes of a long PDU passed on whose rest is still to come.
    skip: int = 0
    held: bytearray = field(default_factory=bytearray)
    #: Between a Deactivate All and its Font Map: what is held back meanwhile.
    reactivating: bool = False
    held_back: list[bytes] = field(default_factory=list)
    held_back_bytes: int = 0

    def feed(self, data: bytes) -> list[bytes]:
        """The messages to send the browser for ``data``."""
        if not self.rdp:
            return [data] if data else []
        if self.held:
            data = bytes(self.held) + data
            self.held.clear()
        out: list[bytes] = []
        i = min(self.skip, len(data))
        self.skip -= i
        mark = 0  # the start of what is still to be passed on
        while i < len(data):
            try:
                length = pdu_length(data[i : i + 4])
            except RdCleanPathError:
                self.rdp = False
                break
            splitting = self.cut < self.pdus or self.reactivating
            if length is None or (i + length > len(data) and (splitting or length <= _SMALL_PDU)):
                self.held += data[i:]
                data = data[:i]
                break
            if i + length > len(data):  # a long PDU: on as it comes
                self.skip = i + length - len(data)
                break
            packet = data[i : i + length] if data[i] == 0x03 else b""
            changed = self._changed(packet) if packet else None
            if splitting:
                if mark < i:
                    out.append(data[mark:i])
                self._one(out, changed or data[i : i + length])
                self.cut += 1
                mark = i + length
            elif changed is not None:
                out.append(data[mark:i] + changed)
                mark = i + length
            i += length
        if mark < len(data):
            out.append(data[mark:])
        return out

    def _one(self, out: list[bytes], pdu: bytes) -> None:
        """One whole PDU, alone in its message: passed on, or held back while the client
        reactivates (all of it sent after the Font Map)."""
        if not self.reactivating:
            out.append(pdu)
            return
        kind = self._io_kind(pdu)
        if kind in (_PDUTYPE_DEMAND_ACTIVE, _PDUTYPE_DEACTIVATE_ALL) or kind in _FINALIZATION:
            out.append(pdu)
            if kind == _PDUTYPE2_FONTMAP:
                self._release(out)
            return
        self.held_back.append(pdu)
        self.held_back_bytes += len(pdu)
        if self.held_back_bytes > _HOLD_AT_MOST:
            self._release(out)

    def _release(self, out: list[bytes]) -> None:
        out.extend(self.held_back)
        self.held_back.clear()
        self.held_back_bytes = 0
        self.reactivating = False

    def _io_kind(self, pdu: bytes) -> int | None:
        """A slow-path PDU's Share Control pduType on the I/O channel (Data: its pduType2
        instead); None for anything else."""
        if not pdu or pdu[0] != 0x03 or int.from_bytes(pdu[10:12], "big") != self.io_channel:
            return None
        kind = share_control_type(pdu)
        if kind != _PDUTYPE_DATA:
            return kind
        at = _share_control_at(pdu)
        if at is None or len(pdu) < at + 15:
            return None
        # After the header: shareId (4), pad, streamId, uncompressedLength (2), pduType2.
        return pdu[at + 14]

    def _changed(self, packet: bytes) -> bytes | None:
        """``packet`` (a TPKT packet) as the client must get it; None: as it is."""
        kind = share_control_type(packet)
        if kind == _PDUTYPE_DEMAND_ACTIVE:
            at = _share_control_at(packet)
            if at is not None and len(packet) >= at + 10:
                self.share_id = int.from_bytes(packet[at + 6 : at + 10], "little")
                self.io_channel = int.from_bytes(packet[10:12], "big")
            return None
        if kind == _PDUTYPE_DEACTIVATE_ALL:
            completed = deactivate_all_completed(packet, self.share_id)
            if completed is not None and self.io_channel is not None:
                self.reactivating = True
            return completed
        return None


class ClientInfoRefusedError(Exception):
    """The browser's logon is refused before it reaches the host (the message says why)."""


@dataclass
class ClientInfoPatcher:
    """Follows what the browser sends until its Client Info PDU has passed: cuts the
    stream into TPKT packets, sets auto-logon on that one PDU, then passes everything on
    untouched.

    For a single sign-on pool (``logon``: user and password) the PDU's logon is the
    relay's, whatever the browser wrote; for another pool (``user``) a PDU naming another
    user is refused. Either way a stream that cannot be read up to that PDU (not TPKT, or
    past :attr:`limit` bytes without it) is refused; with neither it is passed on as it
    comes.

    The MCS Connect Initial before it (the Client Core Data) says ``keyboard_layout`` (None:
    the browser's own) and a client build xrdp lets resize (:func:`with_keyboard_layout`)."""

    logon: tuple[str, str] | None = None
    user: str | None = None
    keyboard_layout: int | None = None
    limit: int = 256 * 1024
    #: Packets read at most before the Client Info PDU (a real client sends about twenty):
    #: the cutting is work on the event loop, so a stream of tiny packets ends it early.
    max_packets: int = 64
    packets: int = 0
    done: bool = False
    patched: bool = False
    #: Why the logon was refused (None: it was not).
    refusal: str | None = None
    #: Static channels the host must not open (lower case; ``channels.CLIPBOARD`` in a pool
    #: without a clipboard), and how many of them the browser asked for all the same.
    withheld: frozenset[str] = frozenset()
    withheld_asked: int = 0
    seen: int = 0
    buffer: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> bytes:
        """What to send on to the host for ``data`` (possibly held back, until a packet
        is whole); :class:`ClientInfoRefusedError` when the logon may not go on."""
        if self.done:
            return data
        try:
            return self._feed(data)
        except ClientInfoRefusedError as refused:
            self.refusal = str(refused)
            raise

    def _feed(self, data: bytes) -> bytes:
        self.buffer += data
        self.seen += len(data)
        out = bytearray()
        while not self.done:
            try:
                length = tpkt_length(bytes(self.buffer[:4]))
            except RdCleanPathError:
                self._give_up(out)
                break
            if length is None or len(self.buffer) < length:
                if self.seen > self.limit:
                    self._give_up(out)
                break
            self.packets += 1
            if self.packets > self.max_packets:
                self._give_up(out)
                break
            packet = bytes(self.buffer[:length])
            del self.buffer[:length]
            packet = self._channels(packet)
            packet = with_keyboard_layout(packet, self.keyboard_layout) or packet
            changed = self._rewritten(packet)
            if changed is not None:
                out += changed
                self.patched = self.done = True
                out += self.buffer
                self.buffer.clear()
            else:
                out += packet
        return bytes(out)

    def _channels(self, packet: bytes) -> bytes:
        """The Connect Initial with the withheld channels renamed to none (refused when its
        channel list cannot be read); any other packet as it is."""
        if not self.withheld:
            return packet
        try:
            kept = without_channels(packet, self.withheld)
        except ChannelsUnreadableError:
            raise ClientInfoRefusedError("the browser's channel list could not be read") from None
        if kept is None:
            return packet
        self.withheld_asked += kept[1]
        return kept[0]

    def _rewritten(self, packet: bytes) -> bytes | None:
        """The Client Info PDU as it goes on (None: ``packet`` is not that PDU)."""
        if _info_at(packet) is None:
            return None
        if self.logon is not None:
            user, password = self.logon
            rewritten = with_logon(packet, user, password)
            if rewritten is None:
                raise ClientInfoRefusedError("the browser's logon could not be read")
            return rewritten
        if self.user is not None:
            info = client_info(packet)
            if info is None or info.user != self.user:
                raise ClientInfoRefusedError("the browser's logon names another user")
        return autologon(packet)

    def _give_up(self, out: bytearray) -> None:
        if self.logon is not None or self.user is not None or self.withheld:
            raise ClientInfoRefusedError("the browser's stream could not be read to its logon")
        out += self.buffer
        self.buffer.clear()
        self.done = True


__all__ = [
    "CLIENT_BUILD",
    "MAX_PDU",
    "PROTOCOL_SSL",
    "VERSION",
    "ClientInfo",
    "ClientInfoPatcher",
    "ClientInfoRefusedError",
    "ErrorField",
    "HostStream",
    "Pdu",
    "RdCleanPathError",
    "autologon",
    "client_build",
    "client_info",
    "deactivate_all_completed",
    "decode",
    "encode",
    "error_response",
    "keyboard_layout",
    "pdu_length",
    "request_problem",
    "response",
    "selected_protocol",
    "share_control_type",
    "total_length",
    "tpkt_length",
    "with_keyboard_layout",
    "with_logon",
    "x224_code",
]
