"""The Lease's timing (see controller/leader.py): the leader's right to write ends before a
standby may take over, and the write gate follows the renewal deadline on the clock."""

from __future__ import annotations

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


def test_the_write_gate_follows_the_last_renewal_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(leader, "clock", lambda: now[0])
    elector = LeaderElector(None, "ns", holder="me")  # type: ignore[arg-type]  # no I/O here
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
