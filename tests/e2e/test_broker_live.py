"""The broker end to end: a real Keycloak signs the users' tokens, the broker runs as a real
process against the suite's API server, the operator places the requests it creates.

Users of the ``keycloak`` fixture's realm ``corp``: alice and carol are in group
finance-desk, bob and dave in none. Pools name them as they need.

Tokens no identity provider would issue (expired, for another audience, without a user
claim, with 10,000 groups) are signed with a key the test adds to the realm: Keycloak
publishes it in the realm's key set like any of its own, so the broker checks those tokens
exactly as it checks Keycloak's.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import ipaddress
import json
import ssl
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from e2e import test_workloads_live as workloads
from e2e.broker_helpers import BrokerProcess, Reply
from e2e.helpers import EXTRA_LOGS, Cluster, KubeLike, OperatorProcess, phase
from e2e.test_agent_live import AgentProcess
from e2e.test_workloads_live import node_label  # noqa: F401  (a fixture)
from hostpool_operator.access.names import request_name
from keycloak import CLIENT_SECRET, CORP_USERS, OTHER_USERS, Keycloak

pytestmark = [pytest.mark.e2e]

REALM = "corp"
CLIENT = "hostpool-desktops"
POOL = "desk"
BROKER_LABEL = "hostpool.io/broker"

Obj = dict[str, Any]


# ---------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def realm_key(keycloak: Keycloak) -> tuple[str, Any]:
    """(kid, private key) of an RSA key the test adds to realm corp at low priority: it is
    published in the realm's key set, Keycloak keeps signing with its own."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    status, _, body = keycloak.admin(
        "POST",
        f"/{REALM}/components",
        {
            "name": "e2e-test-key",
            "providerId": "rsa",
            "providerType": "org.keycloak.keys.KeyProvider",
            "config": {"priority": ["1"], "privateKey": [pem], "algorithm": ["RS256"]},
        },
    )
    assert status == 201, f"adding the test key: {status} {body}"
    public = private.public_key().public_numbers()
    for key in keycloak.jwks(REALM)["keys"]:
        if key.get("kty") == "RSA" and _b64int(key["n"]) == public.n:
            return str(key["kid"]), private
    raise AssertionError("the added key is not in the realm's key set")


def _b64int(text: str) -> int:
    return int.from_bytes(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)), "big")


@pytest.fixture
def tokens(keycloak: Keycloak) -> Callable[[str], str]:
    """A fresh access token of a realm user, from Keycloak's password grant."""
    return lambda user: keycloak_token(keycloak, user)


def keycloak_token(keycloak: Keycloak, user: str, realm: str = REALM) -> str:
    users = CORP_USERS if realm == REALM else OTHER_USERS
    password = next(p for name, p, _ in users if name == user)
    return keycloak.token(realm, CLIENT, CLIENT_SECRET, user, password)


@pytest.fixture
def sign(keycloak: Keycloak, realm_key: tuple[str, Any]) -> Callable[..., str]:
    """A token signed with the realm's test key: standard claims, overridden by keywords
    (None removes one)."""
    kid, private = realm_key

    def make(headers: Obj | None = None, **claims: Any) -> str:
        now = int(time.time())
        body: Obj = {
            "iss": keycloak.issuer(REALM),
            "aud": CLIENT,
            "sub": "test",
            "iat": now,
            "exp": now + 300,
            "preferred_username": "alice",
            "groups": ["finance-desk"],
        }
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, private, algorithm="RS256", headers={"kid": kid, **(headers or {})})

    return make


