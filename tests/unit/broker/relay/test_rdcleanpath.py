"""The RDCleanPath codec and the Client Info PDU's auto-logon flag: round trips, the bytes
IronRDP's web client and an xrdp host really sent, bounds, and garbage that never raises
anything but RdCleanPathError."""

from __future__ import annotations

import contextlib
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.broker.relay import rdcleanpath as rcp

#: The Connection Confirm of xrdp 0.9.21 selecting PROTOCOL_SSL, as the relay saw it.
CONFIRM = bytes.fromhex("030000130ed000001234000201080001000000")


def x224_request() -> bytes:
    """An X.224 Connection Request asking for TLS (RDP_NEG_REQ, PROTOCOL_SSL)."""
    body = bytes([0x0E, 0xE0, 0, 0, 0, 0, 0]) + bytes([0x01, 0x00, 0x08, 0x00, 1, 0, 0, 0])
    return bytes([3, 0]) + (len(body) + 4).to_bytes(2, "big") + body


def client_info(flags: int, rest: bytes = b"\x00" * 300, security: int = 0x40) -> bytes:
    """A Client Info PDU as IronRDP sends it under TLS: TPKT, X.224 Data, MCS Send Data
    Request (user 1002 on the I/O channel 1003), a PER length of two bytes, the basic
    security header, then TS_INFO_PACKET (CodePage, flags, the rest)."""
    info = (0).to_bytes(4, "little") + flags.to_bytes(4, "little") + rest
    data = security.to_bytes(2, "little") + b"\x00\x00" + info
    mcs = bytes([0x64, 0x00, 0x01, 0x03, 0xEB, 0x70]) + (0x8000 | len(data)).to_bytes(2, "big")
    payload = bytes([0x02, 0xF0, 0x80]) + mcs + data
    return bytes([3, 0]) + (len(payload) + 4).to_bytes(2, "big") + payload


def confirm_active() -> bytes:
    """A PDU on the same channel whose Share Control header sets 0x40 in its totalLength
    (as a real Confirm Active did): not the Client Info PDU."""
    return client_info(0x173, security=0x01F1)[:15] + b"\x13\x00" + b"\x00" * 40


# ---------------------------------------------------------------------- the PDU


def test_a_request_round_trips_and_is_one_the_relay_serves() -> None:
    pdu = rcp.Pdu(destination="10.0.0.5:3389", proxy_auth="t1.abc.def", x224=x224_request())
    raw = rcp.encode(pdu)
    assert raw[0] == 0x30
    assert rcp.total_length(raw) == len(raw)
    back = rcp.decode(raw)
    assert back == pdu
    assert rcp.request_problem(back) == ""


def test_known_bytes_of_a_small_request() -> None:
    """DER written by hand: SEQUENCE { [0] INTEGER 3390, [3] UTF8String "t" }."""
    raw = bytes.fromhex("300ba00402020d3ea3030c0174")
    assert rcp.decode(raw) == rcp.Pdu(proxy_auth="t")
    assert rcp.encode(rcp.Pdu(proxy_auth="t")) == raw


def test_a_response_carries_the_confirm_the_chain_and_the_address() -> None:
    raw = rcp.response(CONFIRM, (b"\x30\x82cert-one", b"cert-two"), "10.0.0.5")
    pdu = rcp.decode(raw)
    assert pdu.x224 == CONFIRM
    assert pdu.cert_chain == (b"\x30\x82cert-one", b"cert-two")
    assert pdu.server_addr == "10.0.0.5"
    assert rcp.request_problem(pdu) == "a response, not a request"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (rcp.error_response(403), rcp.ErrorField(rcp.GENERAL_ERROR, 403)),
        (rcp.error_response(), rcp.ErrorField(rcp.GENERAL_ERROR)),
        (rcp.error_response(x224=CONFIRM), rcp.ErrorField(rcp.NEGOTIATION_ERROR)),
    ],
)
def test_errors(raw: bytes, expected: rcp.ErrorField) -> None:
    assert rcp.decode(raw).error == expected


