"""The host agent as a real process on this machine, against the real API server, with the
operator running: metrics every interval that follow the machine's load and steer a Horizon
pool, the load script and its failures, sessions reported by a command (Active,
Disconnected, logoff), forced logoffs, and an API server restart.

The agent runs with a 1 s interval (30 s by default) so a test sees several reports. It
measures this machine: the CPU test burns both cores and compares against a host whose
metrics the test writes itself, as that host's agent would.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from support.agent_process import AgentProcess
from support.cluster import Cluster
from support.conditions import cond_is, host_of, now_rfc3339, parse_time, phase, status
from support.kube import Kube, need_control_plane
from support.operator_process import OperatorProcess
from support.report_logs import EXTRA_LOGS
from support.tls import self_signed

POOL = "hz"
Obj = dict[str, Any]


@pytest.fixture
def agents(
    kube: Kube, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[dict[str, AgentProcess]]:
    """Agents by host name, made on first use; stopped after the test (their logs attached
    to the report when it failed). An agent that did not exit cleanly fails the test."""
    made: dict[str, AgentProcess] = {}
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])

    class Agents(dict[str, AgentProcess]):
        def __missing__(self, host: str) -> AgentProcess:
            agent = AgentProcess(kube.kubeconfig, namespace, host, tmp_path / f"agent-{host}.log")
            made[host] = agent
            logs.append((f"agent {host} log", lambda: agent.log()[-4000:]))
            self[host] = agent
            return agent

    yield Agents()
    codes = {host: agent.stop() for host, agent in made.items()}
    bad = {host: code for host, code in codes.items() if code not in (0, None)}
    if bad:
        pytest.fail(f"agents exited uncleanly: {bad}", pytrace=False)


def metrics(cluster: Cluster, host: str) -> Obj:
    value = status(cluster.host(host)).get("metrics")
    return dict(value) if isinstance(value, dict) else {}


def fresh_metrics(cluster: Cluster, host: str, after: datetime) -> Obj | None:
    """The host's metrics once sampled after ``after``."""
    found = metrics(cluster, host)
    sampled = found.get("sampledAt")
    return found if sampled and parse_time(sampled) > after else None


def without_custom_value(cluster: Cluster, host: str, after: datetime) -> Callable[[], Obj | None]:
    """A probe: the host's metrics, once a report after ``after`` has no customLoadValue."""

    def probe() -> Obj | None:
        found = fresh_metrics(cluster, host, after)
        return found if found is not None and "customLoadValue" not in found else None

    return probe


def events(cluster: Cluster, name: str, reason: str) -> list[Any]:
    return [e for e in cluster.events_for(name) if e.get("reason") == reason]


# --------------------------------------------------------------------------- metrics


@pytest.mark.solo  # the machine's CPU, burnt and read back: nothing else may run
def test_metrics_follow_the_machine_and_steer_a_horizon_pool(
    cluster: Cluster, operator_process: OperatorProcess, agents: dict[str, AgentProcess]
) -> None:
    del operator_process
    cluster.setup_pool(
        POOL,
        "Horizon",
        10,
        hosts=["busy", "calm"],
        horizon={
            "loadIndex": {"cpuThresholdPercent": 100, "includeSessionCount": False},
            # No bucket 1 and no fair share: the lowest load index wins, so placement
            # follows the CPU figures alone.
            "connectionServer": {"rdsLoadIndexThreshold": 0, "minRdsServersInLbQueue": 0},
        },
    )
    started = datetime.now(UTC).replace(microsecond=0)
    agents["busy"].start()
    first = cluster.wait(lambda: fresh_metrics(cluster, "busy", started), "first report", 10)
    assert set(first) >= {"cpuPercent", "memoryPercent", "diskQueueLength", "sampledAt"}
    assert status(cluster.host("busy"))["agent"]["version"]
    # "calm" reports 60 % CPU, as its own agent would.
    cluster.patch_status(
        "SessionHost", "calm", {"metrics": {"cpuPercent": 60, "sampledAt": now_rfc3339()}}
    )
    cluster.wait(
        lambda: metrics(cluster, "busy").get("cpuPercent", 100) < 60 or None,
        "the machine below 60 % CPU before the burn",
        30,
    )
    cluster.create_request("before", POOL, "u1")
    assert host_of(cluster.wait_request("before", phase_="Assigned", timeout=30)) == "busy"

    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        burning = datetime.now(UTC)
        hot = cluster.wait(
            lambda: (m := fresh_metrics(cluster, "busy", burning)) and m["cpuPercent"] >= 85 and m,
            "cpuPercent of 'busy' at 85 % or more under the burner",
            30,
        )
        cluster.patch_status(
            "SessionHost", "calm", {"metrics": {"cpuPercent": 60, "sampledAt": now_rfc3339()}}
        )
        cluster.wait(
            lambda: (status(cluster.host("busy")).get("loadIndex") or 0) >= 85 or None,
            "the operator sees the load index of 'busy' rise",
            15,
        )
        cluster.create_request("during", POOL, "u2")
        during = cluster.wait_request("during", phase_="Assigned", timeout=30)
        assert host_of(during) == "calm", hot
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert agents["busy"].alive


