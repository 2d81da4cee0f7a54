"""The desktop page's template (every value HTML-escaped, every place filled) and the web
client's files the broker serves (the two packages' top-level modules only, by version)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hostpool_operator.broker.pages import i18n
from hostpool_operator.broker.pages.desktop import PACKAGE
from hostpool_operator.broker.relay.client_files import web_client_files
from hostpool_operator.broker.render import read, render, script_json

VALUES = {
    "csrf": 'c"><script>alert(1)</script>',
    "title": "Finance & <desks>",
    "namespace": "ns",
    "pool": "p",
    "user": "o'hara",
    "rdp_module": "/web-client/iron-remote-desktop-rdp@0.7.0/iron-remote-desktop-rdp.js",
    "component_module": "/web-client/iron-remote-desktop@0.11.0/iron-remote-desktop.js",
    "sign_on": "false",
    "clipboard": "true",
}


def test_the_page_escapes_every_value_and_fills_every_place() -> None:
    strings = i18n.strings("tr")
    plain = {k: v for k, v in strings.items() if "{" not in v}
    raw = {"password_label": "<strong>o&#x27;hara</strong>", "strings_json": script_json(strings)}
    template = read(PACKAGE, "desktop_static", "desktop.html")
    page = render(template, {**plain, **VALUES, "lang": "tr"}, raw)
    assert "<script>alert" not in page
    assert 'content="c&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in page
    assert "Finance &amp; &lt;desks&gt;" in page
    assert 'data-user="o&#x27;hara"' in page
    # The strings' own places ({user}, {kind}...) are the script's to fill: not counted.
    markup = re.sub(r'<script id="hostpool-strings".*?</script>', "", page, flags=re.S)
    assert not re.search(r"\{[a-z_]+\}", markup), "a place left unfilled"
    assert 'data-desktop-state="idle"' in page
    assert 'data-clipboard="true"' in page
    assert 'data-action="connect"' in page
    assert '<html lang="tr">' in page
    assert f'data-action="connect">{strings["connect"]}<' in page


def package(root: Path, name: str, version: str, files: list[str]) -> Path:
    folder = root / "node_modules" / "@devolutions" / name
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps({"name": name, "version": version}))
    for file in files:
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text("//")
    return folder


def test_only_the_packages_top_level_modules_are_served(tmp_path: Path) -> None:
    package(
        tmp_path,
        "iron-remote-desktop-rdp",
        "0.7.0",
        ["iron-remote-desktop-rdp.js", "iron-remote-desktop-rdp.js.gz", "index.d.ts", "x/y.js"],
    )
    package(tmp_path, "iron-remote-desktop", "0.11.0", ["iron-remote-desktop.js", ".hidden.js"])
    package(tmp_path, "other-package", "1.0.0", ["other.js"])
    files = web_client_files(tmp_path)
    assert sorted(files) == [
        "iron-remote-desktop-rdp@0.7.0/iron-remote-desktop-rdp.js",
        "iron-remote-desktop@0.11.0/iron-remote-desktop.js",
    ]
    assert all(path.is_file() and tmp_path in path.parents for path in files.values())


@pytest.mark.parametrize("version", ["../../etc", "1.0/../x", "", "a" * 41])
def test_a_package_with_a_strange_version_is_not_served(tmp_path: Path, version: str) -> None:
    package(tmp_path, "iron-remote-desktop-rdp", version, ["iron-remote-desktop-rdp.js"])
    assert web_client_files(tmp_path) == {}


def test_no_client_installed(tmp_path: Path) -> None:
    assert web_client_files(tmp_path) == {}
