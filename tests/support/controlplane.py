"""Start and stop a real local Kubernetes control plane from Python.

A thin, typed wrapper over the repository's shell scripts:

* ``hack/cluster/tools.sh`` builds etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler, kubectl, helm and kwok from Go modules once (cached outside the repository)
  and links them into ``.cluster/bin``;
* ``hack/cluster/cluster.sh up|down DIR`` starts or stops etcd, kube-apiserver and
  kube-controller-manager on 127.0.0.1, and (unless ``fake_nodes`` is 0) kube-scheduler and
  kwok with that many fake nodes, so that pods are scheduled and become Ready; the admin
  kubeconfig is ``DIR/kubeconfig``, the logs are under ``DIR/logs``.
  ``restart-apiserver|restart-etcd DIR`` restart one of them with the same ports, flags and
  data (fault tests); ``fail-pod`` and ``remove-node`` break a pod or a node on purpose.
  With ``real_nodes`` (root), also that many real kubelet nodes with containerd
  (``hack/cluster/node/nodes.sh``); ``import-image`` puts an image into their containerd.

Typical use (e.g. from a session-scoped pytest fixture)::

    bin_dir = ensure_tools(REPO_ROOT)
    with ControlPlane(tmp_dir, bin_dir=bin_dir) as cp:
        ...  # use cp.kubeconfig

Standard library only.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections import deque
from pathlib import Path
from types import TracebackType

from support.paths import REPO_ROOT

__all__ = [
    "COMPONENTS",
    "REPO_ROOT",
    "ControlPlane",
    "ControlPlaneError",
    "ensure_tools",
]

"""The repository this file belongs to."""

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
"""The processes that ``hack/cluster/cluster.sh`` runs (the last two with fake nodes); each
logs to ``<log_dir>/<name>.log``."""

#: Fake nodes a control plane gets by default (named kwok-node-1, -2, ...).
DEFAULT_FAKE_NODES = 3


class ControlPlaneError(RuntimeError):
    """A tool build or a cluster start/stop failed; the message carries the script's output."""


