"""A connect, decided: which request it goes to, and what the caller is answered.

The broker looks up the pool and the caller's requests in its caches and asks ``decide``
what to do; once the request has a state worth answering (or the wait is over) it asks
``answer`` what to say. A user learns nothing about pools they may not use: a pool that is
not there and one they are not entitled to get the same 404."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ..api import PersonalAssignment, Phase, PoolType, PowerState, Reason
from .names import request_name
from .rdp import RdpValueError, rdp_file
from .views import HostView, PoolView, RequestView

#: Seconds a client is told to wait before connecting again, by why it waits.
RETRY_AFTER: dict[str, int] = {
    Reason.POOL_SATURATED: 10,
    Reason.NO_ELIGIBLE_HOST: 10,
    Reason.HOSTS_STARTING: 5,
    Reason.HOST_LOST: 1,
    "SessionEnding": 2,
    "HostAddressUnknown": 5,
    # Someone must correct the host or the pool first: come back much later.
    "HostAddressInvalid": 60,
    "PoolConnectionInvalid": 60,
}
DEFAULT_RETRY_AFTER = 2


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling, by the token: never by the body."""

    user: str
    groups: frozenset[str]
    #: The uid a token's claim names (``--uid-claim``; None: none, the broker allocates one).
    uid: int | None = None


@dataclass(frozen=True, slots=True)
class NotFound:
    """The pool is not there, or the caller is not entitled to it."""


@dataclass(frozen=True, slots=True)
class Reuse:
    """The caller has a live request in the pool: the connect continues with it."""

    request: RequestView


@dataclass(frozen=True, slots=True)
class Create:
    """Create the caller's request ``name``; first delete ``replaces`` (a failed one of
    that name) when given."""

    name: str
    replaces: RequestView | None = None


@dataclass(frozen=True, slots=True)
class Ending:
    """The caller's session there is ending (logoff or deletion under way): come back."""

    request: RequestView


Decision = NotFound | Reuse | Create | Ending


def entitled(pool: PoolView | None, caller: Caller) -> PoolView | None:
    """The pool when it is there and ``caller`` is entitled to it; else None, and the caller
    is told it is not found (nobody learns which pools exist that they may not use)."""
    if pool is None or not pool.admits(caller.user, caller.groups):
        return None
    return pool


def decide(
    namespace: str, pool_name: str, pool: PoolView | None, caller: Caller, mine: list[RequestView]
) -> Decision:
    """What a connect of ``caller`` to ``namespace/pool_name`` does, given the pool (None:
    not there) and the caller's requests in that pool (``mine``)."""
    if entitled(pool, caller) is None:
        return NotFound()
    live = [r for r in mine if r.live]
    if live:
        # More than one only when someone made requests by hand: the placed one wins.
        live.sort(key=lambda r: (r.phase is not Phase.ASSIGNED, r.name))
        return Reuse(live[0])
    name = request_name(namespace, pool_name, caller.user)
    own = next((r for r in mine if r.name == name), None)
    if own is None:
        return Create(name)
    if own.deleting or own.phase is not Phase.FAILED:
        return Ending(own)  # going, or a logoff the host's agent carries out
    # Failed: replaced by a new one, also when it carries a logoff (nobody carries that
    # out: the agent acts on Assigned requests only, and the session is over anyway).
    return Create(name, replaces=own)


#: How a session is ended: its host's agent logs the user off, or the request is deleted.
EndBy = Literal["logoff", "delete"]


def end_by(
    request: RequestView, host: HostView | None, now: datetime, stale_after: float
) -> EndBy | None:
    """How ending the caller's session ends ``request`` (None: it needs nothing more).

    A logoff only where the request's host has an agent that reports now (figures no
    older than ``stale_after`` seconds, the operator's ``--metrics-stale-after``): an agent
    that went silent never carries it out. Otherwise the request is deleted: a failed one,
    one whose logoff nobody is carrying out, one not placed, or one on a host with no
    (live) agent. One being deleted, or being logged off by a live agent, is left alone."""
    if request.deleting:
        return None
    alive = host is not None and host.agent_alive(now, stale_after)
    if request.phase is Phase.FAILED:
        return "delete"
    if request.logoff:
        return None if alive else "delete"
    if alive and request.phase is Phase.ASSIGNED and request.host:
        return "logoff"
    return "delete"


