"""A local control plane with a real kubelet node (``hack/cluster/cluster.sh`` with
``HOSTPOOL_REAL_NODES``), for the tests whose pods must really run: the kubelet built by
``hack/cluster/tools.sh --nodes``, the project's images imported into its containerd, and
the kubelet's and containerd's CPU and memory sampled over the tests."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from support.controlplane import ControlPlane
from support.kube import Kube, unique_name, wait_default_service_account
from support.paths import REPO_ROOT
from support.podman import build_image

CLUSTER_SCRIPT = REPO_ROOT / "hack" / "cluster" / "cluster.sh"
TOOLS_SCRIPT = REPO_ROOT / "hack" / "cluster" / "tools.sh"
NODE = "real-node-1"


def nodes_unavailable() -> str:
    """Why real nodes cannot run here ('' when they can)."""
    proc = subprocess.run(
        [str(CLUSTER_SCRIPT), "check-nodes"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return (proc.stdout.strip() or proc.stderr.strip()) if proc.returncode != 0 else ""


def require_nodes() -> None:
    """Skip (or under CI=true where apt-get is, fail) saying why real nodes cannot run here."""
    reason = nodes_unavailable()
    if reason and os.environ.get("CI") == "true" and shutil.which("apt-get"):
        pytest.fail(f"CI=true and apt-get is here, but real nodes cannot run: {reason}")
    if reason:
        pytest.skip(f"no real nodes here: {reason}")


def node_tools(timings: dict[str, str]) -> Path:
    """The control plane's binaries with the kubelet and the pause image (built when missing);
    returns their directory and notes the kubelet's build (or cache) time in ``timings``."""
    started = time.monotonic()
    tools = subprocess.run(
        [str(TOOLS_SCRIPT), "--control-plane", "--nodes"],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if tools.returncode != 0:
        raise AssertionError(f"hack/cluster/tools.sh --nodes failed:\n{tools.stderr}")
    built = re.search(r"built kubelet in (\d+)s", tools.stderr)
    timings["kubelet build"] = (
        f"{built[1]} s (built now)"
        if built
        else f"cached; tools.sh --nodes took {time.monotonic() - started:.1f} s"
    )
    return Path(tools.stdout.strip().splitlines()[-1])


KLOG_LINE = re.compile(r"^[IWEF]\d{4} (\d\d):(\d\d):(\d\d\.\d+)")


def klog_time(line: str) -> float:
    """The time of a klog line (``I1201 17:23:46.975187 ...``) as seconds since midnight."""
    match = KLOG_LINE.match(line)
    if not match:
        raise ValueError(f"not a klog line: {line[:80]!r}")
    return int(match[1]) * 3600 + int(match[2]) * 60 + float(match[3])


@dataclass
class Usage:
    """CPU time and RSS of one process, sampled at the start and at the end of the tests."""

    name: str
    pid: int
    cpu0: float = 0.0
    wall0: float = 0.0

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def status(self, key: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])  # kB
        return 0

    def start(self) -> None:
        self.cpu0, self.wall0 = self.cpu(), time.monotonic()

    def report(self) -> str:
        share = 100 * (self.cpu() - self.cpu0) / max(time.monotonic() - self.wall0, 1e-6)
        rss, peak = self.status("VmRSS") / 1024, self.status("VmHWM") / 1024
        return f"{share:.1f} % of a core during the tests, RSS {rss:.0f} MiB (peak {peak:.0f} MiB)"


