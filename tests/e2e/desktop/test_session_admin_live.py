"""Session limits and ``kubectl hostpool`` in real desktops: the real operator decides, the
real agent (``--sessions-from xrdp``, inside a real xrdp host) carries out, users are real
FreeRDP clients, and the administrator's commands run as their own processes.

* A pool with ``sessionLimits: {disconnectedMinutes: 1}`` and one host of one session:
  alice's client dies, her session is Disconnected; about a minute later the operator asks
  for her logoff (limit Disconnected, an Event, the metric), the agent ends her X server and
  deletes her request, and bob, who waited (PoolSaturated), gets the host and connects.
* ``kubectl hostpool message --pool`` shows its window in both users' desktops (each
  session's X server's window tree) and marks both notices shown.
* ``kubectl hostpool drain HOST --wait --logoff-after 1m --message ...`` shows the logoff's
  message in both desktops before the deadline, prints who leaves, and returns once the
  agent logged both off at the deadline; ``undrain`` takes the drain back.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from e2e.test_kubectl_hostpool_live import PLUGIN
from e2e.test_session_limits_live import action_count
from hostpool_operator.api.timestamps import parse_time
from support.cluster import Cluster
from support.conditions import status
from support.desktop import xorg_displays
from support.desktop_sessions import (
    LOGOFF_TITLE,
    NOTICE_TITLE,
    AgentHosts,
    Desktop,
    status_of,
    wait_state,
    windows_titled,
)
from support.kube import Kube, wait_for
from support.operator_process import OperatorProcess
from support.recorder import RequestRecorder
from support.report_logs import EXTRA_LOGS

HOST = "adm-1"
USERS = {"alice": "alice-desk-pw", "bob": "bob-desk-pw"}
FIRST_ADDRESS = 51
Obj = dict[str, Any]


class LogoffRecorder(RequestRecorder):
    """Also keeps the first ``status.logoff`` each request was seen with: the agent may log
    a user off and delete the request within a second of the operator's asking."""

    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        super().__init__(kubeconfig, namespace)
        self.logoffs: dict[str, Obj] = {}

    def _record(self, event: str, obj: Mapping[str, Any]) -> None:
        logoff = status(obj).get("logoff")
        name = str((obj.get("metadata") or {}).get("name"))
        if logoff:
            with self._lock:
                self.logoffs.setdefault(name, dict(logoff))
        super()._record(event, obj)


def kubectl_hostpool(kube: Kube, namespace: str, *args: str) -> list[str]:
    """The argv of ``kubectl hostpool ARGS`` (the console script) with the suite's login."""
    return [str(PLUGIN), *args, "--kubeconfig", str(kube.kubeconfig), "-n", namespace]


def active(cluster: Cluster, user: str, timeout: float = 45) -> None:
    cluster.wait(
        lambda: status_of(cluster, user).get("sessionState") == "Active",
        f"{user}'s session to be Active",
        timeout=timeout,
    )


