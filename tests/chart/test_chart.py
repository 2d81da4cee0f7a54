"""The Helm chart, rendered by the project's helm: lint, templates, CRD copies, the schema.

No cluster: ``helm lint`` and ``helm template`` only (the live proof of the RBAC rules is
``tests/e2e/test_rbac_live.py``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hostpool_operator.broker.program import parse_args as parse_broker_args
from hostpool_operator.cli.parser import build_parser
from support.paths import CHART_DIR, REPO_ROOT

CRD_DIR = REPO_ROOT / "crds"
CHART_CRD_DIR = CHART_DIR / "files" / "crds"

Obj = dict[str, Any]
Render = Callable[..., list[Obj]]

#: The rules the operator needs on its own kinds and Events (see the chart's _helpers.tpl).
OPERATOR_RULES: list[Obj] = [
    {"apiGroups": ["hostpool.io"], "resources": ["hostpools"], "verbs": ["list", "watch"]},
    {
        "apiGroups": ["hostpool.io"],
        # patch: a ScalingPlan drains and undrains the hosts the operator created.
        # get: a personal pool's host is given to its user onto the version just read.
        "resources": ["sessionhosts"],
        "verbs": ["get", "list", "watch", "create", "delete", "patch"],
    },
    {
        "apiGroups": ["hostpool.io"],
        # delete: a ZeroActiveSessions plan deletes a drained host's Disconnected requests.
        "resources": ["sessionrequests"],
        "verbs": ["get", "list", "watch", "delete"],
    },
    {"apiGroups": ["hostpool.io"], "resources": ["scalingplans"], "verbs": ["list", "watch"]},
    {
        "apiGroups": ["hostpool.io"],
        "resources": ["hostpools/status", "sessionhosts/status", "scalingplans/status"],
        "verbs": ["patch"],
    },
    {
        "apiGroups": ["hostpool.io"],
        "resources": ["sessionrequests/status"],
        "verbs": ["patch", "update"],
    },
    {"apiGroups": ["hostpool.io"], "resources": ["hostpools/finalizers"], "verbs": ["update"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    # An image update keeps each host template as a ControllerRevision (the last ten).
    {
        "apiGroups": ["apps"],
        "resources": ["controllerrevisions"],
        "verbs": ["list", "create", "delete"],
    },
]
#: The verbs of every workload rule: informers (get, list, watch), a pool's hostTemplate
#: creating a host's workload, and a terminally failed workload deleted and created again.
WORKLOAD_VERBS = ["get", "list", "watch", "create", "delete"]
#: Workloads are controlled by their SessionHost with blockOwnerDeletion: true.
HOST_FINALIZERS_RULE: Obj = {
    "apiGroups": ["hostpool.io"],
    "resources": ["sessionhosts/finalizers"],
    "verbs": ["update"],
}
#: A hostTemplate's volumeClaimTemplates: one claim per host (controlled by the host), listed
#: and deleted when a personal host is taken from its user.
CLAIMS_RULE: Obj = {
    "apiGroups": [""],
    "resources": ["persistentvolumeclaims"],
    "verbs": ["get", "list", "create", "delete"],
}
POD_RULE: Obj = {"apiGroups": [""], "resources": ["pods"], "verbs": WORKLOAD_VERBS}
#: The rules of the default values: the operator's own, and Pods as workloads.
DEFAULT_RULES: list[Obj] = [*OPERATOR_RULES, HOST_FINALIZERS_RULE, CLAIMS_RULE, POD_RULE]
#: Kinds without a namespace.
CLUSTER_SCOPED = (
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "FlowSchema",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
LEASE_RULES: list[Obj] = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": ["hostpool-operator"],
        "verbs": ["get", "update"],
    },
]


def run_helm(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}")
    return proc


def set_args(values: dict[str, Any]) -> list[str]:
    """``--set-json key=<json>`` for each value: types arrive exactly as given."""
    args: list[str] = []
    for key, value in values.items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


def by_kind(docs: list[Obj], kind: str) -> list[Obj]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Obj], kind: str) -> Obj:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"{len(found)} {kind} objects, expected 1"
    return found[0]


def container(docs: list[Obj]) -> Obj:
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    (only,) = spec["containers"]
    result: Obj = only
    return result


def operator_rules(docs: list[Obj]) -> list[Obj]:
    """The rules of the operator's role on its objects: the ClusterRole, or with
    watchNamespace the Role outside the release namespace (not the Lease's)."""
    docs = operator_objects(docs)
    roles = by_kind(docs, "ClusterRole") or [
        r for r in by_kind(docs, "Role") if r["metadata"]["namespace"] != "hostpool-system"
    ]
    assert len(roles) == 1, roles
    rules: list[Obj] = roles[0]["rules"]
    return rules


def operator_objects(docs: list[Obj]) -> list[Obj]:
    """The operator's objects: everything but the host agents' (component ``agent``) and the
    roles for other actors (components ``user-roles``, ``broker`` and ``session-admin``)."""
    return [d for d in docs if not is_agent(d) and component(d) not in OTHER_ACTORS]


#: Components of the roles the chart renders for actors other than the operator.
OTHER_ACTORS = ("user-roles", "broker", "session-admin")


def component(doc: Obj) -> str | None:
    value = doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")
    return None if value is None else str(value)


def is_agent(doc: Obj) -> bool:
    return bool(doc["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "agent")


def workload_rules(rules: list[Obj]) -> list[Obj]:
    """The rules beyond the operator's fixed ones."""
    return [r for r in rules if r not in OPERATOR_RULES]


def source_crds() -> dict[str, Obj]:
    return {
        (doc := yaml.safe_load(p.read_text()))["metadata"]["name"]: doc
        for p in sorted(CRD_DIR.glob("*.yaml"))
    }


# ---------------------------------------------------------------------------------------
# lint and the CRD copies


def test_helm_lint_is_clean(helm: Path, tmp_path: Path) -> None:
    proc = run_helm(helm, "lint", "--strict", str(CHART_DIR))
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout
    assert "[ERROR]" not in proc.stdout
    assert "[WARNING]" not in proc.stdout
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "watchNamespace": "vdi",
                "crds": {"enabled": False},
                "serviceMonitor": {"enabled": True},
                "leaderElection": {"enabled": False},
                "replicaCount": 1,
                "agents": {
                    "serviceAccountName": "vdi-agent",
                    "namespaces": ["vdi", "lab"],
                    "hosts": [{"name": "rds-01", "namespace": "vdi"}],
                },
                "workloadResources": [
                    {"apiGroup": "", "resources": ["pods"]},
                    {"apiGroup": "kubevirt.io", "resources": ["virtualmachines"]},
                ],
            }
        )
    )
    proc = run_helm(helm, "lint", "--strict", str(CHART_DIR), "-f", str(values))
    assert "0 chart(s) failed" in proc.stdout


def test_chart_crds_are_byte_equal_to_crds_dir() -> None:
    source = {p.name: p.read_bytes() for p in CRD_DIR.glob("*.yaml")}
    copies = {p.name: p.read_bytes() for p in CHART_CRD_DIR.glob("*.yaml")}
    assert sorted(copies) == sorted(source), "run charts/hostpool-operator/sync-crds.sh"
    for name, data in source.items():
        assert copies[name] == data, f"{name} differs: run charts/hostpool-operator/sync-crds.sh"


def test_sync_script_copies_the_crds(tmp_path: Path) -> None:
    """sync-crds.sh replaces the chart's copies with crds/ (checked on a scratch copy)."""
    chart = tmp_path / "charts" / "hostpool-operator"
    shutil.copytree(CHART_DIR, chart)
    shutil.copytree(CRD_DIR, tmp_path / "crds")
    stale = chart / "files" / "crds" / "hostpool.io_old.yaml"
    stale.write_text("old: true\n")
    (chart / "files" / "crds" / "hostpool.io_hostpools.yaml").write_text("changed\n")
    subprocess.run([str(chart / "sync-crds.sh")], check=True, capture_output=True, timeout=60)
    assert not stale.exists()
    for source in CRD_DIR.glob("*.yaml"):
        assert (chart / "files" / "crds" / source.name).read_bytes() == source.read_bytes()


# ---------------------------------------------------------------------------------------
# default values


def test_default_objects(render: Render) -> None:
    docs = render()
    assert sorted(d["kind"] for d in docs) == sorted(
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Service",
            "Deployment",
            "PodDisruptionBudget",  # the leader and its standby: one stays through a drain
            "FlowSchema",  # the Lease's requests in the API server's leader-election level
            *["CustomResourceDefinition"] * 4,
            # the host agents': their ServiceAccount and Role, and the admission policy
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            # the view and edit ClusterRoles aggregated into the built-in ones
            "ClusterRole",
            "ClusterRole",
            # the session admin role and its admission policy
            "ClusterRole",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
    )
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"]["namespace"] == "hostpool-system", doc["kind"]