@pytest.fixture
def brokers(
    kube: KubeLike,
    namespace: str,
    keycloak: Keycloak,
    realm_key: tuple[str, Any],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers for this test's namespace (the first call's is the one most tests
    use); stopped after the test, their logs attached when it fails. A broker that logged
    an error fails the test."""
    del realm_key  # in the key set before any broker fetches it
    made: list[BrokerProcess] = []
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])

    def start(
        *extra: str, ready: bool = True, trust: ssl.SSLContext | None = None
    ) -> BrokerProcess:
        broker = BrokerProcess(
            kube.kubeconfig,
            keycloak.issuer(REALM),
            CLIENT,
            [namespace],
            tmp_path / f"broker-{len(made)}.log",
            extra_args=extra,
        )
        broker.ssl_context = trust
        made.append(broker)
        logs.append((f"broker {len(made) - 1} log", lambda: broker.log_tail(60)))
        broker.start(ready=ready)
        return broker

    yield start
    for broker in made:
        broker.stop()
    problems = [line for broker in made for line in broker.problems()]
    if problems:
        pytest.fail("a broker logged errors:\n" + "\n".join(problems[:20]), pytrace=False)


def entitled_pool(
    cluster: Cluster,
    hosts: list[str],
    *,
    limit: int = 2,
    users: list[str] | None = None,
    groups: list[str] | None = None,
    name: str = POOL,
    **spec: Any,
) -> None:
    cluster.setup_pool(
        name,
        "DepthFirst",
        limit,
        hosts=hosts,
        entitlements={"users": users or [], "groups": groups or []},
        **spec,
    )
    for i, host in enumerate(hosts):
        cluster.patch("SessionHost", host, {"spec": {"address": f"10.0.0.{i + 1}"}})


def broker_requests(cluster: Cluster) -> dict[str, Obj]:
    return {
        n: r
        for n, r in cluster.requests().items()
        if (r["metadata"].get("labels") or {}).get(BROKER_LABEL) == "true"
    }


def host_sessions(cluster: Cluster) -> dict[str, int]:
    return {
        name: ((h.get("status") or {}).get("sessions") or {}).get("total", 0)
        for name, h in cluster.hosts().items()
    }


def assert_refused(reply: Reply, status: int, reason: str | None = None) -> None:
    assert reply.status == status, f"{reply.status}: {reply.text[:400]}"
    assert isinstance(reply.body, dict), reply.text[:400]
    assert set(reply.body) == {"reason", "message"}, reply.body
    if reason is not None:
        assert reply.body["reason"] == reason, reply.body
    assert "Traceback" not in reply.text


# ---------------------------------------------------------------------------------------
# entitlements and placement


def test_entitled_users_get_the_host_depth_first_chose_and_others_a_404(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1", "h2"], limit=3, users=["bob"], groups=["finance-desk"])
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


def test_pools_lists_only_entitled_pools_with_the_callers_session(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1"], users=["alice"], name="desk")
    entitled_pool(cluster, ["h2"], groups=["finance-desk"], name="finance")
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


def test_the_rdp_file_itself_with_the_pools_settings(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
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
# authentication


def test_tokens_the_broker_refuses_with_401_and_nothing_created(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    keycloak: Keycloak,
    sign: Callable[..., str],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1"], users=["alice"], groups=["finance-desk"])
    broker = brokers()
    good = tokens("alice")
    head, payload, signature = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["preferred_username"] = "bob"
    tampered_payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    unsigned_head = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode()
    now = int(time.time())
    cases = {
        "no token": None,
        "not a bearer token": "Basic YWxpY2U6cHc=",
        "not a JWT": "Bearer not-a-jwt",
        # alice of realm other: same name, same client id, another issuer.
        "another realm": "Bearer " + keycloak_token(keycloak, "alice", "other"),
        "expired": "Bearer " + sign(exp=now - 120, iat=now - 420),
        "not valid yet": "Bearer " + sign(nbf=now + 600),
        "wrong audience": "Bearer " + sign(aud="another-client"),
        "wrong issuer": "Bearer " + sign(iss="http://127.0.0.1:1/realms/corp"),
        "no expiry": "Bearer " + sign(exp=None),
        "alg none": f"Bearer {unsigned_head}.{payload}.",
        "HS256 with the public key as secret": "Bearer "
        + jwt.encode(claims, "secret", algorithm="HS256", headers={"kid": head[:8]}),
        "signed by a key never published": "Bearer "
        + jwt.encode(
            {**claims, "preferred_username": "alice"},
            stranger,
            algorithm="RS256",
            headers={"kid": "made-up-kid"},
        ),
        "tampered payload": f"Bearer {head}.{tampered_payload}.{signature}",
        "user claim missing": "Bearer " + sign(preferred_username=None),
        "user claim not a string": "Bearer " + sign(preferred_username=["alice"]),
        "groups not a list of strings": "Bearer " + sign(groups="finance-desk"),
        "1,001 groups": "Bearer " + sign(groups=[f"g{i}" for i in range(1001)]),
    }
    for what, authorization in cases.items():
        headers = {"Authorization": authorization} if authorization else {}
        reply = broker.call(
            "POST", f"/v1/namespaces/{cluster.namespace}/pools/{POOL}/connect", headers=headers
        )
        assert reply.status == 401, f"{what}: {reply.status} {reply.text[:300]}"
        assert reply.headers.get("WWW-Authenticate") == 'Bearer error="invalid_token"', what
        assert reply.body["reason"] == "Unauthorized", what
        assert broker.pools(authorization.split(" ", 1)[-1] if authorization else "").status == 401
    assert broker_requests(cluster) == {}
    # The same signing key with proper claims is accepted: the refusals above are the claims.
    assert broker.connect(cluster.namespace, POOL, sign()).status == 200
    log = broker.log_text()
    assert good not in log, "a token reached the broker's log"
    assert signature not in log, "a token reached the broker's log"


def test_a_token_with_10000_groups_is_refused_with_a_4xx(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    sign: Callable[..., str],
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1"], groups=["finance-desk"])
    broker = brokers()
    huge = sign(groups=[f"group-{i}" for i in range(10_000)])
    reply = broker.connect(cluster.namespace, POOL, huge)
    assert 400 <= reply.status < 500, reply.status
    assert "Traceback" not in reply.text
    assert broker_requests(cluster) == {}
    assert broker.call("GET", "/healthz").status == 200


def test_the_issuer_rotating_its_key_is_followed_after_one_refetch(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    keycloak: Keycloak,
    tokens: Callable[[str], str],
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1"], users=["alice", "bob"])
    broker = brokers("--oidc-key-refetch-seconds", "2")
    before = tokens("alice")
    assert broker.connect(cluster.namespace, POOL, before).status == 200
    fetches = key_fetches(broker)
    time.sleep(2.1)
    kid = keycloak.rotate_key(REALM)
    after = tokens("bob")
    assert jwt.get_unverified_header(after)["kid"] == kid
    reply = broker.connect(cluster.namespace, POOL, after)
    assert reply.status == 200, reply.text
    assert key_fetches(broker) == fetches + 1
    # A token signed by an unknown key does not make the broker fetch again and again.
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for i in range(20):
        forged = jwt.encode(
            {"preferred_username": "alice"}, stranger, "RS256", headers={"kid": f"k{i}"}
        )
        assert broker.connect(cluster.namespace, POOL, forged).status == 401
    assert key_fetches(broker) <= fetches + 2
    assert broker.connect(cluster.namespace, POOL, before).status == 200  # old key still listed


def key_fetches(broker: BrokerProcess) -> int:
    lines = [
        line
        for line in broker.metrics().splitlines()
        if line.startswith("hostpool_broker_issuer_key_fetches_total{")
    ]
    assert lines, "no hostpool_broker_issuer_key_fetches_total"
    return sum(int(float(line.split()[-1])) for line in lines)


# ---------------------------------------------------------------------------------------
# one request per user and pool


def test_a_second_connect_is_a_reconnect_to_the_same_host(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1", "h2"], users=["alice"])
    broker = brokers()
    first = broker.connect(cluster.namespace, POOL, tokens("alice"))
    second = broker.connect(cluster.namespace, POOL, tokens("alice"))
    assert first.status == second.status == 200, (first.text, second.text)
    assert (second.body["request"], second.body["host"]) == (
        first.body["request"],
        first.body["host"],
    )
    assert (first.body["reason"], second.body["reason"]) == ("NewSession", "Reconnected")
    assert len(broker_requests(cluster)) == 1


def test_twenty_concurrent_connects_of_one_user_make_one_request(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
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


def test_two_broker_replicas_racing_for_one_user_make_one_request(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1", "h2"], users=["alice", "bob"])
    one, two = brokers(), brokers()
    for user in ("alice", "bob"):
        token = tokens(user)
        go = threading.Barrier(10)

        def call(i: int, token: str = token, go: threading.Barrier = go) -> Reply:
            go.wait()
            return (one if i % 2 else two).connect(cluster.namespace, POOL, token)

        with ThreadPoolExecutor(10) as pool:
            replies = list(pool.map(call, range(10)))
        assert {r.status for r in replies} == {200}, [r.text for r in replies]
        assert len({r.body["request"] for r in replies}) == 1
    assert len(cluster.requests()) == 2


# ---------------------------------------------------------------------------------------
# waiting: a full pool, hosts starting


def test_a_full_pool_answers_202_until_a_slot_frees(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
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
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
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


def test_ending_a_session_without_an_agent_deletes_the_request(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1"], users=["alice"])
    broker = brokers()
    token = tokens("alice")
    name = broker.connect(cluster.namespace, POOL, token).body["request"]
    ended = broker.end_session(cluster.namespace, POOL, token)
    assert ended.status == 202, ended.text
    assert ended.body["requests"] == [name]
    cluster.wait(lambda: name not in cluster.requests() or None, "the request deleted")
    assert_refused(broker.end_session(cluster.namespace, POOL, token), 404, "NoSession")


def test_ending_a_session_with_an_agent_is_a_logoff_by_the_agent(
    kube: KubeLike,
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
    tmp_path: Path,
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1"], users=["alice"])
    logoffs = tmp_path / "logged-off.txt"
    agent = AgentProcess(kube, cluster.namespace, "h1", tmp_path / "agent.log")
    agent.start("--logoff-command", f'echo "$HOSTPOOL_USER" >> {logoffs}', interval=0.5)
    try:
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
    finally:
        agent.stop()


# ---------------------------------------------------------------------------------------
# bad input


def test_bad_input_gets_a_clear_4xx_and_creates_nothing(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1"], users=["alice"])
    broker = brokers()
    token = tokens("alice")
    ns = cluster.namespace
    connect = f"/v1/namespaces/{ns}/pools/{POOL}/connect"
    json_type = {"Content-Type": "application/json"}
    cases: dict[str, tuple[str, str, bytes | None, int, str]] = {
        "malformed JSON": ("POST", connect, b'{"protocol": ', 400, "InvalidBody"),
        "not an object": ("POST", connect, b"[1, 2]", 400, "InvalidBody"),
        "unknown field": ("POST", connect, b'{"user": "bob"}', 400, "InvalidBody"),
        "other protocol": ("POST", connect, b'{"protocol": "BLAST"}', 400, "InvalidBody"),
        "1 MiB body": ("POST", connect, b" " * (1 << 20), 413, "BodyTooLarge"),
        "dot-dot pool": ("POST", f"/v1/namespaces/{ns}/pools/%2E%2E/connect", None, 400, ""),
        "encoded slash": (
            "POST",
            f"/v1/namespaces/{ns}/pools/..%2F..%2Fsecrets/connect",
            None,
            400,
            "InvalidName",
        ),
        "bad namespace": ("POST", f"/v1/namespaces/NS_1/pools/{POOL}/connect", None, 400, ""),
        "unknown path": ("GET", "/v1/secrets", None, 404, "NotFound"),
        "wrong method": ("GET", connect, None, 405, "MethodNotAllowed"),
    }
    for what, (method, path, data, status, reason) in cases.items():
        reply = broker.call(method, path, token=token, data=data, headers=json_type)
        assert reply.status == status, f"{what}: {reply.status} {reply.text[:300]}"
        assert isinstance(reply.body, dict), f"{what}: {reply.text}"
        assert "reason" in reply.body, f"{what}: {reply.text}"
        if reason:
            assert reply.body["reason"] == reason, f"{what}: {reply.body}"
        assert "Traceback" not in reply.text, what
    assert cluster.requests() == {}
    assert broker.connect(ns, POOL, token, body={"protocol": "RDP"}).status == 200


def test_a_user_past_the_rate_limit_gets_429(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1"], users=["alice", "bob"])
    broker = brokers("--rate-limit", "1", "--rate-burst", "3")
    token = tokens("alice")
    replies = [broker.pools(token) for _ in range(5)]
    assert [r.status for r in replies][:3] == [200, 200, 200]
    limited = replies[-1]
    assert_refused(limited, 429, "TooManyRequests")
    assert int(limited.headers["Retry-After"]) >= 1
    assert broker.pools(tokens("bob")).status == 200  # a bucket per user


# ---------------------------------------------------------------------------------------
# a pool that grows: the connect waits for the host being added


def test_a_pool_that_scales_up_answers_hosts_starting_then_the_new_host(
    kube: KubeLike,
    cluster: Cluster,
    node_label: Callable[[], list[str]],  # noqa: F811  (the fixture imported above)
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> None:
    del operator_process
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
    pod = workloads.pods(kube, cluster.namespace)[answer.body["host"]]  # type: ignore[arg-type]
    assert answer.body["address"] == pod["status"]["podIP"]
    assert (
        cluster.request(answer.body["request"])["status"]["hostAddress"] == pod["status"]["podIP"]
    )
    assert len(cluster.requests()) == 1


# ---------------------------------------------------------------------------------------
# TLS


def test_the_broker_serves_https_with_the_certificate_it_is_given(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
    tmp_path: Path,
) -> None:
    del operator_process
    entitled_pool(cluster, ["h1"], users=["alice"])
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    trust = ssl.create_default_context(cafile=str(cert_file))
    broker = brokers("--tls-cert", str(cert_file), "--tls-key", str(key_file), trust=trust)
    assert broker.url.startswith("https://")
    reply = broker.connect(cluster.namespace, POOL, tokens("alice"))
    assert reply.status == 200, reply.text
    # Plain HTTP is not served on that port.
    plain = urllib.request.Request(f"http://127.0.0.1:{broker.port}/healthz")
    with pytest.raises((ConnectionError, urllib.error.URLError, http.client.HTTPException)):
        urllib.request.urlopen(plain, timeout=10)
