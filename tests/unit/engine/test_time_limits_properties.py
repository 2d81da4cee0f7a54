"""Session limits, as properties over generated sessions and clocks (``engine.time_limits``): a
host clock ahead or behind never makes a limit act early by the host's clock; a session that
flips between Active and Disconnected starts the disconnected time again at each flip and is
never acted on while Active by that limit; what the request's status already holds (a
warning sent, a logoff pending) is never asked again, as after an agent restart; an Active
session within its limits gets nothing; the next look is never in the past and never after
the earliest step due. Every clock is passed in."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from hostpool_operator.api import LimitAction, SessionLimit, SessionLimits
from hostpool_operator.engine.time_limits import (
    LimitStep,
    SessionFacts,
    StepKind,
    decide,
)
from support.state_builders import T0

ACTIVE, DISCONNECTED = "Active", "Disconnected"


@st.composite
def session_limits(draw: st.DrawFn) -> SessionLimits:
    disconnected = draw(st.none() | st.integers(0, 120))
    idle = draw(st.none() | st.integers(1, 120))
    most = draw(st.none() | st.integers(1, 600))
    bound = min(m for m in (idle, most, 61) if m is not None)
    return SessionLimits(
        disconnected_minutes=disconnected,
        idle_minutes=idle,
        idle_action=draw(st.sampled_from(LimitAction)),
        max_session_minutes=most,
        max_session_action=draw(st.sampled_from(LimitAction)),
        warning_minutes=draw(st.none() | st.integers(0, bound - 1)),
    )


seconds = st.integers(-36_000, 36_000)
skews = st.integers(-1_800, 1_800).map(lambda s: timedelta(seconds=s))


def t(offset: int) -> datetime:
    return T0 + timedelta(seconds=offset)


@st.composite
def sessions(draw: st.DrawFn) -> SessionFacts:
    """Any session an agent may report, with any markers the operator may have left."""
    state = draw(st.sampled_from([ACTIVE, DISCONNECTED]))
    notice = draw(st.none() | st.sampled_from(SessionLimit))
    disconnect = draw(st.none() | st.sampled_from(SessionLimit))
    return SessionFacts(
        state,
        draw(st.none() | seconds.map(t)),
        logon_at=draw(st.none() | seconds.map(t)),
        idle_since=draw(st.none() | seconds.map(t)),
        notice_limit=notice,
        notice_sent_at=draw(st.none() | seconds.map(t)),
        disconnect_limit=disconnect,
        disconnect_requested_at=draw(st.none() | seconds.map(t)),
        disconnect_pending=draw(st.booleans()),
        logoff=draw(st.booleans()),
    )


def elapsed_by_host(since: datetime, now: datetime, offset: timedelta) -> timedelta:
    """What the host's own clock says has passed since its stamp ``since`` at operator time
    ``now``, for a host whose clock is ``offset`` ahead (never negative)."""
    return max(timedelta(0), now + offset - since)


@settings(max_examples=400, deadline=None)
@given(session_limits(), sessions(), seconds.map(t), skews)
def test_no_action_before_its_time_by_the_hosts_clock(
    rules: SessionLimits, facts: SessionFacts, now: datetime, offset: timedelta
) -> None:
    """The operator knows the offset exactly here; any step it takes is due by the host's
    clock (a real estimate is never above the true offset, so it only acts later)."""
    step = decide(rules, facts, now, offset).step
    if step is None:
        return
    limit_minutes = timedelta(minutes=step.minutes)
    if step.limit is SessionLimit.DISCONNECTED:
        assert facts.state == DISCONNECTED
        if step.minutes:
            assert facts.state_changed_at is not None
            assert elapsed_by_host(facts.state_changed_at, now, offset) >= limit_minutes
    elif step.limit is SessionLimit.IDLE:
        assert facts.state == ACTIVE
        assert facts.idle_since is not None
        start = max(facts.idle_since, facts.state_changed_at or facts.idle_since)
        needed = limit_minutes - timedelta(minutes=rules.warning() * step.warning)
        assert elapsed_by_host(start, now, offset) >= needed
    else:
        assert facts.logon_at is not None
        needed = limit_minutes - timedelta(minutes=rules.warning() * step.warning)
        assert elapsed_by_host(facts.logon_at, now, offset) >= needed


@settings(max_examples=400, deadline=None)
@given(session_limits(), sessions(), seconds.map(t), skews)
# The host dates the Active stretch a second ahead, and the disconnect was asked for now: the
# look at that second must not find it due earlier (found by this test: a microsecond before
# the look, the disconnect was due again).
@example(
    SessionLimits(
        max_session_minutes=1, max_session_action=LimitAction.DISCONNECT, warning_minutes=0
    ),
    SessionFacts(
        "Active",
        t(1),
        logon_at=t(-60),
        disconnect_limit=SessionLimit.MAX_SESSION,
        disconnect_requested_at=t(0),
    ),
    t(0),
    timedelta(0),
)
def test_the_next_look_is_never_in_the_past_nor_after_a_step_becomes_due(
    rules: SessionLimits, facts: SessionFacts, now: datetime, offset: timedelta
) -> None:
    """Nothing new is due before the next look, and something is due at it: a worker that
    sleeps until then misses nothing and wakes for something. No next look and nothing due
    now: nothing ever comes due while the facts stay as they are."""
    decision = decide(rules, facts, now, offset)
    look = decision.next_look
    if look is not None:
        assert look > now
    if decision.step is not None:
        return
    if look is None:
        for later in (timedelta(minutes=1), timedelta(days=30)):
            assert decide(rules, facts, now + later, offset).step is None
        return
    assert decide(rules, facts, look - timedelta(microseconds=1), offset).step is None
    assert decide(rules, facts, look, offset).step is not None


@settings(max_examples=300, deadline=None)
@given(session_limits(), sessions(), seconds.map(t), skews)
# The host dates the Active stretch a second after the operator's now: the disconnect asked
# for now is that stretch's (found by this test; it was asked again at once).
@example(
    SessionLimits(
        max_session_minutes=1, max_session_action=LimitAction.DISCONNECT, warning_minutes=0
    ),
    SessionFacts("Active", t(1), logon_at=t(-60)),
    t(0),
    timedelta(0),
)
def test_nothing_is_asked_twice(
    rules: SessionLimits, facts: SessionFacts, now: datetime, offset: timedelta
) -> None:
    """A pending logoff stops everything; a pending disconnect is not asked again; a step,
    once in the status (as the operator writes it, and as a restarted agent finds it), is not
    given again at the same moment."""
    step = decide(rules, facts, now, offset).step
    if facts.logoff:
        assert step is None
    if step is None:
        return
    if facts.disconnect_pending:
        assert step.kind is not StepKind.DISCONNECT
    after = apply(facts, step, now)
    again = decide(rules, after, now, offset).step
    assert again is None or (again.kind, again.limit) != (step.kind, step.limit)
    if step.kind is StepKind.LOGOFF:
        assert again is None
    if step.kind is StepKind.DISCONNECT:
        # The agent acted (doneAt) before it reported the new state: still not asked again.
        done = dataclasses.replace(after, disconnect_pending=False)
        later = decide(rules, done, now, offset).step
        assert later is None or (later.kind, later.limit) != (step.kind, step.limit)


def apply(facts: SessionFacts, step: LimitStep, now: datetime) -> SessionFacts:
    """The facts once the step's status patch has landed (shownAt/doneAt not yet set)."""
    if step.kind is StepKind.WARNING:
        return replace(facts, notice_limit=step.limit, notice_sent_at=now)
    if step.kind is StepKind.DISCONNECT:
        return replace(
            facts, disconnect_limit=step.limit, disconnect_requested_at=now, disconnect_pending=True
        )
    return replace(facts, logoff=True)