def test_default_rbac_grants_exactly_the_operators_calls(render: Render) -> None:
    docs = operator_objects(render())
    cluster_role = one(docs, "ClusterRole")
    assert cluster_role["rules"] == DEFAULT_RULES
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": cluster_role["metadata"]["name"],
    }
    sa = one(docs, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "hostpool-system"}
    ]
    lease_role = one(docs, "Role")
    assert lease_role["metadata"]["namespace"] == "hostpool-system"
    assert lease_role["rules"] == LEASE_RULES
    assert one(docs, "RoleBinding")["subjects"] == binding["subjects"]
    for doc in by_kind(docs, "ClusterRole") + by_kind(render(), "Role"):
        for rule in doc["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], (doc["metadata"]["name"], rule)


@pytest.mark.parametrize("watch_namespace", ["", "vdi"])
def test_the_operator_watches_every_kind_and_writes_every_status(
    render: Render, watch_namespace: str
) -> None:
    """Each CRD of the chart (a ScalingPlan's too): list + watch on the kind, patch on its
    status subresource."""
    rules = operator_rules(render(watchNamespace=watch_namespace))

    def verbs(resource: str) -> set[str]:
        return {
            verb
            for rule in rules
            if rule["apiGroups"] == ["hostpool.io"] and resource in rule["resources"]
            for verb in rule["verbs"]
        }

    for crd in source_crds().values():
        plural = crd["spec"]["names"]["plural"]
        assert {"list", "watch"} <= verbs(plural), plural
        assert verbs(f"{plural}/status") == {"patch"} | (
            {"update"} if plural == "sessionrequests" else set()
        ), plural
    # Plans are only read: the operator never writes a plan's spec.
    assert verbs("scalingplans") == {"list", "watch"}


def test_default_deployment(render: Render) -> None:
    docs = operator_objects(render())
    deployment = one(docs, "Deployment")
    spec = deployment["spec"]
    # A leader and a warm standby; an update stops an old pod only once a new one is synced.
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    main = container(docs)
    assert main["image"] == "hostpool-operator:0.1.0"  # appVersion when no tag is set
    assert main["imagePullPolicy"] == "IfNotPresent"
    sc = main["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert isinstance(sc["runAsUser"], int)
    assert sc["runAsUser"] > 0
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert main["resources"]["requests"]
    assert main["resources"]["limits"]["memory"]
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports == {"healthz": 8080, "metrics": 9090}
    args = main["args"]
    assert args[args.index("--liveness") + 1] == "http://0.0.0.0:8080/healthz"
    assert args[args.index("--metrics-address") + 1] == "0.0.0.0:9090"
    assert "--namespace" not in args
    assert {"name": "tmp", "mountPath": "/tmp"} in main["volumeMounts"]


def test_deployment_args_are_accepted_by_the_operator_cli(render: Render) -> None:
    for docs in (render(), render(watchNamespace="vdi", **{"operator.verbose": True})):
        args = build_parser().parse_args(["run", *container(docs)["args"]])
        assert args.liveness == "http://0.0.0.0:8080/healthz"
        assert args.metrics_address == "0.0.0.0:9090"
        assert args.log_format == "json"
        assert args.status_interval == 1.0


def test_metrics_service_selects_the_pod(render: Render) -> None:
    docs = render()
    service = one(docs, "Service")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert not by_kind(docs, "ServiceMonitor")


def test_crds_rendered_from_crds_dir_with_keep(render: Render) -> None:
    rendered = {d["metadata"]["name"]: d for d in by_kind(render(), "CustomResourceDefinition")}
    source = source_crds()
    assert sorted(rendered) == sorted(source)
    assert sorted(rendered) == [
        "hostpools.hostpool.io",
        "scalingplans.hostpool.io",
        "sessionhosts.hostpool.io",
        "sessionrequests.hostpool.io",
    ]
    for name, crd in rendered.items():
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        meta = {k: v for k, v in crd["metadata"].items() if k not in ("labels", "annotations")}
        assert meta == source[name]["metadata"]
        assert {k: v for k, v in crd.items() if k != "metadata"} == {
            k: v for k, v in source[name].items() if k != "metadata"
        }


# ---------------------------------------------------------------------------------------
# non-default values


def test_watch_namespace_uses_a_role_there(render: Render) -> None:
    docs = operator_objects(render(watchNamespace="vdi"))
    roles = {r["metadata"]["namespace"]: r for r in by_kind(docs, "Role")}
    assert sorted(roles) == ["hostpool-system", "vdi"]
    assert roles["vdi"]["rules"] == DEFAULT_RULES
    assert roles["hostpool-system"]["rules"] == LEASE_RULES
    bindings = {b["metadata"]["namespace"]: b for b in by_kind(docs, "RoleBinding")}
    assert bindings["vdi"]["roleRef"]["name"] == roles["vdi"]["metadata"]["name"]
    assert bindings["vdi"]["subjects"][0]["namespace"] == "hostpool-system"
    # Nothing cluster-scoped at all (kopf's CRD and namespace scanning is off).
    assert not by_kind(docs, "ClusterRole")
    assert not by_kind(docs, "ClusterRoleBinding")
    args = container(docs)["args"]
    assert args[args.index("--namespace") + 1] == "vdi"


@pytest.mark.parametrize("watch_namespace", ["", "vdi"])
def test_default_workload_rule_is_pods_with_exactly_the_workload_verbs(
    render: Render, watch_namespace: str
) -> None:
    """Default values: one workload rule, Pods in the core group, get/list/watch/create/
    delete and nothing else (no update, patch or subresource)."""
    rules = operator_rules(render(watchNamespace=watch_namespace))
    assert workload_rules(rules) == [HOST_FINALIZERS_RULE, CLAIMS_RULE, POD_RULE]
    pod_rules = [r for r in rules if any(res.startswith("pods") for res in r["resources"])]
    assert pod_rules == [POD_RULE]
    assert sorted(pod_rules[0]["verbs"]) == ["create", "delete", "get", "list", "watch"]
    assert pod_rules[0]["apiGroups"] == [""]


@pytest.mark.parametrize("watch_namespace", ["", "vdi"])
def test_custom_workload_resources_render_exactly_those_rules(
    render: Render, watch_namespace: str
) -> None:
    resources = [
        {"apiGroup": "kubevirt.io", "resources": ["virtualmachines"]},
        {"apiGroup": "desktops.example.com", "resources": ["desktops", "kiosks"]},
    ]
    rules = operator_rules(render(watchNamespace=watch_namespace, workloadResources=resources))
    assert workload_rules(rules) == [
        HOST_FINALIZERS_RULE,
        CLAIMS_RULE,
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"], "verbs": WORKLOAD_VERBS},
        {
            "apiGroups": ["desktops.example.com"],
            "resources": ["desktops", "kiosks"],
            "verbs": WORKLOAD_VERBS,
        },
    ]
    # The list replaces the default: no Pods unless listed.
    assert not [r for r in rules if "pods" in r["resources"]]


@pytest.mark.parametrize("watch_namespace", ["", "vdi"])
def test_no_workload_resources_no_workload_rule(render: Render, watch_namespace: str) -> None:
    rules = operator_rules(render(watchNamespace=watch_namespace, workloadResources=[]))
    assert rules == OPERATOR_RULES
    outside = [r for r in rules if r["apiGroups"] != ["hostpool.io"]]
    assert not [r for r in outside if set(r["verbs"]) >= {"get", "create"}]


def test_the_kubevirt_command_of_the_docs(helm: Path) -> None:
    """docs/install.md's --set-json for KubeVirt: Pods and VirtualMachines."""
    docs = (REPO_ROOT / "docs" / "install.md").read_text()
    (value,) = re.findall(r"--set-json '(workloadResources=[^']*)'", docs)
    proc = run_helm(helm, "template", "hp", str(CHART_DIR), "--set-json", value)
    rules = operator_rules([d for d in yaml.safe_load_all(proc.stdout) if isinstance(d, dict)])
    assert workload_rules(rules) == [
        HOST_FINALIZERS_RULE,
        CLAIMS_RULE,
        POD_RULE,
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"], "verbs": WORKLOAD_VERBS},
    ]


def test_rbac_and_service_account_can_be_left_out(render: Render) -> None:
    docs = render(
        **{"rbac.create": False, "serviceAccount.create": False, "serviceAccount.name": "ops"}
    )
    kinds = {d["kind"] for d in operator_objects(docs)}
    assert not kinds & {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role"}
    # The agents' ServiceAccount and policy stay (agents.enabled), their Role goes.
    assert {d["kind"] for d in docs if is_agent(d)} == {
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "ops"


def test_leader_election_off(render: Render) -> None:
    docs = operator_objects(render(replicaCount=1, **{"leaderElection.enabled": False}))
    assert not by_kind(docs, "Role")
    assert not by_kind(docs, "FlowSchema")
    assert "--no-leader-election" in container(docs)["args"]


def test_the_lease_requests_get_their_own_priority_level(render: Render) -> None:
    """The FlowSchema matches the operator's ServiceAccount and its Lease alone, in the
    release namespace, and names the level asked for; an empty level renders none."""
    docs = operator_objects(render(namespace="ops", **{"serviceAccount.name": "op"}))
    (schema,) = by_kind(docs, "FlowSchema")
    assert schema["metadata"]["name"].endswith("-ops-leader-election")
    assert "namespace" not in schema["metadata"]
    spec = schema["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": "leader-election"}
    (rule,) = spec["rules"]
    assert rule["subjects"] == [
        {"kind": "ServiceAccount", "serviceAccount": {"name": "op", "namespace": "ops"}}
    ]
    assert rule["resourceRules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update"],
            "namespaces": ["ops"],
        }
    ]
    assert spec["matchingPrecedence"] < 9000  # before the catch-all for service accounts
    docs = render(**{"leaderElection.priorityLevel": "workload-high"})
    assert one(docs, "FlowSchema")["spec"]["priorityLevelConfiguration"]["name"] == (
        "workload-high"
    )
    assert not by_kind(render(**{"leaderElection.priorityLevel": ""}), "FlowSchema")


def test_crds_disabled(render: Render) -> None:
    docs = render(**{"crds.enabled": False})
    assert not by_kind(docs, "CustomResourceDefinition")
    assert one(docs, "Deployment")


def test_crds_without_keep_and_with_extra_annotations(render: Render) -> None:
    docs = render(
        **{"crds.keep": False, "crds.annotations": {"argocd.argoproj.io/sync-wave": "-1"}}
    )
    for crd in by_kind(docs, "CustomResourceDefinition"):
        assert crd["metadata"]["annotations"] == {"argocd.argoproj.io/sync-wave": "-1"}
    docs = render(**{"crds.keep": False})
    for crd in by_kind(docs, "CustomResourceDefinition"):
        assert "annotations" not in crd["metadata"]


def test_crds_keep_true(render: Render) -> None:
    for crd in by_kind(render(**{"crds.keep": True}), "CustomResourceDefinition"):
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_service_monitor(render: Render) -> None:
    docs = render(**{"serviceMonitor.enabled": True, "serviceMonitor.labels": {"team": "vdi"}})
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["team"] == "vdi"
    service = one(docs, "Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["hostpool-system"]}
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_service_monitor_needs_metrics(helm: Path) -> None:
    proc = run_helm(
        helm,
        "template",
        "hp",
        str(CHART_DIR),
        *set_args({"serviceMonitor.enabled": True, "metrics.enabled": False}),
        check=False,
    )
    assert proc.returncode != 0
    assert "serviceMonitor.enabled needs metrics.enabled" in proc.stderr


def test_metrics_disabled(render: Render) -> None:
    docs = render(**{"metrics.enabled": False})
    assert not by_kind(docs, "Service")
    assert "--metrics-address" not in container(docs)["args"]


def test_image_and_extra_args(render: Render) -> None:
    docs = render(
        **{
            "image.repository": "registry.example/vdi/hostpool-operator",
            "image.tag": "1.2.3",
            "image.pullPolicy": "Always",
            "operator.extraArgs": ["--verbose"],
            "operator.logFormat": "text",
            "operator.statusInterval": 0.5,
            "metrics.port": 9191,
        }
    )
    main = container(docs)
    assert main["image"] == "registry.example/vdi/hostpool-operator:1.2.3"
    assert main["imagePullPolicy"] == "Always"
    args = main["args"]
    assert args[-1] == "--verbose"
    assert args[args.index("--log-format") + 1] == "text"
    assert args[args.index("--status-interval") + 1] == "0.5"
    assert args[args.index("--metrics-address") + 1] == "0.0.0.0:9191"
    assert one(docs, "Service")["spec"]["ports"][0]["port"] == 9191


# ---------------------------------------------------------------------------------------
# host agents: identities, RBAC, the admission policy

#: The agent's calls (operator/hostpool_operator/agent.py), exactly.
AGENT_RULES: list[Obj] = [
    {
        "apiGroups": ["hostpool.io"],
        "resources": ["sessionhosts", "sessionrequests"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["hostpool.io"],
        "resources": ["sessionhosts/status", "sessionrequests/status"],
        # get: `kubectl patch --subresource status` reads the subresource first.
        "verbs": ["get", "patch"],
    },
    {"apiGroups": ["hostpool.io"], "resources": ["sessionrequests"], "verbs": ["delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
]
#: The policy's rules, in order: each refusal message starts with "rule <name>:".
AGENT_POLICY_RULES = [
    "agent-identity",
    "own-namespace",
    "agent-operations",
    "own-host",
    "host-status-fields",
    "own-requests",
    "request-status-fields",
]
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
#: ``object.?status.?F == oldObject.?status.?F`` in a rule: F is held unchanged.
UNCHANGED = re.compile(r"object\.\?status\.\?(\w+) == oldObject\.\?status\.\?(\w+)")


def agent_docs(docs: list[Obj]) -> list[Obj]:
    return [d for d in docs if is_agent(d)]


def agent_objects(docs: list[Obj], kind: str) -> list[Obj]:
    return [d for d in by_kind(docs, kind) if is_agent(d)]


def by_namespace(docs: list[Obj]) -> dict[str, list[Obj]]:
    found: dict[str, list[Obj]] = {}
    for doc in docs:
        found.setdefault(doc["metadata"]["namespace"], []).append(doc)
    return found


def names(docs: list[Obj]) -> list[str]:
    return sorted(d["metadata"]["name"] for d in docs)


def policy_rule(policy: Obj, rule: str) -> Obj:
    (validation,) = [
        v for v in policy["spec"]["validations"] if v["message"].startswith(f"rule {rule}:")
    ]
    result: Obj = validation
    return result


def unchanged_fields(expression: str) -> set[str]:
    pairs = UNCHANGED.findall(expression)
    assert all(new == old for new, old in pairs), pairs
    return {new for new, _ in pairs}


def crd_status_fields(plural: str, crd_dir: Path = CRD_DIR) -> set[str]:
    crd = yaml.safe_load((crd_dir / f"hostpool.io_{plural}.yaml").read_text())
    return {
        name
        for version in crd["spec"]["versions"]
        for name in version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    }


def test_agent_defaults_service_account_role_and_binding(render: Render) -> None:
    """Default values: the ServiceAccount hostpool-agent and the agents' Role in the release
    namespace, the Role granting exactly the agent's calls, bound to that ServiceAccount."""
    docs = render()
    (sa,) = agent_objects(docs, "ServiceAccount")
    assert sa["metadata"]["name"] == "hostpool-agent"
    assert sa["metadata"]["namespace"] == "hostpool-system"
    assert sa["automountServiceAccountToken"] is True
    (role,) = agent_objects(docs, "Role")
    assert role["metadata"]["namespace"] == "hostpool-system"
    assert role["rules"] == AGENT_RULES
    (binding,) = agent_objects(docs, "RoleBinding")
    assert binding["metadata"]["namespace"] == "hostpool-system"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "hostpool-agent", "namespace": "hostpool-system"}
    ]
    # No update/patch of the main resources (spec, metadata), no create, no wildcard.
    granted = {
        (res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]
    }
    for resource in ("sessionhosts", "sessionrequests", "hostpools"):
        for verb in ("create", "update", "patch"):
            assert (resource, verb) not in granted
    assert ("sessionhosts", "delete") not in granted
    assert not [r for r in role["rules"] if "*" in r["verbs"] + r["resources"] + r["apiGroups"]]


def test_agent_policy_and_binding(render: Render) -> None:
    docs = render()
    policy = one(agent_docs(docs), "ValidatingAdmissionPolicy")
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert is_agent(policy)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["hostpool.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE", "CONNECT"],
            "resources": ["*/*"],
        }
    ]
    assert spec["matchConditions"] == [
        {
            "name": "host-agents-only",
            "expression": "request.userInfo.username.startsWith('system:serviceaccount:') && "
            "size(request.userInfo.username.split(':')) == 4 && "
            "(request.userInfo.username.split(':')[3] == 'hostpool-agent' || "
            "request.userInfo.username.split(':')[3].startsWith('hostpool-agent-'))",
        }
    ]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert POD_NAME_EXTRA in variables["podName"]
    assert variables["host"] == (
        "variables.saName == 'hostpool-agent' ? variables.podName : "
        "variables.saName.startsWith('hostpool-agent-') ? variables.saName.substring(15) : ''"
    )
    assert len("hostpool-agent-") == 15
    validations = spec["validations"]
    assert [v["message"].split(":")[0] for v in validations] == [
        f"rule {rule}" for rule in AGENT_POLICY_RULES
    ]
    assert {v["reason"] for v in validations} == {"Forbidden"}
    assert policy_rule(policy, "own-host")["expression"] == (
        "!variables.hostStatus || object.metadata.name == variables.host"
    )
    assert (
        "oldObject.?status.?host.orValue('') == variables.host"
        in (policy_rule(policy, "own-requests")["expression"])
    )
    binding = one(agent_docs(docs), "ValidatingAdmissionPolicyBinding")
    assert binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["metadata"]["name"] == policy["metadata"]["name"]
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }


#: What an agent writes of the requests assigned to its host.
AGENT_REQUEST_FIELDS = {
    "sessionState",
    "stateChangedAt",
    "logonAt",
    "idleSince",
    "connects",
    "notice",
    "disconnect",
    "logoff",
}


def test_agent_policy_holds_every_other_status_field(render: Render) -> None:
    """The field rules compare every status field of the CRDs except the agent's own: for
    hosts all but metrics and agent, for requests all but those the agent measures and acts
    on."""
    policy = one(agent_docs(render()), "ValidatingAdmissionPolicy")
    host_fields = unchanged_fields(policy_rule(policy, "host-status-fields")["expression"])
    assert host_fields == crd_status_fields("sessionhosts") - {"metrics", "agent"}
    assert {"observedGeneration", "sessions", "address", "loadIndex", "bucket"} <= host_fields
    assert "conditions" in host_fields
    request_fields = unchanged_fields(policy_rule(policy, "request-status-fields")["expression"])
    assert request_fields == crd_status_fields("sessionrequests") - AGENT_REQUEST_FIELDS
    assert {"phase", "host", "hostAddress", "reason", "assignedAt", "conditions"} <= (
        request_fields
    )


def chart_with_a_status_field(tmp_path: Path, plural: str, field: str) -> Path:
    """A copy of the chart whose copy of the CRD ``plural`` has the status field ``field``
    (a string) more."""
    chart = tmp_path / "hostpool-operator"
    shutil.copytree(CHART_DIR, chart)
    path = chart / "files" / "crds" / f"hostpool.io_{plural}.yaml"
    crd = yaml.safe_load(path.read_text())
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
        field
    ] = {"type": "string"}
    path.write_text(yaml.safe_dump(crd))
    return chart