@dataclass
class RealCluster:
    cp: ControlPlane
    kube: Kube
    bin_dir: Path
    image: str
    namespace: str
    timings: dict[str, str] = field(default_factory=dict)
    usage: list[Usage] = field(default_factory=list)
    #: the other images imported, by their image.sh argument
    images: dict[str, str] = field(default_factory=dict)

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def node_dir(self) -> Path:
        return self.cp.directory / "nodes" / NODE

    def state(self) -> dict[str, str]:
        pairs = (
            line.split("=", 1)
            for line in (self.cp.directory / "state.env").read_text().splitlines()
        )
        return {k: v.strip('"') for k, v in pairs}

    def run_kubectl(self, *args: str, timeout: float = 60) -> str:
        proc = subprocess.run(
            [str(self.kubectl), "--kubeconfig", str(self.cp.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
            )
        return proc.stdout

    def pod(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.kube.call(
            "GET", f"/api/v1/namespaces/{self.namespace}/pods/{name}"
        )
        return result

    def node(self) -> dict[str, Any]:
        result: dict[str, Any] = self.kube.call("GET", f"/api/v1/nodes/{NODE}")
        return result


def pid_of(directory: Path, name: str) -> int:
    return int((directory / "pids" / f"{name}.pid").read_text().strip())


def node_cluster_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """The directory of a control plane with real nodes: in the session's temporary
    directory, reached through a short link in /tmp (removed at exit). The nodes' unix
    sockets must stay under 104 characters, and a pytest-xdist worker's temporary directory
    is one level deeper than a single process's."""
    real = tmp_path_factory.mktemp(name)
    link = Path(tempfile.gettempdir()) / f"hpn-{uuid.uuid4().hex[:10]}"
    link.symlink_to(real, target_is_directory=True)
    atexit.register(link.unlink, missing_ok=True)
    return link / "cp"


@contextlib.contextmanager
def real_node_cluster(
    tmp_path_factory: pytest.TempPathFactory, *extra_images: str
) -> Iterator[RealCluster]:
    """A control plane of its own with one real node (no fake nodes), the operator image and
    ``extra_images`` (image.sh arguments, e.g. ``--session-host``) imported; a namespace with
    its default ServiceAccount. Skips (or under CI=true where apt-get is, fails) saying why
    when real nodes cannot run here. Stopped on leaving, unless the caller stopped it."""
    require_nodes()
    image = build_image()
    timings: dict[str, str] = {}
    bin_dir = node_tools(timings)

    directory = node_cluster_dir(tmp_path_factory, "real-nodes")
    # Up to minutes the first time: containerd is installed with apt-get where missing.
    cp = ControlPlane(directory, bin_dir=bin_dir, fake_nodes=0, real_nodes=1, timeout=900)
    started = time.monotonic()
    with cp:
        timings["cluster.sh up (control plane + node)"] = f"{time.monotonic() - started:.1f} s"
        # Node start -> Ready: from the kubelet's first log line to its "became ready" one.
        log = [
            line
            for line in (directory / "logs" / f"kubelet-{NODE}.log").read_text().splitlines()
            if KLOG_LINE.match(line)
        ]
        ready = [line for line in log if "just became ready" in line]
        if log and ready:
            timings["kubelet start -> node Ready"] = (
                f"{klog_time(ready[0]) - klog_time(log[0]):.2f} s"
            )
        started = time.monotonic()
        cp.import_image(image)
        timings["import-image (podman save + ctr import)"] = f"{time.monotonic() - started:.1f} s"
        others = [build_image(arg) for arg in extra_images]
        for other in others:
            cp.import_image(other)

        kube = Kube.connect(cp.kubeconfig)
        namespace = unique_name("real-nodes")
        kube.create_namespace(namespace)
        wait_default_service_account(kube, namespace)
        usage = [
            Usage("kubelet", pid_of(directory, f"kubelet-{NODE}")),
            Usage("containerd", pid_of(directory, f"containerd-{NODE}")),
        ]
        for u in usage:
            u.start()
        yield RealCluster(
            cp,
            kube,
            bin_dir,
            image,
            namespace,
            timings=timings,
            usage=usage,
            images=dict(zip(extra_images, others, strict=True)),
        )


def other_kubelets(directory: Path) -> bool:
    """A kubelet not of this module's cluster runs on the machine (it shares fixed paths)."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.joinpath("comm").read_text().strip() != "kubelet":
                continue
            if str(directory) not in proc.joinpath("cmdline").read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False


def iptables_rules(binary: str) -> str:
    proc = subprocess.run(
        [f"{binary}-save"], capture_output=True, text=True, check=False, timeout=30
    )
    return proc.stdout


@dataclass
class NodeTraces:
    """What identifies the node's things outside the cluster directory."""

    directory: Path
    bridge: str
    net: str
    sock: str
    ids: list[str]
    pids: list[int]

    @property
    def shim_sockets(self) -> list[Path]:
        # containerd's shim socket: sha256(<containerd address>/<namespace>/<id>).
        return [
            Path("/run/containerd/s")
            / hashlib.sha256(f"{self.sock}/k8s.io/{i}".encode()).hexdigest()
            for i in self.ids
        ]


def node_traces(directory: Path, state: dict[str, str], pids: list[int]) -> NodeTraces:
    """The traces of the running node real-node-1 of the cluster in ``directory`` (whose
    state.env is ``state``; ``pids``: its kubelet's and containerd's), its containers listed
    from its containerd (there must be some)."""
    sock = str(directory / "nodes" / NODE / "containerd.sock")
    ids = subprocess.run(
        ["ctr", "--address", sock, "--namespace", "k8s.io", "containers", "ls", "-q"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()
    assert ids, "no containers in the node's containerd"
    return NodeTraces(directory, state["NODES_BRIDGE"], state["NODES_NET"], sock, ids, pids)


def leftovers(node: NodeTraces) -> list[str]:
    """Everything of the node still there: processes, mounts, cgroups, network, files."""
    left = [f"process {p}" for p in node.pids if Path(f"/proc/{p}").exists()]
    shims = subprocess.run(
        ["pgrep", "-f", "--", f"-address {node.sock}"], capture_output=True, text=True, check=False
    )
    left += [f"shim {p}" for p in shims.stdout.split()]
    mounts = [
        line.split(" - ")[0].split() + line.split(" - ")[1].split()
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
    ]
    # The kernel names mounts by the real path, not the short link the cluster was given.
    under = (str(node.directory), str(node.directory.resolve()))
    left += [f"mount {m[4]}" for m in mounts if m[4].startswith(under)]
    cgroups = [Path(m[4]) for m in mounts if m[-3] in ("cgroup", "cgroup2")]
    left += [
        f"cgroup {p}"
        for c in cgroups
        for p in (c / f"hostpool-{node.bridge}-{NODE}", c / "kubepods")
        if p.exists()
    ]
    net = Path("/sys/class/net")
    if (net / node.bridge).exists():
        left.append(f"bridge {node.bridge}")
    left += [
        f"veth {p.name}"
        for p in net.iterdir()
        if (p / "master").exists() and (p / "master").resolve().name == node.bridge
    ]
    others = other_kubelets(node.directory)
    for binary in ("iptables", "ip6tables"):
        rules = iptables_rules(binary).splitlines()
        ours = (f"HOSTPOOL-APISVC-{node.bridge}", f"{node.net}.", f"hostpool-{node.bridge}")
        left += [f"{binary}: {r}" for r in rules if any(o in r for o in ours)]
        if not others:  # the machine-wide chains go with the last kubelet
            shared = (
                "CNI-HOSTPORT-",
                "CNI-DN-",
                "KUBE-FIREWALL",
                "KUBE-KUBELET-CANARY",
                "KUBE-IPTABLES-HINT",
            )
            left += [
                f"{binary}: {r}" for r in rules if r.startswith(":") and r[1:].startswith(shared)
            ]
    left += [str(s) for s in node.shim_sockets if s.exists()]
    logs = Path("/var/log/containers")
    if logs.is_dir():
        left += [
            str(p)
            for p in logs.iterdir()
            if p.is_symlink() and str(node.directory) in os.readlink(p)
        ]
    results = Path("/var/lib/cni/results")
    if results.is_dir():
        left += [
            str(p)
            for p in results.iterdir()
            if any(i in p.name for i in node.ids) or p.name.startswith(f"hostpool-{node.bridge}-")
        ]
    if not others:
        fixed = ("/var/lib/kubelet/device-plugins", "/var/log/containers")
        left += [p for p in fixed if Path(p).exists()]
    return left
