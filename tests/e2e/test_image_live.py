"""The operator image (``make image``, ``hack/cluster/image.sh``) run as the chart runs it.

The image is built (or found up to date in its cache) by ``hack/cluster/image.sh``, which
sets podman up with apt-get where it is missing. The test renders the chart, applies its
ServiceAccount and RBAC, gets the ServiceAccount's token (TokenRequest) and runs the image
with podman under that token only: exactly the container arguments of the chart's
Deployment, user 65532, a read-only root filesystem with a tmpfs on /tmp only (the chart's
emptyDir), the kubeconfig mounted read-only, the host's network (the suite's control plane
listens on 127.0.0.1). Requests get placed, the liveness and metrics endpoints answer, and
the operator's log holds no refusal. The same image runs ``hostpool-agent``, which reports
for a host.

Where podman cannot be had (no apt-get, or not root) the tests skip, saying why; with
``CI=true`` on a machine with apt-get they fail instead (CI must run them).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import test_rbac_live as rbac
from support import builders
from support.conditions import status
from support.helm import helm_template
from support.keycloak import (
    CLIENT_ID,
    CLIENT_SECRET,
    CORP,
    PORTAL_CLIENT_ID,
    PORTAL_CLIENT_SECRET,
    Keycloak,
)
from support.kube import Kube, unique_name, wait_for
from support.paths import REPO_ROOT
from support.podman import PODMAN, build_image, podman, podman_env
from support.ports import free_port

#: Where the kubeconfig is mounted in the container.
KUBECONFIG_IN_CONTAINER = "/var/run/hostpool/kubeconfig"
UID = "65532"

# The chart's rendering, ServiceAccount and token, from the RBAC live test.
install_identity = rbac.install_identity


@pytest.fixture(scope="module")
def image() -> str:
    """The operator image, built by hack/cluster/image.sh (a second or two when cached)."""
    return build_image()


def self_contained(kubeconfig: Path, target: Path) -> Path:
    """The kubeconfig with its CA file inlined (certificate-authority-data), readable by the
    container's user: only this one file is mounted."""
    config = yaml.safe_load(kubeconfig.read_text())
    for entry in config["clusters"]:
        cluster = entry["cluster"]
        ca = cluster.pop("certificate-authority", None)
        if ca:
            path = Path(ca) if Path(ca).is_absolute() else kubeconfig.parent / ca
            cluster["certificate-authority-data"] = base64.b64encode(path.read_bytes()).decode()
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o644)
    return target


class Container:
    """A detached ``podman run`` of the image; removed (its log kept) at the end."""

    def __init__(
        self,
        image: str,
        kubeconfig: Path,
        *,
        entrypoint: str | None = None,
        mounts: dict[str, Path] | None = None,
    ) -> None:
        self.image = image
        self.kubeconfig = kubeconfig
        self.entrypoint = entrypoint
        #: more read-only mounts: the path in the container -> the local file or directory
        self.mounts = mounts or {}
        self.name = unique_name("hostpool-image", max_length=40)
        self.started = False

    def run_argv(self, args: list[str], *, detach: bool) -> list[str]:
        argv = ["run", "--rm" if not detach else "--detach", "--name", self.name]
        argv += ["--network=host", "--user", f"{UID}:{UID}"]
        # The chart's securityContext: read-only root filesystem, an emptyDir on /tmp only
        # (podman's default tmpfs on /run and /var/tmp too is turned off).
        argv += ["--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:rw,size=16m"]
        argv += ["--cap-drop=all", "--security-opt=no-new-privileges"]
        argv += ["-v", f"{self.kubeconfig}:{KUBECONFIG_IN_CONTAINER}:ro"]
        for inside, local in self.mounts.items():
            argv += ["-v", f"{local}:{inside}:ro"]
        argv += ["-e", f"KUBECONFIG={KUBECONFIG_IN_CONTAINER}"]
        if self.entrypoint:
            argv += ["--entrypoint", self.entrypoint]
        return [*argv, self.image, *args]

    def start(self, args: list[str]) -> None:
        podman(*self.run_argv(args, detach=True))
        self.started = True

    def logs(self) -> str:
        return podman("logs", self.name, check=False) if self.started else ""

    def running(self) -> bool:
        out = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return out.strip() == "true"

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*PODMAN, "exec", self.name, *argv],
            capture_output=True,
            text=True,
            env=podman_env(),
            timeout=60,
            check=False,
        )

    def remove(self) -> str:
        log = self.logs()
        if self.started:
            podman("rm", "--force", "--time", "10", self.name, check=False)
            self.started = False
        return log


@pytest.fixture
def containers() -> Iterator[list[Container]]:
    started: list[Container] = []
    yield started
    for c in started:
        log = c.remove()
        sys.stderr.write(f"---- container {c.name} log (tail)\n{log[-12000:]}\n")