def test_agent_policy_follows_the_crd(helm: Path, tmp_path: Path) -> None:
    """A status field added to the CRD is held unchanged without editing the chart (the
    rules are generated from files/crds)."""
    chart = chart_with_a_status_field(tmp_path, "sessionhosts", "drainedBy")
    proc = run_helm(helm, "template", "hp", str(chart))
    docs = [d for d in yaml.safe_load_all(proc.stdout) if isinstance(d, dict)]
    policy = one(agent_docs(docs), "ValidatingAdmissionPolicy")
    fields = unchanged_fields(policy_rule(policy, "host-status-fields")["expression"])
    assert "drainedBy" in fields
    assert fields == crd_status_fields("sessionhosts", chart / "files" / "crds") - {
        "metrics",
        "agent",
    }


def test_agent_namespace_defaults_to_the_watched_namespace(render: Render) -> None:
    docs = render(watchNamespace="vdi")
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        (doc,) = agent_objects(docs, kind)
        assert doc["metadata"]["namespace"] == "vdi", kind


def test_agent_namespaces_and_hosts(render: Render) -> None:
    """agents.namespaces: the shared ServiceAccount and the Role in each; agents.hosts: one
    ServiceAccount <name>-<host> per machine, in its namespace, bound to the Role there."""
    docs = render(
        **{
            "agents.namespaces": ["vdi", "lab"],
            "agents.hosts": [
                {"name": "rds-01", "namespace": "vdi"},
                {"name": "rds-02.corp", "namespace": "vdi"},
                {"name": "lab-01", "namespace": "lab"},
            ],
        }
    )
    accounts = by_namespace(agent_objects(docs, "ServiceAccount"))
    assert sorted(accounts) == ["lab", "vdi"]
    assert names(accounts["vdi"]) == [
        "hostpool-agent",
        "hostpool-agent-rds-01",
        "hostpool-agent-rds-02.corp",
    ]
    assert names(accounts["lab"]) == ["hostpool-agent", "hostpool-agent-lab-01"]
    for sa in accounts["vdi"] + accounts["lab"]:
        name = sa["metadata"]["name"]
        if name == "hostpool-agent":
            assert sa["automountServiceAccountToken"] is True
            assert "annotations" not in sa["metadata"]
        else:
            assert sa["automountServiceAccountToken"] is False
            host = sa["metadata"]["annotations"]["hostpool.io/host"]
            assert name == f"hostpool-agent-{host}"
    roles = by_namespace(agent_objects(docs, "Role"))
    assert sorted(roles) == ["lab", "vdi"]
    for (role,) in roles.values():
        assert role["rules"] == AGENT_RULES
    bindings = by_namespace(agent_objects(docs, "RoleBinding"))
    for namespace, (binding,) in bindings.items():
        assert binding["roleRef"]["name"] == roles[namespace][0]["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": name, "namespace": namespace}
            for name in names(accounts[namespace])
        ]
    # One policy for all of them.
    assert len(by_kind(agent_docs(docs), "ValidatingAdmissionPolicy")) == 1


