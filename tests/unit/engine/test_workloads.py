"""Workload-backed hosts, the pure part: the workload record, the gate a host's workload
puts on new sessions, starting and timed-out hosts, the address in force, the manifests;
and what follows in the pool's state: HostsStarting, HostLost, scaling that counts starting
hosts (one burst never provisions twice)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.api import Reason, Scaling, WorkloadRef, WorkloadTemplate
from hostpool_operator.api.vocabulary import HOST_LABEL
from hostpool_operator.api.workload import VolumeClaimTemplate
from hostpool_operator.engine.balancer_view import Placement
from hostpool_operator.engine.placement import Assign, Wait
from hostpool_operator.engine.records import HostRecord, PoolRecord
from hostpool_operator.engine.status import (
    PoolFacts,
    PoolForHosts,
    host_status,
    pool_status,
    session_counts,
)
from hostpool_operator.engine.workloads import (
    CLIPBOARD_ENV,
    Gate,
    WorkloadRecord,
    claim_manifests,
    host_address,
    resolve,
    workload_manifest,
    workload_state,
)
from hostpool_operator.scaling import pool as pool_scaling
from hostpool_operator.scaling.rules import host_manifest
from support.state_builders import (
    NS,
    POOL,
    T0,
    Pool,
    assigned,
    at,
    host_obj,
    metadata,
    pool_obj,
    request_obj,
)

Obj = dict[str, Any]
MANAGED = {"hostpool.io/managed-by": "hostpool-operator", "hostpool.io/pool": POOL}
POD_TEMPLATE: Obj = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"labels": {"app": "desktop", HOST_LABEL: "spoofed"}},
    "spec": {"containers": [{"name": "desktop", "image": "xrdp"}], "unknownField": {"x": 1}},
}


def ref(name: str, **kw: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "name": name, **kw}


def pod(
    name: str,
    *,
    ready: bool | None = True,
    ip: str | None = "10.0.0.7",
    created: int = 0,
    phase: str = "Running",
    owner_uid: str | None = None,
    uid: str | None = None,
) -> Obj:
    meta = metadata(name, created=created, uid=uid)
    meta["managedFields"] = [{"manager": "kubelet"}]
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {"kind": "SessionHost", "name": name, "uid": owner_uid, "controller": True}
        ]
    status: Obj = {"phase": phase}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    if ip is not None:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def workload_pool(limit: int = 2, timeout: int = 60, **scaling: Any) -> Obj:
    return pool_obj(
        limit,
        scaling={
            "maxHosts": 10,
            "hostReadyTimeoutSeconds": timeout,
            "hostTemplate": {"workload": POD_TEMPLATE},
            **scaling,
        },
    )


def managed_host(name: str, *, created: int = 0) -> Obj:
    return host_obj(name, created=created, labels=MANAGED, workloadRef=ref(name))


def observe(pool: Pool, host: str, obj: Obj | None, now: datetime = T0) -> list[Any]:
    record = None if obj is None else WorkloadRecord.of(obj, "Pod")
    return pool.state.observe_workload(host, record, known=True, now=now)


# --------------------------------------------------------------------------- the record


def test_record_reads_ready_owner_and_address_and_drops_managed_fields() -> None:
    record = WorkloadRecord.of(pod("h1", owner_uid="uid-h1"), "Pod")
    assert record.ready
    assert not record.terminal
    assert record.owner_host_uid == "uid-h1"
    assert record.address(None) == "10.0.0.7"
    assert record.address("metadata.name") == "h1"
    assert "managedFields" not in record.readable["metadata"]


@pytest.mark.parametrize(
    ("ready", "phase", "is_ready", "terminal"),
    [
        (True, "Running", True, False),
        (False, "Running", False, False),
        (None, "Pending", False, False),
        (True, "Failed", False, True),  # a failed pod never serves again, whatever it says
        (False, "Succeeded", False, True),
    ],
)
def test_record_readiness(ready: bool | None, phase: str, is_ready: bool, terminal: bool) -> None:
    record = WorkloadRecord.of(pod("h1", ready=ready, phase=phase), "Pod")
    assert (record.ready, record.terminal) == (is_ready, terminal)


def test_a_workload_being_deleted_is_not_ready() -> None:
    """Its Ready condition lags behind: a pod with a deletionTimestamp takes no session."""
    going = pod("p")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:05Z"
    record = WorkloadRecord.of(going, "Pod")
    assert not record.ready
    assert not record.terminal
    assert WorkloadRecord.of(pod("p"), "Pod").ready


def versioned(version: str | None, *, ready: bool, uid: str = "u1") -> WorkloadRecord:
    obj = pod("p", ready=ready, uid=uid)
    obj["metadata"]["resourceVersion"] = version
    if version is None:
        del obj["metadata"]["resourceVersion"]
    return WorkloadRecord.of(obj, "Pod")


@pytest.mark.parametrize(
    ("answer", "seen", "older"),
    [
        # The create's answer (not Ready) after the watch's Ready version: older, dropped.
        (versioned("10", ready=False), versioned("12", ready=True), True),
        (versioned("12", ready=False), versioned("12", ready=True), False),
        (versioned("13", ready=False), versioned("12", ready=True), False),
        (versioned("10", ready=False), None, False),
        # Another Pod of the same name (made again): never older than the one it replaces.
        (versioned("10", ready=False, uid="u2"), versioned("12", ready=True), False),
        # No comparable version: arrival order decides.
        (versioned(None, ready=False), versioned("12", ready=True), False),
        (versioned("x", ready=False), versioned("12", ready=True), False),
    ],
)
def test_an_answer_older_than_the_watched_version_is_older(
    answer: WorkloadRecord, seen: WorkloadRecord | None, older: bool
) -> None:
    assert answer.older_than(seen) is older


def test_phases_end_only_pods_and_vm_instances() -> None:
    record = WorkloadRecord.of(pod("vm", phase="Failed"), "VirtualMachine")
    assert record.ready
    assert not record.terminal
    instance = WorkloadRecord.of(pod("vmi", phase="Failed"), "VirtualMachineInstance")
    assert instance.terminal


def test_owner_is_only_a_controlling_session_host() -> None:
    obj = pod("h1")
    obj["metadata"]["ownerReferences"] = [
        {"kind": "ReplicaSet", "uid": "rs", "controller": True},
        {"kind": "SessionHost", "uid": "sh", "controller": False},
    ]
    assert WorkloadRecord.of(obj, "Pod").owner_host_uid is None


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("status.podIP", "10.1.2.3"),
        ("status.interfaces.1.ipAddress", "10.9.9.9"),
        ("status.interfaces.2.ipAddress", None),
        ("status.interfaces.x", None),
        ("status.nothing.here", None),
        ("status.port", 3389),
    ],
)
def test_resolve_dotted_paths(path: str, expected: object) -> None:
    obj = {
        "status": {
            "podIP": "10.1.2.3",
            "port": 3389,
            "interfaces": [{"ipAddress": "10.8.8.8"}, {"ipAddress": "10.9.9.9"}],
        }
    }
    assert resolve(obj, path) == expected


@pytest.mark.parametrize(
    "status",
    [
        {"conditions": "Ready"},
        {"conditions": 7},
        {"conditions": [None, "x", {"type": "Ready"}]},
        {"conditions": [{"type": "Ready", "status": True}]},
        "not an object",
    ],
)
def test_a_malformed_status_is_just_not_ready(status: object) -> None:
    """A custom kind's status is whatever its controller wrote: never a crash."""
    obj: Obj = {"metadata": metadata("d1"), "status": status}
    obj["metadata"]["ownerReferences"] = "nonsense"
    record = WorkloadRecord.of(obj, "Desktop")
    assert not record.ready
    assert record.owner_host_uid is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, None),
        ({"ip": "10.0.0.1"}, None),
        (["10.0.0.1"], None),
        ("", None),
        ("a" * 300, "a" * 253),
    ],
)
def test_only_a_string_or_number_is_an_address(value: object, expected: str | None) -> None:
    obj: Obj = {"metadata": metadata("d1"), "status": {"ip": value}}
    assert WorkloadRecord.of(obj, "Desktop").address("status.ip") == expected


