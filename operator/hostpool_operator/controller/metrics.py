"""Prometheus metrics on /metrics (prometheus-client)."""

from __future__ import annotations

import contextlib
import platform
import threading
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)

from ..api import LimitAction, SessionLimit
from ..api.conditions import find
from ..api.plan import PlanPhase
from ..api.request import ConnectPhase
from ..api.update import UpdatePhase
from ..kube.sinks import MetricsSink

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: Not "total" as well: it is the sum of these, and a sum() over the states counted it twice.
SESSION_STATES = ("connecting", "active", "disconnected")
PLAN_PHASES = tuple(phase.value for phase in PlanPhase)
UPDATE_PHASES = tuple(phase.value for phase in UpdatePhase)
#: The states of a pool's hosts against its host template (hostpool_update_hosts).
REVISION_STATES = ("updated", "outdated")
HOST_START_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
#: Logon phases: from a broker's milliseconds to a host's minutes of starting.
LOGON_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
QUEUE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60)


class PrometheusMetrics(MetricsSink):
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        #: The (phase, reason) of each pool's failed connects: its series to remove.
        self._failures_seen: dict[tuple[str, str], set[tuple[str, str]]] = {}
        # Not prometheus_client's global registry (one PrometheusMetrics per test), so the
        # process_* and python_info collectors it carries are added here.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.build_info = Gauge(
            "hostpool_build_info",
            "Always 1: the operator's version and the Python it runs on.",
            ("version", "python"),
            registry=self.registry,
        )
        self.build_info.labels(package_version(), platform.python_version()).set(1)
        #: What /readyz answers: starting, standby, leader or stopping (see ``role``).
        self.current_role = "starting"
        self.leader = Gauge(
            "hostpool_leader",
            "1 while this instance holds the leader Lease (or runs without leader election), "
            "0 as a standby or once leadership is lost.",
            registry=self.registry,
        )
        self.renewals_late = Counter(
            "hostpool_lease_renewals_late",
            "Renewals of the leader Lease that succeeded past the renew deadline: the leader "
            "kept the Lease, its writes paused until the answer came.",
            registry=self.registry,
        )
        self.writes_paused = Counter(
            "hostpool_leader_writes_paused_seconds",
            "Seconds the leader's writes were paused by late Lease renewals.",
            registry=self.registry,
        )
        self.api_errors = Counter(
            "hostpool_api_errors",
            "Failed tries of the operator's own API requests (retries included), by HTTP "
            'status ("409", "429", "500", ...), or "transport" when no answer came.',
            ("code",),
            registry=self.registry,
        )
        self.api_writes = Counter(
            "hostpool_api_writes",
            "Writes (POST, PUT, PATCH, DELETE) sent to the API server, by verb: the Lease's, "
            "statuses, Events, hosts and workloads. A standby sends none.",
            ("verb",),
            registry=self.registry,
        )
        labels = ("namespace", "pool")
        self.task_restarts = Counter(
            "hostpool_task_restarts",
            "Supervised tasks (watches, pool loops, plan and workload watches, Lease renewal) "
            "that failed on an unexpected exception and were started again, by kind.",
            ("task",),
            registry=self.registry,
        )
        self.skipped_objects = Counter(
            "hostpool_skipped_objects",
            "Watch events skipped because the operator could not take the object (each with a "
            "Warning Event and a log line naming it), by kind.",
            ("kind",),
            registry=self.registry,
        )
        self.assignments = Counter(
            "hostpool_assignments",
            "SessionRequests assigned to a host, by reason (NewSession, Reconnected).",
            (*labels, "reason"),
            registry=self.registry,
        )
        self.session_ends = Counter(
            "hostpool_session_ends",
            "Assigned sessions that ended: the last SessionRequest holding the session was "
            "deleted or failed, or its host or workload is gone. With "
            'hostpool_assignments_total{reason="NewSession"} (the sessions that started) it '
            "makes the pool's session history recoverable (recommend-plan --prometheus).",
            labels,
            registry=self.registry,
        )
        self.latency = Histogram(
            "hostpool_assignment_latency_seconds",
            "From the operator first seeing a request to its Assigned status being written.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.queued = Histogram(
            "hostpool_assignment_queue_seconds",
            "From the operator first seeing a request to its assignment write being sent "
            "(the operator's own share of the latency, plus any wait for capacity).",
            labels,
            buckets=QUEUE_BUCKETS,
            registry=self.registry,
        )
        self.pending = Gauge(
            "hostpool_pending_requests",
            "SessionRequests waiting for a host.",
            labels,
            registry=self.registry,
        )
        self.hosts = Gauge(
            "hostpool_hosts", "SessionHosts of the pool.", labels, registry=self.registry
        )
        self.sessions = Gauge(
            "hostpool_sessions",
            "Sessions in the pool, by state.",
            (*labels, "state"),
            registry=self.registry,
        )
        self.free = Gauge(
            "hostpool_free_sessions",
            "Free session slots on hosts not draining.",
            labels,
            registry=self.registry,
        )
        self.host_start = Histogram(
            "hostpool_host_start_seconds",
            "From the scale-up decision to the new host's workload being Ready (the host "
            "taking sessions).",
            labels,
            buckets=HOST_START_BUCKETS,
            registry=self.registry,
        )
        self.logon_phase = Histogram(
            "hostpool_logon_phase_seconds",
            "Seconds a connect spent in each phase (broker, queue, hostStart, transport, "
            "authentication, sessionStart, firstFrame), as the component that saw it measured "
            "them, counted when the connect ends.",
            (*labels, "phase"),
            buckets=LOGON_BUCKETS,
            registry=self.registry,
        )
        self.logon_total = Histogram(
            "hostpool_logon_seconds",
            "Seconds from the click to the desktop of each connect that succeeded (its phases "
            "added up).",
            labels,
            buckets=LOGON_BUCKETS,
            registry=self.registry,
        )
        self.logon_failures = Counter(
            "hostpool_logon_failures_total",
            "Connects that failed, by the phase they failed in and the reason.",
            (*labels, "phase", "reason"),
            registry=self.registry,
        )
        self.not_ready = Gauge(
            "hostpool_hosts_not_ready",
            "SessionHosts whose workload is missing or not Ready.",
            labels,
            registry=self.registry,
        )
        self.plan_phase = Gauge(
            "hostpool_plan_phase",
            "1 for the scaling plan's phase the pool places in now, 0 for the other phases "
            "(no series: the pool follows no plan, or no phase applies).",
            [*labels, "phase"],
            registry=self.registry,
        )
        self.update_hosts = Gauge(
            "hostpool_update_hosts",
            "The operator's hosts of the pool by their template: made from the current "
            "revision (updated) or an earlier one (outdated); no series for a pool without a "
            "host template.",
            [*labels, "state"],
            registry=self.registry,
        )
        self.update_phase = Gauge(
            "hostpool_update_phase",
            "1 for the image update's phase (Progressing, Paused, Complete, Failed), 0 for the "
            "others (no series before the pool's first template change).",
            [*labels, "phase"],
            registry=self.registry,
        )
        self.saturated = Gauge(
            "hostpool_pool_saturated",
            "1 while the pool's Saturated condition is True, else 0.",
            labels,
            registry=self.registry,
        )
        self.scaling_limited = Gauge(
            "hostpool_scaling_limited",
            "1 while the pool's ScalingLimited condition is True (maxHosts reached), 0 while "
            "False (no series: the pool does not scale).",
            labels,
            registry=self.registry,
        )
        self.agent_silent = Gauge(
            "hostpool_hosts_agent_silent",
            "SessionHosts whose agent metrics are stale (status.hosts.agentSilent).",
            labels,
            registry=self.registry,
        )
        self.limit_actions = Counter(
            "hostpool_session_limit_actions",
            "Sessions a pool's session limit acted on, by limit (Disconnected, Idle, "
            "MaxSession) and action (Disconnect, Logoff); warnings are not counted.",
            (*labels, "limit", "action"),
            registry=self.registry,
        )
        self.scale_actions = Counter(
            "hostpool_scale_actions",
            "Hosts added (up) or removed (down) by the operator.",
            (*labels, "direction"),
            registry=self.registry,
        )

    def observe_assignment(
        self, namespace: str, pool: str, reason: str, seconds: float, *, queued: float
    ) -> None:
        self.assignments.labels(namespace, pool, reason).inc()
        self.latency.labels(namespace, pool).observe(seconds)
        self.queued.labels(namespace, pool).observe(queued)

    def sessions_ended(self, namespace: str, pool: str, count: int) -> None:
        self.session_ends.labels(namespace, pool).inc(count)

    def leading(self, leader: bool) -> None:
        self.leader.set(leader)

    def role(self, role: str) -> None:
        self.current_role = role
        self.leading(role == "leader")

    def renewal_late(self, paused: float) -> None:
        self.renewals_late.inc()
        self.writes_paused.inc(paused)

    def api_error(self, code: str) -> None:
        self.api_errors.labels(code).inc()

    def api_write(self, verb: str) -> None:
        self.api_writes.labels(verb).inc()

    def task_restarted(self, task: str) -> None:
        self.task_restarts.labels(task).inc()

    def skipped_object(self, kind: str) -> None:
        self.skipped_objects.labels(kind).inc()

    def scaled(self, namespace: str, pool: str, direction: str, hosts: int) -> None:
        self.scale_actions.labels(namespace, pool, direction).inc(hosts)

    def connect_ended(
        self,
        namespace: str,
        pool: str,
        phases: Mapping[str, float],
        outcome: str,
        failure: tuple[str, str] | None,
    ) -> None:
        for phase, seconds in phases.items():
            self.logon_phase.labels(namespace, pool, phase).observe(seconds)
        if outcome == "Succeeded":
            self.logon_total.labels(namespace, pool).observe(sum(phases.values()))
        if failure is not None:
            self.logon_failures.labels(namespace, pool, *failure).inc()
            self._failures_seen.setdefault((namespace, pool), set()).add(failure)

    def session_limit_action(self, namespace: str, pool: str, limit: str, action: str) -> None:
        self.limit_actions.labels(namespace, pool, limit, action).inc()

    def host_started(self, namespace: str, pool: str, seconds: float) -> None:
        self.host_start.labels(namespace, pool).observe(seconds)

    def pool_state(self, namespace: str, pool: str, status: Mapping[str, Any]) -> None:
        self.pending.labels(namespace, pool).set(status.get("pendingRequests", 0))
        self.not_ready.labels(namespace, pool).set(status.get("hosts", {}).get("notReady", 0))
        silent = status.get("hosts", {}).get("agentSilent", 0)
        self.agent_silent.labels(namespace, pool).set(silent)
        conditions = status.get("conditions")
        saturated = find(conditions, "Saturated")
        self.saturated.labels(namespace, pool).set(
            saturated is not None and saturated.get("status") == "True"
        )
        limited = find(conditions, "ScalingLimited")
        if limited is None:
            with contextlib.suppress(KeyError):  # scaling was removed from the spec
                self.scaling_limited.remove(namespace, pool)
        else:
            self.scaling_limited.labels(namespace, pool).set(limited.get("status") == "True")
        self.hosts.labels(namespace, pool).set(status.get("hosts", {}).get("total", 0))
        self.free.labels(namespace, pool).set(status.get("capacity", {}).get("free", 0))
        for state in SESSION_STATES:
            value = status.get("sessions", {}).get(state, 0)
            self.sessions.labels(namespace, pool, state).set(value)
        self._update_state(namespace, pool, status.get("update"))
        plan = status.get("scalingPlan")
        current = plan.get("phase") if isinstance(plan, Mapping) else None
        for phase in PLAN_PHASES:
            if current is None:
                with contextlib.suppress(KeyError):
                    self.plan_phase.remove(namespace, pool, phase)
            else:
                self.plan_phase.labels(namespace, pool, phase).set(phase == current)

    def _update_state(self, namespace: str, pool: str, update: object) -> None:
        """hostpool_update_hosts and hostpool_update_phase from status.update."""
        given = update if isinstance(update, Mapping) else {}
        counts = {"updated": given.get("updatedHosts"), "outdated": given.get("outdatedHosts")}
        for state, value in counts.items():
            if isinstance(value, int):
                self.update_hosts.labels(namespace, pool, state).set(value)
            else:
                with contextlib.suppress(KeyError):
                    self.update_hosts.remove(namespace, pool, state)
        current = given.get("phase")
        for phase in UPDATE_PHASES:
            if current is None:
                with contextlib.suppress(KeyError):
                    self.update_phase.remove(namespace, pool, phase)
            else:
                self.update_phase.labels(namespace, pool, phase).set(phase == current)

    def forget_pool(self, namespace: str, pool: str) -> None:
        series: list[tuple[Any, tuple[str, ...]]] = [
            (metric, ())
            for metric in (
                self.latency,
                self.queued,
                self.pending,
                self.hosts,
                self.free,
                self.host_start,
                self.not_ready,
                self.agent_silent,
                self.saturated,
                self.scaling_limited,
                self.session_ends,
                self.logon_total,
            )
        ]
        series += [(self.logon_phase, (phase.value,)) for phase in ConnectPhase]
        series += [
            (self.logon_failures, labels)
            for labels in self._failures_seen.pop((namespace, pool), set())
        ]
        series += [(self.assignments, (reason,)) for reason in ("NewSession", "Reconnected")]
        series += [(self.scale_actions, (way,)) for way in ("up", "down")]
        series += [(self.sessions, (state,)) for state in SESSION_STATES]
        series += [(self.plan_phase, (phase,)) for phase in PLAN_PHASES]
        series += [(self.update_phase, (phase,)) for phase in UPDATE_PHASES]
        series += [(self.update_hosts, (state,)) for state in REVISION_STATES]
        series += [(self.scale_actions, ("update",))]
        series += [
            (self.limit_actions, (limit.value, action.value))
            for limit in SessionLimit
            for action in LimitAction
        ]
        for metric, extra in series:
            with contextlib.suppress(KeyError):  # never observed for this pool
                metric.remove(namespace, pool, *extra)

    def serve(self, address: str) -> None:
        """Serve /metrics and /readyz on ``host:port`` in a background thread. /readyz says
        ``leader`` or ``standby`` (200: synced, it places or can take over at once), or
        ``starting`` / ``stopping`` (503)."""
        host, _, port = address.rpartition(":")
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO") != "/readyz":
                answer: Iterable[bytes] = metrics_app(environ, start_response)
                return answer
            role = self.current_role
            ready = role in ("standby", "leader")
            start_response(
                "200 OK" if ready else "503 Service Unavailable",
                [("Content-Type", "text/plain; charset=utf-8")],
            )
            return [f"{role}\n".encode()]

        server = make_server(
            host or "0.0.0.0", int(port), app, _ThreadingServer, handler_class=_QuietHandler
        )
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line per scrape."""


def package_version() -> str:
    """The installed package's version ("unknown" when run from a source tree)."""
    try:
        return metadata.version("hostpool-operator")
    except metadata.PackageNotFoundError:
        return "unknown"
