"""The host agent's decisions, pure: figures over an interval, the load script's answer,
the sessions command's output, sessionState writes and logoff deletes, forced logoffs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.agent.figures import Counters, custom_load_value, load_figures
from hostpool_operator.agent.sessions import (
    MISSES_FOR_LOGOFF,
    HostRequest,
    LogoffTracker,
    SessionTracker,
    UnknownIdle,
    parse_sessions,
)

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def counters(at: float, busy: float, total: float, **disk: int) -> Counters:
    values = {"reads": 0, "writes": 0, "read_ms": 0, "write_ms": 0, **disk}
    return Counters(at=at, cpu_busy=busy, cpu_total=total, **values)


# --------------------------------------------------------------------------- figures


def test_figures_cover_the_interval() -> None:
    before = counters(
        100.0, busy=50, total=200, reads=1000, writes=500, read_ms=4000, write_ms=3000
    )
    # 30 s on 2 CPUs = 60 CPU-seconds, 21 of them busy; 60 reads taking 240 ms, 20 writes
    # taking 300 ms: 540 ms of I/O in 30,000 ms.
    after = counters(130.0, busy=71, total=260, reads=1060, writes=520, read_ms=4240, write_ms=3300)
    figures = load_figures(before, after, [40.0, 44.0, 48.0])
    assert figures == {
        "cpuPercent": 35,
        "memoryPercent": 44,
        "diskQueueLength": 0,
        "diskReadLatencyMs": 4,
        "diskWriteLatencyMs": 15,
    }


def test_disk_queue_length_is_io_time_over_elapsed_time() -> None:
    before = counters(0.0, busy=0, total=10, read_ms=0, write_ms=0)
    after = counters(10.0, busy=5, total=20, reads=100, writes=100, read_ms=25_000, write_ms=15_000)
    assert load_figures(before, after, [])["diskQueueLength"] == 4


def test_no_io_means_zero_latency_and_no_memory_samples_no_memory() -> None:
    """An idle disk reports 0 ms, as Windows' counters do: a missing field would be removed
    by the merge patch and make the quiet host last in a Horizon pool with a latency
    threshold (found by a live check: a host's metrics lacked diskWriteLatencyMs)."""
    figures = load_figures(counters(0, 0, 10), counters(30, 3, 70), [])
    assert figures == {
        "cpuPercent": 5,
        "diskQueueLength": 0,
        "diskReadLatencyMs": 0,
        "diskWriteLatencyMs": 0,
    }


def test_reads_without_writes_give_a_read_latency_and_zero_write_latency() -> None:
    figures = load_figures(counters(0, 0, 10), counters(30, 3, 70, reads=10, read_ms=70), [])
    assert figures["diskReadLatencyMs"] == 7
    assert figures["diskWriteLatencyMs"] == 0


def test_counters_that_went_backwards_give_no_disk_figures() -> None:
    before = counters(0, 0, 10, reads=500, read_ms=900)
    after = counters(30, 6, 70, reads=10, read_ms=20)  # the disk's counters were reset
    assert load_figures(before, after, [50.0]) == {"cpuPercent": 10, "memoryPercent": 50}


@given(
    busy=st.floats(0, 1e6),
    extra_busy=st.floats(0, 1e4),
    idle=st.floats(0, 1e4),
    memory=st.lists(st.floats(0, 100), max_size=8),
)
def test_figures_stay_within_the_api_bounds(
    busy: float, extra_busy: float, idle: float, memory: list[float]
) -> None:
    before = counters(0, busy, busy + 10)
    after = counters(30, busy + extra_busy, busy + 10 + extra_busy + idle)
    figures = load_figures(before, after, memory)
    assert 0 <= figures.get("cpuPercent", 0) <= 100
    assert 0 <= figures.get("memoryPercent", 0) <= 100


@pytest.mark.parametrize(("output", "value"), [("42\n", 42), ("0", 0), (" 100 \nextra", 100)])
def test_load_script_answer(output: str, value: int) -> None:
    assert custom_load_value(output) == value


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("", "nothing"),
        ("abc\n", "'abc', not an integer"),
        ("150", "150, outside 0..100"),
        ("-1", "outside"),
        ("\n42", "nothing"),
        ("4.5", "not an integer"),
    ],
)
def test_load_script_bad_answers_say_what_was_wrong(output: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace(".", r"\.").replace("(", r"\(")):
        custom_load_value(output)


# --------------------------------------------------------------------------- sessions


def test_parse_sessions() -> None:
    text = "\n".join(
        [
            '{"user": "alice", "state": "Active"}',
            "",
            '{"user": "bob", "state": "Disconnected"}',
            '{"user": "bob", "state": "Active"}',  # a second session of bob's: Active wins
            '{"user": "carol", "state": "Disconnected"}',
            '{"user": "carol", "state": "Disconnected"}',
            "not json",
            "[1, 2]",
            '{"state": "Active"}',
            '{"user": "dave", "state": "Sleeping"}',
        ]
    )
    sessions, problems = parse_sessions(text)
    assert sessions == {"alice": "Active", "bob": "Active", "carol": "Disconnected"}
    assert problems == [
        "line 7: not JSON",
        "line 8: not an object",
        "line 9: no user",
        "line 10: state 'Sleeping' is not Active or Disconnected",
    ]


