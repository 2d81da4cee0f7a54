"""A personal host's files never reach another user: the pure rule (``data_step``), the
placement that follows it, and the pool's placement pass fed with API-shaped hosts.

A host whose workload the operator made holds its user's files. Once the host's user
changes (an unassign, an assign over it, a host taken back), those files are deleted before
anyone else is given it; with ``spec.keepData`` they are kept, and the host with them, for
that user alone. The old rule gave an unassigned host, files and all, to the next user.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.api import PersonalAssignment, Reason
from hostpool_operator.api.vocabulary import DATA_OF_ANNOTATION
from hostpool_operator.engine.balancer_view import Placement
from hostpool_operator.engine.personal import (
    DataStep,
    HostData,
    PersonalHost,
    PersonalPlacement,
    data_condition,
    data_step,
    place_personal,
)
from hostpool_operator.engine.records import HostRecord
from support.state_builders import POOL, T0, Obj, Pool, host_obj, metadata

AUTO = PersonalAssignment.AUTOMATIC
DIRECT = PersonalAssignment.DIRECT

# ------------------------------------------------------------------ the rule


def d(user: str | None, data_of: str | None, *, keep: bool = False, sessions: int = 0) -> HostData:
    return HostData("h1", user, data_of, keep=keep, sessions=sessions)


@pytest.mark.parametrize(
    ("host", "step"),
    [
        pytest.param(d(None, None), DataStep.NONE, id="free-and-empty"),
        pytest.param(d("alice", "alice"), DataStep.NONE, id="her-files-on-her-host"),
        pytest.param(d("alice", None), DataStep.RECORD, id="new-user-files-written-first"),
        pytest.param(d(None, "alice"), DataStep.DELETE, id="unassigned"),
        pytest.param(d("bob", "alice"), DataStep.DELETE, id="given-to-another-directly"),
        pytest.param(d(None, "alice", sessions=1), DataStep.DELETE_WHEN_EMPTY, id="in-use"),
        pytest.param(d(None, "alice", keep=True), DataStep.KEEP, id="unassign-keep-data"),
        pytest.param(d("bob", "alice", keep=True), DataStep.REFUSE, id="kept-then-given"),
        pytest.param(d("alice", "alice", keep=True), DataStep.NONE, id="kept-and-hers-again"),
    ],
)
def test_what_is_done_with_a_hosts_files(host: HostData, step: DataStep) -> None:
    assert data_step(host) is step


def test_a_deletion_under_way_is_finished_whatever_the_spec_says_meanwhile() -> None:
    """Assigned back to alice mid-deletion: her claims are going and cannot be called back;
    the host is held until they are gone, and she gets it with new, empty ones."""
    host = HostData("h1", "alice", "alice", deleting=True)
    assert data_step(host) is DataStep.DELETE


def test_the_host_says_why_it_is_given_to_nobody() -> None:
    assert data_condition(d("alice", "alice")) is None
    assert data_condition(d("alice", None)) is None  # a moment's write: nothing to say
    reason, message = data_condition(d(None, "alice")) or ("", "")
    assert reason == "DeletingData"
    assert "alice's files" in message
    assert "before anyone else is given it" in message
    reason, message = data_condition(d(None, "alice", sessions=2)) or ("", "")
    assert reason == "DeletingData"
    assert "2 session(s)" in message
    reason, message = data_condition(d(None, "alice", keep=True)) or ("", "")
    assert reason == "DataKept"
    assert "only alice may be given it" in message
    reason, message = data_condition(d("bob", "alice", keep=True)) or ("", "")
    assert reason == "DataKept"
    assert "bob is not placed here" in message


# ------------------------------------------------------------------ placement


def h(
    name: str,
    user: str | None = None,
    data_of: str | None = None,
    *,
    keep: bool = False,
    open_: bool = True,
    sessions: int = 0,
) -> PersonalHost:
    step = data_step(HostData(name, user, data_of, keep=keep, sessions=sessions))
    return PersonalHost(name, user, open_, sessions=sessions, data=step, data_of=data_of)


def placed(host: str, *, claim: bool = False) -> PersonalPlacement:
    return PersonalPlacement(Placement(host, Reason.PERSONAL), claim=claim)


def waits(reason: Reason) -> PersonalPlacement:
    return PersonalPlacement(Placement(None, reason))


def place(user: str, hosts: list[PersonalHost], **kw: Any) -> PersonalPlacement:
    return place_personal(user, hosts, kw.pop("assignment", AUTO), claims={}, **kw)


def test_an_unassigned_host_with_alices_files_is_not_bobs() -> None:
    """The reported bug: the first free host was alice's, files and all."""
    assert place("bob", [h("a", None, "alice"), h("b")]) == placed("b", claim=True)
    # The only host: bob waits for it to be emptied, which comes without anyone acting.
    assert place("bob", [h("a", None, "alice")]) == waits(Reason.HOSTS_STARTING)
    # Her session still on it: nobody else's either, and nothing is deleted under it.
    assert place("bob", [h("a", None, "alice", sessions=1)]) == waits(Reason.NO_HOST_ASSIGNED)