# --------------------------------------------------------------------------- the gate


def state_of(
    workload: Obj | None,
    *,
    known: bool = True,
    managed: bool = True,
    host_created: int = 0,
    now: int = 10,
    timeout: float = 60,
) -> Any:
    record = None if workload is None else WorkloadRecord.of(workload, "Pod")
    return workload_state(
        WorkloadRef.model_validate(ref("h1")),
        record,
        known=known,
        managed=managed,
        host_created=at(host_created),
        ready_timeout=timeout,
        now=at(now),
    )


def test_ready_workload_opens_the_gate() -> None:
    state = state_of(pod("h1"))
    assert (state.gate, state.starting, state.timed_out, state.reason) == (
        Gate.OPEN,
        False,
        False,
        "Ready",
    )


def test_not_ready_workload_of_a_new_host_is_starting_until_the_timeout() -> None:
    state = state_of(pod("h1", ready=False), now=59)
    assert (state.gate, state.starting, state.timed_out) == (Gate.NOT_READY, True, False)
    assert state.ready_by == at(60)
    late = state_of(pod("h1", ready=False), now=60)
    assert (late.gate, late.starting, late.timed_out, late.reason) == (
        Gate.NOT_READY,
        False,
        True,
        "StartTimeout",
    )
    assert "counted out" in late.message