def test_agent_host_as_a_plain_name(render: Render) -> None:
    """A host given by its name alone is in the (only) agent namespace."""
    docs = render(watchNamespace="vdi", **{"agents.hosts": ["rds-01"]})
    accounts = by_namespace(agent_objects(docs, "ServiceAccount"))
    assert {ns: names(sas) for ns, sas in accounts.items()} == {
        "vdi": ["hostpool-agent", "hostpool-agent-rds-01"]
    }


def test_agent_service_account_name(render: Render) -> None:
    docs = render(**{"agents.serviceAccountName": "vdi-agent", "agents.hosts": ["rds-01"]})
    assert names(agent_objects(docs, "ServiceAccount")) == ["vdi-agent", "vdi-agent-rds-01"]
    spec = one(agent_docs(docs), "ValidatingAdmissionPolicy")["spec"]
    (condition,) = spec["matchConditions"]
    assert "[3] == 'vdi-agent' ||" in condition["expression"]
    assert "[3].startsWith('vdi-agent-')" in condition["expression"]
    assert "hostpool-agent" not in json.dumps(spec)
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert "variables.saName.substring(10)" in variables["host"]


def test_agents_disabled_renders_nothing_of_theirs(render: Render) -> None:
    docs = render(**{"agents.enabled": False, "agents.hosts": ["rds-01"]})
    assert not [d for d in docs if is_agent(d)]
    kinds = {d["kind"] for d in docs if component(d) != "session-admin"}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    # The operator's objects are the same either way.
    assert operator_objects(docs) == operator_objects(render())


def test_the_agents_command_of_the_docs(helm: Path) -> None:
    """docs/install.md's --set-json for agents: the accounts and the Role it describes."""
    docs = (REPO_ROOT / "docs" / "install.md").read_text()
    values = re.findall(r"--set-json '(agents\.[^']*)'", docs)
    assert len(values) == 2, values
    args = [arg for value in values for arg in ("--set-json", value)]
    proc = run_helm(helm, "template", "hostpool", str(CHART_DIR), "-n", "hostpool-system", *args)
    rendered = [d for d in yaml.safe_load_all(proc.stdout) if isinstance(d, dict)]
    accounts = by_namespace(agent_objects(rendered, "ServiceAccount"))
    assert {ns: names(sas) for ns, sas in accounts.items()} == {
        "vdi": ["hostpool-agent", "hostpool-agent-rds-01", "hostpool-agent-rds-02"]
    }
    (role,) = agent_objects(rendered, "Role")
    assert role["metadata"]["name"] == "hostpool-hostpool-operator-agent"
    assert "--role hostpool-hostpool-operator-agent" in docs
    agent_policy = one(agent_docs(rendered), "ValidatingAdmissionPolicy")
    assert agent_policy["metadata"]["name"] == role["metadata"]["name"]
    for rule in AGENT_POLICY_RULES:
        assert f"| `{rule}` |" in docs, rule


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"agents.namespaces": ["vdi", "lab"], "agents.hosts": ["rds-01"]},
            "agents.hosts: host rds-01 needs a namespace: agents.namespaces has 2 entries",
        ),
        (
            {"agents.namespaces": ["vdi"], "agents.hosts": [{"name": "x", "namespace": "lab"}]},
            "agents.hosts: host x is in namespace lab, which is not in agents.namespaces",
        ),
        (
            {"agents.hosts": ["rds-01", {"name": "rds-01", "namespace": "default"}]},
            "agents.hosts: host default/rds-01 is listed twice",
        ),
        (
            {"agents.hosts": [".".join(["a" * 60] * 4)]},
            "is longer than 253 characters",
        ),
        (
            {"serviceAccount.name": "hostpool-agent-ops"},
            "the operator's ServiceAccount hostpool-agent-ops would be taken for a host agent",
        ),
        (
            {"serviceAccount.name": "vdi", "agents.serviceAccountName": "vdi"},
            "the operator's ServiceAccount vdi would be taken for a host agent",
        ),
    ],
)
def test_agent_values_refused_at_render(helm: Path, values: dict[str, Any], message: str) -> None:
    proc = run_helm(helm, "template", "hp", str(CHART_DIR), *set_args(values), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------------------
# values.schema.json


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": "two"}, "at '/replicaCount': got string, want integer"),
        ({"replicaCount": 0}, "at '/replicaCount': minimum"),
        (
            {"replicaCount": 2, "leaderElection.enabled": False},
            "at '/replicaCount': value must be 1",
        ),
        (
            {"image.pullPolicy": "Sometimes"},
            "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'",
        ),
        ({"watchNamespace": "Not_A_Namespace"}, "at '/watchNamespace'"),
        ({"operator.logFormat": "xml"}, "at '/operator/logFormat': value must be one of"),
        ({"operator.statusInterval": 0}, "at '/operator/statusInterval'"),
        ({"metrics.port": 70000}, "at '/metrics/port'"),
        ({"crds.keep": "yes"}, "at '/crds/keep': got string, want boolean"),
        ({"replicas": 1}, "additional properties 'replicas' not allowed"),
        (
            {"workloadResources": [{"apiGroup": "kubevirt.io"}]},
            "at '/workloadResources/0': missing property 'resources'",
        ),
        (
            {"workloadResources": [{"apiGroup": "kubevirt.io", "resources": "virtualmachines"}]},
            "at '/workloadResources/0/resources': got string, want array",
        ),
        (
            {"workloadResources": [{"resources": ["pods"]}]},
            "at '/workloadResources/0': missing property 'apiGroup'",
        ),
        (
            {"workloadResources": [{"apiGroup": "", "resources": []}]},
            "at '/workloadResources/0/resources': minItems",
        ),
        (
            {"workloadResources": [{"apiGroup": "", "resources": ["*"]}]},
            "at '/workloadResources/0/resources/0'",
        ),
        (
            {"workloadResources": [{"apiGroup": "", "resources": ["pods/exec"]}]},
            "at '/workloadResources/0/resources/0'",
        ),
        (
            {"workloadResources": [{"apiGroup": "*", "resources": ["pods"]}]},
            "at '/workloadResources/0/apiGroup'",
        ),
        (
            {"workloadResources": [{"apiGroup": "", "resources": ["pods"], "verbs": ["*"]}]},
            "additional properties 'verbs' not allowed",
        ),
        (
            {"workloadResources": {"apiGroup": ""}},
            "at '/workloadResources': got object, want array",
        ),
        ({"agents.enabled": "yes"}, "at '/agents/enabled': got string, want boolean"),
        ({"agents.serviceAccountName": "Agent_SA"}, "at '/agents/serviceAccountName'"),
        ({"agents.serviceAccountName": ""}, "at '/agents/serviceAccountName'"),
        ({"agents.namespaces": "vdi"}, "at '/agents/namespaces': got string, want array"),
        ({"agents.namespaces": ["Not_A_Namespace"]}, "at '/agents/namespaces/0'"),
        ({"agents.namespaces": [""]}, "at '/agents/namespaces/0'"),
        ({"agents.namespaces": ["vdi", "vdi"]}, "at '/agents/namespaces'"),
        ({"agents.hosts": ["RDS_01"]}, "at '/agents/hosts/0'"),
        ({"agents.hosts": [{"namespace": "vdi"}]}, "at '/agents/hosts/0'"),
        ({"agents.hosts": [{"name": "rds-01", "role": "admin"}]}, "at '/agents/hosts/0'"),
        ({"agents.hosts": [7]}, "at '/agents/hosts/0'"),
        ({"agents.policy": True}, "additional properties 'policy' not allowed"),
    ],
)
def test_schema_refuses_bad_values(helm: Path, values: dict[str, Any], message: str) -> None:
    proc = run_helm(helm, "template", "hp", str(CHART_DIR), *set_args(values), check=False)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert message in proc.stderr, proc.stderr


