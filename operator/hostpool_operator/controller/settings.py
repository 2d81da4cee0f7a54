"""The operator's tunables (command-line options), in one immutable record."""

from __future__ import annotations

from dataclasses import dataclass

#: The leader-election Lease (see ``leader``): a kill -9'd leader is replaced within
#: LEASE_DURATION + 2 x RETRY_PERIOD; the leader writes nothing RENEW_DEADLINE after its last
#: renewal was sent, LEASE_DURATION - RENEW_DEADLINE before a standby may take over.
LEASE_DURATION = 4.0
RENEW_DEADLINE = 3.0
RETRY_PERIOD = 0.5


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """Leader election: where the Lease is and how it is held (see ``leader``)."""

    #: The Lease's namespace (None: the operator's own, else the first watched, else default).
    namespace: str | None = None
    duration: float = LEASE_DURATION
    #: None: derived from the duration (``leader.renew_deadline_for``, ``retry_period_for``).
    renew_deadline: float | None = None
    retry_period: float | None = None


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    #: Pool and host status are written at most this often (seconds).
    status_interval: float = 1.0
    #: Host metrics sampled longer ago than this are stale: treated as never reported.
    metrics_stale_after: float = 120.0
    #: A forced logoff (status.logoff) still there this long after its deadline was carried
    #: out by nobody (the host's agent is silent or gone): the operator deletes the request.
    #: Long enough for a live agent's retries of a failing logoff (2 s, doubling).
    logoff_grace: float = 300.0
    #: Host status waits for this long without placements, or at most host_status_max_delay.
    host_status_max_delay: float = 30.0
    #: During placements, a pool status whose only changes are counts waits at most this long
    #: (a change of a condition's status or reason is written within status_interval).
    pool_status_max_delay: float = 5.0
    #: ... and "during placements" means: the pool placed within this many seconds (None:
    #: three status intervals); host status waits for the same pause. A pause shorter than
    #: this is no pause: a storm spread over many pools leaves each pool a gap of a second
    #: now and then, and each gap was a pool status write (1.9 API writes per assignment
    #: over 100 busy pools, where one pool's storm needs 1.1) and a write of its hosts.
    pool_status_quiet: float | None = None

    @property
    def pool_quiet(self) -> float:
        quiet = self.pool_status_quiet
        return 3 * self.status_interval if quiet is None else quiet

    #: Request status writes in flight at once, shared by all pools in turn. More is not
    #: faster: every write in flight is a goroutine in the API server, and the watch that
    #: delivers new requests (to this operator too) lags as they multiply
    #: (docs/performance.md: 256 was slower than 128).
    write_concurrency: int = 128
    #: Pool and host status writes in flight at once, shared by all pools in turn (their own
    #: slots, so they never take one from a request). At start every pool and host may need
    #: a write (11,000 at 1,000 pools x 10 hosts): unbounded, each would hold a connection
    #: of its own (TLS buffers in this process, a goroutine in the API server) and slow the
    #: first placements down.
    status_concurrency: int = 16
    #: The same Event (object, reason) is posted at most this often (seconds).
    event_interval: float = 30.0
    #: During an image update new sessions go to updated hosts first; False places as if
    #: no update ran (``--update-placement ignore-revisions``: for comparison benches only).
    prefer_updated: bool = True
