"""The relay's link to the host: TCP, the client's X.224 request, the host's confirm, then
TLS and the host's certificate checked against the one its SessionHost publishes; or the
RDCleanPath error PDU the browser is answered with instead.

The browser's client runs with CredSSP off, so its logon (on a single sign-on pool, the
relay's one-time credential) crosses the relay's TLS session with the host in the clear of
RDP: whoever answered the relay at the host's address would read it. So the relay takes the
host only when the certificate it presents has the SHA-256 the host's agent publishes
(``status.agent.rdpCertificateSha256``), before the browser is even answered: no byte of the
logon is sent to any other. TLS proves the peer holds the key of the certificate it
presents, and the pin says whose certificate that is."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import ssl
from dataclasses import dataclass

from . import rdcleanpath as rcp

log = logging.getLogger(__name__)

#: Seconds for the host's TCP connect, its X.224 answer and TLS.
SETUP_TIMEOUT = 10.0
#: The HTTP status of the RDCleanPath error for a host the relay does not take (a gateway
#: whose upstream failed; the reason is in the relay's log, not in the browser).
NOT_TRUSTED_STATUS = 502

HostLink = tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes, tuple[bytes, ...]]


@dataclass(frozen=True, slots=True)
class HostRefused:
    """No link: the RDCleanPath error PDU to answer the browser with, and the relay's
    outcome (``HostRefused``: unreachable or no TLS; ``HostNotTrusted``: not the host's
    certificate, or none published)."""

    pdu: bytes
    outcome: str = "HostRefused"


def certificate_sha256(der: bytes) -> str:
    """A certificate's fingerprint as hosts publish it: the SHA-256 of its DER form, in
    lowercase hex."""
    return hashlib.sha256(der).hexdigest()


def not_trusted(host: str, why: str) -> HostRefused:
    """The refusal of a host whose certificate the relay cannot trust, with a warning that
    names the host and the fingerprints (nothing else of any certificate)."""
    log.warning("the relay did not take host %s: not trusted: %s", host, why)
    return HostRefused(rcp.error_response(NOT_TRUSTED_STATUS), "HostNotTrusted")


async def open_host(
    address: str, port: int, x224: bytes, *, host: str, sha256: str
) -> HostLink | HostRefused:
    """TCP to the host, the client's X.224 request, the host's confirm, then TLS with the
    host, whose certificate must have the SHA-256 ``sha256`` (its SessionHost's ``host``,
    for the log); or the refusal to answer."""
    try:
        async with asyncio.timeout(SETUP_TIMEOUT):
            reader, writer = await asyncio.open_connection(address, port)
    except (OSError, TimeoutError) as exc:
        log.warning("the relay could not reach %s:%d: %s", address, port, exc)
        return HostRefused(rcp.error_response(502))
    try:
        async with asyncio.timeout(SETUP_TIMEOUT):
            writer.write(x224)
            header = await reader.readexactly(4)
            length = rcp.tpkt_length(header)
            if length is None or length > 1024:
                raise rcp.RdCleanPathError("bad X.224 answer")
            confirm = header + await reader.readexactly(length - 4)
            if rcp.selected_protocol(confirm) != rcp.PROTOCOL_SSL:
                writer.close()
                return HostRefused(rcp.error_response(x224=confirm))
            # No CA: hosts' certificates are their own (xrdp's self-signed one, often); the
            # pin below is the check. TLS still proves the host holds the certificate's key.
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            await writer.start_tls(context)
    except (OSError, TimeoutError, asyncio.IncompleteReadError, rcp.RdCleanPathError) as exc:
        log.warning("the relay's set-up with %s:%d failed: %r", address, port, exc)
        writer.close()
        return HostRefused(rcp.error_response(502))
    tls = writer.get_extra_info("ssl_object")
    cert = tls.getpeercert(binary_form=True) if tls is not None else None
    presented = certificate_sha256(cert) if cert else "(none)"
    if not hmac.compare_digest(presented, sha256):
        writer.close()  # before the browser is answered: its logon is never sent here
        why = (
            f"at {address}:{port} it presented a certificate of SHA-256 {presented}, its "
            f"SessionHost publishes {sha256}"
        )
        return not_trusted(host, why)
    return reader, writer, confirm, (cert,) if cert else ()
