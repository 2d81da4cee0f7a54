"""The desktop page, ``GET /desktop/{namespace}/{pool}``: the signed-in user's session of
one pool in the browser (a password field, IronRDP's web component, status text and a
Disconnect button; ``desktop_static/``). It needs the portal's cookie session; without one
the browser is sent to sign in and comes back."""

from __future__ import annotations

import html
import urllib.parse
from importlib import resources
from typing import TYPE_CHECKING

from aiohttp import web

from ...access.names import is_namespace, is_object_name

if TYPE_CHECKING:
    from .relay import WebDesktops

#: The page's own files (served at /desktop-static/NAME).
STATIC = ("desktop.js", "desktop.css")
_TYPES = {".js": "text/javascript", ".css": "text/css"}
#: The page runs only its own scripts; the web client's WebAssembly is compiled in the page
#: (wasm-unsafe-eval, fetched from the module's own data: URL); the relay is on the same
#: origin; nobody may frame it.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
        "connect-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def _read(name: str) -> str:
    folder = resources.files("hostpool_operator.broker.portal") / "desktop_static"
    return (folder / name).read_text(encoding="utf-8")


def render(values: dict[str, str]) -> str:
    """The page with ``values`` put in its ``{name}`` places, each HTML-escaped."""
    page = _read("desktop.html")
    for name, value in values.items():
        page = page.replace("{" + name + "}", html.escape(value, quote=True))
    return page


class DesktopPage:
    def __init__(self, desktops: WebDesktops) -> None:
        self.desktops = desktops
        self.files = {name: _read(name) for name in STATIC}

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/desktop/{namespace}/{pool}", self.page),
            web.get("/desktop-static/{name}", self.static),
        ]

    async def page(self, request: web.Request) -> web.StreamResponse:
        broker = self.desktops.broker
        portal = broker.portal
        namespace, pool_name = request.match_info["namespace"], request.match_info["pool"]
        if portal is None or not (is_namespace(namespace) and is_object_name(pool_name)):
            return _html(404, "Not found", "There is no such page.")
        session = await portal.session(request)
        if session is None:
            target = urllib.parse.quote(f"/desktop/{namespace}/{pool_name}", safe="/")
            raise web.HTTPFound(f"/auth/login?next={target}")
        pool = broker.directory.pools.get((namespace, pool_name))
        caller = session.caller
        if pool is None or not pool.admits(caller.user, caller.groups):
            return _html(404, "Not found", "There is no such pool you may use.")
        if not pool.connection.web or not self.desktops.enabled:
            return _html(404, "Not offered", "This pool's desktops do not open in a browser.")
        title = getattr(pool, "display_name", None) or pool_name
        page = render(
            {
                "csrf": session.csrf,
                "title": str(title),
                "namespace": namespace,
                "pool": pool_name,
                "user": caller.user,
                "rdp_module": self.desktops.module_url("iron-remote-desktop-rdp") or "",
                "component_module": self.desktops.module_url("iron-remote-desktop") or "",
            }
        )
        return web.Response(text=page, content_type="text/html", headers=SECURITY_HEADERS)

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        text = self.files.get(name)
        if text is None:
            return _html(404, "Not found", "There is no such file.")
        suffix = name[name.rindex(".") :]
        headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
        return web.Response(text=text, content_type=_TYPES[suffix], headers=headers)


def _html(status: int, title: str, message: str) -> web.Response:
    body = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"</head><body><main><h1>{title}</h1><p>{message}</p>"
        '<p><a href="/">Back to the portal</a></p></main></body></html>'
    )
    return web.Response(
        status=status, text=body, content_type="text/html", headers=SECURITY_HEADERS
    )
