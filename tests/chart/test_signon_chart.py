"""The chart's single sign-on (broker.singleSignOn): the broker's flags from the values
(parsed by hostpool-broker's own parser, with the key the chart made), the key's Secret made
once (or the administrator's own), mounted by the broker alone, the uid source, and the
Role's two extra rules (uid records, the one ConfigMap of public keys)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from chart.test_chart import (
    BROKER,
    BROKER_NAME,
    BROKER_RULES,
    Obj,
    Render,
    broker_container,
    broker_deployment,
    by_kind,
    flag,
    render_fails,
)
from hostpool_operator.broker.program import parse_args as parse_broker_args
from hostpool_operator.logon import credential

SSO: dict[str, Any] = {**BROKER, "broker.singleSignOn.enabled": True}
KEY_DIR = "/etc/hostpool-broker/logon-key"
KEYS_CONFIGMAP = "hostpool-logon-keys"


def secrets(docs: list[Obj]) -> list[Obj]:
    return by_kind(docs, "Secret")


def broker_role(docs: list[Obj]) -> Obj:
    (role,) = [r for r in by_kind(docs, "Role") if r["metadata"]["name"] == BROKER_NAME]
    return role


def test_no_single_sign_on_by_default(render: Render) -> None:
    docs = render(**BROKER)
    args = broker_container(docs)["args"]
    assert "--logon-key-file" not in args
    assert not secrets(docs)
    assert broker_role(docs)["rules"] == BROKER_RULES
    assert parse_broker_args(args).signon.key is None


def test_the_chart_makes_a_key_the_broker_reads(render: Render, tmp_path: Path) -> None:
    docs = render(**SSO)
    (secret,) = secrets(docs)
    assert secret["metadata"]["name"] == "hp-hostpool-operator-logon-key"
    # An uninstall keeps it: the hosts trust its public half.
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    pem = base64.b64decode(secret["data"]["logon-key.pem"])
    credential.private_key(pem)  # an Ed25519 key
    args = broker_container(docs)["args"]
    assert flag(args, "--logon-key-file") == f"{KEY_DIR}/logon-key.pem"
    assert flag(args, "--logon-public-keys-configmap") == KEYS_CONFIGMAP
    assert flag(args, "--logon-credential-seconds") == "60"
    assert flag(args, "--uid-namespace") == "hostpool-system"
    assert "--uid-claim" not in args
    pod = broker_deployment(docs)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "logon-key"]
    assert volume["secret"]["secretName"] == "hp-hostpool-operator-logon-key"
    assert volume["secret"]["defaultMode"] == 0o400
    (mount,) = [m for m in broker_container(docs)["volumeMounts"] if m["name"] == "logon-key"]
    assert mount == {"name": "logon-key", "mountPath": KEY_DIR, "readOnly": True}
    # The broker's own parser takes the flags, reading the key as mounted.
    key = tmp_path / "logon-key.pem"
    key.write_bytes(pem)
    parsed = parse_broker_args([a.replace(f"{KEY_DIR}/logon-key.pem", str(key)) for a in args])
    assert parsed.signon.key is not None
    assert parsed.logon_public_keys_configmap == KEYS_CONFIGMAP
    # Only the broker mounts the private key: the operator's pod does not.
    operator = [d for d in by_kind(docs, "Deployment") if d is not broker_deployment(docs)]
    assert "logon-key" not in str(operator)


def test_the_role_grants_uid_records_and_the_one_configmap(render: Render) -> None:
    rules = broker_role(render(**SSO))["rules"]
    assert rules[: len(BROKER_RULES)] == BROKER_RULES
    assert rules[len(BROKER_RULES) :] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [KEYS_CONFIGMAP],
            "verbs": ["patch"],
        },
    ]


def test_an_administrators_key_and_claim(render: Render) -> None:
    docs = render(
        **SSO,
        **{
            "broker.singleSignOn.keySecret": {"secretName": "corp-logon", "key": "ed25519"},
            "broker.singleSignOn.publicKeysConfigMap": "corp-logon-keys",
            "broker.singleSignOn.uidClaim": "uidNumber",
            "broker.singleSignOn.credentialSeconds": 30,
        },
    )
    assert not secrets(docs)  # theirs, not made
    pod = broker_deployment(docs)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "logon-key"]
    assert volume["secret"]["secretName"] == "corp-logon"
    assert volume["secret"]["items"] == [{"key": "ed25519", "path": "logon-key.pem"}]
    args = broker_container(docs)["args"]
    assert flag(args, "--uid-claim") == "uidNumber"
    assert "--uid-namespace" not in args
    assert flag(args, "--logon-credential-seconds") == "30"
    assert flag(args, "--logon-public-keys-configmap") == "corp-logon-keys"
    rules = broker_role(docs)["rules"]
    assert rules[-1]["resourceNames"] == ["corp-logon-keys"]


def test_values_out_of_range_are_refused(helm: Path) -> None:
    for values, message in (
        ({"broker.singleSignOn.credentialSeconds": 121}, "credentialSeconds"),
        ({"broker.singleSignOn.publicKeysConfigMap": "Not_A_Name"}, "publicKeysConfigMap"),
        ({"broker.singleSignOn.keySecret": {"secretName": "x", "key": ""}}, "keySecret"),
    ):
        assert message in render_fails(helm, {**SSO, **values})
