"""The chart's portal (broker.portal) and its example Ingress (broker.ingress): the broker's
flags from the values (parsed by hostpool-broker's own parser), the two Secrets mounted as
files, the public URL, the browser RDP client of the image, the NetworkPolicy's rule to the
hosts, and what the chart and its schema refuse."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from chart.test_chart import (
    BROKER,
    BROKER_NAME,
    BROKER_RULES,
    Obj,
    Render,
    broker_api_service,
    broker_container,
    broker_deployment,
    by_kind,
    flag,
    one,
    render_fails,
    run_helm,
)
from hostpool_operator.broker.program import parse_args as parse_broker_args
from support.paths import CHART_DIR, REPO_ROOT

PUBLIC_URL = "https://desktops.example.com"
#: The least values with which the portal renders.
PORTAL: dict[str, Any] = {
    **BROKER,
    "broker.portal.enabled": True,
    "broker.portal.clientId": "vdi-portal-web",
    "broker.portal.clientSecret.secretName": "portal-client",
    "broker.portal.cookieSecret.secretName": "portal-cookie",
    "broker.portal.publicURL": PUBLIC_URL,
}
PORTAL_FLAGS = (
    "--portal-client-id",
    "--portal-client-secret-file",
    "--cookie-secret-file",
    "--public-url",
    "--web-client-dir",
)
#: Where make image puts the browser RDP client (operator/Containerfile).
WEB_CLIENT_DIR = "/usr/share/hostpool-operator/web-client"
#: Where the chart mounts the portal's Secrets.
PORTAL_DIR = "/etc/hostpool-broker/portal"


def parse_as_mounted(args: list[str], tmp_path: Path) -> argparse.Namespace:
    """hostpool-broker's own parser on the chart's args, whose mounted files (which it
    reads) are local files of the same names: the two secrets, and a web client laid out as
    in the image (node_modules/@devolutions/<package>/)."""
    portal = tmp_path / "portal"
    portal.mkdir()
    (portal / "client-secret").write_text("portal-client-secret\n")
    (portal / "cookie-secret").write_text("c" * 48)
    web = tmp_path / "web-client"
    for package, version in (
        ("iron-remote-desktop", "0.11.0"),
        ("iron-remote-desktop-rdp", "0.7.0"),
    ):
        root = web / "node_modules" / "@devolutions" / package
        root.mkdir(parents=True)
        (root / "package.json").write_text(json.dumps({"name": package, "version": version}))
        (root / f"{package}.js").write_text("export {};\n")
    local = [a.replace(PORTAL_DIR, str(portal)).replace(WEB_CLIENT_DIR, str(web)) for a in args]
    return parse_broker_args(local)


def volumes(docs: list[Obj]) -> dict[str, Obj]:
    pod = broker_deployment(docs)["spec"]["template"]["spec"]
    return {v["name"]: v for v in pod["volumes"]}


def mounts(docs: list[Obj]) -> dict[str, Obj]:
    return {m["name"]: m for m in broker_container(docs)["volumeMounts"]}


def ingresses(docs: list[Obj]) -> list[Obj]:
    return by_kind(docs, "Ingress")


# ---------------------------------------------------------------------------------------
# the broker's flags and mounts


def test_no_portal_by_default(render: Render) -> None:
    docs = render(**BROKER)
    args = broker_container(docs)["args"]
    for name in PORTAL_FLAGS:
        assert name not in args
    assert "portal" not in volumes(docs)
    assert "portal" not in mounts(docs)
    assert not ingresses(docs)
    parsed = parse_broker_args(args)
    assert parsed.portal_client_id is None
    assert parsed.web_client_dir is None


def test_the_portal_role_grants_ticket_records_and_the_one_sign_outs_configmap(
    render: Render,
) -> None:
    """Ticket records are only created (owned by their request, collected with it); the
    sign-outs ConfigMap, the one the broker reads and changes, is named; no portal, neither."""
    (role,) = [r for r in by_kind(render(**PORTAL), "Role") if r["metadata"]["name"] == BROKER_NAME]
    assert role["rules"] == [
        *BROKER_RULES,
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [
                parse_broker_args(
                    ["--oidc-issuer", "https://i", "--oidc-audience", "a"]
                ).sign_outs_configmap
            ],
            "verbs": ["get", "patch"],
        },
    ]
    (bare,) = [r for r in by_kind(render(**BROKER), "Role") if r["metadata"]["name"] == BROKER_NAME]
    assert bare["rules"] == BROKER_RULES


def test_portal_flags_and_secret_files(render: Render, tmp_path: Path) -> None:
    """The client id as given; the client secret and the cookie key as files of one
    read-only projected volume; the public URL; the image's web client."""
    docs = render(**PORTAL)
    args = broker_container(docs)["args"]
    mount = mounts(docs)["portal"]
    assert mount["readOnly"] is True
    directory = mount["mountPath"]
    assert directory == PORTAL_DIR
    assert flag(args, "--portal-client-id") == "vdi-portal-web"
    assert flag(args, "--portal-client-secret-file") == f"{directory}/client-secret"
    assert flag(args, "--cookie-secret-file") == f"{directory}/cookie-secret"
    assert flag(args, "--public-url") == PUBLIC_URL
    assert flag(args, "--web-client-dir") == WEB_CLIENT_DIR
    assert volumes(docs)["portal"] == {
        "name": "portal",
        "projected": {
            "sources": [
                {
                    "secret": {
                        "name": "portal-client",
                        "items": [{"key": "client-secret", "path": "client-secret"}],
                    }
                },
                {
                    "secret": {
                        "name": "portal-cookie",
                        "items": [{"key": "cookie-secret", "path": "cookie-secret"}],
                    }
                },
            ]
        },
    }
    parsed = parse_as_mounted(args, tmp_path)
    assert parsed.portal is True
    assert parsed.portal_client_id == "vdi-portal-web"
    assert parsed.portal_client_secret_file == f"{tmp_path}/portal/client-secret"
    assert parsed.cookie_secret_file == f"{tmp_path}/portal/cookie-secret"
    assert parsed.public_url == PUBLIC_URL
    assert parsed.web_client_dir == f"{tmp_path}/web-client"
    # The broker's other flags are still those of the API: the same issuer and audience.
    assert parsed.oidc_audience == "vdi-portal"
    assert {"name": "tmp", "mountPath": "/tmp"} in broker_container(docs)["volumeMounts"]


