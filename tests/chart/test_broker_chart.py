"""The chart's session broker, hardened (finding 12 in docs/reliability.md): its metrics on
a port of their own (a Service and a ServiceMonitor for it, a NetworkPolicy rule for it,
never on the API's Service), and its admission policy generated from the SessionRequest
CRD, as the agents' policy is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from chart.test_chart import (
    BROKER,
    BROKER_NAME,
    Obj,
    Render,
    broker_container,
    broker_objects,
    by_kind,
    chart_with_a_status_field,
    crd_status_fields,
    flag,
    one,
    run_helm,
    selects,
    unchanged_fields,
)
from hostpool_operator.broker.program import parse_args as parse_broker_args


def broker_policy(docs: list[Obj]) -> Obj:
    (policy,) = [
        d
        for d in by_kind(docs, "ValidatingAdmissionPolicy")
        if d["metadata"]["name"] == f"{BROKER_NAME}-logoff-only"
    ]
    return policy


def broker_services(docs: list[Obj]) -> dict[str, Obj]:
    return {s["metadata"]["name"]: s for s in by_kind(broker_objects(docs), "Service")}


# ---------------------------------------------------------------------------------------
# the admission policy


def test_broker_policy_holds_every_status_field_of_the_crd_but_logoff(render: Render) -> None:
    for values in (BROKER, {"broker.create": True}):
        (rule,) = broker_policy(render(**values))["spec"]["validations"]
        fields = unchanged_fields(rule["expression"])
        assert fields == crd_status_fields("sessionrequests") - {"logoff", "connects"}
        assert {"phase", "host", "hostAddress", "sessionState", "conditions"} <= fields
        assert rule["reason"] == "Forbidden"


def test_broker_policy_follows_the_crd(helm: Path, tmp_path: Path) -> None:
    """A status field added to the SessionRequest CRD is held unchanged for the broker too,
    without editing the chart."""
    chart = chart_with_a_status_field(tmp_path, "sessionrequests", "endedBy")
    proc = run_helm(helm, "template", "hp", str(chart), "--set", "broker.create=true")
    docs = [d for d in yaml.safe_load_all(proc.stdout) if isinstance(d, dict)]
    (rule,) = broker_policy(docs)["spec"]["validations"]
    fields = unchanged_fields(rule["expression"])
    assert "endedBy" in fields
    assert fields == crd_status_fields("sessionrequests", chart / "files" / "crds") - {
        "logoff",
        "connects",
    }


# ---------------------------------------------------------------------------------------
# metrics on their own port


def test_broker_metrics_on_a_port_of_their_own(render: Render) -> None:
    docs = render(**BROKER)
    main = broker_container(docs)
    assert flag(main["args"], "--metrics-listen") == "0.0.0.0:9090"
    args = parse_broker_args(main["args"])
    assert args.metrics_address == ("0.0.0.0", 9090)
    assert args.listen_port == 8443
    assert main["ports"] == [
        {"name": "http", "containerPort": 8443, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    services = broker_services(docs)
    assert set(services) == {BROKER_NAME, f"{BROKER_NAME}-metrics"}
    # The API's Service (which may face users) has no metrics port.
    assert [p["name"] for p in services[BROKER_NAME]["spec"]["ports"]] == ["http"]
    metrics = services[f"{BROKER_NAME}-metrics"]
    assert metrics["spec"]["type"] == "ClusterIP"
    assert metrics["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod = one(broker_objects(docs), "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selects(metrics["spec"]["selector"], pod)

    docs = render(**BROKER, **{"broker.metrics.port": 9191})
    assert flag(broker_container(docs)["args"], "--metrics-listen") == "0.0.0.0:9191"
    docs = render(**BROKER, **{"broker.metrics.enabled": False})
    assert "--metrics-listen" not in broker_container(docs)["args"]
    assert [p["name"] for p in broker_container(docs)["ports"]] == ["http"]
    assert set(broker_services(docs)) == {BROKER_NAME}


def test_broker_service_monitor(render: Render) -> None:
    """serviceMonitor.enabled with the broker: a second ServiceMonitor, for the broker's
    metrics Service (the operator's is unchanged)."""
    values: dict[str, Any] = {
        **BROKER,
        "serviceMonitor.enabled": True,
        "serviceMonitor.labels": {"team": "vdi"},
    }
    docs = render(**values)
    monitors = {m["metadata"]["name"]: m for m in by_kind(docs, "ServiceMonitor")}
    assert set(monitors) == {"hp-hostpool-operator", BROKER_NAME}
    monitor = monitors[BROKER_NAME]
    assert monitor["metadata"]["labels"]["team"] == "vdi"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["hostpool-system"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    selected = [
        name
        for name, service in broker_services(docs).items()
        if selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
        and any(p["name"] == "metrics" for p in service["spec"]["ports"])
    ]
    assert selected == [f"{BROKER_NAME}-metrics"]
    operator = render(**{"serviceMonitor.enabled": True, "serviceMonitor.labels": {"team": "vdi"}})
    assert one(operator, "ServiceMonitor") == monitors["hp-hostpool-operator"]
    docs = render(**values, **{"broker.metrics.enabled": False})
    assert [m["metadata"]["name"] for m in by_kind(docs, "ServiceMonitor")] == [
        "hp-hostpool-operator"
    ]


def test_broker_network_policy_lets_metrics_in_on_their_port(render: Render) -> None:
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}
    portal = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "web"}}}
    docs = render(
        **BROKER,
        **{
            "broker.networkPolicy.enabled": True,
            "broker.networkPolicy.ingressFrom": [portal],
            "broker.networkPolicy.metricsFrom": [prometheus],
        },
    )
    ingress = one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert ingress == [
        {"ports": [{"port": 8443, "protocol": "TCP"}], "from": [portal]},
        {"ports": [{"port": 9090, "protocol": "TCP"}], "from": [prometheus]},
    ]
    docs = render(
        **BROKER,
        **{"broker.networkPolicy.enabled": True, "broker.metrics.enabled": False},
    )
    assert [r["ports"] for r in one(docs, "NetworkPolicy")["spec"]["ingress"]] == [
        [{"port": 8443, "protocol": "TCP"}]
    ]
