"""A pool's session limits, decided by the real operator against the real API server.

* ``disconnectedMinutes: 0`` with a real agent whose sessions command reports its users: the
  user the command reports Disconnected gets ``status.logoff`` naming the limit, an Event
  ``SessionLimitReached`` and a count in ``hostpool_session_limit_actions_total``; the agent
  logs them off and deletes the request, and the user waiting for a slot gets it. The user
  reported Active on the other host is never touched.
* The idle and session-time limits, timed from what an agent writes (``idleSince``,
  ``logonAt``), written here as the agent would so the minutes-valued limits come due within
  seconds: a warning once (``status.notice`` naming the limit, Event ``SessionLimitWarning``),
  then the action (a disconnect for Idle, a logoff for MaxSession).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hostpool_operator.api.timestamps import rfc3339
from support.agent_process import AgentProcess
from support.cluster import Cluster
from support.conditions import host_of, phase, status
from support.kube import Kube
from support.operator_process import OperatorProcess
from support.report_logs import EXTRA_LOGS

Obj = dict[str, Any]


@pytest.fixture
def agent_for(
    kube: Kube, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """Start a host's agent with a sessions command (``cat`` of a file the test writes) and a
    logoff command that takes two seconds and notes the user; stopped after the test, their
    logs attached to a failed test's report."""
    started: list[AgentProcess] = []
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])

    def start(host: str) -> tuple[Path, Path]:
        sessions, logged_off = tmp_path / f"{host}-sessions.jsonl", tmp_path / f"{host}-off.txt"
        sessions.write_text("")
        agent = AgentProcess(kube.kubeconfig, namespace, host, tmp_path / f"agent-{host}.log")
        started.append(agent)
        logs.append((f"agent {host} log", lambda: agent.log()[-4000:]))
        agent.start(
            "--sessions-command",
            f"cat {sessions}",
            "--logoff-command",
            f'sleep 2; echo "$HOSTPOOL_USER" >> {logged_off}',
        )
        return sessions, logged_off

    yield start
    codes = {agent.host: agent.stop() for agent in started}
    bad = {host: code for host, code in codes.items() if code not in (0, None)}
    if bad:
        pytest.fail(f"agents exited uncleanly: {bad}", pytrace=False)


def report(path: Path, sessions: dict[str, str]) -> None:
    """What the host's sessions command prints: one line per user."""
    lines = [f'{{"user": "{user}", "state": "{state}"}}' for user, state in sessions.items()]
    temp = path.with_suffix(".tmp")
    temp.write_text("".join(line + "\n" for line in lines))
    temp.replace(path)  # atomic: the agent never reads half a file


def limit_events(cluster: Cluster, name: str) -> list[Obj]:
    return [
        e
        for e in cluster.events_for(name)
        if e.get("reason") in ("SessionLimitReached", "SessionLimitWarning")
    ]


def action_count(
    operator: OperatorProcess, namespace: str, pool: str, limit: str, action: str
) -> float:
    pattern = r"^hostpool_session_limit_actions_total\{([^}]*)\} ([0-9.e+]+)$"
    wanted = {
        f'action="{action}"',
        f'limit="{limit}"',
        f'namespace="{namespace}"',
        f'pool="{pool}"',
    }
    for match in re.finditer(pattern, operator.metrics(), re.MULTILINE):
        if set(match.group(1).split(",")) == wanted:
            return float(match.group(2))
    return 0.0


def wait_state(cluster: Cluster, name: str, state: str) -> None:
    def reported() -> bool | None:
        return status(cluster.request(name)).get("sessionState") == state or None

    cluster.wait(reported, f"{name} reported {state}", 15)


def untouched(obj: Obj) -> bool:
    found = status(obj)
    return not any(found.get(key) for key in ("logoff", "disconnect", "notice"))


def test_a_disconnected_session_is_logged_off_at_once_and_frees_its_slot(
    cluster: Cluster,
    operator_process: OperatorProcess,
    agent_for: Any,
    namespace: str,
) -> None:
    cluster.setup_pool(
        "lim", "DepthFirst", 1, hosts=["h1", "h2"], sessionLimits={"disconnectedMinutes": 0}
    )
    cluster.create_request("alice", "lim", "alice@corp")
    cluster.create_request("carol", "lim", "carol@corp")
    placed = cluster.wait_assigned(["alice", "carol"])
    cluster.create_request("bob", "lim", "bob@corp")
    cluster.wait_request("bob", phase_="Pending", reason="PoolSaturated")
    alice_host, carol_host = host_of(placed["alice"]), host_of(placed["carol"])
    assert {alice_host, carol_host} == {"h1", "h2"}
    alice_sessions, alice_off = agent_for(alice_host)
    carol_sessions, carol_off = agent_for(carol_host)
    report(alice_sessions, {"alice@corp": "Active"})
    report(carol_sessions, {"carol@corp": "Active"})
    for name in ("alice", "carol"):
        wait_state(cluster, name, "Active")
    time.sleep(2)  # a few looks of the operator at two Active sessions: nothing to do
    assert untouched(cluster.request("alice"))
    assert untouched(cluster.request("carol"))

    report(alice_sessions, {"alice@corp": "Disconnected"})
    # The logoff command takes 2 s: status.logoff is there while the agent carries it out.
    logoff = cluster.wait(
        lambda: (
            ("alice" in cluster.requests() and status(cluster.request("alice")).get("logoff"))
            or None
        ),
        "the operator's logoff of alice",
        15,
    )
    assert logoff["limit"] == "Disconnected"
    assert "left disconnected" in logoff["message"]
    deadline = datetime.fromisoformat(logoff["deadline"].replace("Z", "+00:00"))
    assert abs(deadline - datetime.now(UTC)) < timedelta(seconds=15)  # now, not later

    cluster.wait(lambda: "alice" not in cluster.requests() or None, "alice's request deleted", 20)
    assert alice_off.read_text().splitlines() == ["alice@corp"]
    report(alice_sessions, {})
    bob = cluster.wait_request("bob", phase_="Assigned", timeout=20)
    assert host_of(bob) == alice_host

    (event,) = [e for e in limit_events(cluster, "alice") if e["reason"] == "SessionLimitReached"]
    assert event["type"] == "Normal"
    assert event["message"] == "disconnected limit (0 min): logged off"
    assert action_count(operator_process, namespace, "lim", "Disconnected", "Logoff") == 1.0

    # carol, Active all along, was never touched.
    carol = cluster.request("carol")
    assert phase(carol) == "Assigned"
    assert untouched(carol)
    assert limit_events(cluster, "carol") == []
    assert not carol_off.exists()