def test_a_disconnected_session_is_logged_off_after_the_limit_and_its_slot_reused(
    cluster: Cluster,
    kube: Kube,
    operator_process: OperatorProcess,
    agent_hosts: AgentHosts,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    hosts, agents = agent_hosts([HOST], USERS, first=FIRST_ADDRESS)
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    pool = "dlim"
    cluster.setup_pool(
        pool, "DepthFirst", 1, hosts=[HOST], sessionLimits={"disconnectedMinutes": 1}
    )
    agents[HOST].start()
    desktops = {u: Desktop(hosts, u, tmp_path, host=HOST, password=USERS[u]) for u in USERS}
    recorder = LogoffRecorder(kube.kubeconfig, cluster.namespace)
    try:
        with recorder:
            for desktop in desktops.values():
                desktop.display.__enter__()
            cluster.create_request("alice", pool, "alice")
            cluster.wait_assigned(["alice"])
            desktops["alice"].connect(logs)
            active(cluster, "alice")
            assert len(xorg_displays("alice")) == 1
            # The host's one slot is alice's: bob waits.
            cluster.create_request("bob", pool, "bob")
            cluster.wait_request("bob", phase_="Pending", reason="PoolSaturated")

            # alice's client goes away: her session stays, Disconnected.
            desktops["alice"].stop()
            wait_state(cluster, "alice", "Disconnected", "alice's request to show Disconnected", 30)
            disconnected = time.monotonic()
            changed_at = parse_time(status_of(cluster, "alice").get("stateChangedAt"))
            assert changed_at is not None
            assert len(xorg_displays("alice")) == 1, "alice's session ended with her client"
            assert status(cluster.request("bob")).get("phase") == "Pending"

            # A minute later: logged off by the limit, her request deleted, her X server gone.
            cluster.wait(
                lambda: "alice" not in cluster.requests() and not xorg_displays("alice"),
                "alice logged off by the disconnected limit (request deleted, X server gone)",
                timeout=130,
            )
            took = time.monotonic() - disconnected
            logoff = recorder.logoffs.get("alice")
            assert logoff is not None, "no status.logoff was seen on alice's request"
            assert logoff.get("limit") == "Disconnected", logoff
            asked = parse_time(logoff.get("deadline"))
            assert asked is not None, logoff
            asked_after = (asked - changed_at).total_seconds()
            print(
                f"disconnected limit: alice logged off {took:.1f} s after her request showed "
                f"Disconnected (the operator's logoff deadline {asked_after:.0f} s after "
                f"stateChangedAt)"
            )
            assert 55 <= took <= 100, f"logged off {took:.1f} s after Disconnected"
            reasons = [e.get("reason") for e in cluster.events_for("alice")]
            assert "SessionLimitReached" in reasons, reasons
            assert (
                action_count(operator_process, cluster.namespace, pool, "Disconnected", "Logoff")
                == 1
            )

            # bob gets the slot and connects.
            gone = time.monotonic()
            cluster.wait_request("bob", phase_="Assigned", host=HOST, timeout=30)
            reassigned = time.monotonic() - gone
            desktops["bob"].connect(logs)
            active(cluster, "bob")
            assert len(xorg_displays("bob")) == 1
            print(
                f"bob seen Assigned {reassigned:.1f} s after alice's request was seen gone, "
                f"Active {time.monotonic() - gone:.1f} s after"
            )
    finally:
        for desktop in desktops.values():
            desktop.stop()
            desktop.display.__exit__()


def test_kubectl_hostpool_message_and_drain_in_real_desktops(
    cluster: Cluster,
    kube: Kube,
    operator_process: OperatorProcess,
    agent_hosts: AgentHosts,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    del operator_process
    hosts, agents = agent_hosts([HOST], USERS, first=FIRST_ADDRESS)
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    pool = "adm"
    ns = cluster.namespace
    cluster.setup_pool(pool, "DepthFirst", 4, hosts=[HOST])
    agents[HOST].start()
    desktops = {u: Desktop(hosts, u, tmp_path, host=HOST, password=USERS[u]) for u in USERS}
    drain: subprocess.Popen[str] | None = None
    try:
        for user in USERS:
            cluster.create_request(user, pool, user)
        cluster.wait_assigned(USERS)
        for desktop in desktops.values():  # both log on at once
            desktop.display.__enter__()
            desktop.connect(logs)
        for user in USERS:
            active(cluster, user)

        # --- kubectl hostpool message --pool
        text = "The file share is read-only until 13:00."
        sent = time.monotonic()
        done = subprocess.run(
            kubectl_hostpool(kube, ns, "message", "--pool", pool, text),
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        print(f"$ kubectl hostpool message --pool {pool} {text!r}\n{done.stdout}{done.stderr}")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "message sent to 2 sessions: alice, bob\n"
        for user in USERS:
            notice = cluster.wait(
                lambda u=user: (  # type: ignore[misc]
                    (status_of(cluster, u).get("notice") or {}).get("shownAt")
                    and status_of(cluster, u)["notice"]
                ),
                f"{user}'s notice shown (notice.shownAt)",
                timeout=20,
            )
            assert notice["message"] == text
            count = wait_for(
                lambda u=user: windows_titled(u, NOTICE_TITLE),  # type: ignore[misc]
                10,
                what=f"the message window in {user}'s desktop",
            )
            assert count == 1, f"{user}'s desktop has {count} message windows"
        shown = time.monotonic() - sent

        # --- kubectl hostpool drain --wait --logoff-after 1m --message
        xorgs = {u: xorg_displays(u) for u in USERS}
        assert all(len(d) == 1 for d in xorgs.values()), xorgs
        started = time.monotonic()
        drain = subprocess.Popen(
            kubectl_hostpool(
                kube, ns, "drain", HOST, "--wait", "--logoff-after", "1m",
                "--message", "This host restarts in a minute: save your work.",
            ),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        for user in USERS:
            wait_for(
                lambda u=user: windows_titled(u, LOGOFF_TITLE),  # type: ignore[misc]
                20,
                what=f"the logoff's message window in {user}'s desktop",
            )
            logoff = cluster.wait(
                lambda u=user: (  # type: ignore[misc]
                    (status_of(cluster, u).get("logoff") or {}).get("shownAt")
                    and status_of(cluster, u)["logoff"]
                ),
                f"{user}'s logoff message marked shown (logoff.shownAt)",
                timeout=20,
            )
            deadline = parse_time(logoff["deadline"])
            assert deadline is not None
            ahead = (deadline - datetime.now(UTC)).total_seconds()
            assert ahead > 30, f"{user}'s logoff message shown only {ahead:.0f} s before"
            print(f"{user}: logoff message shown {ahead:.0f} s before the deadline")
        assert cluster.host(HOST)["spec"]["drainMode"] is True
        try:
            out, err = drain.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            drain.kill()
            out, err = drain.communicate()
            pytest.fail(f"drain --wait did not return in 180 s:\n{out}{err}")
        took = time.monotonic() - started
        print(f"$ kubectl hostpool drain {HOST} --wait --logoff-after 1m ... ({took:.0f} s)\n{out}")
        assert drain.returncode == 0, err
        assert err == ""
        lines = out.splitlines()
        assert lines[0] == f"{HOST} drained: no new sessions"
        assert lines[1].startswith(f"{HOST}: 2 sessions to be logged off at "), lines
        assert lines[2] == f"{HOST}: waiting for 2 sessions: alice, bob", lines
        left = sorted(line.split()[0] for line in lines if " left " in line)
        assert left == ["alice", "bob"], lines
        assert lines[-1] == f"{HOST} has no sessions"
        assert took >= 55, f"the users went {took:.0f} s after the drain, before the deadline"
        for user in USERS:
            assert not xorg_displays(user), f"{user}'s X server is still running"
            assert desktops[user].clients[0].wait_exit(15) is not None, f"{user} still connected"
        on_host = [n for n, r in cluster.requests().items() if status(r).get("host") == HOST]
        assert not on_host, on_host
        assert cluster.host(HOST)["spec"]["drainMode"] is True

        done = subprocess.run(
            kubectl_hostpool(kube, ns, "undrain", HOST),
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        print(f"$ kubectl hostpool undrain {HOST}\n{done.stdout}{done.stderr}")
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{HOST} undrained: takes new sessions\n"
        assert cluster.host(HOST)["spec"]["drainMode"] is False
        print(f"message: both windows shown {shown:.1f} s after the command; drain: {took:.1f} s")
    finally:
        if drain is not None and drain.poll() is None:
            drain.kill()
            drain.wait(10)
        for desktop in desktops.values():
            desktop.stop()
            desktop.display.__exit__()