def test_a_recreated_workload_starts_its_clock_again() -> None:
    state = state_of(pod("h1", ready=False, created=100), now=150)
    assert state.starting
    assert state.ready_by == at(160)


def test_known_missing_workload_is_not_on_its_way() -> None:
    state = state_of(None, known=True)
    assert (state.gate, state.starting, state.timed_out, state.reason) == (
        Gate.MISSING,
        False,
        False,
        "Missing",
    )


def test_a_workload_not_listed_yet_is_never_called_missing() -> None:
    state = state_of(None, known=False)
    assert (state.gate, state.reason, state.starting) == (Gate.MISSING, "NotObserved", True)


def test_a_users_host_is_never_starting_nor_timed_out() -> None:
    state = state_of(pod("h1", ready=False), managed=False, now=10_000)
    assert (state.gate, state.starting, state.timed_out) == (Gate.NOT_READY, False, False)


def test_an_ended_pod_closes_the_gate_as_terminated() -> None:
    state = state_of(pod("h1", phase="Failed"), managed=False)
    assert (state.gate, state.reason) == (Gate.NOT_READY, "Terminated")


# --------------------------------------------------------------------------- address


INJECTED = "10.6.6.6\r\ndrivestoredirect:s:*\r\nredirectclipboard:i:1"


@pytest.mark.parametrize(
    ("spec_address", "agent", "expected"),
    [
        ("rds.example", {"address": "10.5.5.5"}, "rds.example"),
        # The workload's address is authoritative over what the agent reports.
        (None, {"address": "10.5.5.5"}, "10.0.0.7"),
        (None, {"address": INJECTED}, "10.0.0.7"),
        (None, None, "10.0.0.7"),
        (None, {"address": ""}, "10.0.0.7"),
    ],
)
def test_address_in_force(spec_address: str | None, agent: Obj | None, expected: str) -> None:
    obj = host_obj("h1", workloadRef=ref("h1"))
    if spec_address:
        obj["spec"]["address"] = spec_address
    if agent is not None:
        obj["status"] = {"agent": agent}
    workload = WorkloadRecord.of(pod("h1"), "Pod")
    assert host_address(HostRecord.of(obj), workload) == expected


@pytest.mark.parametrize(
    ("workload_ip", "agent", "expected"),
    [
        # No workload address (yet): the agent's report, when it is an address.
        (None, "10.5.5.5", "10.5.5.5"),
        (None, INJECTED, None),
        (None, "evil.example:443", None),
        # A workload value that is no address is skipped like a missing one.
        ("10.0.0.7\nx:s:y", "10.5.5.5", "10.5.5.5"),
        ("10.0.0.7\nx:s:y", None, None),
        ("fd00::7", "10.5.5.5", "fd00::7"),
    ],
)
def test_only_an_ip_address_or_a_dns_name_is_in_force(
    workload_ip: str | None, agent: str | None, expected: str | None
) -> None:
    obj = host_obj("h1", workloadRef=ref("h1"))
    if agent is not None:
        obj["status"] = {"agent": {"address": agent}}
    workload = pod("h1")
    workload["status"].pop("podIP", None)
    if workload_ip is not None:
        workload["status"]["podIP"] = workload_ip
    assert host_address(HostRecord.of(obj), WorkloadRecord.of(workload, "Pod")) == expected


