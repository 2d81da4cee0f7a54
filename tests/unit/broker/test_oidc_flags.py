"""The broker's OIDC flags: an issuer must be an https URL (plain http only when asked for
by name), the authorized parties, and the key set's lifetime, as parsed and as handed to
the verifier."""

from __future__ import annotations

import argparse

import pytest

from hostpool_operator.broker.program import oidc_settings, parse_args

REQUIRED = ["--oidc-audience", "hostpool-desktops"]


def parse(*argv: str) -> argparse.Namespace:
    return parse_args([*REQUIRED, *argv])


@pytest.mark.parametrize(
    "issuer",
    [
        "http://idp.example/realms/corp",
        "HTTP://idp.example/realms/corp",
        "idp.example/realms/corp",
        "ftp://idp.example/realms/corp",
        "https://",
        "https:///realms/corp",
        "https://idp.example/realms/corp?x=1",
        "https://idp.example/realms/corp#top",
        "https://user@idp.example/realms/corp",
    ],
)
def test_an_issuer_that_is_not_an_https_url_is_a_clear_error(
    issuer: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse("--oidc-issuer", issuer)
    assert exited.value.code == 2
    assert "--oidc-issuer" in capsys.readouterr().err


def test_a_plain_http_issuer_only_with_the_flag_that_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse("--oidc-issuer", "http://127.0.0.1:8080/realms/corp")
    assert "--oidc-allow-insecure-issuer" in capsys.readouterr().err
    args = parse(
        "--oidc-issuer", "http://127.0.0.1:8080/realms/corp", "--oidc-allow-insecure-issuer"
    )
    assert oidc_settings(args).issuer == "http://127.0.0.1:8080/realms/corp"
    with pytest.raises(SystemExit):  # the flag allows http, not anything
        parse("--oidc-issuer", "idp.example", "--oidc-allow-insecure-issuer")


def test_the_issuer_is_kept_exactly_as_given() -> None:
    for issuer in ("https://idp.example/realms/corp", "https://idp.example/realms/corp/"):
        assert oidc_settings(parse("--oidc-issuer", issuer)).issuer == issuer


def test_defaults_and_the_new_settings() -> None:
    settings = oidc_settings(parse("--oidc-issuer", "https://idp.example"))
    assert settings.authorized_parties == ()
    assert settings.keys_max_age == 300.0
    assert settings.keys_max_stale == 3600.0
    settings = oidc_settings(
        parse(
            "--oidc-issuer",
            "https://idp.example",
            "--oidc-authorized-party",
            "rdp-portal",
            "--oidc-authorized-party",
            "rdp-client",
            "--oidc-keys-max-age-seconds",
            "30",
            "--oidc-keys-max-stale-seconds",
            "0",
        )
    )
    assert settings.authorized_parties == ("rdp-portal", "rdp-client")
    assert (settings.keys_max_age, settings.keys_max_stale) == (30.0, 0.0)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--oidc-keys-max-age-seconds", "0"], "--oidc-keys-max-age-seconds"),
        (["--oidc-keys-max-age-seconds", "-1"], "--oidc-keys-max-age-seconds"),
        (["--oidc-keys-max-stale-seconds", "-1"], "--oidc-keys-max-stale-seconds"),
        (["--oidc-authorized-party", ""], "--oidc-authorized-party"),
    ],
)
def test_bad_values_name_their_flag(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse("--oidc-issuer", "https://idp.example", *argv)
    assert named in capsys.readouterr().err
