"""Single sign-on to a real xrdp host with a real FreeRDP client: a user Keycloak knows and
the host does not gets a connect answer with a one-time logon credential, FreeRDP sends it as
the password, the host's PAM (``hostpool-logon`` before any password rule) signs the user on
and makes the account with the uid the broker decided and a home they own, and the session
is reported Active. The same credential a second time is refused (the session never starts;
the refusal is recorded as ``Replayed``, without the credential, and the host's agent reports
it as a ``LogonRefused`` Event)."""

from __future__ import annotations

import json
import os
import pwd
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hostpool_operator.logon import credential
from support.broker_helpers import BrokerProcess
from support.cluster import Cluster
from support.desktop import RdpClient, VirtualDisplay, session_processes
from support.desktop_sessions import AgentHosts
from support.keycloak import CLIENT_ID, CLIENT_SECRET, Keycloak
from support.kube import wait_for
from support.operator_process import OperatorProcess
from support.report_logs import EXTRA_LOGS
from support.signon import make_keys, new_user

POOL = "sso"
HOST = "sso-1"
#: This test's hosts' addresses (others' use 11 on).
FIRST = 41


def test_freerdp_signs_on_with_the_one_time_password_once(
    cluster: Cluster,
    namespace: str,
    operator_process: OperatorProcess,
    agent_hosts: AgentHosts,
    brokers: Callable[..., BrokerProcess],
    keycloak: Keycloak,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    del operator_process
    private, public, key = make_keys(tmp_path)
    user, sign_in = new_user(keycloak)
    with pytest.raises(KeyError):
        pwd.getpwnam(user)
    hosts, agents = agent_hosts([HOST], {}, first=FIRST, signon=public)
    cluster.setup_pool(
        POOL,
        "DepthFirst",
        2,
        hosts=[HOST],
        entitlements={"users": [user], "groups": []},
        connection={"singleSignOn": True},
    )
    agents[HOST].start("--logon-state", str(hosts.directory / HOST / "logon"))
    address = hosts.hosts[HOST].address
    cluster.wait(
        lambda: (
            ((cluster.host(HOST).get("status") or {}).get("agent") or {}).get("address") == address
        ),
        f"the agent of {HOST} to report its address",
    )
    broker = brokers("--logon-key-file", str(private), "--uid-namespace", namespace)
    token = keycloak.token("corp", CLIENT_ID, CLIENT_SECRET, user, sign_in)
    answer = broker.connect(namespace, POOL, token)
    assert answer.status == 200, answer.text
    logon = answer.body["logon"]
    assert logon["user"] == user
    claims = credential.verify(logon["password"], user, HOST, [key.public_key()], time.time())
    rdp = tmp_path / "sso.rdp"
    rdp.write_text(answer.body["rdpFile"], newline="")
    assert logon["password"] not in rdp.read_text()

    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    display = VirtualDisplay(70 + os.getpid() % 9, tmp_path / "xvfb.log")
    with display:
        client = RdpClient(display, rdp, logon["password"], tmp_path / "xfreerdp.log", tmp_path)
        logs.append(("xfreerdp log", client.log_text))
        client.start()
        try:
            cluster.wait(
                lambda: (
                    (cluster.request(answer.body["request"]).get("status") or {}).get(
                        "sessionState"
                    )
                    == "Active"
                ),
                f"{user}'s single sign-on session to be reported Active",
                timeout=60,
            )
            account = pwd.getpwnam(user)
            assert account.pw_uid == claims.uid
            assert account.pw_gid == claims.uid
            assert Path(account.pw_dir).stat().st_uid == claims.uid
            assert any("Xorg" in args for _, args in session_processes(user))

            # The same credential again: refused, no second session.
            again = RdpClient(
                display, rdp, logon["password"], tmp_path / "xfreerdp-again.log", tmp_path
            )
            logs.append(("xfreerdp (replayed) log", again.log_text))
            again.start()
            refusals = hosts.directory / HOST / "logon" / "refusals.jsonl"
            text = wait_for(
                lambda: refusals.read_text() if refusals.exists() else None,
                30,
                what="the replayed credential's refusal",
            )
            assert [json.loads(line)["reason"] for line in text.splitlines()] == ["Replayed"]
            assert logon["password"] not in refusals.read_text()
            # The host's agent tells: an Event on the SessionHost, with the reason only.
            event = cluster.wait(
                lambda: next(
                    (
                        e
                        for e in cluster.kube.events(namespace, HOST)
                        if e["reason"] == "LogonRefused"
                    ),
                    None,
                ),
                "the agent's LogonRefused Event",
                timeout=30,
            )
            assert "Replayed" in event["message"]
            assert logon["password"] not in event["message"]
            displays = [args for _, args in session_processes(user) if "Xorg" in args]
            assert len(displays) == 1
            again.kill()
        finally:
            client.kill()
