"""Logoffs nobody carries out: a Failed status leaves no logoff behind, and a logoff past
its deadline plus the operator's grace is the operator's to finish (it deletes the request).
Pure: records, the pool's state and ``now``; no clock is read."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.api.timestamps import rfc3339
from hostpool_operator.engine.ledger import LogoffDeadlines, logoff_overdue
from hostpool_operator.engine.records import RequestRecord
from hostpool_operator.engine.status import failed_status
from support.state_builders import T0, Pool, assigned, at, host_obj, pool_obj, request_obj

GRACE = timedelta(seconds=300)


def with_logoff(host: str, deadline: datetime, **extra: Any) -> dict[str, Any]:
    return {**assigned(host), "logoff": {"message": "bye", "deadline": rfc3339(deadline)}, **extra}


# ---------------------------------------------------------------------------- the Failed patch


@pytest.mark.parametrize("logoff", [True, False], ids=["with-logoff", "without"])
def test_a_failed_status_clears_the_logoff(logoff: bool) -> None:
    """A merge patch: ``logoff: null`` removes it, whether or not the operator's copy of
    the request shows one yet (a logoff may have landed a moment before)."""
    status = with_logoff("h1", at(10)) if logoff else assigned("h1")
    record = RequestRecord.of(request_obj("r1", status=status))
    patch = failed_status(record, "HostDeleted", "SessionHost 'h1' was deleted", at(20))
    assert "logoff" in patch
    assert patch["logoff"] is None
    assert patch["phase"] == "Failed"


def test_the_record_reads_the_logoff_deadline() -> None:
    record = RequestRecord.of(request_obj("r1", status=with_logoff("h1", at(90))))
    assert record.logoff
    assert record.logoff_deadline == at(90)
    plain = RequestRecord.of(request_obj("r2", status=assigned("h1")))
    assert not plain.logoff
    assert plain.logoff_deadline is None


# ---------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("deadline", "now", "overdue"),
    [
        (at(0), at(0), False),
        (at(0), at(299), False),
        (at(0), at(300), True),
        (at(0), at(301), True),
        (at(100), at(300), False),
        (at(-1000), at(0), True),
    ],
    ids=["at-deadline", "within-grace", "grace-over", "past", "deadline-later", "long-ago"],
)
def test_a_logoff_is_overdue_after_its_deadline_and_the_grace(
    deadline: datetime, now: datetime, overdue: bool
) -> None:
    assert logoff_overdue(deadline, now, GRACE) is overdue


def test_deadlines_are_given_once_moved_and_cancelled() -> None:
    deadlines = LogoffDeadlines()
    deadlines.note("a", at(0))
    deadlines.note("b", at(10))
    deadlines.note("c", at(20))
    deadlines.note("b", at(100))  # moved later
    deadlines.note("c", None)  # cancelled
    deadlines.note("d", None)  # never had one: nothing kept
    assert len(deadlines) == 2
    assert deadlines.next_due(GRACE) == at(300)
    assert deadlines.overdue(at(299), GRACE) == []
    assert deadlines.overdue(at(300), GRACE) == [("a", at(0))]
    assert deadlines.overdue(at(300), GRACE) == []  # given once
    assert deadlines.overdue(at(399), GRACE) == []  # b's old deadline is gone
    deadlines.forget("b")
    assert deadlines.overdue(at(10_000), GRACE) == []
    assert len(deadlines) == 0


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("note"), st.sampled_from("abcd"), st.none() | st.integers(0, 50)),
        st.tuples(st.just("forget"), st.sampled_from("abcd"), st.none()),
        st.tuples(st.just("tick"), st.just(""), st.integers(0, 20)),
    ),
    max_size=40,
)


@given(_ops)
def test_overdue_is_exactly_the_current_deadlines_past_the_grace(
    ops: list[tuple[str, str, int | None]],
) -> None:
    grace = timedelta(seconds=5)
    deadlines = LogoffDeadlines()
    model: dict[str, datetime] = {}
    now = T0
    for op, name, value in ops:
        if op == "note":
            deadline = None if value is None else at(value)
            deadlines.note(name, deadline)
            if deadline is None:
                model.pop(name, None)
            else:
                model[name] = deadline
        elif op == "forget":
            deadlines.forget(name)
            model.pop(name, None)
        else:
            now += timedelta(seconds=value or 0)
            due = deadlines.overdue(now, grace)
            expected = sorted(
                ((n, d) for n, d in model.items() if d + grace <= now), key=lambda x: (x[1], x[0])
            )
            assert sorted(due, key=lambda x: (x[1], x[0])) == expected
            for n, _ in due:
                del model[n]
        assert len(deadlines) == len(model)
        nxt = deadlines.next_due(grace)
        assert nxt == (min(model.values()) + grace if model else None)


# ---------------------------------------------------------------------------- the pool


def test_a_logoff_no_agent_carries_out_is_the_operators_after_the_grace() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    pool.put(request_obj("r1", status=with_logoff("h1", at(60))))
    pool.session("r2", "bob", "h1")
    state = pool.state
    assert state.limit_watch.overdue_logoffs(at(359), GRACE) == []
    (due,) = state.limit_watch.overdue_logoffs(at(360), GRACE)
    assert (due[0].meta.name, due[1]) == ("r1", at(60))
    assert state.limit_watch.overdue_logoffs(at(400), GRACE) == []  # handed out once
    assert state.limit_watch.next_logoff_due(GRACE) is None


def test_a_logoff_the_agent_carried_out_leaves_nothing_to_finish() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    pool.put(request_obj("r1", status=with_logoff("h1", at(60))))
    assert pool.state.limit_watch.next_logoff_due(GRACE) == at(360)
    pool.state.drop_request("r1")  # the agent logged the user off and deleted it
    assert pool.state.limit_watch.overdue_logoffs(at(1000), GRACE) == []
    assert pool.state.limit_watch.next_logoff_due(GRACE) is None


def test_a_cancelled_or_moved_logoff_counts_by_its_latest_version() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    pool.put(request_obj("r1", status=with_logoff("h1", at(60))))
    pool.put(request_obj("r1", rv=2, status=assigned("h1")))  # a plan cancelled it
    assert pool.state.limit_watch.overdue_logoffs(at(1000), GRACE) == []
    pool.put(request_obj("r1", rv=3, status=with_logoff("h1", at(2000))))
    assert pool.state.limit_watch.overdue_logoffs(at(2299), GRACE) == []
    overdue = pool.state.limit_watch.overdue_logoffs(at(2300), GRACE)
    assert [r.meta.name for r, _ in overdue] == ["r1"]


def test_an_older_version_does_not_bring_a_logoff_back() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    pool.put(request_obj("r1", rv=5, status=assigned("h1")))
    pool.put(request_obj("r1", rv=4, status=with_logoff("h1", at(0))))  # stale event
    assert pool.state.limit_watch.overdue_logoffs(at(1000), GRACE) == []


def test_a_failed_request_left_with_a_logoff_is_finished_too() -> None:
    """A request failed before the Failed patch cleared logoffs (an older operator)."""
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    pool.put(request_obj("r1", status=with_logoff("h1", at(0), phase="Failed")))
    overdue = pool.state.limit_watch.overdue_logoffs(at(300), GRACE)
    assert [r.meta.name for r, _ in overdue] == ["r1"]


def test_a_namesake_starts_without_the_old_ones_logoff() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    pool.put(request_obj("r1", status=with_logoff("h1", at(0))))
    fresh = request_obj("r1", rv=9)
    fresh["metadata"]["uid"] = "another"
    pool.put(fresh)
    assert pool.state.limit_watch.overdue_logoffs(at(1000), GRACE) == []
