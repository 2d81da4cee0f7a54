"""A pool's session limits and a request's limit fields, as the API server takes them.

The generated CRDs on a real kube-apiserver: a HostPool's ``spec.sessionLimits`` gets its
defaults (idleAction Disconnect, maxSessionAction Logoff; warningMinutes, when absent, is 5
minutes clamped below the shorter limit, so a default never refuses a 5-minute limit) and
refuses, naming the field, what is out of range, an unknown action, a warning set as long as
the limit it warns of (CEL) and a message over 512 characters; a request's new status
timestamps take RFC3339 and refuse what is not a time. Each table is also given to the
pydantic models the operator reads these objects with, which must take and refuse the same
values.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hostpool_operator.api.pool import SessionLimits
from hostpool_operator.api.request import SessionRequestStatus
from support.builders import pool, request
from support.kube import ApiError, Kube

Obj = dict[str, Any]

DEFAULTS: Obj = {"idleAction": "Disconnect", "maxSessionAction": "Logoff"}

#: Limits both the server and the model take, with what the server stores.
VALID: list[tuple[Obj, Obj]] = [
    (
        {"disconnectedMinutes": 60, "idleMinutes": 30, "maxSessionMinutes": 600},
        {"disconnectedMinutes": 60, "idleMinutes": 30, "maxSessionMinutes": 600, **DEFAULTS},
    ),
    ({}, DEFAULTS),
    ({"disconnectedMinutes": 0}, {"disconnectedMinutes": 0, **DEFAULTS}),
    ({"disconnectedMinutes": 10080}, {"disconnectedMinutes": 10080, **DEFAULTS}),
    (
        {"idleMinutes": 1, "warningMinutes": 0, "idleAction": "Logoff"},
        {**DEFAULTS, "idleMinutes": 1, "warningMinutes": 0, "idleAction": "Logoff"},
    ),
    (
        {"idleMinutes": 61, "warningMinutes": 60, "maxSessionMinutes": 10080},
        {**DEFAULTS, "idleMinutes": 61, "warningMinutes": 60, "maxSessionMinutes": 10080},
    ),
    # A limit of 5 minutes or less with the default warning: taken (the warning is clamped).
    ({"idleMinutes": 5}, {**DEFAULTS, "idleMinutes": 5}),
    (
        {"maxSessionMinutes": 3, "idleMinutes": 1},
        {**DEFAULTS, "maxSessionMinutes": 3, "idleMinutes": 1},
    ),
    (
        {"maxSessionMinutes": 6, "maxSessionAction": "Disconnect", "message": "m" * 512},
        {
            **DEFAULTS,
            "maxSessionMinutes": 6,
            "maxSessionAction": "Disconnect",
            "message": "m" * 512,
        },
    ),
]

#: Limits both refuse, and the field the refusal names.
INVALID: list[tuple[Obj, str]] = [
    ({"disconnectedMinutes": -1}, "disconnectedMinutes"),
    ({"disconnectedMinutes": 10081}, "disconnectedMinutes"),
    ({"idleMinutes": 0}, "idleMinutes"),
    ({"idleMinutes": 10081}, "idleMinutes"),
    ({"maxSessionMinutes": 0}, "maxSessionMinutes"),
    ({"maxSessionMinutes": 10081}, "maxSessionMinutes"),
    ({"idleMinutes": 30, "idleAction": "Sleep"}, "idleAction"),
    ({"maxSessionMinutes": 30, "maxSessionAction": "Hibernate"}, "maxSessionAction"),
    ({"warningMinutes": 61}, "warningMinutes"),
    ({"warningMinutes": -1}, "warningMinutes"),
    ({"idleMinutes": 10, "warningMinutes": 10}, "warningMinutes"),
    ({"idleMinutes": 10, "warningMinutes": 11}, "warningMinutes"),
    ({"maxSessionMinutes": 20, "warningMinutes": 20}, "warningMinutes"),
    # a warning set as long as a 5-minute limit
    ({"idleMinutes": 5, "warningMinutes": 5}, "warningMinutes"),
    ({"maxSessionMinutes": 3, "warningMinutes": 3}, "warningMinutes"),
    ({"message": "m" * 513}, "message"),
]


def _at(path: str, value: str) -> Obj:
    """A status with ``value`` at ``path`` (dotted: ``notice.sentAt``)."""
    head, _, leaf = path.partition(".")
    return {head: {leaf: value}} if leaf else {head: value}


TIME_PATHS = [
    "stateChangedAt",
    "logonAt",
    "idleSince",
    "notice.sentAt",
    "notice.shownAt",
    "disconnect.requestedAt",
    "logoff.deadline",
]
#: RFC3339 times: taken.
GOOD_TIMES = ["2026-01-05T08:00:00Z", "2026-01-05T08:00:00.123456Z", "2026-01-05T10:00:00+02:00"]
#: Not times: refused.
BAD_TIMES = ["soon", "", "2026-02-30T08:00:00Z", "2026-01-05T25:00:00Z", "08:00 tomorrow"]


def full_path(path: str) -> str:
    return f"status.{path}"


def with_required(status: Obj) -> Obj:
    """The status with the required fields of notice, logoff and disconnect filled in where
    it has those objects (what it has wins)."""
    required: dict[str, Obj] = {
        "notice": {"message": "hello", "sentAt": GOOD_TIMES[0]},
        "logoff": {"message": "bye", "deadline": GOOD_TIMES[0]},
        "disconnect": {"requestedAt": GOOD_TIMES[0]},
    }
    return {
        name: {**required[name], **value} if name in required else value
        for name, value in status.items()
    }


# ---------------------------------------------------------------------------------------
# the model, on the same tables (no cluster)


@pytest.mark.parametrize(("limits", "stored"), VALID)
def test_the_model_takes_valid_limits(limits: Obj, stored: Obj) -> None:
    parsed = SessionLimits.model_validate(limits)
    assert parsed.model_dump(by_alias=True, exclude_none=True, mode="json") == stored


@pytest.mark.parametrize(("limits", "field"), INVALID)
def test_the_model_refuses_bad_limits(limits: Obj, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        SessionLimits.model_validate(limits)
    assert field in str(info.value), info.value


@pytest.mark.parametrize("path", TIME_PATHS)
def test_the_model_takes_rfc3339_and_refuses_garbage(path: str) -> None:
    for value in GOOD_TIMES:
        SessionRequestStatus.model_validate(with_required(_at(path, value)))
    for value in BAD_TIMES:
        with pytest.raises(ValidationError) as info:
            SessionRequestStatus.model_validate(with_required(_at(path, value)))
        assert path.split(".")[-1] in str(info.value), (value, info.value)


# ---------------------------------------------------------------------------------------
# the API server


def refused(kube: Kube, namespace: str, body: Obj) -> ApiError:
    with pytest.raises(ApiError) as info:
        kube.create(namespace, body)
    return info.value


def test_the_server_takes_valid_limits_with_defaults(kube: Kube, namespace: str) -> None:
    for index, (limits, stored) in enumerate(VALID):
        made = kube.create(namespace, pool(f"ok{index}", "BreadthFirst", 2, sessionLimits=limits))
        assert made["spec"]["sessionLimits"] == stored, limits
    # Absent: no limits, nothing defaulted.
    made = kube.create(namespace, pool("none", "BreadthFirst", 2))
    assert "sessionLimits" not in made["spec"]


def test_the_server_refuses_bad_limits_naming_the_field(kube: Kube, namespace: str) -> None:
    wrong: list[tuple[Any, ...]] = []
    for index, (limits, field) in enumerate(INVALID):
        body = pool(f"bad{index}", "BreadthFirst", 2, sessionLimits=limits)
        try:
            kube.create(namespace, body)
        except ApiError as error:
            if error.status != 422 or f"spec.sessionLimits.{field}" not in error.message:
                wrong.append((limits, error.status, error.message))
            continue
        wrong.append((limits, 201, "taken"))
    assert not wrong, wrong


def test_a_limit_changed_to_a_bad_value_is_refused(kube: Kube, namespace: str) -> None:
    """CEL on update too: a warning made as long as the limit is refused, the pool kept."""
    kube.create(namespace, pool("p", "BreadthFirst", 2, sessionLimits={"idleMinutes": 30}))
    patch = {"spec": {"sessionLimits": {"warningMinutes": 30}}}
    with pytest.raises(ApiError) as info:
        kube.merge_patch("HostPool", namespace, "p", patch)
    assert info.value.status == 422, info.value
    assert "spec.sessionLimits.warningMinutes" in info.value.message, info.value.message
    assert "less than idleMinutes" in info.value.message, info.value.message
    assert "warningMinutes" not in kube.get("HostPool", namespace, "p")["spec"]["sessionLimits"]


def test_request_times_take_rfc3339_and_refuse_garbage(kube: Kube, namespace: str) -> None:
    kube.create(namespace, request("r"))
    wrong: list[tuple[Any, ...]] = []
    for path in TIME_PATHS:
        for value in GOOD_TIMES:
            status = with_required(_at(path, value))
            written = kube.merge_patch(
                "SessionRequest", namespace, "r", {"status": status}, status=True
            )
            head, _, leaf = path.partition(".")
            stored = written["status"][head] if not leaf else written["status"][head][leaf]
            if stored != value:
                wrong.append((path, value, "stored as", stored))
        for value in BAD_TIMES:
            status = with_required(_at(path, value))
            try:
                kube.merge_patch("SessionRequest", namespace, "r", {"status": status}, status=True)
            except ApiError as error:
                if error.status != 422 or full_path(path) not in error.message:
                    wrong.append((path, value, error.status, error.message))
                continue
            wrong.append((path, value, "taken"))
    assert not wrong, wrong


def test_request_limit_objects_refuse_an_unknown_limit(kube: Kube, namespace: str) -> None:
    kube.create(namespace, request("r"))
    for name in ("notice", "disconnect", "logoff"):
        status = with_required({name: {"limit": "Lunch"}})
        with pytest.raises(ApiError) as info:
            kube.merge_patch("SessionRequest", namespace, "r", {"status": status}, status=True)
        assert info.value.status == 422, info.value
        assert f"status.{name}.limit" in info.value.message, info.value.message
        with pytest.raises(ValidationError):
            SessionRequestStatus.model_validate(status)


def minutes() -> st.SearchStrategy[int]:
    """Minutes near the bounds that matter: 0, 1, 60 and 10080."""
    return st.one_of(st.integers(-1, 70), st.integers(10070, 10090))


GENERATED_NAMES = itertools.count()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "disconnectedMinutes": minutes(),
            "idleMinutes": minutes(),
            "maxSessionMinutes": minutes(),
            "warningMinutes": minutes(),
            "idleAction": st.sampled_from(["Disconnect", "Logoff", "Sleep"]),
            "maxSessionAction": st.sampled_from(["Disconnect", "Logoff", "logoff"]),
            "message": st.integers(505, 520).map(lambda n: "m" * n),
        },
    )
)
def test_generated_limits_the_server_and_the_model_agree(
    kube: Kube, namespace: str, limits: Obj
) -> None:
    name = f"gen{next(GENERATED_NAMES)}"
    made = server_takes(kube, namespace, pool(name, "BreadthFirst", 2, sessionLimits=limits))
    if made is None:
        with pytest.raises(ValidationError):
            SessionLimits.model_validate(limits)
        return
    parsed = SessionLimits.model_validate(limits)
    stored = parsed.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert made["spec"]["sessionLimits"] == stored, limits


def server_takes(kube: Kube, namespace: str, body: Obj) -> Obj | None:
    """The object the API server created, or None when it refused it as invalid (422)."""
    try:
        made: Obj = kube.create(namespace, body)
    except ApiError as error:
        if error.status != 422:
            raise
        return None
    return made


@pytest.mark.parametrize(
    ("limits", "warning"),
    [
        ({}, 5),
        ({"idleMinutes": 30}, 5),
        ({"idleMinutes": 6}, 5),
        ({"idleMinutes": 5}, 4),
        ({"idleMinutes": 30, "maxSessionMinutes": 3}, 2),
        ({"idleMinutes": 1}, 0),
        ({"idleMinutes": 5, "warningMinutes": 2}, 2),
        ({"idleMinutes": 30, "warningMinutes": 0}, 0),
    ],
)
def test_the_default_warning_is_clamped_below_the_shorter_limit(limits: Obj, warning: int) -> None:
    assert SessionLimits.model_validate(limits).warning() == warning
