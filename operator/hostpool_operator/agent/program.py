"""`hostpool-agent`'s start-up: its flags, the address it reports, and the loop (``loop``)
run as a program (its API client, logging, signals)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import socket
import sys
from collections.abc import Sequence
from urllib.parse import urlparse

from ..api.address import ADDRESS_RULE, is_host_address
from ..kube.program import Program, Running, add_logging_flags, pod_namespace, run
from .loop import Agent
from .options import AgentOptions

log = logging.getLogger("hostpool_operator.agent")


def local_address(server: str) -> str | None:
    """The machine's address on the way to the API server (what clients can reach)."""
    parsed = urlparse(server)
    host = parsed.hostname
    if not host:
        return None
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((host, parsed.port or 443))  # UDP: no packet is sent
        address: str = sock.getsockname()[0]
        return address
    return None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hostpool-agent",
        description="Report this session host's load and sessions to its SessionHost.",
    )
    parser.add_argument("--host", required=True, help="the SessionHost this machine is")
    parser.add_argument(
        "--namespace", default=None, help="its namespace (default: the pod's, else default)"
    )
    parser.add_argument(
        "--interval", type=float, default=30.0, help="seconds between reports (default 30)"
    )
    parser.add_argument("--load-script", help="prints this host's load, 0..100, first line")
    parser.add_argument(
        "--sessions-command",
        help='prints one JSON object a line: {"user": ..., "state": "Active"|"Disconnected"} '
        "(default: the machine's logged-in users, as Active)",
    )
    parser.add_argument(
        "--sessions-from",
        choices=("users", "xrdp"),
        default="users",
        help="without --sessions-command: the machine's logged-in users (all Active; default) "
        "or the sessions of the xrdp beside the agent (Active while a client is attached, "
        "Disconnected while none is; a logoff without --logoff-command ends the session)",
    )
    parser.add_argument("--notify-command", help="tells a user of a forced logoff")
    parser.add_argument("--logoff-command", help="logs a user off at the deadline")
    parser.add_argument(
        "--disconnect-command",
        help="disconnects a user and keeps the session (HOSTPOOL_USER); without it, on an "
        "xrdp host, xrdp's connection to the session ends",
    )
    parser.add_argument(
        "--command-timeout", type=float, default=10.0, help="seconds any command may take"
    )
    parser.add_argument(
        "--logon-state",
        help="the single sign-on verifier's state directory (hostpool-logon --state): each "
        "logon it refuses becomes a LogonRefused or HomeOwnedByAnotherUser Event",
    )
    parser.add_argument(
        "--rdp-certificate",
        help="the host's RDP TLS certificate (PEM), whose SHA-256 the agent publishes for the "
        "broker's browser relay to pin; with --sessions-from xrdp a path as the xrdp beside "
        "the agent sees it (default: what its /etc/xrdp/xrdp.ini names, else "
        "/etc/xrdp/cert.pem); otherwise a path here (default: none published)",
    )
    parser.add_argument(
        "--address",
        help="the address clients use: an IP address (IPv6 without brackets) or a DNS name "
        "(default: detected)",
    )
    add_logging_flags(parser)
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error("--interval must be positive")
    if args.address is not None and not is_host_address(args.address):
        parser.error(f"--address: {args.address[:64]!r} is not {ADDRESS_RULE}")
    return args


AGENT = Program("agent", max_connections=4)


async def amain(args: argparse.Namespace, running: Running) -> int:
    options = AgentOptions(
        host=args.host,
        namespace=args.namespace or pod_namespace(),
        interval=args.interval,
        load_script=args.load_script,
        sessions_command=args.sessions_command,
        notify_command=args.notify_command,
        logoff_command=args.logoff_command,
        disconnect_command=args.disconnect_command,
        command_timeout=args.command_timeout,
        address=args.address,
        sessions_from=args.sessions_from,
        logon_state=args.logon_state,
        rdp_certificate=args.rdp_certificate,
    )
    address = args.address or local_address(running.server)
    if address is not None and not is_host_address(address):
        # Never the case for an address the socket reports; checked all the same, since
        # the API server would refuse the whole status write.
        log.warning("the detected address %r is not %s: reporting none", address, ADDRESS_RULE)
        address = None
    await Agent(running.client, options, address=address).run(running.stop)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run(AGENT, args, lambda running: amain(args, running))


if __name__ == "__main__":
    sys.exit(main())
