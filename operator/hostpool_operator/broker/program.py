"""``hostpool-broker``: parse the flags, log in to the API, start the watches and the issuer
key set, serve until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from ..kube.program import Program, Running, add_logging_flags, pod_namespace, run
from ..logon.credential import MAX_LIFETIME, public_pem
from .app import Broker, BrokerSettings
from .directory import Directory
from .logon_keys import LogonKeyPublisher
from .metrics import BrokerMetrics
from .oidc import OidcSettings, TokenVerifier
from .relay.client_files import web_client_files
from .relay.open_desktops import PER_USER, TOTAL
from .relay.routes import WebSettings
from .serving import HEAD_TIMEOUT, HeadLimits, ReloadingCertificate, serve
from .signin.cookies import derive_key
from .signin.flow import Portal, PortalSettings
from .signin.sign_outs import SharedRecord
from .signin.urls import origin_of
from .signon import DEFAULT_LIFETIME, SignOnSettings, read_key

log = logging.getLogger("hostpool_operator.broker")
#: A ConfigMap's name (an RFC 1123 DNS subdomain).
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hostpool-broker",
        description="Where users log on: OIDC sign-in, pool entitlements, the .rdp hand-off.",
    )
    parser.add_argument(
        "--oidc-issuer",
        required=True,
        help="the issuer URL of the tokens, exactly as their iss claim has it (https)",
    )
    parser.add_argument(
        "--oidc-allow-insecure-issuer",
        action="store_true",
        help="accept an http:// issuer (keys fetched without TLS: for tests only)",
    )
    parser.add_argument("--oidc-audience", required=True, help="the client id tokens are for")
    parser.add_argument(
        "--oidc-authorized-party",
        action="append",
        default=[],
        help="a client id a token's azp may name (repeat; default: any)",
    )
    parser.add_argument("--oidc-ca-file", help="CA bundle for the issuer's HTTPS")
    parser.add_argument(
        "--oidc-key-refetch-seconds",
        type=float,
        default=60.0,
        help="least time between fetches of the issuer's keys for an unknown key id",
    )
    parser.add_argument(
        "--oidc-keys-max-age-seconds",
        type=float,
        default=300.0,
        help="how long a fetched key set is used before it is fetched again",
    )
    parser.add_argument(
        "--oidc-keys-max-stale-seconds",
        type=float,
        default=3600.0,
        help="how long past its max age the last key set is trusted while fetches fail",
    )
    parser.add_argument(
        "--user-claim",
        default="preferred_username",
        help="the claim naming the user (see docs/broker.md: sub is the stable one)",
    )
    parser.add_argument("--groups-claim", default="groups")
    parser.add_argument("--listen", default="0.0.0.0:8443", help="HOST:PORT")
    parser.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="and this key (PEM)")
    _add_serving_flags(parser)
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
    _add_portal_flags(parser)
    _add_web_flags(parser)
    _add_signon_flags(parser)
    add_logging_flags(parser)
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    _check_serving_flags(parser, args)
    if not 0 < args.connect_timeout_seconds <= 300:
        parser.error("--connect-timeout-seconds must be in (0, 300]")
    if not args.metrics_stale_after > 0:
        parser.error("--metrics-stale-after must be > 0")
    if problem := _issuer_problem(args.oidc_issuer, args.oidc_allow_insecure_issuer):
        parser.error(f"--oidc-issuer {args.oidc_issuer!r}: {problem}")
    if args.oidc_key_refetch_seconds < 0:
        parser.error("--oidc-key-refetch-seconds must be >= 0")
    if not args.oidc_keys_max_age_seconds > 0:
        parser.error("--oidc-keys-max-age-seconds must be > 0")
    if not args.oidc_keys_max_stale_seconds >= 0:
        parser.error("--oidc-keys-max-stale-seconds must be >= 0")
    if not all(args.oidc_authorized_party):
        parser.error("--oidc-authorized-party must not be empty")
    if args.rate_limit <= 0 or args.rate_burst < 1:
        parser.error("--rate-limit must be > 0 and --rate-burst >= 1")
    _check_portal_flags(parser, args)
    _check_web_flags(parser, args)
    _check_signon_flags(parser, args)
    return args


def _add_signon_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--logon-key-file",
        help="single sign-on: the broker's Ed25519 private key (PEM) that signs one-time logon "
        "credentials for pools with connection.singleSignOn (the hosts trust its public half)",
    )
    parser.add_argument(
        "--logon-credential-seconds",
        type=int,
        default=DEFAULT_LIFETIME,
        help=f"how long a logon credential is good for (1..{MAX_LIFETIME}; default "
        f"{DEFAULT_LIFETIME})",
    )
    parser.add_argument(
        "--uid-claim",
        help="the token claim naming the user's uid (e.g. uidNumber); default: the broker "
        "allocates uids and records them in --uid-namespace",
    )
    parser.add_argument(
        "--logon-public-keys-configmap",
        metavar="NAME",
        help="publish the public half of --logon-key-file as ConfigMap NAME (key keys.pem) in "
        "each --namespace (default: the pod's), for the session hosts to mount; a new key is "
        "put first and the one before it kept, so both are trusted while a new key rolls out",
    )
    parser.add_argument(
        "--uid-namespace",
        help="where the broker records the uids it allocates (ConfigMaps uid-*); default: "
        "the pod's namespace when --logon-key-file is given without --uid-claim",
    )


def _check_signon_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The logon key and the uid source as args.signon and args.uid_namespace."""
    if not 1 <= args.logon_credential_seconds <= MAX_LIFETIME:
        parser.error(f"--logon-credential-seconds must be in 1..{MAX_LIFETIME}")
    key = None
    if args.logon_key_file:
        try:
            key = read_key(Path(args.logon_key_file))
        except ValueError as exc:
            parser.error(f"--logon-key-file: {exc}")
    if args.uid_claim is not None and not args.uid_claim.strip():
        parser.error("--uid-claim must not be empty")
    if args.logon_public_keys_configmap is not None:
        if key is None:
            parser.error("--logon-public-keys-configmap needs --logon-key-file")
        if not _DNS_NAME.fullmatch(args.logon_public_keys_configmap):
            parser.error("--logon-public-keys-configmap must be a ConfigMap name (DNS subdomain)")
    if key is not None and args.uid_claim is None and args.uid_namespace is None:
        args.uid_namespace = pod_namespace()
    args.signon = SignOnSettings(key=key, lifetime=args.logon_credential_seconds)


