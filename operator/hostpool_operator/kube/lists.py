"""What a list or a watch of the API yields, and what it costs: pages, their timing, the
selectors that narrow them, the end of a streamed list, and newline-delimited events."""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp

JSON = dict[str, Any]

#: Objects per page of a LIST (``limit``): a page's JSON is decoded and handed on before
#: the next is read, so a list of 100,000 objects never sits in memory as one body.
LIST_PAGE = 500
#: The annotation of the BOOKMARK that ends a streamed list's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclasses.dataclass(slots=True)
class ListPage:
    """One page of a paginated LIST."""

    items: builtins.list[JSON]
    resource_version: str | None  # the list's (the same on every page of one snapshot)
    restarted: bool  # the first page of a new snapshot (the continue token had expired)
    last: bool


@dataclasses.dataclass(slots=True)
class ListTiming:
    """Where the time of the LISTs went, summed over every list of one client."""

    wait: float = 0.0  # seconds waiting for the answers (sent, then the whole body read)
    decode: float = 0.0  # seconds in JSON decoding
    objects: int = 0
    restarts: int = 0  # lists started again after a 410 on a continue token

    def copy(self) -> ListTiming:
        return dataclasses.replace(self)


def selectors(field_selector: str | None, label_selector: str | None) -> dict[str, str]:
    """The query parameters that narrow a list or watch to some objects."""
    params = {}
    if field_selector:
        params["fieldSelector"] = field_selector
    if label_selector:
        params["labelSelector"] = label_selector
    return params


def initial_events_end(event: Mapping[str, Any]) -> bool:
    """Is this the BOOKMARK that ends a streamed list's initial events?"""
    if event.get("type") != "BOOKMARK":
        return False
    metadata = (event.get("object") or {}).get("metadata") or {}
    return (metadata.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true"


async def event_lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Newline-delimited chunks of any length (aiohttp's own line reader caps their size)."""
    buffer = b""
    async for chunk in stream.iter_any():
        buffer += chunk
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            line, buffer = buffer[:end], buffer[end + 1 :]
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer
