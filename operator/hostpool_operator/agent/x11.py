"""The few X11 protocol messages the agent speaks to a session's X server: the connection
set-up with the server's cookie, the MIT-SCREEN-SAVER extension's idle time, and a plain
window with text (a message for the user).

The X server of an xrdp session is the user's own process, so everything it sends is
read as untrusted: lengths are bounded, a malformed answer is an ``X11Error``, never a
crash or an unbounded read. Little-endian throughout (the set-up asks for it).

Pure: encodes requests and decodes answers; ``agent.desktop`` does the socket I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: An answer longer than this is refused (the set-up of a server with many visuals is a few
#: kilobytes; the agent's replies are tiny).
MAX_ANSWER = 1 << 20
MAX_AUTHORITY = 1 << 16
COOKIE_NAME = b"MIT-MAGIC-COOKIE-1"
SCREEN_SAVER = b"MIT-SCREEN-SAVER"
#: Xauthority address families: a local connection, and "any address".
FAMILY_LOCAL = 256
FAMILY_WILD = 65535

# Predefined atoms (X11 protocol, appendix B).
ATOM = 4
CARDINAL = 6
STRING = 31
WM_NAME = 39
WM_NORMAL_HINTS = 40
WM_SIZE_HINTS = 41
WM_CLASS = 67

# Event codes and masks.
ERROR, REPLY = 0, 1
KEY_PRESS, BUTTON_PRESS, EXPOSE, DESTROY_NOTIFY, CLIENT_MESSAGE = 2, 4, 12, 17, 33
KEY_PRESS_MASK = 0x1
BUTTON_PRESS_MASK = 0x4
EXPOSURE_MASK = 0x8000
STRUCTURE_NOTIFY_MASK = 0x20000

# Window attributes (CreateWindow value-mask bits) and GC components.
CW_BACK_PIXEL = 0x2
CW_BORDER_PIXEL = 0x8
CW_EVENT_MASK = 0x800
GC_FOREGROUND = 0x4
GC_BACKGROUND = 0x8
GC_FONT = 0x4000
#: WM_NORMAL_HINTS flags: a position and size the user asked for (window managers such as
#: twm place such a window there instead of asking the user to place it).
US_POSITION = 0x1
US_SIZE = 0x2
P_MIN_SIZE = 0x10
P_MAX_SIZE = 0x20


class X11Error(Exception):
    """The X server refused, or answered something this client cannot read."""


def pad4(length: int) -> int:
    return (4 - length % 4) % 4


def padded(data: bytes) -> bytes:
    return data + b"\0" * pad4(len(data))


# ----------------------------------------------------------------- the auth file


@dataclass(frozen=True, slots=True)
class AuthEntry:
    family: int
    address: bytes
    number: bytes
    name: bytes
    data: bytes


def parse_xauthority(data: bytes) -> list[AuthEntry]:
    """The entries of an Xauthority file (big-endian counted strings); what follows a
    truncated entry is ignored."""
    entries: list[AuthEntry] = []
    offset = 0
    while offset + 2 <= len(data):
        (family,) = struct.unpack_from(">H", data, offset)
        offset += 2
        fields: list[bytes] = []
        for _ in range(4):
            if offset + 2 > len(data):
                return entries
            (length,) = struct.unpack_from(">H", data, offset)
            offset += 2
            if offset + length > len(data):
                return entries
            fields.append(data[offset : offset + length])
            offset += length
        entries.append(AuthEntry(family, *fields))
    return entries


def cookie_for(entries: list[AuthEntry], display: int) -> bytes | None:
    """The MIT-MAGIC-COOKIE-1 of ``display`` (a local or wildcard entry for its number;
    an entry for every display, with no number, when none names it)."""
    number = str(display).encode()
    fallback = None
    for entry in entries:
        if entry.name != COOKIE_NAME or entry.family not in (FAMILY_LOCAL, FAMILY_WILD):
            continue
        if entry.number == number:
            return entry.data
        if not entry.number and fallback is None:
            fallback = entry.data
    return fallback


# ----------------------------------------------------------------- connection set-up


@dataclass(frozen=True, slots=True)
class Setup:
    """What the agent needs of the server's set-up answer: ids, the first screen."""

    id_base: int
    id_mask: int
    root: int
    white: int
    black: int
    depth: int
    width: int
    height: int


def setup_request(cookie: bytes | None) -> bytes:
    name = COOKIE_NAME if cookie is not None else b""
    data = cookie or b""
    head = struct.pack("<BxHHHHxx", ord("l"), 11, 0, len(name), len(data))
    return head + padded(name) + padded(data)