@pytest.mark.parametrize(
    ("spec_address", "agent", "expected"),
    [
        (None, "10.5.5.5", "10.5.5.5"),
        (None, INJECTED, None),
        # A spec an older CRD let in is refused as a whole: the host has no address.
        (INJECTED, "10.5.5.5", None),
    ],
)
def test_without_a_workload_the_agents_address_is_in_force_when_valid(
    spec_address: str | None, agent: str, expected: str | None
) -> None:
    obj = host_obj("h1") if spec_address is None else host_obj("h1", address=spec_address)
    obj["status"] = {"agent": {"address": agent}}
    assert host_address(HostRecord.of(obj), None) == expected


def test_address_from_the_references_path() -> None:
    obj = host_obj("h1", workloadRef=ref("h1", addressFrom="metadata.name"))
    assert host_address(HostRecord.of(obj), WorkloadRecord.of(pod("h1"), "Pod")) == "h1"
    assert host_address(HostRecord.of(obj), None) is None


# --------------------------------------------------------------------------- manifests


def test_workload_manifest_names_labels_and_owns() -> None:
    template = WorkloadTemplate.model_validate(POD_TEMPLATE)
    manifest = workload_manifest(template, host="p-x7k2p", host_uid="u1", namespace=NS, pool=POOL)
    meta = manifest["metadata"]
    assert (manifest["apiVersion"], manifest["kind"]) == ("v1", "Pod")
    assert (meta["name"], meta["namespace"]) == ("p-x7k2p", NS)
    # The operator's labels win over the template's: a template cannot point a workload at
    # another host.
    assert meta["labels"] == {
        "app": "desktop",
        HOST_LABEL: "p-x7k2p",
        "hostpool.io/pool": POOL,
        "hostpool.io/managed-by": "hostpool-operator",
    }
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "SessionHost",
        "p-x7k2p",
        "u1",
        True,
    )
    assert manifest["spec"] == POD_TEMPLATE["spec"]  # kept as written, unknown fields too


def test_a_pods_containers_get_the_pools_clipboard_and_keep_their_own_env() -> None:
    spec: Obj = {
        "containers": [
            {"name": "desktop", "image": "xrdp", "env": [
                {"name": "TZ", "value": "UTC"},
                {"name": CLIPBOARD_ENV, "value": "Enabled"},  # the template's: the pool's wins
            ]},
            {"name": "sidecar", "image": "x"},
        ],
        "initContainers": [{"name": "setup", "image": "x"}],
    }  # fmt: skip
    template = WorkloadTemplate.model_validate({**POD_TEMPLATE, "spec": spec})
    env = {CLIPBOARD_ENV: "Disabled"}
    made = workload_manifest(template, host="h", host_uid="u", namespace=NS, pool=POOL, env=env)
    desktop, sidecar = made["spec"]["containers"]
    assert desktop["env"] == [
        {"name": "TZ", "value": "UTC"},
        {"name": CLIPBOARD_ENV, "value": "Disabled"},
    ]
    assert sidecar["env"] == [{"name": CLIPBOARD_ENV, "value": "Disabled"}]
    assert made["spec"]["initContainers"] == spec["initContainers"]
    assert spec["containers"][1] == {"name": "sidecar", "image": "x"}  # the template unchanged
    # Another kind (a VirtualMachine) is created as written: it has no containers' env.
    vm = WorkloadTemplate.model_validate(
        {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "spec": {"running": True}}
    )
    made = workload_manifest(vm, host="h", host_uid="u", namespace=NS, pool=POOL, env=env)
    assert made["spec"] == {"running": True}


def test_host_manifest_refers_to_its_workload() -> None:
    scaling = Scaling.model_validate(
        {"hostTemplate": {"workload": {**POD_TEMPLATE, "addressFrom": "status.hostIP"}}}
    )
    manifest = host_manifest(
        scaling.host_template,
        pool=POOL,
        namespace=NS,
        pool_uid="pu",
        labels=MANAGED,
        name="p-abcde",
    )
    assert manifest["metadata"]["name"] == "p-abcde"
    assert "generateName" not in manifest["metadata"]
    assert manifest["spec"]["workloadRef"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p-abcde",
        "addressFrom": "status.hostIP",
    }


def test_host_manifest_without_workload_keeps_generate_name() -> None:
    scaling = Scaling.model_validate({})
    manifest = host_manifest(
        scaling.host_template, pool=POOL, namespace=NS, pool_uid="pu", labels=MANAGED
    )
    assert manifest["metadata"]["generateName"] == f"{POOL}-"
    assert "workloadRef" not in manifest["spec"]