def _add_web_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--web-client-dir",
        help="the browser's RDP client as hack/portal/web-client.sh installs it: serve it "
        "and relay pools with connection.web to their hosts (default: no browser desktops)",
    )
    parser.add_argument(
        "--max-web-desktops-per-user",
        type=int,
        default=PER_USER,
        help=f"browser desktops one user may have open at once through this replica (default "
        f"{PER_USER}; more are refused 429 TooManyDesktops)",
    )
    parser.add_argument(
        "--max-web-desktops",
        type=int,
        default=TOTAL,
        help=f"browser desktops this replica relays at once (default {TOTAL}; more are "
        "refused 503 RelayBusy)",
    )
    parser.add_argument(
        "--ticket-secret-file",
        help="file holding the desktop relay's ticket secret (32+ random bytes, the same for "
        "every replica); default: the cookie secret, else a random one of this replica",
    )


def _check_web_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The web client's directory and the tickets' secret as args.web (WebSettings)."""
    client_dir = Path(args.web_client_dir) if args.web_client_dir else None
    if client_dir is not None and not web_client_files(client_dir):
        parser.error(f"--web-client-dir {args.web_client_dir}: no web client there")
    secret_file = args.ticket_secret_file or args.cookie_secret_file
    secret = None
    if secret_file:
        try:
            secret = Path(secret_file).read_bytes().strip()
        except OSError as exc:
            parser.error(f"--ticket-secret-file: {exc}")
        if len(secret) < 32:
            parser.error(f"{secret_file}: the ticket secret must be at least 32 bytes")
    if args.max_web_desktops_per_user < 1 or args.max_web_desktops < 1:
        parser.error("--max-web-desktops-per-user and --max-web-desktops must be at least 1")
    args.web = WebSettings(
        client_dir=client_dir,
        ticket_secret=secret,
        max_per_user=args.max_web_desktops_per_user,
        max_total=args.max_web_desktops,
    )


def _add_portal_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--portal-client-id",
        help="serve the portal (sign-in at /auth/login): the OIDC client id it signs in with; "
        "with --portal-client-secret-file and --cookie-secret-file",
    )
    parser.add_argument(
        "--portal-client-secret-file", help="file holding the portal client's secret"
    )
    parser.add_argument(
        "--cookie-secret-file",
        help="file holding the cookie secret (at least 32 random bytes; the same for every "
        "replica): the portal's session cookies are sealed with it",
    )
    parser.add_argument(
        "--public-url",
        help="the URL browsers reach the broker at, scheme://host[:port] (default: "
        "http(s)://<--listen>); its /auth/callback is the redirect URI to register",
    )
    parser.add_argument(
        "--portal-session-hours",
        type=float,
        default=10.0,
        help="a portal session ends this long after sign-in, refreshed or not",
    )
    parser.add_argument(
        "--sign-outs-configmap",
        default="hostpool-portal-sign-outs",
        metavar="NAME",
        help="the ConfigMap where replicas share the portal sessions that ended (sign-out, a "
        "refresh refused), so each refuses them within seconds; empty: this replica alone",
    )
    parser.add_argument(
        "--sign-outs-namespace",
        help="its namespace (default: the first --namespace, else the pod's)",
    )


def _check_portal_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """All three portal flags or none; the public URL an origin (default from --listen)."""
    given = [
        bool(args.portal_client_id),
        bool(args.portal_client_secret_file),
        bool(args.cookie_secret_file),
    ]
    if any(given) and not all(given):
        parser.error(
            "--portal-client-id, --portal-client-secret-file and --cookie-secret-file go together"
        )
    args.portal = all(given)
    if not 0 < args.portal_session_hours <= 24 * 30:
        parser.error("--portal-session-hours must be in (0, 720]")
    if args.public_url is None:
        scheme = "https" if args.tls_cert else "http"
        host = args.listen_host
        host = f"[{host}]" if ":" in host else host
        args.public_url = f"{scheme}://{host}:{args.listen_port}"
    public = args.public_url.rstrip("/")
    if origin_of(public) is None or urllib.parse.urlsplit(public).path not in ("", "/"):
        parser.error("--public-url must be http(s)://host[:port], without a path")
    args.public_url = origin_of(public)
    args.portal_settings = None
    if args.portal:
        try:
            args.portal_settings = portal_settings(args)
        except (OSError, ValueError) as exc:
            parser.error(f"portal: {exc}")


def portal_settings(args: argparse.Namespace) -> PortalSettings:
    """The portal's settings from the parsed flags and the secret files (OSError, ValueError
    when a file cannot be read or the cookie secret is too short)."""
    client_secret = Path(args.portal_client_secret_file).read_text().strip()
    if not client_secret:
        raise ValueError(f"{args.portal_client_secret_file} is empty")
    return PortalSettings(
        client_id=args.portal_client_id,
        client_secret=client_secret,
        cookie_key=derive_key(Path(args.cookie_secret_file).read_bytes()),
        public_url=args.public_url,
        session_seconds=args.portal_session_hours * 3600.0,
        log_users=args.log_users,
    )


def _add_serving_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-listen",
        default="",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on /metrics there, e.g. 0.0.0.0:9090 (default: none); "
        "never on the API's port",
    )
    parser.add_argument(
        "--header-timeout-seconds",
        type=float,
        default=HEAD_TIMEOUT,
        help="a request's headers must arrive within this time, or the connection is closed",
    )
    parser.add_argument(
        "--log-users",
        action="store_true",
        help="name the user in the log line of each connect (default: not logged)",
    )


def _check_serving_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--listen and --metrics-listen as (host, port) in listen_host, listen_port and
    metrics_address; the header timeout in range."""
    address = _address(args.listen)
    if address is None:
        parser.error("--listen must be HOST:PORT")
    args.listen_host, args.listen_port = address
    args.metrics_address = _address(args.metrics_listen) if args.metrics_listen else None
    if args.metrics_listen and args.metrics_address is None:
        parser.error("--metrics-listen must be HOST:PORT")
    if args.metrics_address is not None and args.metrics_address[1] == args.listen_port:
        parser.error("--metrics-listen must be another port than --listen")
    if not 0 < args.header_timeout_seconds <= 300:
        parser.error("--header-timeout-seconds must be in (0, 300]")


