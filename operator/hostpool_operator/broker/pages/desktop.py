"""The desktop page, ``GET /desktop/{namespace}/{pool}``: the signed-in user's session of
one pool in the browser (a password field, IronRDP's web component, status text and a
Disconnect button; ``desktop_static/``). It needs the portal's cookie session; without one
the browser is sent to sign in and comes back. In the language the browser asks for, as the
portal page (``i18n``): the page's text rendered by the server, its script's strings as JSON
data in the page."""

from __future__ import annotations

import html
import urllib.parse

from aiohttp import web

from ...access.connect import entitled
from ...access.names import is_namespace, is_object_name
from ..directory import Directory
from ..relay.client_files import WebClient
from ..render import StaticFiles, message_page, read, render, script_json, security_headers
from ..signin.flow import Portal
from . import i18n

PACKAGE = "hostpool_operator.broker.pages"
#: The page's own files (served at /desktop-static/NAME).
STATIC = ("desktop.js", "keyboard.js", "desktop.css")
#: The page runs only its own scripts; the web client's WebAssembly is compiled in the page
#: (wasm-unsafe-eval, fetched from the module's own data: URL); the relay is on the same
#: origin; nobody may frame it.
POLICY = (
    "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
SECURITY_HEADERS = security_headers(POLICY, Vary="Accept-Language, Cookie")
_BACK = ("/", "Back to the portal")


class DesktopPage:
    def __init__(self, directory: Directory, portal: Portal, client: WebClient) -> None:
        self.directory = directory
        self.portal = portal
        self.client = client
        self.template = read(PACKAGE, "desktop_static", "desktop.html")
        self.files = StaticFiles(PACKAGE, "desktop_static", STATIC, "/desktop-static")

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/desktop/{namespace}/{pool}", self.page), *self.files.routes()]

    async def page(self, request: web.Request) -> web.StreamResponse:
        namespace, pool_name = request.match_info["namespace"], request.match_info["pool"]
        if not (is_namespace(namespace) and is_object_name(pool_name)):
            return message_page(404, "Not found", "There is no such page.", link=_BACK)
        session = await self.portal.session(request)
        if session is None:
            target = urllib.parse.quote(f"/desktop/{namespace}/{pool_name}", safe="/")
            return web.Response(
                status=302,
                headers={"Location": f"/auth/login?next={target}", "Cache-Control": "no-store"},
            )
        caller = session.caller
        pool = entitled(self.directory.pools.get((namespace, pool_name)), caller)
        if pool is None:
            return message_page(404, "Not found", "There is no such pool you may use.", link=_BACK)
        if not pool.connection.web or not self.client.enabled:
            return message_page(
                404, "Not offered", "This pool's desktops do not open in a browser.", link=_BACK
            )
        title = getattr(pool, "display_name", None) or pool_name
        language = i18n.choose(request.headers.get("Accept-Language"))
        strings = i18n.strings(language)
        plain = {k: v for k, v in strings.items() if "{" not in v}
        # The user's name in bold wherever the language puts it.
        label = html.escape(strings["desktop_password"]).replace(
            "{user}", f"<strong>{html.escape(caller.user)}</strong>"
        )
        page = render(
            self.template,
            {
                **plain,
                "lang": language,
                "csrf": session.csrf,
                "title": str(title),
                "namespace": namespace,
                "pool": pool_name,
                "user": caller.user,
                "rdp_module": self.client.module_url("iron-remote-desktop-rdp") or "",
                "component_module": self.client.module_url("iron-remote-desktop") or "",
                "sign_on": "true" if pool.connection.single_sign_on else "false",
                # The page's client opens the clipboard channel only where the pool allows it
                # (the relay withholds it elsewhere, whatever a page asks for).
                "clipboard": "true" if pool.connection.clipboard_allowed else "false",
            },
            {"password_label": label, "strings_json": script_json(strings)},
        )
        return web.Response(text=page, content_type="text/html", headers=SECURITY_HEADERS)
