"""``operator/session-host/clipboard.sh``: what a host's xrdp is told for the pool's
clipboard (the session-host image's entrypoint runs it at every start with
HOSTPOOL_CLIPBOARD, the test hosts with --clipboard). Disabled turns xrdp's channel off and
chansrv's both ways; Enabled writes the defaults back (a restarted container follows a
changed setting); anything else changes nothing and fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "operator" / "session-host" / "clipboard.sh"

#: The parts of Debian's xrdp.ini and sesman.ini the setting touches, around others.
XRDP_INI = """[Globals]
port=3389

[Channels]
rdpdr=true
cliprdr=true
drdynvc=true

[Xorg]
name=Xorg
"""
SESMAN_INI = """[Globals]
ListenPort=3350

[Security]
AllowRootLogin=true
RestrictOutboundClipboard=none
RestrictInboundClipboard=none

[Chansrv]
FuseMountName=thinclient_drives
"""


def run(xrdp: Path, sesman: Path, setting: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", 'source "$0"; xrdp_clipboard "$1" "$2" "$3"', SCRIPT, xrdp, sesman, setting],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    xrdp, sesman = tmp_path / "xrdp.ini", tmp_path / "sesman.ini"
    xrdp.write_text(XRDP_INI)
    sesman.write_text(SESMAN_INI)
    return xrdp, sesman


def test_disabled_turns_the_channel_and_chansrv_off_and_enabled_turns_them_back(
    files: tuple[Path, Path],
) -> None:
    xrdp, sesman = files
    assert run(xrdp, sesman, "Disabled").returncode == 0
    assert xrdp.read_text() == XRDP_INI.replace("cliprdr=true", "cliprdr=false")
    assert sesman.read_text() == SESMAN_INI.replace("=none", "=all")
    # Again (a restart): the same, nothing stacked.
    assert run(xrdp, sesman, "Disabled").returncode == 0
    assert xrdp.read_text().count("cliprdr=") == 1
    assert run(xrdp, sesman, "Enabled").returncode == 0
    assert (xrdp.read_text(), sesman.read_text()) == (XRDP_INI, SESMAN_INI)
    assert run(xrdp, sesman, "").returncode == 0  # unset: Enabled
    assert (xrdp.read_text(), sesman.read_text()) == (XRDP_INI, SESMAN_INI)


def test_settings_a_file_lacks_are_added_to_their_section(tmp_path: Path) -> None:
    xrdp, sesman = tmp_path / "xrdp.ini", tmp_path / "sesman.ini"
    xrdp.write_text("[Globals]\nport=3389\n")
    sesman.write_text("[Security]\nAllowRootLogin=true\n[Chansrv]\nx=1\n")
    assert run(xrdp, sesman, "Disabled").returncode == 0
    assert xrdp.read_text() == "[Globals]\nport=3389\n[Channels]\ncliprdr=false\n"
    assert sesman.read_text() == (
        "[Security]\nAllowRootLogin=true\nRestrictOutboundClipboard=all\n"
        "RestrictInboundClipboard=all\n[Chansrv]\nx=1\n"
    )


@pytest.mark.parametrize("setting", ["disabled", "Off", "false", "Disabled "])
def test_anything_else_fails_and_changes_nothing(files: tuple[Path, Path], setting: str) -> None:
    xrdp, sesman = files
    done = run(xrdp, sesman, setting)
    assert done.returncode == 1
    assert "Enabled or Disabled" in done.stderr
    assert (xrdp.read_text(), sesman.read_text()) == (XRDP_INI, SESMAN_INI)
