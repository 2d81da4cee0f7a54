"""Single sign-on at the broker, end to end (a real Keycloak, the broker and the operator as
processes, the suite's API server): a connect to a pool with ``connection.singleSignOn``
answers ``logon`` (the user, a one-time credential for that user on the placed host, when it
ends), which the hosts' public key verifies; the ``.rdp`` file never holds it. Every user gets
one uid, the same from every replica and every connect, recorded in the cluster; a token's
``--uid-claim`` names it instead. A broker without a logon key refuses rather than hand out
a connection no host would take."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hostpool_operator.logon import credential, uids
from support.broker_helpers import POOL, Connecting, entitled_pool
from support.signon import make_keys

Obj = dict[str, Any]


def signon_pool(connecting: Connecting, *, sign_on: bool = True) -> None:
    cluster = connecting.cluster
    entitled_pool(cluster, ["h1", "h2"], limit=4, users=["alice", "bob", "carol"])
    cluster.patch("HostPool", POOL, {"spec": {"connection": {"singleSignOn": sign_on}}})


def logon_of(answer: Obj, key: Ed25519PrivateKey, user: str) -> credential.Claims:
    logon = answer["logon"]
    assert logon["user"] == user
    ends = dt.datetime.fromisoformat(logon["expiresAt"].replace("Z", "+00:00")).timestamp()
    assert 0 < ends - time.time() <= credential.MAX_LIFETIME
    assert logon["password"] not in answer["rdpFile"]
    return credential.verify(
        logon["password"], user, answer["host"], [key.public_key()], time.time()
    )


def test_a_connect_answers_a_one_time_logon_for_the_placed_host(
    connecting: Connecting, tmp_path: Path
) -> None:
    cluster, brokers, tokens = connecting
    signon_pool(connecting)
    path, _, key = make_keys(tmp_path)
    namespace = cluster.namespace
    broker = brokers("--logon-key-file", str(path), "--uid-namespace", namespace)

    alice = broker.connect(namespace, POOL, tokens("alice"))
    assert alice.status == 200, alice.text
    assert alice.headers.get("Cache-Control") == "no-store"
    first = logon_of(alice.body, key, "alice")
    assert uids.FIRST_ALLOCATED <= first.uid <= uids.LAST_ALLOCATED

    # A reconnect: a new credential, the same uid; another user: another uid.
    again = broker.connect(namespace, POOL, tokens("alice"))
    assert again.status == 200, again.text
    second = logon_of(again.body, key, "alice")
    assert second.uid == first.uid
    assert second.nonce != first.nonce
    bob = logon_of(broker.connect(namespace, POOL, tokens("bob")).body, key, "bob")
    assert bob.uid != first.uid

    # Another replica (a restart, too) reads the record: the same uid.
    other = brokers("--logon-key-file", str(path), "--uid-namespace", namespace)
    assert logon_of(other.connect(namespace, POOL, tokens("alice")).body, key, "alice").uid == (
        first.uid
    )
    listing = cluster.kube.call("GET", f"/api/v1/namespaces/{namespace}/configmaps")
    held = {
        item["metadata"]["name"]: item["data"]["user"]
        for item in listing["items"]
        if item["metadata"]["name"].startswith("uid-")
    }
    assert held[uids.uid_record_name(first.uid)] == "alice"
    assert held[uids.uid_record_name(bob.uid)] == "bob"
    assert 'hostpool_broker_logon_credentials_total{outcome="Minted"} 3.0' in broker.metrics()


def test_the_uid_claim_names_the_uid(
    connecting: Connecting, tmp_path: Path, sign: Callable[..., str]
) -> None:
    cluster, brokers, _ = connecting
    signon_pool(connecting)
    path, _, key = make_keys(tmp_path)
    broker = brokers("--logon-key-file", str(path), "--uid-claim", "uidNumber")
    answer = broker.connect(cluster.namespace, POOL, sign(uidNumber="4242"))
    assert answer.status == 200, answer.text
    assert logon_of(answer.body, key, "alice").uid == 4242
    # A claim that names no person's uid is refused, never guessed.
    refused = broker.connect(cluster.namespace, POOL, sign(uidNumber=0))
    assert refused.status == 401, refused.text
    assert "uidNumber" in refused.body["message"]


def test_without_a_logon_key_a_single_sign_on_pool_is_refused(connecting: Connecting) -> None:
    cluster, brokers, tokens = connecting
    signon_pool(connecting)
    answer = brokers().connect(cluster.namespace, POOL, tokens("alice"))
    assert answer.status == 503, answer.text
    assert answer.body["reason"] == "SingleSignOnUnavailable"
    assert "password" not in answer.text


def test_a_pool_without_single_sign_on_hands_out_no_credential(
    connecting: Connecting, tmp_path: Path
) -> None:
    cluster, brokers, tokens = connecting
    signon_pool(connecting, sign_on=False)
    path, _, _ = make_keys(tmp_path)
    broker = brokers("--logon-key-file", str(path), "--uid-namespace", cluster.namespace)
    answer = broker.connect(cluster.namespace, POOL, tokens("alice"))
    assert answer.status == 200, answer.text
    assert "logon" not in answer.body
