"""`hostpool-logon`, the host's single sign-on verifier, as PAM runs it: the credential from
stdin and the user from PAM_USER. Forged, other-host, other-user, expired and replayed
credentials are refused (a replay also after a restart: the record is a file), an account or
home of another uid is never taken over, and no refusal writes the credential anywhere.

The accepted logons here use the machine's ``nobody`` (it exists, with a uid of a person's
range and no home), so that no account is made on the machine running the tests; the
account made at a first logon is the desktop tests' (real xrdp hosts)."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hostpool_operator.agent import signon
from hostpool_operator.agent.logon_refusals import REFUSALS_FILE, Refusal, refusals_after
from hostpool_operator.api.host import LogonRefusal
from hostpool_operator.logon import credential

KEY = Ed25519PrivateKey.from_private_bytes(b"b" * 32)
FORGER = Ed25519PrivateKey.from_private_bytes(b"f" * 32)
HOST = "desk-1"
NOBODY = pwd.getpwnam("nobody")


def mint(
    user: str, uid: int, *, host: str = HOST, key: Ed25519PrivateKey = KEY, at: float | None = None
) -> str:
    now = int(time.time() if at is None else at)
    grant = credential.Grant(user=user, host=host, request_uid="req-uid", uid=uid)
    return credential.mint(key, grant, now, 60, os.urandom(credential.NONCE_BYTES))


@pytest.fixture
def settings(tmp_path: Path) -> signon.Settings:
    keys = tmp_path / "keys.pem"
    keys.write_bytes(credential.public_pem(KEY))
    homes = tmp_path / "homes"
    homes.mkdir()
    return signon.Settings(HOST, keys, tmp_path / "state", homes, None)


@pytest.mark.parametrize(
    ("user", "uid", "account", "problem"),
    [
        pytest.param("alice", 20001, signon.Account(None, None), None, id="new"),
        pytest.param("alice", 20001, signon.Account(20001, 20001), None, id="own"),
        pytest.param("alice", 20001, signon.Account(20002, None), "UidMismatch", id="other-uid"),
        pytest.param(
            "alice", 20001, signon.Account(None, 0), "HomeOwnedByAnotherUser", id="root-home"
        ),
        pytest.param(
            "alice", 20001, signon.Account(20001, 20002), "HomeOwnedByAnotherUser", id="moved"
        ),
        pytest.param("Alice", 20001, signon.Account(None, None), "InvalidUserName", id="upper"),
        pytest.param("-x", 20001, signon.Account(None, None), "InvalidUserName", id="option"),
        pytest.param("a/b", 20001, signon.Account(None, None), "InvalidUserName", id="slash"),
        pytest.param("", 20001, signon.Account(None, None), "InvalidUserName", id="empty"),
    ],
)
def test_account_problems(
    user: str, uid: int, account: signon.Account, problem: str | None
) -> None:
    assert signon.account_problem(user, uid, account) == problem


def test_a_credential_signs_on_once_and_never_again_even_after_a_restart(
    settings: signon.Settings,
) -> None:
    text = mint("nobody", NOBODY.pw_uid)
    now = time.time()
    assert signon.sign_on(settings, "nobody", text, now) is None
    assert signon.sign_on(settings, "nobody", text, now) == "Replayed"
    # A new process reads the record from the state directory.
    again = signon.Settings(HOST, settings.public_keys, settings.state, settings.home_root, None)
    assert signon.sign_on(again, "nobody", text, now + 5) == "Replayed"
    # A fresh credential for the same user is good.
    assert signon.sign_on(settings, "nobody", mint("nobody", NOBODY.pw_uid), now) is None


def test_used_credentials_are_forgotten_once_expired(settings: signon.Settings) -> None:
    used = signon.UsedCredentials(settings.state)
    old = credential.verify(
        mint("nobody", NOBODY.pw_uid, at=1000), "nobody", HOST, [KEY.public_key()], 1000
    )
    assert used.take(old, 1000)
    assert not used.take(old, 1010)
    fresh = credential.verify(
        mint("nobody", NOBODY.pw_uid, at=5000), "nobody", HOST, [KEY.public_key()], 5000
    )
    assert used.take(fresh, 5000)
    assert old.nonce_id not in (settings.state / signon.USED_FILE).read_text()


@pytest.mark.parametrize(
    ("user", "text", "reason"),
    [
        pytest.param(
            "nobody",
            lambda: mint("nobody", NOBODY.pw_uid, key=FORGER),
            "InvalidSignature",
            id="forged",
        ),
        pytest.param(
            "nobody",
            lambda: mint("nobody", NOBODY.pw_uid, host="desk-2"),
            "InvalidSignature",
            id="other-host",
        ),
        pytest.param(
            "nobody", lambda: mint("root", NOBODY.pw_uid), "InvalidSignature", id="other-user"
        ),
        pytest.param("nobody", lambda: mint("nobody", 20001), "UidMismatch", id="other-uid"),
        pytest.param(
            "nobody",
            lambda: mint("nobody", NOBODY.pw_uid, at=time.time() - 600),
            "Expired",
            id="expired",
        ),
        pytest.param("nobody", lambda: "hp1.not-a-credential", "Malformed", id="malformed"),
    ],
)
def test_refused_and_nothing_made(
    settings: signon.Settings, user: str, text: object, reason: str
) -> None:
    assert callable(text)
    assert signon.sign_on(settings, user, text(), time.time()) == reason
    assert (
        not (settings.state / signon.USED_FILE).exists()
        or not (settings.state / signon.USED_FILE).read_text().strip()
    )


def test_a_home_of_another_uid_is_never_taken_over(settings: signon.Settings) -> None:
    """A first logon of a user whose home exists, owned by someone else (here root): no
    account is made, the home is untouched."""
    user = "hp-test-ghost"
    with pytest.raises(KeyError):
        pwd.getpwnam(user)
    home = settings.home_root / user
    home.mkdir()
    (home / "mine").write_text("root's")
    assert signon.sign_on(settings, user, mint(user, 20001), time.time()) == (
        "HomeOwnedByAnotherUser"
    )
    with pytest.raises(KeyError):
        pwd.getpwnam(user)
    assert home.stat().st_uid == os.getuid()
    assert (home / "mine").read_text() == "root's"


def test_without_keys_nothing_signs_on(settings: signon.Settings) -> None:
    settings.public_keys.write_text("")
    assert signon.sign_on(settings, "nobody", mint("nobody", NOBODY.pw_uid), time.time()) == (
        "NoKeys"
    )


def run(settings: signon.Settings, user: str, password: bytes) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable, "-m", "hostpool_operator.agent.signon", "--host", HOST,
        "--public-keys", str(settings.public_keys), "--state", str(settings.state),
        "--home-root", str(settings.home_root),
    ]  # fmt: skip
    # pam_exec gives it no environment but PAM's own variables.
    env = {"PAM_USER": user, "PAM_TYPE": "auth", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        argv,
        input=password.decode(),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_as_pam_runs_it(settings: signon.Settings) -> None:
    text = mint("nobody", NOBODY.pw_uid)
    # pam_exec may end the password with a NUL byte.
    assert run(settings, "nobody", text.encode() + b"\0").returncode == 0
    replayed = run(settings, "nobody", text.encode())
    assert replayed.returncode == 1
    assert "Replayed" in replayed.stderr
    forged = mint("nobody", NOBODY.pw_uid, key=FORGER)
    assert run(settings, "nobody", forged.encode()).returncode == 1
    # A typed password is left to the next rule, unrecorded.
    assert run(settings, "nobody", b"hunter2").returncode == 1
    lines = (settings.state / REFUSALS_FILE).read_text().splitlines()
    assert [json.loads(line)["reason"] for line in lines] == ["Replayed", "InvalidSignature"]
    written = (settings.state / REFUSALS_FILE).read_text() + (
        settings.state / signon.USED_FILE
    ).read_text()
    for secret in (text, forged, "hunter2"):
        assert secret not in written


def test_the_agent_reads_each_refusal_once_and_passes_over_what_it_cannot_read() -> None:
    text = "\n".join(
        [
            json.dumps({"at": 10.0, "user": "old", "reason": "Replayed"}),
            json.dumps({"at": 20.5, "user": "alice", "reason": "Replayed"}),
            "not json",
            json.dumps({"at": "x", "user": "bob", "reason": "Expired"}),
            json.dumps({"at": 21.0, "user": "bob", "reason": "HomeOwnedByAnotherUser"}),
        ]
    )
    found, latest = refusals_after(text, 15.0)
    assert [(r.user, r.event_reason) for r in found] == [
        ("alice", "LogonRefused"),
        ("bob", "HomeOwnedByAnotherUser"),
    ]
    assert "Replayed" in found[0].message
    assert latest == 21.0
    assert refusals_after(text, latest) == ([], 21.0)


def test_a_refusal_goes_on_the_host_as_when_and_one_word() -> None:
    refusal = Refusal(1796601600.0, "alice", "UidMismatch")
    assert refusal.status_fields() == {"at": "2026-12-07T00:00:00Z", "reason": "UidMismatch"}
    odd = Refusal(1796601600.0, "alice", "not one word\n")
    assert odd.status_fields()["reason"] == "Unknown"
    model = LogonRefusal.model_validate(refusal.status_fields())
    assert model.reason == "UidMismatch"
