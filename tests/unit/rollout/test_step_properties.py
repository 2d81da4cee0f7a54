"""Image updates over time, for random pools, sessions and settings: a small world that
applies each step as the operator would (a replacement serves one tick after it is made,
users log off at random, a drained host's users are logged off a few ticks later) and checks
the promises at every tick."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.api import UpdatePhase, UpdateSpec
from hostpool_operator.rollout.step import RolloutHost, RolloutStep, UpdateHistory, decide

START = datetime(2026, 12, 7, 22, 0, tzinfo=UTC)
TICK = timedelta(minutes=1)
NEW, OLD = "r2", "r1"


class World:
    """The operator's hosts of one pool, and what happens to them between steps."""

    def __init__(self, sessions: list[int], seed: int) -> None:
        self.rng = random.Random(seed)
        self.hosts = {
            f"old-{i}": RolloutHost(f"old-{i}", OLD, sessions=n, created=START - TICK * 1000)
            for i, n in enumerate(sessions)
        }
        self.made = 0
        self.history = UpdateHistory()
        self.ended_by_update = 0
        self.drained_at: dict[str, datetime] = {}

    def apply(self, step: RolloutStep, now: datetime, bound: int) -> None:
        """Carry out the step in the operator's order (delete_first, the replacements, the
        deletes), checking after each that there are never more than ``bound`` hosts."""
        for name in step.delete_first:
            assert self.hosts[name].sessions == 0, f"deleted {name} with sessions"
            self.hosts[name] = replace(self.hosts[name], revision="gone")
        for name in step.replace:
            self.made += 1
            new_name = f"new-{self.made}"
            self.hosts[name] = replace(self.hosts[name], replaced_by=new_name)
            self.hosts[new_name] = RolloutHost(
                new_name, NEW, serving=False, created=now, not_ready="starting"
            )
        live = sum(1 for h in self.hosts.values() if h.revision != "gone")
        assert live <= bound, f"{live} hosts at one moment, bound {bound}"
        for name in step.delete:
            assert self.hosts[name].sessions == 0, f"deleted {name} with sessions"
            del self.hosts[name]
        for name in step.drain:
            self.hosts[name] = replace(self.hosts[name], serving=False, drained_at=now)
        self.history = UpdateHistory(
            step.phase, NEW, step.message, canary_passed=step.canary_passed
        )

    def tick(self, now: datetime, logoff: float, force_after: int) -> None:
        for name, host in list(self.hosts.items()):
            if host.revision == NEW and not host.serving and host.drained_at is None:
                self.hosts[name] = replace(host, serving=True, ready_since=now, not_ready=None)
            elif host.sessions and self.rng.random() < logoff:
                self.hosts[name] = replace(host, sessions=host.sessions - 1)
            if host.drained_at is not None and now - host.drained_at >= TICK * force_after:
                self.ended_by_update += self.hosts[name].sessions
                self.hosts[name] = replace(self.hosts[name], sessions=0)


def capacity(world: World) -> tuple[int, int, int]:
    """(wanted, serving, total) as the rules count them."""
    hosts = world.hosts
    pairs = sum(1 for h in hosts.values() if h.revision == OLD and h.replaced_by in hosts)
    serving = sum(1 for h in hosts.values() if h.serving)
    return len(hosts) - pairs, serving, len(hosts)


