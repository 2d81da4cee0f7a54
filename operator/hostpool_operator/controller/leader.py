"""Leader election on a coordination.k8s.io Lease: only one instance ever places requests.

Two instances with their own in-memory view could each fill the last slot of a host. So an
instance writes nothing until it holds the Lease (a standby meanwhile keeps its view current
from its watches, see ``handlers``) and renews it every ``retry_period`` seconds, on the
version it wrote last (one request; a conflict sends it back to read the Lease). It writes
only while a renewal sent within ``renew_deadline`` has succeeded; a renewal answered later
than that pauses its writes until one succeeds, and once none has within the whole
``lease_duration`` the process stops (it exits, to be restarted as a standby). A late answer
from a loaded API server thus costs a pause, not a change of leader. Expiry is judged the
way client-go judges it: by how long the Lease has gone *unchanged as observed locally*,
never by comparing another machine's clock.

Why the defaults (4 s / 3 s / 0.5 s) are safe: a standby takes the Lease only after it has
seen the same version for ``lease_duration`` on its own clock, counted from when *it* saw
that version (after the write that made it had been applied). The leader counts its
``renew_deadline`` from *before* it sent the renewal that made that version. So the leader's
right to write ends at least ``lease_duration - renew_deadline`` (1 s) before a standby can
take over, whatever the clocks of the two machines say (only their rates matter) and however
slow the API server is (latency only shortens the leader's window). Every write the leader
sends is gated on that deadline just before it is sent (``may_write``), so a leader that was
paused (SIGSTOP, a stalled VM, a long pause of its loop) or cut off past its deadline sends
nothing when it runs again; the 1 s is the margin for a write between that check and the
wire. The clock is CLOCK_BOOTTIME where there is one: it keeps counting while the machine
is suspended. The leader renews from a thread of its own (``keep_in_thread``), so a storm
that keeps its main loop busy does not delay the renewal past the deadline.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError
from .settings import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD

log = logging.getLogger(__name__)

#: How often a write held by a late renewal looks again (see ``LeaderElector.writable``).
WRITE_WAIT_STEP = 0.05

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


_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def clock() -> float:
    """Seconds on a clock that never goes back and counts while the machine is suspended."""
    return time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()


def renew_deadline_for(lease_duration: float) -> float:
    """The renew deadline of a Lease duration: a quarter of it (at least 1 s) before it."""
    return max(lease_duration - max(1.0, lease_duration / 4), lease_duration / 2)


def retry_period_for(lease_duration: float) -> float:
    """How often the Lease is renewed (and looked at by a standby)."""
    return min(RETRY_PERIOD, lease_duration / 8)


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
        lease_duration: float = LEASE_DURATION,
        renew_deadline: float = RENEW_DEADLINE,
        retry_period: float = RETRY_PERIOD,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.holder = holder or identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        #: Set once leadership cannot be proven any more (from the renewal's thread).
        self.lost = threading.Event()
        self._stopping = threading.Event()
        self._keeper: threading.Thread | None = None
        #: Another holder's Lease as this instance last saw it change, and when (clock()).
        self._observed: tuple[dict[str, Any], float] | None = None
        #: When the last successful acquire or renewal was *sent* (clock()); None: not held.
        self._renewed: float | None = None
        #: The Lease as this instance last wrote it (the fast path's base); None: read first.
        self._held: dict[str, Any] | None = None
        #: Told the seconds the writes were paused whenever a renewal succeeded past the
        #: renew deadline (called from the renewal's thread).
        self.on_late_renewal: Callable[[float], None] | None = None

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

    async def _try(self, client: KubeClient | None = None) -> bool:
        """One attempt to acquire or renew (through ``client``, by default the elector's).
        True when this instance holds the Lease."""
        client = client or self.client
        sent = clock()
        if self._held is not None and self._renewed is not None:
            # The fast path, as client-go's: the holder renews on the version it wrote last,
            # one request instead of a read and a write (on a loaded API server each took over
            # a second). A conflict means the Lease changed since: read it and judge again.
            try:
                self._held = await client.request(
                    "PUT", f"{self._path}/{self.name}", body=self._body(self._held)
                )
            except ApiError as error:
                if not (error.conflict or error.not_found):  # changed or deleted: read it
                    raise
                self._held = None
            else:
                self._renewed = sent
                return True
            sent = clock()
        if self.expired_as_seen():
            # A standby wakes the moment the Lease it saw has gone unchanged for its
            # duration and takes it on that very version, without reading it again: a
            # renewal since then makes the write conflict.
            assert self._observed is not None
            return await self._take(client, self._observed[0], sent)
        try:
            lease = await client.request("GET", f"{self._path}/{self.name}")
        except ApiError as error:
            if not error.not_found:
                raise
            try:
                self._held = await client.request("POST", self._path, body=self._body(None))
            except ApiError as again:
                if again.conflict:  # someone else created it first
                    return False
                raise
            self._renewed = sent
            return True
        holder = (lease.get("spec") or {}).get("holderIdentity")
        if holder != self.holder:
            version = lease["metadata"]["resourceVersion"]
            if self._observed is None or self._observed[0]["metadata"]["resourceVersion"] != (
                version
            ):
                self._observed = (lease, clock())
            if holder and not self.expired_as_seen():
                return False  # held by another instance that is still renewing
        return await self._take(client, lease, sent)

    async def _take(self, client: KubeClient, lease: dict[str, Any], sent: float) -> bool:
        """Write the Lease as this instance's on ``lease``'s version (acquire, renew or take
        over). False when it changed since."""
        try:
            self._held = await client.request(
                "PUT", f"{self._path}/{self.name}", body=self._body(lease)
            )
        except ApiError as error:
            self._observed = None  # changed or gone: read it again before judging it
            if error.conflict:
                return False
            raise
        self._observed = None
        self._renewed = sent
        return True

    def _seen_expiry(self) -> float | None:
        """When (clock()) the other holder's Lease, as last seen, expires on this instance's
        clock: its duration after this instance first saw that version (None: none seen)."""
        if self._observed is None:
            return None
        lease, seen_at = self._observed
        return seen_at + float((lease.get("spec") or {}).get("leaseDurationSeconds") or 15)

    def expired_as_seen(self) -> bool:
        """The other holder's Lease, as last seen, has gone unchanged for its duration."""
        expiry = self._seen_expiry()
        return expiry is not None and clock() >= expiry

    def next_look(self) -> float:
        """Seconds until a standby looks again: every half ``retry_period`` (a fresher sight
        of the last renewal is an earlier take-over), and at the moment the Lease it saw
        expires."""
        wait = self.retry_period / 2
        expiry = self._seen_expiry()
        if expiry is not None:
            wait = min(wait, max(0.0, expiry - clock()))
        return wait

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
                log.info(
                    "leader election: another instance leads; "
                    "waiting as a standby (watching, writing nothing)"
                )
                announced = True
            await asyncio.sleep(self.next_look() if held_elsewhere else self.retry_period)

    def overdue(self) -> bool:
        """No renewal sent within ``renew_deadline`` succeeded: leadership cannot be proven
        now, whatever the renewal task is doing (failing, or waiting on a slow answer)."""
        return self._renewed is None or clock() - self._renewed >= self.renew_deadline

    def stalled(self) -> bool:
        """No renewal sent within the whole ``lease_duration`` succeeded: a standby may hold
        the Lease by now, and a renewal still in flight is not worth waiting for."""
        return self._renewed is None or clock() - self._renewed >= self.lease_duration

    def may_write(self) -> bool:
        """This instance holds the Lease and its last renewal was sent within the renew
        deadline: the client's write gate (see the module)."""
        return not self.lost.is_set() and not self.overdue()

    async def writable(self) -> bool:
        """Wait out a renewal that is late but not stalled, then judge again: a slow answer
        from a loaded API server pauses the writes instead of ending the leadership. Nothing
        is sent meanwhile; a renewal that succeeds proves nobody took the Lease in between
        (it is written on the version this instance wrote last)."""
        while not self.may_write():
            if self.lost.is_set() or self.stalled():
                return False
            await asyncio.sleep(WRITE_WAIT_STEP)
        return True

    async def keep(self, client: KubeClient | None = None) -> None:
        """Renew until leadership cannot be proven any more (then set ``lost``), or until
        :meth:`stop_keeping`."""
        while not self._stopping.is_set():
            await asyncio.sleep(self.retry_period)
            if self._stopping.is_set():
                return
            before = self._renewed
            try:
                if await self._try(client):
                    self._late(before)
                    continue
                log.error("leader election: another instance took lease %s", self.name)
            except (ApiError, ApiTransportError) as error:
                if not self.stalled():
                    log.warning("leader election: renewal failed (%s); retrying", error)
                    continue
                log.error(
                    "leader election: could not renew within %.1fs: %s", self.lease_duration, error
                )
            self._renewed = None
            self._held = None
            self.lost.set()
            return

    def _late(self, before: float | None) -> None:
        """A renewal just succeeded: if it came past the renew deadline of the one before
        (``before``, when that was sent), the writes were paused meanwhile. Say for how
        long: a loaded API server shows here before it costs the leadership."""
        if before is None:
            return
        paused = clock() - (before + self.renew_deadline)
        if paused <= 0:
            return
        log.warning(
            "leader election: a renewal succeeded %.2fs past the renew deadline (%.1fs); "
            "writes were paused meanwhile",
            paused,
            self.renew_deadline,
        )
        if self.on_late_renewal is not None:
            self.on_late_renewal(paused)

    def keep_in_thread(self, make_client: Callable[[], KubeClient]) -> threading.Thread:
        """Renew in a thread of its own, with an event loop and an API client of its own
        (``make_client()``, made in that loop): a leader's loop busy with a storm at 100,000
        sessions answered the renewal too late (over 3 s) on a loaded machine, and the
        renewals queued behind its own writes. The thread only needs the GIL now and then."""

        async def renew() -> None:
            client = make_client()
            try:
                await self.keep(client)
            finally:
                await client.close()

        def run() -> None:
            try:
                asyncio.run(renew())
            except Exception:
                log.exception("leader election: the renewal failed")

        thread = threading.Thread(target=run, name="lease-renewal", daemon=True)
        self._keeper = thread
        thread.start()
        return thread

    async def stop_keeping(self, timeout: float = 2.0) -> None:
        """Stop renewing (before :meth:`release`: a renewal after it would take the Lease
        back). A renewal stuck on a request is left behind (its thread is a daemon)."""
        self._stopping.set()
        keeper = self._keeper
        if keeper is not None and keeper.is_alive():
            await asyncio.to_thread(keeper.join, timeout)

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown, so a standby takes over at once (at its next
        look, within ``retry_period``). Nothing is written by this instance after it."""
        self._renewed = None
        self._held = None
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
