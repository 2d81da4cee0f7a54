"""``kubectl hostpool`` against a real API server, as a person who holds only the chart's
``hostpool-session-admin`` role (a ServiceAccount bound to it in the test's namespace, its
token the only credential in its kubeconfig; the chart's ValidatingAdmissionPolicy
applied, so a write that touched any other field would be refused), with the real
operator placing the requests:

* ``sessions``: the table (kubectl's alignment, ages), ``-o wide``, ``-o json`` with the
  contract's keys, filters by pool, host and user; ``top``.
* ``message --pool`` sets a notice on each of that pool's two users' requests and on no
  other pool's; ``logoff`` and ``disconnect`` set their fields and leave the rest of the
  status as it was.
* Errors in one line and exit 1: no such user, pool or host; a 403 that names the verb and
  the resource (``-A`` needs a cluster-wide list; another namespace); a drain that times
  out says how many sessions are left.
* The plugin through kubectl (``kubectl hostpool``, found on PATH), and the login chosen
  by ``--context`` among merged kubeconfigs.
* ``drain --wait --logoff-after 1m`` with a real agent whose logoff command ends the user in
  its sessions command's output: the command prints who leaves and ends with the host
  empty, exit 0; ``undrain`` takes the drain back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from support.agent_process import AgentProcess
from support.cluster import Cluster
from support.conditions import parse_time, status
from support.helm import helm_template
from support.identity import RBAC_PATHS, token_kubeconfig
from support.kube import ApiError, Kube, unique_name
from support.operator_process import OperatorProcess

Obj = dict[str, Any]
PLUGIN = Path(sys.executable).parent / "kubectl-hostpool"
ROLE = "hostpool-session-admin"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
ADMISSION_PATHS = {
    "ValidatingAdmissionPolicy": f"{ADMISSION}/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": f"{ADMISSION}/validatingadmissionpolicybindings",
}


@dataclass
class Done:
    code: int
    out: str
    err: str


@pytest.fixture(scope="module")
def session_admin_role(kube: Kube, bin_dir: Path) -> Iterator[list[Obj]]:
    """The chart's session-admin ClusterRole and its admission policy, applied for the
    module, deleted afterwards."""
    docs = [
        d
        for d in helm_template(
            bin_dir / "helm", release=unique_name("sa", max_length=12), namespace="default"
        )
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "session-admin"
    ]
    assert ROLE in [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"]
    made = []
    for doc in docs:
        base = {**RBAC_PATHS, **ADMISSION_PATHS}[doc["kind"]]
        path = f"{base}/{doc['metadata']['name']}"
        try:
            kube.call("DELETE", path)
        except ApiError as exc:
            if exc.status != 404:
                raise
        kube.call("POST", base, body=doc)
        made.append(path)
    time.sleep(2)  # the admission policy is in force once its informer has seen it
    try:
        yield docs
    finally:
        for path in made:
            try:
                kube.call("DELETE", path)
            except ApiError as exc:
                if exc.status != 404:
                    raise


@pytest.fixture
def admin_kubeconfig(
    kube: Kube, namespace: str, session_admin_role: list[Obj], tmp_path: Path
) -> Path:
    """A kubeconfig holding only the token of a ServiceAccount bound (in this namespace) to
    hostpool-session-admin; its context's namespace is the test's."""
    del session_admin_role
    sa = "helpdesk"
    kube.call(
        "POST",
        RBAC_PATHS["ServiceAccount"].format(ns=namespace),
        body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}},
    )
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "helpdesk-session-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
    }
    kube.call("POST", RBAC_PATHS["RoleBinding"].format(ns=namespace), body=binding)
    answer = kube.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    return token_kubeconfig(
        kube.kubeconfig, answer["status"]["token"], tmp_path / "helpdesk", namespace=namespace
    )


def plugin(
    *args: str,
    kubeconfig: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> Done:
    argv = [str(PLUGIN), *args]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return Done(done.returncode, done.stdout, done.stderr)


def ok(done: Done) -> str:
    assert done.code == 0, f"exit {done.code}: {done.err}{done.out}"
    return done.out


def failed(done: Done, says: str) -> None:
    assert done.code == 1, f"exit {done.code}: {done.err}{done.out}"
    assert done.out == ""
    assert done.err.startswith("kubectl hostpool: error: "), done.err
    assert done.err.count("\n") == 1, done.err
    assert says in done.err, done.err


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines()]


def near_now(value: Any, offset: timedelta = timedelta(), slack: float = 15.0) -> bool:
    moment = parse_time(value)
    assert moment is not None, value
    return abs((moment - (datetime.now(UTC) + offset)).total_seconds()) < slack


def agent_report(cluster: Cluster, name: str, state: str, since: timedelta) -> None:
    """What a host's agent writes of a session: its state, since when, and its logon."""
    at = (datetime.now(UTC) - since).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    cluster.patch_status(
        "SessionRequest", name, {"sessionState": state, "stateChangedAt": at, "logonAt": at}
    )


