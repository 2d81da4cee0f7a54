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
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path

import pytest

from support.controlplane import ControlPlane, ensure_tools
from support.kube import REPO_ROOT, Kube, crd_files, make_api_client, unique_name

#: The browser fixtures (``browser``, ``new_page``) for any test that asks for them; nothing
#: starts until one does.
pytest_plugins = ["support.browser"]

KUBECONFIG_ENV = "HOSTPOOL_TEST_KUBECONFIG"
#: The suite's bridge for xrdp session hosts in network namespaces (tests/desktop); the API
#: server serves on its address so the hosts' agents reach it. Its own /24, which nothing
#: else here uses (the desktop demo's is 10.251.0.0/24).
HOSTS_BRIDGE = "hptest0:10.251.1.1/24"


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


# tryfirst: the markers must be on the items before `-m` deselects by them.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by its directory (:data:`DIRECTORY_MARKERS`); refuse, at collection, a
    test outside tests/api and tests/e2e that would start a cluster: unit tests must stay
    fast and runnable anywhere."""
    del config
    for item in items:
        path = Path(str(item.path)).resolve()
        fixturenames = getattr(item, "fixturenames", ())
        for name in directory_markers(path, fixturenames):
            item.add_marker(name)
        if "kube" not in fixturenames:
            continue
        if not any(path.is_relative_to(d) for d in CLUSTER_TEST_DIRS):
            raise pytest.UsageError(
                f"{item.nodeid} uses the `kube` fixture but is not under tests/api or "
                "tests/e2e; only those may need a cluster"
            )


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
            hosts_bridge=HOSTS_BRIDGE if can_make_bridges() else None,
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
