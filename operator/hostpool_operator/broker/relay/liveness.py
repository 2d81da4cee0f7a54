"""Is the browser at the other end of a relayed desktop still there?

A ping answered within a few seconds is the usual test, but on a relayed desktop the ping
queues behind the desktop's own data: a busy browser (20 desktops drawing in one headless
chromium on two cores) reads megabytes of backlog before it sees the ping, so its pong
comes late while it is plainly alive. So any sign that the browser takes part counts as an
answer: a message or a pong from it, a send to it that completed, or the socket's send
queue shrinking (the browser's side acknowledged data). The relay pings only after a quiet
spell, and takes the browser for gone when nothing at all happened for as long again after
the ping. A browser that vanished (network gone, machine asleep) gives none of these signs:
its sends back up and the queue stops shrinking.

Pure: the relay passes the clock and the send queue's length in.
"""

from __future__ import annotations

import enum
from dataclasses import InitVar, dataclass, field


class Due(enum.Enum):
    NOTHING = "nothing"
    PING = "ping"
    GONE = "gone"


@dataclass
class BrowserLiveness:
    """The relay's view of one browser; ``quiet`` seconds without a sign before a ping,
    ``answer`` seconds after the ping without one before the browser counts as gone."""

    now: InitVar[float]
    quiet: float = 30.0
    answer: float = 30.0
    last_sign: float = field(init=False)
    pinged_at: float | None = field(default=None, init=False)
    _queued: int | None = field(default=None, init=False)

    def __post_init__(self, now: float) -> None:
        self.last_sign = now

    def sign(self, now: float) -> None:
        """The browser took part: a message, a pong, a completed send."""
        self.last_sign = max(self.last_sign, now)
        self.pinged_at = None

    def queue(self, now: float, queued: int | None) -> None:
        """The socket's unacknowledged bytes now (None where it cannot be read): a shorter
        queue than last time is a sign."""
        if queued is not None and self._queued is not None and queued < self._queued:
            self.sign(now)
        self._queued = queued

    def due(self, now: float) -> Due:
        """What the relay should do now; after ``PING`` it calls :meth:`pinged`."""
        if self.pinged_at is not None:
            return Due.GONE if now - self.pinged_at >= self.answer else Due.NOTHING
        return Due.PING if now - self.last_sign >= self.quiet else Due.NOTHING

    def pinged(self, now: float) -> None:
        self.pinged_at = now
