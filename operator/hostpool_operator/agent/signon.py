"""`hostpool-logon`: single sign-on on a session host, run by PAM before any password rule::

    auth [success=done default=ignore] pam_exec.so quiet expose_authtok \\
        /usr/local/bin/hostpool-logon --host NAME --public-keys FILE --state DIR

pam_exec hands it the user (``PAM_USER``) and what the client sent as the password (stdin).
It takes a one-time logon credential of the broker's (``logon.credential``) for this user on
this host, once (the nonces it took are kept in ``--state`` across restarts, until they
expire), and makes the user's account at the first logon: a private group and the user with
the uid the credential names, and a home they own. It never changes an account or a home
that belongs to another uid: the logon is refused. Nothing here calls the network.

Exit 0: signed on. Exit 1: refused, like a wrong password (the next PAM rule decides: a
typed password still works where the host has one). Each refusal is one JSON line in
``--state``/refusals.jsonl (when, the user, the reason; never the credential), which the
host's agent reports as a ``LogonRefused`` or ``HomeOwnedByAnotherUser`` Event."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..logon import credential
from .logon_refusals import LOGONS_FILE, REFUSALS_FILE

#: Absolute paths: pam_exec runs this with an empty environment (no PATH).
GROUPADD = "/usr/sbin/groupadd"
USERADD = "/usr/sbin/useradd"
#: The longest password read from PAM (a credential is 145 characters).
MAX_INPUT = 4096
USED_FILE = "used"
#: The accounts this verifier made, one name a line (what a host's clean-up removes).
ACCOUNTS_FILE = "accounts"
#: The GECOS comment of the accounts it makes.
ACCOUNT_COMMENT = "hostpool single sign-on"
#: Refusal lines kept (the oldest go first).
MAX_REFUSALS = 1000
#: A user name as Debian's useradd takes it, and a person's (no system account).
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-.")

AccountRefusal = Literal["UidMismatch", "HomeOwnedByAnotherUser", "InvalidUserName"]


@dataclass(frozen=True, slots=True)
class Account:
    """What the machine has for a user now."""

    #: The user's uid (None: no such user).
    uid: int | None
    #: The owner of the home the user would get (None: no home there yet).
    home_owner: int | None


def account_problem(user: str, uid: int, account: Account) -> AccountRefusal | None:
    """Why ``user`` may not sign on with ``uid`` given what the machine has (None: they may;
    the account is made when it is missing)."""
    if not user or len(user) > 32 or not set(user) <= _NAME_CHARS or user[0] in "-.":
        return "InvalidUserName"
    if account.uid is not None and account.uid != uid:
        return "UidMismatch"
    if account.home_owner is not None and account.home_owner != uid:
        return "HomeOwnedByAnotherUser"
    return None


class UsedCredentials:
    """The nonces this host took, with their ends: a file under a lock, pruned as it goes."""

    def __init__(self, state: Path) -> None:
        self.path = state / USED_FILE

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, int]]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.path, "a+", encoding="ascii") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            used: dict[str, int] = {}
            for line in handle:
                nonce, _, ends = line.strip().partition(" ")
                if nonce and ends.isdigit():
                    used[nonce] = int(ends)
            yield used
            handle.seek(0)
            handle.truncate()
            handle.writelines(f"{nonce} {ends}\n" for nonce, ends in used.items())
            handle.flush()
            os.fsync(handle.fileno())

    def take(self, claims: credential.Claims, now: float) -> bool:
        """Whether the credential is taken now (False: it was used before)."""
        keep_until = claims.expires + credential.CLOCK_SKEW
        with self._locked() as used:
            for nonce in [n for n, ends in used.items() if ends < now]:
                del used[nonce]
            if claims.nonce_id in used:
                return False
            used[claims.nonce_id] = keep_until
            return True


def record_refusal(state: Path, user: str, reason: str, now: float) -> None:
    """One line for the agent to report (the user's name is cut to what PAM may pass)."""
    line = json.dumps({"at": round(now, 3), "user": user[:64], "reason": reason})
    _append(state / REFUSALS_FILE, line)


def record_logon(state: Path, user: str, seconds: float, now: float) -> None:
    """A logon signed on: when it ended and how long the check took (authentication, for
    logon diagnostics; the agent reads it when the session runs)."""
    line = json.dumps({"at": round(now, 3), "user": user[:64], "seconds": round(seconds, 3)})
    _append(state / LOGONS_FILE, line)


def _append(path: Path, line: str) -> None:
    """One line at the end of a JSON-lines file of the state directory, the oldest dropped
    past MAX_REFUSALS lines (under a lock: logons may run at once)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        lines = handle.read().splitlines()[-(MAX_REFUSALS - 1) :]
        handle.seek(0)
        handle.truncate()
        handle.write("\n".join([*lines, line]) + "\n")


def observe(user: str, home_root: Path) -> Account:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        home = home_root / user
        uid = None
    else:
        home = Path(entry.pw_dir)
        uid = entry.pw_uid
    try:
        owner: int | None = home.stat().st_uid
    except FileNotFoundError:
        owner = None
    return Account(uid, owner)


@dataclass(frozen=True)
class Settings:
    host: str
    public_keys: Path
    state: Path
    home_root: Path
    xsession: Path | None


def make_account(user: str, uid: int, settings: Settings) -> None:
    """The user's private group and account with ``uid``, and a home they own (an existing
    one of theirs is kept as it is); its name recorded in the state directory."""
    home = settings.home_root / user
    subprocess.run([GROUPADD, "-g", str(uid), user], check=True, capture_output=True)
    argv = [USERADD, "-m", "-d", str(home), "-u", str(uid), "-g", str(uid)]
    argv += ["-s", "/bin/bash", "-c", ACCOUNT_COMMENT, user]
    subprocess.run(argv, check=True, capture_output=True)
    with open(settings.state / ACCOUNTS_FILE, "a", encoding="utf-8") as accounts:
        accounts.write(user + "\n")
    xsession = settings.xsession
    if xsession is not None and xsession.is_file() and not (home / ".xsession").exists():
        target = home / ".xsession"
        shutil.copyfile(xsession, target)
        os.chown(target, uid, uid)
        target.chmod(0o755)


def sign_on(settings: Settings, user: str, password: str, now: float) -> str | None:
    """None when ``user`` is signed on with ``password``; else the refusal's reason."""
    try:
        keys = credential.public_keys(settings.public_keys.read_bytes())
    except (OSError, ValueError):
        return "NoKeys"
    try:
        claims = credential.verify(password, user, settings.host, keys, now)
    except credential.LogonRefusedError as refused:
        return refused.reason
    problem = account_problem(user, claims.uid, observe(user, settings.home_root))
    if problem is not None:
        return problem
    if not UsedCredentials(settings.state).take(claims, now):
        return "Replayed"
    if observe(user, settings.home_root).uid is None:
        try:
            make_account(user, claims.uid, settings)
        except (OSError, subprocess.CalledProcessError):
            return "AccountNotMade"
    return None


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="hostpool-logon",
        description="Sign a user on with the broker's one-time logon credential (run by "
        "pam_exec with expose_authtok).",
    )
    parser.add_argument("--host", required=True, help="this host's SessionHost name")
    parser.add_argument(
        "--public-keys", required=True, help="the broker's public keys (PEM, one or two)"
    )
    parser.add_argument(
        "--state", default="/var/lib/hostpool-logon", help="where used credentials are kept"
    )
    parser.add_argument("--home-root", default="/home", help="where homes are made")
    parser.add_argument("--xsession", help="a session script copied into a new home")
    args = parser.parse_args(argv)
    return Settings(
        host=args.host,
        public_keys=Path(args.public_keys),
        state=Path(args.state),
        home_root=Path(args.home_root),
        xsession=Path(args.xsession) if args.xsession else None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    user = os.environ.get("PAM_USER", "")
    # pam_exec may end the password with a NUL; a terminal adds a newline.
    password = sys.stdin.buffer.read(MAX_INPUT).decode("ascii", "replace").rstrip("\0\r\n")
    now = time.time()
    if not password.startswith(credential.PREFIX):
        return 1  # a typed password: the next PAM rule checks it, nothing to report
    reason = sign_on(settings, user, password, now) if user else "NoUser"
    if reason is None:
        done = time.time()
        with contextlib.suppress(OSError):
            record_logon(settings.state, user, done - now, done)
        return 0
    with contextlib.suppress(OSError):
        record_refusal(settings.state, user, reason, now)
    print(f"hostpool-logon: refused ({reason})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