def setup_length(head: bytes) -> int:
    """How many bytes follow the set-up answer's first eight."""
    if len(head) != 8:
        raise X11Error("the X server's set-up answer is truncated")
    (units,) = struct.unpack_from("<H", head, 6)
    return int(units) * 4


def parse_setup(head: bytes, body: bytes) -> Setup:
    """The set-up answer (its first eight bytes, then the rest)."""
    status = head[0]
    if status != 1:
        reason = body[: head[1]].decode("latin-1", "replace") if status == 0 else "authenticate"
        raise X11Error(f"the X server refused the connection: {reason.strip() or status}")
    try:
        id_base, id_mask = struct.unpack_from("<II", body, 4)
        vendor_length, _, screens, formats = struct.unpack_from("<HHBB", body, 16)
        if screens < 1:
            raise X11Error("the X server has no screen")
        screen = 32 + vendor_length + pad4(vendor_length) + 8 * formats
        root, _, white, black = struct.unpack_from("<IIII", body, screen)
        width, height = struct.unpack_from("<HH", body, screen + 20)
        depth = body[screen + 38]
    except (struct.error, IndexError) as error:
        raise X11Error("the X server's set-up answer is malformed") from error
    return Setup(id_base, id_mask, root, white, black, depth, width, height)


def resource_id(setup: Setup, serial: int) -> int:
    """The ``serial``-th id of this client (from 1)."""
    mask = setup.id_mask
    shift = (mask & -mask).bit_length() - 1 if mask else 0
    return setup.id_base | ((serial << shift) & mask)


# ----------------------------------------------------------------- requests


