"""The broker end to end: a real Keycloak signs the users' tokens, the broker runs as a real
process against the suite's API server, the operator places the requests it creates. Who
gets in and where, one request per user and pool, waiting (a full pool, a pool that grows),
a broker killed mid-connect, ending a session. Tokens, bad input and TLS:
test_broker_auth_live.py. The fixtures (``connecting``, ``brokers``, ``tokens``, ``sign``,
``logoff_agent``) are in conftest.py.

Users of the ``keycloak`` fixture's realm ``corp``: alice and carol are in group
/finance-desk, bob in none (groups are full paths, as the tokens carry them). Pools name
them as they need.
"""

from __future__ import annotations

import threading
import time
import urllib.error
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from e2e import test_workloads_live as workloads
from e2e.test_workloads_live import node_label  # noqa: F401  (a fixture)
from hostpool_operator.access.names import request_name
from support.agent_process import AgentProcess
from support.broker_helpers import (
    BROKER_LABEL,
    POOL,
    Connecting,
    Reply,
    assert_refused,
    broker_requests,
    entitled_pool,
    host_sessions,
)
from support.conditions import phase
from support.kube import Kube

Obj = dict[str, Any]

# entitlements and placement


def test_entitled_users_get_the_host_depth_first_chose_and_others_a_404(
    connecting: Connecting,
) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1", "h2"], limit=3, users=["bob"], groups=["/finance-desk"])
    # One session on h2 already: depth-first fills it before h1.
    cluster.create_request("by-hand", POOL, "zed")
    cluster.wait(lambda: phase(cluster.request("by-hand")) == "Assigned" or None, "by-hand placed")
    fuller = cluster.request("by-hand")["status"]["host"]
    broker = brokers()

    alice = broker.connect(cluster.namespace, POOL, tokens("alice"))  # by group
    assert alice.status == 200, alice.text
    assert alice.body["host"] == fuller
    assert alice.body["reason"] == "NewSession"
    assert alice.body["request"] == request_name(cluster.namespace, POOL, "alice")
    assert alice.body["address"] == cluster.host(fuller)["status"]["address"]
    assert (alice.body["port"], alice.body["protocol"]) == (3389, "RDP")
    assert f"full address:s:{alice.body['address']}:3389" in alice.body["rdpFile"]
    assert "username:s:alice" in alice.body["rdpFile"]
    made = cluster.request(alice.body["request"])
    assert made["spec"]["user"] == "alice"  # from the token
    assert made["metadata"]["labels"][BROKER_LABEL] == "true"

    bob = broker.connect(cluster.namespace, POOL, tokens("bob"))  # by name
    assert bob.status == 200, bob.text
    assert bob.body["host"] == fuller  # 3 a host: still the fuller one

    # Not entitled: the same answer as a pool that does not exist.
    dave = broker.connect(cluster.namespace, POOL, tokens("dave"))
    missing = broker.connect(cluster.namespace, "no-such-pool", tokens("alice"))
    assert_refused(dave, 404, "PoolNotFound")
    assert_refused(missing, 404, "PoolNotFound")
    assert dave.body["message"].replace(POOL, "X") == missing.body["message"].replace(
        "no-such-pool", "X"
    )
    other_ns = broker.connect("default", POOL, tokens("alice"))  # not served
    assert_refused(other_ns, 404, "PoolNotFound")
    assert set(broker_requests(cluster)) == {alice.body["request"], bob.body["request"]}


def test_pools_lists_only_entitled_pools_with_the_callers_session(connecting: Connecting) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1"], users=["alice"], name="desk")
    entitled_pool(cluster, ["h2"], groups=["/finance-desk"], name="finance")
    entitled_pool(cluster, ["h3"], users=["bob"], name="bobs")
    cluster.setup_pool("nobody", "DepthFirst", 2, hosts=["h4"])  # no entitlements
    broker = brokers()
    token = tokens("alice")
    assert broker.connect(cluster.namespace, "desk", token).status == 200

    listed = broker.pools(token)
    assert listed.status == 200, listed.text
    pools = {p["name"]: p for p in listed.body["pools"]}
    assert set(pools) == {"desk", "finance"}
    assert pools["desk"]["session"]["host"] == "h1"
    assert pools["desk"]["session"]["request"] == request_name(cluster.namespace, "desk", "alice")
    assert pools["desk"]["loadBalancerType"] == "DepthFirst"
    assert pools["finance"]["session"] is None
    assert pools["finance"]["available"] is True
    assert pools["finance"]["namespace"] == cluster.namespace
    assert {p["name"] for p in broker.pools(tokens("dave")).body["pools"]} == set()