# --------------------------------------------------------------------------- the pool


def test_a_host_takes_sessions_only_once_its_workload_is_ready() -> None:
    pool = Pool(workload_pool(), [managed_host("h1")])
    observe(pool, "h1", pod("h1", ready=False))
    pool.arrive("r1", "alice")
    [intent] = pool.place(at(1))
    assert isinstance(intent, Wait)
    assert intent.reason is Reason.HOSTS_STARTING
    observe(pool, "h1", pod("h1", ready=True), at(2))
    [intent] = pool.place(at(2))
    assert isinstance(intent, Assign)
    assert intent.placement == Placement("h1", Reason.NEW_SESSION)


def test_waiting_says_saturated_when_nothing_is_starting() -> None:
    pool = Pool(workload_pool(timeout=5), [managed_host("h1")])
    observe(pool, "h1", pod("h1", ready=False))
    pool.arrive("r1", "alice")
    [intent] = pool.place(at(10))  # past the ready timeout: not on its way any more
    assert isinstance(intent, Wait)
    # Short of machines, not of eligible hosts: scaling counts it and adds a host.
    assert intent.reason is Reason.POOL_SATURATED


def test_a_drained_pool_still_says_no_eligible_host() -> None:
    pool = Pool(workload_pool(), [host_obj("h1", drainMode=True, workloadRef=ref("h1"))])
    observe(pool, "h1", pod("h1", ready=False))
    pool.arrive("r1", "alice")
    [intent] = pool.place(at(1))
    assert isinstance(intent, Wait)
    assert intent.reason is Reason.NO_ELIGIBLE_HOST


def test_a_users_host_that_is_not_ready_is_not_starting() -> None:
    pool = Pool(workload_pool(), [host_obj("u1", workloadRef=ref("u1"))])
    observe(pool, "u1", pod("u1", ready=False))
    pool.arrive("r1", "alice")
    [intent] = pool.place(at(1))
    assert isinstance(intent, Wait)
    assert intent.reason is not Reason.HOSTS_STARTING


def test_reconnects_follow_the_draining_rules() -> None:
    pool = Pool(workload_pool(), [managed_host("h1"), managed_host("h2")])
    observe(pool, "h1", pod("h1"))
    observe(pool, "h2", pod("h2"))
    pool.session("s1", "alice", "h1")
    observe(pool, "h1", pod("h1", ready=False))  # not Ready, still there
    pool.arrive("again", "alice")
    pool.arrive("new", "bob")
    intents = {i.record.meta.name: i for i in pool.place(at(1))}
    again, new = intents["again"], intents["new"]
    assert isinstance(again, Assign)
    assert again.placement == Placement("h1", Reason.RECONNECTED)
    assert isinstance(new, Assign)
    assert new.placement.host == "h2"


def test_a_lost_workload_ends_the_sessions_on_its_host_only() -> None:
    pool = Pool(workload_pool(), [managed_host("h1"), managed_host("h2")])
    observe(pool, "h1", pod("h1"))
    observe(pool, "h2", pod("h2"))
    pool.session("a", "alice", "h1")
    pool.session("b", "bob", "h1")
    pool.session("c", "carol", "h2")
    lost = observe(pool, "h1", None, at(5))
    assert sorted((r.meta.name, h) for r, h in lost) == [("a", "h1"), ("b", "h1")]
    assert pool.state.ledger.count_on("h1") == 0
    assert pool.state.ledger.count_on("h2") == 1
    assert pool.state.views.balancer is not None
    view = pool.state.views.balancer.host("h1")
    assert view is not None
    assert view.sessions == 0
    assert view.drain_mode  # no workload: closed


def test_an_ended_pod_loses_its_sessions_too() -> None:
    pool = Pool(workload_pool(), [managed_host("h1")])
    observe(pool, "h1", pod("h1"))
    pool.session("a", "alice", "h1")
    lost = observe(pool, "h1", pod("h1", phase="Failed"), at(5))
    assert [r.meta.name for r, _ in lost] == ["a"]


def test_a_workload_not_listed_yet_loses_nothing() -> None:
    pool = Pool(workload_pool(), [managed_host("h1")])
    pool.session("a", "alice", "h1")
    assert pool.state.observe_workload("h1", None, known=False, now=T0) == []
    assert pool.state.ledger.count_on("h1") == 1


