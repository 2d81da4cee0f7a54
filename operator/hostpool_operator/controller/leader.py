"""Leader election on a coordination.k8s.io Lease: only one instance ever places requests.

Two instances with their own in-memory view could each fill the last slot of a host. So an
instance places nothing until it holds the Lease, renews it every ``retry_period`` seconds, and
stops (the process exits, to be restarted as a standby) as soon as it cannot prove it still
holds it within ``renew_deadline``. Expiry is judged the way client-go judges it: by how long
the Lease has gone *unchanged as observed locally*, never by comparing another machine's
clock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError

log = logging.getLogger(__name__)

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def identity() -> str:
    """Who holds the Lease. In a pod, the pod's name (``POD_NAME``, from the downward API):
    a container restarted in the same pod (after a crash or kill -9) is that pod's only
    process, so it takes its own Lease back at once instead of waiting for it to expire.
    Elsewhere the hostname plus a random suffix: unique even for two processes on one
    machine."""
    pod = os.environ.get("POD_NAME", "").strip()
    return pod or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def default_namespace(watched: list[str]) -> str:
    """The operator's own namespace in a cluster, else the first watched one, else default."""
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    if os.path.exists(path):
        with open(path) as handle:
            return handle.read().strip()
    return watched[0] if watched else "default"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class LeaseForbiddenError(RuntimeError):
    """The identity may not read or write the Lease: it can never lead."""


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str = "hostpool-operator",
        *,
        holder: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.holder = holder or identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.lost = asyncio.Event()
        self._observed: tuple[str, float] | None = None  # (resourceVersion, monotonic time)
        self._renewed = 0.0

    @property
    def _path(self) -> str:
        return LEASES.format(namespace=self.namespace)

    def _body(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        spec = dict((previous or {}).get("spec") or {})
        taking_over = spec.get("holderIdentity") != self.holder
        now = _now()
        spec.update(
            holderIdentity=self.holder,
            leaseDurationSeconds=int(self.lease_duration),
            renewTime=now,
        )
        if taking_over:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if previous else 0
            )
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        if previous is not None:
            body["metadata"]["resourceVersion"] = previous["metadata"]["resourceVersion"]
        return body

    async def _try(self) -> bool:
        """One attempt to acquire or renew. True when this instance holds the Lease."""
        try:
            lease = await self.client.request("GET", f"{self._path}/{self.name}")
        except ApiError as error:
            if not error.not_found:
                raise
            try:
                await self.client.request("POST", self._path, body=self._body(None))
            except ApiError as again:
                if again.conflict:  # someone else created it first
                    return False
                raise
            self._renewed = time.monotonic()
            return True
        holder = (lease.get("spec") or {}).get("holderIdentity")
        version = lease["metadata"]["resourceVersion"]
        if holder != self.holder:
            if self._observed is None or self._observed[0] != version:
                self._observed = (version, time.monotonic())
            duration = float((lease.get("spec") or {}).get("leaseDurationSeconds") or 15)
            if holder and time.monotonic() - self._observed[1] < duration:
                return False  # held by another instance that is still renewing
        try:
            await self.client.request("PUT", f"{self._path}/{self.name}", body=self._body(lease))
        except ApiError as error:
            if error.conflict:
                return False
            raise
        self._renewed = time.monotonic()
        return True

    async def acquire(self) -> None:
        """Wait until this instance is the leader."""
        announced = False
        while True:
            held_elsewhere = False
            try:
                if await self._try():
                    log.info(
                        "leader election: %s holds lease %s/%s",
                        self.holder,
                        self.namespace,
                        self.name,
                    )
                    return
                held_elsewhere = True
            except ApiError as error:
                if error.status in (401, 403):
                    # Not a standby: it can never lead. Say so and stop.
                    raise LeaseForbiddenError(
                        f"leader election: no permission for Lease {self.namespace}/"
                        f"{self.name}: {error.message}"
                    ) from error
                log.warning("leader election: %s", error)
            except ApiTransportError as error:
                log.warning("leader election: %s", error)
            if held_elsewhere and not announced:
                log.info("leader election: another instance leads; waiting as a standby")
                announced = True
            await asyncio.sleep(self.retry_period)

    def overdue(self) -> bool:
        """No renewal succeeded within ``renew_deadline``: leadership cannot be proven, whatever
        the renewal task is doing (failing, or waiting on a request that never returns)."""
        return time.monotonic() - self._renewed >= self.renew_deadline

    async def keep(self) -> None:
        """Renew until leadership cannot be proven any more; then set ``lost``."""
        while True:
            await asyncio.sleep(self.retry_period)
            try:
                if await self._try():
                    continue
                log.error("leader election: another instance took lease %s", self.name)
            except (ApiError, ApiTransportError) as error:
                if time.monotonic() - self._renewed < self.renew_deadline:
                    log.warning("leader election: renewal failed (%s); retrying", error)
                    continue
                log.error(
                    "leader election: could not renew within %.0fs: %s", self.renew_deadline, error
                )
            self.lost.set()
            return

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown, so a standby takes over at once."""
        try:
            lease = await self.client.request("GET", f"{self._path}/{self.name}")
            if (lease.get("spec") or {}).get("holderIdentity") != self.holder:
                return
            body = self._body(lease)
            body["spec"]["holderIdentity"] = None
            body["spec"]["leaseDurationSeconds"] = 1
            await self.client.request("PUT", f"{self._path}/{self.name}", body=body)
        except (ApiError, ApiTransportError) as error:
            log.warning("leader election: could not release the lease: %s", error)
