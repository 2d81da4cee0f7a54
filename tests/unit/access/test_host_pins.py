"""What the broker keeps of a host's published RDP certificate
(``status.agent.rdpCertificateSha256``, the relay's pin), and the API's form of it: 64
lowercase hex digits, anything else is none (refused by the API server, and never taken by
the broker as a pin)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pydantic import ValidationError

from hostpool_operator import api
from hostpool_operator.access.views import HostView
from hostpool_operator.api import crdgen

SHA256 = hashlib.sha256(b"a certificate").hexdigest()


def host(agent: Any) -> HostView:
    return HostView.from_api(
        {"metadata": {"namespace": "ns", "name": "h1"}, "status": {"agent": agent}}
    )


def test_the_published_fingerprint_is_kept() -> None:
    assert host({"version": "1", "rdpCertificateSha256": SHA256}).rdp_certificate_sha256 == SHA256


@pytest.mark.parametrize(
    "agent",
    [
        {},
        {"rdpCertificateSha256": None},
        {"rdpCertificateSha256": SHA256.upper()},
        {"rdpCertificateSha256": ":".join(SHA256[i : i + 2] for i in range(0, 64, 2))},
        {"rdpCertificateSha256": SHA256[:-1]},
        {"rdpCertificateSha256": SHA256 + "0"},
        {"rdpCertificateSha256": 42},
        "not an object",
        None,
    ],
)
def test_anything_else_is_no_pin(agent: Any) -> None:
    assert host(agent).rdp_certificate_sha256 is None


def test_the_api_takes_lowercase_hex_only() -> None:
    assert api.HostAgent(rdp_certificate_sha256=SHA256).to_api() == {"rdpCertificateSha256": SHA256}
    for bad in (SHA256.upper(), SHA256[:62], "z" * 64):
        with pytest.raises(ValidationError):
            api.HostAgent(rdp_certificate_sha256=bad)


def test_the_crd_carries_the_field_with_its_pattern() -> None:
    crd = crdgen.crd(api.SessionHost)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    agent = schema["properties"]["status"]["properties"]["agent"]["properties"]
    field = agent["rdpCertificateSha256"]
    assert field["pattern"] == "^[0-9a-f]{64}$"
    assert field["type"] == "string"