def test_the_rdp_file_itself_with_the_pools_settings(connecting: Connecting) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(
        cluster,
        ["h1"],
        users=["alice"],
        connection={
            "port": 3390,
            "rdpProperties": "audiomode:i:0;redirectclipboard:i:1",
            "gateway": {"hostname": "rdgw.corp.example"},
        },
    )
    broker = brokers()
    reply = broker.connect(
        cluster.namespace, POOL, tokens("alice"), headers={"Accept": "application/x-rdp"}
    )
    assert reply.status == 200, reply.text
    assert reply.headers["Content-Type"].startswith("application/x-rdp")
    assert reply.headers["Content-Disposition"] == f'attachment; filename="{POOL}.rdp"'
    assert reply.text.split("\r\n") == [
        "full address:s:10.0.0.1:3390",
        "username:s:alice",
        "audiomode:i:0",
        "redirectclipboard:i:1",
        "gatewayhostname:s:rdgw.corp.example",
        "gatewayusagemethod:i:1",
        "gatewayprofileusagemethod:i:1",
        "",
    ]


# ---------------------------------------------------------------------------------------
# one request per user and pool


def test_a_second_connect_is_a_reconnect_to_the_same_host(connecting: Connecting) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1", "h2"], users=["alice"])
    broker = brokers()
    first = broker.connect(cluster.namespace, POOL, tokens("alice"))
    # While the first connect is under way, asking again is part of it (a client's poll).
    again = broker.connect(cluster.namespace, POOL, tokens("alice"))
    assert again.body["connect"] == first.body["connect"], again.text
    # The host's agent saw her session run (as it writes it): the first connect ended.
    request = first.body["request"]
    ended = cluster.request(request)["status"]["connects"]
    ended[-1]["outcome"] = "Succeeded"
    cluster.patch_status("SessionRequest", request, {"connects": ended})
    second = broker.connect(cluster.namespace, POOL, tokens("alice"))
    assert first.status == second.status == 200, (first.text, second.text)
    assert (second.body["request"], second.body["host"]) == (
        first.body["request"],
        first.body["host"],
    )
    assert (first.body["reason"], second.body["reason"]) == ("NewSession", "Reconnected")
    assert len(broker_requests(cluster)) == 1
    # Logon diagnostics: the reconnect is a connect of its own on the request.
    connects = cluster.request(first.body["request"])["status"]["connects"]
    assert [c["ref"] for c in connects] == [first.body["connect"], second.body["connect"]]
    assert [c.get("reconnect", False) for c in connects] == [False, True]
    assert set(connects[0]["phases"]) == {"broker", "queue"}, connects
    assert set(connects[1]["phases"]) == {"broker"}, connects
    assert "outcome" not in connects[1]  # until the host's agent sees the session run


def test_twenty_concurrent_connects_of_one_user_make_one_request(connecting: Connecting) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1", "h2"], users=["alice"])
    broker = brokers()
    token = tokens("alice")
    with ThreadPoolExecutor(20) as pool:
        replies = list(
            pool.map(lambda _: broker.connect(cluster.namespace, POOL, token), range(20))
        )
    assert {r.status for r in replies} == {200}, [r.text for r in replies if r.status != 200]
    assert len({(r.body["request"], r.body["host"]) for r in replies}) == 1
    assert len(cluster.requests()) == 1


def test_two_broker_replicas_racing_for_one_user_make_one_request(connecting: Connecting) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1", "h2"], users=["alice", "bob"])
    one, two = brokers(), brokers()
    for user in ("alice", "bob"):
        token = tokens(user)
        go = threading.Barrier(10)

        def call(i: int, token: str = token, go: threading.Barrier = go) -> list[Reply]:
            """Connect as a client does: again on a 202 (the request found Pending, made
            by the other replica a moment before), until the desktop is given."""
            go.wait()
            broker = one if i % 2 else two
            replies = [broker.connect(cluster.namespace, POOL, token)]
            deadline = time.monotonic() + 30
            while replies[-1].status == 202 and time.monotonic() < deadline:
                time.sleep(0.2)
                replies.append(broker.connect(cluster.namespace, POOL, token))
            return replies

        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(call, range(10)))
        replies = [r for each in answers for r in each]
        assert {r.status for r in replies} <= {200, 202}, [r.text for r in replies]
        assert [each[-1].status for each in answers] == [200] * 10, [r.text for r in replies]
        assert len({r.body["request"] for r in replies}) == 1
    assert len(cluster.requests()) == 2


# ---------------------------------------------------------------------------------------
# waiting: a full pool, hosts starting


def test_a_full_pool_answers_202_until_a_slot_frees(connecting: Connecting) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1"], limit=1, users=["alice", "bob"])
    broker = brokers("--connect-timeout-seconds", "2")
    assert broker.connect(cluster.namespace, POOL, tokens("alice")).status == 200
    waiting = broker.connect(cluster.namespace, POOL, tokens("bob"))
    assert waiting.status == 202, waiting.text
    assert waiting.body["reason"] == "PoolSaturated"
    assert waiting.body["phase"] == "Pending"
    assert int(waiting.headers["Retry-After"]) >= 1
    again = broker.connect(cluster.namespace, POOL, tokens("bob"))
    assert (again.status, again.body["request"]) == (202, waiting.body["request"])
    # alice logs off: bob's request takes her slot.
    assert broker.end_session(cluster.namespace, POOL, tokens("alice")).status == 202
    placed = broker.connect(cluster.namespace, POOL, tokens("bob"))
    assert placed.status == 200, placed.text
    assert placed.body["request"] == waiting.body["request"]
    assert placed.body["host"] == "h1"
    assert host_sessions(cluster)["h1"] <= 1