@pytest.mark.parametrize(
    ("pdu", "problem"),
    [
        (rcp.Pdu(x224=x224_request()), "no ticket (proxy_auth)"),
        (rcp.Pdu(proxy_auth="t"), "no X.224 Connection Request"),
        (rcp.Pdu(proxy_auth="t", x224=CONFIRM), "no X.224 Connection Request"),
        (
            rcp.Pdu(proxy_auth="t", x224=x224_request(), preconnection_blob="x"),
            "preconnection blobs are not relayed",
        ),
    ],
)
def test_requests_the_relay_refuses(pdu: rcp.Pdu, problem: str) -> None:
    assert rcp.request_problem(rcp.decode(rcp.encode(pdu))) == problem


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x30",
        b"\x31\x00",
        rcp.encode(rcp.Pdu(version=3389)),  # the old version
        rcp.encode(rcp.Pdu(version=3390, proxy_auth="t")) + b"\x00",  # trailing bytes
        b"\x30\x84\xff\xff\xff\xff",  # a length past the bounds
        rcp.encode(rcp.Pdu(proxy_auth="x" * 5000)),  # a field past MAX_TEXT
        bytes.fromhex("3009a3030c0174a0020200"),  # fields out of order
        bytes.fromhex("3008a0060204ffffffff"),  # a negative version
    ],
)
def test_what_is_refused(raw: bytes) -> None:
    with pytest.raises(rcp.RdCleanPathError):
        rcp.decode(raw)


def test_a_pdu_over_the_size_bound_is_refused_from_its_header() -> None:
    with pytest.raises(rcp.RdCleanPathError):
        rcp.total_length(b"\x30\x83\x10\x00\x00")
    assert rcp.total_length(b"\x30\x82\x01") is None  # header not whole yet
    assert rcp.total_length(b"\x30\x82\x01\x00") == 260


texts = st.text(max_size=200)


@given(
    destination=st.none() | texts,
    proxy_auth=st.none() | texts,
    server_auth=st.none() | texts,
    x224=st.none() | st.binary(max_size=300),
    chain=st.none() | st.lists(st.binary(max_size=300), max_size=4).map(tuple),
    server_addr=st.none() | texts,
    error=st.none()
    | st.builds(
        rcp.ErrorField,
        st.integers(0, 0xFFFF),
        st.none() | st.integers(0, 0xFFFF),
        st.none() | st.integers(0, 0xFFFF),
        st.none() | st.integers(0, 255),
    ),
)
def test_every_pdu_round_trips(
    destination: str | None,
    proxy_auth: str | None,
    server_auth: str | None,
    x224: bytes | None,
    chain: tuple[bytes, ...] | None,
    server_addr: str | None,
    error: rcp.ErrorField | None,
) -> None:
    pdu = rcp.Pdu(
        error=error,
        destination=destination,
        proxy_auth=proxy_auth,
        server_auth=server_auth,
        x224=x224,
        cert_chain=chain,
        server_addr=server_addr,
    )
    raw = rcp.encode(pdu)
    assert rcp.total_length(raw) == len(raw)
    assert rcp.decode(raw) == pdu


@given(st.binary(max_size=400))
def test_garbage_never_raises_anything_else(raw: bytes) -> None:
    try:
        rcp.decode(raw)
        rcp.total_length(raw)
    except rcp.RdCleanPathError:
        pass


@given(st.binary(min_size=1, max_size=200), st.integers(0, 199))
def test_a_corrupted_request_is_refused_or_read(noise: bytes, at: int) -> None:
    raw = bytearray(rcp.encode(rcp.Pdu(proxy_auth="ticket", x224=x224_request())))
    at %= len(raw)
    raw[at : at + len(noise)] = noise
    with contextlib.suppress(rcp.RdCleanPathError):
        rcp.request_problem(rcp.decode(bytes(raw)))


