"""A proxy in front of the API server that cuts chosen requests off, or holds them back
(:class:`CuttingProxy`): what the operator sees when the API server dies mid-request, and a
way to order two writes it has in flight.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import urllib3

from support.identity import kubeconfig_cluster, write_kubeconfig


@dataclass
class HeldRequest:
    """A request :class:`CuttingProxy` holds back until :meth:`CuttingProxy.release`."""

    line: str
    body: bytes
    release: asyncio.Event
    #: Set once the API server's answer has been passed on (or the exchange failed).
    answered: threading.Event = field(default_factory=threading.Event)
    #: The status line of that answer, e.g. ``HTTP/1.1 409 Conflict``.
    answer: str = ""


class CuttingProxy:
    """A TLS-terminating HTTP/1.1 proxy in front of the API server that cuts chosen requests.

    It forwards each request on a fresh upstream connection (``Connection: close``, so one
    request per client connection and responses, watches included, are piped until the
    server closes). A request whose method and path match :attr:`match` while :attr:`budget`
    is positive is cut: with ``mode == "before"`` the client connection is dropped without
    forwarding (the write never happens), with ``"after"`` the request is forwarded, the
    response read and thrown away, and then the connection is dropped (the write happened,
    the client never learns it). ``how`` is ``"close"`` (TLS close and FIN: aiohttp raises
    ServerDisconnectedError) or ``"reset"`` (RST: ConnectionResetError). Either way the
    client gets no response, as when the API server dies mid-request.

    Requests whose request line matches :meth:`hold`'s pattern wait in :attr:`held` until
    :meth:`release`: that orders two writes the operator has in flight at once.

    Its own self-signed certificate (openssl) is the CA of :meth:`kubeconfig`; the bearer
    token passes through, so it works in front of any cluster."""

    def __init__(self, admin_kubeconfig: Path, directory: Path) -> None:
        cluster = kubeconfig_cluster(admin_kubeconfig)
        self.upstream = urllib3.util.parse_url(cluster["server"])
        self.upstream_ssl = ssl.create_default_context()
        if cluster.get("certificate-authority-data"):
            self.upstream_ssl.load_verify_locations(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
            )
        elif cluster.get("certificate-authority"):
            self.upstream_ssl.load_verify_locations(cafile=cluster["certificate-authority"])
        if cluster.get("insecure-skip-tls-verify"):
            self.upstream_ssl.check_hostname = False
            self.upstream_ssl.verify_mode = ssl.CERT_NONE
        self.directory = directory
        self.cert = directory / "proxy.crt"
        key = directory / "proxy.key"
        proc = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(key), "-out", str(self.cert), "-days", "1",
             "-subj", "/CN=fault-proxy", "-addext", "subjectAltName=IP:127.0.0.1"],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"openssl failed: {proc.stderr}")
        self.server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.server_ssl.load_cert_chain(str(self.cert), str(key))
        self.match = re.compile(r"^PUT /apis/hostpool\.io/v1alpha1/namespaces/[^/]+/"
                                r"sessionrequests/[^/? ]+/status[? ]")  # fmt: skip
        self.mode = "before"
        self.how = "close"
        self.budget = 0
        self.cut: list[str] = []
        self.hold_match: re.Pattern[str] | None = None
        self.held: list[HeldRequest] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(timeout=30)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.server_ssl)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def arm(self, mode: str, budget: int, how: str = "close") -> None:
        """Cut the next ``budget`` matching requests (``mode``: "before" or "after"; ``how``:
        "close" or "reset")."""
        with self._lock:
            self.mode, self.budget, self.how = mode, budget, how

    def hold(self, pattern: str | None) -> None:
        """Hold back the requests whose request line matches ``pattern`` from now on (None:
        stop holding new ones; those held stay held until released)."""
        with self._lock:
            self.hold_match = re.compile(pattern) if pattern else None

    def release(self, held: HeldRequest) -> None:
        """Forward a held request."""
        self._loop.call_soon_threadsafe(held.release.set)

    def _hold(self, request_line: str, body: bytes) -> HeldRequest | None:
        with self._lock:
            if self.hold_match is None or not self.hold_match.search(request_line):
                return None
            held = HeldRequest(request_line, body, asyncio.Event())
            self.held.append(held)
            return held

    async def _cut(self, writer: asyncio.StreamWriter) -> None:
        if self.how == "reset":
            writer.transport.abort()
            return
        writer.close()
        with contextlib.suppress(ConnectionError, OSError, ssl.SSLError):
            await writer.wait_closed()

    def _take(self, request_line: str) -> str | None:
        with self._lock:
            if self.budget > 0 and self.match.search(request_line):
                self.budget -= 1
                self.cut.append(request_line)
                return self.mode
        return None

    def kubeconfig(self, token: str, path: Path, namespace: str) -> Path:
        """A kubeconfig to the API server through this proxy, with ``token``."""
        ca = base64.b64encode(self.cert.read_bytes()).decode()
        cluster = {"server": f"https://127.0.0.1:{self.port}", "certificate-authority-data": ca}
        return write_kubeconfig(path, cluster, token, namespace=namespace)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        held: HeldRequest | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            request_line = lines[0]
            headers = [h for h in lines[1:] if h]
            length = 0
            for h in headers:
                name, _, value = h.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            body = await reader.readexactly(length) if length else b""
            held = self._hold(request_line, body)
            if held is not None:
                await held.release.wait()
            cut = self._take(request_line)
            if cut == "before":
                await self._cut(writer)
                return
            kept = [
                h
                for h in headers
                if h.partition(":")[0].strip().lower() not in ("connection", "keep-alive")
            ]
            out = "\r\n".join([request_line, *kept, "Connection: close", "", ""]).encode("latin-1")
            up_reader, upstream = await asyncio.open_connection(
                self.upstream.host, self.upstream.port or 443, ssl=self.upstream_ssl
            )
            upstream.write(out + body)
            await upstream.drain()
            if cut == "after":
                while await up_reader.read(65536):
                    pass
                await self._cut(writer)
                return
            while chunk := await up_reader.read(65536):
                if held is not None and not held.answer:
                    held.answer = chunk.split(b"\r\n", 1)[0].decode("latin-1")
                writer.write(chunk)
                await writer.drain()
            writer.close()
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ssl.SSLError):
            writer.transport.abort()
        except asyncio.CancelledError:  # the proxy stops: end quietly (no re-raise, see
            writer.transport.abort()  # asyncio's connection_made callback in 3.11)
        finally:
            if upstream is not None:
                upstream.transport.abort()
            if held is not None:
                held.answered.set()
