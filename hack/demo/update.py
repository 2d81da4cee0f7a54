"""`make demo-update` (after `make demo`): a new desktop image rolled onto the demo's pool
without kicking anyone.

The pool `finance` of `make demo` has hosts the operator made from its template, full of
sessions. This changes the template's image tag, then shows what follows round by round:
new logons go to the updated hosts, users log off a few at a time, and each outdated host is
replaced once its last user has left; `kubectl hostpool rollout status` follows it to the
end, and `rollout history` lists the two templates. Nobody's session is ended by the update.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from demo.pool import CLUSTER, GROUP, NAMESPACE, POOL, VERSION

PLUGIN = Path(sys.executable).parent / "kubectl-hostpool"
REVISION = "hostpool.io/template-revision"
MANAGED = "hostpool.io/managed-by"
#: The new image: another tag of the image the demo's template names.
NEW_IMAGE = "registry.k8s.io/pause:3.9"
#: Users who log off each round (of those on outdated hosts), and the seconds between rounds.
LOGOFFS_PER_ROUND = 4
ROUND_SECONDS = 2.0
ROUNDS = 30


def say(message: str) -> None:
    print(f"demo-update: {message}", flush=True)


def demo_cluster() -> Path:
    """make demo's cluster: that of HOSTPOOL_TEST_KUBECONFIG or KUBECONFIG, else the local
    control plane's (never started here)."""
    for variable in ("HOSTPOOL_TEST_KUBECONFIG", "KUBECONFIG"):
        value = os.environ.get(variable, "").strip()
        if value:
            return Path(value).expanduser()
    if not (CLUSTER / "kubeconfig").exists():
        raise SystemExit("demo-update: no cluster: run make demo first")
    return CLUSTER / "kubeconfig"


def rollout(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PLUGIN), "rollout", *args, POOL, "--kubeconfig", str(path), "-n", NAMESPACE],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def listed(objects: Any, plural: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = objects.list_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, plural
    )["items"]
    return items


def hosts_table(objects: Any, current: str | None) -> str:
    rows = []
    sessions: dict[str, int] = {}
    for request in listed(objects, "sessionrequests"):
        host = (request.get("status") or {}).get("host")
        if host and (request.get("status") or {}).get("phase") == "Assigned":
            sessions[host] = sessions.get(host, 0) + 1
    for host in sorted(listed(objects, "sessionhosts"), key=lambda h: h["metadata"]["name"]):
        labels = host["metadata"].get("labels") or {}
        if labels.get(MANAGED) != "hostpool-operator":
            continue
        revision = labels.get(REVISION, "-")
        state = "updated" if revision == current else "outdated"
        name = host["metadata"]["name"]
        rows.append(f"    {name:<16} {revision:<12} {state:<9} sessions {sessions.get(name, 0)}")
    return "\n".join(rows)


def status_of(objects: Any) -> dict[str, Any]:
    pool = objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "hostpools", POOL)
    found: dict[str, Any] = (pool.get("status") or {}).get("update") or {}
    return found


def log_off_some(objects: Any, current: str | None) -> list[str]:
    """A few users on outdated hosts log off (their requests are deleted)."""
    outdated = {
        h["metadata"]["name"]
        for h in listed(objects, "sessionhosts")
        if (h["metadata"].get("labels") or {}).get(MANAGED) == "hostpool-operator"
        and (h["metadata"].get("labels") or {}).get(REVISION) != current
    }
    leaving = [
        r["metadata"]["name"]
        for r in sorted(listed(objects, "sessionrequests"), key=lambda r: r["metadata"]["name"])
        if (r.get("status") or {}).get("host") in outdated
    ][:LOGOFFS_PER_ROUND]
    for name in leaving:
        objects.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "sessionrequests", name)
    return leaving


def main() -> int:
    path = demo_cluster()
    config.load_kube_config(str(path))  # type: ignore[no-untyped-call]
    objects = client.CustomObjectsApi(client.ApiClient())
    try:
        found = objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "hostpools", POOL)
    except ApiException as error:
        message = f"demo-update: no pool {POOL} ({error.status}): run make demo first"
        raise SystemExit(message) from None
    pool: dict[str, Any] = found  # type: ignore[assignment]  # the client is untyped JSON
    before = status_of(objects).get("revision")
    say(f"pool {POOL} before: revision {before}")
    print(hosts_table(objects, before))
    template = pool["spec"]["scaling"]["hostTemplate"]
    old_image = template["workload"]["spec"]["containers"][0]["image"]
    template["workload"]["spec"]["containers"][0]["image"] = NEW_IMAGE
    patch = {"spec": {"scaling": {"hostTemplate": template}, "update": {"maxSurge": 1}}}
    objects.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "hostpools", POOL, patch)
    say(f"the template's image: {old_image} -> {NEW_IMAGE} (WaitForLogoff, maxSurge 1)")
    deadline = time.monotonic() + 30
    while status_of(objects).get("revision") in (None, before) and time.monotonic() < deadline:
        time.sleep(0.2)
    current = status_of(objects).get("revision")
    for number in range(1, ROUNDS + 1):
        time.sleep(ROUND_SECONDS)
        print(f"\n  round {number}: {rollout(path, 'status', '--no-watch').stdout.strip()}")
        print(hosts_table(objects, current))
        if status_of(objects).get("phase") == "Complete":
            break
        left = log_off_some(objects, current)
        if left:
            print(f"    logged off (users on outdated hosts): {', '.join(left)}")
    say("kubectl hostpool rollout status finance (waits for the end)")
    print(rollout(path, "status", "--timeout", "2m").stdout.rstrip())
    say("kubectl hostpool rollout history finance")
    print(rollout(path, "history").stdout.rstrip())
    events = (
        client.CoreV1Api()
        .list_namespaced_event(NAMESPACE, field_selector=f"involvedObject.name={POOL}")
        .items
    )
    updated = [e.message for e in events if e.reason == "HostUpdated"]
    say(f"{len(updated)} HostUpdated Event(s) on the pool, e.g. {updated[0] if updated else '-'}")
    failed = [
        r["metadata"]["name"]
        for r in listed(objects, "sessionrequests")
        if (r.get("status") or {}).get("phase") == "Failed"
    ]
    say(f"sessions ended by the update: {len(failed)}")
    print(
        "\nLook around:\n"
        f"  kubectl get hp {POOL} -n {NAMESPACE}            (the UPDATED column)\n"
        f"  kubectl get sh -n {NAMESPACE} -L {REVISION}\n"
        f"  kubectl hostpool rollout undo {POOL} -n {NAMESPACE}   (back to the old image)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
