"""Session limits, decided: what a pool's ``sessionLimits`` do to one session at ``now`` and
when it is looked at next (``engine.time_limits``), and how a pool's state feeds them (only the
sessions a limit can act on, the host's clock offset, a malformed status reported). Pure:
every time is ``T0`` plus an offset; no clock is read."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from hostpool_operator.api import LimitAction, SessionLimit, SessionLimits
from hostpool_operator.api.timestamps import rfc3339
from hostpool_operator.engine.due import DueTimes
from hostpool_operator.engine.records import HostRecord, PoolRecord
from hostpool_operator.engine.time_limits import (
    MAX_HOST_OFFSET,
    BadFactsError,
    LimitDecision,
    LimitStep,
    SessionFacts,
    StepKind,
    decide,
    facts_of,
    host_clock_offset,
    limit_patch,
)
from support.state_builders import T0, Pool, assigned, at, host_obj, pool_obj, request_obj

MIN = 60.0

ACTIVE, DISCONNECTED = "Active", "Disconnected"


def minutes(m: float) -> datetime:
    return at(m * MIN)


def limits(**fields: Any) -> SessionLimits:
    return SessionLimits.model_validate(fields)


def step_of(decision: LimitDecision) -> tuple[StepKind, SessionLimit] | None:
    step = decision.step
    return None if step is None else (step.kind, step.limit)


# ---------------------------------------------------------------------------- the table

IDLE30 = limits(idleMinutes=30)
IDLE30_LOGOFF = limits(idleMinutes=30, idleAction="Logoff")
DISC60 = limits(disconnectedMinutes=60)
DISC0 = limits(disconnectedMinutes=0)
MAX600 = limits(maxSessionMinutes=600)
MAX600_DISC = limits(maxSessionMinutes=600, maxSessionAction="Disconnect")
ALL = limits(disconnectedMinutes=60, idleMinutes=30, maxSessionMinutes=600)

W, D, L = StepKind.WARNING, StepKind.DISCONNECT, StepKind.LOGOFF
IDLE, DISC, MAXS = SessionLimit.IDLE, SessionLimit.DISCONNECTED, SessionLimit.MAX_SESSION

CASES: list[Any] = [
    # disconnectedMinutes: logoff, no warning
    pytest.param(DISC60, SessionFacts(DISCONNECTED, T0), 59.9, None, 60, id="disc-before"),
    pytest.param(DISC60, SessionFacts(DISCONNECTED, T0), 60, (L, DISC), None, id="disc-at"),
    pytest.param(DISC60, SessionFacts(DISCONNECTED, T0), 55, None, 60, id="disc-no-warning"),
    pytest.param(DISC0, SessionFacts(DISCONNECTED, T0), 0, (L, DISC), None, id="disc-0"),
    pytest.param(DISC0, SessionFacts(DISCONNECTED), 0, (L, DISC), None, id="disc-0-no-stamp"),
    pytest.param(DISC60, SessionFacts(DISCONNECTED), 600, None, None, id="disc-no-stamp"),
    pytest.param(DISC60, SessionFacts(ACTIVE, T0), 600, None, None, id="disc-but-active"),
    pytest.param(
        DISC60, SessionFacts(DISCONNECTED, T0, logoff=True), 90, None, None, id="disc-pending"
    ),
    pytest.param(DISC0, SessionFacts("Connecting", T0), 5, None, None, id="connecting"),
    # idleMinutes: a warning 5 minutes before, then the idle action
    pytest.param(IDLE30, SessionFacts(ACTIVE, T0, idle_since=T0), 24.9, None, 25, id="idle-quiet"),
    pytest.param(
        IDLE30, SessionFacts(ACTIVE, T0, idle_since=T0), 25, (W, IDLE), 30, id="idle-warn"
    ),
    pytest.param(
        IDLE30,
        SessionFacts(ACTIVE, T0, idle_since=T0, notice_limit=IDLE, notice_sent_at=minutes(25)),
        27,
        None,
        30,
        id="idle-warned",
    ),
    pytest.param(
        IDLE30,
        SessionFacts(ACTIVE, T0, idle_since=T0, notice_limit=IDLE, notice_sent_at=minutes(25)),
        30,
        (D, IDLE),
        None,
        id="idle-act",
    ),
    pytest.param(
        IDLE30_LOGOFF, SessionFacts(ACTIVE, T0, idle_since=T0), 31, (L, IDLE), None, id="idle-lo"
    ),
    pytest.param(
        IDLE30,
        SessionFacts(
            ACTIVE,
            T0,
            idle_since=T0,
            disconnect_limit=IDLE,
            disconnect_requested_at=minutes(30),
            disconnect_pending=True,
        ),
        40,
        None,
        None,
        id="idle-disconnect-pending",
    ),
    pytest.param(
        IDLE30,
        SessionFacts(
            ACTIVE, T0, idle_since=T0, disconnect_limit=IDLE, disconnect_requested_at=minutes(30)
        ),
        40,
        None,
        None,
        id="idle-done-this-period",
    ),
    pytest.param(
        IDLE30,
        SessionFacts(
            ACTIVE,
            T0,
            idle_since=minutes(50),
            disconnect_limit=IDLE,
            disconnect_requested_at=minutes(30),
            notice_limit=IDLE,
            notice_sent_at=minutes(25),
        ),
        75,
        (W, IDLE),
        80,
        id="idle-new-period",
    ),
    pytest.param(
        IDLE30, SessionFacts(ACTIVE, minutes(20), idle_since=T0), 30, None, 45, id="idle-reconnect"
    ),
    pytest.param(IDLE30, SessionFacts(ACTIVE, T0), 600, None, None, id="idle-user-active"),
    pytest.param(
        IDLE30, SessionFacts(DISCONNECTED, T0, idle_since=T0), 60, None, None, id="idle-disc"
    ),
    # maxSessionMinutes: from logonAt
    pytest.param(MAX600, SessionFacts(ACTIVE, T0, logon_at=T0), 594, None, 595, id="max-quiet"),
    pytest.param(MAX600, SessionFacts(ACTIVE, T0, logon_at=T0), 595, (W, MAXS), 600, id="max-warn"),
    pytest.param(
        MAX600, SessionFacts(DISCONNECTED, T0, logon_at=T0), 595, None, 600, id="max-no-warn-disc"
    ),
    pytest.param(
        MAX600, SessionFacts(DISCONNECTED, T0, logon_at=T0), 600, (L, MAXS), None, id="max-lo-disc"
    ),
    pytest.param(
        MAX600, SessionFacts(ACTIVE, T0, logon_at=T0), 700, (L, MAXS), None, id="max-late"
    ),
    pytest.param(
        MAX600_DISC, SessionFacts(ACTIVE, T0, logon_at=T0), 600, (D, MAXS), None, id="max-disc"
    ),
    pytest.param(
        MAX600_DISC,
        SessionFacts(DISCONNECTED, T0, logon_at=T0),
        600,
        None,
        None,
        id="max-disc-of-disconnected",
    ),
    pytest.param(
        MAX600_DISC,
        SessionFacts(
            ACTIVE,
            minutes(700),
            logon_at=T0,
            disconnect_limit=MAXS,
            disconnect_requested_at=minutes(600),
        ),
        700,
        (D, MAXS),
        None,
        id="max-disc-again-after-reconnect",
    ),
    pytest.param(
        MAX600_DISC,
        SessionFacts(
            ACTIVE, T0, logon_at=T0, disconnect_limit=MAXS, disconnect_requested_at=minutes(600)
        ),
        700,
        None,
        None,
        id="max-disc-done-this-stretch",
    ),
    # several limits at once: the strongest step due, the earliest of the rest next
    pytest.param(
        ALL,
        SessionFacts(ACTIVE, T0, logon_at=T0, idle_since=minutes(590)),
        596,
        (W, MAXS),
        600,
        id="all-warn-max-first",
    ),
    pytest.param(
        ALL,
        SessionFacts(ACTIVE, T0, logon_at=T0, idle_since=minutes(570)),
        600,
        (L, MAXS),
        None,
        id="all-logoff-beats-disconnect",
    ),
]


@pytest.mark.parametrize(("rules", "facts", "now", "expected", "next_look"), CASES)
def test_the_table(
    rules: SessionLimits,
    facts: SessionFacts,
    now: float,
    expected: tuple[StepKind, SessionLimit] | None,
    next_look: float | None,
) -> None:
    decision = decide(rules, facts, minutes(now))
    assert step_of(decision) == expected
    assert decision.next_look == (None if next_look is None else minutes(next_look))


def test_no_limits_set_never_act() -> None:
    facts = SessionFacts(DISCONNECTED, T0, logon_at=T0, idle_since=T0)
    assert decide(limits(), facts, minutes(100_000)) == LimitDecision(None, None)


def test_a_warning_of_another_limit_sent_after_this_ones_time_stands_for_it() -> None:
    """Both warnings due at once: the user is told of the one that acts first, and the other
    is not sent on top of it (nor is the first sent again: no ping-pong)."""
    rules = limits(idleMinutes=30, maxSessionMinutes=600)
    base = SessionFacts(ACTIVE, T0, logon_at=T0, idle_since=minutes(570))
    first = decide(rules, base, minutes(596))
    assert step_of(first) == (W, IDLE) or step_of(first) == (W, MAXS)
    assert first.step is not None
    sent = SessionFacts(
        ACTIVE,
        T0,
        logon_at=T0,
        idle_since=minutes(570),
        notice_limit=first.step.limit,
        notice_sent_at=minutes(596),
    )
    again = decide(rules, sent, minutes(597))
    assert again.step is None
    assert again.next_look == minutes(600)


def test_a_persons_notice_does_not_count_as_the_warning() -> None:
    facts = SessionFacts(ACTIVE, T0, idle_since=T0, notice_sent_at=minutes(26))
    assert step_of(decide(IDLE30, facts, minutes(27))) == (W, IDLE)


# ---------------------------------------------------------------------------- clock skew


@pytest.mark.parametrize("skew", [-600, -5, 0, 5, 600])
def test_the_limit_acts_at_its_time_by_the_hosts_clock(skew: int) -> None:
    """The agent's times are the host's clock: a host ``skew`` seconds ahead reports times
    ``skew`` later than the operator's; the operator's estimate of the offset moves them back."""
    offset = timedelta(seconds=skew)
    facts = SessionFacts(DISCONNECTED, T0 + offset)  # the host's stamp of operator-time T0
    assert decide(DISC60, facts, minutes(59.99), offset).step is None
    assert step_of(decide(DISC60, facts, minutes(60), offset)) == (L, DISC)
    assert decide(DISC60, facts, minutes(0), offset).next_look == minutes(60)


def test_a_zero_limit_acts_at_once_even_when_the_host_clock_says_the_future() -> None:
    facts = SessionFacts(DISCONNECTED, minutes(10))
    assert step_of(decide(DISC0, facts, T0)) == (L, DISC)


@pytest.mark.parametrize(
    ("sampled", "seen", "offset"),
    [
        (None, T0, timedelta(0)),
        (at(5), T0, timedelta(seconds=5)),
        (at(-30), T0, timedelta(seconds=-30)),
        (T0 + MAX_HOST_OFFSET, T0, MAX_HOST_OFFSET),
        (T0 + MAX_HOST_OFFSET + timedelta(seconds=1), T0, timedelta(0)),
        (T0 - timedelta(days=2), T0, timedelta(0)),
    ],
)
def test_the_host_offset(sampled: datetime | None, seen: datetime, offset: timedelta) -> None:
    assert host_clock_offset(sampled, seen) == offset


# ---------------------------------------------------------------------------- texts and bodies


def test_the_default_warning_says_what_happens_when_and_why() -> None:
    decision = decide(IDLE30, SessionFacts(ACTIVE, T0, idle_since=T0), minutes(25))
    assert decision.step is not None
    assert decision.step.message == (
        "This session will be disconnected in 5 minutes because it has been idle."
    )
    late = decide(MAX600, SessionFacts(ACTIVE, T0, logon_at=T0), minutes(599.5))
    assert late.step is not None
    assert late.step.message == (
        "This session will be logged off in 1 minute because it has reached its time limit "
        "of 600 minutes."
    )
    assert late.step.event_message() == (
        f"session time limit (600 min): warned; logoff due at {rfc3339(minutes(600))}"
    )


def test_the_pools_message_is_the_warning() -> None:
    rules = limits(idleMinutes=30, message="Save your work: idle sessions end.")
    decision = decide(rules, SessionFacts(ACTIVE, T0, idle_since=T0), minutes(25))
    assert decision.step is not None
    assert decision.step.message == "Save your work: idle sessions end."


@pytest.mark.parametrize(
    ("step", "body"),
    [
        (
            LimitStep(W, IDLE, 30, LimitAction.DISCONNECT, minutes(30), "soon"),
            {
                "notice": {
                    "message": "soon",
                    "sentAt": "2026-01-01T12:25:00Z",
                    "limit": "Idle",
                    "shownAt": None,
                }
            },
        ),
        (
            LimitStep(D, IDLE, 30, LimitAction.DISCONNECT, minutes(25), ""),
            {
                "disconnect": {
                    "requestedAt": "2026-01-01T12:25:00Z",
                    "limit": "Idle",
                    "doneAt": None,
                }
            },
        ),
        (
            LimitStep(L, DISC, 0, LimitAction.LOGOFF, minutes(25), "gone"),
            {
                "logoff": {
                    "message": "gone",
                    "deadline": "2026-01-01T12:25:00Z",
                    "limit": "Disconnected",
                    "shownAt": None,
                }
            },
        ),
    ],
)
def test_the_status_patches(step: LimitStep, body: dict[str, Any]) -> None:
    assert limit_patch(step, minutes(25)) == body


def test_the_event_messages_name_the_limit() -> None:
    assert LimitStep(D, IDLE, 30, LimitAction.DISCONNECT, T0, "").event_message() == (
        "idle limit (30 min): disconnected"
    )
    assert LimitStep(L, DISC, 0, LimitAction.LOGOFF, T0, "").event_message() == (
        "disconnected limit (0 min): logged off"
    )


# ---------------------------------------------------------------------------- facts


def test_facts_of_a_status() -> None:
    status = {
        "sessionState": "Active",
        "stateChangedAt": "2026-01-01T12:00:00Z",
        "logonAt": "2026-01-01T11:00:00Z",
        "idleSince": "2026-01-01T12:01:00Z",
        "notice": {"message": "m", "sentAt": "2026-01-01T12:02:00Z", "limit": "Idle"},
        "disconnect": {"requestedAt": "2026-01-01T12:03:00Z", "doneAt": "2026-01-01T12:03:05Z"},
    }
    facts = facts_of(status)
    assert facts == SessionFacts(
        ACTIVE,
        T0,
        at(-3600),
        at(60),
        IDLE,
        at(120),
        None,
        at(180),
        disconnect_pending=False,
        logoff=False,
    )


@pytest.mark.parametrize(
    ("status", "field"),
    [
        ({"sessionState": "Active", "idleSince": "a while"}, "status.idleSince"),
        ({"sessionState": "Active", "stateChangedAt": 12}, "status.stateChangedAt"),
        ({"logonAt": "2026-13-45T00:00:00Z"}, "status.logonAt"),
        ({"notice": {"message": "m", "sentAt": "?"}}, "status.notice.sentAt"),
        ({"notice": {"sentAt": "2026-01-01T12:00:00Z", "limit": "Bedtime"}}, "status.notice.limit"),
        ({"disconnect": "now"}, "status.disconnect"),
        ({"disconnect": {"requestedAt": "soon"}}, "status.disconnect.requestedAt"),
    ],
)
def test_a_malformed_field_is_named(status: dict[str, Any], field: str) -> None:
    with pytest.raises(BadFactsError, match=field.replace(".", r"\.")):
        facts_of(status)


# ---------------------------------------------------------------------------- looks


def test_looks_come_due_once_in_time_order_and_moved_ones_are_skipped() -> None:
    looks = DueTimes()
    looks.note("a", at(30))
    looks.note("b", at(10))
    looks.note("c", at(20))
    looks.note("c", at(40))  # moved
    looks.note("b", None)  # dropped
    assert looks.next_due() == at(30)
    assert looks.due(at(35)) == [("a", at(30))]
    assert looks.due(at(35)) == []
    assert looks.next_due() == at(40)
    looks.forget("c")
    assert looks.next_due() is None
    assert len(looks) == 0


def test_at_most_so_many_looks_at_once_the_earliest_first_the_rest_stay_due() -> None:
    looks = DueTimes()
    for i in range(5):
        looks.note(f"r{i}", at(10 - i))
    assert [k for k, _ in looks.due(at(10), 2)] == ["r4", "r3"]
    assert looks.next_due() == at(8)
    assert [k for k, _ in looks.due(at(10))] == ["r2", "r1", "r0"]


def test_a_pass_looks_at_so_many_sessions_and_the_next_pass_at_the_rest() -> None:
    pool = limited_pool(disconnectedMinutes=0)
    for i in range(3):
        pool.put(request_obj(f"r{i}", f"u{i}", status=with_state(DISCONNECTED, T0)))
    assert len(pool.state.limit_watch.looks_due(T0, 2)) == 2
    assert pool.state.limit_watch.next_look() == T0  # due still: the next pass follows at once
    assert len(pool.state.limit_watch.looks_due(T0, 2)) == 1


# ---------------------------------------------------------------------------- the pool's state


def limited_pool(**session_limits: Any) -> Pool:
    return Pool(pool_obj(limit=2, sessionLimits=session_limits), [host_obj("h1")])


def with_state(state: str, changed: datetime, **extra: Any) -> dict[str, Any]:
    return {**assigned("h1", state=state), "stateChangedAt": rfc3339(changed), **extra}


def test_a_pool_without_limits_keeps_no_looks() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    pool.put(request_obj("r1", "alice", status=with_state(DISCONNECTED, T0)))
    assert len(pool.state.limit_watch.looks) == 0
    assert pool.state.limit_watch.next_look() is None
    assert pool.state.limit_watch.looks_due(minutes(10_000)) == []


def test_only_sessions_a_limit_can_act_on_are_looked_at() -> None:
    pool = limited_pool(disconnectedMinutes=60)
    pool.put(request_obj("connecting", "a", status=assigned("h1", state="Connecting")))
    pool.put(request_obj("pending", "b"))
    pool.put(
        request_obj(
            "ending",
            "c",
            status={**with_state(DISCONNECTED, T0), "logoff": {"deadline": rfc3339(T0)}},
        )
    )
    pool.put(request_obj("away", "d", status=with_state(DISCONNECTED, T0)))
    assert set(pool.state.requests) >= {"connecting", "pending", "ending", "away"}
    assert "away" in pool.state.limit_watch.looks
    assert len(pool.state.limit_watch.looks) == 1


def test_a_look_decides_then_waits_for_the_next_step() -> None:
    pool = limited_pool(disconnectedMinutes=60)
    pool.put(request_obj("away", "d", status=with_state(DISCONNECTED, T0)))
    assert pool.state.limit_watch.looks_due(minutes(1)) == []
    assert pool.state.limit_watch.next_look() == minutes(60)
    assert pool.state.limit_watch.looks_due(minutes(59)) == []
    ((record, step),) = pool.state.limit_watch.looks_due(minutes(60))
    assert record.meta.name == "away"
    assert isinstance(step, LimitStep)
    assert (step.kind, step.limit) == (L, DISC)
    assert pool.state.limit_watch.next_look() is None  # its write brings the next version
    ended = with_state(DISCONNECTED, T0, logoff={"deadline": rfc3339(minutes(60))})
    pool.put(request_obj("away", "d", rv=2, status=ended))
    assert "away" not in pool.state.limit_watch.looks


def test_the_hosts_clock_offset_comes_from_its_metrics_sample() -> None:
    """The host's agent stamps its sample 120 s ahead of the operator's clock: a disconnect
    it stamps at host time T0+120s (operator T0) acts at operator time T0 + 60 min."""
    pool = limited_pool(disconnectedMinutes=60)
    sample = host_obj("h1")
    sample["status"] = {"metrics": {"cpuPercent": 1, "sampledAt": rfc3339(at(120))}}
    pool.state.put_host(HostRecord.of(sample), T0)
    assert pool.state.views.clock_offset("h1") == timedelta(seconds=120)
    pool.put(request_obj("away", "d", status=with_state(DISCONNECTED, at(120))))
    assert pool.state.limit_watch.looks_due(T0) == []
    assert pool.state.limit_watch.next_look() == minutes(60)
    assert len(pool.state.limit_watch.looks_due(minutes(60))) == 1


def test_a_malformed_status_is_reported_and_left_alone() -> None:
    pool = limited_pool(disconnectedMinutes=0)
    bad = {**assigned("h1", state=DISCONNECTED), "stateChangedAt": "yesterday"}
    pool.put(request_obj("odd", "d", status=bad))
    ((record, problem),) = pool.state.limit_watch.looks_due(T0)
    assert record.meta.name == "odd"
    assert isinstance(problem, BadFactsError)
    assert "status.stateChangedAt" in str(problem)
    assert pool.state.limit_watch.next_look() is None


def test_limits_set_later_look_at_every_session_and_removed_ones_forget() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    pool.put(request_obj("away", "d", status=with_state(DISCONNECTED, T0)))
    assert len(pool.state.limit_watch.looks) == 0
    limited = pool_obj(limit=2, sessionLimits={"disconnectedMinutes": 0})
    limited["metadata"]["generation"] = 2
    pool.state.set_pool(PoolRecord.of(limited), minutes(5))
    assert "away" in pool.state.limit_watch.looks
    ((_, step),) = pool.state.limit_watch.looks_due(minutes(5))
    assert isinstance(step, LimitStep)
    pool.state.set_pool(PoolRecord.of(pool_obj(limit=2)), minutes(6))
    assert len(pool.state.limit_watch.looks) == 0


def test_a_spec_change_that_keeps_the_limits_keeps_each_sessions_next_look() -> None:
    """The watch keeps the limits it follows: any other change of the pool's spec (here its
    session limit) leaves the looks as they were, and the pool gone forgets them."""
    pool = limited_pool(disconnectedMinutes=60)
    pool.put(request_obj("away", "d", status=with_state(DISCONNECTED, T0)))
    assert pool.state.limit_watch.looks_due(minutes(1)) == []
    assert pool.state.limit_watch.next_look() == minutes(60)
    wider = pool_obj(limit=3, sessionLimits={"disconnectedMinutes": 60})
    wider["metadata"]["generation"] = 2
    pool.state.set_pool(PoolRecord.of(wider), minutes(2))
    assert pool.state.limit_watch.next_look() == minutes(60)  # not looked at afresh
    pool.state.set_pool(None, minutes(3))
    assert pool.state.limit_watch.next_look() is None


def test_an_assignment_writes_state_changed_at_with_connecting() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    pool.arrive("r1", "alice")
    (intent,) = pool.place(minutes(1))
    pool.written(intent, minutes(1))
    status = pool.state.requests["r1"].status
    assert status["sessionState"] == "Connecting"
    assert status["stateChangedAt"] == status["assignedAt"] == rfc3339(minutes(1))