def test_sessions_message_logoff_disconnect_and_errors_as_a_session_admin(
    cluster: Cluster,
    operator_process: OperatorProcess,
    admin_kubeconfig: Path,
    kube: Kube,
    bin_dir: Path,
) -> None:
    del operator_process
    ns = cluster.namespace
    cluster.setup_pool("finance", "BreadthFirst", 5, hosts=["rds-01", "rds-02"])
    cluster.setup_pool("hr", "BreadthFirst", 5, hosts=["hr-01"])
    for name, pool, user in (
        ("alice", "finance", "alice@corp"),
        ("bob", "finance", "bob@corp"),
        ("carol", "hr", "carol@corp"),
    ):
        cluster.create_request(name, pool, user)
    hosts = {
        n: status(r)["host"] for n, r in cluster.wait_assigned(["alice", "bob", "carol"]).items()
    }
    assert {hosts["alice"], hosts["bob"]} == {"rds-01", "rds-02"}
    agent_report(cluster, "alice", "Active", timedelta(minutes=5, seconds=30))
    agent_report(cluster, "bob", "Disconnected", timedelta(hours=2, minutes=3))

    # --- sessions: the table, by pool, host and user
    table = ok(plugin("sessions", kubeconfig=admin_kubeconfig))
    print(f"$ kubectl hostpool sessions\n{table}")
    lines = table.splitlines()
    assert lines[0].split() == ["USER", "POOL", "HOST", "STATE", "SINCE", "LOGON"]
    assert lines[0].index("POOL") == lines[1].index("finance")  # aligned columns
    got = rows(table)[1:]
    by_user = {r[0]: r for r in got}
    assert set(by_user) == {"alice@corp", "bob@corp", "carol@corp"}
    assert by_user["alice@corp"][1:4] == ["finance", hosts["alice"], "Active"]
    assert by_user["alice@corp"][4] in ("5m30s", "5m31s", "5m32s", "5m33s")
    assert by_user["bob@corp"][3:6] == ["Disconnected", "123m", "123m"]
    assert by_user["carol@corp"][3] == "Connecting"
    assert by_user["carol@corp"][5] == "<none>"  # no logon reported yet
    assert [r[0] for r in rows(ok(plugin("sessions", "hr", kubeconfig=admin_kubeconfig)))[1:]] == [
        "carol@corp"
    ]
    on_host = ok(plugin("sessions", "--host", hosts["bob"], kubeconfig=admin_kubeconfig))
    assert [r[0] for r in rows(on_host)[1:]] == ["bob@corp"]
    assert ok(plugin("sessions", "--user", "nobody", kubeconfig=admin_kubeconfig)) == ""

    # --- the JSON for scripts
    items = json.loads(ok(plugin("sessions", "-o", "json", kubeconfig=admin_kubeconfig)))["items"]
    assert len(items) == 3
    alice = next(i for i in items if i["user"] == "alice@corp")
    keys = {"user", "namespace", "pool", "host", "state", "stateChangedAt", "logonAt", "request"}
    assert keys <= set(alice)
    request = cluster.request("alice")
    assert alice["namespace"] == ns
    assert alice["request"] == "alice"
    assert alice["stateChangedAt"] == status(request)["stateChangedAt"]
    assert alice["logonAt"] == status(request)["logonAt"]

    # --- message: the two users of finance, not carol of hr
    before = {n: status(cluster.request(n)) for n in ("alice", "bob", "carol")}
    said = ok(
        plugin("message", "--pool", "finance", "Back up at noon", kubeconfig=admin_kubeconfig)
    )
    assert said.strip() == "message sent to 2 sessions: alice@corp, bob@corp"
    for name in ("alice", "bob"):
        after = status(cluster.request(name))
        notice = after.pop("notice")
        assert notice["message"] == "Back up at noon"
        assert near_now(notice["sentAt"])
        assert "shownAt" not in notice
        assert after == before[name], "the message changed other status fields"
    assert "notice" not in status(cluster.request("carol"))
    one = ok(
        plugin("message", "--user", "carol@corp", "--pool", "hr", "hi", kubeconfig=admin_kubeconfig)
    )
    assert one.strip() == "message sent to 1 session: carol@corp"

    # --- logoff and disconnect: their fields, nothing else
    ok(
        plugin(
            "logoff", "alice@corp", "--pool", "finance", "--in", "10m", "--message", "bye",
            kubeconfig=admin_kubeconfig,
        )
    )  # fmt: skip
    logoff = status(cluster.request("alice"))["logoff"]
    assert logoff["message"] == "bye"
    assert near_now(logoff["deadline"], timedelta(minutes=10))
    assert "limit" not in logoff
    assert status(cluster.request("alice"))["notice"]["message"] == "Back up at noon"
    ok(plugin("disconnect", "bob@corp", "--pool", "finance", kubeconfig=admin_kubeconfig))
    disconnect = status(cluster.request("bob"))["disconnect"]
    assert near_now(disconnect["requestedAt"])
    assert "doneAt" not in disconnect
    assert status(cluster.request("bob"))["sessionState"] == "Disconnected"
    wide = ok(plugin("sessions", "finance", "-o", "wide", kubeconfig=admin_kubeconfig))
    print(f"$ kubectl hostpool sessions finance -o wide\n{wide}")
    assert "in 9m" in wide or "in 10m" in wide
    assert "asked " in wide

    # --- top
    time.sleep(1)  # the operator's debounced status write
    top = ok(plugin("top", kubeconfig=admin_kubeconfig))
    print(f"$ kubectl hostpool top\n{top}")
    pools, hosts_table = top.split("\n\n")
    pool_rows = {r[0]: r for r in rows(pools)[1:]}
    assert set(pool_rows) == {"finance", "hr"}
    assert pool_rows["finance"][1] == "2"  # hosts
    assert pool_rows["finance"][4] == "2"  # sessions
    assert {r[0] for r in rows(hosts_table)[1:]} == {"rds-01", "rds-02", "hr-01"}

    # --- errors: one line, exit 1
    failed(
        plugin("logoff", "nobody", "--pool", "finance", kubeconfig=admin_kubeconfig),
        f"user 'nobody' has no session in pool 'finance' (namespace '{ns}')",
    )
    failed(
        plugin("disconnect", "alice@corp", "--pool", "nopool", kubeconfig=admin_kubeconfig),
        f"no pool 'nopool' in namespace '{ns}'",
    )
    failed(plugin("drain", "nohost", kubeconfig=admin_kubeconfig), "no host 'nohost'")
    failed(plugin("sessions", "-A", kubeconfig=admin_kubeconfig), "is forbidden: User ")
    refused = plugin("sessions", "-A", kubeconfig=admin_kubeconfig).err
    assert (
        'cannot list resource "sessionrequests" in API group "hostpool.io" at the cluster scope'
        in refused
    )
    failed(
        plugin("top", "-n", "default", kubeconfig=admin_kubeconfig),
        'cannot list resource "hostpools" in API group "hostpool.io" in the namespace "default"',
    )
    timed_out = plugin(
        "drain", hosts["bob"], "--wait", "--timeout", "3s", kubeconfig=admin_kubeconfig
    )
    # what it did and what it waits for are on stdout; the failure is stderr's one line
    assert timed_out.out.splitlines() == [
        f"{hosts['bob']} drained: no new sessions",
        f"{hosts['bob']}: waiting for 1 session: bob@corp",
    ]
    failed(
        Done(timed_out.code, "", timed_out.err),
        f"timed out after 3s: 1 session left on {hosts['bob']} (bob@corp)",
    )
    assert cluster.host(hosts["bob"])["spec"]["drainMode"] is True
    assert ok(plugin("undrain", hosts["bob"], kubeconfig=admin_kubeconfig)).startswith(
        f"{hosts['bob']} undrained"
    )
    assert cluster.host(hosts["bob"])["spec"]["drainMode"] is False

    # --- through kubectl, with the login chosen by --context among merged kubeconfigs
    merged = {
        "KUBECONFIG": f"{kube.kubeconfig}{os.pathsep}{admin_kubeconfig}",
        "PATH": f"{PLUGIN.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    kubectl = [str(bin_dir / "kubectl"), "hostpool"]
    listed = subprocess.run(
        [*kubectl, "sessions", "--context", "token", "-n", ns],
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **merged},
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    print(f"$ kubectl hostpool sessions\n{listed.stdout}")
    assert {r[0] for r in rows(listed.stdout)[1:]} == {"alice@corp", "bob@corp", "carol@corp"}
    # The helpdesk context may not list every namespace; the admin's current context may.
    as_helpdesk = subprocess.run(
        [*kubectl, "sessions", "-A", "--context", "token"],
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **merged},
    )  # fmt: skip
    assert as_helpdesk.returncode == 1
    assert "forbidden" in as_helpdesk.stderr
    as_admin = subprocess.run(
        [*kubectl, "sessions", "-A"],
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **merged},
    )  # fmt: skip
    assert as_admin.returncode == 0, as_admin.stderr
    assert rows(as_admin.stdout)[0][0] == "NAMESPACE"
    assert ns in as_admin.stdout


