"""The relay's link to the host: TCP, the client's X.224 request, the host's confirm, then
TLS; or the RDCleanPath error PDU the browser is answered with instead."""

from __future__ import annotations

import asyncio
import logging
import ssl

from . import rdcleanpath as rcp

log = logging.getLogger(__name__)

#: Seconds for the host's TCP connect, its X.224 answer and TLS.
SETUP_TIMEOUT = 10.0

HostLink = tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes, tuple[bytes, ...]]


async def open_host(address: str, port: int, x224: bytes) -> HostLink | bytes:
    """TCP to the host, the client's X.224 request, the host's confirm, then TLS with the
    host (its certificate is not checked here: it goes to the client, as RDCleanPath
    intends); or the RDCleanPath error PDU to answer."""
    try:
        async with asyncio.timeout(SETUP_TIMEOUT):
            reader, writer = await asyncio.open_connection(address, port)
    except (OSError, TimeoutError) as exc:
        log.warning("the relay could not reach %s:%d: %s", address, port, exc)
        return rcp.error_response(502)
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
                return rcp.error_response(x224=confirm)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            await writer.start_tls(context)
    except (OSError, TimeoutError, asyncio.IncompleteReadError, rcp.RdCleanPathError) as exc:
        log.warning("the relay's set-up with %s:%d failed: %r", address, port, exc)
        writer.close()
        return rcp.error_response(502)
    tls = writer.get_extra_info("ssl_object")
    cert = tls.getpeercert(binary_form=True) if tls is not None else None
    return reader, writer, confirm, (cert,) if cert else ()
