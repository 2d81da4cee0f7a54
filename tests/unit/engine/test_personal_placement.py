"""Personal pools through the operator's placement pass: PoolState fed with API-shaped
objects, as the controller feeds it, and the intents it gives.

A user goes to their own host, claims one unassigned host (the claim is an Assign that
writes ``spec.assignedUser`` first), waits ``NoHostAssigned`` in a Direct pool until a host
is theirs, and two first connects of one user in one pass take one host.
"""

from __future__ import annotations

from typing import Any

from hostpool_operator.api import Reason
from hostpool_operator.engine.placement import Assign
from hostpool_operator.engine.records import HostRecord
from support.state_builders import POOL, T0, Obj, Pool, host_obj, metadata, summary


def personal_pool(**personal: Any) -> Obj:
    spec: Obj = {"type": "Personal"}
    if personal:
        spec["personal"] = personal
    return {"metadata": metadata(POOL), "spec": spec}


def test_own_host_then_claims_in_query_order() -> None:
    pool = Pool(
        personal_pool(),
        [
            host_obj("h3", created=3),
            host_obj("h1", created=1, assignedUser="bob"),
            host_obj("h2", created=2),
        ],
    )
    pool.arrive("r-bob", "bob")
    pool.arrive("r-alice", "alice")
    # A second tab: the same host, no second host; its write waits for the host to name her.
    pool.arrive("r-alice-again", "alice")
    pool.arrive("r-carol", "carol")
    pool.arrive("r-dave", "dave")
    intents = pool.place()
    assert summary(intents) == [
        ("assign", "r-bob", "h1", False),
        ("assign", "r-alice", "h2", True),
        ("assign", "r-alice-again", "h2", True),
        ("assign", "r-carol", "h3", True),
        ("wait", "r-dave", Reason.NO_HOST_ASSIGNED.value, False),
    ]
    # alice's second tab reconnects to the session her first one opened.
    reasons = [i.placement.reason for i in intents if isinstance(i, Assign)]
    assert reasons == [Reason.PERSONAL, Reason.PERSONAL, Reason.RECONNECTED, Reason.PERSONAL]
    assert pool.state.personal.claims == {"h2": "alice", "h3": "carol"}
    # The claims written and seen on the hosts: no longer held as claims.
    pool.state.put_host(HostRecord.of(host_obj("h2", created=2, assignedUser="alice")), T0)
    assert pool.state.personal.claims == {"h3": "carol"}


def test_direct_waits_until_an_admin_assigns() -> None:
    pool = Pool(personal_pool(assignment="Direct"), [host_obj("h1")])
    pool.arrive("r", "alice")
    assert summary(pool.place()) == [("wait", "r", Reason.NO_HOST_ASSIGNED.value, False)]
    pool.state.put_host(HostRecord.of(host_obj("h1", assignedUser="alice")), T0)
    assert summary(pool.place()) == [("assign", "r", "h1", False)]


def test_a_draining_own_host_is_no_reason_to_take_another() -> None:
    pool = Pool(
        personal_pool(),
        [
            host_obj("h1", created=1, assignedUser="alice", drainMode=True),
            host_obj("h2", created=2),
        ],
    )
    pool.arrive("r", "alice")
    assert summary(pool.place()) == [("wait", "r", Reason.NO_ELIGIBLE_HOST.value, False)]


def test_scaling_room_says_hosts_are_starting() -> None:
    spec: Obj = {"type": "Personal", "scaling": {"maxHosts": 2}}
    pool = Pool({"metadata": metadata(POOL), "spec": spec}, [host_obj("h1", assignedUser="bob")])
    pool.arrive("r", "alice")
    assert summary(pool.place()) == [("wait", "r", Reason.HOSTS_STARTING.value, False)]


def test_pooled_pools_keep_balancing() -> None:
    """The same hosts in a Pooled pool: assignedUser means nothing, the balancer places."""
    pool = Pool(
        {
            "metadata": metadata(POOL),
            "spec": {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 5}},
        },
        [host_obj("h1", created=1, assignedUser="bob"), host_obj("h2", created=2)],
    )
    pool.arrive("r", "alice")
    intents = pool.place()
    assert summary(intents) == [("assign", "r", "h1", False)]
    assert isinstance(intents[0], Assign)
    assert intents[0].placement.reason is Reason.NEW_SESSION