def test_schema_refuses_a_bad_value_given_with_set(helm: Path) -> None:
    """The way users meet it: ``--set`` on the command line."""
    proc = run_helm(
        helm, "template", "hp", str(CHART_DIR), "--set", "replicaCount=two", check=False
    )
    assert proc.returncode != 0
    assert "- at '/replicaCount': got string, want integer" in proc.stderr


def test_schema_accepts_seconds_as_strings(render: Render, helm: Path) -> None:
    """``--set operator.statusInterval=0.5`` passes a string; it is accepted as given."""
    proc = run_helm(helm, "template", "hp", str(CHART_DIR), "--set", "operator.statusInterval=0.5")
    assert '- "0.5"' in proc.stdout


# ---------------------------------------------------------------------------------------
# the argocd-cm snippet of docs/install.md


def test_argocd_cm_patch_from_the_health_scripts(helm: Path) -> None:
    """docs/install.md's loop: one argocd-cm key per kind, the Lua file as its value."""
    kubectl = helm.parent / "kubectl"
    health_dir = CHART_DIR / "argocd" / "hostpool.io"
    kinds = ("HostPool", "SessionHost", "SessionRequest", "ScalingPlan")
    args = [
        f"--from-file=resource.customizations.health.hostpool.io_{kind}="
        f"{health_dir / kind / 'health.lua'}"
        for kind in kinds
    ]
    argv = [str(kubectl), "create", "configmap", "argocd-cm", "-n", "argocd", *args]
    proc = subprocess.run(
        [*argv, "--dry-run=client", "-o", "yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    cm = yaml.safe_load(proc.stdout)
    assert cm["metadata"] == {"name": "argocd-cm", "namespace": "argocd"}
    assert cm["data"] == {
        f"resource.customizations.health.hostpool.io_{kind}": (
            health_dir / kind / "health.lua"
        ).read_text()
        for kind in kinds
    }
    docs = (REPO_ROOT / "docs" / "install.md").read_text()
    for kind in kinds:
        assert f"resource.customizations.health.hostpool.io_{kind}" in docs


# ---------------------------------------------------------------------------------------
# the image reference, startupProbe, nodeSelector and the packaged files


def test_image_digest_overrides_the_tag(render: Render) -> None:
    """image.digest: repository@digest, whatever the tag; without it repository:tag (the
    chart's appVersion by default); a digest that is not sha256:<64 hex> is refused."""
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert container(render())["image"] == f"hostpool-operator:{chart['appVersion']}"
    assert container(render(**{"image.tag": "1.2.3"}))["image"] == "hostpool-operator:1.2.3"
    digest = "sha256:" + "0123456789abcdef" * 4
    pinned = render(
        **{"image.repository": "registry.example/hp", "image.tag": "1.2.3", "image.digest": digest}
    )
    assert container(pinned)["image"] == f"registry.example/hp@{digest}"


@pytest.mark.parametrize("digest", ["latest", "sha256:abc", "sha512:" + "0" * 64])
def test_image_digest_must_be_a_sha256(helm: Path, digest: str) -> None:
    proc = run_helm(
        helm,
        "template",
        "hp",
        str(CHART_DIR),
        *set_args({"image.digest": digest}),
        check=False,
    )
    assert proc.returncode != 0
    assert "digest" in proc.stderr


def test_startup_probe_on_the_liveness_endpoint(render: Render) -> None:
    """The startupProbe asks the liveness endpoint (the port the operator's --liveness URL
    names) and gives a start 60 s by default; its settings are values."""
    c = container(render())
    assert c["startupProbe"]["httpGet"] == c["livenessProbe"]["httpGet"]
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    (port,) = [p for p in c["ports"] if p["name"] == "healthz"]
    liveness_url = c["args"][c["args"].index("--liveness") + 1]
    assert liveness_url.endswith(f":{port['containerPort']}/healthz")
    probe = c["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == 60
    custom = container(render(**{"startupProbe.failureThreshold": 90}))["startupProbe"]
    assert custom["failureThreshold"] == 90
    assert custom["httpGet"] == probe["httpGet"]


def node_selector(docs: list[Obj]) -> Obj | None:
    selector: Obj | None = one(docs, "Deployment")["spec"]["template"]["spec"].get("nodeSelector")
    return selector


def test_node_selector_is_linux_by_default_and_merged_with_the_users(render: Render) -> None:
    """The image is Linux-only: kubernetes.io/os: linux by default; a nodeSelector of the user
    is added to it (helm merges maps); the key can be removed with null."""
    assert node_selector(render()) == {"kubernetes.io/os": "linux"}
    assert node_selector(render(nodeSelector={"disktype": "ssd"})) == {
        "kubernetes.io/os": "linux",
        "disktype": "ssd",
    }
    assert node_selector(render(**{"nodeSelector.kubernetes\\.io/os": None})) is None


def test_packaged_chart_ships_the_argocd_files(helm: Path, tmp_path: Path) -> None:
    """helm package keeps argocd/ (the Argo CD Lua checks and actions go with the chart) and
    leaves out what .helmignore names (sync-crds.sh)."""
    run_helm(helm, "package", str(CHART_DIR), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("hostpool-operator-*.tgz")
    with tarfile.open(archive) as tar:
        packaged = {name.partition("/")[2] for name in tar.getnames()}
    argocd = {
        str(p.relative_to(CHART_DIR)) for p in (CHART_DIR / "argocd").rglob("*") if p.is_file()
    }
    assert argocd, "no files under argocd/"
    assert any(name.endswith("health.lua") for name in argocd)
    assert argocd <= packaged, sorted(argocd - packaged)
    assert "sync-crds.sh" not in packaged
    assert "Chart.yaml" in packaged


# ---------------------------------------------------------------------------------------
# Roles for the other actors: people (aggregated into view/edit/admin) and a session broker

HOSTPOOL_KINDS = ["hostpools", "sessionhosts", "sessionrequests", "scalingplans"]
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def user_roles(docs: list[Obj]) -> dict[str, Obj]:
    return {
        d["metadata"]["name"]: d
        for d in docs
        if d["kind"] == "ClusterRole" and component(d) == "user-roles"
    }


def aggregated_into(role: Obj) -> set[str]:
    """The built-in ClusterRoles a role's labels aggregate it into."""
    labels = role["metadata"]["labels"]
    return {k.removeprefix(AGGREGATE) for k, v in labels.items() if v == "true"} & {
        "view",
        "edit",
        "admin",
    }


def test_aggregated_cluster_roles_by_default(render: Render) -> None:
    roles = user_roles(render())
    assert sorted(roles) == ["hp-hostpool-operator-edit", "hp-hostpool-operator-view"]
    view, edit = roles["hp-hostpool-operator-view"], roles["hp-hostpool-operator-edit"]
    assert aggregated_into(view) == {"view", "edit", "admin"}
    assert aggregated_into(edit) == {"edit", "admin"}
    assert view["rules"] == [
        {
            "apiGroups": ["hostpool.io"],
            "resources": HOSTPOOL_KINDS,
            "verbs": ["get", "list", "watch"],
        }
    ]
    assert edit["rules"] == [
        {
            "apiGroups": ["hostpool.io"],
            "resources": HOSTPOOL_KINDS,
            "verbs": ["create", "update", "patch", "delete", "deletecollection"],
        },
        {
            "apiGroups": ["hostpool.io"],
            "resources": ["hostpools/scale"],
            "verbs": ["get", "update", "patch"],
        },
    ]
    # Never a status: that is the operator's and the agents' to write.
    for role in roles.values():
        for rule in role["rules"]:
            assert not [r for r in rule["resources"] if r.endswith("/status")], rule


def test_aggregated_cluster_roles_can_be_left_out(render: Render) -> None:
    assert not user_roles(render(**{"rbac.aggregateClusterRoles": False}))
    assert not user_roles(render(**{"rbac.create": False}))


def test_aggregated_cluster_roles_with_watch_namespace(render: Render) -> None:
    """They are cluster-scoped either way: a RoleBinding to view/edit grants them in one
    namespace."""
    assert sorted(user_roles(render(watchNamespace="vdi"))) == [
        "hp-hostpool-operator-edit",
        "hp-hostpool-operator-view",
    ]


def broker_objects(docs: list[Obj]) -> list[Obj]:
    return [d for d in docs if component(d) == "broker"]


BROKER_RULES = [
    {
        "apiGroups": ["hostpool.io"],
        "resources": ["sessionrequests"],
        "verbs": ["create", "get", "list", "watch", "delete"],
    },
    {
        "apiGroups": ["hostpool.io"],
        "resources": ["hostpools", "sessionhosts"],
        "verbs": ["get", "list", "watch"],
    },
    # The broker's DELETE session: status.logoff with a deadline of now, as a forced logoff.
    {"apiGroups": ["hostpool.io"], "resources": ["sessionrequests/status"], "verbs": ["patch"]},
]


BROKER_POLICY_KINDS = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


def test_no_broker_role_by_default(render: Render) -> None:
    assert not broker_objects(render())


def test_broker_role_in_the_release_namespace(render: Render) -> None:
    docs = broker_objects(render(**{"broker.create": True}))
    assert sorted(d["kind"] for d in docs) == [
        "Role",
        "RoleBinding",
        "ServiceAccount",
        *BROKER_POLICY_KINDS,
    ]
    role = one(docs, "Role")
    assert role["metadata"]["name"] == "hp-hostpool-operator-broker"
    assert role["metadata"]["namespace"] == "hostpool-system"
    assert role["rules"] == BROKER_RULES
    binding = one(docs, "RoleBinding")
    assert binding["metadata"]["namespace"] == "hostpool-system"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "hp-hostpool-operator-broker",
    }
    sa = one(docs, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "hostpool-system"}
    ]
    assert sa["metadata"]["name"] == "hp-hostpool-operator-broker"


def test_broker_role_in_the_pools_namespace_for_an_existing_account(render: Render) -> None:
    docs = broker_objects(
        render(
            **{
                "broker.create": True,
                "broker.namespace": "vdi",
                "broker.serviceAccount": {"create": False, "name": "helpdesk", "namespace": "web"},
            }
        )
    )
    assert sorted(d["kind"] for d in docs) == ["Role", "RoleBinding", *BROKER_POLICY_KINDS]
    assert one(docs, "Role")["metadata"]["namespace"] == "vdi"
    policy = one(docs, "ValidatingAdmissionPolicy")
    assert policy["spec"]["matchConditions"][0]["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:web:helpdesk'"
    )
    binding_of_policy = one(docs, "ValidatingAdmissionPolicyBinding")
    assert binding_of_policy["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["vdi"]}
        ]
    }
    assert binding_of_policy["spec"]["validationActions"] == ["Deny"]
    without = broker_objects(render(**{"broker.create": True, "broker.admissionPolicy": False}))
    assert sorted(d["kind"] for d in without) == ["Role", "RoleBinding", "ServiceAccount"]
    assert one(docs, "Role")["rules"] == BROKER_RULES
    binding = one(docs, "RoleBinding")
    assert binding["metadata"]["namespace"] == "vdi"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "helpdesk", "namespace": "web"}
    ]


