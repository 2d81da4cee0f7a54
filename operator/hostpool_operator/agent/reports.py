"""What the host tells: its load and the agent in ``status.metrics`` and ``status.agent``,
its RDP certificate's fingerprint, and its problems (Warning Events, warnings in the log).

The agent writes only these fields of its host (merge patches), so it never overwrites what
the operator writes. A problem seen again and again is told once per ``EVENT_REPEAT``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from ..api.timestamps import rfc3339
from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError
from ..kube.events import post_event
from .commands import run_command
from .figures import custom_load_value
from .logon_refusals import (
    LOGONS_FILE,
    REFUSALS_FILE,
    Logon,
    Refusal,
    latest_logons,
    refusals_after,
)
from .machine import XrdpMachine, rdp_certificate_in
from .options import AgentOptions

log = logging.getLogger("hostpool_operator.agent")

HOSTS = "sessionhosts"
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


def version() -> str:
    try:
        return metadata.version("hostpool-operator")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass
class HostReports:
    """One host's reports to the API and its warnings."""

    client: KubeClient
    options: AgentOptions
    xrdp: XrdpMachine
    address: str | None = None
    host_object: dict[str, Any] = field(default_factory=dict)
    _event_at: dict[str, float] = field(default_factory=dict)
    _warned_at: dict[str, float] = field(default_factory=dict)
    #: The time of the last single sign-on refusal reported (older ones are history).
    _refusals_after: float = field(default_factory=time.time)
    #: The SHA-256 of the host's RDP certificate as last read (None: it could not be), once
    #: read; and whether that reading is what the host's status says.
    rdp_sha256: str | None = None
    _rdp_read: bool = False
    _rdp_published: bool = False

    @property
    def involved(self) -> dict[str, Any]:
        """The host as an Event's involvedObject (its name, even before it was read)."""
        meta = dict(self.host_object.get("metadata") or {})
        meta.setdefault("name", self.options.host)
        meta.setdefault("namespace", self.options.namespace)
        return {"metadata": meta}

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

    # -------------------------------------------------------------- problems

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

    def warn_now_and_then(self, message: str) -> None:
        """Log a warning, the same one at most once per EVENT_REPEAT."""
        now = time.monotonic()
        if now - self._warned_at.get(message, -EVENT_REPEAT) < EVENT_REPEAT:
            return
        self._warned_at = {k: t for k, t in self._warned_at.items() if now - t < EVENT_REPEAT}
        self._warned_at[message] = now
        log.warning("%s", message)

    async def logons(self) -> dict[str, Logon]:
        """Each user's last logon the single sign-on verifier signed on (none without it)."""
        if self.options.logon_state is None:
            return {}
        path = Path(self.options.logon_state) / LOGONS_FILE
        try:
            text = await asyncio.to_thread(path.read_text, encoding="utf-8")
        except OSError:
            return {}
        return latest_logons(text)

    async def report_logon_refusals(self) -> list[Refusal]:
        """An Event for each logon the single sign-on verifier refused since the last look
        (those before the agent started were reported by the agent before it)."""
        if self.options.logon_state is None:
            return []
        path = Path(self.options.logon_state) / REFUSALS_FILE
        try:
            text = await asyncio.to_thread(path.read_text, encoding="utf-8")
        except FileNotFoundError:
            text = ""
        except OSError as exc:
            self.warn_now_and_then(f"the logon refusals could not be read: {exc}")
            return []
        refusals, self._refusals_after = refusals_after(text, self._refusals_after)
        for refusal in refusals:
            log.info("%s", refusal.message)
            await self.event(refusal.event_reason, refusal.message)
        if refusals:
            # On the host too: an image update's canary reads it there.
            latest = max(refusals, key=lambda r: r.at)
            last = {"lastLogonRefusal": latest.status_fields()}
            try:
                self.host_object = await self.client.patch_status(
                    HOSTS, self.options.namespace, self.options.host, {"agent": last}
                )
            except (ApiError, ApiTransportError) as error:
                log.warning("could not report the refusal on %s: %s", self.options.host, error)
        return refusals
