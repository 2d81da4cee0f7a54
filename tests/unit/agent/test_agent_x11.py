"""The agent's X11 protocol pieces and xrdp's socket table, pure: the auth file, the set-up
answer, requests' lengths, hostile answers refused, the message's layout; the kernel's
unix socket dump and which xrdp connection belongs to a display."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.agent.desktop import XServer
from hostpool_operator.agent.x11 import (
    COOKIE_NAME,
    FAMILY_LOCAL,
    FAMILY_WILD,
    MAX_ANSWER,
    AuthEntry,
    Geometry,
    X11Error,
    answer_length,
    change_property,
    char2b,
    cookie_for,
    create_window,
    font_metrics,
    idle_milliseconds,
    image_text16,
    intern_atom,
    is_close_request,
    parse_setup,
    parse_xauthority,
    query_extension,
    resource_id,
    setup_length,
    setup_request,
    size_hints,
    wrap,
)
from hostpool_operator.agent.xrdp import (
    MIXED_UIDS,
    NLMSG_DONE,
    NLMSG_ERROR,
    SOCK_DIAG_BY_FAMILY,
    UNIX_DIAG_NAME,
    UNIX_DIAG_PEER,
    Process,
    SocketTableError,
    UnixSocket,
    auth_argument,
    display_peers,
    is_xrdp,
    may_be_xrdp,
    parse_homes,
    parse_unix_diag,
    unix_diag_request,
    xrdp_binary,
)


def xauth_entry(family: int, address: bytes, number: bytes, name: bytes, data: bytes) -> bytes:
    out = struct.pack(">H", family)
    for field in (address, number, name, data):
        out += struct.pack(">H", len(field)) + field
    return out


# --------------------------------------------------------------------------- the auth file


def test_the_cookie_of_a_display_from_what_sesman_writes() -> None:
    cookie = bytes(range(16))
    other = bytes(16)
    data = xauth_entry(FAMILY_LOCAL, b"host", b"11", COOKIE_NAME, other) + xauth_entry(
        FAMILY_LOCAL, b"host", b"10", COOKIE_NAME, cookie
    )
    entries = parse_xauthority(data)
    assert len(entries) == 2
    assert cookie_for(entries, 10) == cookie
    assert cookie_for(entries, 11) == other
    assert cookie_for(entries, 12) is None
    # a wildcard entry for every display, and another protocol's entry ignored
    wild = AuthEntry(FAMILY_WILD, b"", b"", COOKIE_NAME, b"w" * 16)
    xdm = AuthEntry(FAMILY_LOCAL, b"host", b"12", b"XDM-AUTHORIZATION-1", b"x" * 16)
    assert cookie_for([xdm, wild], 12) == b"w" * 16


@given(st.binary(max_size=300))
def test_any_auth_file_reads_without_error(data: bytes) -> None:
    for entry in parse_xauthority(data):
        assert len(entry.data) <= len(data)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([FAMILY_LOCAL, FAMILY_WILD, 0]),
            st.binary(max_size=20),
            st.sampled_from([b"", b"0", b"10", b"99"]),
            st.sampled_from([COOKIE_NAME, b"OTHER"]),
            st.binary(max_size=32),
        ),
        max_size=6,
    )
)
def test_auth_entries_read_back(entries: list[tuple[int, bytes, bytes, bytes, bytes]]) -> None:
    data = b"".join(xauth_entry(*e) for e in entries)
    assert [tuple(getattr(a, f) for f in AuthEntry.__slots__) for a in parse_xauthority(data)] == [
        tuple(e) for e in entries
    ]
    # the truncated file yields a prefix of the entries, never a wrong one
    assert parse_xauthority(data[:-1]) == parse_xauthority(data)[: max(0, len(entries) - 1)]


# --------------------------------------------------------------------------- set-up


def setup_answer(vendor: bytes = b"The X.Org Foundation", formats: int = 2) -> tuple[bytes, bytes]:
    body = struct.pack("<IIII", 12101011, 0x00400000, 0x001FFFFF, 256)
    body += struct.pack("<HHBBBBBBBBxxxx", len(vendor), 65535, 1, formats, 0, 0, 32, 32, 8, 255)
    body += vendor + b"\0" * ((4 - len(vendor) % 4) % 4)
    body += b"\x01\x01\x20" + b"\0" * 5 + b"\x18\x20\x20" + b"\0" * 5 if formats == 2 else b""
    screen = struct.pack("<IIIII", 0x2B5, 0x20, 0xFFFFFF, 0, 0)
    screen += struct.pack("<HHHHHHIBBBB", 1024, 768, 270, 203, 1, 1, 0x21, 0, 0, 24, 0)
    body += screen
    head = struct.pack("<BxHHH", 1, 11, 0, len(body) // 4)
    return head, body


def test_the_set_up_answer() -> None:
    head, body = setup_answer()
    assert setup_length(head) == len(body)
    setup = parse_setup(head, body)
    assert (setup.root, setup.width, setup.height, setup.depth) == (0x2B5, 1024, 768, 24)
    assert setup.white == 0xFFFFFF
    assert resource_id(setup, 1) == 0x00400001
    assert resource_id(setup, 2) == 0x00400002


def test_a_refusal_names_its_reason() -> None:
    reason = b"Authorization required, but no authorization protocol specified\n"
    head = struct.pack("<BBHHH", 0, len(reason), 11, 0, (len(reason) + 3) // 4)
    with pytest.raises(X11Error, match="Authorization required"):
        parse_setup(head, reason + b"\0\0")


def test_the_set_up_request_carries_the_cookie() -> None:
    request = setup_request(b"c" * 16)
    assert request[0] == ord("l")
    assert len(request) % 4 == 0
    assert COOKIE_NAME in request
    assert request.endswith(b"c" * 16)
    assert setup_request(None) == struct.pack("<BxHHHHxx", ord("l"), 11, 0, 0, 0)


@given(st.binary(max_size=200))
def test_a_malformed_set_up_answer_is_an_x11_error(body: bytes) -> None:
    head = struct.pack("<BxHHH", 1, 11, 0, len(body) // 4)
    with contextlib.suppress(X11Error):
        parse_setup(head, body)


# --------------------------------------------------------------------------- requests


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=2**32 - 1))
def test_every_request_is_whole_units_and_says_its_length(name: bytes, number: int) -> None:
    for request in (
        query_extension(name),
        intern_atom(name),
        change_property(number, 39, 31, 8, name),
        create_window(number, 1, Geometry(-5, 10, 300, 200), 0xFFFFFF, 0x8000),
        image_text16(number, number, 10, 20, name[: len(name) // 2 * 2]),
    ):
        assert len(request) % 4 == 0
        (units,) = struct.unpack_from("<H", request, 2)
        assert units * 4 == len(request)


def test_size_hints_place_the_window() -> None:
    hints = struct.unpack("<18I", size_hints(Geometry(100, 50, 400, 200)))
    assert hints[0] & 0x1  # USPosition: window managers place it there
    assert hints[1:5] == (100, 50, 400, 200)


def test_text_for_the_font() -> None:
    assert char2b("Aé€", two_byte=True) == b"\x00A\x00\xe9\x20\xac"
    assert char2b("Aé€\x07", two_byte=False) == b"\x00A\x00\xe9\x00?\x00?"


# --------------------------------------------------------------------------- answers


def test_a_reply_too_long_is_refused() -> None:
    head = struct.pack("<BxHI", 1, 5, MAX_ANSWER // 4 + 1) + b"\0" * 24
    with pytest.raises(X11Error, match="too long"):
        answer_length(head)
    event = bytes([12]) + b"\0" * 31
    assert answer_length(event) == 0


def test_idle_and_font_answers() -> None:
    reply = struct.pack("<BBHIIIII", 1, 0, 3, 0, 0, 0, 123456, 0) + b"\0" * 8
    assert idle_milliseconds(reply) == 123456
    with pytest.raises(X11Error):
        idle_milliseconds(reply[:12])
    extents = struct.pack("<BBHIhhhhi", 1, 0, 4, 0, 14, 4, 12, 3, 36) + b"\0" * 12
    metrics = font_metrics(extents, 4, two_byte=True)
    assert (metrics.width, metrics.height) == (9, 18)
    absurd = struct.pack("<BBHIhhhhi", 1, 0, 4, 0, 14, 4, 12, 3, 4 * 10_000) + b"\0" * 12
    with pytest.raises(X11Error):
        font_metrics(absurd, 4, two_byte=True)


def test_the_window_managers_close() -> None:
    message = struct.pack("<BBHIII", 33, 32, 9, 0x400001, 301, 302) + b"\0" * 12
    assert is_close_request(message, 301, 302)
    assert not is_close_request(message, 301, 303)
    assert not is_close_request(bytes([12]) + b"\0" * 31, 301, 302)


# --------------------------------------------------------------------------- layout


@given(st.text(max_size=800), st.integers(min_value=8, max_value=80))
def test_wrapped_lines_fit(text: str, columns: int) -> None:
    lines = wrap(text, columns, 12)
    assert 1 <= len(lines) <= 12
    assert all(len(line) <= columns for line in lines)


@given(st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=10), min_size=1, max_size=30))
def test_wrapping_keeps_every_word_when_it_fits(words: list[str]) -> None:
    lines = wrap(" ".join(words), 24, 100)
    assert " ".join(lines).split() == words


def test_a_long_message_ends_in_an_ellipsis() -> None:
    lines = wrap("word " * 400, 20, 5)
    assert len(lines) == 5
    assert lines[-1].endswith("…")


# --------------------------------------------------------------------------- xrdp's connections


def diag_message(inode: int, state: int, name: bytes, peer: int) -> bytes:
    body = struct.pack("<BBBxIII", 1, 1, state, inode, 0, 0)
    if name:
        body += struct.pack("<HH", 4 + len(name), UNIX_DIAG_NAME) + name
        body += b"\0" * ((4 - len(name) % 4) % 4)
    body += struct.pack("<HHI", 8, UNIX_DIAG_PEER, peer)
    return struct.pack("<IHHII", 16 + len(body), SOCK_DIAG_BY_FAMILY, 2, 1, 0) + body


def test_the_socket_dump() -> None:
    data = (
        diag_message(500, 10, b"/run/xrdp/sockdir/xrdp_display_10", 0)  # listening
        + diag_message(501, 1, b"/run/xrdp/sockdir/xrdp_display_10", 900)  # the X server's end
        + diag_message(900, 1, b"", 501)  # xrdp's end
        + diag_message(502, 1, b"\0/tmp/.X11-unix/X10", 901)
    )
    sockets, done = parse_unix_diag(data)
    assert not done
    assert sockets[1] == UnixSocket(501, 1, "/run/xrdp/sockdir/xrdp_display_10", 900)
    assert sockets[3].name == "@/tmp/.X11-unix/X10"
    assert display_peers(sockets, 10, {500, 501}) == {900}
    # an end the session's X server does not hold is not its connection
    assert display_peers(sockets, 10, {777}) == set()
    assert display_peers(sockets, 1, {500, 501}) == set()
    done_message = struct.pack("<IHHIIi", 20, NLMSG_DONE, 2, 1, 0, 0)
    assert parse_unix_diag(done_message) == ([], True)
    error = struct.pack("<IHHIIi", 20, NLMSG_ERROR, 0, 1, 0, -13)
    with pytest.raises(SocketTableError, match="13"):
        parse_unix_diag(error)


@given(st.binary(max_size=400))
def test_any_socket_dump_reads_or_is_refused(data: bytes) -> None:
    with contextlib.suppress(SocketTableError):
        parse_unix_diag(data)


def test_the_dump_request() -> None:
    request = unix_diag_request(7)
    length, kind, flags, sequence = struct.unpack_from("<IHHI", request)
    assert (length, kind, sequence) == (len(request), SOCK_DIAG_BY_FAMILY, 7)
    assert flags & 0x300  # a dump


def test_the_auth_argument() -> None:
    xorg = ["/usr/lib/xorg/Xorg", ":10", "-auth", ".Xauthority", "-config", "xrdp/xorg.conf"]
    assert auth_argument(xorg) == ".Xauthority"
    assert auth_argument(xorg[:3]) is None
    assert auth_argument(["Xorg", ":10"]) is None


def test_where_the_cookie_and_the_socket_are_looked_for() -> None:
    relative = XServer(10, 201, 1000, ".Xauthority", leader=200, home="/home/alice")
    assert relative.auth_paths() == [
        "/proc/201/cwd/.Xauthority",  # the X server's working directory
        "/proc/200/root/home/alice/.Xauthority",  # sesman's view: the user's home
    ]
    absolute = XServer(10, 201, 1000, "/run/auth/x10", leader=200)
    assert absolute.auth_paths() == ["/proc/201/root/run/auth/x10", "/proc/200/root/run/auth/x10"]
    assert XServer(10, 201, 1000, None).auth_paths() == []
    assert XServer(10, 201, 1000, ".Xauthority", home="relative").auth_paths() == [
        "/proc/201/cwd/.Xauthority"
    ]
    assert relative.socket_paths() == [
        "\0/tmp/.X11-unix/X10",
        "/proc/201/root/tmp/.X11-unix/X10",
        "/proc/200/root/tmp/.X11-unix/X10",
    ]


def test_homes_from_passwd() -> None:
    text = (
        "root:x:0:0:root:/root:/bin/bash\n"
        "alice:x:1000:1000::/home/alice:/bin/sh\n"
        "bad\n"
        "x:x:7:7::rel:/bin/sh\n"
    )
    assert parse_homes(text) == {0: "/root", 1000: "/home/alice"}


def test_which_processes_may_be_xrdps() -> None:
    def proc(uid: int, exe: str | None, name: str = "xrdp") -> Process:
        return Process(pid=10, parent=1, user="", name=name, cmdline=("xrdp",), uid=uid, exe=exe)

    assert is_xrdp(proc(0, "/usr/sbin/xrdp"))
    assert is_xrdp(proc(108, "/usr/sbin/xrdp"))  # xrdp as its own user
    assert not is_xrdp(proc(1000, "/home/mallory/xrdp"))  # a look-alike
    assert not is_xrdp(proc(MIXED_UIDS, "/usr/sbin/xrdp"))
    # unreadable: only another user's process named xrdp is read (as that user) to be sure
    assert may_be_xrdp(proc(108, None))
    assert not may_be_xrdp(proc(108, None, name="bash"))
    assert not may_be_xrdp(proc(0, None))
    assert xrdp_binary("/usr/sbin/xrdp (deleted)")