def replace(facts: SessionFacts, **changes: object) -> SessionFacts:
    return dataclasses.replace(facts, **changes)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(session_limits(), sessions(), seconds.map(t), skews)
def test_a_warning_acknowledged_by_a_restarted_agent_is_not_sent_again(
    rules: SessionLimits, facts: SessionFacts, now: datetime, offset: timedelta
) -> None:
    """The agent restarts after showing the warning (shownAt set; the operator's facts are the
    same notice): later looks in the same period never send that warning again."""
    step = decide(rules, facts, now, offset).step
    if step is None or step.kind is not StepKind.WARNING:
        return
    shown = apply(facts, step, now)
    for minutes in (0, 1, 2, step.minutes):
        later = decide(rules, shown, now + timedelta(minutes=minutes), offset).step
        if later is not None and later.kind is StepKind.WARNING:
            assert later.limit != step.limit


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 120),
    st.lists(st.integers(1, 7_200), min_size=1, max_size=8),
    skews,
)
def test_each_flip_starts_the_disconnected_time_again(
    limit: int, gaps: list[int], offset: timedelta
) -> None:
    """A session flips Active ↔ Disconnected at the given gaps (seconds). While Active it is
    never logged off by the disconnected limit; while Disconnected, only once the limit has
    passed since the last flip (by the host's clock)."""
    rules = SessionLimits(disconnected_minutes=limit)
    changed = T0
    state = DISCONNECTED
    for gap in gaps:
        for probe in (0, gap // 2, gap - 1):
            now = changed - offset + timedelta(seconds=probe)  # the flip's operator time + probe
            step = decide(rules, SessionFacts(state, changed), now, offset).step
            acts = step is not None and step.limit is SessionLimit.DISCONNECTED
            due = state == DISCONNECTED and probe >= limit * 60
            assert acts == due, (state, probe, limit)
        changed += timedelta(seconds=gap)
        state = ACTIVE if state == DISCONNECTED else DISCONNECTED


@settings(max_examples=300, deadline=None)
@given(session_limits(), seconds, seconds, seconds, skews)
def test_an_active_session_within_its_limits_gets_nothing(
    rules: SessionLimits, logon: int, changed: int, idle: int, offset: timedelta
) -> None:
    """Active, and every limit (less its warning) still ahead by the host's clock: no step,
    and the next look is when the first warning or limit is due."""
    facts = SessionFacts(ACTIVE, t(changed), logon_at=t(logon), idle_since=t(idle))
    idle_start = max(t(idle), t(changed))
    host_now = min(
        [t(36_001 * 4)]
        + [
            start + timedelta(minutes=minutes - rules.warning()) - timedelta(seconds=1)
            for start, minutes in (
                (idle_start, rules.idle_minutes),
                (t(logon), rules.max_session_minutes),
            )
            if minutes is not None
        ]
    )
    now = host_now - offset
    decision = decide(rules, facts, now, offset)
    assert decision.step is None
    timed = rules.idle_minutes is not None or rules.max_session_minutes is not None
    assert decision.next_look == (now + timedelta(seconds=1) if timed else None)
