"""How many browser desktops are open through this replica, per user and in all: one
signed-in user must not hold the relay's sockets and event loop with desktops nobody looks
at, nor can the replica take more than its share. A relay is counted from its upgrade to its
end; one over a limit is refused before the WebSocket opens."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

#: Desktops one user may have open at once through one replica (a person with a few tabs).
PER_USER = 4
#: Desktops open through one replica at once.
TOTAL = 1_000


@dataclass
class OpenDesktops:
    per_user: int = PER_USER
    total: int = TOTAL
    by_user: Counter[str] = field(default_factory=Counter)

    @property
    def open(self) -> int:
        return sum(self.by_user.values())

    def refusal(self, user: str) -> str | None:
        """Why ``user`` may not open one more now (None: they may)."""
        if self.by_user[user] >= self.per_user:
            return "TooManyDesktops"
        if self.open >= self.total:
            return "RelayBusy"
        return None

    def opened(self, user: str) -> None:
        self.by_user[user] += 1

    def closed(self, user: str) -> None:
        self.by_user[user] -= 1
        if self.by_user[user] <= 0:
            del self.by_user[user]
