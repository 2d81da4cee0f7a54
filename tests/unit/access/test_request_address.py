"""A request placed before its host had an address (the host's agent had not reported yet)
takes the host's address as the operator now writes it (status.address): the operator writes
a request's address once, at placement, and the user's connects said HostAddressUnknown
until the session ended. Found by `make bench-relay-flood`, which connected right after the
host's agent started."""

from __future__ import annotations

from hostpool_operator.access.connect import Caller, answer
from hostpool_operator.access.views import addressed
from support.access_views import host_view, pool_view, request_view

ALICE = Caller("alice", frozenset())


def test_a_request_placed_without_an_address_takes_its_hosts() -> None:
    placed = request_view(phase="Assigned", host="h1")
    before = answer(placed, pool_view(["alice"]), ALICE, reused=True)
    assert (before.status, before.reason) == (503, "HostAddressUnknown")
    hosts = {("ns", "h1"): host_view("h1", status={"address": "10.0.0.7"})}
    now = addressed(placed, hosts)
    assert now.address == "10.0.0.7"
    after = answer(now, pool_view(["alice"]), ALICE, reused=True)
    assert after.status == 200
    assert after.body["address"] == "10.0.0.7"


def test_the_requests_own_address_wins_and_nothing_is_made_up() -> None:
    hosts = {
        ("ns", "h1"): host_view("h1", status={"address": "10.0.0.7"}),
        ("ns", "h2"): host_view("h2", status={"address": "not an address!"}),
    }
    own = request_view(phase="Assigned", host="h1", address="10.0.0.9")
    assert addressed(own, hosts) is own
    waiting = request_view(phase="Pending")
    assert addressed(waiting, hosts) is waiting
    assert addressed(request_view(phase="Assigned", host="h2"), hosts).address is None
    assert addressed(request_view(phase="Assigned", host="h3"), hosts).address is None
