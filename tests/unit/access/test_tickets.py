"""The desktop relay's tickets: minted and read back, and every way one is refused
(tampered, another key, expired, malformed); used once only."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.access import tickets
from support.access_views import request_view

KEY = tickets.ticket_key(b"s" * 32)
NOW = 1_800_000_000.0
TICKET = tickets.Ticket(
    user="alice",
    namespace="desk",
    pool="pool-a",
    request="pool-a-alice-x1",
    uid="3f1c-uid",
    expires=int(NOW) + tickets.LIFETIME,
    id="rnd-1",
)


def test_a_ticket_reads_back() -> None:
    text = tickets.mint(KEY, TICKET)
    assert text.startswith("t1.")
    assert tickets.read(KEY, text, NOW) == TICKET


def test_the_key_is_derived_not_the_secret() -> None:
    assert tickets.ticket_key(b"s" * 32) != b"s" * 32
    assert tickets.ticket_key(b"s" * 32) != tickets.ticket_key(b"t" * 32)


@pytest.mark.parametrize(
    ("text", "now", "key"),
    [
        (tickets.mint(KEY, TICKET), NOW + tickets.LIFETIME, KEY),  # expired
        (tickets.mint(KEY, TICKET), NOW, tickets.ticket_key(b"o" * 32)),  # another key
        (tickets.mint(tickets.ticket_key(b"o" * 32), TICKET), NOW, KEY),  # forged
        ("", NOW, KEY),
        ("t1.", NOW, KEY),
        ("t1.abc", NOW, KEY),
        ("t1.!!!.###", NOW, KEY),
        ("t2." + tickets.mint(KEY, TICKET)[3:], NOW, KEY),
        (tickets.mint(KEY, TICKET) + "x" * 3000, NOW, KEY),
        ("t1.é.é", NOW, KEY),
    ],
)
def test_refused(text: str, now: float, key: bytes) -> None:
    with pytest.raises(tickets.TicketError):
        tickets.read(key, text, now)


def test_a_changed_field_breaks_the_mac() -> None:
    good = tickets.mint(KEY, TICKET)
    other = tickets.mint(KEY, dataclasses.replace(TICKET, user="mallory"))
    payload_of_other = other.split(".")[1]
    mac_of_good = good.split(".")[2]
    with pytest.raises(tickets.TicketError, match="signature"):
        tickets.read(KEY, f"t1.{payload_of_other}.{mac_of_good}", NOW)


def test_nothing_is_parsed_before_the_mac_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ticket of 2,008 characters whose payload is nested brackets: refused for its
    signature, its payload never read (the JSON parser would recurse past Python's limit)."""
    payload = tickets._b64(b"[" * 1_450)
    text = f"t1.{payload}.{tickets._b64(b'x' * 32)}"
    assert len(text) <= tickets.MAX_TICKET
    with pytest.raises(tickets.TicketError, match="signature"):
        tickets.read(KEY, text, NOW)

    def parsed(*_: object) -> None:
        raise AssertionError("the payload was parsed before its MAC was checked")

    monkeypatch.setattr(json, "loads", parsed)  # the module the tickets' code calls
    with pytest.raises(tickets.TicketError, match="signature"):
        tickets.read(KEY, tickets.mint(tickets.ticket_key(b"o" * 32), TICKET), NOW)


def test_a_well_signed_payload_of_the_wrong_shape_is_refused() -> None:
    payload = tickets._b64(b'["a","b"]')
    text = f"t1.{payload}.{tickets._b64(tickets._mac(KEY, payload))}"
    with pytest.raises(tickets.TicketError, match="not a ticket"):
        tickets.read(KEY, text, NOW)


def test_a_ticket_is_taken_once() -> None:
    used = tickets.UsedTickets()
    assert used.take(TICKET, NOW)
    assert not used.take(TICKET, NOW + 1)
    assert used.take(dataclasses.replace(TICKET, id="rnd-2"), NOW + 1)


