"""The requests assigned to this host, as the agent last read them, and its writes to them.

Session following (``loop``) and the operator's orders (``orders``) read and write the same
requests: each write keeps what the API server returns, so the next step works on the
request as it now is, whichever part wrote it. Every write is a merge patch of the agent's
own status fields.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError
from .sessions import HostRequest

log = logging.getLogger("hostpool_operator.agent")

REQUESTS = "sessionrequests"


@dataclass
class AssignedRequests:
    """The requests assigned to one host."""

    client: KubeClient
    namespace: str
    host: str
    #: The requests assigned to this host as last read (by uid), kept up to date with what
    #: the agent's own writes return.
    by_uid: dict[str, HostRequest] = field(default_factory=dict)
    #: Request uids deleted by this agent, while the API still lists them (pruned to those).
    deleted: set[str] = field(default_factory=set)

    def current(self) -> list[HostRequest]:
        return list(self.by_uid.values())

    async def read(self) -> set[str] | None:
        """Read the requests assigned to this host again; the uids the API listed (deleted
        ones too), or None when it could not be asked (what was read before stays)."""
        try:
            listing = await self.client.list(
                REQUESTS, self.namespace, field_selector=f"status.host={self.host}"
            )
        except (ApiError, ApiTransportError) as error:
            log.warning("could not list the session requests: %s", error)
            return None
        found = []
        listed: set[str] = set()
        for obj in listing["items"]:
            status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
            if status.get("host") != self.host:
                continue
            request = HostRequest.of(obj)
            if request is None:
                continue
            listed.add(request.uid)
            if request.uid not in self.deleted:
                found.append(request)
        self.by_uid = {r.uid: r for r in found}
        self.deleted &= listed
        return listed

    async def write_fields(self, request: HostRequest, fields: Mapping[str, Any]) -> bool:
        """Merge-patch the agent's own fields of the request's status; the request as the
        API server then has it is kept. A write of status.connects (a list, written whole)
        carries the version it was read from: a newer one (the broker's figures) wins."""
        version = request.resource_version if "connects" in fields else None
        try:
            obj = await self.client.patch_status(
                REQUESTS, self.namespace, request.name, fields, resource_version=version or None
            )
        except (ApiError, ApiTransportError) as error:
            log.warning("could not write %s of %s: %s", sorted(fields), request.name, error)
            return False
        self.keep(obj)
        log.debug("wrote %s of %s", fields, request.name)
        return True

    def keep(self, obj: Mapping[str, Any]) -> None:
        updated = HostRequest.of(obj)
        if updated is not None and updated.uid in self.by_uid:
            self.by_uid[updated.uid] = updated

    async def delete(self, request: HostRequest) -> bool:
        """Delete exactly this request (never a namesake), once. True when it is gone."""
        if request.uid in self.deleted:
            return True
        try:
            await self.client.delete(REQUESTS, self.namespace, request.name, uid=request.uid)
        except ApiError as error:
            if error.status not in (404, 409):  # gone already, or a namesake: nothing to do
                log.warning("could not delete %s: %s", request.name, error)
                return False
        except ApiTransportError as error:
            log.warning("could not delete %s: %s", request.name, error)
            return False
        self.deleted.add(request.uid)
        return True
