"""An update read from a pool's state: which hosts are outdated (and placed last), the step,
and ForceLogoff's logoffs for the users of the hosts it drained."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hostpool_operator.api import UpdatePhase, template_revision
from hostpool_operator.api.pool import HostTemplate
from hostpool_operator.api.timestamps import parse_time
from hostpool_operator.engine.records import HostRecord, PoolRecord
from hostpool_operator.rollout import pool as rollout_pool
from support.state_builders import T0, Pool, assigned, host_obj, pool_obj, request_obj

MANAGED = {"hostpool.io/managed-by": "hostpool-operator"}
TEMPLATE: dict[str, Any] = {"metadata": {"labels": {"image": "v2"}}}
NEW = template_revision(HostTemplate.model_validate(TEMPLATE))


def made(name: str, revision: str | None, **annotations: str) -> dict[str, Any]:
    labels = {**MANAGED, **({"hostpool.io/template-revision": revision} if revision else {})}
    obj = host_obj(name, labels=labels)
    obj["metadata"]["annotations"] = annotations
    return obj


def pool(**update: Any) -> Pool:
    scaling = {"maxHosts": 6, "hostTemplate": TEMPLATE}
    return Pool(pool_obj(2, scaling=scaling, update=update or None))


def test_a_host_of_another_revision_is_outdated_and_one_without_a_label_is_not() -> None:
    p = pool()
    for obj in (made("old", "0123456789"), made("new", NEW), made("adopted", None)):
        p.state.put_host(HostRecord.of(obj), T0)
    outdated = {n for n, h in p.state.hosts.items() if p.state.is_outdated(h)}
    assert outdated == {"old"}
    assert p.state.views.balancer is not None
    view = p.state.views.balancer.host("old")
    assert view is not None
    assert view.outdated


def test_a_new_template_makes_every_earlier_host_outdated_and_placement_avoids_them() -> None:
    p = Pool(pool_obj(2, scaling={"maxHosts": 6}), [made("a", None), made("b", None)])
    p.session("r1", "alice", "a")
    # Both labelled with the pool's revision (as the operator adopts them), then the
    # template changes.
    old = template_revision(HostTemplate())
    for name in ("a", "b"):
        p.state.put_host(HostRecord.of(made(name, old)), T0)
    assert not any(p.state.is_outdated(h) for h in p.state.hosts.values())
    changed = pool_obj(2, scaling={"maxHosts": 6, "hostTemplate": TEMPLATE})
    p.state.set_pool(PoolRecord.of(changed), T0)
    assert {n for n, h in p.state.hosts.items() if p.state.is_outdated(h)} == {"a", "b"}
    step = rollout_pool.step(p.state, T0)
    assert step is not None
    assert step.phase is UpdatePhase.PROGRESSING
    assert (step.updated, step.outdated) == (0, 2)
    assert step.replace  # b is empty: replaced
    assert p.state.views.balancer is not None
    view = p.state.views.balancer.host("a")
    assert view is not None
    assert view.outdated  # placed last


def test_placement_that_ignores_revisions_places_no_host_last() -> None:
    p = Pool(pool_obj(2, scaling={"maxHosts": 6}), [made("a", "0123456789")])
    p.state.prefer_updated = False
    p.state.set_pool(
        PoolRecord.of(pool_obj(2, scaling={"maxHosts": 6, "hostTemplate": TEMPLATE})), T0
    )
    assert p.state.is_outdated(p.state.hosts["a"])  # the update still sees it
    assert p.state.views.balancer is not None
    view = p.state.views.balancer.host("a")
    assert view is not None
    assert not view.outdated


def test_force_logoff_writes_a_logoff_for_each_user_of_a_drained_outdated_host() -> None:
    p = pool(strategy="ForceLogoff", logoffDelayMinutes=20, logoffMessage="New image tonight")
    drained = made("old", "0123456789", **{"hostpool.io/drained-by-update": "2026-01-05T08:00:00Z"})
    for obj in (drained, made("other", "0123456789"), made("new", NEW)):
        p.state.put_host(HostRecord.of(obj), T0)
    p.session("r1", "alice", "old")
    p.session("r2", "bob", "old")
    p.session("r3", "carol", "other")  # not drained: no logoff yet
    orders = rollout_pool.update_logoffs(p.state)
    assert [(o.request, o.host) for o in orders] == [("r1", "old"), ("r2", "old")]
    assert {o.message for o in orders} == {"New image tonight"}
    deadline = parse_time("2026-01-05T08:00:00Z")
    assert deadline is not None
    assert {o.deadline for o in orders} == {deadline + timedelta(minutes=20)}
    assert rollout_pool.update_logoffs(p.state, sent={"r1"})[0].request == "r2"


def test_wait_for_logoff_writes_no_logoff() -> None:
    p = pool()
    drained = made("old", "0123456789", **{"hostpool.io/drained-by-update": "2026-01-05T08:00:00Z"})
    p.state.put_host(HostRecord.of(drained), T0)
    p.session("r1", "alice", "old")
    assert rollout_pool.update_logoffs(p.state) == []


def test_a_personal_pools_hosts_are_made_again_in_place_never_replaced() -> None:
    personal = {"type": "Personal", "scaling": {"maxHosts": 6, "hostTemplate": TEMPLATE}}
    p = Pool({"metadata": pool_obj()["metadata"], "spec": personal})
    for name in ("busy", "idle", "off"):
        p.state.put_host(HostRecord.of(made(name, "0123456789")), T0)
    p.session("r1", "alice", "busy")
    p.state.power_off.add("off")
    step = rollout_pool.step(p.state, T0)
    assert step is not None
    assert step.outdated == 3
    assert step.replace == step.delete == step.drain == ()
    assert (step.remake, step.relabel) == (("idle",), ("off",))


def canary_pool() -> Pool:
    """A pool with a canary under watch: outdated host a, its replacement n1 to come."""
    canary = {"hosts": 1, "observeMinutes": 10, "readyTimeoutMinutes": 10}
    p = pool(canary=canary)
    outdated = made("a", "0123456789", **{"hostpool.io/replaced-by": "n1"})
    p.state.put_host(HostRecord.of(outdated), T0)
    return p


def canary_host(**agent: Any) -> dict[str, Any]:
    obj = made("n1", NEW)
    obj["metadata"]["creationTimestamp"] = "2026-01-01T11:59:00Z"
    obj.setdefault("status", {})["agent"] = {"version": "1.0", **agent}
    return obj


def test_a_logon_its_agent_refused_while_watched_fails_the_canary() -> None:
    p = canary_pool()
    refusal = {"at": "2026-01-01T12:00:00Z", "reason": "UidMismatch"}
    p.state.put_host(HostRecord.of(canary_host(lastLogonRefusal=refusal)), T0)
    step = rollout_pool.step(p.state, T0)
    assert step is not None
    assert step.phase is UpdatePhase.FAILED, step.message
    assert step.failure is not None
    assert "logon refused (UidMismatch)" in step.failure.cause
    assert step.close == ("n1",)


def test_a_refusal_before_the_host_was_ready_or_a_host_without_agent_counts_nothing() -> None:
    p = canary_pool()
    before = {"at": "2026-01-01T11:58:00Z", "reason": "UidMismatch"}
    p.state.put_host(HostRecord.of(canary_host(lastLogonRefusal=before)), T0)
    step = rollout_pool.step(p.state, T0)
    assert step is not None
    assert step.phase is UpdatePhase.PROGRESSING, step.message
    # Without an agent, a session still Connecting past the timeout is not held against it
    # (the same session fails a canary whose host has an agent: the next test).
    host = canary_host()
    del host["status"]["agent"]
    p.state.put_host(HostRecord.of(host), T0)
    p.put(request_obj("r1", "alice", status=assigned("n1", state="Connecting")), now=T0)
    late = rollout_pool.step(p.state, T0 + timedelta(minutes=5))
    assert late is not None
    assert late.phase is UpdatePhase.PROGRESSING, late.message


def test_a_session_its_agent_never_saw_start_fails_the_canary() -> None:
    p = canary_pool()
    p.state.put_host(HostRecord.of(canary_host()), T0)
    p.put(request_obj("r1", "alice", status=assigned("n1", state="Connecting")), now=T0)
    early = rollout_pool.step(p.state, T0 + timedelta(seconds=30))
    assert early is not None
    assert early.phase is UpdatePhase.PROGRESSING, early.message  # still within the timeout
    step = rollout_pool.step(p.state, T0 + timedelta(minutes=5))
    assert step is not None
    assert step.phase is UpdatePhase.FAILED, step.message
    assert "the session of 'alice' did not start" in step.message
