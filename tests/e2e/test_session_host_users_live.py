"""The session-host image's desktop users file gives each user a fixed uid: the one written
(``user:password:uid``), else one derived from the name. Run in podman twice over the same
/home (as a personal host's volume outlives its Pod): with the file's lines reordered and one
removed, everybody keeps their uid and their home; a home that belongs to another uid is
never taken over (that user is not made, and the log says why)."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.kube import wait_for
from support.podman import build_image, podman


@pytest.fixture(scope="module")
def image() -> str:
    if os.geteuid() != 0:
        # As every root-only test of the suite: CI runs as root, so there it must run.
        reason = "the session host's image runs as root (its users, xrdp)"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return build_image("--session-host")


@pytest.fixture
def host(image: str, tmp_path: Path) -> Iterator[tuple[Path, Path, list[str]]]:
    """(the users file, the /home directory, the containers started) of one test."""
    users, home = tmp_path / "users", tmp_path / "home"
    home.mkdir()
    started: list[str] = []
    yield users, home, started
    for name in started:
        podman("rm", "--force", "--time", "0", name, check=False)


def run(image: str, users: Path, home: Path, started: list[str]) -> tuple[str, str]:
    """Start the image with this users file over this /home; (its name, its log) once its
    users are made."""
    name = f"hp-users-{uuid.uuid4().hex[:8]}"
    started.append(name)
    podman(
        "run", "--detach", "--name", name,
        "--volume", f"{users}:/etc/hostpool/users:ro", "--volume", f"{home}:/home",
        image,
    )  # fmt: skip

    def made() -> str | None:
        text = podman("logs", name, check=False)
        return text if "desktop users:" in text else None

    log = wait_for(made, 60, what="the container to make its desktop users")
    return name, log


def uid_in(name: str, user: str) -> int:
    return int(podman("exec", name, "id", "-u", user).strip())


def test_uids_stay_whatever_the_order_of_the_users_file(
    image: str, host: tuple[Path, Path, list[str]]
) -> None:
    users, home, started = host
    users.write_text("alice:alice-pw\nbob:bob-pw\ncarol:carol:pw:43210\n")
    first, _ = run(image, users, home, started)
    before = {user: uid_in(first, user) for user in ("alice", "bob", "carol")}
    assert before["carol"] == 43210  # written; a password may hold a colon
    assert len(set(before.values())) == 3
    assert all(uid >= 1000 for uid in before.values())
    podman("rm", "--force", "--time", "0", first)

    # Reordered, bob gone: alice and carol keep their uids and their homes.
    users.write_text("carol:carol:pw:43210\nalice:alice-pw\n")
    second, _ = run(image, users, home, started)
    assert uid_in(second, "alice") == before["alice"]
    assert uid_in(second, "carol") == 43210
    for user in ("alice", "bob", "carol"):
        assert (home / user).stat().st_uid == before[user]


def test_a_home_of_another_uid_is_never_taken_over(
    image: str, host: tuple[Path, Path, list[str]]
) -> None:
    users, home, started = host
    (home / "dave").mkdir()
    os.chown(home / "dave", 4242, 4242)
    (home / "dave" / "notes").write_text("someone else's")
    users.write_text("dave:dave-pw\nerin:erin-pw\n")
    name, log = run(image, users, home, started)
    assert re.search(r"/home/dave belongs to uid 4242.*HomeOwnedByAnotherUser", log), log
    assert "dave" not in podman("exec", name, "getent", "passwd").split(":")
    assert (home / "dave").stat().st_uid == 4242
    assert (home / "dave" / "notes").read_text() == "someone else's"
    assert uid_in(name, "erin") >= 1000
