"""The relay authenticates the host (the second security review, item 5): after TLS with the
host it takes the connection only when the host's certificate has the SHA-256 its
SessionHost publishes; otherwise it closes it before the browser's logon could be relayed.

A fake xrdp on 127.0.0.1 answers the X.224 request with xrdp's confirm, does TLS with a
certificate of its own and records every byte it receives after the handshake."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostpool_operator.broker.relay import rdcleanpath as rcp
from hostpool_operator.broker.relay.host import HostRefused, certificate_sha256, open_host
from support.tls import self_signed

#: The Connection Confirm of xrdp 0.9.21 selecting PROTOCOL_SSL.
CONFIRM = bytes.fromhex("030000130ed000001234000201080001000000")
#: What the browser's logon would be: any bytes the relay passes on after the set-up.
LOGON = b"\x03\x00\x00\x0bthe logon"


def x224_request() -> bytes:
    body = bytes([0x0E, 0xE0, 0, 0, 0, 0, 0]) + bytes([0x01, 0x00, 0x08, 0x00, 1, 0, 0, 0])
    return bytes([3, 0]) + (len(body) + 4).to_bytes(2, "big") + body


class FakeXrdp:
    """One connection: the confirm, TLS with ``cert``/``key``, then everything received."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.received = bytearray()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
            with conn:
                conn.settimeout(10)
                request = conn.recv(1024)
                assert request[:2] == b"\x03\x00"
                conn.sendall(CONFIRM)
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    while chunk := tls.recv(65536):
                        self.received += chunk
        except (OSError, ssl.SSLError):
            pass  # the relay closed without a TLS close_notify: what it sent is recorded
        finally:
            self.done.set()

    def close(self) -> None:
        self.listener.close()
        self.thread.join(10)


@pytest.fixture
def certs(tmp_path: Path) -> tuple[Path, Path, bytes]:
    return self_signed("xrdp-host", tmp_path / "host")


@pytest.fixture
def fake_host(certs: tuple[Path, Path, bytes]) -> Iterator[FakeXrdp]:
    cert, key, _ = certs
    host = FakeXrdp(cert, key)
    yield host
    host.close()


async def relay_once(port: int, sha256: str) -> tuple[HostRefused | None, bytes]:
    """What the relay does with the host: the set-up, then the logon passed on when the
    host was taken. (The refusal, or None; the certificate the relay saw.)"""
    link = await open_host("127.0.0.1", port, x224_request(), host="h1", sha256=sha256)
    if isinstance(link, HostRefused):
        return link, b""
    _, writer, confirm, certs = link
    assert confirm == CONFIRM
    writer.write(LOGON)
    await writer.drain()
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return None, certs[0]


def test_the_fingerprint_is_the_sha256_of_the_der_certificate_in_lowercase_hex(
    certs: tuple[Path, Path, bytes],
) -> None:
    _, _, der = certs
    value = certificate_sha256(der)
    assert value == hashlib.sha256(der).hexdigest()
    assert len(value) == 64
    assert value == value.lower()


def test_the_host_whose_certificate_is_the_published_one_gets_the_logon(
    fake_host: FakeXrdp, certs: tuple[Path, Path, bytes]
) -> None:
    _, _, der = certs
    refused, presented = asyncio.run(relay_once(fake_host.port, certificate_sha256(der)))
    assert refused is None
    assert presented == der
    assert fake_host.done.wait(10)
    assert bytes(fake_host.received) == LOGON


def test_a_host_with_another_certificate_gets_nothing_after_tls(
    fake_host: FakeXrdp, certs: tuple[Path, Path, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    published = hashlib.sha256(b"the certificate the SessionHost publishes").hexdigest()
    with caplog.at_level("WARNING"):
        refused, _ = asyncio.run(relay_once(fake_host.port, published))
    assert refused is not None
    assert refused.outcome == "HostNotTrusted"
    error = rcp.decode(refused.pdu).error
    assert error is not None
    assert error.http_status == 502
    assert fake_host.done.wait(10)
    assert bytes(fake_host.received) == b""  # not one byte after TLS
    # The warning names the host and both fingerprints (the presented one: TLS happened),
    # nothing else of the certificate.
    (line,) = [r.getMessage() for r in caplog.records if "not trusted" in r.getMessage()]
    assert "h1" in line
    assert published in line
    assert certificate_sha256(certs[2]) in line


def test_a_fingerprint_in_another_form_does_not_match(
    fake_host: FakeXrdp, certs: tuple[Path, Path, bytes]
) -> None:
    """Upper case, or openssl's colons: the published form is lowercase hex only (the API
    server refuses other forms; the relay does not guess)."""
    _, _, der = certs
    upper = certificate_sha256(der).upper()
    refused, _ = asyncio.run(relay_once(fake_host.port, upper))
    assert refused is not None
    assert refused.outcome == "HostNotTrusted"
    assert fake_host.done.wait(10)
    assert bytes(fake_host.received) == b""


def test_a_host_that_cannot_be_reached_is_refused_as_before() -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    refused, _ = asyncio.run(relay_once(port, "0" * 64))
    assert refused is not None
    assert refused.outcome == "HostRefused"
