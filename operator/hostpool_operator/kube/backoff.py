"""One back-off for every retry loop: exponential, capped, with full jitter.

A retry that waits exactly as long as its neighbours comes back together with them: every
informer of an operator restarted against a recovering API server, every pool whose plan
write was refused. Each wait is drawn at random between half the current step and the step
("equal jitter"), so waits spread while their mean still doubles; after ``reset`` (a try that
worked) the next wait starts from ``first`` again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class Backoff:
    #: The step of the first wait, in seconds.
    first: float = 0.5
    #: No wait is longer than this.
    cap: float = 30.0
    factor: float = 2.0
    #: Source of randomness (a seeded ``random.Random`` in tests).
    rng: random.Random = field(default_factory=random.Random, repr=False)
    _step: float = field(default=0.0, init=False)
    #: Waits handed out since the last reset: how many tries in a row failed.
    failures: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap or self.factor < 1:
            raise ValueError(
                f"bad back-off: first={self.first} cap={self.cap} factor={self.factor}"
            )
        self._step = self.first

    def next(self) -> float:
        """The wait before the next try; each call makes the one after it longer."""
        step = self._step
        self._step = min(self._step * self.factor, self.cap)
        self.failures += 1
        return step / 2 + self.rng.uniform(0, step / 2)

    def reset(self) -> None:
        """A try worked: the next failure waits ``first`` again."""
        self._step = self.first
        self.failures = 0
