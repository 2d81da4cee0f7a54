"""Scaling a personal pool, from the pool's state as the operator keeps it: one host per
user waiting without one (less the spare unassigned hosts), and an assigned host is never
spare and never removed, however long it has been empty."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hostpool_operator.api.vocabulary import MANAGED_LABEL, MANAGER
from hostpool_operator.scaling import pool as pool_scaling
from support.state_builders import POOL, T0, Obj, Pool, host_obj, metadata

MANAGED = {MANAGED_LABEL: MANAGER}


def personal(**scaling: Any) -> Obj:
    spec = {"type": "Personal", "scaling": {"maxHosts": 10, "scaleDownDelaySeconds": 0, **scaling}}
    return {"metadata": metadata(POOL), "spec": spec}


def test_one_host_per_user_without_one() -> None:
    pool = Pool(
        personal(),
        [
            host_obj("h1", created=1, labels=MANAGED, assignedUser="bob"),
            host_obj("h2", created=2, labels=MANAGED),
        ],
    )
    for user in ("bob", "alice", "carol", "dave"):
        pool.arrive(f"r-{user}", user)
    pool.place()
    # bob has h1; alice takes h2; carol and dave wait for hosts the pool may add.
    decision = pool_scaling.decide(pool.state, T0)
    assert decision is not None
    assert decision.add == 2, decision
    assert decision.remove == []


def test_assigned_hosts_are_never_removed() -> None:
    pool = Pool(
        personal(),
        [
            host_obj("h1", created=1, labels=MANAGED, assignedUser="bob"),
            host_obj("h2", created=2, labels=MANAGED),
            host_obj("h3", created=3, labels=MANAGED, assignedUser="carol"),
        ],
    )
    pool_scaling.decide(pool.state, T0)  # notes since when the hosts have been empty
    decision = pool_scaling.decide(pool.state, T0 + timedelta(days=30))
    assert decision is not None
    assert decision.remove == ["h2"], decision


def test_a_user_whose_own_host_is_closed_adds_nothing() -> None:
    pool = Pool(
        personal(),
        [host_obj("h1", created=1, labels=MANAGED, assignedUser="alice", drainMode=True)],
    )
    pool.arrive("r", "alice")
    pool.place()
    decision = pool_scaling.decide(pool.state, T0)
    assert decision is not None
    assert decision.add == 0, decision
