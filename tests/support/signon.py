"""Single sign-on for the tests: the broker's logon key pair in files, and people Keycloak
knows that no machine does yet."""

from __future__ import annotations

import uuid
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hostpool_operator.logon import credential
from support.keycloak import Keycloak


def make_keys(tmp_path: Path) -> tuple[Path, Path, Ed25519PrivateKey]:
    key = Ed25519PrivateKey.generate()
    private = tmp_path / "logon-key.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = tmp_path / "logon-keys.pem"
    public.write_bytes(credential.public_pem(key))
    return private, public, key


def new_user(keycloak: Keycloak) -> tuple[str, str]:
    """A user of realm corp that no machine knows yet (and its sign-in password)."""
    name, password = f"sso-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    body = {
        "username": name,
        "enabled": True,
        "email": f"{name}@corp.example",
        "emailVerified": True,
        "firstName": "Single",
        "lastName": "Signon",
        "credentials": [{"type": "password", "value": password, "temporary": False}],
    }
    keycloak.admin("POST", "/corp/users", body)
    return name, password
