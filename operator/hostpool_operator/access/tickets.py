"""One-use tickets for the browser's desktop relay.

The page asks for a ticket (signed in, its CSRF header checked) and hands it to the web
client, which sends it in its first relay message; the relay takes the ticket only from the
caller it names, for the pool and the very request (name and uid) it names, before it
expires, and only once. A ticket is an HMAC-SHA256 over its fields with a key every replica
derives from the same secret, so any replica can check it. Which tickets were used each
replica keeps (see :class:`UsedTickets`), and the broker records each use in the cluster
too, so that a ticket is good once across replicas (``broker.relay.ticket_ledger``).

Pure: the caller passes the clock and the random id. :func:`admit` is the relay's whole
decision on a presented ticket: the request to relay to, or the refusal's reason."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Literal

from .views import RequestView

#: Seconds a ticket is good for: the page uses it at once.
LIFETIME = 30
#: The largest ticket read (longer ones are refused unread).
MAX_TICKET = 2048
_PREFIX = "t1."
_CONTEXT = b"hostpool-operator desktop relay ticket v1"


def ticket_key(secret: bytes) -> bytes:
    """The tickets' key, derived from a secret (the portal's cookie secret, or the
    broker's ticket secret): never the secret itself, so a ticket says nothing about it."""
    return hmac.new(secret, _CONTEXT, hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class Ticket:
    user: str
    namespace: str
    pool: str
    request: str
    uid: str
    expires: int
    id: str


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, payload: str) -> bytes:
    return hmac.new(key, _CONTEXT + b"\n" + payload.encode("ascii"), hashlib.sha256).digest()


def mint(key: bytes, ticket: Ticket) -> str:
    """The ticket as the page gets it: ``t1.<payload>.<mac>`` (base64url)."""
    fields = [
        ticket.user,
        ticket.namespace,
        ticket.pool,
        ticket.request,
        ticket.uid,
        ticket.expires,
        ticket.id,
    ]
    payload = _b64(json.dumps(fields, separators=(",", ":")).encode())
    return f"{_PREFIX}{payload}.{_b64(_mac(key, payload))}"


class TicketError(ValueError):
    """A ticket that is not taken (the message says why; it never repeats the ticket)."""


def read(key: bytes, text: str, now: float) -> Ticket:
    """The ticket ``text`` stands for, once its MAC and expiry are right."""
    if len(text) > MAX_TICKET or not text.startswith(_PREFIX) or not text.isascii():
        raise TicketError("not a ticket")
    payload, dot, mac = text[len(_PREFIX) :].partition(".")
    if not dot:
        raise TicketError("not a ticket")
    try:
        given = _unb64(mac)
    except ValueError:
        raise TicketError("not a ticket") from None
    # The MAC first: nothing a stranger wrote is parsed (a payload of nested brackets would
    # take the JSON parser past Python's recursion limit).
    if not hmac.compare_digest(given, _mac(key, payload)):
        raise TicketError("the ticket's signature is wrong")
    try:
        fields = json.loads(_unb64(payload))
    except ValueError:
        raise TicketError("not a ticket") from None
    if (
        not isinstance(fields, list)
        or len(fields) != 7
        or not all(isinstance(f, str) for i, f in enumerate(fields) if i != 5)
        or not isinstance(fields[5], int)
        or isinstance(fields[5], bool)
    ):
        raise TicketError("not a ticket")
    ticket = Ticket(*fields)
    if now >= ticket.expires:
        raise TicketError("the ticket has expired")
    return ticket


@dataclass
class UsedTickets:
    """The ids of the tickets this replica took, kept until they expire (a used ticket
    cannot come back later: it is expired by then). At most :attr:`limit` are held; past
    that new ones are refused rather than old ones forgotten."""

    limit: int = 100_000
    used: dict[str, int] = field(default_factory=dict)
    next_prune: float = 0.0

    def take(self, ticket: Ticket, now: float) -> bool:
        """Whether ``ticket`` is taken now (False: used before, or too many held)."""
        if now >= self.next_prune or len(self.used) >= self.limit:
            self.used = {i: e for i, e in self.used.items() if e > now}
            self.next_prune = now + LIFETIME
        if ticket.id in self.used or len(self.used) >= self.limit:
            return False
        self.used[ticket.id] = ticket.expires
        return True


#: Why a presented ticket is refused, in the order they are checked.
Refusal = Literal[
    "TicketInvalid", "TicketNotYours", "TicketUsed", "SessionChanged", "DestinationRefused"
]


@dataclass(frozen=True, slots=True)
class Presented:
    """A ticket as the relay gets it, with what the relay knows of the caller: who they
    are, the pool they opened (and its RDP port), their placed request there now (None:
    none) and the destination their client names (None: none named)."""

    text: str
    user: str
    namespace: str
    pool: str
    port: int
    placed: RequestView | None
    destination: str | None


@dataclass(frozen=True, slots=True)
class Admitted:
    """A ticket taken: the ticket and the placed request to relay to."""

    ticket: Ticket
    placed: RequestView


def admit(key: bytes, presented: Presented, now: float, used: UsedTickets) -> Admitted | Refusal:
    """The ticket and the placed request to relay to, or why not. A ticket is used up once
    it is known to be this caller's, whatever is refused after that: a ticket that reached
    the wrong session cannot be tried again."""
    try:
        ticket = read(key, presented.text, now)
    except TicketError:
        return "TicketInvalid"
    if (ticket.user, ticket.namespace, ticket.pool) != (
        presented.user,
        presented.namespace,
        presented.pool,
    ):
        return "TicketNotYours"
    if not used.take(ticket, now):
        return "TicketUsed"
    placed = presented.placed
    if placed is None or (placed.name, placed.uid) != (ticket.request, ticket.uid):
        return "SessionChanged"
    allowed = (f"{placed.address}:{presented.port}", str(placed.address))
    if presented.destination is not None and presented.destination not in allowed:
        return "DestinationRefused"
    return Admitted(ticket, placed)


__all__ = [
    "LIFETIME",
    "MAX_TICKET",
    "Admitted",
    "Presented",
    "Refusal",
    "Ticket",
    "TicketError",
    "UsedTickets",
    "admit",
    "mint",
    "read",
    "ticket_key",
]