def test_used_ids_are_forgotten_once_expired_and_bounded() -> None:
    used = tickets.UsedTickets(limit=2)
    assert used.take(TICKET, NOW)
    assert used.take(dataclasses.replace(TICKET, id="b"), NOW)
    assert not used.take(dataclasses.replace(TICKET, id="c"), NOW)  # full: refused
    later = NOW + tickets.LIFETIME + 1
    assert used.take(dataclasses.replace(TICKET, id="c", expires=int(later) + 30), later)
    assert set(used.used) == {"c"}


@given(st.text(max_size=300))
def test_any_text_is_read_or_refused(text: str) -> None:
    with contextlib.suppress(tickets.TicketError):
        tickets.read(KEY, text, NOW)


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_any_fields_round_trip(user: str, request: str) -> None:
    ticket = dataclasses.replace(TICKET, user=user, request=request)
    assert tickets.read(KEY, tickets.mint(KEY, ticket), NOW) == ticket


# ---------------------------------------------------------------------------------------
# admit: the relay's decision on a presented ticket


PLACED = request_view("pool-a-alice-x1", phase="Assigned", host="h1", address="10.0.0.7")
#: The ticket of PLACED (request_view's uid is u1), in pool desk of namespace ns.
MINE = dataclasses.replace(TICKET, namespace="ns", pool="desk", uid="u1")


def presented(text: str, **changes: object) -> tickets.Presented:
    base = tickets.Presented(
        text=text,
        user="alice",
        namespace="ns",
        pool="desk",
        port=3389,
        placed=PLACED,
        destination="10.0.0.7:3389",
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ticket", "changes", "expected"),
    [
        pytest.param(MINE, {}, PLACED, id="taken"),
        pytest.param(MINE, {"destination": None}, PLACED, id="no-destination-named"),
        pytest.param(MINE, {"destination": "10.0.0.7"}, PLACED, id="address-without-port"),
        pytest.param(None, {}, "TicketInvalid", id="not-a-ticket"),
        pytest.param(
            dataclasses.replace(MINE, expires=int(NOW)), {}, "TicketInvalid", id="expired"
        ),
        pytest.param(MINE, {"user": "bob"}, "TicketNotYours", id="another-user"),
        pytest.param(MINE, {"pool": "other"}, "TicketNotYours", id="another-pool"),
        pytest.param(MINE, {"namespace": "ns2"}, "TicketNotYours", id="another-namespace"),
        pytest.param(MINE, {"placed": None}, "SessionChanged", id="no-placed-request"),
        pytest.param(
            dataclasses.replace(MINE, uid="u0"), {}, "SessionChanged", id="request-replaced"
        ),
        pytest.param(MINE, {"destination": "10.0.0.8:3389"}, "DestinationRefused", id="other-host"),
        pytest.param(MINE, {"destination": "10.0.0.7:22"}, "DestinationRefused", id="other-port"),
    ],
)
def test_admit_decides_each_case(
    ticket: tickets.Ticket | None, changes: dict[str, object], expected: object
) -> None:
    text = tickets.mint(KEY, ticket) if ticket is not None else "t1.nothing.here"
    answer = tickets.admit(KEY, presented(text, **changes), NOW, tickets.UsedTickets())
    if isinstance(answer, tickets.Admitted):
        assert answer.ticket == ticket
        assert answer.placed == expected
    else:
        assert answer == expected


def test_admit_uses_a_ticket_up_once_it_is_known_to_be_the_callers() -> None:
    used = tickets.UsedTickets()
    text = tickets.mint(KEY, MINE)
    # Refused after the owner check: the ticket is spent all the same.
    assert tickets.admit(KEY, presented(text, placed=None), NOW, used) == "SessionChanged"
    assert tickets.admit(KEY, presented(text), NOW, used) == "TicketUsed"
    # Another caller's attempt spends nothing: its owner can still use it.
    other = tickets.mint(KEY, dataclasses.replace(MINE, id="rnd-2"))
    assert tickets.admit(KEY, presented(other, user="bob"), NOW, used) == "TicketNotYours"
    assert tickets.admit(KEY, presented(other), NOW, used) == tickets.Admitted(
        dataclasses.replace(MINE, id="rnd-2"), PLACED
    )
