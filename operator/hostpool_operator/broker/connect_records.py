"""The broker's share of a request's logon diagnostics (``status.connects``): a reconnect's
connect begun, and the relay's transport and the page's first frame written on the connect
under way. Each is one status patch with the request's resourceVersion as precondition (a
concurrent write wins; the figure is dropped, never written over another's). Best effort:
a desktop is never refused because its figures could not be kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..api.request import ConnectPhase
from ..api.vocabulary import REQUESTS
from ..diagnostics import connects
from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError

log = logging.getLogger(__name__)

Connects = list[dict[str, Any]]


async def _rewrite(
    client: KubeClient,
    namespace: str,
    name: str,
    change: Callable[[Sequence[dict[str, Any]]], Connects],
) -> bool:
    """Read the request, change its connects, write them back (True when written)."""
    try:
        current = await client.get(REQUESTS, namespace, name)
        status = current.get("status")
        stored = connects.connects_of(status if isinstance(status, Mapping) else {})
        written = change(stored)
        if written == stored:
            return False
        await client.patch_status(
            REQUESTS, namespace, name, {"connects": written},
            resource_version=current["metadata"]["resourceVersion"],
        )  # fmt: skip
    except (ApiError, ApiTransportError, KeyError, TypeError) as error:
        log.info("%s/%s: connect figures not kept: %s", namespace, name, error)
        return False
    return True


async def begin_reconnect(
    client: KubeClient, namespace: str, name: str, ref: str, clicked: datetime, seconds: float
) -> bool:
    """A connect to a session the caller already has: a connect of its own (True: kept).
    While a connect is still under way this call is part of it (a client asking again while
    it waits, the portal's polls), and nothing is written."""
    phases = {ConnectPhase.BROKER: seconds}

    def change(stored: Sequence[dict[str, Any]]) -> Connects:
        if connects.under_way(stored) is not None:
            return list(stored)
        return connects.begin(stored, ref, clicked, phases, reconnect=True)

    return await _rewrite(client, namespace, name, change)


async def record(
    client: KubeClient, namespace: str, name: str, phases: Mapping[ConnectPhase, float]
) -> bool:
    """The broker's phases (transport, firstFrame) on the request's latest connect: the
    one the page belongs to, even when the host's agent saw the session run (and ended the
    connect) before the page's first frame was reported."""

    def change(stored: Sequence[dict[str, Any]]) -> Connects:
        latest = str(stored[-1].get("ref")) if stored else None
        return connects.record(stored, phases, owner=connects.BROKER_PHASES, ref=latest)

    return await _rewrite(client, namespace, name, change)


async def fail(
    client: KubeClient,
    namespace: str,
    name: str,
    ending: connects.Ending,
) -> bool:
    """The connect under way ended by the broker: Failed in its phase, for its reason."""
    return await _rewrite(
        client, namespace, name,
        lambda stored: connects.record(stored, {}, owner=connects.BROKER_PHASES, ending=ending),
    )  # fmt: skip