def test_portal_secrets_from_one_secret_with_keys_of_its_own(render: Render) -> None:
    docs = render(
        **{
            **PORTAL,
            "broker.portal.clientSecret": {"secretName": "hostpool-portal", "key": "oidc"},
            "broker.portal.cookieSecret": {"secretName": "hostpool-portal", "key": "cookie"},
        }
    )
    sources = volumes(docs)["portal"]["projected"]["sources"]
    assert [s["secret"] for s in sources] == [
        {"name": "hostpool-portal", "items": [{"key": "oidc", "path": "client-secret"}]},
        {"name": "hostpool-portal", "items": [{"key": "cookie", "path": "cookie-secret"}]},
    ]


def test_extra_args_stay_last(render: Render) -> None:
    """broker.extraArgs come after the portal's flags, so one of them (e.g.
    --portal-session-hours) is appended as given."""
    args = broker_container(
        render(**PORTAL, **{"broker.extraArgs": ["--portal-session-hours", "8"]})
    )["args"]
    assert args[-2:] == ["--portal-session-hours", "8"]
    assert args.index("--public-url") < len(args) - 2


def test_without_the_web_client(render: Render, tmp_path: Path) -> None:
    docs = render(**PORTAL, **{"broker.portal.webClient": False})
    args = broker_container(docs)["args"]
    assert "--web-client-dir" not in args
    assert flag(args, "--portal-client-id") == "vdi-portal-web"
    parsed = parse_as_mounted(args, tmp_path)
    assert parsed.portal is True
    assert parsed.web_client_dir is None