def test_nor_alices_own_until_the_deletion_she_was_unassigned_for_is_done() -> None:
    assert place("alice", [h("a", None, "alice")]) == waits(Reason.HOSTS_STARTING)


def test_a_host_kept_for_alice_is_hers_alone_and_hers_first() -> None:
    kept = h("z", None, "alice", keep=True)
    assert place("bob", [kept]) == waits(Reason.NO_HOST_ASSIGNED)
    assert place("bob", [kept], can_add=True) == waits(Reason.HOSTS_STARTING)
    # alice's own files before a free host earlier in query order.
    assert place("alice", [h("a"), kept]) == placed("z", claim=True)
    # In a Direct pool only an administrator gives it back.
    assert place("alice", [kept], assignment=DIRECT) == waits(Reason.NO_HOST_ASSIGNED)


def test_bob_given_a_host_keeping_alices_files_is_not_placed_there() -> None:
    refused = h("a", "bob", "alice", keep=True)
    assert place("bob", [refused, h("b")]) == waits(Reason.NO_ELIGIBLE_HOST)  # no second host


def test_bob_given_alices_host_waits_for_her_files_to_go() -> None:
    assert place("bob", [h("a", "bob", "alice"), h("b")]) == waits(Reason.HOSTS_STARTING)


def test_a_new_user_waits_until_the_files_are_written_as_theirs() -> None:
    assert place("alice", [h("a", "alice", None)]) == waits(Reason.HOSTS_STARTING)
    assert place("alice", [h("a", "alice", "alice")]) == placed("a")


USERS = ["alice", "bob", "carol"]
hosts_st = st.lists(
    st.tuples(
        st.sampled_from([None, *USERS]),
        st.sampled_from([None, *USERS]),
        st.booleans(),
        st.integers(0, 1),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)


@given(hosts_st, st.sampled_from(USERS), st.booleans(), st.sampled_from([AUTO, DIRECT]))
def test_no_user_is_ever_placed_on_another_users_files(
    specs: list[tuple[str | None, str | None, bool, int, bool]],
    user: str,
    can_add: bool,
    assignment: PersonalAssignment,
) -> None:
    hosts = [
        h(f"h{i}", owner, data_of, keep=keep, sessions=sessions, open_=open_)
        for i, (owner, data_of, keep, sessions, open_) in enumerate(specs)
    ]
    answer = place(user, hosts, can_add=can_add, assignment=assignment)
    if answer.placement.host is None:
        return
    host = next(x for x in hosts if x.name == answer.placement.host)
    # Files written as theirs, or nobody's (the claim writes them as theirs at once), or
    # theirs kept for them; never anyone else's.
    assert host.data_of in (None, user), (host, user)
    assert host.data in (DataStep.NONE, DataStep.KEEP)


# ------------------------------------------------------------------ the pool's state

MANAGED = {"hostpool.io/managed-by": "hostpool-operator", "hostpool.io/pool": POOL}
DESKS: Obj = {
    "metadata": metadata(POOL),
    "spec": {
        "type": "Personal",
        "scaling": {
            "maxHosts": 2,
            "hostTemplate": {"workload": {"apiVersion": "v1", "kind": "Pod", "spec": {}}},
        },
    },
}


def desk(name: str, data_of: str | None = None, **spec: Any) -> HostRecord:
    ref = {"apiVersion": "v1", "kind": "Pod", "name": name}
    obj = host_obj(name, labels=MANAGED, workloadRef=ref, **spec)
    if data_of is not None:
        obj["metadata"]["annotations"] = {DATA_OF_ANNOTATION: data_of}
    return HostRecord.of(obj)


def test_the_pool_reads_each_hosts_files_from_what_it_observed() -> None:
    pool = Pool(DESKS)
    state = pool.state
    state.put_host(desk("h1", "alice"), T0)
    state.put_host(desk("h2", "carol", keepData=True), T0)
    state.put_host(desk("h3", assignedUser="dave"), T0)
    assert [state.personal.data_step(n) for n in ("h1", "h2", "h3")] == [
        DataStep.DELETE,
        DataStep.KEEP,
        DataStep.RECORD,
    ]
    assert state.personal.kept() == {"h2": "carol"}
    # A claim being written (it writes the user and data-of at once) counts as written.
    state.personal.claims["h3"] = "dave"
    assert state.personal.data_step("h3") is DataStep.NONE
    # A deletion under way holds the host whatever the spec says meanwhile.
    state.personal.deleting.add("h1")
    state.put_host(desk("h1", "alice", assignedUser="alice"), T0)
    assert state.personal.data_step("h1") is DataStep.DELETE
    state.personal.deleting.discard("h1")
    assert state.personal.data_step("h1") is DataStep.NONE
    # The host gone: nothing of it is kept.
    state.personal.deleting.add("h1")
    state.drop_host("h1")
    assert "h1" not in state.personal.deleting


def test_a_pooled_pools_hosts_have_no_files_to_look_after() -> None:
    pooled = {**DESKS, "spec": {**DESKS["spec"], "type": "Pooled"}}
    pool = Pool(pooled)
    pool.state.put_host(desk("h1", "alice"), T0)
    assert pool.state.personal.host_data(pool.state.hosts["h1"]) is None
    assert pool.state.personal.data_step("h1") is DataStep.NONE