def wait_started(container: Container, line: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while line not in container.logs():
        if not container.running():
            raise AssertionError(f"{container.name} exited:\n{container.logs()}")
        if time.monotonic() > deadline:
            logs = container.logs()
            raise AssertionError(f"{container.name}: no {line!r} in {timeout}s:\n{logs}")
        time.sleep(0.2)


def test_image_places_requests_as_the_chart_runs_it(
    image: str,
    kube: Kube,
    namespace: str,
    install_identity: Callable[[str, dict[str, Any]], rbac.Identity],
    containers: list[Container],
    tmp_path: Path,
) -> None:
    identity = install_identity(namespace, rbac.chart_ports())
    (deployment,) = identity.of_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (spec,) = pod["containers"]
    # What the chart asks of the container, and the test gives it.
    assert str(pod["securityContext"]["runAsUser"]) == UID
    assert spec["securityContext"]["readOnlyRootFilesystem"] is True
    assert [m["mountPath"] for m in spec["volumeMounts"]] == ["/tmp"]

    operator = Container(image, self_contained(identity.kubeconfig, tmp_path / "kubeconfig"))
    containers.append(operator)
    # The Deployment's arguments (the image's entrypoint is `hostpool-operator run`), plus the
    # Lease's namespace, which in a pod comes from the mounted ServiceAccount files.
    operator.start(identity.process_args)
    wait_started(operator, rbac.STARTED_LINE)

    # It runs as 65532 and cannot write its root filesystem.
    uid = operator.exec("python3", "-c", "import os; print(os.getuid(), os.getgid())")
    assert uid.stdout.split() == [UID, UID], uid
    wrote = operator.exec("touch", "/opt/hostpool-operator/x")
    assert wrote.returncode != 0
    assert "Read-only file system" in wrote.stderr, wrote

    # Placement: depth-first fills one host, then the next.
    kube.create(namespace, builders.pool("desk", "DepthFirst", 2))
    for name in ("host-1", "host-2"):
        kube.create(namespace, builders.host(name, "desk", drainMode=False))
    names = [f"r{i}" for i in range(1, 5)]
    for name in names:
        kube.create(namespace, builders.request(name, "desk", f"{name}@corp.example"))
    placed = rbac.wait_assigned(kube, namespace, names)
    assert Counter(placed.values()) == {"host-1": 2, "host-2": 2}

    rbac.assert_probes(identity)
    log = operator.logs()
    refusals = [
        line
        for line in log.splitlines()
        if rbac.FORBIDDEN.search(line) and rbac.TERMINATING not in line
    ]
    assert refusals == [], "\n".join(refusals)
    # Nothing was compiled or written at run time: no .pyc is missing or stale.
    assert "Read-only file system" not in log
    assert operator.running()


def test_image_runs_the_agent(
    image: str, kube: Kube, namespace: str, containers: list[Container], tmp_path: Path
) -> None:
    """``hostpool-agent`` from the same image, read-only, as 65532: it reports for its host."""
    agent = Container(
        image,
        self_contained(kube.kubeconfig, tmp_path / "kubeconfig"),
        entrypoint="hostpool-agent",
    )
    usage = podman(*agent.run_argv(["--help"], detach=False))
    assert "--host" in usage

    kube.create(namespace, builders.pool("desk", "DepthFirst", 2))
    kube.create(namespace, builders.host("host-1", "desk", drainMode=False))
    containers.append(agent)
    agent.start(
        ["--host", "host-1", "--namespace", namespace, "--interval", "1", "--log-format", "text"]
    )
    wait_for(
        lambda: (status(kube.get("SessionHost", namespace, "host-1")).get("agent") or {}).get(
            "version"
        ),
        45,
        what="host-1 reported by the agent in the image",
        show=agent.logs,
    )
    assert agent.running()


def test_image_runs_the_broker(
    image: str,
    kube: Kube,
    namespace: str,
    containers: list[Container],
    tmp_path: Path,
    keycloak: Keycloak,
) -> None:
    """``hostpool-broker`` from the same image, read-only, as 65532: it fetches the issuer's
    keys, syncs its watches, and checks tokens (its JWT and crypto libraries are in it)."""
    broker = Container(
        image,
        self_contained(kube.kubeconfig, tmp_path / "kubeconfig"),
        entrypoint="hostpool-broker",
    )
    usage = podman(*broker.run_argv(["--help"], detach=False))
    assert "--oidc-issuer" in usage
    kube.create(
        namespace,
        builders.pool("desk", "DepthFirst", 2, entitlements={"users": ["alice"]}),
    )
    port = free_port()
    containers.append(broker)
    broker.start(
        [
            "--oidc-issuer",
            keycloak.issuer(CORP),
            "--oidc-allow-insecure-issuer",  # the suite's Keycloak is plain http
            "--oidc-audience",
            CLIENT_ID,
            "--listen",
            f"127.0.0.1:{port}",
            "--namespace",
            namespace,
            "--log-format",
            "text",
        ]
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/readyz", timeout=5) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    wait_for(ready, 60, what="the broker in the image ready", show=broker.logs)
    token = keycloak.token(CORP, CLIENT_ID, CLIENT_SECRET, "alice", "alice-pw")
    listing = urllib.request.Request(
        f"{base}/v1/pools", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(listing, timeout=10) as answer:
        pools = json.loads(answer.read())["pools"]
    assert [p["name"] for p in pools] == ["desk"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{base}/v1/pools", timeout=10)
    assert refused.value.code == 401
    assert token not in broker.logs()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_image_serves_the_portal_as_the_chart_mounts_it(
    image: str,
    kube: Kube,
    namespace: str,
    bin_dir: Path,
    containers: list[Container],
    tmp_path: Path,
    keycloak: Keycloak,
) -> None:
    """The broker with the chart's portal values: the args ``helm template`` renders, the
    two secrets as files at the chart's mount path, the image's own browser RDP client at
    ``--web-client-dir``. The page answers, the sign-in goes to Keycloak with the portal's
    redirect URI, the web client's modules are served from the image, no secret is logged."""
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    values: dict[str, Any] = {
        "broker.enabled": True,
        "broker.namespace": namespace,
        "broker.port": port,
        "broker.metrics.enabled": False,
        "broker.logFormat": "text",
        "broker.oidc.issuer": keycloak.issuer(CORP),
        "broker.oidc.allowInsecureIssuer": True,  # the suite's Keycloak is plain http
        "broker.oidc.audience": CLIENT_ID,
        "broker.portal.enabled": True,
        "broker.portal.clientId": PORTAL_CLIENT_ID,
        "broker.portal.clientSecret.secretName": "hostpool-portal",
        "broker.portal.cookieSecret.secretName": "hostpool-portal",
        "broker.portal.publicURL": public,
        "broker.portal.allowInsecurePublicURL": True,
    }
    docs = helm_template(bin_dir / "helm", values)
    (deployment,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-broker")
    ]
    (spec,) = deployment["spec"]["template"]["spec"]["containers"]
    (mount,) = [m for m in spec["volumeMounts"] if m["name"] == "portal"]
    # The Secret's two keys, as the projected volume lays them out (readable by 65532).
    secret_dir = tmp_path / "portal"
    secret_dir.mkdir()
    cookie = base64.b64encode(os.urandom(48)).decode()
    for name, value in (("client-secret", PORTAL_CLIENT_SECRET), ("cookie-secret", cookie)):
        (secret_dir / name).write_text(value)
        (secret_dir / name).chmod(0o644)
    secret_dir.chmod(0o755)
    args = [a.replace(f"0.0.0.0:{port}", f"127.0.0.1:{port}") for a in spec["args"]]
    web_client_dir = args[args.index("--web-client-dir") + 1]
    broker = Container(
        image,
        self_contained(kube.kubeconfig, tmp_path / "kubeconfig"),
        entrypoint="hostpool-broker",
        mounts={mount["mountPath"]: secret_dir},
    )
    containers.append(broker)
    broker.start(args)

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{public}/readyz", timeout=5) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    wait_for(ready, 60, what="the broker with the portal in the image ready", show=broker.logs)
    with urllib.request.urlopen(f"{public}/", timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/html")
        assert "/auth/login" in answer.read().decode()
    with pytest.raises(urllib.error.HTTPError) as redirect:
        urllib.request.build_opener(_NoRedirect).open(f"{public}/auth/login", timeout=10)
    assert redirect.value.code in (302, 303)
    location = redirect.value.headers["Location"]
    assert location.startswith(f"{keycloak.issuer(CORP)}/protocol/openid-connect/auth?")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
    assert query["client_id"] == [PORTAL_CLIENT_ID]
    assert query["redirect_uri"] == [f"{public}/auth/callback"]
    assert query["code_challenge_method"] == ["S256"]

    # The browser RDP client, from the image's directory (read-only, the lockfile's versions).
    listed = broker.exec("ls", f"{web_client_dir}/node_modules/@devolutions")
    assert listed.stdout.split() == ["iron-remote-desktop", "iron-remote-desktop-rdp"], listed
    wrote = broker.exec("touch", f"{web_client_dir}/x")
    assert wrote.returncode != 0
    versions = json.loads((REPO_ROOT / "hack" / "portal" / "package.json").read_text())
    for package, version in versions["dependencies"].items():
        name = package.split("/")[1]
        url = f"{public}/web-client/{name}@{version}/{name}.js"
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert answer.status == 200
            assert answer.headers["Content-Type"].startswith("text/javascript")
            assert "immutable" in answer.headers["Cache-Control"]
            assert len(answer.read()) > 10_000, url
    log = broker.logs()
    assert PORTAL_CLIENT_SECRET not in log
    assert cookie not in log
