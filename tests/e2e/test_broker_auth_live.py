"""The broker's door, end to end against a real Keycloak: the tokens it refuses (and that it
never logs one), the issuer rotating its key, bad input, the per-user rate limit, HTTPS.

Tokens no identity provider would issue (expired, for another audience, without a user
claim, with 10,000 groups) are signed with a key the test adds to the realm: Keycloak
publishes it in the realm's key set like any of its own, so the broker checks those tokens
exactly as it checks Keycloak's (the ``sign`` fixture).
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from support.broker_helpers import (
    CLIENT,
    POOL,
    REALM,
    BrokerProcess,
    Connecting,
    add_realm_key,
    assert_refused,
    broker_requests,
    entitled_pool,
    keycloak_token,
)
from support.keycloak import CLIENT_SECRET, Keycloak
from support.tls import self_signed

Obj = dict[str, Any]

# ---------------------------------------------------------------------------------------
# authentication


def test_tokens_the_broker_refuses_with_401_and_nothing_created(
    connecting: Connecting, keycloak: Keycloak, sign: Callable[..., str]
) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1"], users=["alice"], groups=["/finance-desk"])
    broker = brokers()
    good = tokens("alice")
    id_token = keycloak.token_response(REALM, CLIENT, CLIENT_SECRET, "alice", "alice-pw")[
        "id_token"
    ]
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
        "issuer with a trailing slash": "Bearer " + sign(iss=keycloak.issuer(REALM) + "/"),
        # Keycloak's own ID token: same issuer, the client id in aud, alice; typ ID.
        "ID token": "Bearer " + id_token,
        "typ Refresh": "Bearer " + sign(typ="Refresh"),
        "header typ dpop+jwt": "Bearer " + sign({"typ": "dpop+jwt"}),
        "crit header": "Bearer " + sign({"crit": ["exp"]}),
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
        "groups not a list of strings": "Bearer " + sign(groups="/finance-desk"),
        "1,001 groups": "Bearer " + sign(groups=[f"g{i}" for i in range(1001)]),
    }
    accepted: dict[str, int] = {}  # every case that was not refused, not just the first
    for what, authorization in cases.items():
        headers = {"Authorization": authorization} if authorization else {}
        reply = broker.call(
            "POST", f"/v1/namespaces/{cluster.namespace}/pools/{POOL}/connect", headers=headers
        )
        if reply.status != 401:
            accepted[what] = reply.status
            continue
        assert reply.headers.get("WWW-Authenticate") == 'Bearer error="invalid_token"', what
        assert reply.body["reason"] == "Unauthorized", what
        assert broker.pools(authorization.split(" ", 1)[-1] if authorization else "").status == 401
    assert accepted == {}, f"not refused: {accepted}"
    assert broker_requests(cluster) == {}
    # The same signing key with proper claims is accepted: the refusals above are the claims.
    assert broker.connect(cluster.namespace, POOL, sign()).status == 200
    assert broker.connect(cluster.namespace, POOL, sign(typ="Bearer")).status == 200
    assert broker.connect(cluster.namespace, POOL, sign({"typ": "at+jwt"})).status == 200
    log = broker.log_text()
    assert good not in log, "a token reached the broker's log"
    assert signature not in log, "a token reached the broker's log"


def test_a_token_with_10000_groups_is_refused_with_a_4xx(
    connecting: Connecting, sign: Callable[..., str]
) -> None:
    cluster, brokers, _ = connecting
    entitled_pool(cluster, ["h1"], groups=["/finance-desk"])
    broker = brokers()
    huge = sign(groups=[f"group-{i}" for i in range(10_000)])
    reply = broker.connect(cluster.namespace, POOL, huge)
    assert 400 <= reply.status < 500, reply.status
    assert "Traceback" not in reply.text
    assert broker_requests(cluster) == {}
    assert broker.call("GET", "/healthz").status == 200


def test_the_issuer_rotating_its_key_is_followed_after_one_refetch(
    connecting: Connecting, keycloak: Keycloak
) -> None:
    cluster, brokers, tokens = connecting
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


def test_a_key_removed_from_the_issuer_stops_verifying_after_the_max_age(
    connecting: Connecting, keycloak: Keycloak
) -> None:
    """A key the issuer stops publishing is not trusted for ever: the broker fetches the
    key set again once it is --oidc-keys-max-age-seconds old, and tokens signed with the
    removed key are refused from then on (Keycloak's own keys go on verifying)."""
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1"], users=["alice", "bob"])
    kid, private = add_realm_key(keycloak, "e2e-removed-key", priority=0)
    broker = brokers("--oidc-keys-max-age-seconds", "2", "--oidc-key-refetch-seconds", "1")
    now = int(time.time())
    claims = {"iss": keycloak.issuer(REALM), "aud": CLIENT, "exp": now + 300, "iat": now}
    signed = jwt.encode(
        {**claims, "preferred_username": "alice"}, private, "RS256", headers={"kid": kid}
    )
    assert broker.connect(cluster.namespace, POOL, signed).status == 200
    keycloak.retire_key(REALM, kid, remove=True)
    assert kid not in {k["kid"] for k in keycloak.jwks(REALM)["keys"]}
    removed = time.monotonic()
    while broker.pools(signed).status == 200:
        assert time.monotonic() - removed < 10, "a removed key still verifies after 10 s"
        time.sleep(0.2)
    refused_after = time.monotonic() - removed
    print(f"a token of the removed key refused {refused_after:.1f} s after the removal")
    assert refused_after < 2 + 3  # the max age, one fetch, the polling
    reply = broker.connect(cluster.namespace, POOL, signed)
    assert_refused(reply, 401, "Unauthorized")
    assert broker.connect(cluster.namespace, POOL, tokens("bob")).status == 200
    assert "no longer published, no longer trusted: ['" + kid in broker.log_text()


def test_a_broker_whose_issuer_differs_by_a_slash_never_gets_ready(
    brokers: Callable[..., BrokerProcess], keycloak: Keycloak
) -> None:
    """Discovery's issuer must be exactly --oidc-issuer: Keycloak's has no trailing slash,
    so a broker told the issuer with one takes no key set (and would take no token)."""
    broker = brokers(issuer=keycloak.issuer(REALM) + "/", ready=False)
    deadline = time.monotonic() + 15
    while "discovery names issuer" not in broker.log_text():
        assert time.monotonic() < deadline, broker.log_tail()
        time.sleep(0.2)
    assert broker.call("GET", "/readyz").status == 503


def test_authorized_parties_and_email_as_the_user(
    connecting: Connecting, sign: Callable[..., str]
) -> None:
    """--oidc-authorized-party: Keycloak's tokens name the client in azp; a broker that
    trusts another client refuses them. --user-claim email: only a verified address."""
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1"], users=["alice", "alice@corp.example"])
    alice = tokens("alice")
    other = brokers("--oidc-authorized-party", "another-portal")
    assert_refused(other.connect(cluster.namespace, POOL, alice), 401, "Unauthorized")
    trusting = brokers(
        "--oidc-authorized-party", "another-portal", "--oidc-authorized-party", CLIENT
    )
    assert trusting.connect(cluster.namespace, POOL, alice).status == 200
    by_email = brokers("--user-claim", "email")
    reply = by_email.pools(alice)  # Keycloak: email_verified true (the realm says so)
    assert reply.status == 200, reply.text
    unverified = sign(email="alice@corp.example", email_verified=False)
    unsaid = sign(email="alice@corp.example")
    for token in (unverified, unsaid):
        assert_refused(by_email.pools(token), 401, "Unauthorized")


def test_groups_are_matched_as_full_paths(connecting: Connecting) -> None:
    """Keycloak sends full group paths: heidi's /contractors/finance-desk does not open a
    pool of /finance-desk (alice's), and a pool naming the bare finance-desk opens to no one."""
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1"], groups=["/finance-desk"])
    entitled_pool(cluster, ["h2"], groups=["finance-desk"], name="bare")
    entitled_pool(cluster, ["h3"], groups=["/contractors/finance-desk"], name="contractors")
    broker = brokers()
    alice, heidi = tokens("alice"), tokens("heidi")
    assert broker.connect(cluster.namespace, POOL, alice).status == 200
    assert_refused(broker.connect(cluster.namespace, POOL, heidi), 404, "PoolNotFound")
    assert {p["name"] for p in broker.pools(alice).body["pools"]} == {POOL}
    assert {p["name"] for p in broker.pools(heidi).body["pools"]} == {"contractors"}
    assert broker.connect(cluster.namespace, "contractors", heidi).status == 200


def key_fetches(broker: BrokerProcess) -> int:
    lines = [
        line
        for line in broker.metrics().splitlines()
        if line.startswith("hostpool_broker_issuer_key_fetches_total{")
    ]
    assert lines, "no hostpool_broker_issuer_key_fetches_total"
    return sum(int(float(line.split()[-1])) for line in lines)


# ---------------------------------------------------------------------------------------
# bad input


def test_bad_input_gets_a_clear_4xx_and_creates_nothing(connecting: Connecting) -> None:
    cluster, brokers, tokens = connecting
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


def test_a_user_past_the_rate_limit_gets_429(connecting: Connecting) -> None:
    cluster, brokers, tokens = connecting
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
# TLS


def test_the_broker_serves_https_with_the_certificate_it_is_given(
    connecting: Connecting, tmp_path: Path
) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1"], users=["alice"])
    cert_file, key_file, _ = self_signed("127.0.0.1", tmp_path)
    trust = ssl.create_default_context(cafile=str(cert_file))
    broker = brokers("--tls-cert", str(cert_file), "--tls-key", str(key_file), trust=trust)
    assert broker.url.startswith("https://")
    reply = broker.connect(cluster.namespace, POOL, tokens("alice"))
    assert reply.status == 200, reply.text
    # Plain HTTP is not served on that port.
    plain = urllib.request.Request(f"http://127.0.0.1:{broker.port}/healthz")
    with pytest.raises((ConnectionError, urllib.error.URLError, http.client.HTTPException)):
        urllib.request.urlopen(plain, timeout=10)
