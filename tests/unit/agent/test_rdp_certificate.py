"""The agent's reading of its host's RDP certificate (published as
``status.agent.rdpCertificateSha256`` for the broker's relay to pin): which file xrdp serves
(xrdp.ini's ``certificate=``, as xrdp 0.9 reads it), its fingerprint (SHA-256 of the DER
certificate, lowercase hex), and the file read as the xrdp beside the agent sees it: inside
the root of another container, whose absolute symbolic links (the session-host image's
``/etc/xrdp/cert.pem -> /etc/hostpool/tls/tls.crt``, the kubelet's ``..data``) are that
container's, not the agent's."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.agent.machine import rdp_certificate_in, read_in_root
from hostpool_operator.agent.xrdp import DEFAULT_CERTIFICATE, certificate_path, certificate_sha256
from support.tls import self_signed

INI = """\
[Globals]
; xrdp.ini as Debian ships it, shortened
ini_version=1
port=3389
security_layer=negotiate
certificate={value}
key_file=
ssl_protocols=TLSv1.2, TLSv1.3

[Logging]
LogFile=xrdp.log
certificate=/not/this/section.pem
"""


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("", DEFAULT_CERTIFICATE),  # empty: xrdp's default
        ("/etc/hostpool/tls/tls.crt", "/etc/hostpool/tls/tls.crt"),
        ("  /etc/ssl/mine.pem  ", "/etc/ssl/mine.pem"),
        ("relative.pem", DEFAULT_CERTIFICATE),  # xrdp 0.9 takes the default for these
    ],
)
def test_the_certificate_xrdp_serves(value: str, path: str) -> None:
    assert certificate_path(INI.format(value=value)) == path


def test_no_certificate_line_or_no_ini_is_the_default() -> None:
    assert certificate_path("") == DEFAULT_CERTIFICATE
    assert certificate_path("[Globals]\nport=3389\n") == DEFAULT_CERTIFICATE
    # Section and key names are compared without case, as xrdp does.
    assert certificate_path("[globals]\nCertificate=/x.pem\n") == "/x.pem"


@given(st.text(max_size=300))
def test_any_ini_gives_an_absolute_path(text: str) -> None:
    assert certificate_path(text).startswith("/")


def test_the_fingerprint_is_the_sha256_of_the_first_certificates_der(tmp_path: Path) -> None:
    cert, key, der = self_signed("host", tmp_path / "one")
    other, _, _ = self_signed("another", tmp_path / "two")
    expected = hashlib.sha256(der).hexdigest()
    assert certificate_sha256(cert.read_bytes()) == expected
    # A file with the key first and a chain after: the server's certificate is the first.
    mixed = key.read_bytes() + cert.read_bytes() + other.read_bytes()
    assert certificate_sha256(mixed) == expected


@pytest.mark.parametrize(
    "text",
    [b"", b"not a certificate", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"],
)
def test_what_is_no_certificate(text: bytes) -> None:
    with pytest.raises(ValueError, match="certificate"):
        certificate_sha256(text)


def container(tmp_path: Path) -> tuple[Path, str]:
    """A container's root as the session-host image with a mounted Secret has it:
    /etc/xrdp/cert.pem -> /etc/hostpool/tls/tls.crt -> ..data/tls.crt (the kubelet's)."""
    root = tmp_path / "root"
    data = root / "etc/hostpool/tls/..2026_12_05_10_00_00.1"
    data.mkdir(parents=True)
    _, _, der = self_signed("in-the-container", data)
    (root / "etc/hostpool/tls/..data").symlink_to("..2026_12_05_10_00_00.1")
    (root / "etc/hostpool/tls/tls.crt").symlink_to("..data/tls.crt")
    (root / "etc/xrdp").mkdir(parents=True)
    (root / "etc/xrdp/xrdp.ini").write_text(INI.format(value=""))
    (root / "etc/xrdp/cert.pem").symlink_to("/etc/hostpool/tls/tls.crt")
    return root, hashlib.sha256(der).hexdigest()


def test_absolute_links_are_followed_inside_the_root(tmp_path: Path) -> None:
    root, sha256 = container(tmp_path)
    # The agent's own /etc/hostpool/tls/tls.crt (if any) is not what xrdp there serves.
    assert rdp_certificate_in(str(root), None) == (sha256, "")
    assert rdp_certificate_in(str(root), "/etc/xrdp/cert.pem") == (sha256, "")


def test_a_rotated_secret_is_read_anew(tmp_path: Path) -> None:
    root, before = container(tmp_path)
    tls = root / "etc/hostpool/tls"
    fresh = tls / "..2026_12_06_10_00_00.1"
    fresh.mkdir()
    _, _, der = self_signed("rotated", fresh)
    (tls / "..data_tmp").symlink_to(fresh.name)
    os.replace(tls / "..data_tmp", tls / "..data")  # the kubelet's atomic swap
    after = hashlib.sha256(der).hexdigest()
    assert after != before
    assert rdp_certificate_in(str(root), None) == (after, "")


def test_links_never_leave_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc/xrdp").mkdir(parents=True)
    outside, _, _ = self_signed("outside", tmp_path / "outside")
    # ../../.. from the root stays at the root, as it does for the process there.
    (root / "etc/xrdp/cert.pem").symlink_to("../../../../../../" + str(outside).lstrip("/"))
    sha256, problem = rdp_certificate_in(str(root), None)
    assert sha256 is None
    assert "could not read the RDP certificate /etc/xrdp/cert.pem" in problem


def test_a_loop_of_links_is_a_problem_not_a_hang(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc/xrdp").mkdir(parents=True)
    (root / "etc/xrdp/cert.pem").symlink_to("/etc/xrdp/loop.pem")
    (root / "etc/xrdp/loop.pem").symlink_to("cert.pem")
    sha256, problem = rdp_certificate_in(str(root), None)
    assert sha256 is None
    assert "symbolic links" in problem


def test_what_cannot_be_read_says_why(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc/xrdp").mkdir(parents=True)
    assert rdp_certificate_in(str(root), None) == (
        None,
        "could not read the RDP certificate /etc/xrdp/cert.pem: no such file or directory",
    )
    (root / "etc/xrdp/cert.pem").write_text("garbage")
    sha256, problem = rdp_certificate_in(str(root), None)
    assert sha256 is None
    assert problem == "the RDP certificate /etc/xrdp/cert.pem holds no PEM certificate"


def test_a_huge_file_is_not_read_whole(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc/xrdp").mkdir(parents=True)
    (root / "etc/xrdp/cert.pem").write_bytes(b"x" * (3 << 20))
    sha256, problem = rdp_certificate_in(str(root), None)
    assert sha256 is None
    assert "larger than" in problem


def test_read_in_root_reads_plain_files(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a/b").write_bytes(b"text")
    assert read_in_root(str(tmp_path), "/a/./b") == b"text"
    assert read_in_root(str(tmp_path), "a/../a/b") == b"text"
