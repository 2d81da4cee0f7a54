"""The broker's public logon key, published where the hosts can mount it.

Helm can make an Ed25519 key but not derive its public half, and an administrator should
never have to copy keys by hand: the broker, which holds the private key, writes the public
half into a ConfigMap (``keys.pem``) in each namespace it serves; the session hosts mount
that ConfigMap and their verifier trusts what it holds. A new key (rotation) is put first and
the one before it kept (``credential.trusted_pem``), so credentials a replica still on the
old key minted keep working until every replica has the new one. Each write is conditional
on the version read: two replicas publishing at once never drop each other's key.

The ConfigMap is checked again now and then, so one deleted by mistake comes back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from ..kube.backoff import Backoff
from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError
from ..logon import credential

log = logging.getLogger(__name__)

CONFIGMAPS = "configmaps"
KEY = "keys.pem"
LABEL = "hostpool.io/logon-keys"
#: How often a published ConfigMap is checked again (seconds).
RECHECK = 300.0


class LogonKeyPublisher:
    """Publishes one public key as ``name`` in each of ``namespaces``."""

    def __init__(
        self, client: KubeClient, namespaces: Sequence[str], name: str, public_pem: bytes
    ) -> None:
        self.client = client
        self.namespaces = tuple(namespaces)
        self.name = name
        self.public_pem = public_pem

    async def run(self) -> None:
        """Publish, retrying with back-off while the API server refuses or is away, then
        check again every :data:`RECHECK` seconds."""
        backoff = Backoff(first=1.0, cap=60.0)
        while True:
            try:
                for namespace in self.namespaces:
                    await self.publish(namespace)
            except (ApiError, ApiTransportError) as exc:
                wait = backoff.next()
                log.warning(
                    "cannot publish the logon public key as ConfigMap %s: %s; again in %.0fs",
                    self.name,
                    exc.message if isinstance(exc, ApiError) else exc,
                    wait,
                )
                await asyncio.sleep(wait)
                continue
            backoff = Backoff(first=1.0, cap=60.0)
            await asyncio.sleep(RECHECK)

    async def publish(self, namespace: str) -> bool:
        """Make the ConfigMap in ``namespace`` trust this key; whether it had to change."""
        while True:
            try:
                existing = await self.client.get(CONFIGMAPS, namespace, self.name, api_version="v1")
            except ApiError as exc:
                if exc.status != 404:
                    raise
                existing = None
            published = (existing or {}).get("data", {}).get(KEY) if existing else None
            wanted = credential.trusted_pem(self.public_pem, published)
            if published == wanted:
                return False
            try:
                if existing is None:
                    await self.client.create(
                        CONFIGMAPS, namespace, self._body(wanted), api_version="v1"
                    )
                else:
                    await self.client.patch(
                        CONFIGMAPS,
                        namespace,
                        self.name,
                        {"data": {KEY: wanted}},
                        resource_version=existing["metadata"]["resourceVersion"],
                        api_version="v1",
                    )
            except ApiError as exc:
                if exc.status == 409:
                    continue  # another replica wrote first: read again and merge
                raise
            trusted = wanted.count("-----BEGIN PUBLIC KEY-----")
            log.info(
                "published the logon public key as ConfigMap %s/%s (%d key(s) trusted)",
                namespace,
                self.name,
                trusted,
            )
            return True

    def _body(self, pem: str) -> dict[str, object]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": self.name, "labels": {LABEL: "true"}},
            "data": {KEY: pem},
        }
