"""The browser's RDP client the broker serves at ``/web-client/``: IronRDP's web packages as
``hack/portal/web-client.sh`` installs them (their top-level .js and .wasm files only, under
their version, cached for good)."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
from aiohttp import web

from ...access.connect import error
from ..gate import Gate

#: The two npm packages served at /web-client/ (their top-level .js and .wasm files only).
PACKAGES = ("iron-remote-desktop", "iron-remote-desktop-rdp")
_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.(?:js|wasm)$")
_CONTENT_TYPES = {".js": "text/javascript", ".wasm": "application/wasm"}


def web_client_files(client_dir: Path) -> dict[str, Path]:
    """``package@version/file`` → the file, for the served packages' top-level .js and
    .wasm files (the web client's install, ``hack/portal/web-client.sh``)."""
    files: dict[str, Path] = {}
    for package in PACKAGES:
        root = client_dir / "node_modules" / "@devolutions" / package
        try:
            version = orjson.loads((root / "package.json").read_bytes())["version"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not isinstance(version, str) or not re.fullmatch(r"[0-9A-Za-z.+-]{1,40}", version):
            continue
        for path in sorted(root.iterdir()):
            if _FILE.match(path.name) and path.is_file():
                files[f"{package}@{version}/{path.name}"] = path
    return files


class WebClient:
    """The web client's files, when there are any (else no browser desktops)."""

    def __init__(self, client_dir: Path | None) -> None:
        self.files = web_client_files(client_dir) if client_dir else {}

    @property
    def enabled(self) -> bool:
        """Whether the web client is there to be served (else no browser desktops)."""
        return any(name.startswith(f"{PACKAGES[1]}@") for name in self.files)

    def module_url(self, package: str) -> str | None:
        """The URL of a package's main ES module (None when it is not served)."""
        for name in self.files:
            if name.startswith(f"{package}@") and name.endswith(f"/{package}.js"):
                return f"/web-client/{name}"
        return None

    def routes(self, gate: Gate) -> list[web.RouteDef]:
        async def serve(request: web.Request) -> web.StreamResponse:
            name = f"{request.match_info['package']}/{request.match_info['file']}"
            path = self.files.get(name)
            if path is None:
                return gate.send(request, "other", error(404, "NotFound", "no such file"))
            headers = {
                # The version is in the URL: a new client is a new URL.
                "Cache-Control": "public, max-age=31536000, immutable",
                "Content-Type": _CONTENT_TYPES[path.suffix],
                "X-Content-Type-Options": "nosniff",
            }
            return web.FileResponse(path, headers=headers)

        return [web.get("/web-client/{package}/{file}", serve)]