# ---------------------------------------------------------------------- RDP


def test_the_confirm_of_xrdp_selects_tls() -> None:
    assert rcp.selected_protocol(CONFIRM) == rcp.PROTOCOL_SSL
    failure = bytearray(CONFIRM)
    failure[11] = 0x03  # RDP_NEG_FAILURE
    assert rcp.selected_protocol(bytes(failure)) is None
    assert rcp.selected_protocol(x224_request()) is None


def test_autologon_sets_one_bit_of_the_client_info_pdu() -> None:
    packet = client_info(0x4B0173)
    patched = rcp.autologon(packet)
    assert patched is not None
    assert len(patched) == len(packet)
    differing = [i for i in range(len(packet)) if packet[i] != patched[i]]
    assert differing == [23]  # the flags' low byte: 0x73 -> 0x7b, as the web client's
    assert int.from_bytes(patched[23:27], "little") == 0x4B017B
    assert rcp.autologon(patched) == patched  # set already: the same bytes


@pytest.mark.parametrize(
    "packet",
    [
        confirm_active(),
        client_info(0x173, security=0x0048),  # encrypted: never under TLS
        x224_request(),
        CONFIRM,
        bytes.fromhex("0300000c02f0800401000100"),  # MCS Erect Domain Request
        client_info(0x173)[:-1],  # a length that does not add up
    ],
)
def test_autologon_leaves_other_packets(packet: bytes) -> None:
    assert rcp.autologon(packet) is None


@given(st.binary(max_size=400))
def test_autologon_never_raises(packet: bytes) -> None:
    patched = rcp.autologon(packet)
    if patched is not None:
        assert len(patched) == len(packet)
        assert sum(a != b for a, b in zip(packet, patched, strict=True)) <= 1


def stream() -> bytes:
    erect = bytes.fromhex("0300000c02f0800401000100")
    attach = bytes.fromhex("0300000802f08028")
    return erect + attach + client_info(0x4B0173) + confirm_active() + b"\x44" * 30


def fed_in_cuts(patcher: rcp.ClientInfoPatcher, whole: bytes, cuts: list[int]) -> bytes:
    """What ``patcher`` sends on for ``whole`` read in pieces of the ``cuts``' sizes (and the
    rest in one)."""
    out, at = b"", 0
    for cut in [*cuts, len(whole)]:
        out += patcher.feed(whole[at : at + cut])
        at += cut
    return out


@given(st.lists(st.integers(1, 600), max_size=12))
def test_the_patcher_patches_once_however_the_stream_is_cut(cuts: list[int]) -> None:
    whole = stream()
    expected = whole.replace(client_info(0x4B0173), client_info(0x4B017B))
    patcher = rcp.ClientInfoPatcher()
    out = fed_in_cuts(patcher, whole, cuts)
    assert patcher.patched
    assert out == expected


def test_the_patcher_gives_up_on_what_is_not_tpkt_and_passes_it_on() -> None:
    patcher = rcp.ClientInfoPatcher()
    assert patcher.feed(b"\x44\x00garbage") == b"\x44\x00garbage"
    assert patcher.done
    assert not patcher.patched
    assert patcher.feed(client_info(0x173)) == client_info(0x173)


def test_the_patcher_gives_up_past_its_limit() -> None:
    patcher = rcp.ClientInfoPatcher(limit=100)
    head = client_info(0x173)[:90]
    assert patcher.feed(head) == b""
    assert patcher.feed(b"\x00" * 20) == head + b"\x00" * 20
    assert patcher.done


# ---------------------------------------------------------------------- the logon fields


EXTRA = (
    bytes.fromhex("0200")
    + b"\x1c\x00"
    + "10.1.2.3".encode("utf-16-le")
    + b"\x00\x00"
    + b"\x07" * 40
)