def write_sessions(path: Path, users: list[str]) -> None:
    temp = path.with_suffix(".tmp")
    temp.write_text("".join(json.dumps({"user": u, "state": "Active"}) + "\n" for u in users))
    temp.replace(path)


def test_drain_waits_until_the_agent_logged_everyone_off(
    cluster: Cluster,
    operator_process: OperatorProcess,
    admin_kubeconfig: Path,
    kube: Kube,
    tmp_path: Path,
) -> None:
    del operator_process
    cluster.setup_pool("finance", "DepthFirst", 5, hosts=["rds-01", "rds-02"])
    for name in ("alice", "bob"):
        cluster.create_request(name, "finance", f"{name}@corp")
    assigned = cluster.wait_assigned(["alice", "bob"])
    host = status(assigned["alice"])["host"]
    assert status(assigned["bob"])["host"] == host  # depth first: the same host
    sessions = tmp_path / "sessions.jsonl"
    write_sessions(sessions, ["alice@corp", "bob@corp"])
    # The logoff ends the user's session: the next sessions sample no longer lists them.
    logoff = tmp_path / "logoff.sh"
    logoff.write_text(
        "#!/bin/sh\n"
        f'grep -v "\\"$HOSTPOOL_USER\\"" {sessions} > {sessions}.new\n'
        f"mv {sessions}.new {sessions}\n"
        f'echo "$HOSTPOOL_USER" >> {tmp_path / "logged-off.txt"}\n'
    )
    logoff.chmod(0o755)
    agent = AgentProcess(kube.kubeconfig, cluster.namespace, host, tmp_path / "agent.log")
    agent.start(
        "--sessions-command", f"cat {sessions}", "--logoff-command", str(logoff), interval=0.5
    )
    try:
        cluster.wait(
            lambda: (
                all(
                    status(cluster.request(n)).get("sessionState") == "Active"
                    for n in ("alice", "bob")
                )
                or None
            ),
            "both sessions Active",
            20,
        )
        started = time.monotonic()
        drain = subprocess.Popen(
            [
                str(PLUGIN), "drain", host, "--wait", "--timeout", "5m",
                "--logoff-after", "1m", "--message", "Maintenance at noon",
                "--kubeconfig", str(admin_kubeconfig),
            ],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:

            def both_logoffs() -> list[Obj] | None:
                found = [status(cluster.request(n)).get("logoff") for n in ("alice", "bob")]
                return [f for f in found if f] if all(found) else None

            logoffs = cluster.wait(both_logoffs, "the drain's logoffs on both requests", 20)
            for given in logoffs:
                assert given["message"] == "Maintenance at noon"
                assert near_now(given["deadline"], timedelta(minutes=1))
            assert cluster.host(host)["spec"]["drainMode"] is True
            assert agent.alive
            out, err = drain.communicate(timeout=240)
        finally:
            if drain.poll() is None:
                drain.kill()
        took = time.monotonic() - started
        print(f"$ kubectl hostpool drain {host} --wait --logoff-after 1m ... ({took:.0f} s)\n{out}")
        assert drain.returncode == 0, err
        assert err == ""
        lines = out.splitlines()
        assert lines[0] == f"{host} drained: no new sessions"
        assert lines[1].startswith(f"{host}: 2 sessions to be logged off at ")
        assert lines[2] == f"{host}: waiting for 2 sessions: alice@corp, bob@corp"
        left = [line for line in lines if " left " in line]
        assert sorted(line.split()[0] for line in left) == ["alice@corp", "bob@corp"]
        assert left[-1].endswith("(0 sessions left)")
        assert lines[-1] == f"{host} has no sessions"
        assert took >= 55, "the users went before their deadline"
        assert sorted((tmp_path / "logged-off.txt").read_text().split()) == [
            "alice@corp",
            "bob@corp",
        ]
        assert not set(cluster.requests()) & {"alice", "bob"}
        # Drained: a new request goes to the other host.
        cluster.create_request("carol", "finance", "carol@corp")
        assert status(cluster.wait_request("carol", phase_="Assigned"))["host"] != host
        ok(plugin("undrain", host, kubeconfig=admin_kubeconfig))
        assert cluster.host(host)["spec"]["drainMode"] is False
    finally:
        agent.stop()


def test_assign_and_unassign_a_personal_host_as_a_session_admin(
    cluster: Cluster, operator_process: OperatorProcess, admin_kubeconfig: Path
) -> None:
    """A Direct personal pool: alice waits until ``assign`` gives her a host, then gets it;
    refusals in one line (a second host for her, a host that is hers, a Pooled pool's host,
    taking her host while her session is on it); ``top`` shows whose host is whose."""
    del operator_process
    spec = {"type": "Personal", "personal": {"assignment": "Direct"}}
    cluster.create("HostPool", "desks", spec)
    cluster.create_hosts(["d1", "d2"], "desks")
    cluster.setup_pool("shared", "BreadthFirst", 2, hosts=["s1"])
    cluster.wait_operator_knows("desks", ["d1", "d2"])
    cluster.create_request("alice", "desks", "alice")
    cluster.wait_request("alice", phase_="Pending", reason="NoHostAssigned")

    assert ok(plugin("assign", "d2", "alice", kubeconfig=admin_kubeconfig)) == (
        "d2 assigned to alice (pool desks)\n"
    )
    placed = cluster.wait_request("alice", phase_="Assigned", reason="Personal", host="d2")
    assert status(placed)["host"] == "d2"

    failed(plugin("assign", "d1", "alice", kubeconfig=admin_kubeconfig), "alice has host d2")
    failed(plugin("assign", "d2", "bob", kubeconfig=admin_kubeconfig), "d2 is alice's")
    failed(plugin("assign", "s1", "bob", kubeconfig=admin_kubeconfig), "pool 'shared' is Pooled")
    failed(plugin("assign", "nope", "bob", kubeconfig=admin_kubeconfig), "no host 'nope'")
    cluster.wait_host("d2", lambda h: status(h).get("sessions", {}).get("total") == 1, "1 session")
    failed(
        plugin("unassign", "d2", kubeconfig=admin_kubeconfig),
        "cannot change while a session is on the host",
    )

    table = rows(ok(plugin("top", kubeconfig=admin_kubeconfig)))
    header = next(row for row in table if row[:2] == ["HOST", "POOL"])
    users = {
        row[0]: row[header.index("USER")] for row in table if row and row[0] in ("d1", "d2", "s1")
    }
    assert users == {"d1": "<none>", "d2": "alice", "s1": "<none>"}, table

    cluster.delete("SessionRequest", "alice")
    cluster.wait_host("d2", lambda h: status(h).get("sessions", {}).get("total") == 0, "empty")
    assert ok(plugin("unassign", "d2", kubeconfig=admin_kubeconfig)) == (
        "d2 unassigned (was alice's)\n"
    )
    assert "assignedUser" not in cluster.host("d2")["spec"]


def test_two_assigns_of_one_user_at_once_leave_them_one_host(
    cluster: Cluster, operator_process: OperatorProcess, admin_kubeconfig: Path
) -> None:
    """``assign`` checks "one host per user" against what it reads, so two at once for one
    user (two administrators, two hosts) can both land. Here both land every time: the two
    writes ``assign`` makes once its check passed, sent at once. The operator takes one back
    (the one assigned later as it saw them), with a Warning Event on it; ``assign`` then
    refuses a second host as before. Eight rounds, each ending with alice on one host."""
    del operator_process
    spec = {"type": "Personal", "personal": {"assignment": "Direct"}}
    cluster.create("HostPool", "desks", spec)
    cluster.create_hosts(["d1", "d2"], "desks")
    cluster.wait_operator_knows("desks", ["d1", "d2"])

    def assign(host: str) -> None:
        cluster.kube.merge_patch(
            "SessionHost", cluster.namespace, host, {"spec": {"assignedUser": "alice"}}
        )

    def alices() -> list[str]:
        hosts = cluster.hosts().items()
        return [name for name, h in hosts if h["spec"].get("assignedUser") == "alice"]

    def taken_back(host: str) -> int:
        return [e["reason"] for e in cluster.events_for(host)].count("SecondHostTakenBack")

    for round_ in range(8):
        before = {h: taken_back(h) for h in ("d1", "d2")}
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(assign, ("d1", "d2")))
        cluster.wait(lambda: len(alices()) == 1 or None, f"alice on one host (round {round_})", 30)
        (kept,) = alices()
        other = "d2" if kept == "d1" else "d1"

        def told(host: str = other, earlier: int = before[other]) -> bool | None:
            return taken_back(host) > earlier or None

        cluster.wait(told, f"the Event on {other}, taken back", 30)
        failed(plugin("assign", other, "alice", kubeconfig=admin_kubeconfig), f"has host {kept}")
        ok(plugin("unassign", kept, kubeconfig=admin_kubeconfig))
        cluster.wait(lambda: not alices() or None, "alice unassigned", 30)
