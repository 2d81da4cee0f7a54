"""The rules every algorithm follows, end to end: reconnect, drain mode, session limit changes,
capacity appearing, and the reasons a request waits."""

from __future__ import annotations

from support.cluster import Cluster
from support.conditions import cond_is, condition, host_of, phase, sessions_total, status
from support.kube import Kube
from support.operator_process import OperatorProcess

POOL = "desk"


def test_reconnect_goes_to_the_same_host_even_draining_and_at_the_limit(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 2, hosts=["h1", "h2"])
    cluster.create_request("alice-1", POOL, "alice")
    cluster.create_request("bob-1", POOL, "bob")
    placed = cluster.wait_assigned(["alice-1", "bob-1"])
    assert host_of(placed["alice-1"]) == "h1"
    assert host_of(placed["bob-1"]) == "h1"
    cluster.wait_host_sessions({"h1": 2, "h2": 0})

    # h1 is at the limit (2 of 2): alice's second request still goes there, adding nothing.
    cluster.create_request("alice-2", POOL, "alice")
    again = cluster.wait_request("alice-2", phase_="Assigned", reason="Reconnected")
    assert host_of(again) == "h1"
    assert cond_is(again, "Assigned", "True", "Reconnected"), status(again)
    assert status(again).get("assignedAt")

    # Now h1 is draining too: bob's reconnect goes there; a new user goes to h2.
    cluster.set_drain("h1", True)
    cluster.wait_host("h1", lambda h: cond_is(h, "Available", "False", "Draining"), "Draining")
    cluster.create_request("bob-2", POOL, "bob")
    cluster.create_request("carol-1", POOL, "carol")
    bob = cluster.wait_request("bob-2", phase_="Assigned", reason="Reconnected")
    assert host_of(bob) == "h1"
    carol = cluster.wait_request("carol-1", phase_="Assigned", reason="NewSession")
    assert host_of(carol) == "h2"

    # No second session for either user: h1 still counts 2 sessions, the pool 3.
    cluster.wait_pool(
        POOL, lambda p: (status(p).get("sessions") or {}).get("total") == 3, "3 sessions"
    )
    cluster.wait_host_sessions({"h1": 2, "h2": 1})
    # The first requests are untouched.
    for name in ("alice-1", "bob-1"):
        obj = cluster.request(name)
        assert phase(obj) == "Assigned"
        assert host_of(obj) == "h1"
        assert status(obj)["reason"] == "NewSession"

    # The session ends only when its last request is deleted.
    cluster.delete("SessionRequest", "alice-1")
    cluster.wait_pool(
        POOL, lambda p: (status(p).get("sessions") or {}).get("total") == 3, "still 3 sessions"
    )
    assert sessions_total(cluster.host("h1")) == 2
    cluster.delete("SessionRequest", "alice-2")
    cluster.wait_host_sessions({"h1": 1, "h2": 1})


