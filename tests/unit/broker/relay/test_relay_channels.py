"""The channels a browser's client asks for in its MCS Connect Initial, and the clipboard
withheld from the host in a pool without one: renamed in place (every other byte, length and
channel position the same), whatever the page asked for; a Connect Initial whose channel list
cannot be read is refused rather than passed on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.broker.relay import channels
from hostpool_operator.broker.relay import rdcleanpath as rcp
from unit.broker.relay.test_rdcleanpath import info_pdu

WITHHELD = frozenset({channels.CLIPBOARD})


def ber(tag: bytes, value: bytes) -> bytes:
    size = len(value)
    length = bytes([size]) if size < 0x80 else b"\x82" + size.to_bytes(2, "big")
    return tag + length + value


def per_length(size: int) -> bytes:
    return (0x8000 | size).to_bytes(2, "big")


def block(kind: int, body: bytes) -> bytes:
    return kind.to_bytes(2, "little") + (len(body) + 4).to_bytes(2, "little") + body


def net(names: list[bytes]) -> bytes:
    defs = b"".join(n.ljust(8, b"\x00") + (0x80000000).to_bytes(4, "little") for n in names)
    return block(0xC003, len(names).to_bytes(4, "little") + defs)


def connect_initial(blocks: bytes) -> bytes:
    """An MCS Connect Initial as a client sends it: the GCC Conference Create Request (with
    the client key Duca) around ``blocks``, in BER, in X.224 Data, in TPKT."""
    after_key = b"Duca" + per_length(len(blocks)) + blocks
    gcc_rest = bytes.fromhex("0008001000 01c000".replace(" ", "")) + after_key
    gcc = bytes.fromhex("000500147c0001") + per_length(len(gcc_rest)) + gcc_rest
    domain = ber(b"\x30", b"".join(ber(b"\x02", b"\x22") for _ in range(8)))
    body = (
        ber(b"\x04", b"\x01")
        + ber(b"\x04", b"\x01")
        + ber(b"\x01", b"\xff")
        + domain * 3
        + ber(b"\x04", gcc)
    )
    mcs = ber(b"\x7f\x65", body)
    payload = b"\x02\xf0\x80" + mcs
    return b"\x03\x00" + (len(payload) + 4).to_bytes(2, "big") + payload


#: The Client Core Data with a client build xrdp lets resize (2600: the relay leaves it).
CORE = block(0xC001, b"\x04\x00\x08\x00" + bytes(12) + (2600).to_bytes(4, "little") + bytes(184))
SECURITY = block(0xC002, b"\x00" * 8)
ASKED = [b"rdpdr", b"rdpsnd", b"cliprdr", b"drdynvc"]


def test_the_channels_asked_for_are_read() -> None:
    packet = connect_initial(CORE + SECURITY + net(ASKED))
    assert channels.channel_names(packet) == ["rdpdr", "rdpsnd", "cliprdr", "drdynvc"]
    assert channels.channel_names(connect_initial(CORE + SECURITY)) == []
    assert channels.channel_names(info_pdu("alice", "pw")) is None


@pytest.mark.parametrize("name", [b"cliprdr", b"CLIPRDR", b"ClipRdr"])
def test_the_clipboard_is_renamed_in_place_and_nothing_else_changes(name: bytes) -> None:
    asked = [b"rdpdr", name, b"drdynvc"]
    packet = connect_initial(CORE + SECURITY + net(asked))
    kept = channels.without_channels(packet, WITHHELD)
    assert kept is not None
    out, withheld = kept
    assert withheld == 1
    assert len(out) == len(packet)
    assert channels.channel_names(out) == ["rdpdr", "_noclip", "drdynvc"]
    assert out == connect_initial(CORE + SECURITY + net([b"rdpdr", b"_noclip", b"drdynvc"]))
    # Without the clipboard in the list: the packet as it was.
    plain = connect_initial(CORE + net([b"rdpdr", b"drdynvc"]))
    assert channels.without_channels(plain, WITHHELD) == (plain, 0)


def test_every_channel_list_is_read_two_too() -> None:
    """A second channel list (a client writing one per block) hides nothing."""
    packet = connect_initial(CORE + net([b"rdpdr"]) + net([b"cliprdr"]))
    kept = channels.without_channels(packet, WITHHELD)
    assert kept is not None
    assert kept[1] == 1
    assert channels.channel_names(kept[0]) == ["rdpdr", "_noclip"]


@pytest.mark.parametrize(
    "blocks",
    [
        pytest.param(CORE + net(ASKED)[:-5], id="cut-in-a-channel"),
        pytest.param(CORE + block(0xC003, (9).to_bytes(4, "little")), id="count-past-the-list"),
        pytest.param(CORE + b"\x03\xc0\x02\x00", id="block-shorter-than-its-header"),
        pytest.param(CORE + b"\x03\xc0\xff\x7f", id="block-past-the-user-data"),
    ],
)
def test_a_channel_list_that_cannot_be_read_is_refused(blocks: bytes) -> None:
    packet = connect_initial(blocks)
    with pytest.raises(channels.ChannelsUnreadableError):
        channels.without_channels(packet, WITHHELD)


@given(st.binary(max_size=300), st.integers(0, 400))
def test_garbage_is_read_or_refused_never_anything_else(noise: bytes, at: int) -> None:
    packet = connect_initial(CORE + SECURITY + net(ASKED))
    at = min(at, len(packet))
    corrupted = packet[:at] + noise + packet[at + len(noise) :]
    try:
        kept = channels.without_channels(corrupted, WITHHELD)
    except channels.ChannelsUnreadableError:
        return
    if kept is not None:
        assert len(kept[0]) == len(corrupted)
        assert channels.CLIPBOARD not in (channels.channel_names(kept[0]) or [])


def stream(initial: bytes) -> bytes:
    erect = bytes.fromhex("0300000c02f0800401000100")
    attach = bytes.fromhex("0300000802f08028")
    return initial + erect + attach + info_pdu("alice", "pw") + b"\x44" * 30


@given(st.lists(st.integers(1, 600), max_size=12))
def test_the_relay_withholds_the_clipboard_however_the_stream_is_cut(cuts: list[int]) -> None:
    whole = stream(connect_initial(CORE + SECURITY + net(ASKED)))
    patcher = rcp.ClientInfoPatcher(user="alice", withheld=WITHHELD)
    out, at = b"", 0
    for cut in [*cuts, len(whole)]:
        out += patcher.feed(whole[at : at + cut])
        at += cut
    assert patcher.patched
    assert patcher.withheld_asked == 1
    renamed = connect_initial(CORE + SECURITY + net([b"rdpdr", b"rdpsnd", b"_noclip", b"drdynvc"]))
    assert out.startswith(renamed)
    assert b"cliprdr" not in out
    # A pool with a clipboard: the list goes on as the browser wrote it.
    allowed = rcp.ClientInfoPatcher(user="alice")
    assert allowed.feed(whole).startswith(connect_initial(CORE + SECURITY + net(ASKED)))


def test_a_connect_initial_the_relay_cannot_read_is_refused_where_it_withholds() -> None:
    whole = stream(connect_initial(CORE + b"\x03\xc0\xff\x7f"))
    with pytest.raises(rcp.ClientInfoRefusedError, match="channel list"):
        rcp.ClientInfoPatcher(user="alice", withheld=WITHHELD).feed(whole)