@pytest.mark.solo  # four failures a second apart, each within a deadline
def test_custom_load_value_from_a_script_and_every_way_it_can_fail(
    cluster: Cluster, agents: dict[str, AgentProcess], tmp_path: Path
) -> None:
    cluster.create_pool(POOL, "Horizon", 10, horizon={"loadIndex": {"useCustomScript": True}})
    cluster.create_host("h1", POOL)
    script = tmp_path / "load.sh"
    script.write_text("#!/bin/sh\necho 37\n")
    script.chmod(0o755)
    agents["h1"].start("--load-script", str(script), "--command-timeout", "2")
    cluster.wait(
        lambda: metrics(cluster, "h1").get("customLoadValue") == 37 or None,
        "customLoadValue 37",
        15,
    )
    # Each way of failing is waited for by its own Event: a wait for "no customLoadValue"
    # alone is met by the previous way's failure, and a step could pass unrun.
    bad = {
        "exited with 3": "#!/bin/sh\necho 12\nexit 3\n",
        "did not finish within 2s": "#!/bin/sh\nsleep 30\necho 12\n",
        "'abc', not an integer": "#!/bin/sh\necho abc\n",
        "150": "#!/bin/sh\necho 150\n",
    }
    for says, body in bad.items():
        script.write_text(body)

        def failed_so(says: str = says) -> list[dict[str, Any]] | None:
            found = [
                e
                for e in events(cluster, "h1", "LoadScriptFailed")
                if says in str(e.get("message", ""))
            ]
            return found or None

        failures = cluster.wait(failed_so, f"a LoadScriptFailed Event saying {says!r}", 20)
        assert all(e.get("type") == "Warning" for e in failures)
        report = cluster.wait(
            without_custom_value(cluster, "h1", datetime.now(UTC)),
            f"no customLoadValue while the script fails with {says!r}",
            20,
        )
        assert "cpuPercent" in report  # the other figures keep coming
        assert agents["h1"].alive
    script.write_text("#!/bin/sh\necho 5\n")
    cluster.wait(
        lambda: metrics(cluster, "h1").get("customLoadValue") == 5 or None, "recovered", 15
    )


# --------------------------------------------------------------------------- sessions


def write_sessions(path: Path, sessions: dict[str, str]) -> None:
    lines = [f'{{"user": "{user}", "state": "{state}"}}' for user, state in sessions.items()]
    temp = path.with_suffix(".tmp")
    temp.write_text("\n".join(lines) + "\n")
    temp.replace(path)  # atomic: the agent never reads half a file