def test_broker_role_follows_watch_namespace(render: Render) -> None:
    docs = broker_objects(render(**{"broker.create": True, "watchNamespace": "vdi"}))
    assert one(docs, "Role")["metadata"]["namespace"] == "vdi"
    assert one(docs, "ServiceAccount")["metadata"]["namespace"] == "hostpool-system"


def test_broker_values_are_checked_by_the_schema(helm: Path) -> None:
    proc = run_helm(
        helm, "template", "hp", str(CHART_DIR), "--set", "broker.serviceAcount.name=x", check=False
    )
    assert proc.returncode != 0
    assert "serviceAcount" in proc.stderr


# ---------------------------------------------------------------------------------------
# the session broker's workload (broker.enabled): hostpool-broker, its Service, PDB, policy

ISSUER = "https://login.example.com/realms/vdi"
#: The least values with which broker.enabled renders.
BROKER: dict[str, Any] = {
    "broker.enabled": True,
    "broker.oidc.issuer": ISSUER,
    "broker.oidc.audience": "vdi-portal",
}
BROKER_NAME = "hp-hostpool-operator-broker"


def broker_deployment(docs: list[Obj]) -> Obj:
    return one(broker_objects(docs), "Deployment")


def broker_container(docs: list[Obj]) -> Obj:
    (only,) = broker_deployment(docs)["spec"]["template"]["spec"]["containers"]
    result: Obj = only
    return result


def flag(args: list[str], name: str) -> str:
    """The value after ``name`` (which occurs once)."""
    assert args.count(name) == 1, (name, args)
    return args[args.index(name) + 1]


def selects(selector: Obj, labels: Obj) -> bool:
    return bool(selector.items() <= labels.items())


def render_fails(helm: Path, values: dict[str, Any]) -> str:
    proc = run_helm(helm, "template", "hp", str(CHART_DIR), *set_args(values), check=False)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr


