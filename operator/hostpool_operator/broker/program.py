"""``hostpool-broker``: parse the flags, log in to the API, start the watches and the issuer
key set, serve until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
import sys
from collections.abc import Sequence

from aiohttp import web

from ..kube.program import Program, Running, add_logging_flags, run
from .app import Broker, BrokerSettings
from .directory import Directory
from .metrics import BrokerMetrics
from .oidc import MAX_TOKEN, OidcSettings, TokenVerifier

log = logging.getLogger("hostpool_operator.broker")

#: Longest header line taken (the broker refuses tokens past MAX_TOKEN itself).
MAX_HEADER = 4 * MAX_TOKEN

#: How often the issuer's key set is fetched while the broker has none (at start, or an
#: issuer that was down).
KEYLESS_RETRY = 5.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hostpool-broker",
        description="Where users log on: OIDC sign-in, pool entitlements, the .rdp hand-off.",
    )
    parser.add_argument("--oidc-issuer", required=True, help="the issuer URL of the tokens")
    parser.add_argument("--oidc-audience", required=True, help="the client id tokens are for")
    parser.add_argument("--oidc-ca-file", help="CA bundle for the issuer's HTTPS")
    parser.add_argument(
        "--oidc-key-refetch-seconds",
        type=float,
        default=60.0,
        help="least time between fetches of the issuer's keys for an unknown key id",
    )
    parser.add_argument("--user-claim", default="preferred_username")
    parser.add_argument("--groups-claim", default="groups")
    parser.add_argument("--listen", default="0.0.0.0:8443", help="HOST:PORT")
    parser.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="and this key (PEM)")
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="a namespace whose pools are offered (repeat; default: every namespace)",
    )
    parser.add_argument("--connect-timeout-seconds", type=float, default=30.0)
    parser.add_argument(
        "--metrics-stale-after",
        type=float,
        default=120.0,
        help="seconds after which a host's agent figures are stale (as the operator's flag): "
        "ending a session there deletes the request instead of asking the silent agent",
    )
    parser.add_argument(
        "--rate-limit", type=float, default=5.0, help="calls per second per user (after burst)"
    )
    parser.add_argument("--rate-burst", type=int, default=20, help="calls at once per user")
    add_logging_flags(parser)
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        parser.error("--listen must be HOST:PORT")
    args.listen_host, args.listen_port = host.strip("[]") or "0.0.0.0", int(port)
    if not 0 < args.connect_timeout_seconds <= 300:
        parser.error("--connect-timeout-seconds must be in (0, 300]")
    if not args.metrics_stale_after > 0:
        parser.error("--metrics-stale-after must be > 0")
    if args.oidc_key_refetch_seconds < 0:
        parser.error("--oidc-key-refetch-seconds must be >= 0")
    if args.rate_limit <= 0 or args.rate_burst < 1:
        parser.error("--rate-limit must be > 0 and --rate-burst >= 1")
    return args


async def _keys_until_ready(verifier: TokenVerifier) -> None:
    """Fetch the issuer's keys until there is a set (an issuer down at start is retried)."""
    while True:
        await verifier.refresh()
        if verifier.ready:
            return
        await asyncio.sleep(KEYLESS_RETRY)


# uvloop, as the operator: in a logon storm the broker's HTTP serving is its CPU.
BROKER = Program("broker", max_connections=64, uvloop=True)


async def amain(args: argparse.Namespace, running: Running) -> int:
    metrics = BrokerMetrics()
    verifier = TokenVerifier(
        OidcSettings(
            issuer=args.oidc_issuer,
            audience=args.oidc_audience,
            user_claim=args.user_claim,
            groups_claim=args.groups_claim,
            ca_file=args.oidc_ca_file,
            refetch_interval=args.oidc_key_refetch_seconds,
        ),
        on_fetch=metrics.key_fetched,
    )
    tls: ssl.SSLContext | None = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    directory = Directory(running.client, args.namespace or None)
    broker = Broker(
        directory,
        verifier,
        BrokerSettings(
            connect_timeout=args.connect_timeout_seconds,
            agent_stale_after=args.metrics_stale_after,
            rate=args.rate_limit,
            burst=args.rate_burst,
        ),
        metrics,
    )
    # Headers up to MAX_HEADER: a token of a user in many groups is long, and one the
    # broker refuses itself (401, "too long") is better than aiohttp's bare 400.
    runner = web.AppRunner(
        broker.app(), access_log=None, handle_signals=False, max_field_size=MAX_HEADER
    )
    await runner.setup()
    site = web.TCPSite(runner, args.listen_host, args.listen_port, ssl_context=tls)
    await site.start()
    log.info(
        "broker listening on %s:%d (%s), issuer %s, namespaces %s",
        args.listen_host,
        args.listen_port,
        "https" if tls else "http",
        verifier.issuer,
        ", ".join(args.namespace) or "all",
    )
    tasks = [
        asyncio.create_task(directory.run(), name="watches"),
        asyncio.create_task(_keys_until_ready(verifier), name="issuer-keys"),
    ]
    stopping = asyncio.create_task(running.stop.wait())
    try:
        done, _ = await asyncio.wait([stopping, tasks[0]], return_when=asyncio.FIRST_COMPLETED)
        if tasks[0] in done:
            tasks[0].result()  # the watches never end on their own: say why they did
    finally:
        for task in [*tasks, stopping]:
            task.cancel()
        await runner.cleanup()
        await verifier.close()
    return 0


class _WithoutRequestDetails(logging.Filter):
    """aiohttp logs a request it cannot parse with the parser's error, which quotes the
    offending header: that can be an Authorization header. Logged without it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info or "Error handling request" in str(record.msg):
            error = record.exc_info[1] if record.exc_info else None
            record.msg = "refused a malformed HTTP request (%s)"
            record.args = (type(error).__name__ if error else "unknown",)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.getLogger("aiohttp.server").addFilter(_WithoutRequestDetails())
    return run(BROKER, args, lambda running: amain(args, running))


if __name__ == "__main__":
    sys.exit(main())
