"""The operator's orders to this host's sessions, carried out: notices shown in the user's
desktop (``status.notice``), disconnects (``status.disconnect``) and forced logoffs
(``status.logoff``, the user told first).

Each order done is marked on the very ask it was (``shownAt``, ``doneAt``), so an agent
started again does not carry it out twice. One that fails is tried again later, later each
time, never in a tight loop; a request whose user could not be logged off is kept, since the
user is still on the host.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..api.timestamps import rfc3339
from ..kube.backoff import Backoff
from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError
from .assigned import REQUESTS, AssignedRequests
from .commands import CommandResult, run_command
from .desktop import X_TIMEOUT, Message, Windows
from .machine import XrdpMachine, server_of
from .options import AgentOptions
from .reports import HostReports
from .sessions import (
    HostRequest,
    LogoffTracker,
    Shown,
    idle_logoff_withdrawn,
    logoff_message,
    notice_message,
    pending_disconnects,
    pending_notices,
)
from .x11 import X11Error

log = logging.getLogger("hostpool_operator.agent")

#: How long a notice's window stays on the screen unless the user closes it (seconds); a
#: forced logoff's stays until its deadline, between these bounds.
NOTICE_SECONDS = 300.0
LOGOFF_NOTICE_SECONDS = (30.0, 3600.0)
#: Tries of a marking write (doneAt, shownAt) that meets a newer version of the request.
MARK_TRIES = 3


@dataclass
class SessionOrders:
    """One host's orders to its sessions, and what it remembers of those that failed."""

    client: KubeClient
    options: AgentOptions
    requests: AssignedRequests
    reports: HostReports
    xrdp: XrdpMachine
    logoffs: LogoffTracker = field(default_factory=LogoffTracker)
    windows: Windows = field(default_factory=lambda: Windows(threading.Event()))
    #: Notices and disconnects that could not be carried out: (kind, request uid) -> the
    #: back-off and when the next try is due.
    _retry: dict[tuple[str, str], tuple[Backoff, float]] = field(default_factory=dict)
    #: Forced logoffs that failed (the command, or the delete after it), by request uid: the
    #: back-off and when the next try is due. A failing logoff is tried again later, never
    #: in a tight loop, and its request is kept while the user is still on the host.
    _logoff_retry: dict[str, tuple[Backoff, float]] = field(default_factory=dict)
    #: Request uids whose user the logoff command did log off (only the delete is left).
    _logged_off: set[str] = field(default_factory=set)

    def forget_unlisted(self, listed: set[str]) -> None:
        """Forget the orders of requests no longer listed: the memory stays bounded by the
        host's requests."""
        self._retry = {k: r for k, r in self._retry.items() if k[1] in listed}
        self._logged_off &= listed
        self._logoff_retry = {u: r for u, r in self._logoff_retry.items() if u in listed}

    # -------------------------------------------------------------- notices, disconnects

    def due_again(self, kind: str, request: HostRequest) -> bool:
        retry = self._retry.get((kind, request.uid))
        return retry is None or time.monotonic() >= retry[1]

    def failed(self, kind: str, request: HostRequest) -> float:
        """Try again later, later each time."""
        key = (kind, request.uid)
        backoff = self._retry.get(key, (Backoff(first=5.0, cap=300.0), 0.0))[0]
        wait = backoff.next()
        self._retry[key] = (backoff, time.monotonic() + wait)
        return wait

    async def carry_out_notices(self) -> None:
        """Show each notice not shown yet in its user's desktop, then set its shownAt."""
        for request in pending_notices(self.requests.current()):
            notice = request.notice
            if notice is None or not self.due_again("notice", request):
                continue
            result = await self.show(request, notice_message(notice), NOTICE_SECONDS)
            if not result.ok:
                wait = self.failed("notice", request)
                self.reports.warn_now_and_then(
                    f"could not show the notice of {request.name} to {request.user}: "
                    f"{result.problem}; tried again in {wait:.0f}s"
                )
                continue
            self._retry.pop(("notice", request.uid), None)
            log.info("showed the notice of %s to %s", request.name, request.user)
            stamp = rfc3339(datetime.now(UTC))
            await self.mark(request, "notice", {"notice": {"shownAt": stamp}})

    async def carry_out_disconnects(
        self,
        idle: Mapping[str, float],
        follow_sessions: Callable[[Sequence[HostRequest]], Awaitable[None]],
    ) -> None:
        """Disconnect each session asked to (not an Idle one whose user was active since,
        by ``idle``: seconds since each user's last input), then set the ask's doneAt. After
        each, ``follow_sessions`` reads the sessions again: the new state is written at once."""
        now = datetime.now(UTC)
        for step in pending_disconnects(self.requests.current(), idle, now):
            request = step.request
            stamp = rfc3339(datetime.now(UTC))
            if not step.act:
                log.info(
                    "not disconnecting %s (%s) for idleness: %s",
                    request.user,
                    request.name,
                    step.why,
                )
                patch = {"disconnect": {"doneAt": stamp}, "idleSince": None}
                await self.mark(request, "disconnect", patch)
                continue
            if not self.due_again("disconnect", request):
                continue
            result = await self.end_connection(request.user)
            if not result.ok:
                wait = self.failed("disconnect", request)
                message = (
                    f"could not disconnect {request.user} ({request.name}): {result.problem}; "
                    f"tried again in {wait:.0f}s"
                )
                log.warning("%s", message)
                await self.reports.event("DisconnectFailed", message)
                continue
            self._retry.pop(("disconnect", request.uid), None)
            log.info("disconnected %s (%s)", request.user, request.name)
            await self.mark(request, "disconnect", {"disconnect": {"doneAt": stamp}})
            await follow_sessions(self.requests.current())

    async def mark(self, request: HostRequest, kind: str, patch: Mapping[str, Any]) -> None:
        """Write that a notice was shown or a disconnect done, onto the very ask it was
        (the version read; a newer version still holding the same ask gets it too; a new ask
        that replaced it meanwhile is left to be carried out)."""
        current = request
        for _ in range(MARK_TRIES):
            try:
                obj = await self.client.patch_status(
                    REQUESTS,
                    self.options.namespace,
                    current.name,
                    patch,
                    resource_version=current.resource_version or None,
                )
            except ApiError as error:
                if error.status != 409:
                    log.warning("could not mark the %s of %s: %s", kind, request.name, error)
                    return
            except ApiTransportError as error:
                log.warning("could not mark the %s of %s: %s", kind, request.name, error)
                return
            else:
                self.requests.keep(obj)
                return
            fresh = await self.reread(request)
            if fresh is None or _ask(fresh, kind) != _ask(request, kind):
                log.info("the %s of %s changed meanwhile: not marked", kind, request.name)
                return
            current = fresh

    async def reread(self, request: HostRequest) -> HostRequest | None:
        try:
            obj = await self.client.get(REQUESTS, self.options.namespace, request.name)
        except (ApiError, ApiTransportError):
            return None
        fresh = HostRequest.of(obj)
        return fresh if fresh is not None and fresh.uid == request.uid else None

    async def show(
        self,
        request: HostRequest,
        shown: Shown,
        seconds: float,
        deadline: datetime | None = None,
    ) -> CommandResult:
        """Show a message to the request's user: the notify command where given, else a
        window in each of the user's xrdp sessions (done when one was shown)."""
        if self.options.notify_command:
            env = {
                "HOSTPOOL_USER": request.user,
                "HOSTPOOL_MESSAGE": shown.message,
                "HOSTPOOL_DEADLINE": rfc3339(deadline) if deadline else "",
            }
            return await run_command(self.options.notify_command, self.options.command_timeout, env)
        if self.options.sessions_from != "xrdp":
            return CommandResult(
                False, "", "no --notify-command, and no desktop of this host to draw in"
            )
        sessions = await asyncio.to_thread(self.xrdp.user_sessions, {request.user})
        if not sessions:
            return CommandResult(False, "", "the user has no session here")
        problems = []
        for session in sessions:
            future = self.windows.show(
                server_of(session), Message(shown.title, shown.text, seconds)
            )
            try:
                async with asyncio.timeout(4 * X_TIMEOUT):
                    await asyncio.wrap_future(future)
            except (TimeoutError, X11Error, OSError) as error:
                problems.append(f":{session.display}: {error or 'no answer'}")
        if len(problems) == len(sessions):
            return CommandResult(False, "", "; ".join(problems))
        return CommandResult(True, "")

    async def end_connection(self, user: str) -> CommandResult:
        """Disconnect ``user``: the disconnect command where given, else xrdp's connection
        to the session ends (the session stays)."""
        if self.options.disconnect_command:
            return await run_command(
                self.options.disconnect_command,
                self.options.command_timeout,
                {"HOSTPOOL_USER": user},
            )
        if self.options.sessions_from == "xrdp":
            return await asyncio.to_thread(self.xrdp.disconnect, user, self.options.command_timeout)
        return CommandResult(False, "", "no --disconnect-command, and no xrdp here to disconnect")

    # -------------------------------------------------------------- forced logoff

    async def carry_out_logoffs(
        self, requests: Sequence[HostRequest], idle: Mapping[str, float]
    ) -> list[str]:
        """Tell each user of a forced logoff, and log them off at its deadline (not for
        idleness when ``idle`` says the user was active since); the users whose requests
        were deleted."""
        notify, logoff = self.logoffs.due(requests, datetime.now(UTC))
        for request in notify:
            await self.notify_logoff(request)
        ended: list[str] = []
        now = time.monotonic()
        for request in logoff:
            if request.uid in self.requests.deleted:
                continue
            if idle_logoff_withdrawn(request, idle.get(request.user), datetime.now(UTC)):
                log.info(
                    "not logging %s (%s) off for idleness: the user has been active since",
                    request.user,
                    request.name,
                )
                await self.requests.write_fields(request, {"logoff": None, "idleSince": None})
                continue
            retry = self._logoff_retry.get(request.uid)
            if retry is not None and now < retry[1]:
                continue  # failed before: its next try is not due yet
            ends = self.options.logoff_command or self.options.sessions_from == "xrdp"
            if ends and request.uid not in self._logged_off:
                result = await self.end_session(request.user)
                if not result.ok:
                    # The user is still on the host: the request (and so the slot) stays.
                    wait = self._logoff_failed(request, now)
                    log.warning(
                        "logoff command for %s %s; request %s kept, next try in %.0fs",
                        request.user,
                        result.problem,
                        request.name,
                        wait,
                    )
                    await self.reports.event(
                        "LogoffFailed",
                        f"could not log {request.user} off at the deadline: the logoff "
                        f"command {result.problem}; request {request.name} kept, tried again",
                    )
                    continue
                self._logged_off.add(request.uid)
                log.info("logged %s off (deadline %s)", request.user, request.logoff_deadline)
            if await self.requests.delete(request):
                self._logoff_retry.pop(request.uid, None)
                ended.append(request.user)
            else:
                self._logoff_failed(request, now)
        return ended

    async def notify_logoff(self, request: HostRequest) -> None:
        """Tell the user of a forced logoff, once: ``logoff.shownAt`` records it, so an agent
        started again does not tell them twice."""
        if request.logoff_shown:
            return
        seconds = 0.0
        if request.logoff_deadline is not None:
            seconds = (request.logoff_deadline - datetime.now(UTC)).total_seconds()
        low, high = LOGOFF_NOTICE_SECONDS
        result = await self.show(
            request,
            logoff_message(request),
            min(high, max(low, seconds)),
            deadline=request.logoff_deadline,
        )
        if not result.ok:
            log.warning("could not tell %s of the logoff: %s", request.user, result.problem)
            return
        log.info("notified %s of the logoff at %s", request.user, request.logoff_deadline)
        shown = {"shownAt": rfc3339(datetime.now(UTC))}
        await self.mark(request, "logoff notice", {"logoff": shown})

    async def end_session(self, user: str) -> CommandResult:
        """Log ``user`` off: the logoff command where given, else the xrdp session ends."""
        if self.options.logoff_command:
            return await run_command(
                self.options.logoff_command, self.options.command_timeout, {"HOSTPOOL_USER": user}
            )
        return await asyncio.to_thread(self.xrdp.logoff, user, self.options.command_timeout)

    def _logoff_failed(self, request: HostRequest, now: float) -> float:
        """The next try of this logoff waits longer each time it fails."""
        backoff = self._logoff_retry.get(request.uid, (Backoff(first=2.0, cap=300.0), 0.0))[0]
        wait = backoff.next()
        self._logoff_retry[request.uid] = (backoff, now + wait)
        return wait


def _ask(request: HostRequest, kind: str) -> object:
    """What identifies the ask a marking write is about (the same ask: the same value)."""
    if kind == "disconnect":
        return request.disconnect.requested if request.disconnect else None
    if kind == "notice":
        return request.notice.sent if request.notice else None
    return request.logoff_deadline
