"""The Lease's timing (see controller/leader.py): the leader's right to write ends before a
standby may take over, and the write gate follows the renewal deadline on the clock."""

from __future__ import annotations

import asyncio

import pytest

from hostpool_operator.controller import leader
from hostpool_operator.controller.leader import (
    LeaderElector,
    renew_deadline_for,
    retry_period_for,
)
from hostpool_operator.controller.settings import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD


def test_defaults_take_over_within_five_seconds() -> None:
    # A kill -9'd leader: the standby sees the last version at most a retry period late and
    # looks again every retry period.
    assert LEASE_DURATION + 2 * RETRY_PERIOD <= 5.0
    assert renew_deadline_for(LEASE_DURATION) == RENEW_DEADLINE
    assert retry_period_for(LEASE_DURATION) == RETRY_PERIOD


@pytest.mark.parametrize("duration", [2.0, 3.0, 4.0, 6.0, 15.0, 60.0])
def test_the_leader_stops_writing_before_the_lease_expires(duration: float) -> None:
    deadline = renew_deadline_for(duration)
    assert 0 < deadline < duration
    assert duration - deadline >= min(1.0, duration / 2)  # the margin for check-to-wire
    assert retry_period_for(duration) * 4 <= deadline  # several renewals before giving up


@pytest.fixture
def clock_and_elector(monkeypatch: pytest.MonkeyPatch) -> tuple[list[float], LeaderElector]:
    """A clock the test moves (``now[0]``) and an elector reading it (no I/O here)."""
    now = [100.0]
    monkeypatch.setattr(leader, "clock", lambda: now[0])
    return now, LeaderElector(None, "ns", holder="me")  # type: ignore[arg-type]


def test_the_write_gate_follows_the_last_renewal_sent(
    clock_and_elector: tuple[list[float], LeaderElector],
) -> None:
    now, elector = clock_and_elector
    assert not elector.may_write()  # never held
    elector._renewed = 100.0  # a renewal sent at 100 succeeded
    assert elector.may_write()
    now[0] = 100.0 + RENEW_DEADLINE - 0.01
    assert elector.may_write()
    now[0] = 100.0 + RENEW_DEADLINE
    assert not elector.may_write()  # paused or cut off: nothing is written any more
    elector._renewed = now[0]
    assert elector.may_write()
    elector.lost.set()
    assert not elector.may_write()


def test_a_late_renewal_pauses_writes_until_the_lease_runs_out(
    clock_and_elector: tuple[list[float], LeaderElector], monkeypatch: pytest.MonkeyPatch
) -> None:
    now, elector = clock_and_elector
    elector._renewed = 100.0
    now[0] = 100.0 + RENEW_DEADLINE
    assert elector.overdue()  # late: writes wait...
    assert not elector.stalled()  # ...and the leader goes on
    now[0] = 100.0 + LEASE_DURATION - 0.01
    assert not elector.stalled()
    now[0] = 100.0 + LEASE_DURATION
    assert elector.stalled()  # a standby may hold it by now: the leader stops

    async def gate_while(renewal_lands_at: float | None) -> bool:
        """The gate, asked at the renew deadline, while a renewal sent then is answered at
        ``renewal_lands_at`` (None: never); the clock moves a step each time it waits."""
        now[0] = 100.0 + RENEW_DEADLINE
        elector._renewed = 100.0
        real_sleep = asyncio.sleep

        async def step(_: float) -> None:
            now[0] += 0.1
            if renewal_lands_at is not None and now[0] >= renewal_lands_at:
                elector._renewed = 100.0 + RENEW_DEADLINE
            await real_sleep(0)

        monkeypatch.setattr(asyncio, "sleep", step)
        try:
            return await elector.writable()
        finally:
            monkeypatch.setattr(asyncio, "sleep", real_sleep)

    assert asyncio.run(gate_while(100.0 + RENEW_DEADLINE + 0.5))  # answered late: written
    assert now[0] < 100.0 + LEASE_DURATION
    assert not asyncio.run(gate_while(None))  # never answered: refused once stalled
    assert now[0] >= 100.0 + LEASE_DURATION
    elector._renewed = now[0]
    elector.lost.set()
    assert not asyncio.run(elector.writable())  # lost: refused at once


def test_a_standby_looks_twice_a_period_and_wakes_when_the_lease_it_saw_expires(
    clock_and_elector: tuple[list[float], LeaderElector],
) -> None:
    now, elector = clock_and_elector
    assert elector.next_look() == RETRY_PERIOD / 2  # nothing seen yet
    assert not elector.expired_as_seen()
    lease = {
        "metadata": {"resourceVersion": "7"},
        "spec": {"holderIdentity": "other", "leaseDurationSeconds": 4},
    }
    elector._observed = (lease, 100.0)  # first seen at 100, unchanged since
    assert elector.next_look() == RETRY_PERIOD / 2
    now[0] = 103.9
    assert elector.next_look() == pytest.approx(0.1)  # woken at its expiry, not after
    assert not elector.expired_as_seen()
    now[0] = 104.0
    assert elector.expired_as_seen()  # four seconds on this clock: take it on version 7
    assert elector.next_look() == 0.0


def test_a_renewal_past_the_deadline_says_how_long_the_writes_were_paused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [100.0]
    monkeypatch.setattr(leader, "clock", lambda: now[0])
    told: list[float] = []
    elector = LeaderElector(None, "ns", holder="me")  # type: ignore[arg-type]
    elector.on_late_renewal = told.append
    now[0] = 100.0 + RENEW_DEADLINE - 0.01
    elector._late(100.0)  # in time: writes never paused
    elector._late(None)  # the first renewal (nothing held before)
    assert told == []
    now[0] = 100.0 + RENEW_DEADLINE + 0.75
    with caplog.at_level("WARNING", logger=leader.__name__):
        elector._late(100.0)
    assert told == [pytest.approx(0.75)]
    assert "0.75s past the renew deadline" in caplog.text
