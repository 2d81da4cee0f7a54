"""Shared fixtures: a real Kubernetes API for tests/api and tests/e2e.

``kube`` (session scope) is lazy: only a test that asks for it (directly or through
``namespace``) starts anything. It uses the cluster of ``HOSTPOOL_TEST_KUBECONFIG`` when
that is set (kind, or any cluster you may install CRDs into), otherwise it builds the tools
(``hack/cluster/tools.sh``; minutes the first time, cached afterwards) and starts the repository's
own control plane (etcd + kube-apiserver + kube-controller-manager) in a temporary
directory, and stops it at the end of the session. Either way the CRDs from ``crds/`` are
created or replaced and waited for (Established) before the first test runs; with its own
control plane it then restarts kube-controller-manager, so that the garbage collector
watches the new kinds at once (it rediscovers resource types only every 30 s).

When a test that used ``kube`` fails, the API server's last log lines are attached to its
report as a section named "kube-apiserver log".

``make test`` runs the suite on several pytest-xdist workers at once: each worker has its own
control plane (and, when a test asks, its own Keycloak), its own hosts' bridge and subnet.
The work is handed out in groups (:func:`pytest_xdist_make_scheduler`): a file's tests run on
one worker (its module fixtures are set up once); tests that need the machine's one of
something (real xrdp hosts with virtual displays, real kubelet nodes) share one group, and
so one worker (:func:`group_of`). The longest work is handed out first
(:func:`schedule_rank`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from support import allocate
from support.controlplane import ControlPlane, ensure_tools
from support.kube import Kube, crd_files, make_api_client, unique_name
from support.paths import REPO_ROOT

#: The browser fixtures (``browser``, ``new_page``) for any test that asks for them; nothing
#: starts until one does.
pytest_plugins = ["support.browser"]

#: In CI (``CI`` set, as CI services do) the property tests try the same examples every run
#: (seeded from each test), so a run fails for a change and not for the draw; elsewhere
#: they draw afresh each time and keep what failed in .hypothesis/ to try first.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

KUBECONFIG_ENV = "HOSTPOOL_TEST_KUBECONFIG"


def worker_index() -> int:
    """This pytest-xdist worker's number (0 when the suite runs in one process)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw") or 0)


def hosts_bridge() -> str:
    """This worker's bridge for xrdp session hosts in network namespaces (tests/e2e/desktop),
    allocated: a name and /24 no other worker or run holds (support.allocate); the API server
    serves on its address so the hosts' agents reach it."""
    return allocate.bridge().spec


def can_make_bridges() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


TESTS_DIR = REPO_ROOT / "tests"
#: Only tests under these directories may use the ``kube`` fixture.
CLUSTER_TEST_DIRS = (TESTS_DIR / "api", TESTS_DIR / "e2e")

#: The markers a test gets from where it lives (``-m faults`` etc. select by them): a
#: directory says what a test needs better than a ``pytestmark`` line each file must repeat.
DIRECTORY_MARKERS: tuple[tuple[Path, str], ...] = (
    (TESTS_DIR / "api", "cluster"),
    (TESTS_DIR / "e2e", "e2e"),
    (TESTS_DIR / "e2e" / "faults", "faults"),
    (TESTS_DIR / "e2e" / "desktop", "desktop"),
)

#: Tests that need what the machine has one of share a worker: the desktop tests' xrdp hosts
#: (local users, the hosts' display ranges) in one group, the real kubelet nodes (their
#: bridges, containerd, the nodes' subnet) in another. The two share nothing else (the
#: clients' X displays are allocated, the nodes' desktops are containers), so they run on
#: two workers at once: together they were the suite's critical path.
DESKTOP_GROUP = "desktop"
REAL_NODE_GROUP = "real-nodes"
REAL_NODE_FILES = frozenset(
    (
        TESTS_DIR / "e2e" / "test_real_nodes_live.py",
        TESTS_DIR / "e2e" / "test_add_nodes_live.py",
        TESTS_DIR / "e2e" / "desktop" / "test_nodes_chart_live.py",
    )
)
#: The groups handed out first (longest first).
LONG_GROUPS = (DESKTOP_GROUP, REAL_NODE_GROUP)
#: The order work is handed out in, longest first, so that no long test starts last: the
#: desktop group, then the other end-to-end tests, the API tests, the chart, the unit tests.
RANKS: tuple[Path, ...] = (TESTS_DIR / "e2e", TESTS_DIR / "api", TESTS_DIR / "chart")

_KUBE_KEY = pytest.StashKey[Kube]()
_REPORTS_KEY = pytest.StashKey[dict[str, pytest.TestReport]]()

LOG_TAIL_LINES = 60


def directory_markers(path: Path, fixturenames: Iterable[str]) -> list[str]:
    """The markers of a test in ``path`` that uses these fixtures: those of its directories,
    and ``cluster`` for an end-to-end test on the suite's API server (the ``kube`` fixture;
    some start their own control plane instead)."""
    names = [name for directory, name in DIRECTORY_MARKERS if path.is_relative_to(directory)]
    if "e2e" in names and "kube" in fixturenames:
        names.append("cluster")
    return names


