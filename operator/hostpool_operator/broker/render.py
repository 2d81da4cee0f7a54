"""How the broker's pages are made and served: one renderer for every template, one handler
for a page's own static files, the security headers every page sends (each page adds its
own Content-Security-Policy), and the small message page (not found, sign-in failed)."""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from importlib import resources

import orjson
from aiohttp import web

_PLACE = re.compile(r"\{([a-z_]+)\}")
#: The content types of the pages' own files.
CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".wasm": "application/wasm"}
#: What every page sends besides its policy: nobody may frame it, no referrer leaves it, no
#: type is sniffed, nothing is cached (a page holds its user's CSRF token).
BASE_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
#: The message page: no script, no style of its own.
MESSAGE_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
MESSAGE = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
    "</head><body><main><h1>{title}</h1><p>{message}</p>{link}</main></body></html>"
)


def security_headers(policy: str, *, referrer: str = "no-referrer", **extra: str) -> dict[str, str]:
    """A page's headers: its Content-Security-Policy, the referrer policy, the base set."""
    return {
        "Content-Security-Policy": policy,
        "Referrer-Policy": referrer,
        **BASE_HEADERS,
        **extra,
    }


def read(package: str, folder: str, name: str) -> str:
    """A file of the package's own (a template or a static file)."""
    return (resources.files(package) / folder / name).read_text(encoding="utf-8")


def script_json(value: object) -> str:
    """``value`` as JSON that can sit inside a ``<script type="application/json">`` element:
    ``<``, ``>`` and ``&`` escaped, so no value can close the element or start a comment."""
    text = orjson.dumps(value).decode()
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render(template: str, values: Mapping[str, str], raw: Mapping[str, str] | None = None) -> str:
    """``template`` with its ``{name}`` places filled in one pass (a value is never read as
    a place): ``values`` HTML-escaped, ``raw`` as they are (JSON made safe by
    :func:`script_json`, or markup made here); a place with no value is left as it is."""
    raw = raw or {}

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in raw:
            return raw[name]
        if name in values:
            return html.escape(values[name], quote=True)
        return match.group(0)

    return _PLACE.sub(fill, template)


def message_page(
    status: int, title: str, message: str, *, link: tuple[str, str] | None = None
) -> web.Response:
    """A small HTML page for a browser's navigation (no details, no traceback); ``link``:
    (href, text) of a way on."""
    anchor = ""
    if link is not None:
        href, text = (html.escape(part, quote=True) for part in link)
        anchor = f'<p><a href="{href}">{text}</a></p>'
    body = render(MESSAGE, {"title": title, "message": message}, {"link": anchor})
    return web.Response(
        status=status,
        text=body,
        content_type="text/html",
        headers=security_headers(MESSAGE_POLICY),
    )


class StaticFiles:
    """A page's own files (read once), served at ``{prefix}/{name}``."""

    def __init__(self, package: str, folder: str, names: tuple[str, ...], prefix: str) -> None:
        self.files = {name: read(package, folder, name) for name in names}
        self.prefix = prefix

    def routes(self) -> list[web.RouteDef]:
        return [web.get(f"{self.prefix}/{{name}}", self.serve)]

    async def serve(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        text = self.files.get(name)
        if text is None:
            return message_page(404, "Not found", "There is no such file.")
        headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
        content_type = CONTENT_TYPES[name[name.rindex(".") :]]
        return web.Response(text=text, content_type=content_type, headers=headers)
