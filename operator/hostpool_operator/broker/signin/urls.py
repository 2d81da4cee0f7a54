"""Where the portal may send a browser, and whose page a request comes from. Pure."""

from __future__ import annotations

import urllib.parse

#: Longest ``next`` path kept; a longer one is replaced by ``/``.
MAX_NEXT = 2048


def safe_next(path: str | None) -> str:
    """``path`` when it is a path of this origin, else ``/``: it must begin with one ``/``
    (``//host`` is another origin to a browser), hold no backslash (browsers read ``/\\host``
    as ``//host``), and only visible ASCII (browsers drop tabs and line breaks inside a URL,
    so ``/<TAB>/host`` would become ``//host``; spaces and non-ASCII are refused rather than
    reasoned about)."""
    if not path or len(path) > MAX_NEXT or not path.startswith("/") or path.startswith("//"):
        return "/"
    if any(not 0x21 <= ord(c) <= 0x7E for c in path) or "\\" in path:
        return "/"
    return path


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of an absolute http(s) URL, lower-case, without a default
    port; None for anything else (``null``, a relative URL, another scheme)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in ("http", "https") or not host or parts.username or parts.password:
        return None
    if ":" in host:
        host = f"[{host}]"
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def same_origin_headers(origin: str | None, referer: str | None, public_origin: str) -> bool:
    """Whether a request's ``Origin`` header (or, without one, its ``Referer``) names the
    portal's own origin. Neither header: False (a browser sends Origin on every POST, and on
    a WebSocket upgrade)."""
    if origin is not None:
        return origin_of(origin) == public_origin
    if referer is not None:
        return origin_of(referer) == public_origin
    return False