@settings(max_examples=150, deadline=None)
@given(
    sessions=st.lists(st.integers(0, 5), min_size=1, max_size=12),
    surge=st.integers(0, 3),
    unavailable=st.integers(0, 3),
    force=st.booleans(),
    canary=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_an_update_keeps_its_bounds_ends_no_session_unless_forced_and_finishes(
    sessions: list[int], surge: int, unavailable: int, force: bool, canary: bool, seed: int
) -> None:
    if surge == 0 and unavailable == 0:
        unavailable = 1
    fields: dict[str, object] = {
        "maxSurge": surge,
        "maxUnavailable": unavailable,
        "strategy": "ForceLogoff" if force else "WaitForLogoff",
    }
    if canary:
        fields["canary"] = {"hosts": 1, "observeMinutes": 2, "readyTimeoutMinutes": 5}
    spec = UpdateSpec.model_validate(fields)
    world = World(sessions, seed)
    wanted = len(sessions)
    now = START
    for _ in range(400):
        _, before_serving, _ = capacity(world)
        step = decide(spec, NEW, list(world.hosts.values()), world.history, now)
        assert step.phase is not UpdatePhase.FAILED
        world.apply(step, now, bound=wanted + max(surge, 1 if canary else 0))
        after_wanted, serving, total = capacity(world)
        assert after_wanted == wanted, "the wanted size moved"
        # Never below wanted - maxUnavailable through the update's own doing, never above
        # wanted + maxSurge (the canary's host counts as surge).
        assert serving >= min(before_serving, wanted - unavailable)
        assert total <= wanted + max(surge, 1 if canary else 0)
        if step.phase is UpdatePhase.COMPLETE:
            break
        now += TICK
        world.tick(now, logoff=0.2, force_after=3)
    else:
        raise AssertionError(f"the update did not finish: {world.hosts}")
    assert all(h.revision == NEW for h in world.hosts.values())
    assert len(world.hosts) == wanted
    if not force:
        assert world.ended_by_update == 0


@settings(max_examples=80, deadline=None)
@given(
    sessions=st.lists(st.integers(0, 5), min_size=1, max_size=10),
    canary_hosts=st.integers(1, 3),
)
def test_a_failed_canary_never_touches_an_outdated_host(
    sessions: list[int], canary_hosts: int
) -> None:
    spec = UpdateSpec.model_validate(
        {"canary": {"hosts": canary_hosts, "observeMinutes": 5, "readyTimeoutMinutes": 3}}
    )
    world = World(sessions, 0)
    outdated = {n: h.sessions for n, h in world.hosts.items()}
    now = START
    for _ in range(10):
        step = decide(spec, NEW, list(world.hosts.values()), world.history, now)
        world.apply(step, now, bound=len(sessions) + canary_hosts)
        # The canary's image cannot be pulled: its hosts never become Ready.
        now += TICK
    assert world.history.phase is UpdatePhase.FAILED
    left = {n: h.sessions for n, h in world.hosts.items() if h.revision == OLD}
    assert left == outdated
    assert all(
        h.serving and h.drained_at is None for h in world.hosts.values() if h.revision == OLD
    )


@settings(max_examples=150, deadline=None)
@given(
    sessions=st.lists(st.integers(0, 3), min_size=1, max_size=12),
    stopped=st.lists(st.booleans(), min_size=12, max_size=12),
    unavailable=st.integers(1, 3),
    seed=st.integers(0, 2**32),
)
def test_personal_hosts_are_made_again_only_when_idle_and_all_get_there(
    sessions: list[int], stopped: list[bool], unavailable: int, seed: int
) -> None:
    """A personal pool: no host is made again while a session is on it, at most
    ``maxUnavailable`` are out at once, none is ever replaced, and as users log off every
    host ends on the new revision (the update completes)."""
    rng = random.Random(seed)
    off = [stopped[i] and n == 0 for i, n in enumerate(sessions)]
    hosts = {
        f"h{i}": RolloutHost(f"h{i}", OLD, sessions=n, stopped=off[i], serving=not off[i])
        for i, n in enumerate(sessions)
    }
    update = UpdateSpec.model_validate({"maxUnavailable": unavailable, "maxSurge": 0})
    history = UpdateHistory()
    now = START
    for _ in range(200):
        step = decide(update, NEW, list(hosts.values()), history, now, personal=True)
        history = UpdateHistory(step.phase, NEW, step.message)
        if step.phase is UpdatePhase.COMPLETE:
            break
        assert step.replace == step.delete == step.drain == ()
        starting = sum(1 for h in hosts.values() if h.not_ready is not None)
        assert starting + len(step.remake) <= unavailable
        for name in step.remake:
            assert hosts[name].sessions == 0, f"{name} made again under a session"
            hosts[name] = replace(hosts[name], revision=NEW, serving=False, not_ready="starting")
        for name in step.relabel:
            assert hosts[name].stopped
            hosts[name] = replace(hosts[name], revision=NEW)
        now += TICK
        for name, host in hosts.items():
            if host.not_ready is not None:
                hosts[name] = replace(host, serving=True, not_ready=None)
            elif host.sessions and rng.random() < 0.3:
                hosts[name] = replace(host, sessions=host.sessions - 1)
    assert all(h.revision == NEW for h in hosts.values()), hosts
