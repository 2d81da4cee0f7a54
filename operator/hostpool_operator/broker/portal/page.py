"""The portal's page, ``GET /``: the signed-in user's pools, live, with Connect, Open in
browser and Log off; a sign-in page for anyone else. Plain HTML, CSS and a little JavaScript
(``static/``, served at ``/portal-static/NAME``), in the language the browser asks for
(``i18n``). The page is rendered by the server with the caller's ``/v1/pools`` answer and
its language's strings as JSON data; its script draws the tiles from them and follows
``/v1/events`` (``live``), polling ``/v1/pools`` when the stream fails.

Test hooks (stable, docs/portal.md): each tile ``data-pool="NAMESPACE/NAME"`` with the
session's ``data-state`` (empty without one), its buttons ``data-action="connect"``,
``"browser"`` and ``"logoff"``; the sign-out control ``data-action="signout"``; ``<html
lang>`` the language served."""

from __future__ import annotations

import html
import re
from importlib import resources
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from . import i18n
from .live import LiveUpdates

if TYPE_CHECKING:
    from ..app import Broker

#: The page's own files, served at /portal-static/NAME.
STATIC = ("page.js", "page.css")
_TYPES = {".js": "text/javascript", ".css": "text/css"}
_PLACE = re.compile(r"\{([a-z_]+)\}")
#: Only the page's own script and style; fetches, the event stream and the sign-out form
#: to this origin only; no frames.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Vary": "Accept-Language, Cookie",
}


def _read(name: str) -> str:
    return (resources.files("hostpool_operator.broker.portal") / "static" / name).read_text(
        encoding="utf-8"
    )


def script_json(value: object) -> str:
    """``value`` as JSON that can sit inside a ``<script type="application/json">`` element:
    ``<``, ``>`` and ``&`` escaped, so no value can close the element or start a comment."""
    text = orjson.dumps(value).decode()
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render(template: str, values: dict[str, str], raw: dict[str, str] | None = None) -> str:
    """``template`` with its ``{name}`` places filled in one pass (a value is never read as
    a place): ``values`` HTML-escaped, ``raw`` as they are (JSON made safe by
    :func:`script_json`); a place with no value is left as it is."""
    raw = raw or {}

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in raw:
            return raw[name]
        if name in values:
            return html.escape(values[name], quote=True)
        return match.group(0)

    return _PLACE.sub(fill, template)


class PortalPage:
    """``/``, its files and ``/v1/events``. ``install`` adds them to the broker's app."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.live = LiveUpdates(broker)
        self.files = {name: _read(name) for name in STATIC}
        self.templates = {name: _read(name) for name in ("page.html", "signin.html")}

    def install(self, app: web.Application) -> None:
        """The live updates always (bearer callers use them too); the page with a portal."""
        app.add_routes(self.live.routes())
        app.on_shutdown.append(self.live.close)
        if self.broker.portal is not None:
            app.add_routes(
                [
                    web.get("/", self.index),
                    web.get("/portal-static/{name}", self.static),
                ]
            )

    async def index(self, request: web.Request) -> web.Response:
        portal = self.broker.portal
        assert portal is not None  # routed only with a portal
        language = i18n.choose(request.headers.get("Accept-Language"))
        strings = i18n.strings(language)
        session = await portal.session(request)
        if session is None:
            page = render(
                self.templates["signin.html"],
                {"lang": language, **{k: v for k, v in strings.items() if "{" not in v}},
            )
            return web.Response(text=page, content_type="text/html", headers=SECURITY_HEADERS)
        caller = session.caller
        listing = {"pools": self.broker.directory.listing(caller.user, caller.groups)}
        page = render(
            self.templates["page.html"],
            {
                "lang": language,
                "csrf": session.csrf,
                "signed_in_as": strings["signed_in_as"].replace("{user}", caller.user),
                **{k: v for k, v in strings.items() if "{" not in v},
            },
            {"pools_json": script_json(listing), "strings_json": script_json(strings)},
        )
        return web.Response(text=page, content_type="text/html", headers=SECURITY_HEADERS)

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        text = self.files.get(name)
        if text is None:
            raise web.HTTPNotFound()
        headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
        return web.Response(
            text=text, content_type=_TYPES[name[name.rindex(".") :]], headers=headers
        )