def _placed_first(request: RequestView) -> tuple[bool, str]:
    return request.phase is not Phase.ASSIGNED, request.name


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: status, JSON body, Retry-After, and the reason for the metrics."""

    status: int
    reason: str
    body: dict[str, Any]
    retry_after: int | None = None
    rdp: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def error(status: int, reason: str, message: str, retry_after: int | None = None) -> Answer:
    return Answer(status, reason, {"reason": reason, "message": message}, retry_after)


def not_found(namespace: str, pool_name: str) -> Answer:
    return error(404, "PoolNotFound", f"no pool {namespace}/{pool_name} you may connect to")


def answer(request: RequestView, pool: PoolView, caller: Caller, *, reused: bool) -> Answer:
    """The answer for ``request`` as it stands: 200 with the connection once it is placed,
    202 (with how long to wait) while it is not; ``reused``: it existed before this connect,
    so a placed one is a reconnect."""
    if request.phase is Phase.ASSIGNED and request.host:
        if not request.address:
            return error(
                503,
                "HostAddressUnknown",
                f"host {request.host} has no address yet",
                RETRY_AFTER["HostAddressUnknown"],
            )
        reason = (
            Reason.RECONNECTED
            if reused or request.reason is Reason.RECONNECTED
            else Reason.NEW_SESSION
        )
        try:
            rdp = rdp_file(request.address, caller.user, pool.connection)
        except RdpValueError as refused:
            return _unwritable(request, refused)
        body = {
            "request": request.name,
            "host": request.host,
            "address": request.address,
            "port": pool.connection.port,
            "protocol": str(pool.connection.protocol),
            "reason": str(reason),
            "rdpFile": rdp,
        }
        if request.connect_ref:
            body["connect"] = request.connect_ref
        return Answer(200, str(reason), body, rdp=rdp)
    if request.ending:
        return waiting(request, "SessionEnding")
    return waiting(request, str(request.reason) if request.reason else "Pending")


def _unwritable(request: RequestView, refused: RdpValueError) -> Answer:
    """The answer when the .rdp file cannot be written as it stands: no file, a reason; the
    bad value itself is never repeated to the caller (it may be anyone's)."""
    if refused.field == "username":
        return error(
            400,
            "UserNameInvalid",
            "your user name holds a control character and cannot go into a connection file",
        )
    if refused.field == "address":
        reason, message = (
            "HostAddressInvalid",
            f"host {request.host} has an address that is not an IP address or a DNS name; "
            "an administrator must correct it",
        )
    else:
        reason, message = (
            "PoolConnectionInvalid",
            f"the pool's connection settings ({refused.field}) cannot go into a connection "
            "file; an administrator must correct them",
        )
    return error(503, reason, message, RETRY_AFTER[reason])


def waiting(request: RequestView, reason: str) -> Answer:
    retry = RETRY_AFTER.get(reason, DEFAULT_RETRY_AFTER)
    phase = str(request.phase) if request.phase else str(Phase.PENDING)
    body = {"request": request.name, "phase": phase, "reason": reason}
    if request.connect_ref:
        body["connect"] = request.connect_ref
    return Answer(202, reason, body, retry)


def placed_or_final(request: RequestView) -> bool:
    """Whether a waiting connect can answer now (placed, failed or ending), rather than
    waiting on for the operator."""
    return request.phase in (Phase.ASSIGNED, Phase.FAILED) or request.ending


def pool_entry(
    pool: PoolView,
    mine: list[RequestView],
    desktop: HostView | None = None,
    *,
    web_served: bool = True,
) -> dict[str, Any]:
    """One pool in ``GET /v1/pools``: whether a new session fits now, and the caller's; in
    a personal pool, the caller's desktop (``desktop``, their assigned host) and its power.
    ``web`` only where the broker also serves the browser's client (``web_served``): a page
    never offers a desktop in the browser that would end in a 404."""
    live = [r for r in mine if r.live]
    session = None
    if live:
        r = min(live, key=_placed_first)
        session = {
            "request": r.name,
            "host": r.host,
            "state": r.session_state or (str(r.phase) if r.phase else str(Phase.PENDING)),
            # A session limit disconnected it on purpose (the desktop page reconnects a
            # dropped connection by itself, never one of these).
            "disconnectRequestedAt": r.disconnect_requested_at,
        }
    entry = {
        "namespace": pool.namespace,
        "name": pool.name,
        "loadBalancerType": str(pool.load_balancer_type),
        "available": bool(pool.free),
        "session": session,
        "displayName": pool.display_name or pool.name,
        "web": pool.connection.web and web_served,
        # The broker signs the caller on: a connect answers a one-time password too.
        "singleSignOn": pool.connection.single_sign_on,
        # No free slot now, but hosts are on their way: a connect waits for one.
        "hostsStarting": not pool.free and pool.hosts_starting,
        "type": str(PoolType.PERSONAL if pool.personal else PoolType.POOLED),
    }
    if pool.personal is not None:
        entry.update(_personal_entry(pool.personal, desktop))
    return entry


def _personal_entry(assignment: PersonalAssignment, desktop: HostView | None) -> dict[str, Any]:
    """A personal pool's availability is the caller's own desktop's: running, starting or
    stopped (a connect starts it); without one, Automatic makes one at the first connect."""
    if desktop is None:
        return {
            "assignment": str(assignment),
            "desktop": None,
            "available": False,
            "hostsStarting": False,
        }
    power = desktop.power or str(PowerState.RUNNING)
    return {
        "assignment": str(assignment),
        "desktop": {"host": desktop.name, "power": power},
        "available": power == PowerState.RUNNING,
        "hostsStarting": power == PowerState.STARTING,
    }


__all__ = [
    "Answer",
    "Caller",
    "Create",
    "Decision",
    "EndBy",
    "Ending",
    "NotFound",
    "Reuse",
    "answer",
    "decide",
    "end_by",
    "error",
    "not_found",
    "placed_or_final",
    "pool_entry",
    "waiting",
]
