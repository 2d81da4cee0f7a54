"""The broker's single sign-on flags: the logon key (an Ed25519 PEM, else a clear error), the
credentials' lifetime (at most 120 s), and where uids come from (a claim, else records in the
pod's namespace, or the one named)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hostpool_operator.broker.program import oidc_settings, parse_args

REQUIRED = ["--oidc-issuer", "https://idp.example/realms/corp", "--oidc-audience", "desks"]


def parse(*argv: str) -> argparse.Namespace:
    return parse_args([*REQUIRED, *argv])


def pem(key: Ed25519PrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def test_without_a_key_there_is_no_single_sign_on() -> None:
    args = parse()
    assert args.signon.key is None
    assert args.uid_namespace is None
    assert oidc_settings(args).uid_claim is None


def test_a_key_without_a_claim_records_uids_in_the_pods_namespace(tmp_path: Path) -> None:
    key = tmp_path / "logon.pem"
    key.write_bytes(pem(Ed25519PrivateKey.generate()))
    args = parse("--logon-key-file", str(key), "--logon-credential-seconds", "90")
    assert args.signon.key is not None
    assert args.signon.lifetime == 90
    assert args.uid_namespace == "default"  # no pod here: its ServiceAccount's namespace
    named = parse("--logon-key-file", str(key), "--uid-namespace", "vdi")
    assert named.uid_namespace == "vdi"
    claimed = parse("--logon-key-file", str(key), "--uid-claim", "uidNumber")
    assert claimed.uid_namespace is None
    assert oidc_settings(claimed).uid_claim == "uidNumber"


@pytest.mark.parametrize(
    ("content", "flags", "message"),
    [
        pytest.param(None, [], "No such file", id="missing"),
        pytest.param(b"not a key", [], "--logon-key-file", id="garbage"),
        pytest.param("rsa", [], "not an Ed25519 private key", id="rsa"),
        pytest.param("ed", ["--logon-credential-seconds", "121"], "1..120", id="too-long"),
        pytest.param("ed", ["--logon-credential-seconds", "0"], "1..120", id="zero"),
        pytest.param("ed", ["--uid-claim", " "], "--uid-claim", id="empty-claim"),
        pytest.param(
            "ed",
            ["--logon-public-keys-configmap", "Logon_Keys"],
            "must be a ConfigMap name",
            id="configmap-name",
        ),
    ],
)
def test_bad_flags_are_clear_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes | str | None,
    flags: list[str],
    message: str,
) -> None:
    key = tmp_path / "logon.pem"
    if content == "rsa":
        key.write_bytes(pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    elif content == "ed":
        key.write_bytes(pem(Ed25519PrivateKey.generate()))
    elif isinstance(content, bytes):
        key.write_bytes(content)
    with pytest.raises(SystemExit) as exited:
        parse("--logon-key-file", str(key), *flags)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_public_keys_configmap_needs_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--logon-public-keys-configmap", "hostpool-logon-keys")
    assert "needs --logon-key-file" in capsys.readouterr().err


def test_the_public_keys_configmap_is_taken(tmp_path: Path) -> None:
    key = tmp_path / "logon.pem"
    key.write_bytes(pem(Ed25519PrivateKey.generate()))
    args = parse("--logon-key-file", str(key), "--logon-public-keys-configmap", "logon-keys")
    assert args.logon_public_keys_configmap == "logon-keys"
