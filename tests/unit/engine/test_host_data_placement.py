"""A personal host's files never reach another user, through the operator's placement pass:
PoolState fed with API-shaped hosts (the annotation ``hostpool.io/data-of`` the operator
writes, ``spec.keepData`` the administrator's ``unassign --keep-data`` writes), as the
controller feeds it, and the intents it gives.

Only the objects and the intents: the same test runs against the rule before it existed,
where bob was given alice's host, files and all (the reported bug).
"""

from __future__ import annotations

from typing import Any

from hostpool_operator.api import Reason
from hostpool_operator.engine.records import HostRecord
from hostpool_operator.engine.workloads import WorkloadRecord
from hostpool_operator.scaling import pool as pool_scaling
from support.state_builders import POOL, T0, Obj, Pool, host_obj, metadata, summary

#: The contract's name (api.vocabulary.DATA_OF_ANNOTATION), spelled out.
DATA_OF = "hostpool.io/data-of"
POD_TEMPLATE: Obj = {
    "apiVersion": "v1",
    "kind": "Pod",
    "spec": {"containers": [{"name": "desktop", "image": "xrdp"}]},
}
MANAGED = {"hostpool.io/managed-by": "hostpool-operator", "hostpool.io/pool": POOL}


def desks(max_hosts: int = 1, **personal: Any) -> Obj:
    spec: Obj = {
        "type": "Personal",
        "scaling": {"maxHosts": max_hosts, "hostTemplate": {"workload": POD_TEMPLATE}},
    }
    if personal:
        spec["personal"] = personal
    return {"metadata": metadata(POOL), "spec": spec}


def desk(name: str, *, data_of: str | None = None, created: int = 0, **spec: Any) -> Obj:
    """A host the operator made, with its Pod."""
    ref = {"apiVersion": "v1", "kind": "Pod", "name": name}
    obj = host_obj(name, created=created, labels=MANAGED, workloadRef=ref, **spec)
    if data_of is not None:
        obj["metadata"]["annotations"] = {DATA_OF: data_of}
    return obj


def running(pool: Pool, host: str) -> None:
    """The host's Pod is observed Ready."""
    meta = metadata(host, uid=f"pod-{host}")
    meta["ownerReferences"] = [
        {"kind": "SessionHost", "name": host, "uid": f"uid-{host}", "controller": True}
    ]
    pod = {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    pool.state.observe_workload(host, WorkloadRecord.of(pod, "Pod"), known=True, now=T0)


def put(pool: Pool, obj: Obj) -> None:
    pool.state.put_host(HostRecord.of(obj), T0)
    pool.state.capacity_changed = True


def test_bob_never_gets_the_host_alice_was_unassigned_from() -> None:
    """alice's host unassigned, its data-of still naming her: bob's first connect waits
    (the host is being emptied: on its way), until the operator says her files are gone;
    then it is his."""
    pool = Pool(desks(), [desk("h1", data_of="alice")])
    running(pool, "h1")
    pool.arrive("r-bob", "bob")
    assert summary(pool.place()) == [("wait", "r-bob", Reason.HOSTS_STARTING.value, False)]
    # Done: the annotation is gone, a new (empty) Pod Ready.
    put(pool, desk("h1"))
    running(pool, "h1")
    assert summary(pool.place()) == [("assign", "r-bob", "h1", True)]


def test_nor_does_alice_herself_before_the_deletion_she_was_unassigned_for() -> None:
    pool = Pool(desks(), [desk("h1", data_of="alice")])
    running(pool, "h1")
    pool.arrive("r-alice", "alice")
    assert summary(pool.place()) == [("wait", "r-alice", Reason.HOSTS_STARTING.value, False)]


def test_a_host_kept_for_alice_goes_to_her_alone_and_is_not_spare_capacity() -> None:
    pool = Pool(desks(max_hosts=2), [desk("h1", data_of="alice", keepData=True)])
    running(pool, "h1")
    pool.arrive("r-bob", "bob")
    # Not his; and scaling adds him a host of his own, as for a pool with none free.
    assert summary(pool.place()) == [("wait", "r-bob", Reason.HOSTS_STARTING.value, False)]
    (kept,) = pool_scaling.scale_hosts(pool.state, T0)
    assert kept.sessions >= 1  # as an assigned host: never spare, never removed
    decision = pool_scaling.decide(pool.state, T0)
    assert decision is not None
    assert decision.add == 1
    assert decision.remove == []
    pool.arrive("r-alice", "alice")
    assert summary(pool.place()) == [("assign", "r-alice", "h1", True)]


def test_alice_gets_her_kept_files_before_an_earlier_free_host() -> None:
    pool = Pool(
        desks(max_hosts=2),
        [desk("free", created=1), desk("hers", created=2, data_of="alice", keepData=True)],
    )
    running(pool, "free")
    running(pool, "hers")
    pool.arrive("r-alice", "alice")
    assert summary(pool.place()) == [("assign", "r-alice", "hers", True)]


def test_bob_assigned_over_alices_kept_files_is_not_placed_there() -> None:
    host = desk("h1", data_of="alice", keepData=True, assignedUser="bob")
    pool = Pool(desks(max_hosts=2), [host, desk("h2", created=1)])
    running(pool, "h1")
    running(pool, "h2")
    pool.arrive("r-bob", "bob")
    assert summary(pool.place()) == [("wait", "r-bob", Reason.NO_ELIGIBLE_HOST.value, False)]


def test_bob_assigned_alices_host_directly_waits_for_her_files_to_go() -> None:
    pool = Pool(desks(), [desk("h1", data_of="alice", assignedUser="bob")])
    running(pool, "h1")
    pool.arrive("r-bob", "bob")
    assert summary(pool.place()) == [("wait", "r-bob", Reason.HOSTS_STARTING.value, False)]


def test_an_administrators_assign_is_written_as_her_files_before_she_is_placed() -> None:
    pool = Pool(desks(assignment="Direct"), [desk("h1", assignedUser="alice")])
    running(pool, "h1")
    pool.arrive("r", "alice")
    assert summary(pool.place()) == [("wait", "r", Reason.HOSTS_STARTING.value, False)]
    put(pool, desk("h1", data_of="alice", assignedUser="alice"))
    assert summary(pool.place()) == [("assign", "r", "h1", False)]


def test_a_claim_counts_as_written_files_and_all() -> None:
    """An Automatic claim writes the user and whose the files are in one write: her second
    tab in the same pass goes to the same host, with no wait for the watch. Its assignment
    claims too: it is written once the host names her (the first claim's write, or its
    own), never on the strength of a claim that may yet fail."""
    pool = Pool(desks(), [desk("h1")])
    running(pool, "h1")
    pool.arrive("r-1", "alice")
    pool.arrive("r-2", "alice")
    assert summary(pool.place()) == [("assign", "r-1", "h1", True), ("assign", "r-2", "h1", True)]


def test_hosts_without_a_workload_the_operator_made_are_given_as_before() -> None:
    """Another's machine (no workloadRef, not the operator's): its files are not the
    operator's to delete, and an unassigned one is given as before."""
    rds = host_obj("rds")
    rds["metadata"]["annotations"] = {DATA_OF: "alice"}
    pool = Pool(desks(), [rds])
    pool.arrive("r-bob", "bob")
    assert summary(pool.place()) == [("assign", "r-bob", "rds", True)]