def _address(text: str) -> tuple[str, int] | None:
    """(host, port) of HOST:PORT (an empty host: every address), None if it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]") or "0.0.0.0", int(port)


def _issuer_problem(issuer: str, allow_http: bool) -> str | None:
    """What is wrong with an issuer URL (None: nothing): https, a host, no query, fragment
    or user (OpenID Connect Discovery 3); plain http only when allowed by name."""
    scheme, sep, rest = issuer.partition("://")
    host = rest.split("/", 1)[0]
    if not sep or scheme not in ("https", "http") or not host:
        return "must be an https:// URL with a host"
    if any(c in issuer for c in "?#") or "@" in host:
        return "must not carry a query, a fragment or a user"
    if scheme == "http" and not allow_http:
        return (
            "is plain http: tokens would be checked with keys fetched without TLS "
            "(use https, or --oidc-allow-insecure-issuer for a test issuer)"
        )
    return None


def oidc_settings(args: argparse.Namespace) -> OidcSettings:
    """The verifier's settings from the parsed flags."""
    return OidcSettings(
        issuer=args.oidc_issuer,
        audience=args.oidc_audience,
        user_claim=args.user_claim,
        groups_claim=args.groups_claim,
        ca_file=args.oidc_ca_file,
        refetch_interval=args.oidc_key_refetch_seconds,
        authorized_parties=tuple(args.oidc_authorized_party),
        keys_max_age=args.oidc_keys_max_age_seconds,
        keys_max_stale=args.oidc_keys_max_stale_seconds,
        uid_claim=args.uid_claim,
    )


