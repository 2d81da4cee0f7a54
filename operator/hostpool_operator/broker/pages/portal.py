"""The portal's page, ``GET /``: the signed-in user's pools, live, with Connect, Open in
browser and Log off; a sign-in page for anyone else. Plain HTML, CSS and a little JavaScript
(``static/``, served at ``/portal-static/NAME``), in the language the browser asks for
(``i18n``). The page is rendered by the server with the caller's ``/v1/pools`` answer and
its language's strings as JSON data; its script draws the tiles from them and follows
``/v1/events`` (the broker's ``live``), polling ``/v1/pools`` when the stream fails.

Test hooks (stable, docs/portal.md): each tile ``data-pool="NAMESPACE/NAME"`` with the
session's ``data-state`` (empty without one), its buttons ``data-action="connect"``,
``"browser"`` and ``"logoff"``; the sign-out control ``data-action="signout"``; ``<html
lang>`` the language served."""

from __future__ import annotations

from aiohttp import web

from ..directory import Directory
from ..render import StaticFiles, read, render, script_json, security_headers
from ..signin.flow import Portal
from . import i18n

PACKAGE = "hostpool_operator.broker.pages"
#: The page's own files, served at /portal-static/NAME.
STATIC = ("page.js", "page.css")
#: Only the page's own script and style; fetches, the event stream and the sign-out form
#: to this origin only; no frames.
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = security_headers(POLICY, referrer="same-origin", Vary="Accept-Language, Cookie")


class PortalPage:
    """``/`` and its files."""

    def __init__(self, directory: Directory, portal: Portal) -> None:
        self.directory = directory
        self.portal = portal
        self.files = StaticFiles(PACKAGE, "static", STATIC, "/portal-static")
        self.templates = {
            name: read(PACKAGE, "static", name) for name in ("page.html", "signin.html")
        }

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/", self.index), *self.files.routes()]

    async def index(self, request: web.Request) -> web.Response:
        language = i18n.choose(request.headers.get("Accept-Language"))
        strings = i18n.strings(language)
        plain = {k: v for k, v in strings.items() if "{" not in v}
        session = await self.portal.session(request)
        if session is None:
            page = render(self.templates["signin.html"], {"lang": language, **plain})
            return web.Response(text=page, content_type="text/html", headers=SECURITY_HEADERS)
        caller = session.caller
        listing = {"pools": self.directory.listing(caller.user, caller.groups)}
        page = render(
            self.templates["page.html"],
            {
                "lang": language,
                "csrf": session.csrf,
                "signed_in_as": strings["signed_in_as"].replace("{user}", caller.user),
                **plain,
            },
            {"pools_json": script_json(listing), "strings_json": script_json(strings)},
        )
        return web.Response(text=page, content_type="text/html", headers=SECURITY_HEADERS)