def test_a_broker_killed_mid_connect_gives_the_retry_the_same_request(
    connecting: Connecting,
) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1"], limit=1, users=["alice", "bob"])
    cluster.create_request("by-hand", POOL, "zed")
    cluster.wait(lambda: phase(cluster.request("by-hand")) == "Assigned" or None, "by-hand placed")
    broker = brokers("--connect-timeout-seconds", "5")
    token = tokens("bob")
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(broker.connect, cluster.namespace, POOL, token)
        name = request_name(cluster.namespace, POOL, "bob")
        cluster.wait(lambda: name in cluster.requests() or None, "bob's request")
        broker.kill()
        # The connection drops with the process: no answer at all.
        with pytest.raises((ConnectionError, urllib.error.URLError)):
            pending.result()
    broker.start()
    retry = broker.connect(cluster.namespace, POOL, token)
    assert (retry.status, retry.body["request"]) == (202, name), retry.text
    cluster.delete("SessionRequest", "by-hand")
    placed = broker.connect(cluster.namespace, POOL, token)
    assert (placed.status, placed.body["request"]) == (200, name), placed.text
    assert len(broker_requests(cluster)) == 1


# ---------------------------------------------------------------------------------------
# ending a session


def test_ending_a_session_without_an_agent_deletes_the_request(connecting: Connecting) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1"], users=["alice"])
    broker = brokers()
    token = tokens("alice")
    name = broker.connect(cluster.namespace, POOL, token).body["request"]
    ended = broker.end_session(cluster.namespace, POOL, token)
    assert ended.status == 202, ended.text
    assert ended.body["requests"] == [name]
    cluster.wait(lambda: name not in cluster.requests() or None, "the request deleted")
    # The broker learns of the delete from its watch, a moment after the API server: until
    # then ending again is the same ending under way (202, nothing more to end).
    again = cluster.wait(
        lambda: (
            reply
            if (reply := broker.end_session(cluster.namespace, POOL, token)).status != 202
            else None
        ),
        "the broker to see the request gone",
        timeout=10,
    )
    assert_refused(again, 404, "NoSession")


def test_ending_a_session_with_an_agent_is_a_logoff_by_the_agent(
    connecting: Connecting, logoff_agent: Callable[[str], tuple[AgentProcess, Path]]
) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1"], users=["alice"])
    _, logoffs = logoff_agent("h1")
    cluster.wait(lambda: "agent" in (cluster.host("h1").get("status") or {}) or None, "agent")
    broker = brokers()
    token = tokens("alice")
    connected = broker.connect(cluster.namespace, POOL, token)
    assert connected.status == 200, connected.text
    name = connected.body["request"]
    # The broker's cache sees the agent before it ends the session.
    time.sleep(0.5)
    ended = broker.end_session(cluster.namespace, POOL, token)
    assert ended.status == 202, ended.text
    cluster.wait(lambda: logoffs.exists() or None, "the agent's logoff", 30)
    assert logoffs.read_text().splitlines() == ["alice"]
    cluster.wait(lambda: name not in cluster.requests() or None, "the request deleted", 30)


# ---------------------------------------------------------------------------------------
# a pool that grows: the connect waits for the host being added


def test_a_pool_that_scales_up_answers_hosts_starting_then_the_new_host(
    kube: Kube,
    node_label: Callable[[], list[str]],  # noqa: F811  (the fixture imported above)
    connecting: Connecting,
) -> None:
    cluster, brokers, tokens = connecting
    # The pods can be scheduled only once the nodes are labelled: the starting phase is
    # seen for sure.
    template = workloads.pod_template(
        workloads.pod_spec(nodeSelector={workloads.READY_LABEL: "yes"})
    )
    cluster.create_pool(
        POOL,
        "DepthFirst",
        2,
        scaling=workloads.scaling(template),
        entitlements={"users": ["alice"]},
    )
    cluster.wait_operator_knows(POOL, [])
    broker = brokers("--connect-timeout-seconds", "2")
    token = tokens("alice")
    starting = broker.connect(cluster.namespace, POOL, token)
    assert starting.status == 202, starting.text
    assert starting.body["reason"] == "HostsStarting"
    assert int(starting.headers["Retry-After"]) >= 1
    node_label()

    def placed() -> Reply | None:
        reply = broker.connect(cluster.namespace, POOL, token)
        return reply if reply.status == 200 else None

    answer = cluster.wait(placed, "the connect answered with the added host", 60)
    assert answer.body["request"] == starting.body["request"]
    pod = workloads.pods(kube, cluster.namespace)[answer.body["host"]]
    assert answer.body["address"] == pod["status"]["podIP"]
    assert (
        cluster.request(answer.body["request"])["status"]["hostAddress"] == pod["status"]["podIP"]
    )
    assert len(cluster.requests()) == 1
