"""The write that gives a personal host to a user on their first connect: it says whose the
host's files are in the same write, and is never made for a host keeping someone else's."""

from __future__ import annotations

from typing import Any

from hostpool_operator.api.vocabulary import DATA_OF_ANNOTATION
from hostpool_operator.controller.pool.request_writer import claim_patch
from hostpool_operator.engine.records import HostRecord
from support.state_builders import POOL, host_obj

MANAGED = {"hostpool.io/managed-by": "hostpool-operator", "hostpool.io/pool": POOL}


def desk(data_of: str | None = None, **spec: Any) -> HostRecord:
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "h1"}
    obj = host_obj("h1", labels=MANAGED, workloadRef=ref, **spec)
    if data_of is not None:
        obj["metadata"]["annotations"] = {DATA_OF_ANNOTATION: data_of}
    return HostRecord.of(obj)


def test_a_fresh_host_is_given_with_its_files_written_as_the_users() -> None:
    assert claim_patch(desk(), "bob") == {
        "spec": {"assignedUser": "bob", "keepData": None},
        "metadata": {"annotations": {DATA_OF_ANNOTATION: "bob"}},
    }


def test_a_host_keeping_alices_files_goes_back_to_her_only_and_is_kept_no_longer() -> None:
    assert claim_patch(desk("alice", keepData=True), "bob") is None
    assert claim_patch(desk("alice"), "bob") is None  # being emptied: nobody's yet
    assert claim_patch(desk("alice", keepData=True), "alice") == {
        "spec": {"assignedUser": "alice", "keepData": None},
        "metadata": {"annotations": {DATA_OF_ANNOTATION: "alice"}},
    }


def test_a_host_without_a_workload_the_operator_made_is_given_as_before() -> None:
    assert claim_patch(HostRecord.of(host_obj("rds")), "bob") == {"spec": {"assignedUser": "bob"}}
