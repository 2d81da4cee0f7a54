"""How the operator's client proves who it is: the kubeconfig or in-cluster login, the TLS
context, and the bearer token, re-read from its file (the kubelet rotates in-cluster
tokens; a kubeconfig may name a ``tokenFile``) every minute and after a 401.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import os
import ssl
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import kopf
import yaml

log = logging.getLogger(__name__)

#: The in-cluster service account token. The kubelet rewrites it well before it expires
#: (bound tokens live an hour or so), so a client that read it once gets 401s later.
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
#: Seconds between two reads of the token file (client-go reads it every minute too).
TOKEN_REREAD = 60.0


def ssl_context(info: kopf.ConnectionInfo) -> ssl.SSLContext | bool:
    if not info.server.startswith("https"):
        return False
    context = ssl.create_default_context()
    if info.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if info.ca_path:
        context.load_verify_locations(cafile=info.ca_path)
    elif info.ca_data:
        data = info.ca_data
        text = data.decode() if isinstance(data, bytes) else data
        if "-----BEGIN" not in text:
            text = base64.b64decode(text).decode()
        context.load_verify_locations(cadata=text)
    cert, key = info.certificate_path, info.private_key_path
    if info.certificate_data and info.private_key_data:
        # ssl wants files for client certificates; they live only as long as the loading.
        with (
            tempfile.NamedTemporaryFile("wb") as cert_file,
            tempfile.NamedTemporaryFile("wb") as key_file,
        ):
            for target, data in (
                (cert_file, info.certificate_data),
                (key_file, info.private_key_data),
            ):
                raw = data.encode() if isinstance(data, str) else data
                if b"-----BEGIN" not in raw:
                    raw = base64.b64decode(raw)
                target.write(raw)
                target.flush()
            context.load_cert_chain(cert_file.name, key_file.name)
    elif cert and key:
        context.load_cert_chain(cert, key)
    return context


def _kubeconfig_user() -> dict[str, Any]:
    """The current context's user in $KUBECONFIG (or ~/.kube/config), read as kopf reads it:
    several files merged, the first one naming an entry wins. Empty when there is none."""
    kubeconfig = os.environ.get("KUBECONFIG") or "~/.kube/config"
    paths = [os.path.expanduser(p.strip()) for p in kubeconfig.split(os.pathsep) if p.strip()]
    current: str | None = None
    contexts: dict[Any, Any] = {}
    users: dict[Any, Any] = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                config = yaml.safe_load(handle) or {}
        except (OSError, yaml.YAMLError):
            continue
        current = current or config.get("current-context")
        for item in config.get("contexts") or []:
            contexts.setdefault(item.get("name"), item.get("context") or {})
        for item in config.get("users") or []:
            users.setdefault(item.get("name"), item.get("user") or {})
    context = contexts.get(current) or {}
    user = users.get(context.get("user")) or {}
    return user if isinstance(user, dict) else {}


#: The server kopf's service-account login names: a DNS name, which needs cluster DNS.
KOPF_IN_CLUSTER_SERVER = "https://kubernetes.default.svc"


def in_cluster_server(environ: Mapping[str, str] = os.environ) -> str | None:
    """The API server as the kubelet tells a pod (``KUBERNETES_SERVICE_HOST`` and ``_PORT``,
    the ``kubernetes`` Service), as client-go's in-cluster config reads it: no cluster DNS
    is needed to reach it. None outside a pod."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = environ.get("KUBERNETES_SERVICE_PORT", "").strip()
    if not host or not port.isdigit():
        return None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    return f"https://{host}:{port}"


def token_file() -> str | None:
    """The file the operator's bearer token is (re-)read from: in-cluster the service
    account's, else the kubeconfig user's ``tokenFile`` (None: the token does not come
    from a file)."""
    if os.path.exists(SERVICE_ACCOUNT_TOKEN):
        return SERVICE_ACCOUNT_TOKEN
    user = _kubeconfig_user()
    path = user.get("tokenFile")
    if not path or user.get("token"):  # kubectl prefers an inline token too
        return None
    return os.path.expanduser(str(path))


def read_token(path: str) -> str | None:
    """The token in ``path``, or None when it cannot be read or is empty."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError as error:
        log.warning("cannot read the token file %s: %s", path, error)
        return None


def login(settings: kopf.OperatorSettings | None = None) -> kopf.ConnectionInfo:
    """Credentials as kopf finds them: in-cluster service account, else the kubeconfig,
    whose user's ``tokenFile`` is read here (kopf's kubeconfig login ignores it)."""
    settings = settings or kopf.OperatorSettings()
    info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(
        settings=settings
    )
    if info is None:
        raise kopf.LoginError("no in-cluster service account and no usable kubeconfig found")
    if info.server == KOPF_IN_CLUSTER_SERVER and (server := in_cluster_server()):
        info = dataclasses.replace(info, server=server)
    path = token_file()
    if path is not None and not info.token and (token := read_token(path)):
        info = dataclasses.replace(info, token=token)
    return info


class Credentials:
    """The Authorization header a request carries: the login's token (or basic auth), and
    the token file read again every ``reread_every`` seconds and on demand."""

    def __init__(
        self,
        info: kopf.ConnectionInfo,
        *,
        token_file: str | None = None,
        reread_every: float = TOKEN_REREAD,
    ) -> None:
        self._auth: dict[str, str] = {}
        self._scheme = info.scheme or "Bearer"
        self._token = info.token
        self._token_file = token_file
        self._reread_every = reread_every
        self._read_at = time.monotonic()
        if info.token:
            self._auth["Authorization"] = f"{self._scheme} {info.token}"
        elif info.username and info.password:
            raw = f"{info.username}:{info.password}".encode()
            self._auth["Authorization"] = f"Basic {base64.b64encode(raw).decode()}"

    @property
    def authorization(self) -> str | None:
        return self._auth.get("Authorization")

    def reread(self) -> bool:
        """Read the token file again; True when it holds a new token (used from now on)."""
        self._read_at = time.monotonic()
        if self._token_file is None:
            return False
        token = read_token(self._token_file)
        if token is None or token == self._token:
            return False
        self._token = token
        self._auth["Authorization"] = f"{self._scheme} {token}"
        log.info("token file %s re-read: a new token is used from now on", self._token_file)
        return True

    def header(self) -> dict[str, str]:
        """The header to send now (the file re-read first when it is due)."""
        if self._token_file is not None and time.monotonic() - self._read_at >= self._reread_every:
            self.reread()
        return self._auth
