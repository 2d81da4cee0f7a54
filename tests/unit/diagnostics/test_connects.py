"""A request's connects as each component writes its share: begun by the broker, the queue
and a host's start from the operator, never a phase overwritten, five kept at most."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.api.request import ConnectOutcome, ConnectPhase, SessionRequestStatus
from hostpool_operator.diagnostics import connects
from hostpool_operator.diagnostics.connects import (
    AGENT_PHASES,
    BROKER_PHASES,
    OPERATOR_PHASES,
    BrokerMark,
    Ending,
)

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def test_a_reference_is_eight_letters_and_digits_and_stable() -> None:
    ref = connects.reference("uid-1/2026-12-07T09:00:00Z")
    assert len(ref) == 8
    assert ref == connects.reference("uid-1/2026-12-07T09:00:00Z")
    assert ref != connects.reference("uid-1/2026-12-07T09:00:01Z")
    assert BrokerMark.parse(BrokerMark(ref, T0, 0.012).annotation()) == BrokerMark(ref, T0, 0.012)


def test_the_operator_carries_the_brokers_connect_and_adds_queue_and_host_start() -> None:
    mark = BrokerMark("ABCDEFGH", T0, 0.02)
    now = T0 + timedelta(seconds=40.02)
    found = connects.assigned([], mark=mark, seed="u", created=T0, now=now, host_start=35.0)
    (connect,) = found
    assert connect["ref"] == "ABCDEFGH"
    assert connect["phases"] == {"broker": 0.02, "queue": 5.0, "hostStart": 35.0}
    assert "outcome" not in connect  # under way until the host's agent sees the session
    SessionRequestStatus.model_validate({"connects": found})  # as the API takes it


def test_a_request_made_without_the_broker_begins_at_its_creation() -> None:
    found = connects.assigned([], mark=None, seed="uid", created=T0, now=T0 + timedelta(seconds=2))
    assert found[0]["phases"] == {"queue": 2.0}
    assert found[0]["startedAt"] == "2026-12-07T09:00:00Z"


def test_nobody_writes_another_components_phase_or_one_already_there() -> None:
    begun = connects.begin([], "ABCDEFGH", T0, {ConnectPhase.BROKER: 0.1})
    page = {ConnectPhase.FIRST_FRAME: 0.5, ConnectPhase.SESSION_START: 0.001}
    after = connects.record(begun, page, owner=BROKER_PHASES)
    assert after[0]["phases"] == {"broker": 0.1, "firstFrame": 0.5}  # not the agent's
    again = connects.record(after, {ConnectPhase.FIRST_FRAME: 99.0}, owner=BROKER_PHASES)
    assert again[0]["phases"]["firstFrame"] == 0.5  # never overwritten


def test_a_failure_ends_the_connect_with_its_phase_and_reason_and_stays() -> None:
    begun = connects.begin([], "ABCDEFGH", T0)
    failed = Ending(ConnectOutcome.FAILED, ConnectPhase.AUTHENTICATION, "UidMismatch", "no")
    done = connects.record(begun, {}, owner=AGENT_PHASES, ending=failed)
    assert done[0] | {} == {
        "ref": "ABCDEFGH", "startedAt": "2026-12-07T09:00:00Z", "outcome": "Failed",
        "failedPhase": "authentication", "reason": "UidMismatch", "message": "no",
    }  # fmt: skip
    later = connects.record(done, {}, owner=AGENT_PHASES, ending=connects.SUCCEEDED)
    assert later[0]["outcome"] == "Failed"


def test_a_new_connect_abandons_the_one_still_under_way() -> None:
    first = connects.begin([], "AAAAAAAA", T0)
    both = connects.begin(first, "BBBBBBBB", T0 + timedelta(minutes=1))
    assert [c.get("outcome") for c in both] == ["Abandoned", None]
    assert connects.begin(both, "BBBBBBBB", T0) == both  # the same connect polled again


@given(
    refs=st.lists(st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", min_size=8, max_size=8), max_size=60),
    figures=st.lists(
        st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.none()),
        max_size=20,
    ),
)
def test_whatever_happens_five_at_most_and_every_figure_is_a_bounded_number(
    refs: list[str], figures: list[Any]
) -> None:
    kept: list[dict[str, Any]] = []
    for i, ref in enumerate(refs):
        kept = connects.begin(kept, ref, T0 + timedelta(seconds=i))
        for phase, value in zip(connects.ORDER, figures, strict=False):
            kept = connects.record(kept, {phase: value}, owner=OPERATOR_PHASES | AGENT_PHASES)
    assert len(kept) <= 5
    for connect in kept:
        for value in (connect.get("phases") or {}).values():
            assert isinstance(value, float)
            assert 0 <= value <= 86400
    SessionRequestStatus.model_validate({"connects": kept})


def test_a_mark_that_is_not_the_brokers_is_no_mark() -> None:
    for text in (None, "", "{", "[]", '{"ref":"abc","startedAt":"x","broker":1}', "x" * 300,
                 '{"ref":"ABCDEFGH","startedAt":"2026-12-07T09:00:00Z","broker":-1}'):  # fmt: skip
        assert BrokerMark.parse(text) is None


def test_a_connect_is_counted_once_when_it_ends() -> None:
    begun = connects.begin([], "AAAAAAAA", T0)
    done = connects.record(begun, {}, owner=AGENT_PHASES, ending=connects.SUCCEEDED)
    assert [c["ref"] for c in connects.ended_since(begun, done)] == ["AAAAAAAA"]
    assert connects.ended_since(done, done) == []
    failed = Ending(ConnectOutcome.FAILED, ConnectPhase.QUEUE, "not one word!", "x")
    assert "reason" not in connects.record(begun, {}, owner=AGENT_PHASES, ending=failed)[0]
