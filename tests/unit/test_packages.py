"""The Debian packages of ``make test``: installed in one step, before anything runs in
parallel.

``make test-prepare`` builds the tools and both images at once (``-j4``). On a machine
without podman, each image build used to install packages itself, so two ``apt-get`` runs
could start together and one fail on apt's lock. Now ``test-prepare`` first runs
``apt-install.sh --test-packages`` alone, and that list holds every package any script
installs (a script that installs one more must list it there, or this test fails), so the
parallel builds find everything installed. Read from make's own dry run (``make -n``, which
still runs the recursive make to print its commands) and from the scripts' sources.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from support.paths import REPO_ROOT

APT_INSTALL = REPO_ROOT / "hack" / "cluster" / "apt-install.sh"


def dry_run(target: str) -> list[str]:
    proc = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_test_prepare_installs_the_packages_alone_before_the_parallel_builds() -> None:
    lines = dry_run("test-prepare")
    installs = [i for i, line in enumerate(lines) if "apt-install.sh --test-packages" in line]
    parallel = [i for i, line in enumerate(lines) if re.search(r"make\b.*\s-j\d", line)]
    builds = [i for i, line in enumerate(lines) if "image.sh" in line or "tools.sh" in line]
    assert installs, "make -n test-prepare runs no apt-install.sh --test-packages:\n" + "\n".join(
        lines
    )
    assert parallel, "\n".join(lines)
    assert builds, "\n".join(lines)
    assert installs[-1] < min(parallel + builds), "\n".join(lines)


def listed() -> set[str]:
    proc = subprocess.run(
        [str(APT_INSTALL), "--list"], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, f"apt-install.sh --list: {proc.stderr}"
    return set(proc.stdout.split())


def bash_array(path: Path, name: str) -> list[str]:
    match = re.search(rf"^{name}=\(([^)]*)\)", path.read_text(), re.MULTILINE)
    assert match, f"no {name}=(...) in {path}"
    return shlex.split(match[1], comments=True)


def installed_by_the_scripts() -> dict[str, list[str]]:
    """What each of the project's calls of apt-install.sh installs (where it is missing)."""
    cluster = REPO_ROOT / "hack" / "cluster"
    calls: dict[str, list[str]] = {}
    for path in [REPO_ROOT / "Makefile", *sorted(cluster.rglob("*.sh"))]:
        for line in path.read_text().splitlines():
            code = line.split(" ## ")[0]  # a make target's help text
            call = re.search(r"apt-install\.sh\"?\s+(.*)", code)
            if not call or code.lstrip().startswith("#") or "--test-packages" in call[1]:
                continue
            words = [w for w in shlex.split(call[1].split(">")[0]) if not w.startswith("-")]
            calls[f"{path.relative_to(REPO_ROOT)}: {line.strip()}"] = words
    resolved: dict[str, list[str]] = {}
    for where, words in calls.items():
        packages = []
        for word in words:
            array = re.fullmatch(r"\$\{(\w+)\[@\]\}", word)
            if array and array[1] == "missing":  # xrdp-hosts.sh: the missing ones of PACKAGES
                packages += bash_array(cluster / "xrdp-hosts.sh", "PACKAGES")
            elif array:
                packages += bash_array(cluster / "node" / "nodes.sh", array[1])
            else:
                packages.append(word)
        resolved[where] = packages
    # The desktop tests' client (tests/support/desktop.py installs it from Python).
    desktop = (REPO_ROOT / "tests" / "support" / "desktop.py").read_text()
    client = re.search(r"^CLIENT_PACKAGES = \(([^)]*)\)", desktop, re.MULTILINE)
    assert client
    resolved["tests/support/desktop.py: CLIENT_PACKAGES"] = re.findall(r'"([^"]+)"', client[1])
    # The portal's browser tests' chromium (tests/support/browser.py, from Python too).
    browser = (REPO_ROOT / "tests" / "support" / "browser.py").read_text()
    chromium = re.search(r"^BROWSER_PACKAGES = \(([^)]*)\)", browser, re.MULTILINE)
    assert chromium
    resolved["tests/support/browser.py: BROWSER_PACKAGES"] = re.findall(r'"([^"]+)"', chromium[1])
    return resolved


def test_every_package_a_script_installs_is_in_the_test_packages() -> None:
    calls = installed_by_the_scripts()
    # Every place found: shellcheck, the images, the pause image, the nodes, the xrdp hosts
    # and the desktop client.
    assert len(calls) >= 6, calls
    have = listed()
    for where, packages in calls.items():
        assert packages, where
        missing = sorted(set(packages) - have)
        assert not missing, f"{where} installs {missing}, not in apt-install.sh's TEST_PACKAGES"


def test_no_script_runs_apt_get_but_the_installer() -> None:
    # apt-get as a shell command (a line's first word, or after && || ; exec), or as the
    # program of a Python argv.
    shell = re.compile(r"(^|&&|\|\||;|\bexec)\s*(sudo\s+)?apt-get\s")
    python = re.compile(r"[\[(]\s*[\"']apt-get[\"']\s*,")
    places = [
        REPO_ROOT / "Makefile",
        REPO_ROOT / ".ci" / "run",
        *(REPO_ROOT / "hack").rglob("*.sh"),
        *(REPO_ROOT / "hack").rglob("*.py"),
        *(REPO_ROOT / "tests").rglob("*.py"),
    ]
    found = [
        f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}"
        for path in places
        if path != APT_INSTALL
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if not line.lstrip().startswith("#")
        and (python if path.suffix == ".py" else shell).search(line)
    ]
    assert not found, "apt-get run outside hack/cluster/apt-install.sh:\n" + "\n".join(found)
