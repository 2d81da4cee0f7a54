"""The agent's loop, on every session host: it reports its load and sessions.

Every ``--interval`` seconds (30 by default, as Horizon's agent samples) it writes its own
host's ``status.metrics`` (figures over the interval, see ``agent.figures``) and
``status.agent``, and nothing else of the host; it sets ``status.sessionState`` (with
``stateChangedAt``, and ``logonAt`` once) of the requests assigned to its host from what the
machine reports, and ``idleSince`` from each session's idle time (sampled every few seconds);
it deletes a request whose user has logged off, carries out forced logoffs
(``status.logoff``) and disconnects (``status.disconnect``), and shows notices
(``status.notice``) in the user's desktop. It publishes the SHA-256 of its host's RDP
certificate in ``status.agent.rdpCertificateSha256`` (xrdp's beside it, or
``--rdp-certificate``), read again every few seconds, for the broker's browser relay to pin.
Every write is a merge patch of the agent's own fields only, so it can never overwrite what
the operator writes.
Errors (the API server away, a failing script) are logged and reported; the agent keeps
running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from ..api.timestamps import rfc3339
from ..kube.backoff import Backoff
from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError
from ..kube.events import post_event
from .commands import CommandResult, run_command
from .desktop import X_TIMEOUT, Message, Windows
from .figures import Counters, custom_load_value, load_figures
from .logon_refusals import REFUSALS_FILE, refusals_after
from .machine import XrdpMachine, rdp_certificate_in, server_of
from .sessions import (
    HostRequest,
    LogoffTracker,
    SessionTracker,
    Shown,
    UnknownIdle,
    idle_fields,
    idle_logoff_withdrawn,
    logoff_message,
    notice_message,
    parse_session_lines,
    pending_disconnects,
    pending_notices,
    state_fields,
)
from .x11 import X11Error

log = logging.getLogger("hostpool_operator.agent")

HOSTS, REQUESTS = "sessionhosts", "sessionrequests"
#: Figures the agent owns in status.metrics (sent as null when not measured this time, so a
#: stale value never lingers).
METRIC_KEYS = (
    "cpuPercent",
    "memoryPercent",
    "diskQueueLength",
    "diskReadLatencyMs",
    "diskWriteLatencyMs",
    "customLoadValue",
)
#: A failing load script is reported again at most this often (seconds).
EVENT_REPEAT = 300.0
#: How long a notice's window stays on the screen unless the user closes it (seconds); a
#: forced logoff's stays until its deadline, between these bounds.
NOTICE_SECONDS = 300.0
LOGOFF_NOTICE_SECONDS = (30.0, 3600.0)
#: Tries of a marking write (doneAt, shownAt) that meets a newer version of the request.
MARK_TRIES = 3
#: Seconds a stop waits for the pass under way before it cancels it.
STOP_GRACE = 5.0


def version() -> str:
    try:
        return metadata.version("hostpool-operator")
    except metadata.PackageNotFoundError:
        return "unknown"


def read_counters() -> Counters:
    cpu = psutil.cpu_times()
    idle = cpu.idle + getattr(cpu, "iowait", 0.0)
    total = sum(cpu)
    disk = psutil.disk_io_counters()
    return Counters(
        at=time.monotonic(),
        cpu_busy=total - idle,
        cpu_total=total,
        reads=disk.read_count if disk else 0,
        writes=disk.write_count if disk else 0,
        read_ms=disk.read_time if disk else 0,
        write_ms=disk.write_time if disk else 0,
    )


@dataclass
class AgentOptions:
    host: str
    namespace: str
    interval: float = 30.0
    load_script: str | None = None
    sessions_command: str | None = None
    notify_command: str | None = None
    logoff_command: str | None = None
    disconnect_command: str | None = None
    command_timeout: float = 10.0
    address: str | None = None
    #: Where sessions come from without a sessions command: "users" (the machine's logged-in
    #: users, all Active) or "xrdp" (the xrdp instance beside the agent).
    sessions_from: str = "users"
    #: The single sign-on verifier's state directory, whose refusals become Events (None:
    #: none are read).
    logon_state: str | None = None
    #: The host's RDP certificate (PEM): with sessions from xrdp, a path in the xrdp's file
    #: system (None: what its xrdp.ini names); else in the agent's (None: none published).
    rdp_certificate: str | None = None


@dataclass
class Agent:
    """One host's agent: sample, report, act on sessions."""

    client: KubeClient
    options: AgentOptions
    address: str | None = None
    sessions: SessionTracker = field(default_factory=SessionTracker)
    logoffs: LogoffTracker = field(default_factory=LogoffTracker)
    host_object: dict[str, Any] = field(default_factory=dict)
    _event_at: dict[str, float] = field(default_factory=dict)
    #: The time of the last single sign-on refusal reported (older ones are history).
    _refusals_after: float = field(default_factory=time.time)
    #: Request uids deleted by this agent, while the API still lists them (pruned to those).
    _deleted: set[str] = field(default_factory=set)
    #: Forced logoffs that failed (the command, or the delete after it), by request uid: the
    #: back-off and when the next try is due. A failing logoff is tried again later, never
    #: in a tight loop, and its request is kept while the user is still on the host.
    _logoff_retry: dict[str, tuple[Backoff, float]] = field(default_factory=dict)
    #: Request uids whose user the logoff command did log off (only the delete is left).
    _logged_off: set[str] = field(default_factory=set)
    _xrdp: XrdpMachine | None = None
    #: The requests assigned to this host as last read (by uid), kept up to date with what
    #: the agent's own writes return.
    requests: dict[str, HostRequest] = field(default_factory=dict)
    #: Seconds since each user's last input, as last measured (users measured only).
    idle: dict[str, float] = field(default_factory=dict)
    #: Notices and disconnects that could not be carried out: (kind, request uid) -> the
    #: back-off and when the next try is due.
    _retry: dict[tuple[str, str], tuple[Backoff, float]] = field(default_factory=dict)
    _warned_at: dict[str, float] = field(default_factory=dict)
    _unknown_idle: UnknownIdle = field(default_factory=UnknownIdle)
    windows: Windows = field(default_factory=lambda: Windows(threading.Event()))
    #: The SHA-256 of the host's RDP certificate as last read (None: it could not be), once
    #: read; and whether that reading is what the host's status says.
    rdp_sha256: str | None = None
    _rdp_read: bool = False
    _rdp_published: bool = False

    @property
    def xrdp(self) -> XrdpMachine:
        if self._xrdp is None:
            self._xrdp = XrdpMachine()
        return self._xrdp

    @property
    def involved(self) -> dict[str, Any]:
        """The host as an Event's involvedObject (its name, even before it was read)."""
        meta = dict(self.host_object.get("metadata") or {})
        meta.setdefault("name", self.options.host)
        meta.setdefault("namespace", self.options.namespace)
        return {"metadata": meta}

    # -------------------------------------------------------------- the loop

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.options.interval
        # Memory and idle time are sampled this often, logoff deadlines checked.
        step = min(5.0, interval)
        log.info(
            "agent for %s/%s: reporting every %.0fs",
            self.options.namespace,
            self.options.host,
            interval,
        )
        work = asyncio.create_task(self._loop(stop, step, interval))
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
            # Stopped: the pass under way may finish, for STOP_GRACE seconds at most (a
            # request the API server does not answer must not hold the stop for its minute).
            if not work.done() and not (await asyncio.wait({work}, timeout=STOP_GRACE))[0]:
                log.warning("stopping: the pass under way did not end in %gs", STOP_GRACE)
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
            if not work.cancelled():
                work.result()  # its error, if it failed
        finally:
            work.cancel()
            stopped.cancel()
            self.windows.stop.set()

    async def _loop(self, stop: asyncio.Event, step: float, interval: float) -> None:
        before = read_counters()
        memory = [psutil.virtual_memory().percent]
        next_report = time.monotonic() + interval
        await self.follow_certificate()  # published at once, not after the first interval
        while not stop.is_set():
            requests = list(self.requests.values())
            now = time.monotonic()
            wait = min(step, max(0.0, next_report - now))
            deadline = LogoffTracker.next_deadline(requests)
            until = (deadline - datetime.now(UTC)).total_seconds() if deadline else 0.0
            if until > 0:  # a deadline passed already (a failing logoff) waits its back-off
                wait = min(wait, until)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):  # not wait_for: it can swallow a cancel
                    await stop.wait()
            if stop.is_set():
                break
            memory.append(psutil.virtual_memory().percent)
            if time.monotonic() >= next_report:
                after = read_counters()
                figures = load_figures(before, after, memory)
                before, memory = after, []
                next_report += interval
                if next_report < time.monotonic():  # fell behind (suspended): start afresh
                    next_report = time.monotonic() + interval
                await self.report(figures)
                requests = await self.host_requests()
                await self.follow_sessions(requests)
            elif deadline is not None and deadline <= datetime.now(UTC):
                requests = await self.host_requests()
            await self.follow_certificate()
            await self.follow_idle()
            await self.carry_out_notices()
            await self.carry_out_disconnects()
            await self.carry_out_logoffs(list(self.requests.values()))
            await self.report_logon_refusals()

    # -------------------------------------------------------------- metrics

    async def report(self, figures: dict[str, int]) -> None:
        metrics: dict[str, Any] = {key: figures.get(key) for key in METRIC_KEYS}
        if self.options.load_script:
            metrics["customLoadValue"] = await self.custom_load()
        metrics["sampledAt"] = rfc3339(datetime.now(UTC))
        agent: dict[str, Any] = {"version": version()}
        if self.address:
            agent["address"] = self.address
        if self._rdp_read:  # again each report: a value written over meanwhile is put right
            agent["rdpCertificateSha256"] = self.rdp_sha256
        try:
            self.host_object = await self.client.patch_status(
                HOSTS,
                self.options.namespace,
                self.options.host,
                {"metrics": metrics, "agent": agent},
            )
        except (ApiError, ApiTransportError) as error:
            log.warning("could not write the metrics of %s: %s", self.options.host, error)
            return
        log.debug("reported %s", metrics)

    # -------------------------------------------------------------- the RDP certificate

    @property
    def reads_certificate(self) -> bool:
        """The agent knows its host's RDP certificate: xrdp's beside it, or the flag's. An
        agent that does not leaves the field to whoever writes it (an administrator may pin a
        host without an agent by hand)."""
        return self.options.sessions_from == "xrdp" or self.options.rdp_certificate is not None

    def read_certificate(self) -> tuple[str | None, str]:
        if self.options.sessions_from == "xrdp":
            return self.xrdp.rdp_certificate(self.options.rdp_certificate)
        return rdp_certificate_in(None, self.options.rdp_certificate)

    async def follow_certificate(self) -> None:
        """Read the host's RDP certificate (every step: a rotated one is published within
        seconds; until then the relay refuses the host rather than trust the old one) and
        publish its fingerprint when it changed. One that cannot be read is published as
        none, with a warning and a Warning Event ``RdpCertificateUnreadable``."""
        if not self.reads_certificate:
            return
        sha256, problem = await asyncio.to_thread(self.read_certificate)
        if problem:
            self.warn_now_and_then(problem)
            await self.event(
                "RdpCertificateUnreadable",
                f"{problem}; no fingerprint published: the broker relays no browser desktop "
                "to this host",
            )
        if self._rdp_read and sha256 == self.rdp_sha256 and self._rdp_published:
            return
        self.rdp_sha256, self._rdp_read = sha256, True
        try:
            self.host_object = await self.client.patch_status(
                HOSTS,
                self.options.namespace,
                self.options.host,
                {"agent": {"rdpCertificateSha256": sha256}},
            )
        except (ApiError, ApiTransportError) as error:
            self._rdp_published = False  # tried again at the next step
            log.warning("could not publish the RDP certificate of %s: %s", self.options.host, error)
            return
        self._rdp_published = True
        if sha256 is not None:
            log.info("published the RDP certificate's SHA-256: %s", sha256)

    async def custom_load(self) -> int | None:
        assert self.options.load_script is not None
        result = await run_command(self.options.load_script, self.options.command_timeout)
        try:
            if not result.ok:
                raise ValueError(f"the load script {result.problem}")
            return custom_load_value(result.output)
        except ValueError as error:
            message = f"{error}; no customLoadValue reported"
            log.warning("%s", message)
            await self.event("LoadScriptFailed", message)
            return None

    async def event(self, reason: str, message: str) -> None:
        """A Warning Event on the host, at most once per EVENT_REPEAT for the same reason
        and message (a script failing every 30 s is one problem, not a flood)."""
        key = f"{reason}:{message}"
        now = time.monotonic()
        if now - self._event_at.get(key, -EVENT_REPEAT) < EVENT_REPEAT:
            return
        self._event_at = {k: t for k, t in self._event_at.items() if now - t < EVENT_REPEAT}
        self._event_at[key] = now
        for attempt in range(2):  # a busy API server may drop one; a second try is cheap
            if attempt:
                await asyncio.sleep(1)
            if await post_event(
                self.client,
                self.involved,
                kind="SessionHost",
                reason=reason,
                message=message,
                type_="Warning",
                component="hostpool-agent",
            ):
                return

    async def report_logon_refusals(self) -> None:
        """An Event for each logon the single sign-on verifier refused since the last look
        (those before the agent started were reported by the agent before it)."""
        if self.options.logon_state is None:
            return
        path = Path(self.options.logon_state) / REFUSALS_FILE
        try:
            text = await asyncio.to_thread(path.read_text, encoding="utf-8")
        except FileNotFoundError:
            text = ""
        except OSError as exc:
            self.warn_now_and_then(f"the logon refusals could not be read: {exc}")
            return
        refusals, self._refusals_after = refusals_after(text, self._refusals_after)
        for refusal in refusals:
            log.info("%s", refusal.message)
            await self.event(refusal.event_reason, refusal.message)

    # -------------------------------------------------------------- sessions

    async def host_requests(self) -> list[HostRequest]:
        """The requests assigned to this host."""
        try:
            listing = await self.client.list(
                REQUESTS, self.options.namespace, field_selector=f"status.host={self.options.host}"
            )
        except (ApiError, ApiTransportError) as error:
            log.warning("could not list the session requests: %s", error)
            return []
        found = []
        listed: set[str] = set()
        for obj in listing["items"]:
            status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
            if status.get("host") != self.options.host:
                continue
            request = HostRequest.of(obj)
            if request is None:
                continue
            listed.add(request.uid)
            if request.uid not in self._deleted:
                found.append(request)
        self.requests = {r.uid: r for r in found}
        # What is no longer listed needs no memory: these stay bounded by the host's requests.
        self._retry = {k: r for k, r in self._retry.items() if k[1] in listed}
        self._deleted &= listed
        self._logged_off &= listed
        self._logoff_retry = {u: r for u, r in self._logoff_retry.items() if u in listed}
        return found

    async def machine_sessions(self) -> dict[str, str] | None:
        """The users on this machine and their state (None: could not tell this time); with
        a sessions command, the idle times it reported are kept (``self.idle``)."""
        if not self.options.sessions_command:
            if self.options.sessions_from == "xrdp":
                sessions, problem = await asyncio.to_thread(self.xrdp.sessions)
                if sessions is None:
                    log.warning("xrdp sessions: %s", problem)
                    await self.event("SessionsUnknown", f"xrdp sessions: {problem}")
                return sessions
            return {user.name: "Active" for user in psutil.users()}
        result = await run_command(self.options.sessions_command, self.options.command_timeout)
        if not result.ok:
            log.warning("the sessions command %s", result.problem)
            await self.event("SessionsCommandFailed", f"the sessions command {result.problem}")
            return None  # a failed sample must not look like everyone logged off
        lines = parse_session_lines(result.output)
        for problem in lines.problems:
            log.warning("sessions command output: %s", problem)
        self.idle = lines.idle
        return lines.states

    async def follow_sessions(self, requests: Sequence[HostRequest]) -> None:
        reported = await self.machine_sessions()
        if reported is None:
            return
        _, deletes = self.sessions.sample(requests, reported)
        now = datetime.now(UTC)
        for request in requests:
            state = reported.get(request.user)
            if state is None:
                continue
            fields = state_fields(request, state, now)
            if self.options.sessions_command:
                fields |= idle_fields(request.idle_since, self.idle.get(request.user), now)
            if fields:
                await self.write_fields(request, fields)
        for request in deletes:
            log.info("user %s logged off: deleting %s", request.user, request.name)
            await self.delete(request)

    async def write_fields(self, request: HostRequest, fields: Mapping[str, Any]) -> bool:
        """Merge-patch the agent's own fields of the request's status; the request as the
        API server then has it is kept."""
        try:
            obj = await self.client.patch_status(
                REQUESTS, self.options.namespace, request.name, fields
            )
        except (ApiError, ApiTransportError) as error:
            log.warning("could not write %s of %s: %s", sorted(fields), request.name, error)
            return False
        self.keep(obj)
        log.debug("wrote %s of %s", fields, request.name)
        return True

    def keep(self, obj: Mapping[str, Any]) -> None:
        updated = HostRequest.of(obj)
        if updated is not None and updated.uid in self.requests:
            self.requests[updated.uid] = updated

    # -------------------------------------------------------------- idle time

    async def follow_idle(self) -> None:
        """Each session's idle time (xrdp: its X server's, every step) into idleSince."""
        if self.options.sessions_command or self.options.sessions_from != "xrdp":
            return
        users = {r.user for r in self.requests.values() if r.user in self.sessions.seen}
        if not users:
            return
        self.idle, problems = await asyncio.to_thread(self.xrdp.idle, users)
        self.report_idle_problems(problems, time.monotonic())
        now = datetime.now(UTC)
        for request in list(self.requests.values()):
            fields = idle_fields(request.idle_since, self.idle.get(request.user), now)
            if fields:
                await self.write_fields(request, fields)

    def report_idle_problems(self, problems: Mapping[str, str], now: float) -> None:
        """Warn of a user's idle time unknown for a while; a few seconds is an X server
        still setting up its screen (sessions.UnknownIdle)."""
        persisting = self._unknown_idle.persisting(problems, now)
        for user, problem in problems.items():
            if user in persisting:
                self.warn_now_and_then(f"idle time unknown: {user}: {problem}")
            else:
                log.debug("idle time of %s not known yet: %s", user, problem)

    def warn_now_and_then(self, message: str) -> None:
        """Log a warning, the same one at most once per EVENT_REPEAT."""
        now = time.monotonic()
        if now - self._warned_at.get(message, -EVENT_REPEAT) < EVENT_REPEAT:
            return
        self._warned_at = {k: t for k, t in self._warned_at.items() if now - t < EVENT_REPEAT}
        self._warned_at[message] = now
        log.warning("%s", message)

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
        for request in pending_notices(list(self.requests.values())):
            notice = request.notice
            if notice is None or not self.due_again("notice", request):
                continue
            result = await self.show(request, notice_message(notice), NOTICE_SECONDS)
            if not result.ok:
                wait = self.failed("notice", request)
                self.warn_now_and_then(
                    f"could not show the notice of {request.name} to {request.user}: "
                    f"{result.problem}; tried again in {wait:.0f}s"
                )
                continue
            self._retry.pop(("notice", request.uid), None)
            log.info("showed the notice of %s to %s", request.name, request.user)
            stamp = rfc3339(datetime.now(UTC))
            await self.mark(request, "notice", {"notice": {"shownAt": stamp}})

    async def carry_out_disconnects(self) -> None:
        """Disconnect each session asked to (not an Idle one whose user was active since),
        then set the ask's doneAt."""
        now = datetime.now(UTC)
        for step in pending_disconnects(list(self.requests.values()), self.idle, now):
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
                await self.event("DisconnectFailed", message)
                continue
            self._retry.pop(("disconnect", request.uid), None)
            log.info("disconnected %s (%s)", request.user, request.name)
            await self.mark(request, "disconnect", {"disconnect": {"doneAt": stamp}})
            await self.follow_sessions(list(self.requests.values()))

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
                self.keep(obj)
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

    async def delete(self, request: HostRequest) -> bool:
        """Delete exactly this request (never a namesake), once. True when it is gone."""
        if request.uid in self._deleted:
            return True
        try:
            await self.client.delete(
                REQUESTS, self.options.namespace, request.name, uid=request.uid
            )
        except ApiError as error:
            if error.status not in (404, 409):  # gone already, or a namesake: nothing to do
                log.warning("could not delete %s: %s", request.name, error)
                return False
        except ApiTransportError as error:
            log.warning("could not delete %s: %s", request.name, error)
            return False
        self._deleted.add(request.uid)
        return True

    # -------------------------------------------------------------- forced logoff

    async def carry_out_logoffs(self, requests: Sequence[HostRequest]) -> None:
        notify, logoff = self.logoffs.due(requests, datetime.now(UTC))
        for request in notify:
            await self.notify_logoff(request)
        now = time.monotonic()
        for request in logoff:
            if request.uid in self._deleted:
                continue
            if idle_logoff_withdrawn(request, self.idle.get(request.user), datetime.now(UTC)):
                log.info(
                    "not logging %s (%s) off for idleness: the user has been active since",
                    request.user,
                    request.name,
                )
                await self.write_fields(request, {"logoff": None, "idleSince": None})
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
                    await self.event(
                        "LogoffFailed",
                        f"could not log {request.user} off at the deadline: the logoff "
                        f"command {result.problem}; request {request.name} kept, tried again",
                    )
                    continue
                self._logged_off.add(request.uid)
                log.info("logged %s off (deadline %s)", request.user, request.logoff_deadline)
            if await self.delete(request):
                self._logoff_retry.pop(request.uid, None)
                self.sessions.forget(request.user)
            else:
                self._logoff_failed(request, now)

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