def test_a_request_assigned_to_a_host_without_workload_listing_is_kept() -> None:
    # The operator restarted: hosts and requests are listed before the workloads are.
    pool = Pool(workload_pool(), [managed_host("h1")])
    assert pool.put(request_obj("a", "alice", status=assigned("h1"))) is None
    assert pool.state.ledger.count_on("h1") == 1


# --------------------------------------------------------------------------- scaling


def test_starting_hosts_count_as_capacity_on_its_way() -> None:
    pool = Pool(workload_pool(limit=2), [managed_host("h1"), managed_host("h2")])
    observe(pool, "h1", pod("h1", ready=False))
    observe(pool, "h2", pod("h2", ready=False))
    for i in range(7):
        pool.arrive(f"r{i}", f"user{i}")
    pool.place(at(1))
    assert pool_scaling.waiting_for_capacity(pool.state) == 7
    decision = pool_scaling.decide(pool.state, at(1))
    assert decision is not None
    assert decision.add == 2  # 7 sessions at 2 per host: 4 hosts, 2 of them starting


def test_a_timed_out_host_is_counted_out() -> None:
    pool = Pool(workload_pool(limit=2, timeout=30), [managed_host("h1")])
    observe(pool, "h1", pod("h1", ready=False))
    pool.arrive("r1", "alice")
    pool.place(at(1))
    early = pool_scaling.decide(pool.state, at(1))
    assert early is not None
    assert early.add == 0
    pool.state.capacity_changed = True
    pool.place(at(31))
    late = pool_scaling.decide(pool.state, at(31))
    assert late is not None
    assert late.add == 1
    assert pool_scaling.start_deadlines(pool.state, at(1)) == [at(30)]
    assert pool_scaling.start_deadlines(pool.state, at(31)) == []


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(1, 5),
    ready=st.integers(0, 4),
    users=st.integers(1, 30),
    buffer=st.integers(0, 4),
)
def test_one_burst_never_provisions_twice(limit: int, ready: int, users: int, buffer: int) -> None:
    """Scale up for a burst, let the new hosts be starting (not Ready), decide again: nothing
    more is added, and the hosts made are exactly the ones needed."""
    hosts = [managed_host(f"h{i}") for i in range(ready)]
    pool = Pool(workload_pool(limit=limit, bufferSessions=buffer, maxHosts=100), hosts)
    for i in range(ready):
        observe(pool, f"h{i}", pod(f"h{i}"))
    for i in range(users):
        pool.arrive(f"r{i}", f"user{i}")
    for intent in pool.place(at(1)):
        if isinstance(intent, Assign):
            pool.written(intent, at(1))
    first = pool_scaling.decide(pool.state, at(1))
    assert first is not None
    waiting = pool_scaling.waiting_for_capacity(pool.state)
    free = ready * limit - (users - waiting)
    needed = max(0, -(-(waiting + buffer - free) // limit))
    assert first.add == needed
    for i in range(first.add):
        name = f"new{i}"
        pool.state.put_host(HostRecord.of(managed_host(name, created=1)), at(1))
        observe(pool, name, pod(name, ready=False, created=1), at(1))
    pool.state.capacity_changed = True
    pool.place(at(2))
    again = pool_scaling.decide(pool.state, at(2))
    assert again is not None
    assert again.add == 0


# --------------------------------------------------------------------------- status


def test_host_status_says_why_a_workload_host_is_closed() -> None:
    pool = Pool(workload_pool(), [managed_host("h1")])
    observe(pool, "h1", pod("h1", ready=False))
    state = pool.state
    host = state.hosts["h1"]
    on_pool = PoolForHosts(
        pool_name=POOL,
        pool_exists=True,
        balancer=state.views.balancer,
        counts=session_counts(state.ledger, state.requests),
        buckets={},
        metrics_stale_after=120,
        now=at(1),
    )
    status = host_status(
        host,
        on_pool,
        metrics_stale=False,
        workload=state.workload_state(host, at(1)),
        address=state.address_of(host),
    )
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["Available"]["status"], conditions["Available"]["reason"]) == (
        "False",
        "WorkloadNotReady",
    )
    assert (conditions["WorkloadReady"]["status"], conditions["WorkloadReady"]["reason"]) == (
        "False",
        "NotReady",
    )
    assert status["address"] == "10.0.0.7"


def test_pool_status_counts_not_ready_hosts_and_reports_workload_failure() -> None:
    pool = Pool(workload_pool(), [managed_host("h1"), managed_host("h2")])
    observe(pool, "h1", pod("h1"))
    observe(pool, "h2", pod("h2", ready=False))
    state = pool.state
    record = state.pool
    assert isinstance(record, PoolRecord)
    facts = PoolFacts(
        host_count=2,
        balancer=state.views.balancer,
        pending=0,
        waiting_reasons=[],
        scaling_limited=None,
        counts={},
        not_ready={"h2"},
        workload_failure=(True, "FailedCreate", "spec.containers[0].image: Required value"),
    )
    status = pool_status(record, facts, now=at(1))
    assert status["hosts"]["notReady"] == 1
    assert status["hosts"]["draining"] == 0
    assert status["capacity"]["total"] == 2  # only the Ready host's slots
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["WorkloadFailure"]["status"] == "True"
    assert conditions["WorkloadFailure"]["reason"] == "FailedCreate"
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == (
        "False",
        "WorkloadFailure",
    )
    assert "image" in conditions["Ready"]["message"]


def test_claims_are_named_after_template_and_host_and_owned_by_the_host() -> None:
    home = VolumeClaimTemplate.model_validate(
        {"metadata": {"name": "home", "labels": {"a": "b"}}, "spec": {"accessModes": ["RWO"]}}
    )
    (claim,) = claim_manifests([home], host="h1", host_uid="u1", namespace="ns", pool="desks")
    assert claim["metadata"]["name"] == "home-h1"
    assert claim["metadata"]["labels"]["a"] == "b"
    assert claim["metadata"]["labels"]["hostpool.io/host"] == "h1"
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("SessionHost", "u1", True)
    assert claim["spec"] == {"accessModes": ["RWO"]}


def test_a_pod_mounts_its_claims_by_template_name() -> None:
    home = VolumeClaimTemplate.model_validate({"metadata": {"name": "home"}})
    cache = VolumeClaimTemplate.model_validate({"metadata": {"name": "cache"}})
    spec = {"containers": [], "volumes": [{"name": "cache", "emptyDir": {}}]}
    template = WorkloadTemplate.model_validate({"apiVersion": "v1", "kind": "Pod", "spec": spec})
    made = workload_manifest(
        template, host="h1", host_uid="u1", namespace="ns", pool="p", claims=[home, cache]
    )
    assert made["spec"]["volumes"] == [
        {"name": "cache", "emptyDir": {}},  # the template's own volume of that name is kept
        {"name": "home", "persistentVolumeClaim": {"claimName": "home-h1"}},
    ]
    assert template.spec["volumes"] == [{"name": "cache", "emptyDir": {}}]  # not changed


UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/3 nodes are available: 3 pod has unbound immediate PersistentVolumeClaims.",
}


