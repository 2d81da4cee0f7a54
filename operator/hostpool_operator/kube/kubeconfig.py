"""A login for a command-line tool, as kubectl finds it: the kubeconfig files of
``--kubeconfig`` or ``$KUBECONFIG`` (merged, the first file naming an entry wins) or
``~/.kube/config``, the context ``--context`` names or the current one, and that context's
namespace; paths in a file relative to that file; a user's token, token file, client
certificate, basic auth, or exec credential plugin (what managed clusters' kubeconfigs use).
In a pod with no kubeconfig, the service account.

The programs log in with :func:`kube.auth.login` (kopf's way, the current context only);
this is for a person's tool that must reach whichever cluster and context it is told.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
import yaml

from .auth import SERVICE_ACCOUNT_TOKEN, in_cluster_server

#: Seconds an exec credential plugin may take (a cloud CLI fetching a token).
EXEC_TIMEOUT = 60.0
SERVICE_ACCOUNT_DIR = Path(SERVICE_ACCOUNT_TOKEN).parent


class KubeconfigError(Exception):
    """No usable kubeconfig or context; the message says which and why."""


@dataclass(frozen=True, slots=True)
class ToolLogin:
    info: kopf.ConnectionInfo
    #: The context's namespace ("default" when it names none).
    namespace: str
    #: The context's name ("in-cluster" for a pod's service account).
    context: str
    #: A file the bearer token is read from (and re-read after a 401), if any.
    token_file: str | None = None


def kubeconfig_paths(explicit: str | None, environ: Mapping[str, str]) -> list[Path]:
    """The files to read, in order: ``--kubeconfig``, else ``$KUBECONFIG`` (a list), else
    ``~/.kube/config`` when it exists."""
    if explicit:
        return [Path(explicit).expanduser()]
    listed = environ.get("KUBECONFIG", "")
    paths = [Path(p).expanduser() for p in listed.split(os.pathsep) if p.strip()]
    if paths:
        return paths
    default = Path(environ.get("HOME", "~")).expanduser() / ".kube" / "config"
    return [default] if default.exists() else []


@dataclass
class _Merged:
    current: str | None = None
    contexts: dict[str, Any] = field(default_factory=dict)
    clusters: dict[str, Any] = field(default_factory=dict)
    users: dict[str, Any] = field(default_factory=dict)
    files: int = 0


def _absolute(entry: Mapping[str, Any], keys: tuple[str, ...], base: Path) -> dict[str, Any]:
    out = dict(entry)
    for key in keys:
        value = out.get(key)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            out[key] = str(base / value)
        elif isinstance(value, str) and value:
            out[key] = str(Path(value).expanduser())
    return out


def _read(paths: list[Path], explicit: bool) -> _Merged:
    merged = _Merged()
    for path in paths:
        try:
            config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            if explicit:
                raise KubeconfigError(f"kubeconfig {path}: no such file") from None
            continue  # kubectl skips a missing file of $KUBECONFIG
        except (OSError, yaml.YAMLError) as error:
            raise KubeconfigError(f"kubeconfig {path}: cannot read it: {error}") from None
        if not isinstance(config, dict):
            raise KubeconfigError(f"kubeconfig {path}: not a kubeconfig (no mapping)")
        merged.files += 1
        merged.current = merged.current or config.get("current-context") or None
        base = path.parent
        for item in config.get("contexts") or []:
            merged.contexts.setdefault(item.get("name"), item.get("context") or {})
        for item in config.get("clusters") or []:
            cluster = _absolute(item.get("cluster") or {}, ("certificate-authority",), base)
            merged.clusters.setdefault(item.get("name"), cluster)
        for item in config.get("users") or []:
            user = _absolute(
                item.get("user") or {}, ("client-certificate", "client-key", "tokenFile"), base
            )
            merged.users.setdefault(item.get("name"), user)
    return merged


def run_exec_plugin(spec: Mapping[str, Any], cluster: Mapping[str, Any]) -> dict[str, Any]:
    """Run a user's ``exec`` credential plugin; its ExecCredential's ``status`` (token, or
    client certificate and key)."""
    command = spec.get("command")
    if not isinstance(command, str) or not command:
        raise KubeconfigError("the user's exec plugin names no command")
    env = dict(os.environ)
    for pair in spec.get("env") or []:
        env[str(pair.get("name"))] = str(pair.get("value", ""))
    api_version = spec.get("apiVersion") or "client.authentication.k8s.io/v1"
    exec_info = {
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": False, "cluster": {"server": cluster.get("server")}},
    }
    env["KUBERNETES_EXEC_INFO"] = json.dumps(exec_info)
    argv = [command, *(str(a) for a in spec.get("args") or [])]
    try:
        done = subprocess.run(
            argv, env=env, capture_output=True, timeout=EXEC_TIMEOUT, check=False, text=True
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KubeconfigError(f"exec credential plugin {command}: {error}") from None
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:300]
        raise KubeconfigError(
            f"exec credential plugin {command} exited with {done.returncode}: {said}"
        )
    try:
        status = json.loads(done.stdout).get("status") or {}
    except (ValueError, AttributeError):
        raise KubeconfigError(f"exec credential plugin {command}: no ExecCredential") from None
    return dict(status)


def _in_cluster() -> ToolLogin | None:
    if not Path(SERVICE_ACCOUNT_TOKEN).exists():
        return None
    server = in_cluster_server()
    if server is None:
        return None
    namespace_file = SERVICE_ACCOUNT_DIR / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.exists() else ""
    ca = SERVICE_ACCOUNT_DIR / "ca.crt"
    info = kopf.ConnectionInfo(
        server=server,
        ca_path=str(ca) if ca.exists() else None,
        token=Path(SERVICE_ACCOUNT_TOKEN).read_text().strip() or None,
        default_namespace=namespace or None,
    )
    return ToolLogin(info, namespace or "default", "in-cluster", SERVICE_ACCOUNT_TOKEN)


def load_login(
    kubeconfig: str | None = None,
    context: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> ToolLogin:
    """The login of ``context`` (default: the current one) in the kubeconfig files;
    KubeconfigError when there is none to use."""
    paths = kubeconfig_paths(kubeconfig, environ)
    if not paths and not context:
        login = _in_cluster()
        if login is not None:
            return login
        raise KubeconfigError(
            "no kubeconfig: give --kubeconfig, set KUBECONFIG or write ~/.kube/config"
        )
    merged = _read(paths, explicit=bool(kubeconfig))
    if not merged.files:
        named = os.pathsep.join(str(p) for p in paths)
        raise KubeconfigError(f"no kubeconfig: none of KUBECONFIG={named} exists")
    name = context or merged.current
    if not name:
        raise KubeconfigError("the kubeconfig has no current-context: give --context")
    if name not in merged.contexts:
        raise KubeconfigError(f"context {name!r} is not in the kubeconfig")
    ctx = merged.contexts[name]
    cluster = merged.clusters.get(ctx.get("cluster"))
    if not cluster or not cluster.get("server"):
        raise KubeconfigError(f"context {name!r}: its cluster {ctx.get('cluster')!r} has no server")
    user = dict(merged.users.get(ctx.get("user")) or {})
    if isinstance(user.get("exec"), dict):
        status = run_exec_plugin(user["exec"], cluster)
        user["token"] = status.get("token")
        user["client-certificate-data"] = status.get("clientCertificateData")
        user["client-key-data"] = status.get("clientKeyData")
    token_file = user.get("tokenFile") if not user.get("token") else None
    token = user.get("token") or ((user.get("auth-provider") or {}).get("config") or {}).get(
        "access-token"
    )
    if token is None and token_file:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip() or None
        except OSError as error:
            raise KubeconfigError(f"context {name!r}: token file {token_file}: {error}") from None
    info = kopf.ConnectionInfo(
        server=str(cluster["server"]),
        ca_path=cluster.get("certificate-authority"),
        ca_data=cluster.get("certificate-authority-data"),
        insecure=cluster.get("insecure-skip-tls-verify"),
        certificate_path=user.get("client-certificate"),
        certificate_data=user.get("client-certificate-data"),
        private_key_path=user.get("client-key"),
        private_key_data=user.get("client-key-data"),
        username=user.get("username"),
        password=user.get("password"),
        token=token,
        default_namespace=ctx.get("namespace"),
    )
    return ToolLogin(info, ctx.get("namespace") or "default", name, token_file)
