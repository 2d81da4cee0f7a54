"""The grace the operator gives a host's agent after a logoff's deadline before it finishes
the logoff itself: a ControllerSettings field, set by ``run --logoff-grace``."""

from __future__ import annotations

import pytest

from hostpool_operator.cli.errors import UsageError
from hostpool_operator.cli.parser import build_parser
from hostpool_operator.cli.run import settings_of
from hostpool_operator.controller.settings import ControllerSettings


def test_the_default_grace_outlasts_the_agents_retries() -> None:
    """Five minutes: the agent checks deadlines every few seconds and retries a failing
    logoff with a back-off (2 s doubling); a live agent is done long before."""
    assert ControllerSettings().logoff_grace == 300.0
    args = build_parser().parse_args(["run"])
    assert settings_of(args).logoff_grace == 300.0


@pytest.mark.parametrize(("given", "grace"), [("30", 30.0), ("0.5", 0.5), ("3600", 3600.0)])
def test_the_flag_sets_the_grace(given: str, grace: float) -> None:
    args = build_parser().parse_args(["run", "--logoff-grace", given])
    assert settings_of(args).logoff_grace == grace


@pytest.mark.parametrize("given", ["0", "-5"])
def test_a_grace_that_is_not_positive_is_refused_by_name(given: str) -> None:
    args = build_parser().parse_args(["run", "--logoff-grace", given])
    with pytest.raises(UsageError, match="--logoff-grace must be positive"):
        settings_of(args)