def info_pdu(
    user: str, password: str, domain: str = "", *, flags: int = 0x4B0173, extra: bytes = EXTRA
) -> bytes:
    """A Client Info PDU with these logon fields (Unicode), an empty shell and working
    directory, and ``extra`` (the extended info) after them, as IronRDP sends it."""
    strings = [s.encode("utf-16-le") for s in (domain, user, password, "", "")]
    sizes = b"".join(len(s).to_bytes(2, "little") for s in strings)
    rest = sizes + b"".join(s + b"\x00\x00" for s in strings) + extra
    return client_info(flags, rest)


def test_the_logon_fields_are_read() -> None:
    info = rcp.client_info(info_pdu("alice", "s3cret", "CORP"))
    assert info is not None
    assert (info.domain, info.user, info.password) == ("CORP", "alice", "s3cret")
    assert rcp.client_info(confirm_active()) is None
    assert rcp.client_info(info_pdu("alice", "pw", flags=0x4B0163)) is None  # not Unicode


@given(
    st.text(max_size=40).filter(lambda t: "\x00" not in t),
    st.text(min_size=1, max_size=150).filter(lambda t: "\x00" not in t),
    st.text(max_size=100).filter(lambda t: "\x00" not in t),
)
def test_with_logon_writes_the_relays_logon_and_keeps_the_rest(
    typed_user: str, password: str, typed_password: str
) -> None:
    packet = info_pdu(typed_user, typed_password)
    rewritten = rcp.with_logon(packet, "alice", password)
    assert rewritten is not None
    assert rcp.tpkt_length(rewritten[:4]) == len(rewritten)
    info = rcp.client_info(rewritten)
    assert info is not None
    assert (info.domain, info.user, info.password) == ("", "alice", password)
    assert info.flags & rcp.INFO_AUTOLOGON
    assert rewritten.endswith(EXTRA)
    # It is a Client Info PDU as the host reads one: the same as one built with these fields.
    assert rewritten == info_pdu("alice", password, flags=0x4B017B)


def test_with_logon_fits_a_short_pdu_into_a_long_one() -> None:
    """A one-byte PER length becomes two when the credential makes the PDU longer."""
    short = info_pdu("", "", extra=b"")
    short = short[:13] + bytes([len(short) - 15]) + short[15:]
    short = short[:2] + (len(short)).to_bytes(2, "big") + short[4:]
    assert rcp.client_info(short) is not None
    rewritten = rcp.with_logon(short, "alice", "hp1." + "x" * 141)
    assert rewritten is not None
    info = rcp.client_info(rewritten)
    assert info is not None
    assert info.password == "hp1." + "x" * 141


def logon_stream(user: str, password: str) -> bytes:
    erect = bytes.fromhex("0300000c02f0800401000100")
    attach = bytes.fromhex("0300000802f08028")
    return erect + attach + info_pdu(user, password) + confirm_active() + b"\x44" * 30


@given(st.lists(st.integers(1, 600), max_size=12))
def test_on_a_single_sign_on_pool_the_logon_is_the_relays(cuts: list[int]) -> None:
    whole = logon_stream("bob", "bobs-password")
    expected = whole.replace(
        info_pdu("bob", "bobs-password"), info_pdu("alice", "hp1.credential", flags=0x4B017B)
    )
    patcher = rcp.ClientInfoPatcher(logon=("alice", "hp1.credential"))
    out = fed_in_cuts(patcher, whole, cuts)
    assert patcher.patched
    assert out == expected


def test_elsewhere_the_browser_may_name_only_the_caller() -> None:
    mine = rcp.ClientInfoPatcher(user="alice")
    out = mine.feed(logon_stream("alice", "pw"))
    assert mine.patched
    assert info_pdu("alice", "pw", flags=0x4B017B) in out
    theirs = rcp.ClientInfoPatcher(user="alice")
    with pytest.raises(rcp.ClientInfoRefusedError, match="another user"):
        theirs.feed(logon_stream("bob", "bobs-password"))
    assert theirs.refusal == "the browser's logon names another user"  # the relay's outcome
    assert mine.refusal is None


