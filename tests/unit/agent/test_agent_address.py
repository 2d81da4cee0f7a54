"""The agent reports only an address the API accepts: ``--address`` is checked with the
API's own rule (an IP address or a DNS name) before the agent starts."""

from __future__ import annotations

import pytest

from hostpool_operator.agent.program import parse_args


@pytest.mark.parametrize("address", ["10.0.0.5", "fd00::5", "rds-01.corp.example"])
def test_an_address_is_taken(address: str) -> None:
    assert parse_args(["--host", "h1", "--address", address]).address == address


@pytest.mark.parametrize(
    "address",
    ["10.0.0.5\r\ndrivestoredirect:s:*", "10.0.0.5\n", "[fd00::5]", "rds:3389", "10.0.0.256", ""],
)
def test_anything_else_is_refused_naming_the_flag(
    address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--host", "h1", "--address", address])
    assert exited.value.code == 2
    assert "--address: " in capsys.readouterr().err
