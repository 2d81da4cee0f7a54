"""Two replicas of the broker, one cluster: what must hold once holds across them.

A browser-desktop ticket is good once whichever replica takes it (issue 49, item 7: within
its 30 s it was good once on each replica). The relay's host here publishes no RDP
certificate, so a taken ticket ends at once in ``HostNotTrusted`` (502, no connection
tried), and a refused one in a 403 before that.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from hostpool_operator.access.tickets import read, ticket_key
from hostpool_operator.broker.relay.ticket_ledger import record_name
from support.broker_helpers import POOL, BrokerProcess, Connecting, entitled_pool
from support.ports import free_port
from support.web_desktop import RelayAnswer, metric, try_relay, web_client_or_stop


def relay_status(answer: RelayAnswer) -> int | None:
    """The HTTP status the relay's RDCleanPath answer carries (None: no error)."""
    assert answer.status == 101, answer
    assert answer.pdu is not None
    return answer.pdu.error.http_status if answer.pdu.error is not None else None


def relays(broker: BrokerProcess, outcome: str) -> float:
    url = f"http://127.0.0.1:{broker.metrics_port}"
    return metric(url, "hostpool_broker_web_relays_total", f'outcome="{outcome}"')


def test_a_ticket_is_good_once_across_replicas(connecting: Connecting, tmp_path: Path) -> None:
    cluster, brokers, tokens = connecting
    client_dir = web_client_or_stop()
    port = free_port()  # nothing listens there either
    entitled_pool(cluster, ["h1"], users=["alice"], connection={"web": True, "port": port})
    cluster.patch("SessionHost", "h1", {"spec": {"address": "127.0.0.1"}})
    secret = tmp_path / "ticket-secret"
    secret.write_text(secrets.token_urlsafe(48))
    args = ("--web-client-dir", str(client_dir), "--ticket-secret-file", str(secret))
    first, second = brokers(*args), brokers(*args)
    token = tokens("alice")
    auth = {"Authorization": f"Bearer {token}"}
    base = f"/v1/namespaces/{cluster.namespace}/pools/{POOL}"
    placed = first.connect(cluster.namespace, POOL, token)
    assert placed.status == 200, placed.text

    def ticket_from(broker: BrokerProcess) -> str:
        answer = broker.call("POST", f"{base}/session/web-ticket", token=token)
        assert answer.status == 200, answer.text
        return str(answer.body["ticket"])

    def relay(broker: BrokerProcess, ticket: str) -> int | None:
        url = f"ws://127.0.0.1:{broker.port}{base}/session/web"
        return relay_status(try_relay(url, ticket, f"127.0.0.1:{port}", auth))

    # Taken on the first replica (it gets as far as the host's pin), refused on the second.
    ticket = ticket_from(first)
    assert relay(first, ticket) == 502
    assert relays(first, "HostNotTrusted") == 1
    assert relay(second, ticket) == 403
    assert relays(second, "TicketUsed") == 1
    assert relays(second, "HostNotTrusted") == 0
    # The other way round, and on the same replica again: once.
    other = ticket_from(first)
    assert relay(second, other) == 502
    assert relay(first, other) == 403
    assert relay(second, other) == 403
    assert relays(first, "TicketUsed") == 1
    assert relays(second, "TicketUsed") == 2

    # The record: named by the ticket's hash, owned by alice's request (collected with it).
    taken = read(ticket_key(secret.read_text().encode()), ticket, 0)
    record = cluster.kube.call(
        "GET", f"/api/v1/namespaces/{cluster.namespace}/configmaps/{record_name(taken)}"
    )
    (owner,) = record["metadata"]["ownerReferences"]
    request = cluster.get("SessionRequest", taken.request)
    assert (owner["kind"], owner["uid"]) == ("SessionRequest", request["metadata"]["uid"])
    assert taken.id not in str(record)
    for broker in (first, second):
        assert not broker.problems(), broker.log_tail()

    # Issue 50, item 6: a replica that does not serve the browser's client does not offer
    # the pool's desktop in the browser (its page's button would end in a 404).
    listed = first.pools(token).body["pools"]
    assert [p["web"] for p in listed] == [True]
    without = brokers()
    assert [p["web"] for p in without.pools(token).body["pools"]] == [False]
