"""The one back-off every retry loop uses: exponential, capped, jittered, reset on success."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.kube.backoff import Backoff


def test_steps_double_up_to_the_cap_and_each_wait_is_within_its_step() -> None:
    backoff = Backoff(first=1.0, cap=8.0, rng=random.Random(7))
    waits = [backoff.next() for _ in range(6)]
    for wait, step in zip(waits, [1, 2, 4, 8, 8, 8], strict=True):
        assert step / 2 <= wait <= step
    assert backoff.failures == 6


def test_reset_starts_again_from_the_first_step() -> None:
    backoff = Backoff(first=0.5, cap=30.0, rng=random.Random(1))
    for _ in range(5):
        backoff.next()
    backoff.reset()
    assert backoff.failures == 0
    assert 0.25 <= backoff.next() <= 0.5


def test_waits_of_neighbours_spread() -> None:
    """Loops that failed together must not all come back together."""
    waits = {round(Backoff(first=4.0, rng=random.Random(seed)).next(), 6) for seed in range(20)}
    assert len(waits) == 20


@pytest.mark.parametrize(("first", "cap", "factor"), [(0, 1, 2), (2, 1, 2), (1, 2, 0.5)])
def test_nonsense_is_refused(first: float, cap: float, factor: float) -> None:
    with pytest.raises(ValueError, match="bad back-off"):
        Backoff(first=first, cap=cap, factor=factor)


@given(
    first=st.floats(0.01, 10),
    ratio=st.floats(1, 100),
    factor=st.floats(1, 4),
    tries=st.integers(1, 60),
    seed=st.integers(0, 2**32),
)
def test_no_wait_is_ever_over_the_cap_or_under_half_the_first_step(
    first: float, ratio: float, factor: float, tries: int, seed: int
) -> None:
    backoff = Backoff(first=first, cap=first * ratio, factor=factor, rng=random.Random(seed))
    for _ in range(tries):
        wait = backoff.next()
        assert first / 2 <= wait <= first * ratio
