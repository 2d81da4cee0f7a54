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

The loop and the following of sessions and idle time are here; the host's reports (status,
certificate, Events) are ``reports``, the operator's orders to sessions ``orders``, and the
requests they all read and write ``assigned``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from datetime import UTC, datetime

import psutil

from ..kube.client import KubeClient
from .assigned import AssignedRequests
from .commands import run_command
from .figures import Counters, load_figures
from .logon_refusals import Logon
from .machine import XrdpMachine
from .options import AgentOptions
from .orders import SessionOrders
from .reports import HostReports
from .sessions import (
    HostRequest,
    LogoffTracker,
    SessionTracker,
    UnknownIdle,
    connect_fields,
    idle_fields,
    parse_session_lines,
    refused_fields,
    state_fields,
)

log = logging.getLogger("hostpool_operator.agent")

#: Seconds a stop waits for the pass under way before it cancels it.
STOP_GRACE = 5.0


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
class Agent:
    """One host's agent: sample, report, act on sessions."""

    client: KubeClient
    options: AgentOptions
    #: The address clients use, reported in status.agent (``reports``).
    address: InitVar[str | None] = None
    sessions: SessionTracker = field(default_factory=SessionTracker)
    #: Seconds since each user's last input, as last measured (users measured only).
    idle: dict[str, float] = field(default_factory=dict)
    _unknown_idle: UnknownIdle = field(default_factory=UnknownIdle)
    xrdp: XrdpMachine = field(init=False)
    requests: AssignedRequests = field(init=False)
    reports: HostReports = field(init=False)
    orders: SessionOrders = field(init=False)

    def __post_init__(self, address: str | None) -> None:
        # One for all the parts: what it last read (the sessions, xrdp-sesman) is where idle
        # time is asked and the certificate read.
        self.xrdp = XrdpMachine()
        self.requests = AssignedRequests(self.client, self.options.namespace, self.options.host)
        self.reports = HostReports(self.client, self.options, self.xrdp, address)
        self.orders = SessionOrders(
            self.client, self.options, self.requests, self.reports, self.xrdp
        )

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
            self.orders.windows.stop.set()

    async def _loop(self, stop: asyncio.Event, step: float, interval: float) -> None:
        before = read_counters()
        memory = [psutil.virtual_memory().percent]
        next_report = time.monotonic() + interval
        await self.reports.follow_certificate()  # published at once, not after the first interval
        while not stop.is_set():
            requests = self.requests.current()
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
                await self.reports.report(figures)
                requests = await self.host_requests()
                await self.follow_sessions(requests)
            elif deadline is not None and deadline <= datetime.now(UTC):
                requests = await self.host_requests()
            await self.reports.follow_certificate()
            await self.follow_idle()
            await self.orders.carry_out_notices()
            await self.orders.carry_out_disconnects(self.idle, self.follow_sessions)
            for user in await self.orders.carry_out_logoffs(self.requests.current(), self.idle):
                self.sessions.forget(user)  # logged off: their next session is new, left alone
            for refusal in await self.reports.report_logon_refusals():
                await self.connect_refused(refusal.user, refusal.reason, refusal.message)

    async def connect_refused(self, user: str, reason: str, message: str) -> None:
        """A logon the host's verifier refused ends the user's connect under way here:
        Failed in authentication, with the verifier's reason."""
        for request in self.requests.current():
            if request.user == user:
                fields = refused_fields(request, reason, message)
                if fields:
                    await self.requests.write_fields(request, fields)

    # -------------------------------------------------------------- sessions

    async def host_requests(self) -> list[HostRequest]:
        """The requests assigned to this host."""
        listed = await self.requests.read()
        if listed is None:
            return []
        # What is no longer listed needs no memory: these stay bounded by the host's requests.
        self.orders.forget_unlisted(listed)
        return self.requests.current()

    async def machine_sessions(self) -> dict[str, str] | None:
        """The users on this machine and their state (None: could not tell this time); with
        a sessions command, the idle times it reported are kept (``self.idle``)."""
        if not self.options.sessions_command:
            if self.options.sessions_from == "xrdp":
                sessions, problem = await asyncio.to_thread(self.xrdp.sessions)
                if sessions is None:
                    log.warning("xrdp sessions: %s", problem)
                    await self.reports.event("SessionsUnknown", f"xrdp sessions: {problem}")
                return sessions
            return {user.name: "Active" for user in psutil.users()}
        result = await run_command(self.options.sessions_command, self.options.command_timeout)
        if not result.ok:
            log.warning("the sessions command %s", result.problem)
            await self.reports.event(
                "SessionsCommandFailed", f"the sessions command {result.problem}"
            )
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
        logons: dict[str, Logon] | None = None  # read once, when a connect ends
        for request in requests:
            state = reported.get(request.user)
            if state is None:
                continue
            fields = state_fields(request, state, now)
            if (
                state == "Active"
                and request.connects_json
                and '"outcome"' not in (request.connects_json.rsplit("{", 1)[-1])
            ):
                if logons is None:
                    logons = await self.reports.logons()
                logon = logons.get(request.user)
                fields |= connect_fields(
                    request, state, now, (logon.at, logon.seconds) if logon else None
                )
            if self.options.sessions_command:
                fields |= idle_fields(request.idle_since, self.idle.get(request.user), now)
            written = await self.requests.write_fields(request, fields) if fields else True
            if not written and "connects" in fields:
                # The session's state matters more than its diagnostics (an admission
                # policy of an older chart may not let an agent write connects).
                del fields["connects"]
                await self.requests.write_fields(request, fields)
        for request in deletes:
            log.info("user %s logged off: deleting %s", request.user, request.name)
            await self.requests.delete(request)

    # -------------------------------------------------------------- idle time

    async def follow_idle(self) -> None:
        """Each session's idle time (xrdp: its X server's, every step) into idleSince."""
        if self.options.sessions_command or self.options.sessions_from != "xrdp":
            return
        users = {r.user for r in self.requests.current() if r.user in self.sessions.seen}
        if not users:
            return
        self.idle, problems = await asyncio.to_thread(self.xrdp.idle, users)
        self.report_idle_problems(problems, time.monotonic())
        now = datetime.now(UTC)
        for request in self.requests.current():
            fields = idle_fields(request.idle_since, self.idle.get(request.user), now)
            if fields:
                await self.requests.write_fields(request, fields)

    def report_idle_problems(self, problems: Mapping[str, str], now: float) -> None:
        """Warn of a user's idle time unknown for a while; a few seconds is an X server
        still setting up its screen (sessions.UnknownIdle)."""
        persisting = self._unknown_idle.persisting(problems, now)
        for user, problem in problems.items():
            if user in persisting:
                self.reports.warn_now_and_then(f"idle time unknown: {user}: {problem}")
            else:
                log.debug("idle time of %s not known yet: %s", user, problem)