@pytest.mark.parametrize(
    ("values", "url"),
    [
        ({"broker.portal.publicURL": "https://vdi.example.com/"}, "https://vdi.example.com"),
        (
            {"broker.portal.publicURL": "https://vdi.example.com:8443"},
            "https://vdi.example.com:8443",
        ),
        (
            {
                "broker.portal.publicURL": "",
                "broker.ingress": {
                    "enabled": True,
                    "host": "vdi.example.com",
                    "tls": {"secretName": "vdi-tls"},
                },
            },
            "https://vdi.example.com",
        ),
        (
            {
                "broker.portal.publicURL": "https://desktops.example.org",
                "broker.ingress": {"enabled": True, "host": "vdi.example.com"},
            },
            "https://desktops.example.org",
        ),
        (
            {
                "broker.portal.publicURL": "",
                "broker.portal.allowInsecurePublicURL": True,
                "broker.ingress": {"enabled": True, "host": "vdi.test"},
            },
            "http://vdi.test",
        ),
        (
            {
                "broker.portal.publicURL": "http://127.0.0.1:8443",
                "broker.portal.allowInsecurePublicURL": True,
            },
            "http://127.0.0.1:8443",
        ),
    ],
)
def test_public_url(render: Render, values: dict[str, Any], url: str) -> None:
    """publicURL as given (no trailing slash), else the Ingress's host: https with its TLS
    Secret, http (only when allowed) without."""
    args = broker_container(render(**{**PORTAL, **values}))["args"]
    assert flag(args, "--public-url") == url


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {**BROKER, "broker.portal.enabled": True},
            "broker.portal.clientId is required when broker.portal.enabled is true",
        ),
        (
            {**PORTAL, "broker.portal.clientSecret.secretName": ""},
            "broker.portal.clientSecret.secretName is required",
        ),
        (
            {**PORTAL, "broker.portal.cookieSecret.secretName": ""},
            "broker.portal.cookieSecret.secretName is required",
        ),
        (
            {**PORTAL, "broker.portal.publicURL": ""},
            "broker.portal.publicURL is required when broker.portal.enabled is true and there "
            "is no broker.ingress.host",
        ),
        (
            {**PORTAL, "broker.portal.publicURL": "http://vdi.example.com"},
            "the portal's public URL http://vdi.example.com is plain http",
        ),
        (
            {
                **PORTAL,
                "broker.portal.publicURL": "",
                "broker.ingress": {"enabled": True, "host": "vdi.example.com"},
            },
            "the portal's public URL http://vdi.example.com is plain http",
        ),
        (
            {**BROKER, "broker.ingress.enabled": True},
            "broker.ingress.host is required when broker.ingress.enabled is true",
        ),
    ],
)
def test_portal_values_refused_at_render(helm: Path, values: dict[str, Any], message: str) -> None:
    assert message in render_fails(helm, values)


def test_portal_needs_the_broker(render: Render) -> None:
    """broker.portal and broker.ingress alone render nothing: they are the broker's."""
    values = {key: value for key, value in PORTAL.items() if key != "broker.enabled"}
    docs = render(**values, **{"broker.ingress": {"enabled": True, "host": "vdi.example.com"}})
    assert not [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == BROKER_NAME]
    assert not ingresses(docs)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"broker.portal.enabled": "yes"}, "at '/broker/portal/enabled': got string"),
        ({"broker.portal.publicURL": "desktops.example.com"}, "at '/broker/portal/publicURL'"),
        (
            {"broker.portal.publicURL": "https://example.com/vdi"},
            "at '/broker/portal/publicURL'",
        ),
        (
            {"broker.portal.publicURL": "https://user@example.com"},
            "at '/broker/portal/publicURL'",
        ),
        ({"broker.portal.publicURL": "ftp://example.com"}, "at '/broker/portal/publicURL'"),
        (
            {"broker.portal.clientSecret.secretName": "Portal_Secret"},
            "at '/broker/portal/clientSecret/secretName'",
        ),
        ({"broker.portal.cookieSecret.key": ""}, "at '/broker/portal/cookieSecret/key'"),
        ({"broker.portal.cookieSecret.name": "x"}, "additional properties 'name' not allowed"),
        ({"broker.portal.webClient": "yes"}, "at '/broker/portal/webClient'"),
        ({"broker.portal.clientID": "x"}, "additional properties 'clientID' not allowed"),
        ({"broker.ingress.host": "*.example.com"}, "at '/broker/ingress/host'"),
        ({"broker.ingress.host": "vdi.example.com:443"}, "at '/broker/ingress/host'"),
        ({"broker.ingress.tls.secretName": "VDI"}, "at '/broker/ingress/tls/secretName'"),
        ({"broker.ingress.annotations": {"a": 1}}, "at '/broker/ingress/annotations/a'"),
        ({"broker.ingress.path": "/vdi"}, "additional properties 'path' not allowed"),
        (
            {"broker.networkPolicy.egress.hosts.ports": []},
            "at '/broker/networkPolicy/egress/hosts/ports'",
        ),
    ],
)
def test_schema_refuses_bad_portal_values(helm: Path, values: dict[str, Any], message: str) -> None:
    stderr = render_fails(helm, values)
    assert "values don't meet the specifications of the schema" in stderr
    assert message in stderr, stderr


# ---------------------------------------------------------------------------------------
# the example Ingress


