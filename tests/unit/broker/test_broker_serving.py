"""The broker's pure serving rules: Retry-After with jitter, log values kept on their line,
and the serving flags (metrics address, header timeout, user names in the log)."""

from __future__ import annotations

import argparse
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.broker.gate import jittered, printable
from hostpool_operator.broker.program import parse_args

REQUIRED = ["--oidc-issuer", "https://idp.example/realms/corp", "--oidc-audience", "desk"]


def parse(*argv: str) -> argparse.Namespace:
    return parse_args([*REQUIRED, *argv])


# ---------------------------------------------------------------------------------------
# Retry-After


@pytest.mark.parametrize(
    ("seconds", "draw", "expected"),
    [
        (1, 0.0, 1),
        (1, 0.49, 1),
        (1, 0.5, 2),
        (1, 0.999, 2),
        (2, 0.0, 2),
        (2, 0.999, 3),
        (5, 0.0, 5),
        (5, 0.34, 6),
        (5, 0.999, 7),
        (60, 0.999, 90),
    ],
)
def test_jitter_table(seconds: int, draw: float, expected: int) -> None:
    assert jittered(seconds, draw) == expected


@given(st.integers(1, 3600), st.floats(0, 1, exclude_max=True))
def test_jitter_is_never_sooner_and_at_most_half_again(seconds: int, draw: float) -> None:
    got = jittered(seconds, draw)
    assert isinstance(got, int)
    assert seconds <= got <= seconds + max(1, seconds // 2)


@pytest.mark.parametrize("seconds", [1, 2, 5, 30])
def test_ten_thousand_clients_told_to_come_back_are_spread(seconds: int) -> None:
    """The many clients a replica refuses in one second (a 503 while it starts, a 429) do
    not all come back in the same second: every value of the range is used, none by more
    than about an even share."""
    draws = random.Random(37)
    told = Counter(jittered(seconds, draws.random()) for _ in range(10_000))
    values = list(range(seconds, seconds + max(1, seconds // 2) + 1))
    assert sorted(told) == values
    assert max(told.values()) < 10_000 / len(values) * 1.2


# ---------------------------------------------------------------------------------------
# log values


@pytest.mark.parametrize(
    ("text", "logged"),
    [
        ("desk", "desk"),
        ("x\n1999-01-01 INFO forged", "x\\n1999-01-01 INFO forged"),
        ("p\r\nforged", "p\\r\\nforged"),
        ("tab\there", "tab\\there"),
        ("back\\slash", "back\\\\slash"),
        ("sep\u2028line", "sep\\u2028line"),
        ("nul\x00", "nul\\x00"),
        ("ünïcode", "ünïcode"),
    ],
)
def test_printable_table(text: str, logged: str) -> None:
    assert printable(text) == logged


@given(st.text(max_size=300))
def test_printable_is_always_one_line(text: str) -> None:
    logged = printable(text)
    assert logged.isprintable()
    assert len(logged.splitlines()) <= 1
    assert printable(text, limit=10) == printable(text[:10], limit=10)


# ---------------------------------------------------------------------------------------
# flags


def test_serving_defaults() -> None:
    args = parse()
    assert (args.listen_host, args.listen_port) == ("0.0.0.0", 8443)
    assert args.metrics_address is None
    assert args.header_timeout_seconds == 10.0
    assert args.log_users is False


def test_serving_flags() -> None:
    args = parse(
        "--listen",
        "127.0.0.1:9443",
        "--metrics-listen",
        ":9090",
        "--header-timeout-seconds",
        "3",
        "--log-users",
    )
    assert (args.listen_host, args.listen_port) == ("127.0.0.1", 9443)
    assert args.metrics_address == ("0.0.0.0", 9090)
    assert args.header_timeout_seconds == 3.0
    assert args.log_users is True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--metrics-listen", "9090"], "--metrics-listen must be HOST:PORT"),
        (["--metrics-listen", "0.0.0.0:0"], "--metrics-listen must be HOST:PORT"),
        (["--metrics-listen", "0.0.0.0:8443"], "another port than --listen"),
        (["--listen", "x:70000"], "--listen must be HOST:PORT"),
        (["--header-timeout-seconds", "0"], "--header-timeout-seconds must be in (0, 300]"),
        (["--header-timeout-seconds", "301"], "--header-timeout-seconds must be in (0, 300]"),
    ],
)
def test_bad_serving_flags_are_clear_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