@pytest.mark.parametrize(
    "patcher",
    [
        pytest.param(rcp.ClientInfoPatcher(user="alice"), id="user"),
        pytest.param(rcp.ClientInfoPatcher(logon=("alice", "hp1.x")), id="logon"),
    ],
)
def test_a_stream_that_cannot_be_read_to_its_logon_is_refused(
    patcher: rcp.ClientInfoPatcher,
) -> None:
    with pytest.raises(rcp.ClientInfoRefusedError):
        patcher.feed(b"\x44\x00garbage")
    assert patcher.refusal is not None


@pytest.mark.parametrize(
    "patcher",
    [
        pytest.param(rcp.ClientInfoPatcher(user="alice"), id="user"),
        pytest.param(rcp.ClientInfoPatcher(logon=("alice", "hp1.x")), id="logon"),
    ],
)
def test_a_flood_of_tiny_packets_is_refused_after_a_few(patcher: rcp.ClientInfoPatcher) -> None:
    """1 MiB of 7-byte TPKT packets in one message: refused once past max_packets, the rest
    never cut (it cost 0.28 s of the event loop when every packet was read)."""
    tiny = bytes([3, 0, 0, 7, 2, 0xF0, 0x80])
    flood = tiny * (1024 * 1024 // len(tiny))
    started = time.perf_counter()
    with pytest.raises(rcp.ClientInfoRefusedError):
        patcher.feed(flood)
    assert patcher.packets == patcher.max_packets + 1
    assert time.perf_counter() - started < 0.05


def test_a_real_logon_fits_well_within_the_packets_allowed() -> None:
    patcher = rcp.ClientInfoPatcher(user="alice")
    patcher.feed(logon_stream("alice", "pw"))
    assert patcher.patched
    assert patcher.packets < patcher.max_packets


# ---------------------------------------------------------------------- the keyboard layout


def core_data(layout: int, build: int = 2657) -> bytes:
    """TS_UD_CS_CORE (1280x720, keyboard layout ``layout``, client build ``build``), with
    the fields after the build the relay never reads."""
    body = (0x00080004).to_bytes(4, "little") + (1280).to_bytes(2, "little")
    body += (720).to_bytes(2, "little") + bytes.fromhex("01ca0300")
    body += layout.to_bytes(4, "little") + build.to_bytes(4, "little") + b"\x00" * 32
    body += (4).to_bytes(4, "little") + b"\x00" * 8 + b"\x0c" * 64 + b"\x01\xca" * 6
    return (0xC001).to_bytes(2, "little") + (len(body) + 4).to_bytes(2, "little") + body


def connect_initial(
    layout: int, others: bytes = b"\x02\xc0\x0c\x00" + b"\x00" * 8, *, build: int = 2657
) -> bytes:
    """An MCS Connect Initial: TPKT, X.224 Data, BER Connect-Initial (domain selectors, the
    flag, three domain parameters), then the GCC Conference Create Request with the client's
    user data (the Client Core Data first)."""
    user_data = core_data(layout, build) + others
    gcc = bytes.fromhex("000500147c0001") + (0x8000 | (len(user_data) + 14)).to_bytes(2, "big")
    gcc += bytes.fromhex("000800100001c000") + b"Duca"
    gcc += (0x8000 | len(user_data)).to_bytes(2, "big") + user_data
    params = bytes.fromhex("3019020122020102020100020101020100020101020300ffff020102") * 3
    ber = bytes.fromhex("040101040101010101ff") + params + b"\x04\x82" + len(gcc).to_bytes(2, "big")
    mcs = b"\x7f\x65\x82" + (len(ber) + len(gcc)).to_bytes(2, "big") + ber + gcc
    payload = bytes([0x02, 0xF0, 0x80]) + mcs
    return bytes([3, 0]) + (len(payload) + 4).to_bytes(2, "big") + payload


def test_the_keyboard_layout_is_read_and_written_in_the_client_core_data() -> None:
    packet = connect_initial(0)  # IronRDP's web client: "the server's default"
    assert rcp.keyboard_layout(packet) == 0
    swedish = rcp.with_keyboard_layout(packet, 0x041D)
    assert swedish == connect_initial(0x041D)
    assert rcp.keyboard_layout(swedish) == 0x041D
    differing = [i for i in range(len(packet)) if packet[i] != swedish[i]]
    assert len(differing) == 2  # 0x1D and 0x04: nothing else, no length changes


@pytest.mark.parametrize(
    "packet",
    [
        client_info(0x4B0173),
        x224_request(),
        CONFIRM,
        bytes.fromhex("0300000c02f0800401000100"),
        connect_initial(0)[:-1],  # a length that does not add up
        connect_initial(0).replace(b"Duca", b"Dxca"),
        connect_initial(0).replace(core_data(0)[:4], b"\x02\xc0" + core_data(0)[2:4]),  # not core
    ],
)
def test_other_packets_keep_their_bytes(packet: bytes) -> None:
    assert rcp.keyboard_layout(packet) is None
    assert rcp.with_keyboard_layout(packet, 0x041F) is None


@given(st.binary(max_size=400))
def test_the_keyboard_layout_never_raises(packet: bytes) -> None:
    patched = rcp.with_keyboard_layout(packet, 0x040A)
    if patched is not None:
        assert len(patched) == len(packet)
        assert rcp.keyboard_layout(patched) == 0x040A


@given(st.lists(st.integers(1, 600), max_size=12))
def test_the_patcher_sends_the_browsers_keyboard_layout(cuts: list[int]) -> None:
    whole = connect_initial(0) + logon_stream("alice", "pw")
    expected = connect_initial(0x041F) + logon_stream("alice", "pw").replace(
        info_pdu("alice", "pw"), info_pdu("alice", "pw", flags=0x4B017B)
    )
    patcher = rcp.ClientInfoPatcher(user="alice", keyboard_layout=0x041F)
    out = fed_in_cuts(patcher, whole, cuts)
    assert patcher.patched
    assert out == expected


def test_a_client_build_xrdp_takes_for_one_that_cannot_resize_is_raised() -> None:
    """IronRDP's web client sends build 0 (its crate's version, 0.0.0): xrdp 0.9 then
    resizes the X server on a display-control request but never tells the client."""
    web_client = connect_initial(0, build=0)
    assert rcp.client_build(web_client) == 0
    patched = rcp.with_keyboard_layout(web_client, None)
    assert patched == connect_initial(0, build=rcp.CLIENT_BUILD)
    assert rcp.client_build(connect_initial(0, build=419)) == 419
    assert (
        rcp.client_build(rcp.with_keyboard_layout(connect_initial(0, build=419), None) or b"")
        == 2600
    )
    newer = connect_initial(0x0409, build=7601)
    assert rcp.with_keyboard_layout(newer, None) == newer


def test_without_a_layout_the_clients_own_goes_on() -> None:
    patcher = rcp.ClientInfoPatcher(user="alice")
    whole = connect_initial(0x0409) + logon_stream("alice", "pw")
    assert rcp.keyboard_layout(patcher.feed(whole)[: len(connect_initial(0))]) == 0x0409


# ---------------------------------------------------------------------- the host's PDUs


def host_pdu(share_control: bytes, channel: int = 1003) -> bytes:
    """A slow-path PDU from the host under TLS: TPKT, X.224 Data, MCS Send Data Indication
    (user 1002 on ``channel``), a PER length, then ``share_control``."""
    size = len(share_control)
    per = bytes([size]) if size < 0x80 else (0x8000 | size).to_bytes(2, "big")
    mcs = bytes([0x68, 0x00, 0x01]) + channel.to_bytes(2, "big") + b"\x70" + per
    payload = bytes([0x02, 0xF0, 0x80]) + mcs + share_control
    return bytes([3, 0]) + (len(payload) + 4).to_bytes(2, "big") + payload


SHARE_ID = 0x103EA
#: xrdp's Demand Active (the share id after the Share Control Header, then the rest).
DEMAND_ACTIVE = host_pdu(
    (400).to_bytes(2, "little") + b"\x11\x00\xea\x03" + SHARE_ID.to_bytes(4, "little") + bytes(390)
)
#: xrdp 0.9's Deactivate All: its Share Control Header alone.
SHORT_DEACTIVATE_ALL = host_pdu(b"\x06\x00\x16\x00\xea\x03")
#: The same as MS-RDPBCGR gives it: shareId, lengthSourceDescriptor 1, sourceDescriptor 0.
DEACTIVATE_ALL = host_pdu(
    b"\x0d\x00\x16\x00\xea\x03" + SHARE_ID.to_bytes(4, "little") + b"\x01\x00\x00"
)


def share_data(pdu_type2: int, body: bytes) -> bytes:
    """A Share Data PDU on the I/O channel (Share Control Header, then the Share Data
    Header: shareId, pad, streamId, uncompressedLength, pduType2, compression, length)."""
    data = SHARE_ID.to_bytes(4, "little") + b"\x00\x01" + (len(body) + 4).to_bytes(2, "little")
    data += bytes([pdu_type2, 0]) + b"\x00\x00" + body
    return host_pdu((len(data) + 6).to_bytes(2, "little") + b"\x17\x00\xea\x03" + data)


FONT_MAP = share_data(0x28, bytes(8))
SYNCHRONIZE = share_data(0x1F, b"\x01\x00\xea\x03")
CONTROL = share_data(0x14, b"\x04\x00" + bytes(6))
SLOW_PATH_UPDATE = share_data(0x02, b"\x01\x00" + bytes(40))
DVC_CAPABILITIES_REQUEST = host_pdu(bytes.fromhex("0c000000030000005000020000000000"), 1005)
FAST_PATH_SHORT = bytes([0x00, 0x08]) + b"\x01" * 6
FAST_PATH_LONG = bytes([0x00, 0x81, 0x04]) + b"\x02" * (0x104 - 3)


def test_pdu_lengths() -> None:
    assert rcp.pdu_length(FONT_MAP) == len(FONT_MAP)
    assert rcp.pdu_length(FAST_PATH_SHORT) == 8
    assert rcp.pdu_length(FAST_PATH_LONG) == 0x104
    assert rcp.pdu_length(b"") is None
    assert rcp.pdu_length(b"\x03\x00") is None
    assert rcp.pdu_length(b"\x00\x81") is None
    with pytest.raises(rcp.RdCleanPathError):
        rcp.pdu_length(b"\x44\x00garbage")


def test_xrdps_short_deactivate_all_is_made_whole() -> None:
    assert rcp.share_control_type(SHORT_DEACTIVATE_ALL) == 6
    assert rcp.share_control_type(DEMAND_ACTIVE) == 1
    assert rcp.deactivate_all_completed(SHORT_DEACTIVATE_ALL, SHARE_ID) == DEACTIVATE_ALL
    for packet in (DEACTIVATE_ALL, DEMAND_ACTIVE, FONT_MAP, FAST_PATH_SHORT, client_info(0x173)):
        assert rcp.deactivate_all_completed(packet, SHARE_ID) is None


def test_the_font_map_comes_alone_in_its_message() -> None:
    """What xrdp sent in one read (the Font Map, then the dynamic channels' request that the
    web client would drop with the Font Map's message) goes one PDU a message."""
    stream = rcp.HostStream()
    read = FONT_MAP + FAST_PATH_SHORT + DVC_CAPABILITIES_REQUEST
    assert stream.feed(read) == [FONT_MAP, FAST_PATH_SHORT, DVC_CAPABILITIES_REQUEST]


def session(deactivate: bytes) -> list[bytes]:
    """A connection, then a resize: xrdp draws (and talks on a channel) before the client's
    reactivation has ended."""
    return [
        DEMAND_ACTIVE,
        SYNCHRONIZE,
        CONTROL,
        FONT_MAP,
        DVC_CAPABILITIES_REQUEST,
        FAST_PATH_LONG,
        FAST_PATH_SHORT,
        deactivate,
        DEMAND_ACTIVE,
        FAST_PATH_LONG,
        SLOW_PATH_UPDATE,
        SYNCHRONIZE,
        DVC_CAPABILITIES_REQUEST,
        CONTROL,
        CONTROL,
        FONT_MAP,
        FAST_PATH_SHORT,
    ]


#: What the client gets: the reactivation first, what came meanwhile after its Font Map.
RECEIVED = [
    *session(DEACTIVATE_ALL)[:9],
    SYNCHRONIZE,
    CONTROL,
    CONTROL,
    FONT_MAP,
    FAST_PATH_LONG,
    SLOW_PATH_UPDATE,
    DVC_CAPABILITIES_REQUEST,
    FAST_PATH_SHORT,
]


@given(st.lists(st.integers(1, 300), max_size=12), st.integers(1, 20))
def test_the_stream_keeps_every_pdu_however_the_reads_are_cut(cuts: list[int], pdus: int) -> None:
    """Every byte in order, the Deactivate All made whole (with the share id of the Demand
    Active at the start), each of the first ``pdus`` PDUs alone in its message."""
    whole = b"".join(session(SHORT_DEACTIVATE_ALL))
    stream = rcp.HostStream(pdus=pdus)
    out: list[bytes] = []
    at = 0
    for cut in [*cuts, len(whole)]:
        out += stream.feed(whole[at : at + cut])
        at += cut
    assert b"".join(out) == b"".join(RECEIVED)
    assert out[: min(pdus, len(RECEIVED))] == RECEIVED[: min(pdus, len(RECEIVED))]
    assert stream.share_id == SHARE_ID
    assert not stream.reactivating


def test_after_the_start_the_data_goes_as_it_comes() -> None:
    stream = rcp.HostStream(pdus=1)
    assert stream.feed(FONT_MAP + FAST_PATH_SHORT + FAST_PATH_SHORT) == [
        FONT_MAP,
        FAST_PATH_SHORT + FAST_PATH_SHORT,
    ]
    # A long PDU cut by the read goes on at once; a short one waits for its rest.
    assert stream.feed(FAST_PATH_LONG[:100]) == [FAST_PATH_LONG[:100]]
    assert stream.feed(FAST_PATH_LONG[100:] + FAST_PATH_SHORT[:3]) == [FAST_PATH_LONG[100:]]
    assert stream.feed(FAST_PATH_SHORT[3:]) == [FAST_PATH_SHORT]


def test_a_stream_that_is_not_rdp_goes_as_it_comes() -> None:
    stream = rcp.HostStream()
    assert stream.feed(FAST_PATH_SHORT + b"\x44\x00garbage") == [
        FAST_PATH_SHORT,
        b"\x44\x00garbage",
    ]
    assert stream.feed(SHORT_DEACTIVATE_ALL) == [SHORT_DEACTIVATE_ALL]


def test_what_waits_for_the_reactivation_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Font Map that never comes: past the bound the relay stops holding and sends all."""
    monkeypatch.setattr(rcp, "_HOLD_AT_MOST", 2 * len(FAST_PATH_LONG))
    stream = rcp.HostStream()
    assert stream.feed(DEMAND_ACTIVE + SHORT_DEACTIVATE_ALL) == [DEMAND_ACTIVE, DEACTIVATE_ALL]
    assert stream.reactivating
    assert stream.feed(FAST_PATH_LONG + FAST_PATH_LONG) == []
    assert stream.feed(FAST_PATH_SHORT + FAST_PATH_LONG) == [
        FAST_PATH_LONG,
        FAST_PATH_LONG,
        FAST_PATH_SHORT,
        FAST_PATH_LONG,
    ]
    assert not stream.reactivating