# uvloop, as the operator: in a logon storm the broker's HTTP serving is its CPU.
BROKER = Program("broker", max_connections=64, uvloop=True)


async def amain(args: argparse.Namespace, running: Running) -> int:
    metrics = BrokerMetrics()
    verifier = TokenVerifier(oidc_settings(args), on_fetch=metrics.key_fetched)
    # Read again for new connections when the files change (cert-manager renews it).
    tls = ReloadingCertificate(args.tls_cert, args.tls_key) if args.tls_cert else None
    directory = Directory(running.client, args.namespace or None)
    portal = Portal(verifier, args.portal_settings) if args.portal_settings else None
    broker = Broker(
        directory,
        verifier,
        BrokerSettings(
            connect_timeout=args.connect_timeout_seconds,
            agent_stale_after=args.metrics_stale_after,
            rate=args.rate_limit,
            burst=args.rate_burst,
            log_users=args.log_users,
            web=args.web,
            signon=args.signon,
            uid_namespace=args.uid_namespace,
        ),
        metrics,
        portal,
    )
    listening = await _listen(broker, args, tls)
    log.info(
        "broker listening on %s:%d (%s), metrics on %s, issuer %s, namespaces %s",
        args.listen_host,
        args.listen_port,
        f"https, certificate {args.tls_cert}" if tls else "http",
        ":".join(map(str, args.metrics_address or ())) or "no address",
        verifier.issuer,
        ", ".join(args.namespace) or "all",
    )
    if portal is not None:
        log.info("portal at %s (client %s)", args.public_url, args.portal_client_id)
        if args.sign_outs_configmap:
            namespace = args.sign_outs_namespace or (args.namespace or [pod_namespace()])[0]
            portal.sign_outs.shared = SharedRecord(
                running.client, namespace, args.sign_outs_configmap
            )
    tasks = [
        asyncio.create_task(directory.run(), name="watches"),
        asyncio.create_task(verifier.keep_fresh(), name="issuer-keys"),
    ]
    if portal is not None:
        tasks.append(asyncio.create_task(portal.sign_outs.run(), name="sign-outs"))
    if args.logon_public_keys_configmap and args.signon.key is not None:
        publisher = LogonKeyPublisher(
            running.client,
            args.namespace or [pod_namespace()],
            args.logon_public_keys_configmap,
            public_pem(args.signon.key),
        )
        tasks.append(asyncio.create_task(publisher.run(), name="logon-keys"))
    stopping = asyncio.create_task(running.stop.wait())
    try:
        done, _ = await asyncio.wait([stopping, tasks[0]], return_when=asyncio.FIRST_COMPLETED)
        if tasks[0] in done:
            tasks[0].result()  # the watches never end on their own: say why they did
    finally:
        for task in [*tasks, stopping]:
            task.cancel()
        for server, _ in listening:
            server.close()
        for _, runner in listening:
            await runner.cleanup()
        await verifier.close()
    return 0


async def _listen(
    broker: Broker, args: argparse.Namespace, tls: ReloadingCertificate | None
) -> list[tuple[asyncio.AbstractServer, web.AppRunner]]:
    """The API on --listen and, with --metrics-listen, the metrics on their own address,
    both with the head limits (see ``serving``)."""
    limits = HeadLimits(timeout=args.header_timeout_seconds)
    answers = broker.metrics.answers
    listening = []
    for app, (host, port), context in (
        (broker.app(), (args.listen_host, args.listen_port), tls.context if tls else None),
        *([(broker.metrics_app(), args.metrics_address, None)] if args.metrics_address else []),
    ):
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        server = await serve(
            runner,
            host,
            port,
            tls=context,
            limits=limits,
            on_refusal=lambda status, reason: answers.labels("other", str(status), reason).inc(),
        )
        listening.append((server, runner))
    return listening


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