def _run(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    what: str,
) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ControlPlaneError(f"{what}: timed out after {timeout}s: {' '.join(argv)}") from exc
    except OSError as exc:
        raise ControlPlaneError(f"{what}: cannot run {argv[0]}: {exc}") from exc
    if proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip() or "(no output)")[-4000:]
        raise ControlPlaneError(
            f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n{detail}"
        )
    return proc


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def ensure_tools(
    repo_root: Path = REPO_ROOT, *, timeout: float | None = None, nodes: bool = False
) -> Path:
    """Build (first time only; 10-25 minutes cold) and link the tools; return the bin dir.

    Runs ``hack/cluster/tools.sh``, which takes a second or two when the cached binaries exist.
    ``nodes``: also the kubelet and the pause image, for real nodes (``tools.sh --nodes``).
    """
    script = repo_root / "hack" / "cluster" / "tools.sh"
    argv = [str(script), *(["--nodes"] if nodes else [])]
    # One at a time: the suite's workers would otherwise relink the same bin dir at once.
    lock_path = repo_root / ".cluster" / ".tools.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = _run(argv, timeout=timeout, what="hack/cluster/tools.sh")
    bin_dir = Path(_last_line(proc.stdout))
    if not (bin_dir / "kube-apiserver").exists():
        raise ControlPlaneError(
            f"hack/cluster/tools.sh succeeded but printed no usable bin dir: {proc.stdout!r}"
        )
    return bin_dir


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager, managed by ``hack/cluster/cluster.sh``.

    ``directory`` holds the kubeconfig, keys, etcd data, pid files and logs. The cluster is
    started by :meth:`start` (or on entering the context manager) and stopped by :meth:`stop`
    (or on leaving it, and on entering it when the start fails: nothing is left running).
    Starting an already running, healthy cluster is a no-op.
    """

    def __init__(
        self,
        directory: Path,
        *,
        repo_root: Path = REPO_ROOT,
        bin_dir: Path | None = None,
        timeout: float = 180.0,
        fake_nodes: int = DEFAULT_FAKE_NODES,
        apiserver_args: tuple[str, ...] = (),
        hosts_bridge: str | None = None,
        real_nodes: int = 0,
    ) -> None:
        self.directory = Path(directory).absolute()  # a short link stays short (real nodes)
        #: real kubelet nodes real-node-1.. (HOSTPOOL_REAL_NODES of cluster.sh; root)
        self.real_nodes = real_nodes
        #: NAME:ADDRESS/PREFIX: a bridge for session hosts in network namespaces, the API
        #: served on ADDRESS (HOSTPOOL_HOSTS_BRIDGE of cluster.sh)
        self.hosts_bridge = hosts_bridge
        self.apiserver_args = apiserver_args
        self.repo_root = Path(repo_root).resolve()
        self.bin_dir = bin_dir.resolve() if bin_dir is not None else None
        self.timeout = timeout
        self.fake_nodes = fake_nodes

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (server on 127.0.0.1, or the hosts' bridge address; CA data
        and a bearer token)."""
        return self.directory / "kubeconfig"

    @property
    def log_dir(self) -> Path:
        """Where ``<component>.log`` files are written."""
        return self.directory / "logs"

    @property
    def script(self) -> Path:
        return self.repo_root / "hack" / "cluster" / "cluster.sh"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.bin_dir is not None:
            env["HOSTPOOL_BIN_DIR"] = str(self.bin_dir)
        env["HOSTPOOL_FAKE_NODES"] = str(self.fake_nodes)
        env["HOSTPOOL_APISERVER_ARGS"] = " ".join(self.apiserver_args)
        env["HOSTPOOL_HOSTS_BRIDGE"] = self.hosts_bridge or ""
        env["HOSTPOOL_REAL_NODES"] = str(self.real_nodes)
        return env

    def _cluster(
        self, action: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return _run(
            [str(self.script), action, str(self.directory), *args],
            env={**self._env(), **(env or {})},
            timeout=self.timeout,
            what=f"hack/cluster/cluster.sh {action}",
        )

    def start(self) -> Path:
        """Start the cluster (or find it running) and return the kubeconfig path."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._cluster("up")
        if not self.kubeconfig.is_file():
            raise ControlPlaneError(f"cluster started but {self.kubeconfig} is missing")
        return self.kubeconfig

    def stop(self) -> None:
        """Stop every component; fine when nothing is running. Logs are kept."""
        if self.directory.exists():
            self._cluster("down")

    def restart_controller_manager(self) -> None:
        """Restart kube-controller-manager alone (about a second).

        Its garbage collector rediscovers resource types only every 30 s (fixed upstream), so
        call this after installing CRDs when ownerReferences on custom resources must cascade
        at once.
        """
        self._cluster("restart-controller-manager")

    def restart_apiserver(self, *, crash: bool = False, down_seconds: float = 0.0) -> None:
        """Stop kube-apiserver (SIGTERM, or SIGKILL with ``crash``), stay down for
        ``down_seconds``, start it again with the same port and flags, and wait for /readyz.

        Clients' connections and watches drop; the admin kubeconfig stays valid. A clean stop
        takes the API server's graceful shutdown (cut to 10 s by a SIGKILL)."""
        self._restart("restart-apiserver", crash=crash, down_seconds=down_seconds)

    def restart_etcd(self, *, crash: bool = False, down_seconds: float = 0.0) -> None:
        """Stop etcd (SIGTERM, or SIGKILL with ``crash``), stay down for ``down_seconds``,
        start it again on the same ports and data, and wait until the API server reports
        /readyz ok again. No data is lost: etcd's data directory is kept."""
        self._restart("restart-etcd", crash=crash, down_seconds=down_seconds)

    def fail_pod(self, namespace: str, name: str) -> None:
        """Mark a pod Failed and not Ready, as a kubelet reports a crashed pod."""
        self._cluster("fail-pod", namespace, name)

    def remove_node(self, name: str) -> None:
        """Delete a node; kube-controller-manager's pod GC deletes its pods afterwards."""
        self._cluster("remove-node", name)

    def import_image(self, image: str) -> None:
        """Put an image (a podman image's name, or an image archive) into every real node's
        containerd, for pods with ``imagePullPolicy: Never`` or ``IfNotPresent``."""
        self._cluster("import-image", image)

    def _restart(self, action: str, *, crash: bool, down_seconds: float) -> None:
        if down_seconds < 0:
            raise ValueError(f"down_seconds must not be negative: {down_seconds}")
        self._cluster(
            action,
            env={
                "HOSTPOOL_STOP_SIGNAL": "KILL" if crash else "TERM",
                "HOSTPOOL_DOWN_SECONDS": f"{down_seconds:.3f}",
            },
        )

    def is_running(self) -> bool:
        """True when every process runs and the API server reports /readyz ok."""
        if not self.directory.exists():
            return False
        try:
            self._cluster("status")
        except ControlPlaneError:
            return False
        return True

    def log_tail(self, name: str, lines: int = 40) -> str:
        """The last ``lines`` lines of a component's log (one of ``COMPONENTS``), or a note
        when there is no such log yet."""
        if name not in COMPONENTS:
            raise ValueError(f"unknown component {name!r}; expected one of {COMPONENTS}")
        path = self.log_dir / f"{name}.log"
        if not path.is_file():
            return f"(no log at {path})"
        with path.open(encoding="utf-8", errors="replace") as fh:
            return "".join(deque(fh, maxlen=max(lines, 0)))

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except ControlPlaneError:
            self.stop()  # what the failed start left running (``__exit__`` is not called)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ControlPlane(directory={str(self.directory)!r})"
