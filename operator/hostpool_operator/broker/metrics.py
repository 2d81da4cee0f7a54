"""The broker's metrics: how long a connect takes, and every answer by code and reason."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

CONNECT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FIRST_FRAME_BUCKETS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 120.0)


class BrokerMetrics:
    def key_fetched(self, ok: bool) -> None:
        self.key_fetches.labels("ok" if ok else "failed").inc()

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.connect_seconds = Histogram(
            "hostpool_broker_connect_seconds",
            "From a connect call to its answer, by status code.",
            ["code"],
            buckets=CONNECT_BUCKETS,
            registry=self.registry,
        )
        self.answers = Counter(
            "hostpool_broker_answers_total",
            "Answers of the broker's API, by endpoint, status code and reason.",
            ["endpoint", "code", "reason"],
            registry=self.registry,
        )
        self.waiting = Gauge(
            "hostpool_broker_waiting_connects",
            "Connects waiting for their request to be placed.",
            registry=self.registry,
        )
        self.key_fetches = Counter(
            "hostpool_broker_issuer_key_fetches",
            "Fetches of the issuer's key set, by result (ok, failed).",
            ["result"],
            registry=self.registry,
        )
        self.skipped = Gauge(
            "hostpool_broker_skipped_objects",
            "Watched objects the broker could not read (left out of its answers).",
            registry=self.registry,
        )
        # The portal page's live updates (broker/live.py).
        self.event_streams = Gauge(
            "hostpool_broker_event_streams",
            "Open /v1/events streams (about one per open portal page).",
            registry=self.registry,
        )
        self.events_sent = Counter(
            "hostpool_broker_events_sent",
            "Events sent on /v1/events streams (a caller's /v1/pools body that changed).",
            registry=self.registry,
        )
        # Desktops in the browser (broker/relay/).
        self.web_open = Gauge(
            "hostpool_broker_web_sessions",
            "Browser desktops relayed right now (open WebSockets of the relay).",
            registry=self.registry,
        )
        self.web_bytes = Counter(
            "hostpool_broker_web_relayed_bytes",
            "Bytes the desktop relay passed on, by direction (to_host, to_browser).",
            ["direction"],
            registry=self.registry,
        )
        self.web_relays = Counter(
            "hostpool_broker_web_relays",
            "Relayed browser desktops that ended, by outcome (Closed, or why refused).",
            ["outcome"],
            registry=self.registry,
        )
        self.web_first_frame = Histogram(
            "hostpool_broker_web_first_frame_seconds",
            "From the click on Connect to the desktop's first frame, as the page reports it.",
            buckets=FIRST_FRAME_BUCKETS,
            registry=self.registry,
        )
        self.logon_credentials = Counter(
            "hostpool_broker_logon_credentials",
            "Single sign-on: one-time logon credentials minted, and calls refused one, by "
            "outcome (Minted, or the refusal's reason).",
            ["outcome"],
            registry=self.registry,
        )
