"""The broker's pure decisions: request names, entitlements, the connect decision and its
answers, the .rdp file, the per-user rate limit."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator import api
from hostpool_operator.access import connect
from hostpool_operator.access.connect import Caller
from hostpool_operator.access.names import is_namespace, is_object_name, request_name
from hostpool_operator.access.ratelimit import RateLimit
from hostpool_operator.access.rdp import rdp_file
from hostpool_operator.access.views import HostView, PoolView, RequestView
from support.access_views import pool_view, request_view

ALICE = connect.Caller("alice", frozenset({"finance-desk"}))
BOB = connect.Caller("bob", frozenset())


#: A logoff as the operator writes it (status.logoff), and a request's deletionTimestamp.
LOGOFF = {"deadline": "2026-12-01T10:00:00Z"}
DELETED_AT = "2026-12-01T10:00:00Z"


# ---------------------------------------------------------------------------------- names


@given(st.text(max_size=300).filter(bool), st.text(min_size=1, max_size=63))
def test_request_names_are_valid_object_names(user: str, pool: str) -> None:
    name = request_name("ns", pool, user)
    assert is_object_name(name), name
    assert name == request_name("ns", pool, user)


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_request_names_differ_for_different_users(a: str, b: str) -> None:
    if a != b:
        assert request_name("ns", "desk", a) != request_name("ns", "desk", b)


def test_request_names_differ_by_pool_namespace_and_case() -> None:
    names = {
        request_name("ns", "desk", "alice"),
        request_name("ns", "desk2", "alice"),
        request_name("ns2", "desk", "alice"),
        request_name("ns", "desk", "Alice"),
    }
    assert len(names) == 4
    assert request_name("ns", "desk", "Alice@Corp.example").startswith("alice-corp-example-")
    assert request_name("ns", "desk", "@@@").startswith("u-")


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("desk", True),
        ("a.b-c", True),
        ("..", False),
        ("../x", False),
        ("A", False),
        ("", False),
        ("x" * 253, True),
        ("x" * 254, False),
        ("a/b", False),
        ("-a", False),
    ],
)
def test_object_names(text: str, ok: bool) -> None:
    assert is_object_name(text) is ok


def test_namespaces_are_labels() -> None:
    assert is_namespace("team-a")
    assert not is_namespace("a.b")
    assert not is_namespace("x" * 64)


# ---------------------------------------------------------------------------------- entitlements


@pytest.mark.parametrize(
    ("users", "groups", "caller", "admitted"),
    [
        (None, None, ALICE, False),  # no entitlements: nobody
        ([], [], ALICE, False),  # empty lists: nobody
        (["alice"], [], ALICE, True),
        (["Alice"], [], ALICE, False),  # exact names
        ([], ["finance-desk"], ALICE, True),
        ([], ["finance-desk"], BOB, False),
        (["bob"], ["finance-desk"], BOB, True),
        ([], ["other"], ALICE, False),
    ],
)
def test_entitlements(
    users: list[str] | None, groups: list[str] | None, caller: connect.Caller, admitted: bool
) -> None:
    assert pool_view(users, groups).admits(caller.user, caller.groups) is admitted


# ---------------------------------------------------------------------------------- decide


def test_decide_not_found_for_missing_and_unentitled_pools() -> None:
    assert isinstance(connect.decide("ns", "desk", None, ALICE, []), connect.NotFound)
    assert isinstance(connect.decide("ns", "desk", pool_view(["bob"]), ALICE, []), connect.NotFound)


def test_decide_creates_the_users_request_by_its_name() -> None:
    decision = connect.decide("ns", "desk", pool_view(["alice"]), ALICE, [])
    assert decision == connect.Create(request_name("ns", "desk", "alice"))


def test_decide_reuses_a_live_request_preferring_the_placed_one() -> None:
    pending = request_view("a-pending", phase="Pending")
    placed = request_view("z-placed", phase="Assigned", host="h1", address="10.0.0.1")
    decision = connect.decide("ns", "desk", pool_view(["alice"]), ALICE, [pending, placed])
    assert decision == connect.Reuse(placed)


def test_decide_replaces_a_failed_request_and_waits_for_an_ending_one() -> None:
    name = request_name("ns", "desk", "alice")
    failed = request_view(name, phase="Failed", reason="HostLost")
    assert connect.decide("ns", "desk", pool_view(["alice"]), ALICE, [failed]) == connect.Create(
        name, replaces=failed
    )
    for ending in (
        request_view(name, phase="Assigned", logoff=LOGOFF),
        request_view(name, deleted_at=DELETED_AT),
    ):
        assert connect.decide(
            "ns", "desk", pool_view(["alice"]), ALICE, [ending]
        ) == connect.Ending(ending)
    # A failed request of another name (made by hand) does not stop a new one.
    other = request_view("by-hand", phase="Failed")
    assert isinstance(
        connect.decide("ns", "desk", pool_view(["alice"]), ALICE, [other]), connect.Create
    )


# ---------------------------------------------------------------------------------- answers


def test_answer_placed_new_and_reconnected() -> None:
    pool = pool_view(["alice"], connection={"port": 3390})
    placed = request_view("r", phase="Assigned", host="h1", address="10.0.0.1", reason="NewSession")
    new = connect.answer(placed, pool, ALICE, reused=False)
    assert new.status == 200
    assert new.body["reason"] == "NewSession"
    assert (new.body["host"], new.body["address"], new.body["port"]) == ("h1", "10.0.0.1", 3390)
    assert "full address:s:10.0.0.1:3390\r\n" in new.body["rdpFile"]
    assert connect.answer(placed, pool, ALICE, reused=True).body["reason"] == "Reconnected"
    operator_said = request_view(
        "r", phase="Assigned", host="h1", address="a", reason="Reconnected"
    )
    assert connect.answer(operator_said, pool, ALICE, reused=False).body["reason"] == "Reconnected"


@pytest.mark.parametrize(
    ("view", "status", "reason", "retry"),
    [
        (request_view(phase="Pending", reason="PoolSaturated"), 202, "PoolSaturated", 10),
        (request_view(phase="Pending", reason="HostsStarting"), 202, "HostsStarting", 5),
        (request_view(), 202, "Pending", 2),
        (request_view(phase="Failed", reason="HostLost"), 202, "HostLost", 1),
        (request_view(phase="Assigned", host="h1"), 503, "HostAddressUnknown", 5),
        (
            request_view(phase="Assigned", host="h", address="a", logoff=LOGOFF),
            200,
            "NewSession",
            None,
        ),
        (request_view(phase="Pending", deleted_at=DELETED_AT), 202, "SessionEnding", 2),
    ],
)
def test_answer_while_not_placed(
    view: RequestView, status: int, reason: str, retry: int | None
) -> None:
    got = connect.answer(view, pool_view(["alice"]), ALICE, reused=False)
    assert (got.status, got.reason, got.retry_after) == (status, reason, retry)
    if status == 202:
        assert got.body == {"request": view.name, "phase": got.body["phase"], "reason": reason}


def test_pool_entry() -> None:
    entry = connect.pool_entry(pool_view(["alice"], free=0), [])
    assert entry == {
        "namespace": "ns",
        "name": "desk",
        "loadBalancerType": "DepthFirst",
        "available": False,
        "session": None,
        "displayName": "desk",
        "web": False,
        "singleSignOn": False,
        "hostsStarting": False,
        "type": "Pooled",
    }
    placed = request_view("r", phase="Assigned", host="h1", address="a")
    entry = connect.pool_entry(pool_view(["alice"], free=None), [placed])
    assert entry["available"] is False
    assert entry["session"] == {
        "request": "r",
        "host": "h1",
        "state": "Assigned",
        "disconnectRequestedAt": None,
    }
    assert connect.pool_entry(pool_view(["alice"]), [])["available"] is True


def test_views_tolerate_malformed_status() -> None:
    view = RequestView.from_api(
        {"metadata": {"name": "r"}, "spec": {}, "status": {"phase": "Weird", "host": 5}}
    )
    assert (view.phase, view.host, view.user) == (None, None, "")
    assert HostView.from_api({"metadata": {"name": "h"}, "status": {"agent": {}}}).has_agent
    with pytest.raises(ValueError, match="spec"):
        PoolView.from_api({"metadata": {"name": "p"}, "spec": {"loadBalancer": {"type": "X"}}})


# ---------------------------------------------------------------------------------- .rdp


def test_rdp_file_carries_the_pools_settings_and_gateway() -> None:
    connection = api.Connection.model_validate(
        {
            "port": 3389,
            "rdpProperties": "audiomode:i:0;redirectclipboard:i:1;;drivestoredirect:s:*",
            "gateway": {"hostname": "rdgw.corp.example"},
        }
    )
    text = rdp_file("10.0.0.7", "alice", connection)
    assert text.endswith("\r\n")
    assert text.split("\r\n")[:-1] == [
        "full address:s:10.0.0.7:3389",
        "username:s:alice",
        "audiomode:i:0",
        "drivestoredirect:s:*",
        # The pool's clipboard (Enabled by default), written once by the broker.
        "redirectclipboard:i:1",
        "gatewayhostname:s:rdgw.corp.example",
        "gatewayusagemethod:i:1",
        "gatewayprofileusagemethod:i:1",
    ]


def test_rdp_file_ipv6_and_a_user_with_a_line_break() -> None:
    assert rdp_file("fd00::7", "eve", api.Connection()).startswith(
        "full address:s:[fd00::7]:3389\r\n"
    )
    # A line break is refused, never written (tests/unit/access/test_rdp_file.py: all values).
    with pytest.raises(ValueError, match="username"):
        rdp_file("fd00::7", "eve\r\nfull address:s:evil:1", api.Connection())


@pytest.mark.parametrize(
    "text",
    [
        "audiomode",
        "audiomode:i:x",
        "a:q:1",
        "full address:s:x:1",
        "UserName:s:x",
        ":s:x",
        "server port:i:1",
        "GatewayHostname:s:x",
    ],
)
def test_rdp_properties_refused(text: str) -> None:
    with pytest.raises(ValueError, match="rdpProperties"):
        api.parse_rdp_properties(text)
    with pytest.raises(ValueError, match="rdpProperties"):
        api.Connection.model_validate({"rdpProperties": text})


@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[a-z][a-z0-9 ]{0,15}", fullmatch=True),
            st.sampled_from(["i", "s", "b"]),
            st.integers(-5, 10**6),
        ),
        max_size=8,
    )
)
def test_rdp_properties_round_trip(items: list[tuple[str, str, int]]) -> None:
    items = [(n, t, v) for n, t, v in items if n.lower() not in api.BROKER_RDP_PROPERTIES]
    values: dict[str, Callable[[int], str]] = {
        "i": str,
        "s": lambda v: f"v{v}",
        "b": lambda v: format(abs(v), "x"),
    }
    text = ";".join(f"{n}:{t}:{values[t](v)}" for n, t, v in items)
    parsed = api.parse_rdp_properties(text)
    assert [(n, str(t), v) for n, t, v in parsed] == [(n, t, values[t](v)) for n, t, v in items]


# ---------------------------------------------------------------------------------- rate limit


def test_rate_limit_burst_then_rate_per_user() -> None:
    limit = RateLimit(rate=2.0, burst=3)
    assert [limit.take("alice", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.take("alice", 0.0) == pytest.approx(0.5)
    assert limit.take("bob", 0.0) == 0.0  # another user has a bucket of their own
    assert limit.take("alice", 0.5) == 0.0  # one token back after 0.5 s
    assert limit.take("alice", 0.5) > 0


def test_rate_limit_memory_is_bounded() -> None:
    limit = RateLimit(rate=1.0, burst=1, max_users=100)
    for i in range(1000):
        limit.take(f"user-{i}", float(i) / 1000)
    assert len(limit) <= 100


@pytest.mark.parametrize(
    ("pool", "caller", "entitled"),
    [
        pytest.param(None, Caller("alice", frozenset()), False, id="no-such-pool"),
        pytest.param(pool_view(["alice"]), Caller("alice", frozenset()), True, id="named-user"),
        pytest.param(pool_view(["alice"]), Caller("bob", frozenset()), False, id="another-user"),
        pytest.param(
            pool_view(groups=["desk"]), Caller("bob", frozenset({"desk"})), True, id="group"
        ),
        pytest.param(pool_view(), Caller("anyone", frozenset()), False, id="no-entitlements"),
    ],
)
def test_the_entitled_pool_is_the_callers_own_else_none(
    pool: PoolView | None, caller: Caller, entitled: bool
) -> None:
    """Every route's "entitled pool" (the connect, the end of a session, the relay, the
    desktop page) is this one rule."""
    assert connect.entitled(pool, caller) is (pool if entitled else None)
