"""Where the controller reports what it did: metrics and Events, as interfaces.

The controller calls these; the operator plugs in Prometheus (``metrics``) and the API's
Events (``events``), tests may plug in anything. Nothing here does I/O itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class MetricsSink:
    """Where the controller reports what it did (Prometheus in the operator, nothing here)."""

    def observe_assignment(
        self, namespace: str, pool: str, reason: str, seconds: float, *, queued: float
    ) -> None:
        """A request was assigned: ``seconds`` from first sight to the written status,
        ``queued`` from first sight to the write being sent."""

    def sessions_ended(self, namespace: str, pool: str, count: int) -> None:
        """``count`` sessions that had been assigned ended (the last request holding each
        was deleted or failed, or its host or workload is gone)."""

    def leading(self, leader: bool) -> None:
        """This instance holds the leader Lease (or runs without election), or no longer."""

    def role(self, role: str) -> None:
        """What this instance is now: "starting" (listing), "standby" (synced, writing
        nothing), "leader" (deciding and writing) or "stopping". Leading is "leader"."""
        self.leading(role == "leader")

    def renewal_late(self, paused: float) -> None:
        """A renewal of the leader Lease succeeded past the renew deadline: the leader's
        writes were paused for ``paused`` seconds (it kept the Lease)."""

    def api_error(self, code: str) -> None:
        """One try of an API request failed: its HTTP status ("409", "500", ...), or
        "transport" when no answer came."""

    def api_write(self, verb: str) -> None:
        """A write (POST, PUT, PATCH, DELETE) was sent to the API server (a standby sends
        none; a write the write gate refused is not sent)."""

    def task_restarted(self, task: str) -> None:
        """A supervised task failed and is started again (``task``: its kind, e.g. "pool")."""

    def skipped_object(self, kind: str) -> None:
        """A watch event that its handler could not take was skipped."""

    def scaled(self, namespace: str, pool: str, direction: str, hosts: int) -> None:
        """Hosts were added ("up") or removed ("down")."""

    def host_started(self, namespace: str, pool: str, seconds: float) -> None:
        """A host the operator added has its workload Ready, ``seconds`` after the scale-up
        decision that made it."""

    def connect_ended(
        self,
        namespace: str,
        pool: str,
        phases: Mapping[str, float],
        outcome: str,
        failure: tuple[str, str] | None,
    ) -> None:
        """A connect ended (``outcome``): the seconds of each of its phases, and (phase,
        reason) when it failed (logon diagnostics)."""

    def session_limit_action(self, namespace: str, pool: str, limit: str, action: str) -> None:
        """A pool's session limit (Disconnected, Idle, MaxSession) acted on a session:
        ``action`` Disconnect or Logoff."""

    def pool_state(self, namespace: str, pool: str, status: Mapping[str, Any]) -> None:
        """The pool's latest status (hosts, sessions, capacity, pending)."""

    def forget_pool(self, namespace: str, pool: str) -> None:
        """The pool is gone: drop its series."""


class EventSink(Protocol):
    """Posts core/v1 Events about the operator's objects."""

    def post(
        self,
        involved: Mapping[str, Any],
        kind: str,
        reason: str,
        message: str,
        type_: str,
        *,
        once_per: tuple[str, ...] | None = None,
    ) -> None:
        """Post an Event about ``involved`` (an object, or just its metadata). With
        ``once_per``, at most one Event per that key in the sink's interval."""
