"""One use of a desktop ticket across every replica of the broker.

Each replica remembers the tickets it took (``access.tickets.UsedTickets``), which stops a
replay on the same replica at no cost; a replay on another replica is stopped here: taking a
ticket creates a ConfigMap named after it (a hash of its id) and only the first create of a
name succeeds, whichever replica makes it. The record is owned by the SessionRequest the
ticket was for, so the garbage collector removes it with the request: the broker needs only
``create`` on ConfigMaps, never to list, change or delete them. When the record cannot be
written the ticket is refused (fail closed): a ticket nobody can prove unused is not taken."""

from __future__ import annotations

import hashlib
import logging
from typing import Literal

from ...access.tickets import Ticket
from ...access.views import RequestView
from ...api import API_VERSION, SessionRequest
from ...kube.client import KubeClient
from ...kube.errors import ApiError, ApiTransportError

log = logging.getLogger(__name__)

CONFIGMAPS = "configmaps"
PREFIX = "hostpool-web-ticket-"
LABEL = "hostpool.io/web-ticket"

#: What taking a ticket in the cluster came to.
Taken = Literal["Taken", "TicketUsed", "TicketUnchecked"]


def record_name(ticket: Ticket) -> str:
    """The record's name: the id's hash (the id itself is never written anywhere)."""
    return PREFIX + hashlib.sha256(ticket.id.encode()).hexdigest()[:40]


class TicketLedger:
    """Takes tickets in the cluster (None: no cluster, this replica's memory only)."""

    def __init__(self, client: KubeClient | None) -> None:
        self.client = client

    async def take(self, ticket: Ticket, placed: RequestView) -> Taken:
        if self.client is None:
            return "Taken"
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": record_name(ticket),
                "labels": {LABEL: "true"},
                "ownerReferences": [
                    {
                        "apiVersion": API_VERSION,
                        "kind": SessionRequest.kind,
                        "name": placed.name,
                        "uid": placed.uid,
                    }
                ],
            },
            "data": {"expires": str(ticket.expires)},
        }
        try:
            await self.client.create(CONFIGMAPS, ticket.namespace, body, api_version="v1")
        except ApiError as exc:
            if exc.status == 409:
                return "TicketUsed"
            log.warning(
                "a desktop ticket was refused: its use cannot be recorded in %s: %s",
                ticket.namespace,
                exc.message,
            )
            return "TicketUnchecked"
        except ApiTransportError as exc:
            log.warning("a desktop ticket was refused: the API server did not answer: %s", exc)
            return "TicketUnchecked"
        return "Taken"


__all__ = ["PREFIX", "TicketLedger", "record_name"]
