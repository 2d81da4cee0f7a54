"""One step of an image update, by table: what is replaced, deleted, drained, and when not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hostpool_operator.api import UpdatePhase, UpdateSpec
from hostpool_operator.rollout.step import RolloutHost, UpdateHistory, bounds, decide

NOW = datetime(2026, 12, 7, 22, 0, tzinfo=UTC)
NEW, OLD = "new", "old"


def spec(**fields: Any) -> UpdateSpec:
    return UpdateSpec.model_validate(fields)


def old(name: str, sessions: int = 0, **more: Any) -> RolloutHost:
    return RolloutHost(name, OLD, sessions=sessions, created=NOW - timedelta(days=3), **more)


def new(name: str, sessions: int = 0, **more: Any) -> RolloutHost:
    more.setdefault("ready_since", NOW - timedelta(hours=1))
    return RolloutHost(name, NEW, sessions=sessions, created=NOW - timedelta(hours=1), **more)


@pytest.mark.parametrize(
    ("surge", "unavailable", "wanted", "want"),
    [
        (1, 1, 10, (1, 1)),
        ("25%", "25%", 10, (3, 2)),  # surge rounds up, unavailable down
        ("10%", "10%", 5, (1, 0)),
        (0, "10%", 5, (0, 1)),  # both 0 after rounding: one may be unavailable
        ("100%", 0, 4, (4, 0)),
    ],
)
def test_surge_rounds_up_and_unavailable_down(
    surge: int | str, unavailable: int | str, wanted: int, want: tuple[int, int]
) -> None:
    limits = bounds(spec(maxSurge=surge, maxUnavailable=unavailable), wanted)
    assert (limits.max_surge, limits.max_unavailable) == want


def test_no_update_before_the_first_template_change_says_nothing() -> None:
    step = decide(spec(), NEW, [new("a"), RolloutHost("b", None)], UpdateHistory(), NOW)
    assert step.phase is None
    assert (step.updated, step.outdated) == (2, 0)
    assert step.replace == step.delete == step.drain == ()


def test_empty_outdated_hosts_are_replaced_at_once_within_max_unavailable() -> None:
    hosts = [old("a"), old("b"), old("c"), old("d", 3)]
    step = decide(spec(maxSurge=0, maxUnavailable=2), NEW, hosts, UpdateHistory(), NOW)
    assert step.replace == ("a", "b")
    assert step.delete == ("a", "b")
    assert step.drain == ()
    assert step.delete_first == ("a", "b")  # no room for a new host beside them


def test_a_replacement_made_before_its_host_goes_takes_the_room_of_max_surge() -> None:
    # a is replaced at once, its new host made first: for that moment there is one extra
    # host, the one maxSurge allows; b waits for the next step.
    hosts = [old("a"), old("b"), old("c", 2)]
    step = decide(spec(maxSurge=1, maxUnavailable=1), NEW, hosts, UpdateHistory(), NOW)
    assert step.replace == step.delete == ("a",)
    assert step.delete_first == ()


def test_without_room_for_both_an_empty_host_goes_before_its_replacement_is_made() -> None:
    hosts = [old("a"), old("b"), old("c", 2)]
    step = decide(spec(maxSurge=0, maxUnavailable=2), NEW, hosts, UpdateHistory(), NOW)
    assert step.replace == step.delete == step.delete_first == ("a", "b")


def test_a_host_with_sessions_gets_a_replacement_ahead_and_keeps_its_users() -> None:
    hosts = [old("a", 4), old("b", 2)]
    step = decide(spec(maxSurge=1, maxUnavailable=0), NEW, hosts, UpdateHistory(), NOW)
    assert step.replace == ("b",)  # the emptiest first: it ends soonest
    assert step.delete == ()
    assert step.drain == ()  # WaitForLogoff ends no session
    assert step.phase is UpdatePhase.PROGRESSING


def test_a_paired_host_is_deleted_when_its_last_session_ends_and_its_replacement_serves() -> None:
    hosts = [old("a", 0, replaced_by="n1"), new("n1", 2), old("b", 3)]
    step = decide(spec(maxSurge=1, maxUnavailable=0), NEW, hosts, UpdateHistory(), NOW)
    assert step.delete == ("a",)
    assert step.replace == ()  # the one surge host is n1, still paired with a


def test_a_paired_host_waits_while_its_replacement_starts_and_no_capacity_is_spare() -> None:
    starting = new("n1", ready_since=None, serving=False, not_ready="Pod is not Ready")
    hosts = [old("a", 0, replaced_by="n1"), starting]
    step = decide(spec(maxSurge=1, maxUnavailable=0), NEW, hosts, UpdateHistory(), NOW)
    assert step.delete == ()


def test_force_logoff_drains_within_max_unavailable() -> None:
    hosts = [old("a", 3), old("b", 5), old("c", 1)]
    step = decide(
        spec(strategy="ForceLogoff", maxSurge=0, maxUnavailable=1), NEW, hosts, UpdateHistory(), NOW
    )
    assert step.drain == ("c",)
    assert step.delete == ()


def test_a_drained_host_is_not_drained_again_and_is_deleted_once_empty() -> None:
    hosts = [old("a", 0, drained_at=NOW, serving=False), old("b", 2)]
    step = decide(
        spec(strategy="ForceLogoff", maxSurge=0, maxUnavailable=1), NEW, hosts, UpdateHistory(), NOW
    )
    assert step.replace == ("a",)
    assert step.delete == ("a",)


@pytest.mark.parametrize(
    ("update", "phase"),
    [
        ({"strategy": "OnDelete"}, UpdatePhase.PROGRESSING),
        ({"paused": True}, UpdatePhase.PAUSED),
        ({"notBefore": "2026-12-24T22:00:00Z"}, UpdatePhase.PROGRESSING),
    ],
)
def test_nothing_is_touched_on_delete_paused_or_before_not_before(
    update: dict[str, Any], phase: UpdatePhase
) -> None:
    step = decide(spec(**update), NEW, [old("a"), old("b", 2)], UpdateHistory(), NOW)
    assert step.phase is phase
    assert step.replace == step.delete == step.drain == ()


def test_not_before_wakes_the_pool_at_that_time() -> None:
    step = decide(spec(notBefore="2026-12-24T22:00:00Z"), NEW, [old("a")], UpdateHistory(), NOW)
    assert step.wake_at == datetime(2026, 12, 24, 22, tzinfo=UTC)


def test_the_last_outdated_host_gone_completes_the_update() -> None:
    history = UpdateHistory(UpdatePhase.PROGRESSING, NEW)
    step = decide(spec(), NEW, [new("a"), new("b")], history, NOW)
    assert step.phase is UpdatePhase.COMPLETE


def test_a_failed_update_stays_failed_for_its_revision_and_a_new_revision_starts_over() -> None:
    failed = UpdateHistory(UpdatePhase.FAILED, NEW, "canary host n1 not Ready")
    step = decide(spec(), NEW, [old("a")], failed, NOW)
    assert step.phase is UpdatePhase.FAILED
    assert step.replace == step.delete == ()
    again = decide(spec(), "newer", [old("a")], failed, NOW)
    assert again.phase is UpdatePhase.PROGRESSING
    assert again.replace == ("a",)


CANARY = {"canary": {"hosts": 1, "observeMinutes": 10, "readyTimeoutMinutes": 5}}


def test_the_canary_is_made_alone_and_touches_no_outdated_host() -> None:
    hosts = [old("a"), old("b", 2), old("c")]
    step = decide(spec(**CANARY), NEW, hosts, UpdateHistory(), NOW)
    assert step.replace == ("a",)
    assert step.delete == ()


def test_the_canary_not_ready_in_time_fails_the_update_naming_the_host_and_cause() -> None:
    canary = RolloutHost(
        "n1",
        NEW,
        serving=False,
        created=NOW - timedelta(minutes=6),
        not_ready="Pod 'n1' is not Ready (container desktop: ErrImagePull: not found)",
    )
    hosts = [old("a", replaced_by="n1"), old("b", 2), canary]
    step = decide(spec(**CANARY), NEW, hosts, UpdateHistory(), NOW)
    assert step.phase is UpdatePhase.FAILED
    assert step.failure is not None
    assert step.failure.host == "n1"
    assert "ErrImagePull" in step.failure.cause
    assert step.close == ("n1",)
    assert step.replace == step.delete == step.drain == ()


def test_the_canary_is_watched_before_the_rest_follow() -> None:
    watched = new("n1", ready_since=NOW - timedelta(minutes=4))
    hosts = [old("a", replaced_by="n1"), old("b"), watched]
    step = decide(spec(**CANARY), NEW, hosts, UpdateHistory(), NOW)
    assert step.phase is UpdatePhase.PROGRESSING
    assert step.replace == step.delete == ()
    assert step.wake_at == NOW + timedelta(minutes=6)
    later = decide(spec(**CANARY), NEW, hosts, UpdateHistory(), NOW + timedelta(minutes=6))
    assert later.canary_passed
    assert set(later.delete) == {"a", "b"}


def personal(hosts: list[RolloutHost], **fields: Any) -> Any:
    return decide(spec(**fields), NEW, hosts, UpdateHistory(), NOW, personal=True)


def test_a_personal_host_is_made_again_in_place_only_when_idle() -> None:
    step = personal(
        [old("idle"), old("busy", sessions=1), old("off", stopped=True, serving=False), new("n")],
        maxUnavailable=2,
    )
    assert step.phase is UpdatePhase.PROGRESSING
    assert step.remake == ("idle",)
    assert step.relabel == ("off",)
    # Never replaced or drained: the host holds its user's files and session.
    assert step.replace == step.delete == step.drain == step.close == ()
    assert "1 wait for their user to log off" in step.message


def test_personal_hosts_are_made_again_max_unavailable_at_a_time_starting_ones_counted() -> None:
    idle = [old(f"h{i}") for i in range(4)]
    assert personal(idle, maxUnavailable=2).remake == ("h0", "h1")
    starting = new("s", not_ready="ContainerCreating", ready_since=None)
    assert personal([*idle, starting], maxUnavailable=2).remake == ("h0",)
    # Stopped hosts cost nothing: all are labelled at once.
    stopped = [old(f"off{i}", stopped=True, serving=False) for i in range(3)]
    assert personal([*stopped, starting], maxUnavailable=1).relabel == ("off0", "off1", "off2")


def test_force_logoff_does_not_apply_to_a_personal_pool() -> None:
    step = personal([old("busy", sessions=2)], strategy="ForceLogoff")
    assert step.drain == step.remake == ()


def test_a_personal_pool_is_held_like_any_other() -> None:
    hosts = [old("idle"), old("off", stopped=True, serving=False)]
    for fields in ({"paused": True}, {"strategy": "OnDelete"}):
        step = personal(hosts, **fields)
        assert step.remake == step.relabel == ()


def test_a_canary_whose_agent_reports_a_failure_fails_the_update_and_is_closed() -> None:
    refused = new(
        "n1", ready_since=NOW - timedelta(minutes=2), failure="a logon refused (UidMismatch)"
    )
    hosts = [old("a", replaced_by="n1"), old("b", 2), refused]
    step = decide(spec(**CANARY), NEW, hosts, UpdateHistory(), NOW)
    assert step.phase is UpdatePhase.FAILED
    assert step.failure is not None
    assert step.failure.cause == "canary host n1: a logon refused (UidMismatch)"
    assert step.close == ("n1",)
    assert step.replace == step.delete == step.drain == ()


def test_a_failed_canary_is_an_extra_host_the_next_revision_removes_not_replaces() -> None:
    """Revision "failed" made canary c for a (a has a session); the template changes again:
    c goes once empty with no replacement, a gets a replacement of the new revision, and
    the pool's size stays one."""
    canary = RolloutHost("c", "failed", serving=False, created=NOW - timedelta(minutes=5))
    hosts = [old("a", 1, replaced_by="c"), canary]
    step = decide(spec(maxSurge=1, maxUnavailable=0), NEW, hosts, UpdateHistory(), NOW)
    assert step.bounds is not None
    assert step.bounds.wanted == 1
    assert step.delete == ("c",)
    assert step.replace == ()  # no room beside both: once c is gone
    after = decide(spec(maxSurge=1, maxUnavailable=0), NEW, hosts[:1], UpdateHistory(), NOW)
    assert after.replace == ("a",)