def test_operator_leader_and_standby(render: Render) -> None:
    """Two replicas by default (a leader and a warm standby): a PodDisruptionBudget that keeps
    one through a drain, a preferred anti-affinity on the node name (replaced by
    ``affinity``), optional topologySpreadConstraints. One replica: Recreate, no PDB; without
    leader election the schema allows no more than one (tested with the schema's cases)."""
    docs = operator_objects(render())
    deployment = one(docs, "Deployment")
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["metadata"]["name"] == "hp-hostpool-operator"
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    labels = deployment["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["selector"]["matchLabels"] == labels
    pod = deployment["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == labels
    assert "topologySpreadConstraints" not in pod
    mine: Obj = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone"}]
    pod = one(
        operator_objects(render(affinity=mine, topologySpreadConstraints=spread)), "Deployment"
    )["spec"]["template"]["spec"]
    assert pod["affinity"] == mine
    assert pod["topologySpreadConstraints"] == spread
    single = operator_objects(render(replicaCount=1))
    assert one(single, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    assert not by_kind(single, "PodDisruptionBudget")
    three = operator_objects(render(replicaCount=3))
    assert one(three, "Deployment")["spec"]["replicas"] == 3
    assert one(three, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    # Without metrics, ready is the liveness endpoint answering (the first LIST is done).
    probe = container(operator_objects(render(**{"metrics.enabled": False})))["readinessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "healthz"}


def test_no_broker_workload_by_default(render: Render) -> None:
    for docs in (render(), render(**{"broker.create": True})):
        assert [d["metadata"]["name"] for d in by_kind(docs, "Deployment")] == [
            "hp-hostpool-operator"
        ]
        # The operator's own (a leader and a standby): none of the broker's.
        assert [d["metadata"]["name"] for d in by_kind(docs, "PodDisruptionBudget")] == [
            "hp-hostpool-operator"
        ]
        assert not by_kind(docs, "NetworkPolicy")
        assert [s["metadata"]["name"] for s in by_kind(docs, "Service")] == [
            "hp-hostpool-operator-metrics"
        ]


def test_broker_enabled_objects(render: Render) -> None:
    """broker.enabled: a Deployment, Service and PDB named <fullname>-broker, and the broker
    Role, RoleBinding and ServiceAccount although broker.create is false; the operator's
    objects are those of the default values."""
    docs = render(**BROKER)
    broker = broker_objects(docs)
    assert sorted(d["kind"] for d in broker) == [
        "Deployment",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "Service",
        "ServiceAccount",
        *BROKER_POLICY_KINDS,
    ]
    for doc in broker:
        if doc["kind"] in BROKER_POLICY_KINDS:  # cluster-scoped
            assert doc["metadata"]["name"] == f"{BROKER_NAME}-logoff-only"
            continue
        if doc["kind"] == "Service" and doc["spec"]["ports"][0]["name"] == "metrics":
            assert doc["metadata"]["name"] == f"{BROKER_NAME}-metrics"
        else:
            assert doc["metadata"]["name"] == BROKER_NAME, doc["kind"]
        assert doc["metadata"]["namespace"] == "hostpool-system", doc["kind"]
    assert one(broker, "Role")["rules"] == BROKER_RULES
    assert operator_objects(docs) == operator_objects(render())


def test_broker_role_grants_exactly_one_status_write(render: Render) -> None:
    """The only status rule: patch on sessionrequests/status (the logoff of DELETE
    .../session); nothing on the other kinds' status, no update."""
    for values in (BROKER, {"broker.create": True}):
        role = one(broker_objects(render(**values)), "Role")
        status_rules = [
            r for r in role["rules"] if any(res.endswith("/status") for res in r["resources"])
        ]
        assert status_rules == [
            {
                "apiGroups": ["hostpool.io"],
                "resources": ["sessionrequests/status"],
                "verbs": ["patch"],
            }
        ]


def test_broker_deployment(render: Render) -> None:
    docs = render(**BROKER)
    deployment = broker_deployment(docs)
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == BROKER_NAME
    assert pod["automountServiceAccountToken"] is True
    main = broker_container(docs)
    assert main["command"] == ["hostpool-broker"]
    assert main["image"] == container(operator_objects(docs))["image"]
    assert main["imagePullPolicy"] == "IfNotPresent"
    args = main["args"]
    assert flag(args, "--oidc-issuer") == ISSUER
    assert flag(args, "--oidc-audience") == "vdi-portal"
    assert flag(args, "--user-claim") == "preferred_username"
    assert flag(args, "--groups-claim") == "groups"
    assert flag(args, "--listen") == "0.0.0.0:8443"
    assert flag(args, "--namespace") == "hostpool-system"
    assert flag(args, "--connect-timeout-seconds") == "30"
    assert flag(args, "--metrics-stale-after") == "120"  # the operator's value
    assert flag(args, "--log-format") == "json"
    for absent in ("--tls-cert", "--tls-key", "--oidc-ca-file"):
        assert absent not in args
    assert main["ports"] == [
        {"name": "http", "containerPort": 8443, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    assert flag(args, "--metrics-listen") == "0.0.0.0:9090"
    assert main["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "http",
        "scheme": "HTTP",
    }
    assert main["startupProbe"]["httpGet"] == main["livenessProbe"]["httpGet"]
    assert main["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "http",
        "scheme": "HTTP",
    }
    assert main["resources"]["requests"]
    assert main["resources"]["limits"]["memory"]
    assert {"name": "tmp", "mountPath": "/tmp"} in main["volumeMounts"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}


def test_broker_is_hardened_like_the_operator(render: Render) -> None:
    """The pod's and the container's securityContext are the operator's, value for value
    (runAsNonRoot, readOnlyRootFilesystem, seccomp, all capabilities dropped), also when
    they are changed."""
    for values in ({}, {"securityContext.runAsUser": 1234, "podSecurityContext.fsGroup": 1234}):
        docs = render(**BROKER, **values)
        operator_pod = one(operator_objects(docs), "Deployment")["spec"]["template"]["spec"]
        broker_pod = broker_deployment(docs)["spec"]["template"]["spec"]
        assert broker_pod["securityContext"] == operator_pod["securityContext"]
        sc = broker_container(docs)["securityContext"]
        assert sc == container(operator_objects(docs))["securityContext"]
        assert (
            broker_pod["automountServiceAccountToken"]
            == (operator_pod["automountServiceAccountToken"])
        )
    sc = broker_container(render(**BROKER))["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


def test_broker_args_are_accepted_by_the_broker_cli(render: Render) -> None:
    """The Deployment's args, parsed by hostpool-broker's own parser."""
    args = parse_broker_args(broker_container(render(**BROKER))["args"])
    assert args.oidc_issuer == ISSUER
    assert args.oidc_audience == "vdi-portal"
    assert args.oidc_ca_file is None
    assert args.tls_cert is None
    assert (args.listen_host, args.listen_port) == ("0.0.0.0", 8443)
    assert args.namespace == ["hostpool-system"]
    assert args.connect_timeout_seconds == 30.0
    assert args.log_format == "json"
    docs = render(
        **BROKER,
        watchNamespace="vdi",
        **{
            "broker.tls.secretName": "broker-tls",
            "broker.oidc.caSecret.name": "idp-ca",
            "broker.oidc.userClaim": "email",
            "broker.connectTimeoutSeconds": 300,
            "broker.logFormat": "text",
            "broker.extraArgs": ["--verbose", "--rate-limit", "2"],
        },
    )
    args = parse_broker_args(broker_container(docs)["args"])
    assert args.tls_cert == "/etc/hostpool-broker/tls/tls.crt"
    assert args.tls_key == "/etc/hostpool-broker/tls/tls.key"
    assert args.oidc_ca_file == "/etc/hostpool-broker/oidc-ca/ca.crt"
    assert args.user_claim == "email"
    assert args.namespace == ["vdi"]
    assert args.connect_timeout_seconds == 300.0
    assert args.log_format == "text"
    assert args.verbose is True
    assert args.rate_limit == 2.0


def test_broker_oidc_token_settings(render: Render, helm: Path) -> None:
    """Authorized parties, the key set's lifetime and the http issuer reach the broker's
    own parser; a plain-http issuer fails the render unless allowed by name."""
    args = parse_broker_args(broker_container(render(**BROKER))["args"])
    assert args.oidc_authorized_party == []
    assert (args.oidc_keys_max_age_seconds, args.oidc_keys_max_stale_seconds) == (300, 3600)
    assert args.oidc_allow_insecure_issuer is False
    docs = render(
        **{
            **BROKER,
            "broker.oidc.authorizedParties": ["rdp-portal", "rdp-client"],
            "broker.oidc.keysMaxAgeSeconds": 60,
            "broker.oidc.keysMaxStaleSeconds": 0,
        }
    )
    args = parse_broker_args(broker_container(docs)["args"])
    assert args.oidc_authorized_party == ["rdp-portal", "rdp-client"]
    assert (args.oidc_keys_max_age_seconds, args.oidc_keys_max_stale_seconds) == (60, 0)
    plain = {**BROKER, "broker.oidc.issuer": "http://keycloak.test:8080/realms/vdi"}
    assert "allowInsecureIssuer" in render_fails(helm, plain)
    docs = render(**{**plain, "broker.oidc.allowInsecureIssuer": True})
    args = parse_broker_args(broker_container(docs)["args"])
    assert args.oidc_issuer == plain["broker.oidc.issuer"]
    assert args.oidc_allow_insecure_issuer is True


@pytest.mark.parametrize(
    ("values", "namespace"),
    [
        ({}, "hostpool-system"),
        ({"watchNamespace": "vdi"}, "vdi"),
        ({"watchNamespace": "vdi", "broker.namespace": "lab"}, "lab"),
    ],
)
def test_broker_namespace_is_its_roles(
    render: Render, values: dict[str, Any], namespace: str
) -> None:
    """--namespace is where the broker Role is: broker.namespace, else watchNamespace, else
    the release namespace."""
    docs = render(**BROKER, **values)
    assert one(broker_objects(docs), "Role")["metadata"]["namespace"] == namespace
    assert flag(broker_container(docs)["args"], "--namespace") == namespace
    assert broker_deployment(docs)["metadata"]["namespace"] == "hostpool-system"


def test_broker_with_an_existing_service_account(render: Render) -> None:
    docs = render(**BROKER, **{"broker.serviceAccount": {"create": False, "name": "portal"}})
    assert not by_kind(broker_objects(docs), "ServiceAccount")
    assert broker_deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"] == "portal"
    assert one(broker_objects(docs), "RoleBinding")["subjects"] == [
        {"kind": "ServiceAccount", "name": "portal", "namespace": "hostpool-system"}
    ]


def test_broker_pods_are_not_the_operators(render: Render) -> None:
    """The broker's Service and PDB select its pods; the operator's Deployment and metrics
    Service do not (nor the broker's selector the operator's pod)."""
    docs = render(**BROKER)
    broker_pod = broker_deployment(docs)["spec"]["template"]["metadata"]["labels"]
    operator = one(operator_objects(docs), "Deployment")
    operator_pod = operator["spec"]["template"]["metadata"]["labels"]
    broker_selector = broker_deployment(docs)["spec"]["selector"]["matchLabels"]
    assert selects(broker_selector, broker_pod)
    assert not selects(broker_selector, operator_pod)
    assert not selects(operator["spec"]["selector"]["matchLabels"], broker_pod)
    metrics = one(operator_objects(docs), "Service")
    assert not selects(metrics["spec"]["selector"], broker_pod)
    for service in by_kind(broker_objects(docs), "Service"):  # the API's and the metrics'
        assert selects(service["spec"]["selector"], broker_pod)
    pdb = one(broker_objects(docs), "PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], broker_pod)
    operator_pdb = one(operator_objects(docs), "PodDisruptionBudget")
    assert selects(operator_pdb["spec"]["selector"]["matchLabels"], operator_pod)
    assert not selects(operator_pdb["spec"]["selector"]["matchLabels"], broker_pod)


def broker_api_service(docs: list[Obj]) -> Obj:
    """The broker's Service for its API (the other one is for its metrics)."""
    (service,) = [
        s for s in by_kind(broker_objects(docs), "Service") if s["metadata"]["name"] == BROKER_NAME
    ]
    return service


def test_broker_service(render: Render) -> None:
    service = broker_api_service(render(**BROKER))
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {
            "name": "http",
            "port": 8443,
            "targetPort": "http",
            "protocol": "TCP",
            "appProtocol": "http",
        }
    ]
    assert "annotations" not in service["metadata"]
    service = broker_api_service(
        render(
            **BROKER,
            **{
                "broker.service": {
                    "type": "LoadBalancer",
                    "port": 443,
                    "annotations": {"example.com/lb": "internal"},
                },
                "broker.tls.secretName": "broker-tls",
            },
        )
    )
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["metadata"]["annotations"] == {"example.com/lb": "internal"}
    assert service["spec"]["ports"] == [
        {
            "name": "https",
            "port": 443,
            "targetPort": "https",
            "protocol": "TCP",
            "appProtocol": "https",
        }
    ]


def test_broker_pdb_only_with_more_than_one_replica(render: Render) -> None:
    pdb = one(broker_objects(render(**BROKER)), "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["metadata"]["name"] == BROKER_NAME
    assert pdb["spec"]["minAvailable"] == 1
    docs = render(**BROKER, **{"broker.replicas": 1})
    assert broker_deployment(docs)["spec"]["replicas"] == 1
    assert not by_kind(broker_objects(docs), "PodDisruptionBudget")
    assert broker_deployment(render(**BROKER, **{"broker.replicas": 3}))["spec"]["replicas"] == 3


def test_broker_replicas_spread_over_nodes(render: Render) -> None:
    """By default a preferred pod anti-affinity on the node name, on the broker's own pods;
    broker.affinity replaces it."""
    docs = render(**BROKER)
    pod = broker_deployment(docs)["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (
        term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        == (broker_deployment(docs)["spec"]["selector"]["matchLabels"])
    )
    operator_pod = one(operator_objects(docs), "Deployment")["spec"]["template"]["spec"]
    assert operator_pod["affinity"] != pod["affinity"]  # the operator's pods spread by theirs
    mine: Obj = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone"}]
    pod = broker_deployment(
        render(**BROKER, **{"broker.affinity": mine, "broker.topologySpreadConstraints": spread})
    )["spec"]["template"]["spec"]
    assert pod["affinity"] == mine
    assert pod["topologySpreadConstraints"] == spread


def test_broker_tls_secret(render: Render) -> None:
    """broker.tls.secretName: the Secret mounted read-only, --tls-cert/--tls-key its two
    files, the port named https and every probe over HTTPS."""
    docs = render(**BROKER, **{"broker.tls.secretName": "broker-tls"})
    main = broker_container(docs)
    args = main["args"]
    mount = next(m for m in main["volumeMounts"] if m["name"] == "tls")
    assert mount["readOnly"] is True
    assert flag(args, "--tls-cert") == f"{mount['mountPath']}/tls.crt"
    assert flag(args, "--tls-key") == f"{mount['mountPath']}/tls.key"
    volumes = {v["name"]: v for v in broker_deployment(docs)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "broker-tls"
    assert {i["key"] for i in volumes["tls"]["secret"]["items"]} == {"tls.crt", "tls.key"}
    assert main["ports"][0] == {"name": "https", "containerPort": 8443, "protocol": "TCP"}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert main[probe]["httpGet"]["scheme"] == "HTTPS", probe
        assert main[probe]["httpGet"]["port"] == "https", probe
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"


@pytest.mark.parametrize(
    ("value", "source"),
    [
        ({"broker.oidc.caConfigMap": {"name": "idp-ca", "key": "bundle.pem"}}, "configMap"),
        ({"broker.oidc.caSecret": {"name": "idp-ca", "key": "bundle.pem"}}, "secret"),
    ],
)
def test_broker_oidc_ca(render: Render, value: dict[str, Any], source: str) -> None:
    docs = render(**BROKER, **value)
    main = broker_container(docs)
    mount = next(m for m in main["volumeMounts"] if m["name"] == "oidc-ca")
    assert mount["readOnly"] is True
    assert flag(main["args"], "--oidc-ca-file") == f"{mount['mountPath']}/ca.crt"
    volumes = {v["name"]: v for v in broker_deployment(docs)["spec"]["template"]["spec"]["volumes"]}
    volume = volumes["oidc-ca"][source]
    assert volume.get("name", volume.get("secretName")) == "idp-ca"
    assert volume["items"] == [{"key": "bundle.pem", "path": "ca.crt"}]


def test_broker_options(render: Render) -> None:
    docs = render(
        **BROKER,
        **{
            "broker.oidc.userClaim": "email",
            "broker.oidc.groupsClaim": "roles",
            "broker.connectTimeoutSeconds": 45,
            "broker.port": 9443,
            "broker.extraArgs": ["--verbose"],
            "broker.podAnnotations": {"prometheus.io/scrape": "true"},
        },
    )
    main = broker_container(docs)
    args = main["args"]
    assert flag(args, "--user-claim") == "email"
    assert flag(args, "--groups-claim") == "roles"
    assert flag(args, "--connect-timeout-seconds") == "45"
    assert flag(args, "--listen") == "0.0.0.0:9443"
    assert args[-1] == "--verbose"
    assert main["ports"][0]["containerPort"] == 9443
    template = broker_deployment(docs)["spec"]["template"]
    assert template["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"broker.enabled": True}, "broker.oidc.issuer is required"),
        ({"broker.enabled": True, "broker.oidc.audience": "vdi"}, "broker.oidc.issuer is required"),
        (
            {"broker.enabled": True, "broker.oidc.issuer": ISSUER},
            "broker.oidc.audience is required",
        ),
        (
            {
                **BROKER,
                "broker.oidc.caConfigMap.name": "a",
                "broker.oidc.caSecret.name": "b",
            },
            "broker.oidc.caConfigMap and broker.oidc.caSecret: set one of them",
        ),
        (
            {**BROKER, "broker.serviceAccount.namespace": "web"},
            "so its ServiceAccount must be there too (broker.serviceAccount.namespace is web)",
        ),
    ],
)
def test_broker_values_refused_at_render(helm: Path, values: dict[str, Any], message: str) -> None:
    assert message in render_fails(helm, values)


def test_broker_network_policy(render: Render) -> None:
    """broker.networkPolicy.enabled: ingress only to the broker's port from ingressFrom;
    egress only to DNS, the API server's and the issuer's ports (and peers)."""
    assert not by_kind(render(**BROKER), "NetworkPolicy")
    assert not by_kind(render(**{"broker.networkPolicy.enabled": True}), "NetworkPolicy")
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}}}
    api = [{"ipBlock": {"cidr": "10.0.0.10/32"}}]
    issuer = [{"ipBlock": {"cidr": "203.0.113.0/28"}}]
    docs = render(
        **BROKER,
        **{
            "broker.networkPolicy.enabled": True,
            "broker.networkPolicy.ingressFrom": [peer],
            "broker.networkPolicy.egress.apiServer": {"to": api, "ports": [6443]},
            "broker.networkPolicy.egress.issuer.to": issuer,
        },
    )
    policy = one(docs, "NetworkPolicy")
    assert policy["metadata"]["name"] == BROKER_NAME
    spec = policy["spec"]
    assert (
        spec["podSelector"]["matchLabels"]
        == broker_deployment(docs)["spec"]["selector"]["matchLabels"]
    )
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [
        {"ports": [{"port": 8443, "protocol": "TCP"}], "from": [peer]},
        {"ports": [{"port": 9090, "protocol": "TCP"}]},  # metrics: metricsFrom is empty
    ]
    dns, to_api, to_issuer = spec["egress"]
    assert dns["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    assert dns["to"][0]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
    }
    assert to_api == {"ports": [{"port": 6443, "protocol": "TCP"}], "to": api}
    assert to_issuer == {"ports": [{"port": 443, "protocol": "TCP"}], "to": issuer}
    # Defaults: ingress from anywhere and egress to any address, but on those ports only.
    spec = one(render(**BROKER, **{"broker.networkPolicy.enabled": True}), "NetworkPolicy")["spec"]
    assert spec["ingress"] == [
        {"ports": [{"port": 8443, "protocol": "TCP"}]},
        {"ports": [{"port": 9090, "protocol": "TCP"}]},
    ]
    assert [rule.get("to") is None for rule in spec["egress"]] == [False, True, True]
    assert all(rule["ports"] for rule in spec["ingress"] + spec["egress"])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"broker.replica": 2}, "additional properties 'replica' not allowed"),
        ({"broker.oidc.clientId": "x"}, "additional properties 'clientId' not allowed"),
        ({"broker.tls.secret": "x"}, "additional properties 'secret' not allowed"),
        ({"broker.networkPolicy.egress.ntp": []}, "additional properties 'ntp' not allowed"),
        ({"broker.enabled": "yes"}, "at '/broker/enabled': got string, want boolean"),
        ({"broker.replicas": 0}, "at '/broker/replicas'"),
        ({"broker.port": 70000}, "at '/broker/port'"),
        ({"broker.service.type": "Ingress"}, "at '/broker/service/type'"),
        ({"broker.oidc.issuer": "login.example.com"}, "at '/broker/oidc/issuer'"),
        ({"broker.connectTimeoutSeconds": 0}, "at '/broker/connectTimeoutSeconds'"),
        ({"broker.connectTimeoutSeconds": 301}, "at '/broker/connectTimeoutSeconds'"),
        ({"broker.logFormat": "xml"}, "at '/broker/logFormat'"),
        ({"broker.tls.secretName": "Broker_TLS"}, "at '/broker/tls/secretName'"),
        (
            {"broker.networkPolicy.egress.issuer.ports": []},
            "at '/broker/networkPolicy/egress/issuer/ports'",
        ),
    ],
)
def test_schema_refuses_bad_broker_values(helm: Path, values: dict[str, Any], message: str) -> None:
    stderr = render_fails(helm, values)
    assert "values don't meet the specifications of the schema" in stderr
    assert message in stderr, stderr


def test_helm_lint_with_the_broker(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "watchNamespace": "vdi",
                "broker": {
                    "enabled": True,
                    "oidc": {
                        "issuer": ISSUER,
                        "audience": "vdi-portal",
                        "caSecret": {"name": "idp-ca"},
                    },
                    "tls": {"secretName": "broker-tls"},
                    "service": {"port": 443},
                    "networkPolicy": {"enabled": True},
                },
            }
        )
    )
    proc = run_helm(helm, "lint", "--strict", str(CHART_DIR), "-f", str(values))
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout


def test_the_broker_values_are_documented() -> None:
    """Every broker value of values.yaml is named in docs/install.md."""
    docs = (REPO_ROOT / "docs" / "install.md").read_text()
    broker = yaml.safe_load((CHART_DIR / "values.yaml").read_text())["broker"]
    for key in broker:
        assert f"broker.{key}" in docs, key
    for key in broker["oidc"]:
        assert f"broker.oidc.{key}" in docs, key


def test_the_pod_name_is_the_leader_election_identity(render: Render) -> None:
    env = {e["name"]: e for e in container(render())["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