@pytest.mark.parametrize(
    ("status", "said"),
    [
        pytest.param(
            {"conditions": [UNSCHEDULABLE]},
            "(Unschedulable: 0/3 nodes are available: 3 pod has unbound immediate "
            "PersistentVolumeClaims.)",
            id="unschedulable",
        ),
        pytest.param(
            {
                "containerStatuses": [
                    {
                        "name": "desktop",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": 'Back-off pulling image "x"',
                            }
                        },
                    }
                ]
            },
            '(container desktop: ImagePullBackOff: Back-off pulling image "x")',
            id="image",
        ),
        pytest.param(
            {
                "containerStatuses": [
                    {"name": "d", "state": {"waiting": {"reason": "ContainerCreating"}}}
                ]
            },
            None,
            id="just-starting",
        ),
        pytest.param({"conditions": "garbage", "containerStatuses": [1, None]}, None, id="bad"),
        pytest.param(
            {"conditions": [{**UNSCHEDULABLE, "message": "m" * 5_000}]}, "m" * 200, id="long"
        ),
    ],
)
def test_a_pod_that_is_not_ready_says_why(status: Obj, said: str | None) -> None:
    """The scheduler's reason (or a container's) is in the host's message, bounded."""
    body = {**pod("h1", ready=False), "status": status}
    message = state_of(body, now=5).message
    if said is None:
        assert message == "Pod 'h1' is not Ready"
    else:
        assert said in message
        assert len(message) < 400