def _request(opcode: int, data: int, body: bytes) -> bytes:
    body = padded(body)
    return struct.pack("<BBH", opcode, data, 1 + len(body) // 4) + body


def query_extension(name: bytes) -> bytes:
    return _request(98, 0, struct.pack("<Hxx", len(name)) + name)


def screen_saver_query_info(major: int, drawable: int) -> bytes:
    return _request(major, 1, struct.pack("<I", drawable))


def intern_atom(name: bytes, *, only_if_exists: bool = False) -> bytes:
    return _request(16, int(only_if_exists), struct.pack("<Hxx", len(name)) + name)


@dataclass(frozen=True, slots=True)
class Geometry:
    x: int
    y: int
    width: int
    height: int


def create_window(
    window: int, parent: int, geometry: Geometry, background: int, event_mask: int
) -> bytes:
    g = geometry
    body = struct.pack(
        "<IIhhHHHHIIIII",
        window,
        parent,
        g.x,
        g.y,
        g.width,
        g.height,
        2,  # border width
        1,  # InputOutput
        0,  # the parent's visual
        CW_BACK_PIXEL | CW_BORDER_PIXEL | CW_EVENT_MASK,
        background,
        0,
        event_mask,
    )
    return _request(1, 0, body)


def change_property(window: int, prop: int, kind: int, fmt: int, data: bytes) -> bytes:
    units = len(data) // (fmt // 8)
    body = struct.pack("<IIIBxxxI", window, prop, kind, fmt, units) + data
    return _request(18, 0, body)


def size_hints(geometry: Geometry) -> bytes:
    """WM_NORMAL_HINTS: placed and sized as given, neither larger nor smaller."""
    g = geometry
    flags = US_POSITION | US_SIZE | P_MIN_SIZE | P_MAX_SIZE
    values = [flags, g.x, g.y, g.width, g.height, g.width, g.height, g.width, g.height]
    values += [0] * (18 - len(values))
    return struct.pack("<18I", *(v & 0xFFFFFFFF for v in values))


def map_window(window: int) -> bytes:
    return _request(8, 0, struct.pack("<I", window))


def open_font(font: int, name: bytes) -> bytes:
    return _request(45, 0, struct.pack("<IHxx", font, len(name)) + name)


def query_text_extents(font: int, text: bytes) -> bytes:
    """``text``: CHAR2B pairs."""
    count = len(text) // 2
    return _request(48, count % 2, struct.pack("<I", font) + text[: 2 * count])


def create_gc(gc: int, drawable: int, foreground: int, background: int, font: int) -> bytes:
    mask = GC_FOREGROUND | GC_BACKGROUND | GC_FONT
    return _request(55, 0, struct.pack("<IIIIII", gc, drawable, mask, foreground, background, font))


def fill_rectangle(drawable: int, gc: int, geometry: Geometry) -> bytes:
    g = geometry
    return _request(70, 0, struct.pack("<IIhhHH", drawable, gc, g.x, g.y, g.width, g.height))


def image_text16(drawable: int, gc: int, x: int, y: int, text: bytes) -> bytes:
    """``text``: CHAR2B pairs (at most 255 characters)."""
    count = min(len(text) // 2, 255)
    body = struct.pack("<IIhh", drawable, gc, x, y) + text[: 2 * count]
    return _request(77, count, body)


def char2b(text: str, *, two_byte: bool) -> bytes:
    """Characters for ImageText16: UCS-2 where the font has more than one row (an
    ISO 10646 font), else Latin-1; what the font cannot show becomes '?'."""
    limit = 0xFFFF if two_byte else 0xFF
    return b"".join(
        struct.pack(">H", ord(c) if ord(c) <= limit and c.isprintable() else ord("?")) for c in text
    )


# ----------------------------------------------------------------- answers


@dataclass(frozen=True, slots=True)
class Packet:
    """One reply, error or event: its code (0 error, 1 reply, else an event) and bytes."""

    code: int
    sequence: int
    data: bytes


def answer_length(head: bytes) -> int:
    """How many bytes follow a 32-byte packet (only a reply has more)."""
    if head[0] != REPLY:
        return 0
    (units,) = struct.unpack_from("<I", head, 4)
    extra = int(units) * 4
    if extra > MAX_ANSWER:
        raise X11Error(f"the X server's reply is too long ({extra} bytes)")
    return extra


def packet(data: bytes) -> Packet:
    (sequence,) = struct.unpack_from("<H", data, 2)
    return Packet(data[0] & 0x7F, int(sequence), data)


def error_text(data: bytes) -> str:
    names = {2: "Value", 3: "Window", 7: "Font", 8: "Match", 11: "Alloc", 13: "GContext"}
    code = data[1]
    return f"X error {names.get(code, code)} (request {data[10]})"


def extension_opcode(reply: bytes) -> int | None:
    """QueryExtension's reply: the extension's major opcode, None when absent."""
    present, major = reply[8], reply[9]
    return int(major) if present else None


def idle_milliseconds(reply: bytes) -> int:
    """MIT-SCREEN-SAVER QueryInfo's reply: milliseconds since the last user input."""
    if len(reply) < 20:
        raise X11Error("the screen saver's answer is truncated")
    (idle,) = struct.unpack_from("<I", reply, 16)
    return int(idle)


def atom_of(reply: bytes) -> int:
    (atom,) = struct.unpack_from("<I", reply, 8)
    return int(atom)


@dataclass(frozen=True, slots=True)
class FontMetrics:
    """A font's cell: the widest character's advance, and the ascent and descent."""

    width: int
    ascent: int
    descent: int
    two_byte: bool

    @property
    def height(self) -> int:
        return self.ascent + self.descent


def font_metrics(reply: bytes, characters: int, *, two_byte: bool) -> FontMetrics:
    """QueryTextExtents' reply for ``characters`` characters of a fixed-width font: the
    font's cell."""
    if len(reply) < 20 or characters < 1:
        raise X11Error("the font's answer is truncated")
    ascent, descent = struct.unpack_from("<hh", reply, 8)
    (overall,) = struct.unpack_from("<i", reply, 16)
    width = overall // characters
    if not (0 < width <= 64 and 0 < ascent + descent <= 128):
        raise X11Error("the font's metrics are out of range")
    return FontMetrics(int(width), int(ascent), int(descent), two_byte=two_byte)


def is_close_request(event: bytes, protocols: int, delete_window: int) -> bool:
    """A ClientMessage WM_PROTOCOLS / WM_DELETE_WINDOW (the window manager's close)."""
    if event[0] & 0x7F != CLIENT_MESSAGE:
        return False
    kind, first = struct.unpack_from("<II", event, 8)
    return bool(kind == protocols and first == delete_window)


def expose_count(event: bytes) -> int:
    """How many more Expose events follow this one (0: the last of a series)."""
    (count,) = struct.unpack_from("<H", event, 16)
    return int(count)


# ----------------------------------------------------------------- the message's layout


def wrap(text: str, columns: int, max_lines: int) -> list[str]:
    """``text`` in lines of at most ``columns`` characters, broken at spaces where it can
    (its own line breaks kept), at most ``max_lines`` (the last ends in an ellipsis when
    the text is longer)."""
    lines: list[str] = []
    for paragraph in text.replace("\r\n", "\n").split("\n"):
        words = paragraph.replace("\t", " ").split(" ")
        line = ""
        for word in words:
            while len(word) > columns:
                if line:
                    lines.append(line)
                    line = ""
                lines.append(word[:columns])
                word = word[columns:]
            if not line:
                line = word
            elif len(line) + 1 + len(word) <= columns:
                line = f"{line} {word}"
            else:
                lines.append(line)
                line = word
        lines.append(line)
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1][: max(0, columns - 1)] + "…"
    return lines