def test_sessions_command_drives_state_and_logoff_frees_the_slot(
    cluster: Cluster,
    operator_process: OperatorProcess,
    agents: dict[str, AgentProcess],
    tmp_path: Path,
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 1, hosts=["h1"])
    cluster.create_request("alice", POOL, "alice@corp")
    cluster.wait_request("alice", phase_="Assigned")
    cluster.create_request("bob", POOL, "bob@corp")
    cluster.wait_request("bob", phase_="Pending", reason="PoolSaturated")
    sessions = tmp_path / "sessions.jsonl"
    write_sessions(sessions, {"alice@corp": "Active"})
    agents["h1"].start("--sessions-command", f"cat {sessions}")
    cluster.wait(
        lambda: status(cluster.request("alice")).get("sessionState") == "Active" or None,
        "alice Active",
        15,
    )
    write_sessions(sessions, {"alice@corp": "Disconnected"})
    cluster.wait(
        lambda: status(cluster.request("alice")).get("sessionState") == "Disconnected" or None,
        "alice Disconnected",
        15,
    )
    assert phase(cluster.request("bob")) == "Pending"  # a disconnected session keeps its slot
    # Logon diagnostics: alice's connect, begun at her request's creation (no broker here),
    # has the operator's queue and the agent's session start, and Succeeded.
    (connect,) = status(cluster.request("alice"))["connects"]
    assert connect["outcome"] == "Succeeded", connect
    assert set(connect["phases"]) == {"queue", "sessionStart"}, connect
    waited_from = time.monotonic()
    write_sessions(sessions, {})  # alice logged off
    cluster.wait(lambda: "alice" not in cluster.requests() or None, "alice's request deleted", 15)
    bob = cluster.wait_request("bob", phase_="Assigned", timeout=15)
    assert host_of(bob) == "h1"
    assert "could not delete" not in agents["h1"].log()
    (queued,) = status(bob)["connects"]
    assert queued["phases"]["queue"] >= time.monotonic() - waited_from - 1, queued
    report = diagnose(cluster, "bob@corp")
    assert f"connect {queued['ref']}  pool {POOL}  request bob" in report.stdout, report.stdout
    assert "queue" in report.stdout
    unknown = diagnose(cluster, "zed@corp")
    assert unknown.returncode == 1
    assert f"No requests of zed@corp in namespace {cluster.namespace}." in unknown.stderr
    bad = diagnose(cluster, "bob@corp", "--id", "not-a-ref")
    assert bad.returncode != 0
    assert "--id 'not-a-ref': a reference is 8 capital letters" in bad.stderr


def diagnose(cluster: Cluster, user: str, *more: str) -> subprocess.CompletedProcess[str]:
    """``hostpool-operator sessions diagnose`` (what ``kubectl hostpool diagnose`` runs)."""
    login = ["--kubeconfig", str(cluster.kube.kubeconfig), "-n", cluster.namespace]
    command = [sys.executable, "-m", "hostpool_operator", "sessions", "diagnose", user, *login]
    command += more
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_a_failing_sessions_command_logs_nobody_off(
    cluster: Cluster,
    operator_process: OperatorProcess,
    agents: dict[str, AgentProcess],
    tmp_path: Path,
) -> None:
    """A command that fails is no answer: the users it can no longer list are not gone."""
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 2, hosts=["h1"])
    cluster.create_request("alice", POOL, "alice@corp")
    cluster.wait_request("alice", phase_="Assigned")
    command = tmp_path / "sessions.sh"
    command.write_text('#!/bin/sh\necho \'{"user": "alice@corp", "state": "Active"}\'\n')
    command.chmod(0o755)
    agents["h1"].start("--sessions-command", str(command))
    cluster.wait(
        lambda: status(cluster.request("alice")).get("sessionState") == "Active" or None,
        "alice seen Active",
        15,
    )
    command.write_text("#!/bin/sh\nexit 1\n")
    cluster.wait(
        lambda: events(cluster, "h1", "SessionsCommandFailed") or None, "the failure reported", 15
    )
    time.sleep(3)  # three more samples, each failing
    assert "alice" in cluster.requests()
    assert agents["h1"].alive


