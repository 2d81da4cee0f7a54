"""The only code that talks to the Kubernetes API (besides kopf's own watching).

A small asynchronous client on aiohttp (which kopf already uses): it logs in the way kopf
does (kubeconfig or in-cluster service account), keeps one connection pool, and speaks JSON
for the handful of calls the operator makes. Status writes are merge patches that carry
``metadata.resourceVersion``, so the API server applies them only to the version the
decision was made on (409 Conflict otherwise): a stale view can never overwrite another
decision.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import aiohttp
import kopf

from .api import GROUP, VERSION

log = logging.getLogger(__name__)

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404


def _ssl_context(info: kopf.ConnectionInfo) -> ssl.SSLContext | bool:
    if not info.server.startswith("https"):
        return False
    context = ssl.create_default_context()
    if info.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if info.ca_path:
        context.load_verify_locations(cafile=info.ca_path)
    elif info.ca_data:
        data = info.ca_data
        text = data.decode() if isinstance(data, bytes) else data
        if "-----BEGIN" not in text:
            text = base64.b64decode(text).decode()
        context.load_verify_locations(cadata=text)
    cert, key = info.certificate_path, info.private_key_path
    if info.certificate_data and info.private_key_data:
        # ssl wants files for client certificates; they live only as long as the loading.
        with (
            tempfile.NamedTemporaryFile("wb") as cert_file,
            tempfile.NamedTemporaryFile("wb") as key_file,
        ):
            for target, data in (
                (cert_file, info.certificate_data),
                (key_file, info.private_key_data),
            ):
                raw = data.encode() if isinstance(data, str) else data
                if b"-----BEGIN" not in raw:
                    raw = base64.b64decode(raw)
                target.write(raw)
                target.flush()
            context.load_cert_chain(cert_file.name, key_file.name)
    elif cert and key:
        context.load_cert_chain(cert, key)
    return context


def login(settings: kopf.OperatorSettings | None = None) -> kopf.ConnectionInfo:
    """Credentials as kopf finds them: in-cluster service account, else the kubeconfig."""
    settings = settings or kopf.OperatorSettings()
    info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(
        settings=settings
    )
    if info is None:
        raise kopf.LoginError("no in-cluster service account and no usable kubeconfig found")
    return info


class KubeClient:
    """A minimal asynchronous Kubernetes API client for hostpool.io objects and Events."""

    def __init__(self, info: kopf.ConnectionInfo, *, max_connections: int = 64) -> None:
        self._info = info
        self._server = info.server.rstrip("/")
        headers = {"Accept": "application/json", "User-Agent": "hostpool-operator"}
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        elif info.username and info.password:
            raw = f"{info.username}:{info.password}".encode()
            headers["Authorization"] = f"Basic {base64.b64encode(raw).decode()}"
        self._headers = headers
        self._ssl = _ssl_context(info)
        self._limit = max_connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl, limit=self._limit)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=60),
                json_serialize=json.dumps,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else None
        async with self._http().request(
            method, self._server + path, data=data, params=params, headers=headers
        ) as response:
            text = await response.text()
            if response.status >= 400:
                try:
                    status = json.loads(text)
                    message = status.get("message", text)
                    reason = status.get("reason", response.reason or "")
                except ValueError:
                    message, reason = text, response.reason or ""
                raise ApiError(response.status, reason, message)
            parsed: JSON = json.loads(text) if text else {}
            return parsed

    # ------------------------------------------------------------------ hostpool.io

    @staticmethod
    def path(plural: str, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{GROUP}/{VERSION}"
        if namespace is not None:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{plural}"
        if name is not None:
            base += f"/{quote(name)}"
        return base

    async def list(self, plural: str, namespace: str | None = None) -> JSON:
        """Every object of a kind (paged), with the list's resourceVersion."""
        items: list[JSON] = []
        params: dict[str, str] = {"limit": "500"}
        while True:
            page = await self.request("GET", self.path(plural, namespace), params=params)
            items.extend(page.get("items", []))
            token = page.get("metadata", {}).get("continue")
            if not token:
                return {"items": items, "resourceVersion": page["metadata"].get("resourceVersion")}
            params = {"limit": "500", "continue": token}

    async def get(self, plural: str, namespace: str, name: str) -> JSON:
        return await self.request("GET", self.path(plural, namespace, name))

    async def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> JSON:
        """Merge-patch ``status``; with a resourceVersion, only onto exactly that version."""
        body: JSON = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self.request(
            "PATCH",
            self.path(plural, namespace, name) + "/status",
            body=body,
            content_type=MERGE_PATCH,
        )

    async def create(self, plural: str, namespace: str, body: Mapping[str, Any]) -> JSON:
        return await self.request("POST", self.path(plural, namespace), body=body)

    async def delete(
        self, plural: str, namespace: str, name: str, *, uid: str | None = None
    ) -> JSON:
        """Delete; with a uid, only that incarnation of the object (never a namesake)."""
        body: JSON = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        return await self.request("DELETE", self.path(plural, namespace, name), body=body)

    # ------------------------------------------------------------------ Events

    async def post_event(
        self,
        involved: Mapping[str, Any],
        *,
        kind: str,
        reason: str,
        message: str,
        type_: str = "Normal",
    ) -> None:
        """Record a core/v1 Event about an object. Failures are logged, never raised."""
        meta = involved.get("metadata", {})
        namespace = meta.get("namespace", "default")
        now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{meta.get('name', 'hostpool')}.",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": kind,
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": "hostpool-operator"},
            "reportingComponent": "hostpool-operator",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.request("POST", f"/api/v1/namespaces/{quote(namespace)}/events", body=event)
        except (TimeoutError, ApiError, aiohttp.ClientError) as error:
            log.warning("could not post event %s on %s: %s", reason, meta.get("name"), error)