def test_idle_and_session_time_limits_warn_once_then_act(
    cluster: Cluster, operator_process: OperatorProcess, namespace: str
) -> None:
    """No agent runs here: the test writes the facts an agent writes (its clock is this
    machine's), shifted into the past so the minutes-valued limits come due within seconds."""
    cluster.setup_pool(
        "timed",
        "BreadthFirst",
        5,
        hosts=["h1"],
        sessionLimits={"idleMinutes": 2, "maxSessionMinutes": 3, "warningMinutes": 1},
    )
    cluster.create_request("dave", "timed", "dave@corp")
    cluster.create_request("erin", "timed", "erin@corp")
    cluster.create_request("finn", "timed", "finn@corp")
    cluster.wait_assigned(["dave", "erin", "finn"])
    now = datetime.now(UTC).replace(microsecond=0)
    active = {"sessionState": "Active", "stateChangedAt": rfc3339(now - timedelta(seconds=30))}
    # dave: idle since 115 s (the idle warning due 55 s ago, the disconnect in 5 s).
    cluster.patch_status(
        "SessionRequest",
        "dave",
        {
            **active,
            "stateChangedAt": rfc3339(now - timedelta(seconds=150)),
            "logonAt": rfc3339(now - timedelta(seconds=150)),
            "idleSince": rfc3339(now - timedelta(seconds=115)),
        },
    )
    # erin: logged on 175 s ago (the 3-minute limit's warning due, the logoff in 5 s).
    cluster.patch_status(
        "SessionRequest", "erin", {**active, "logonAt": rfc3339(now - timedelta(seconds=175))}
    )
    # finn: logged on a minute ago and busy: within every limit.
    cluster.patch_status(
        "SessionRequest", "finn", {**active, "logonAt": rfc3339(now - timedelta(seconds=60))}
    )

    dave_notice = cluster.wait(
        lambda: status(cluster.request("dave")).get("notice"), "dave's idle warning", 10
    )
    assert dave_notice["limit"] == "Idle"
    assert dave_notice["message"] == (
        "This session will be disconnected in 1 minute because it has been idle."
    )
    assert dave_notice.get("shownAt") is None
    erin_notice = cluster.wait(
        lambda: status(cluster.request("erin")).get("notice"), "erin's session-time warning", 10
    )
    assert erin_notice["limit"] == "MaxSession"
    assert "logged off" in erin_notice["message"]

    disconnect = cluster.wait(
        lambda: status(cluster.request("dave")).get("disconnect"), "dave's disconnect", 20
    )
    assert disconnect["limit"] == "Idle"
    assert disconnect.get("doneAt") is None
    logoff = cluster.wait(
        lambda: status(cluster.request("erin")).get("logoff"), "erin's logoff", 20
    )
    assert logoff["limit"] == "MaxSession"
    assert "time limit of 3 minutes" in logoff["message"]
    time.sleep(2)  # more looks: nothing is asked twice
    assert status(cluster.request("dave"))["notice"] == dave_notice  # sent once
    assert status(cluster.request("dave"))["disconnect"] == disconnect
    assert status(cluster.request("erin"))["notice"] == erin_notice

    def reasons(name: str) -> list[tuple[str, str]]:
        return sorted((e["reason"], e["message"]) for e in limit_events(cluster, name))

    assert [r for r, _ in reasons("dave")] == ["SessionLimitReached", "SessionLimitWarning"]
    assert ("SessionLimitReached", "idle limit (2 min): disconnected") in reasons("dave")
    assert ("SessionLimitReached", "session time limit (3 min): logged off") in reasons("erin")
    assert action_count(operator_process, namespace, "timed", "Idle", "Disconnect") == 1.0
    assert action_count(operator_process, namespace, "timed", "MaxSession", "Logoff") == 1.0
    assert untouched(cluster.request("finn"))
    assert limit_events(cluster, "finn") == []
