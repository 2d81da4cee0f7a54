"""What every program does around its own work: logging set up from its flags, a login to the
API (in-cluster, else the kubeconfig), one client, SIGTERM and SIGINT turned into a stop
event, and the client closed however the program ends.

The agent and the broker run under :func:`run`. The controller leaves its process to kopf
(login handler, probes, signals, start-up and clean-up) and shares :func:`connect`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import kopf
import uvloop

from ..logs import setup_logging
from .auth import SERVICE_ACCOUNT_TOKEN, login, token_file
from .client import KubeClient
from .sinks import MetricsSink

SERVICE_ACCOUNT_DIR = Path(SERVICE_ACCOUNT_TOKEN).parent

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Program:
    """How a program runs."""

    #: As the log names it ("agent", "broker").
    name: str
    #: Of its client: requests in flight at once.
    max_connections: int
    #: uvloop rather than asyncio's own loop (where serving or watching is the CPU).
    uvloop: bool = False


@dataclass(frozen=True, slots=True)
class Running:
    """What a program's body is given."""

    client: KubeClient
    #: The API server's URL, as the login found it.
    server: str
    #: Set on SIGTERM or SIGINT: the body returns soon after.
    stop: asyncio.Event


Body = Callable[[Running], Awaitable[int]]


def pod_namespace() -> str:
    """The namespace of the pod this runs in (its ServiceAccount's), else ``default``."""
    with contextlib.suppress(OSError), open(SERVICE_ACCOUNT_DIR / "namespace") as handle:
        return handle.read().strip() or "default"
    return "default"


def add_logging_flags(parser: argparse.ArgumentParser) -> None:
    """``--log-format`` and ``--verbose``, which :func:`run` reads (and the operator's
    ``run`` command, whose process kopf runs)."""
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")


def connect(
    info: kopf.ConnectionInfo, max_connections: int, metrics: MetricsSink | None = None
) -> KubeClient:
    """A client for this login whose token is re-read from its file (in-cluster, or a
    kubeconfig's ``tokenFile``): the kubelet rotates projected tokens, and a token read
    once is refused an hour or so later."""
    return KubeClient(
        info, max_connections=max_connections, token_file=token_file(), metrics=metrics
    )


def run(program: Program, args: argparse.Namespace, body: Body) -> int:
    """Run ``body`` with a logged-in client until it returns its exit code; ``args`` hold
    the flags of :func:`add_logging_flags`."""
    # Stopped before the stop event is in place (while logging in): a clean exit, not a kill.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # SIGUSR1 prints every thread's stack to stderr: where a process that does not stop is.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    setup_logging(json_logs=args.log_format == "json", verbose=args.verbose)
    runner = uvloop.run if program.uvloop else asyncio.run
    return runner(_main(program, body))


async def _main(program: Program, body: Body) -> int:
    info = login()  # a SIGTERM meanwhile still exits at once (see run)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # Windows: Ctrl-C still stops it
            loop.add_signal_handler(signum, stop.set)
    async with connect(info, program.max_connections) as client:
        code = await body(Running(client, info.server, stop))
    log.info("%s stopped", program.name)
    return code
