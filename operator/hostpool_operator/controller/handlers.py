"""kopf wiring: the operator's process around the controller.

kopf runs the operator: authentication, start-up and clean-up, signal handling and the
liveness probe. It watches nothing: every kind (HostPools, SessionHosts, SessionRequests,
ScalingPlans, workloads) is watched by the controller's own informers
(``kube.informer.Informer``), so one relist, skip and metric behaviour holds for all of
them. kopf's per-event processing (a per-object worker, a deep-copied diff base, a logger and
a patch object per event) cost about 3 ms of CPU per event in a profiled logon storm, several
times the placement itself. No finalizer and no kopf annotation is ever put on an object: the
operator's one write per assignment is the status the controller writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf

from ..kube.auth import login, token_file
from ..kube.client import KubeClient
from ..kube.program import connect
from ..kube.sinks import MetricsSink
from .leader import (
    LeaderElector,
    LeaseForbiddenError,
    default_namespace,
    renew_deadline_for,
    retry_period_for,
)
from .manager import Controller
from .settings import ControllerSettings, LeaseSettings

LEASE = LeaseSettings()

registry = kopf.OperatorRegistry()
#: Allocations between two young-generation collections (CPython's default is 700).
GC_YOUNG_THRESHOLD = 10_000

log = logging.getLogger(__name__)

#: A re-login this soon after the previous one, with the token file unchanged, waits up to
#: RELOGIN_WAIT seconds for the file to change (see authenticate).
RELOGIN_WAIT = 5.0


class Runtime(kopf.Memo):
    """What the handlers share: the operator's options, then its client and controller."""

    namespaces: list[str]
    settings: ControllerSettings
    metrics: MetricsSink
    #: None: no leader election (a single instance is guaranteed).
    lease: LeaseSettings | None
    stop: asyncio.Event
    exit_code: int
    #: starting, standby (synced, writing nothing), leader, or lost (the process stops).
    role: str
    client: KubeClient
    lease_client: Callable[[], KubeClient]
    controller: Controller
    elector: LeaderElector
    #: Seeks the Lease, then renews it (see _lead).
    leading: asyncio.Task[None]


class _Logins:
    """What kopf's login handler handed out last, and when."""

    token: str | None = None
    at = float("-inf")


