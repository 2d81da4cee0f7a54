"""The relay's judgement of a browser's liveness (broker/relay/liveness.py), with the clock
passed in, and the send queue it reads from a real loopback socket."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.broker.relay.liveness import BrowserLiveness, Due
from hostpool_operator.broker.relay.pump import send_queue


def fresh() -> BrowserLiveness:
    return BrowserLiveness(now=0.0, quiet=30.0, answer=30.0)


def test_nothing_is_due_while_the_browser_takes_part() -> None:
    live = fresh()
    for now in range(0, 300, 10):
        live.sign(float(now))
        assert live.due(float(now) + 9.9) is Due.NOTHING


def test_a_quiet_browser_is_pinged_then_gone_when_nothing_follows() -> None:
    live = fresh()
    assert live.due(29.9) is Due.NOTHING
    assert live.due(30.0) is Due.PING
    live.pinged(30.0)
    assert live.due(59.9) is Due.NOTHING
    assert live.due(60.0) is Due.GONE


@pytest.mark.parametrize("late", [1.0, 29.0, 45.0])
def test_any_sign_after_the_ping_answers_it_however_late(late: float) -> None:
    """A pong queued behind a backlog arrives late; a completed send or a shrinking queue
    in the meantime already answered."""
    live = fresh()
    live.pinged(30.0)
    live.sign(30.0 + min(late, 29.0))
    assert live.due(30.0 + late) is Due.NOTHING
    assert live.pinged_at is None


def test_a_shrinking_send_queue_is_a_sign_a_growing_or_unknown_one_is_not() -> None:
    live = fresh()
    live.queue(5.0, 4_000_000)
    live.queue(10.0, 4_100_000)  # growing: the browser reads nothing
    live.queue(15.0, None)  # cannot be read
    live.queue(20.0, 4_100_000)
    assert live.last_sign == 0.0
    live.queue(25.0, 3_000_000)  # shrinking: it reads
    assert live.last_sign == 25.0
    live.pinged(55.0)
    live.queue(60.0, 2_000_000)
    assert live.pinged_at is None
    assert live.due(61.0) is Due.NOTHING


def test_a_stalled_browser_with_a_full_queue_is_gone_a_ping_and_an_answer_later() -> None:
    live = fresh()
    for now in range(5, 61, 5):
        live.queue(float(now), 4_194_304)  # full, not moving
        if live.due(float(now)) is Due.PING:
            live.pinged(float(now))
    assert live.pinged_at == 30.0
    assert live.due(60.0) is Due.GONE


def test_an_old_sign_never_moves_the_last_sign_back() -> None:
    live = fresh()
    live.sign(50.0)
    live.sign(40.0)
    assert live.last_sign == 50.0


@given(
    signs=st.lists(st.floats(min_value=0, max_value=1000, allow_nan=False), max_size=30),
    now=st.floats(min_value=0, max_value=1100, allow_nan=False),
)
def test_never_gone_within_quiet_plus_answer_of_a_sign(signs: list[float], now: float) -> None:
    """Whatever happened, a browser that gave a sign less than quiet + answer seconds ago
    is not gone, whenever the relay looks and pings."""
    live = fresh()
    events = sorted([(t, "sign") for t in signs] + [(t, "look") for t in range(0, 1101, 5)])
    last = 0.0
    for at, kind in events:
        if at > now:
            break
        if kind == "sign":
            live.sign(at)
            last = max(last, at)
        elif (due := live.due(float(at))) is Due.PING:
            live.pinged(float(at))
        elif due is Due.GONE:
            assert at - last >= 60.0


def test_send_queue_reads_a_real_sockets_unacknowledged_bytes() -> None:
    """Linux's SIOCOUTQ on a loopback TCP connection whose reader reads nothing (a small
    receive buffer, so the data stays queued on the sender's side), then reads it all."""
    listener = socket.create_server(("127.0.0.1", 0))
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(listener.getsockname())
    sender, _ = listener.accept()
    sender.setblocking(False)
    try:
        assert send_queue(sender) == 0
        sent = 0
        try:
            while sent < 8 * 1024 * 1024:
                sent += sender.send(b"x" * 65536)
        except BlockingIOError:
            pass
        queued = send_queue(sender)
        assert queued is not None
        assert queued > 0
        reader.setblocking(False)
        got = 0
        try:
            while got < sent:
                got += len(reader.recv(1 << 20))
        except BlockingIOError:
            pass
        later = send_queue(sender)
        assert later is not None
        assert later < queued
    finally:
        for sock in (sender, reader, listener):
            sock.close()
    assert send_queue(None) is None
    assert send_queue(sender) is None  # closed: cannot be read
