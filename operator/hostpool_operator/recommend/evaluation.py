"""How the plan recommender replays a history (``recommender``): the replay of one plan
(or none) over the whole history, hosts ready ``hostStartMinutes`` after they are added,
and its figures (``Evaluation``). Pure; the replays are started through a ``Runner``,
which the command line backs with other processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from ..api import HostPoolSpec
from ..api.plan import PlanRules
from ..scaling.plans import minimum_hosts, phase_in_force
from ..simulate.replay import replay
from ..simulate.replay_state import Logon, ReplayInput, ReplayResult
from ..simulate.waits import wait_table, waited_over
from .demand_curve import SLOT_MINUTES, SLOTS_A_DAY, Frame
from .history import PastSession

#: The simulated pool decides once a minute (the operator reacts within seconds).
STEP_SECONDS = 60.0
#: Starts replays and gives the means to wait for their results: the search goes on while
#: they run (the command line runs them on other processes).
Runner = Callable[[Sequence[ReplayInput]], Callable[[], list[ReplayResult]]]
Week = tuple[list[float], ...]


def run_serially(jobs: Sequence[ReplayInput]) -> Callable[[], list[ReplayResult]]:
    """Replays one after the other, when their results are asked for."""
    return lambda: [replay(job) for job in jobs]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One replay of the history: host-hours, the most requests waiting at once, the
    waits (table in minutes, how many over the bound, their share) and the hosts per
    weekday and 15-minute slot (the mean over the weeks)."""

    host_hours: float
    peak_pending: int
    waits: dict[str, float]
    waited_over: int
    waited_over_percent: float
    weekly_hosts: Week

    def to_json(self) -> dict[str, Any]:
        return {
            "hostHours": self.host_hours,
            "peakPending": self.peak_pending,
            "waitedOverMaxPercent": self.waited_over_percent,
            "p99WaitMinutes": self.waits["p99"],
        }


def weekly_slots(per_minute: Sequence[float], frame: Frame) -> Week:
    """Per local weekday and 15-minute slot, the mean over the history's weeks of a
    per-minute figure (hosts at each step's end)."""
    sums = [[0.0] * SLOTS_A_DAY for _ in range(7)]
    counts = [[0] * SLOTS_A_DAY for _ in range(7)]
    zone = frame.zone
    for minute, value in enumerate(per_minute):
        local = (frame.origin + timedelta(minutes=minute)).astimezone(zone)
        weekday = local.weekday()
        slot = (local.hour * 60 + local.minute) // SLOT_MINUTES
        sums[weekday][slot] += value
        counts[weekday][slot] += 1
    return tuple(
        [s / c if c else 0.0 for s, c in zip(sums[w], counts[w], strict=True)] for w in range(7)
    )


def evaluation(run: ReplayResult, bound: float, frame: Frame) -> Evaluation:
    return Evaluation(
        host_hours=round(run.host_seconds / 3600, 2),
        peak_pending=run.peak_pending,
        waits=wait_table(run.waits),
        waited_over=waited_over(run.waits, bound),
        waited_over_percent=round(100 * waited_over(run.waits, bound) / max(1, len(run.waits)), 4),
        weekly_hosts=weekly_slots(run.hosts, frame),
    )


def hosts_before(plan: PlanRules, max_hosts: int, midnight: datetime) -> int:
    """The hosts a plan keeps just before a local ``midnight`` in a pool without sessions:
    the minimum of the phase in force then, an off-peak (a day's phases are in order) that
    has drained the others. A phase that starts at midnight is not in force before it."""
    phase = phase_in_force(plan, midnight.astimezone(UTC) - timedelta(seconds=1))
    return 0 if phase is None else minimum_hosts(max_hosts, phase.minimum_hosts_percent)


@dataclass(frozen=True, slots=True)
class Replays:
    """What every replay of one history shares."""

    pool: HostPoolSpec
    zone: tzinfo
    frame: Frame
    logons: tuple[Logon, ...]
    host_start_seconds: float

    @classmethod
    def of_history(
        cls,
        pool: HostPoolSpec,
        frame: Frame,
        sessions: Sequence[PastSession],
        host_start_minutes: float,
    ) -> Replays:
        """The replays of a history over its frame: each session a logon at its start,
        lasting as long as it did."""
        return cls(
            pool=pool,
            zone=frame.zone,
            frame=frame,
            logons=tuple(
                Logon(
                    (s.start - frame.origin).total_seconds(),
                    (s.end - s.start).total_seconds(),
                    s.user,
                )
                for s in sessions
            ),
            host_start_seconds=host_start_minutes * 60,
        )

    def job(
        self, plan: PlanRules | None, *, pool: HostPoolSpec | None = None, hosts: int | None = None
    ) -> ReplayInput:
        """A replay from the history's first local midnight. The hosts there, ready: as
        the policy had been running before, unless given: what the plan keeps just before
        midnight (``hosts_before``; a phase that starts at midnight asks for its own in the
        first pass, as on every later day), the pool's minHosts without a plan."""
        spec = self.pool if pool is None else pool
        if hosts is None:
            hosts = 0
            if plan is not None and spec.scaling is not None:
                hosts = hosts_before(plan, spec.scaling.max_hosts, self.frame.origin)
            elif spec.scaling is not None:
                hosts = spec.scaling.min_hosts
        return ReplayInput(
            pool=spec,
            plan=plan,
            zone=self.zone,
            origin=self.frame.origin,
            total_seconds=self.frame.total_seconds,
            step_seconds=STEP_SECONDS,
            logons=self.logons,
            hosts=hosts,
            seed=1,
            host_start_seconds=self.host_start_seconds,
            record_steps=False,
        )
