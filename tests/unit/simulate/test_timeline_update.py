"""An image update in the timeline simulator: when it completes, and what a ForceLogoff
would cost, so an administrator can choose between the strategies before the night."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hostpool_operator.simulate import run_timeline
from hostpool_operator.simulate.timeline_document import TimelineError, parse_timeline

DAY: dict[str, Any] = {
    "seed": 1,
    "start": "2026-12-07T00:00:00",
    "hours": 24,
    "stepMinutes": 5,
    "pool": {
        "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 10},
        "scaling": {"minHosts": 10, "maxHosts": 60},
    },
    "hosts": 10,
    "arrivals": [{"from": "07:00", "to": "10:00", "perHour": 100}],
    "sessionMinutes": 240,
}


def with_update(**update: Any) -> dict[str, Any]:
    document = copy.deepcopy(DAY)
    document["update"] = {"at": "2026-12-07T11:00:00", **update}
    return document


def test_without_an_update_the_result_says_nothing_of_one() -> None:
    assert "update" not in run_timeline(copy.deepcopy(DAY))


def test_wait_for_logoff_completes_when_the_last_old_session_ends_and_ends_none() -> None:
    result = run_timeline(with_update())
    update = result["update"]
    assert update["startedMinutes"] == 660
    # Logons stop at 10:00 and last 4 hours: the last old host empties by 14:00.
    assert update["completedMinutes"] is not None
    assert 660 < update["completedMinutes"] <= 14 * 60 + 5
    assert update["sessionsEnded"] == 0
    # The update changes nobody's logon: every one placed, as without it.
    assert result["placed"] == run_timeline(copy.deepcopy(DAY))["placed"]


def test_force_logoff_is_sooner_and_says_how_many_sessions_it_ends() -> None:
    waited = run_timeline(with_update())["update"]
    forced = run_timeline(
        with_update(strategy="ForceLogoff", logoffDelayMinutes=10, maxUnavailable="50%")
    )["update"]
    assert forced["sessionsEnded"] > 0
    assert forced["tookMinutes"] < waited["tookMinutes"]


def test_an_update_outside_the_run_does_not_complete() -> None:
    late = with_update()
    late["update"]["at"] = "2026-12-07T23:58:00"
    late["arrivals"] = [{"from": "20:00", "to": "23:00", "perHour": 60}]
    assert run_timeline(late)["update"]["completedMinutes"] is None


@pytest.mark.parametrize(
    ("update", "words"),
    [
        ({"at": "2026-12-06T23:00:00"}, "update.at"),
        ({"at": "2026-12-07T11:00:00Z"}, "local time"),
        ({"at": "2026-12-07T11:00:00", "maxSurge": 0, "maxUnavailable": 0}, "cannot both be 0"),
    ],
)
def test_a_bad_update_is_refused_naming_the_field(update: dict[str, Any], words: str) -> None:
    document = copy.deepcopy(DAY)
    document["update"] = update
    with pytest.raises(TimelineError, match=words):
        parse_timeline(document)


def test_a_pool_without_scaling_cannot_be_updated() -> None:
    document = with_update()
    del document["pool"]["scaling"]
    with pytest.raises(TimelineError, match="needs scaling"):
        parse_timeline(document)
