"""The chart's agent objects (component ``agent``: ServiceAccounts, the agents' Role and
RoleBinding, the ValidatingAdmissionPolicy and its binding), rendered with the project's
helm and applied with the admin kubeconfig, for tests whose agents hold real tokens."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from support.helm import helm_template

CLUSTER_SCOPED = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
Obj = dict[str, Any]


def run_tool(argv: list[str], *, stdin: str | None = None) -> str:
    proc = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}"
        )
    return proc.stdout


def is_agent(doc: Obj) -> bool:
    return bool(doc["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "agent")


def apply_agent_objects(
    bin_dir: Path, kubeconfig: Path, release: str, namespace: str, values: dict[str, Any]
) -> list[Obj]:
    """Render the chart with ``values`` (``--set-json`` each) for release namespace
    ``namespace`` and apply its agent objects; returns them (the cluster-scoped ones are
    the caller's to delete)."""
    docs = helm_template(bin_dir / "helm", values, release=release, namespace=namespace)
    agents = [d for d in docs if is_agent(d)]
    kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig)]
    run_tool([*kubectl, "apply", "-f", "-"], stdin=yaml.safe_dump_all(agents))
    return agents


def delete_objects(bin_dir: Path, kubeconfig: Path, docs: list[Obj]) -> None:
    if docs:
        kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig)]
        run_tool(
            [*kubectl, "delete", "--ignore-not-found", "--wait=false", "-f", "-"],
            stdin=yaml.safe_dump_all(docs),
        )
