"""core/v1 Events about the project's objects: the body, and posting one through the client.

Failures are logged, never raised: an Event is a courtesy to people reading
``kubectl describe``, never a reason to stop a decision.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from ..api import API_VERSION
from ..api.timestamps import rfc3339
from .client import JSON, KubeClient
from .errors import ApiError, ApiTransportError

log = logging.getLogger(__name__)


async def post_event(
    client: KubeClient,
    involved: Mapping[str, Any],
    *,
    kind: str,
    reason: str,
    message: str,
    type_: str = "Normal",
    component: str = "hostpool-operator",
) -> bool:
    """Record a core/v1 Event about an object; returns whether it was recorded."""
    meta = involved.get("metadata", {})
    namespace = meta.get("namespace", "default")
    event = event_body(involved, kind, reason, message, type_, component)
    try:
        await client.request("POST", f"/api/v1/namespaces/{quote(namespace)}/events", body=event)
    except (ApiError, ApiTransportError) as error:
        log.warning("could not post event %s on %s: %s", reason, meta.get("name"), error)
        return False
    return True


def event_body(
    involved: Mapping[str, Any], kind: str, reason: str, message: str, type_: str, component: str
) -> JSON:
    """A core/v1 Event about ``involved`` (an object, or just its metadata), now."""
    meta = involved.get("metadata", {})
    namespace = meta.get("namespace", "default")
    now = rfc3339(datetime.now(UTC))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": f"{meta.get('name', 'hostpool')}.",
            "namespace": namespace,
        },
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": kind,
            "name": meta.get("name"),
            "namespace": namespace,
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