def test_ingress(render: Render) -> None:
    """One rule for the host, every path to the broker's Service by its port's name; TLS,
    class and annotations as given."""
    annotations = {
        "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
        "nginx.ingress.kubernetes.io/proxy-buffering": "off",
    }
    docs = render(
        **PORTAL,
        **{
            "broker.ingress": {
                "enabled": True,
                "className": "nginx",
                "host": "desktops.example.com",
                "tls": {"secretName": "desktops-tls"},
                "annotations": annotations,
            }
        },
    )
    ingress = one(docs, "Ingress")
    assert ingress["apiVersion"] == "networking.k8s.io/v1"
    assert ingress["metadata"]["name"] == BROKER_NAME
    assert ingress["metadata"]["namespace"] == "hostpool-system"
    assert ingress["metadata"]["labels"]["app.kubernetes.io/component"] == "broker"
    assert ingress["metadata"]["annotations"] == annotations
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [{"hosts": ["desktops.example.com"], "secretName": "desktops-tls"}]
    (rule,) = spec["rules"]
    assert rule["host"] == "desktops.example.com"
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/", "Prefix")
    service = broker_api_service(docs)
    assert path["backend"]["service"] == {
        "name": service["metadata"]["name"],
        "port": {"name": service["spec"]["ports"][0]["name"]},
    }
    assert path["backend"]["service"]["port"] == {"name": "http"}


def test_ingress_least_and_with_a_tls_broker(render: Render) -> None:
    """Without class, TLS and annotations: none of them; with broker.tls the backend port is
    the Service's https port (the controller must then speak HTTPS to it)."""
    docs = render(**BROKER, **{"broker.ingress": {"enabled": True, "host": "vdi.example.com"}})
    ingress = one(docs, "Ingress")
    assert "annotations" not in ingress["metadata"]
    assert set(ingress["spec"]) == {"rules"}
    docs = render(
        **BROKER,
        **{
            "broker.ingress": {"enabled": True, "host": "vdi.example.com"},
            "broker.tls.secretName": "broker-tls",
        },
    )
    (path,) = one(docs, "Ingress")["spec"]["rules"][0]["http"]["paths"]
    assert path["backend"]["service"]["port"] == {"name": "https"}
    assert broker_api_service(docs)["spec"]["ports"][0]["name"] == "https"


# ---------------------------------------------------------------------------------------
# the NetworkPolicy: the relay reaches the hosts


def test_network_policy_lets_the_relay_reach_the_hosts(render: Render) -> None:
    """With the portal and its web client: an egress rule to the hosts' RDP port (3389, or
    the ports and peers given); without either, none."""
    policy: dict[str, Any] = {"broker.networkPolicy.enabled": True}
    without = one(render(**BROKER, **policy), "NetworkPolicy")["spec"]["egress"]
    assert len(without) == 3
    egress = one(render(**PORTAL, **policy), "NetworkPolicy")["spec"]["egress"]
    assert egress[:3] == without
    assert egress[3] == {"ports": [{"port": 3389, "protocol": "TCP"}]}
    hosts = [{"ipBlock": {"cidr": "10.20.0.0/16"}}]
    egress = one(
        render(
            **PORTAL,
            **policy,
            **{"broker.networkPolicy.egress.hosts": {"to": hosts, "ports": [3389, 3390]}},
        ),
        "NetworkPolicy",
    )["spec"]["egress"]
    assert egress[3] == {
        "ports": [{"port": 3389, "protocol": "TCP"}, {"port": 3390, "protocol": "TCP"}],
        "to": hosts,
    }
    no_client = one(
        render(**PORTAL, **policy, **{"broker.portal.webClient": False}), "NetworkPolicy"
    )
    assert no_client["spec"]["egress"] == without


# ---------------------------------------------------------------------------------------
# lint and docs


def test_helm_lint_with_the_portal_and_ingress(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "broker": {
                    "enabled": True,
                    "oidc": {"issuer": "https://login.example.com/realms/vdi", "audience": "vdi"},
                    "portal": {
                        "enabled": True,
                        "clientId": "vdi-portal",
                        "clientSecret": {"secretName": "hostpool-portal"},
                        "cookieSecret": {"secretName": "hostpool-portal"},
                    },
                    "ingress": {
                        "enabled": True,
                        "className": "nginx",
                        "host": "desktops.example.com",
                        "tls": {"secretName": "desktops-tls"},
                        "annotations": {"nginx.ingress.kubernetes.io/proxy-read-timeout": "3600"},
                    },
                    "networkPolicy": {"enabled": True},
                }
            }
        )
    )
    proc = run_helm(helm, "lint", "--strict", str(CHART_DIR), "-f", str(values))
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout


def test_the_portal_values_are_documented() -> None:
    """Every value of broker.portal and broker.ingress is named in docs/portal.md, and
    docs/install.md points there."""
    docs = (REPO_ROOT / "docs" / "portal.md").read_text()
    broker = yaml.safe_load((CHART_DIR / "values.yaml").read_text())["broker"]
    for section in ("portal", "ingress"):
        for key in broker[section]:
            assert f"broker.{section}.{key}" in docs, (section, key)
    assert "broker.networkPolicy.egress.hosts" in docs
    assert "portal.md" in (REPO_ROOT / "docs" / "install.md").read_text()