@kopf.on.login(registry=registry)
async def authenticate(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo | None:
    """The same credentials our own client uses: in-cluster first, then the kubeconfig (its
    ``tokenFile`` included), read afresh each time: kopf calls this again after a 401, and
    the token file then holds the rotated token."""
    try:
        info = login(settings)
    except kopf.LoginError:
        return None
    previous, since = _Logins.token, time.monotonic() - _Logins.at
    path = token_file()
    if path is not None and info.token == previous and since < 2 * RELOGIN_WAIT:
        # kopf tried this very token moments ago and got a 401: give whoever rotates the
        # file a moment, rather than kopf sending the same rejected token in a tight loop.
        deadline = time.monotonic() + RELOGIN_WAIT
        while info.token == previous and time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            info = login(settings)
    if previous is not None and info.token != previous:
        log.info("kopf re-login: token file %s re-read, a new token is used", path)
    _Logins.token, _Logins.at = info.token, time.monotonic()
    if path is None:
        return info
    # kopf never takes back credentials equal to ones it has just invalidated: it would stop
    # with "Ran out of valid credentials" if the file still held the old token (a session
    # closed by the server, a rotation not written yet). A distinct, distant expiration makes
    # each login a new item, tried again; it never expires in practice.
    return dataclasses.replace(info, expiration=datetime.now(UTC) + timedelta(days=365))


@kopf.on.startup(registry=registry)
async def startup(settings: kopf.OperatorSettings, memo: Runtime, **_: Any) -> None:
    # No Events for kopf's own log lines (the controller posts its own, rate-limited), and no
    # peering objects: which instance writes is decided by the Lease (see leader.py).
    settings.posting.enabled = False
    settings.peering.standalone = True
    # Three fixed kinds: no CRD or namespace scanning, so no cluster-scoped read permission.
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    # Room for the assignment and status writes in flight (both bounded for all pools) plus
    # watches, Events and the rest. Each connection costs TLS buffers here and a goroutine
    # there: no more than can be used.
    connections = memo.settings.write_concurrency + memo.settings.status_concurrency + 64
    info = login(settings)
    client = connect(info, connections, memo.metrics)
    memo.client = client
    # The Lease's renewal: a client of its own, made in the renewal's thread and loop.
    memo.lease_client = lambda: connect(info, 2, memo.metrics)
    memo.metrics.role("starting")
    controller = Controller(client, memo.settings, memo.metrics)
    memo.controller = controller
    elector = None
    lease = memo.lease
    if lease is not None:
        elector = LeaderElector(
            client,
            lease.namespace or default_namespace(memo.namespaces),
            lease_duration=lease.duration,
            renew_deadline=lease.renew_deadline or renew_deadline_for(lease.duration),
            retry_period=lease.retry_period or retry_period_for(lease.duration),
        )
        elector.on_late_renewal = memo.metrics.renewal_late
        memo.elector = elector
        # Nothing but the Lease is written unless this instance holds it (see leader.py).
        client.write_gate = elector.writable
    # The view is built before the Lease is sought: a standby keeps it current from its
    # watches and takes over without listing anything again.
    await controller.initial_sync(memo.namespaces or None, lead=elector is None)
    # What exists now (modules, kopf's and our own start-up state) lives as long as the
    # process: keep it out of the cyclic collector's scans. A logon storm allocates fast,
    # and each full collection used to walk all of it (up to ~0.1 s with the loop stalled);
    # fewer, larger young-generation collections cost less in total.
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    if elector is None:
        _now_leading(memo, "without leader election")
        return
    memo.role = "standby"
    memo.metrics.role("standby")
    log.info("standby: %d pool(s) synced; seeking the Lease", len(controller.pools))
    memo.leading = asyncio.get_running_loop().create_task(_lead(memo, elector))


def _now_leading(memo: Runtime, how: str) -> None:
    memo.role = "leader"
    memo.metrics.role("leader")
    memo.controller.lead()
    log.info(
        "hostpool-operator started: %d pool(s), watching %s (%s)",
        len(memo.controller.pools),
        ", ".join(memo.namespaces) if memo.namespaces else "all namespaces",
        how,
    )


async def _lead(memo: Runtime, elector: LeaderElector) -> None:
    """Wait as a standby until the Lease is this instance's, then place at once, and stop
    the process when leadership cannot be proven any more."""
    try:
        t0 = time.monotonic()
        await elector.acquire()
        _now_leading(memo, f"leader after {time.monotonic() - t0:.1f}s as a standby")
        await _stop_when_lost(memo, elector)
    except asyncio.CancelledError:
        raise
    except Exception as error:  # forbidden Lease, or a bug: this instance can never lead
        if isinstance(error, LeaseForbiddenError):
            log.critical("%s", error)
        else:
            log.critical("leader election failed", exc_info=error)
        memo.role = "lost"
        memo.metrics.role("stopping")
        memo.exit_code = 1
        memo.stop.set()


@kopf.on.cleanup(registry=registry)
async def cleanup(memo: Runtime, **_: Any) -> None:
    # Release kopf's waiter on our stop flag, or kopf waits 5 s for it as a "hung" task.
    memo.stop.set()
    memo.metrics.role("stopping")
    leading = getattr(memo, "leading", None)
    if leading is not None:
        leading.cancel()
        await asyncio.wait({leading})
    controller = getattr(memo, "controller", None)
    if controller is not None:
        await controller.stop()
    elector = getattr(memo, "elector", None)
    if elector is not None:
        await elector.stop_keeping()
    if elector is not None and memo.role == "leader":
        await elector.release()  # a standby takes over at its next look
    client = getattr(memo, "client", None)
    if client is not None:
        await client.close()


async def _stop_when_lost(memo: Runtime, elector: LeaderElector) -> None:
    """Renew the Lease (in a thread of its own: see ``LeaderElector.keep_in_thread``), and
    stop placing the moment leadership cannot be proven: the Lease was lost, the renewal
    ended (it may have died on an unexpected exception), or no renewal succeeded within the
    renew deadline (a request that never returns). Without the last two, an instance whose
    renewal died would keep placing while a standby takes the expired Lease: two leaders.
    (The client's write gate refuses every write past the deadline in any case; this stops
    the process, to be started again as a standby.)"""
    renewal = elector.keep_in_thread(memo.lease_client)
    why = "the Lease was lost"
    while True:
        await asyncio.sleep(elector.retry_period / 2)
        if elector.lost.is_set():
            break
        if not renewal.is_alive():
            why = "the Lease renewal stopped"
            break
        if elector.stalled():
            why = f"no renewal succeeded within the Lease's {elector.lease_duration:.1f}s"
            break
    await elector.stop_keeping(timeout=0)
    memo.role = "lost"
    memo.metrics.role("stopping")
    log.critical("leadership lost (%s): stopping so that only one instance places requests", why)
    await memo.controller.stop()  # no placement from here on, before kopf's shutdown
    memo.exit_code = 1
    memo.stop.set()


@kopf.on.probe(id="supervision", registry=registry)
async def supervision(memo: Runtime, **_: Any) -> str:
    """The liveness probe: red while a supervised task keeps failing or leadership was lost,
    so the kubelet restarts a process that can no longer place correctly. A standby is
    alive: its watches are supervised like the leader's."""
    problems = []
    if memo.role == "lost":
        problems.append("leadership was lost; the process stops")
    controller = getattr(memo, "controller", None)
    if controller is not None:
        problems.extend(controller.supervisor.problems())
    if problems:
        raise kopf.PermanentError("; ".join(problems))
    return "ok"


@kopf.on.probe(id="role", registry=registry)
async def role(memo: Runtime, **_: Any) -> str:
    """In the liveness probe's answer: leader, standby (synced, writing nothing), starting
    or lost. ``/readyz`` on the metrics address says the same."""
    return memo.role


def run(
    namespaces: list[str],
    settings: ControllerSettings,
    *,
    liveness_endpoint: str | None = None,
    metrics: MetricsSink | None = None,
    lease: LeaseSettings | None = LEASE,
) -> int:
    """Run the operator until it is stopped (SIGINT/SIGTERM, or lost leadership: exit 1).
    With ``lease`` (the default) it is a warm standby until the Lease is its own."""
    import uvloop

    memo = Runtime(
        namespaces=namespaces,
        settings=settings,
        metrics=metrics or MetricsSink(),
        lease=lease,
        stop=asyncio.Event(),
        exit_code=0,
        role="starting",
    )
    coro = kopf.operator(
        registry=registry,
        clusterwide=not namespaces,
        namespaces=namespaces,
        standalone=True,
        liveness_endpoint=liveness_endpoint,
        memo=memo,
        stop_flag=memo.stop,
    )
    uvloop.run(coro)
    return memo.exit_code