def test_forced_logoff_notifies_once_then_logs_off_at_the_deadline(
    cluster: Cluster,
    operator_process: OperatorProcess,
    agents: dict[str, AgentProcess],
    tmp_path: Path,
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 2, hosts=["h1"])
    cluster.create_request("alice", POOL, "alice@corp")
    cluster.wait_request("alice", phase_="Assigned")
    notes, logoffs = tmp_path / "notified.txt", tmp_path / "logged-off.txt"
    agents["h1"].start(
        "--notify-command",
        f'echo "$HOSTPOOL_USER|$HOSTPOOL_MESSAGE|$HOSTPOOL_DEADLINE" >> {notes}',
        "--logoff-command",
        f'echo "$HOSTPOOL_USER" >> {logoffs}',
    )
    deadline = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=6)
    stamp = deadline.isoformat().replace("+00:00", "Z")
    cluster.patch_status(
        "SessionRequest", "alice", {"logoff": {"message": "host maintenance", "deadline": stamp}}
    )
    cluster.wait(lambda: notes.exists() or None, "the notice", 10)
    assert not logoffs.exists()  # not before the deadline
    cluster.wait(lambda: "alice" not in cluster.requests() or None, "alice logged off", 20)
    gone_at = datetime.now(UTC)
    assert gone_at >= deadline
    assert notes.read_text().splitlines() == [f"alice@corp|host maintenance|{stamp}"]
    assert logoffs.read_text().splitlines() == ["alice@corp"]


def write_lines(path: Path, lines: list[Obj]) -> None:
    temp = path.with_suffix(".tmp")
    temp.write_text("".join(json.dumps(line) + "\n" for line in lines))
    temp.replace(path)


def test_idle_seconds_notices_and_disconnects_through_commands(
    cluster: Cluster,
    operator_process: OperatorProcess,
    agents: dict[str, AgentProcess],
    tmp_path: Path,
) -> None:
    """A host whose sessions come from a command: its idleSeconds become idleSince (once
    a minute or more; null again on input); an administrator's notice runs the notify
    command once (shownAt set), a disconnect the disconnect command (doneAt set); an Idle
    disconnect of a user active since is not run, only marked."""
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 2, hosts=["h1"])
    cluster.create_request("alice", POOL, "alice@corp")
    cluster.wait_request("alice", phase_="Assigned")
    sessions = tmp_path / "sessions.jsonl"
    notes, cuts = tmp_path / "notified.txt", tmp_path / "disconnected.txt"
    write_lines(sessions, [{"user": "alice@corp", "state": "Active", "idleSeconds": 5}])
    notify = f'echo "$HOSTPOOL_USER|$HOSTPOOL_MESSAGE|$HOSTPOOL_DEADLINE" >> {notes}'
    agents["h1"].start(
        "--sessions-command", f"cat {sessions}",
        "--notify-command", notify,
        "--disconnect-command", f'echo "$HOSTPOOL_USER" >> {cuts}',
    )  # fmt: skip
    first = cluster.wait(
        lambda: status(cluster.request("alice")).get("logonAt"), "alice's logonAt", 15
    )
    st = status(cluster.request("alice"))
    assert st["sessionState"] == "Active"
    assert st["stateChangedAt"]
    assert st.get("idleSince") is None  # 5 s idle is not idle
    # No input for 10 minutes: idleSince = about now - 600 s.
    write_lines(sessions, [{"user": "alice@corp", "state": "Active", "idleSeconds": 600}])
    stored = cluster.wait(
        lambda: status(cluster.request("alice")).get("idleSince"), "idleSince", 15
    )
    since = parse_time(stored)
    assert abs((datetime.now(UTC) - since).total_seconds() - 600) < 10
    # A sample of the same idle period writes nothing more.
    version = cluster.request("alice")["metadata"]["resourceVersion"]
    write_lines(sessions, [{"user": "alice@corp", "state": "Active", "idleSeconds": 602}])
    time.sleep(3)
    assert cluster.request("alice")["metadata"]["resourceVersion"] == version
    # The administrator's notice: the notify command, once.
    cluster.patch_status(
        "SessionRequest",
        "alice",
        {"notice": {"message": "hello from IT", "sentAt": now_rfc3339()}},
    )
    cluster.wait(
        lambda: (status(cluster.request("alice")).get("notice") or {}).get("shownAt"),
        "notice.shownAt",
        15,
    )
    # A disconnect: the disconnect command.
    cluster.patch_status("SessionRequest", "alice", {"disconnect": {"requestedAt": now_rfc3339()}})
    cluster.wait(
        lambda: (status(cluster.request("alice")).get("disconnect") or {}).get("doneAt"),
        "disconnect.doneAt",
        15,
    )
    assert cuts.read_text().splitlines() == ["alice@corp"]
    # Input again: idleSince cleared; an Idle disconnect decided before it is not run.
    decided = now_rfc3339()
    write_lines(sessions, [{"user": "alice@corp", "state": "Active", "idleSeconds": 1}])
    cluster.wait(
        lambda: (
            "idleSince" not in status(cluster.request("alice"))
            or status(cluster.request("alice"))["idleSince"] is None
        ),
        "idleSince cleared on input",
        15,
    )
    cluster.patch_status(
        "SessionRequest", "alice", {"disconnect": {"requestedAt": decided, "limit": "Idle"}}
    )
    cluster.wait(
        lambda: (status(cluster.request("alice")).get("disconnect") or {}).get("doneAt"),
        "the Idle disconnect marked done",
        15,
    )
    time.sleep(2)
    assert cuts.read_text().splitlines() == ["alice@corp"], "the Idle disconnect was run"
    assert notes.read_text().splitlines() == ["alice@corp|hello from IT|"]
    assert status(cluster.request("alice"))["logonAt"] == first


