"""``hostpool-operator run``: the operator, with ``ControllerSettings`` from the flags."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..controller.settings import ControllerSettings, LeaseSettings
from .errors import CliError, UsageError

if TYPE_CHECKING:
    from ..controller.metrics import PrometheusMetrics


def command(args: argparse.Namespace) -> int:
    from ..controller import handlers
    from ..logs import setup_logging

    settings = settings_of(args)
    setup_logging(json_logs=args.log_format == "json", verbose=args.verbose)
    return handlers.run(
        args.namespace or [],
        settings,
        liveness_endpoint=args.liveness,
        metrics=_serve_metrics(args.metrics_address) if args.metrics_address else None,
        lease=None
        if args.no_leader_election
        else LeaseSettings(
            namespace=args.lease_namespace,
            duration=args.lease_duration,
            renew_deadline=args.lease_renew_deadline,
            retry_period=args.lease_retry_period,
        ),
    )


def settings_of(args: argparse.Namespace) -> ControllerSettings:
    """The settings of ``run``'s flags; ``UsageError`` for a value the operator cannot run
    with (a zero interval or no writes in flight would stall it, a zero Lease lose it)."""
    for flag, value in (
        ("--status-interval", args.status_interval),
        ("--metrics-stale-after", args.metrics_stale_after),
        ("--logoff-grace", args.logoff_grace),
        ("--lease-duration", args.lease_duration),
        ("--lease-renew-deadline", args.lease_renew_deadline or 1),
        ("--lease-retry-period", args.lease_retry_period or 1),
        ("--write-concurrency", args.write_concurrency),
        ("--status-concurrency", args.status_concurrency),
    ):
        if not value > 0:
            raise UsageError(f"{flag} must be positive, not {value:g}")
    deadline = args.lease_renew_deadline
    if deadline is not None and deadline >= args.lease_duration:
        raise UsageError(
            f"--lease-renew-deadline {deadline:g} must be shorter than --lease-duration "
            f"{args.lease_duration:g}: the leader must stop writing before a standby may take over"
        )
    if args.metrics_address:
        _, colon, port = args.metrics_address.rpartition(":")
        if not colon or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(
                f"--metrics-address {args.metrics_address!r}: give HOST:PORT, e.g. 0.0.0.0:9090"
            )
    return ControllerSettings(
        status_interval=args.status_interval,
        metrics_stale_after=args.metrics_stale_after,
        logoff_grace=args.logoff_grace,
        write_concurrency=args.write_concurrency,
        status_concurrency=args.status_concurrency,
        prefer_updated=args.update_placement == "prefer-updated",
    )


def _serve_metrics(address: str) -> PrometheusMetrics:
    from ..controller.metrics import PrometheusMetrics

    metrics = PrometheusMetrics()
    try:
        metrics.serve(address)
    except OSError as error:
        raise CliError(
            f"--metrics-address {address}: cannot listen: {error.strerror or error}"
        ) from None
    return metrics