def test_two_requests_of_a_new_user_at_once_share_one_session(
    kube: Kube, namespace: str, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    hosts = [f"h{i}" for i in range(6)]
    cluster.setup_pool(POOL, "BreadthFirst", hosts=hosts)
    pairs = [(f"{user}-{k}", POOL, user) for user in ("ann", "ben", "cid") for k in (1, 2)]
    client = Kube.connect(kube.kubeconfig, pool_size=32)
    try:
        Cluster(client, namespace).create_requests_concurrently(pairs, threads=6)
    finally:
        client.close()
    placed = cluster.wait_assigned([name for name, _, _ in pairs])
    for user in ("ann", "ben", "cid"):
        first, second = status(placed[f"{user}-1"]), status(placed[f"{user}-2"])
        assert first["host"] == second["host"], (user, first, second)
        assert sorted([first["reason"], second["reason"]]) == ["NewSession", "Reconnected"]
    cluster.wait_pool(
        POOL, lambda p: (status(p).get("sessions") or {}).get("total") == 3, "3 sessions"
    )


def test_a_request_recreated_under_the_same_name_is_placed_again(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 1, hosts=["h1", "h2"])
    cluster.create_request("same", POOL, "alice")
    assert host_of(cluster.wait_request("same", phase_="Assigned")) == "h1"
    cluster.delete("SessionRequest", "same")
    cluster.wait(lambda: "same" not in cluster.requests(), "the request to be gone")
    cluster.create_request("other", POOL, "bob")
    assert host_of(cluster.wait_request("other", phase_="Assigned")) == "h1"
    cluster.create_request("same", POOL, "carol")
    recreated = cluster.wait_request("same", phase_="Assigned", reason="NewSession")
    assert host_of(recreated) == "h2"
    cluster.wait_host_sessions({"h1": 1, "h2": 1})


def test_a_draining_host_takes_no_new_sessions_until_undrained(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 2, hosts=["h1", "h2"], host_spec={"drainMode": True})
    cluster.set_drain("h2", False)
    cluster.wait_host("h2", lambda h: cond_is(h, "Available", "True"), "Available=True")
    h1 = cluster.wait_host(
        "h1", lambda h: cond_is(h, "Available", "False", "Draining"), "Available=False/Draining"
    )
    assert condition(h1, "Available") is not None

    for i in range(4):
        cluster.create_request(f"r{i}", POOL, f"u{i}")
    placed = cluster.wait_assigned(["r0", "r1"])
    assert {host_of(placed["r0"]), host_of(placed["r1"])} == {"h2"}
    for name in ("r2", "r3"):
        waiting = cluster.wait_request(name, phase_="Pending", reason="PoolSaturated")
        assert host_of(waiting) is None
    cluster.wait_pool(
        POOL,
        lambda p: (
            (status(p).get("hosts") or {}).get("draining") == 1
            and (status(p).get("capacity") or {}).get("free") == 0
            and status(p).get("pendingRequests") == 2
        ),
        "1 draining host, 0 free, 2 pending",
    )
    # Capacity counts hosts not in drain mode only.
    assert status(cluster.pool(POOL))["capacity"]["total"] == 2
    assert sessions_total(cluster.host("h1")) == 0

    cluster.set_drain("h1", False)
    placed = cluster.wait_assigned(["r2", "r3"], timeout=10)
    assert host_of(placed["r2"]) == "h1"
    assert host_of(placed["r3"]) == "h1"
    cluster.wait_host(
        "h1",
        lambda h: (
            sessions_total(h) == 2 and cond_is(h, "Available", "False", "SessionLimitReached")
        ),
        "2 sessions, SessionLimitReached",
    )


def test_lowering_the_limit_evicts_nobody(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 3, hosts=["h1", "h2"])
    for i in range(3):
        cluster.create_request(f"old{i}", POOL, f"old{i}")
    before = cluster.wait_assigned([f"old{i}" for i in range(3)])
    assert {host_of(before[f"old{i}"]) for i in range(3)} == {"h1"}

    pool = cluster.set_limit(POOL, 2)
    generation = pool["metadata"]["generation"]
    cluster.wait_pool(
        POOL,
        lambda p: (
            status(p).get("observedGeneration") == generation
            and (status(p).get("capacity") or {}).get("total") == 4
        ),
        f"observedGeneration {generation}, capacity 4",
    )
    h1 = cluster.wait_host(
        "h1",
        lambda h: (
            sessions_total(h) == 3 and cond_is(h, "Available", "False", "SessionLimitReached")
        ),
        "3 sessions over the new limit of 2, SessionLimitReached",
    )
    assert status(h1)["sessions"]["total"] == 3

    for i in range(3):
        cluster.create_request(f"new{i}", POOL, f"new{i}")
    placed = cluster.wait_assigned(["new0", "new1"])
    assert host_of(placed["new0"]) == "h2"
    assert host_of(placed["new1"]) == "h2"
    cluster.wait_request("new2", phase_="Pending", reason="PoolSaturated")

    # Nobody was evicted: the old requests are exactly as they were.
    after = cluster.requests()
    for i in range(3):
        name = f"old{i}"
        assert phase(after[name]) == "Assigned", status(after[name])
        assert host_of(after[name]) == "h1"
        assert status(after[name])["assignedAt"] == status(before[name])["assignedAt"]
    cluster.wait_host_sessions({"h1": 3, "h2": 2})


def test_raising_the_limit_or_adding_a_host_places_waiting_requests(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 1, hosts=["h1"])
    for i in range(4):
        cluster.create_request(f"r{i}", POOL, f"u{i}")
    cluster.wait_assigned(["r0"])
    for i in (1, 2, 3):
        cluster.wait_request(f"r{i}", phase_="Pending", reason="PoolSaturated")
    cluster.wait_pool(POOL, lambda p: cond_is(p, "Saturated", "True"), "Saturated=True")

    cluster.set_limit(POOL, 2)
    placed = cluster.wait_request("r1", phase_="Assigned", host="h1", timeout=10)
    assert status(placed)["reason"] == "NewSession"
    for i in (2, 3):
        cluster.wait_request(f"r{i}", phase_="Pending", reason="PoolSaturated")

    cluster.create_host("h2", POOL)
    placed_all = cluster.wait_assigned(["r2", "r3"], timeout=10)
    assert host_of(placed_all["r2"]) == "h2"
    assert host_of(placed_all["r3"]) == "h2"
    cluster.wait_host_sessions({"h1": 2, "h2": 2})
    cluster.wait_pool(
        POOL,
        lambda p: (
            status(p).get("pendingRequests") == 0
            and (status(p).get("sessions") or {}).get("total") == 4
        ),
        "no pending request, 4 sessions",
    )


def test_waiting_requests_are_served_in_arrival_order(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 1, hosts=["h1"])
    cluster.create_request("first", POOL, "first")
    cluster.wait_assigned(["first"])
    waiting = [f"w{i}" for i in range(5)]
    for name in waiting:
        cluster.create_request(name, POOL, name)
        # One at a time, so arrival order is creation order.
        cluster.wait_request(name, phase_="Pending", reason="PoolSaturated")

    holder = "first"
    for name in waiting:
        cluster.delete("SessionRequest", holder)
        cluster.wait_request(name, phase_="Assigned", host="h1", timeout=10)
        for later in waiting[waiting.index(name) + 1 :]:
            assert phase(cluster.request(later)) == "Pending", later
        holder = name


def test_a_request_for_a_missing_pool_waits_and_is_placed_when_the_pool_appears(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.create_request("early", "later", "alice")
    waiting = cluster.wait_request("early", phase_="Pending", reason="PoolNotFound")
    assert cond_is(waiting, "Assigned", "False", "PoolNotFound"), status(waiting)
    assert host_of(waiting) is None

    cluster.create_pool("later", "BreadthFirst")
    cluster.create_host("h1", "later")
    placed = cluster.wait_request("early", phase_="Assigned", host="h1")
    assert status(placed)["reason"] == "NewSession"
    assert cond_is(placed, "Assigned", "True", "NewSession")


def test_no_eligible_host_when_every_host_drains_or_lacks_the_protocol(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    del operator_process
    cluster.setup_pool(
        POOL,
        "BreadthFirst",
        5,
        hosts=["h1", "h2"],
        host_spec={"features": {"protocols": ["RDP", "PCOIP"]}},
    )
    cluster.create_request("blast", POOL, "alice", protocol="BLAST")
    blast = cluster.wait_request("blast", phase_="Pending", reason="NoEligibleHost")
    assert cond_is(blast, "Assigned", "False", "NoEligibleHost"), status(blast)

    cluster.create_request("rdp", POOL, "bob", protocol="RDP")
    rdp = cluster.wait_request("rdp", phase_="Assigned", reason="NewSession")
    assert host_of(rdp) in {"h1", "h2"}

    for host in ("h1", "h2"):
        cluster.set_drain(host, True)
    for host in ("h1", "h2"):
        cluster.wait_host(host, lambda h: cond_is(h, "Available", "False", "Draining"), "Draining")
    cluster.create_request("late", POOL, "carol")
    late = cluster.wait_request("late", phase_="Pending", reason="NoEligibleHost")
    assert cond_is(late, "Assigned", "False", "NoEligibleHost"), status(late)

    # A host with BLAST appears: the BLAST request gets it (so does the waiting one).
    cluster.create_host("h3", POOL)
    assert host_of(cluster.wait_request("blast", phase_="Assigned")) == "h3"
    assert host_of(cluster.wait_request("late", phase_="Assigned")) == "h3"