def test_a_failing_logoff_command_keeps_the_request_and_is_retried_with_back_off(
    cluster: Cluster,
    operator_process: OperatorProcess,
    agents: dict[str, AgentProcess],
    tmp_path: Path,
) -> None:
    """At the deadline the logoff command fails: the user is still on the host, so the
    request (and the slot) stays, a LogoffFailed Warning says why, and the command is tried
    again later, not at every one-second step as before (and the request was deleted even
    though the user had not been logged off). Once the command works, the request goes."""
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 2, hosts=["h1"])
    cluster.create_request("alice", POOL, "alice@corp")
    cluster.wait_request("alice", phase_="Assigned")
    runs, works = tmp_path / "logoff-runs.txt", tmp_path / "logoff-works"
    agents["h1"].start("--logoff-command", f"echo run >> {runs}; test -f {works}")
    stamp = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    cluster.patch_status(
        "SessionRequest", "alice", {"logoff": {"message": "now", "deadline": stamp}}
    )
    cluster.wait(lambda: runs.exists() or None, "the first logoff try", 15)
    cluster.wait(
        lambda: any(e.get("reason") == "LogoffFailed" for e in cluster.events_for("h1")) or None,
        "a LogoffFailed Event on the host",
        15,
    )
    time.sleep(8)
    tries = len(runs.read_text().splitlines())
    assert "alice" in cluster.requests(), "the request went while the user was still on"
    # Back-off of 2 s doubling (waits drawn between half the step and the step): at most
    # 1 + 1 + 1 + 1 tries in 8 s more (1, 2, 4 s steps); at the 1 s step of the old loop, 9.
    assert 2 <= tries <= 5, f"{tries} logoff tries in about 9 s"
    works.touch()
    cluster.wait(lambda: "alice" not in cluster.requests() or None, "alice logged off", 30)


# --------------------------------------------------------------------------- RDP certificate


def published_certificate(cluster: Cluster, host: str) -> str | None:
    agent = status(cluster.host(host)).get("agent")
    value = agent.get("rdpCertificateSha256") if isinstance(agent, dict) else None
    return value if isinstance(value, str) else None


