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
import shutil
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

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
    display = VirtualDisplay(tmp_path / "xvfb.log")
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
            # ... and on the host itself, where an image update's canary reads it.
            last = cluster.wait_host(
                HOST,
                lambda h: bool(h.get("status", {}).get("agent", {}).get("lastLogonRefusal")),
                "status.agent.lastLogonRefusal",
            )["status"]["agent"]["lastLogonRefusal"]
            assert last["reason"] == "Replayed", last
            displays = [args for _, args in session_processes(user) if "Xorg" in args]
            assert len(displays) == 1
            again.kill()
        finally:
            client.kill()


def test_credentials_that_are_not_this_persons_start_no_session(
    agent_hosts: AgentHosts, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Through xrdp's real PAM stack, each refused before any session starts and recorded
    with its reason (never the credential): a forged credential (another key), one for
    another host, one for another user, an expired one, one naming a uid other than the
    account's, and one whose home belongs to another uid. No account is made for any."""
    _, public, key = make_keys(tmp_path)
    forger = Ed25519PrivateKey.generate()
    tag = uuid.uuid4().hex[:5]
    names = {case: f"hpr{tag}{i}" for i, case in enumerate(CASES)}
    existing = names["UidMismatch"]
    hosts, _ = agent_hosts([HOST], {existing: "typed-pw"}, first=FIRST + 3, signon=public)
    address = hosts.hosts[HOST].address
    now = int(time.time())
    home = Path("/home") / names["HomeOwnedByAnotherUser"]
    home.mkdir()
    os.chown(home, 23456, 23456)  # someone else's, from a volume kept elsewhere

    def grant(user: str, uid: int, host: str = HOST) -> credential.Grant:
        return credential.Grant(user=user, host=host, request_uid=str(uuid.uuid4()), uid=uid)

    minted = {
        "forged": credential.mint(forger, grant(names["forged"], 61001), now, 60, os.urandom(12)),
        "other host": credential.mint(
            key, grant(names["other host"], 61002, host="another-host"), now, 60, os.urandom(12)
        ),
        "other user": credential.mint(
            key, grant(names["other user"] + "x", 61003), now, 60, os.urandom(12)
        ),
        "Expired": credential.mint(
            key, grant(names["Expired"], 61004), now - 300, 60, os.urandom(12)
        ),
        "UidMismatch": credential.mint(
            key, grant(existing, pwd.getpwnam(existing).pw_uid + 1), now, 60, os.urandom(12)
        ),
        "HomeOwnedByAnotherUser": credential.mint(
            key, grant(names["HomeOwnedByAnotherUser"], 61006), now, 60, os.urandom(12)
        ),
    }
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])
    refusals = hosts.directory / HOST / "logon" / "refusals.jsonl"
    display = VirtualDisplay(tmp_path / "xvfb.log")
    try:
        with display:
            for n, case in enumerate(CASES, start=1):
                user = names[case]
                rdp = tmp_path / f"{n}.rdp"
                rdp.write_text(f"full address:s:{address}:3389\r\nusername:s:{user}\r\n")
                client = RdpClient(
                    display, rdp, minted[case], tmp_path / f"xfreerdp-{n}.log", tmp_path
                )
                logs.append((f"xfreerdp log ({case})", client.log_text))
                client.start()
                try:
                    lines = wait_for(
                        partial(_refusals, refusals, n), 30, what=f"the {case} credential's refusal"
                    )
                finally:
                    client.kill()
                refusal = json.loads(lines[n - 1])
                assert refusal["reason"] == CASES[case], refusal
                assert refusal["user"] == user
                assert minted[case] not in refusals.read_text()
                assert session_processes(user) == []
                if case != "UidMismatch":
                    with pytest.raises(KeyError):
                        pwd.getpwnam(user)
        assert home.stat().st_uid == 23456  # never re-owned
        assert list(home.iterdir()) == []
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _refusals(path: Path, at_least: int) -> list[str] | None:
    """The verifier's refusal lines once there are ``at_least``."""
    lines = path.read_text().splitlines() if path.exists() else []
    return lines if len(lines) >= at_least else None


#: Each case and the verifier's reason for it.
CASES = {
    "forged": "InvalidSignature",
    "other host": "InvalidSignature",
    "other user": "InvalidSignature",
    "Expired": "Expired",
    "UidMismatch": "UidMismatch",
    "HomeOwnedByAnotherUser": "HomeOwnedByAnotherUser",
}