def group_of(path: Path) -> str:
    """The group of a test in ``path`` that one worker runs: the real nodes' or the desktop
    group, else its file (a module's fixtures are set up once, on one worker)."""
    if path in REAL_NODE_FILES:
        return REAL_NODE_GROUP
    if path.is_relative_to(TESTS_DIR / "e2e" / "desktop"):
        return DESKTOP_GROUP
    return str(path.relative_to(TESTS_DIR) if path.is_relative_to(TESTS_DIR) else path)


def schedule_rank(path: Path) -> int:
    """Where a test in ``path`` comes in the order work is handed out (lower: sooner)."""
    if group_of(path) in LONG_GROUPS:
        return 0
    for rank, directory in enumerate(RANKS, start=1):
        if path.is_relative_to(directory):
            return rank
    return len(RANKS) + 1


# tryfirst: the markers must be on the items before `-m` deselects by them.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by its directory (:data:`DIRECTORY_MARKERS`); refuse, at collection, a
    test outside tests/api and tests/e2e that would start a cluster: unit tests must stay fast
    and runnable anywhere. On pytest-xdist's workers the longest
    work comes first (every worker sorts alike: the order is the same on all)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: schedule_rank(Path(str(item.path)).resolve()))
    del config
    for item in items:
        path = Path(str(item.path)).resolve()
        fixturenames = getattr(item, "fixturenames", ())
        for name in directory_markers(path, fixturenames):
            item.add_marker(name)
        if "kube" not in fixturenames or not path.is_relative_to(TESTS_DIR):
            continue  # a bench outside the suite may use the suite's fixtures
        if not any(path.is_relative_to(d) for d in CLUSTER_TEST_DIRS):
            raise pytest.UsageError(
                f"{item.nodeid} uses the `kube` fixture but is not under tests/api or "
                "tests/e2e; only those may need a cluster"
            )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scope scheduling over :func:`group_of`'s groups, in the order the
    workers collected them (longest first), whatever ``--dist`` names. (Its own
    ``xdist_group`` marks do not group under pytest 9: the node id they rename is read-only.)"""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
        def _split_scope(self, nodeid: str) -> str:
            return group_of((config.rootpath / nodeid.split("::", 1)[0]).resolve())

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the item, and attach the API server's log tail to the
    report of a failed test that used the cluster."""
    del call
    report = yield
    item.stash.setdefault(_REPORTS_KEY, {})[report.when] = report
    if report.failed and "kube" in getattr(item, "fixturenames", ()):
        kube = item.config.stash.get(_KUBE_KEY, None)
        if kube is not None:
            try:
                tail = kube.log_tail(LOG_TAIL_LINES)
            except Exception as exc:  # never hide the test's own failure
                tail = f"(could not read the API server log: {exc})"
            report.sections.append((f"kube-apiserver log (last {LOG_TAIL_LINES} lines)", tail))
    return report


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    """The project's tools (``hack/cluster/tools.sh``; cached): helm, kubectl, promtool..."""
    return ensure_tools(REPO_ROOT)


@pytest.fixture(scope="session")
def kube(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kube]:
    """A real API server with the project's CRDs installed."""
    external = os.environ.get(KUBECONFIG_ENV, "").strip()
    control_plane: ControlPlane | None = None
    bin_dir: Path | None = None
    if external:
        kubeconfig = Path(external).expanduser().resolve()
        if not kubeconfig.is_file():
            pytest.fail(f"{KUBECONFIG_ENV}={external}: no such file")
    else:
        bin_dir = ensure_tools(REPO_ROOT)
        control_plane = ControlPlane(
            tmp_path_factory.mktemp("controlplane"),
            bin_dir=bin_dir,
            hosts_bridge=hosts_bridge() if can_make_bridges() else None,
        )
        kubeconfig = control_plane.start()
    api_client = make_api_client(kubeconfig)
    kube = Kube(
        kubeconfig=kubeconfig,
        api_client=api_client,
        control_plane=control_plane,
        bin_dir=bin_dir,
    )
    try:
        try:
            kube.install_crds(crd_files())
        except Exception as exc:
            raise RuntimeError(
                f"installing the CRDs from crds/ failed: {exc}\n"
                f"kube-apiserver log:\n{kube.log_tail(LOG_TAIL_LINES)}"
            ) from exc
        if control_plane is not None:
            # Its garbage collector would otherwise notice the new kinds only at its next
            # discovery resync (every 30 s), so ownerReferences would not cascade until then.
            control_plane.restart_controller_manager()
        request.config.stash[_KUBE_KEY] = kube
        yield kube
    finally:
        if _KUBE_KEY in request.config.stash:
            del request.config.stash[_KUBE_KEY]
        api_client.close()
        if control_plane is not None:
            control_plane.stop()


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (without waiting)."""
    name = unique_name(f"t-{request.node.name}", max_length=40)
    kube.create_namespace(name)
    try:
        yield name
    finally:
        kube.delete_namespace(name)