def test_the_agent_publishes_its_hosts_rdp_certificate_and_follows_it(
    cluster: Cluster, agents: dict[str, AgentProcess], tmp_path: Path
) -> None:
    """``--rdp-certificate FILE``: the SHA-256 of the DER certificate (lowercase hex) in
    ``status.agent.rdpCertificateSha256``, what the broker's relay pins. A rotated file is
    published within seconds, not at the next report; one that cannot be read is published
    as none (the relay then refuses the host, never trusting a certificate that was) with a
    Warning Event, and the agent keeps reporting."""
    cluster.create_pool(POOL, "BreadthFirst", 10)
    cluster.create_host("h1", POOL)
    first_cert, _, first_der = self_signed("first", tmp_path / "first")
    second_cert, _, second_der = self_signed("second", tmp_path / "second")
    served = tmp_path / "cert.pem"
    shutil.copy(first_cert, served)
    # Reports every 20 s: what is seen sooner is the certificate being followed on its own.
    agents["h1"].start("--rdp-certificate", str(served), interval=20)
    first = hashlib.sha256(first_der).hexdigest()
    cluster.wait(
        lambda: published_certificate(cluster, "h1") == first or None, "the first published", 15
    )

    replacement = tmp_path / "cert.pem.new"
    shutil.copy(second_cert, replacement)
    replacement.replace(served)  # rotated, as cert-manager and the kubelet do: atomically
    second = hashlib.sha256(second_der).hexdigest()
    cluster.wait(
        lambda: published_certificate(cluster, "h1") == second or None,
        "the rotated certificate published",
        10,
    )

    served.unlink()
    cluster.wait(
        lambda: published_certificate(cluster, "h1") is None or None,
        "no fingerprint published for a certificate that is gone",
        10,
    )
    (event,) = cluster.wait(
        lambda: events(cluster, "h1", "RdpCertificateUnreadable") or None,
        "a RdpCertificateUnreadable Event",
        10,
    )
    assert event["type"] == "Warning"
    assert f"could not read the RDP certificate {served}" in event["message"], event
    assert "could not read the RDP certificate" in agents["h1"].log()
    served.write_text("not a certificate\n")
    cluster.wait(
        lambda: (
            any(
                "holds no PEM certificate" in str(e.get("message"))
                for e in events(cluster, "h1", "RdpCertificateUnreadable")
            )
            or None
        ),
        "the Event for a file that holds no certificate",
        10,
    )
    assert published_certificate(cluster, "h1") is None
    assert agents["h1"].alive

    shutil.copy(first_cert, served)
    cluster.wait(
        lambda: published_certificate(cluster, "h1") == first or None, "published again", 10
    )
    assert agents["h1"].alive
    assert "Traceback" not in agents["h1"].log()


# --------------------------------------------------------------------------- faults


def test_the_agent_rides_out_an_api_server_restart(
    kube: Kube, cluster: Cluster, agents: dict[str, AgentProcess]
) -> None:
    control_plane = need_control_plane(kube, "restarting kube-apiserver")
    cluster.create_pool(POOL, "BreadthFirst", 10)
    cluster.create_host("h1", POOL)
    agents["h1"].start()
    started = datetime.now(UTC)
    cluster.wait(lambda: fresh_metrics(cluster, "h1", started), "a first report", 10)
    control_plane.restart_apiserver(crash=True, down_seconds=3)
    back = datetime.now(UTC)
    cluster.wait(lambda: fresh_metrics(cluster, "h1", back), "reports again after the restart", 60)
    assert agents["h1"].alive
    assert "Traceback" not in agents["h1"].log()


def test_a_silent_agent_is_counted_by_the_pool(
    kube: Kube, cluster: Cluster, agents: dict[str, AgentProcess], tmp_path: Path
) -> None:
    """The metrics are the agent's heartbeat: once they are older than
    --metrics-stale-after, the host says MetricsStale and the pool counts it as silent."""
    operator = OperatorProcess(
        kube.kubeconfig,
        cluster.namespace,
        tmp_path / "operator.log",
        extra_args=["--metrics-stale-after", "3"],
    )
    operator.start()
    try:
        cluster.setup_pool(POOL, "BreadthFirst", 10, hosts=["h1", "h2"])
        agents["h1"].start()
        agents["h2"].start()
        started = datetime.now(UTC) - timedelta(seconds=1)
        for host in ("h1", "h2"):
            cluster.wait(
                lambda host=host: fresh_metrics(cluster, host, started),  # type: ignore[misc]
                f"{host} reporting",
                15,
            )
        cluster.wait(
            lambda: cond_is(cluster.host("h1"), "MetricsStale", "False", "Fresh") or None,
            "h1 fresh",
            15,
        )
        assert status(cluster.pool(POOL))["hosts"]["agentSilent"] == 0
        agents["h1"].stop()
        cluster.wait(
            lambda: cond_is(cluster.host("h1"), "MetricsStale", "True", "SampleTooOld") or None,
            "h1 stale once its agent stopped",
            20,
        )
        cluster.wait(
            lambda: status(cluster.pool(POOL))["hosts"]["agentSilent"] == 1 or None,
            "the pool counts one silent agent",
            10,
        )
        assert cond_is(cluster.host("h2"), "MetricsStale", "False")
    finally:
        operator.stop()
