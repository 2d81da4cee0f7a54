"""The broker's limits on browser desktops, as flags: defaults, taken, and refused when
they would let no desktop open."""

from __future__ import annotations

import pytest

from hostpool_operator.broker.program import parse_args
from hostpool_operator.broker.relay.open_desktops import PER_USER, TOTAL

REQUIRED = ["--oidc-issuer", "https://idp.example/realms/corp", "--oidc-audience", "desks"]


def test_the_limits_default_and_are_taken() -> None:
    web = parse_args(REQUIRED).web
    assert (web.max_per_user, web.max_total) == (PER_USER, TOTAL)
    given = parse_args([*REQUIRED, "--max-web-desktops-per-user", "2", "--max-web-desktops", "50"])
    assert (given.web.max_per_user, given.web.max_total) == (2, 50)


@pytest.mark.parametrize("flag", ["--max-web-desktops-per-user", "--max-web-desktops"])
def test_a_limit_below_one_is_refused(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*REQUIRED, flag, "0"])
    assert "must be at least 1" in capsys.readouterr().err