def request(
    name: str,
    user: str,
    state: str | None = "Connecting",
    *,
    deadline: datetime | None = None,
) -> HostRequest:
    return HostRequest(
        name=name,
        uid=f"uid-{name}",
        user=user,
        session_state=state,
        logoff_message="maintenance" if deadline else None,
        logoff_deadline=deadline,
    )


def test_reported_states_are_written_once() -> None:
    tracker = SessionTracker()
    a, b = request("a", "alice"), request("b", "bob", "Active")
    writes, deletes = tracker.sample([a, b], {"alice": "Active", "bob": "Active"})
    assert writes == [(a, "Active")]
    assert deletes == []


def test_a_user_seen_then_missing_twice_in_a_row_logs_off() -> None:
    tracker = SessionTracker()
    a = request("a", "alice", "Active")
    assert tracker.sample([a], {"alice": "Active"}) == ([], [])
    for _ in range(MISSES_FOR_LOGOFF - 1):
        assert tracker.sample([a], {}) == ([], [])
    assert tracker.sample([a], {}) == ([], [a])


def test_a_user_back_between_two_misses_is_not_logged_off() -> None:
    tracker = SessionTracker()
    a = request("a", "alice", "Active")
    tracker.sample([a], {"alice": "Active"})
    tracker.sample([a], {})
    tracker.sample([a], {"alice": "Disconnected"})
    assert tracker.sample([a], {}) == ([], [])


def test_a_user_never_seen_is_still_logging_on() -> None:
    tracker = SessionTracker()
    a = request("a", "alice")
    for _ in range(5):
        assert tracker.sample([a], {}) == ([], [])


def test_a_request_gone_from_the_host_is_forgotten() -> None:
    tracker = SessionTracker()
    a = request("a", "alice", "Active")
    tracker.sample([a], {"alice": "Active"})
    tracker.sample([], {})
    again = request("a2", "alice")  # alice logs on again later: a fresh start
    assert tracker.sample([again], {}) == ([], [])
    assert tracker.sample([again], {}) == ([], [])


# --------------------------------------------------------------------------- forced logoff


def test_notify_once_then_log_off_at_the_deadline() -> None:
    tracker = LogoffTracker()
    a = request("a", "alice", "Active", deadline=T0 + timedelta(minutes=10))
    b = request("b", "bob", "Active")
    assert tracker.due([a, b], T0) == ([a], [])
    assert tracker.due([a, b], T0 + timedelta(minutes=5)) == ([], [])
    assert tracker.due([a, b], T0 + timedelta(minutes=10)) == ([], [a])
    assert LogoffTracker.next_deadline([a, b]) == T0 + timedelta(minutes=10)
    assert LogoffTracker.next_deadline([b]) is None


def test_a_deadline_already_past_logs_off_without_notice() -> None:
    tracker = LogoffTracker()
    a = request("a", "alice", deadline=T0 - timedelta(seconds=1))
    assert tracker.due([a], T0) == ([], [a])


def test_host_request_reads_only_assigned_requests() -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "a", "uid": "u"},
        "spec": {"user": "alice"},
        "status": {
            "phase": "Assigned",
            "host": "h1",
            "sessionState": "Active",
            "logoff": {"message": "bye", "deadline": "2026-11-30T08:10:00Z"},
        },
    }
    parsed = HostRequest.of(obj)
    assert parsed is not None
    assert (parsed.user, parsed.session_state, parsed.logoff_message) == ("alice", "Active", "bye")
    assert parsed.logoff_deadline == T0 + timedelta(minutes=10)
    assert HostRequest.of({**obj, "status": {"phase": "Pending"}}) is None
    assert HostRequest.of({**obj, "spec": "nonsense"}) is None


# ---------------------------------------------------------------------------------------
# an X server that does not answer yet: no warning before the grace


def test_an_idle_time_unknown_for_a_few_seconds_is_no_warning() -> None:
    """A new session's X server answers once its screen is set up (seconds on a busy host):
    only a user unknown for the whole grace, without a break, is reported."""
    unknown = UnknownIdle()
    assert unknown.persisting({"alice": "timed out"}, 100.0, grace=30.0) == {}
    assert unknown.persisting({"alice": "timed out"}, 129.9, grace=30.0) == {}
    assert unknown.persisting({"alice": "refused"}, 130.0, grace=30.0) == {"alice": "refused"}
    # Read once: the clock starts again; bob's own clock starts when he is first unknown.
    assert unknown.persisting({}, 131.0, grace=30.0) == {}
    assert unknown.persisting({"alice": "x", "bob": "y"}, 132.0, grace=30.0) == {}
    assert unknown.persisting({"alice": "x", "bob": "y"}, 162.0, grace=30.0) == {
        "alice": "x",
        "bob": "y",
    }
    assert unknown.since == {"alice": 132.0, "bob": 132.0}
