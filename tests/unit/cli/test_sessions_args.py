"""``kubectl hostpool``'s command line, in-process and offline: every bad flag is one line on
stderr and exit 2 before anything logs in; a kubeconfig, context or API server it cannot
use is one line and exit 1 (the API server is a closed local port); and the login it finds
in kubeconfig files is kubectl's (``--kubeconfig``, ``KUBECONFIG`` merged, ``--context``,
the context's namespace, paths relative to their file, token files, exec plugins)."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hostpool_operator.cli.main import main, plugin_main
from hostpool_operator.cli.parser import build_plugin_parser
from hostpool_operator.cli.sessions import refusal
from hostpool_operator.kube.errors import ApiError
from hostpool_operator.kube.kubeconfig import KubeconfigError, load_login

PLUGIN = "kubectl hostpool: error: "


def kubeconfig(
    path: Path,
    server: str,
    *,
    namespace: str | None = "vdi",
    user: dict[str, Any] | None = None,
    current: str | None = "admin",
    name: str = "admin",
    cluster: dict[str, Any] | None = None,
) -> Path:
    context: dict[str, Any] = {"cluster": f"{name}-cluster", "user": f"{name}-user"}
    if namespace:
        context["namespace"] = namespace
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": f"{name}-cluster", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": f"{name}-user", "user": user or {"token": "t0ken"}}],
        "contexts": [{"name": name, "context": context}],
    }
    if current:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as probe:  # a port that was free; closed, nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def run(
    capsys: pytest.CaptureFixture[str], argv: list[str], entry: Callable[..., int] = plugin_main
) -> tuple[int, str, str]:
    code = entry(argv)
    out, err = capsys.readouterr()
    return code, out, err


# (id, arguments, what stderr says): all exit 2, nothing logs in (no kubeconfig exists)
USAGE = [
    ("no-command", [], "the following arguments are required: COMMAND"),
    ("logoff-no-pool", ["logoff", "alice"], "the following arguments are required: --pool"),
    (
        "logoff-bad-in",
        ["logoff", "alice", "--pool", "p", "--in", "10"],
        "--in: '10' is not a duration",
    ),
    (
        "logoff-empty-message",
        ["logoff", "a", "--pool", "p", "--message", " "],
        "--message: give the text",
    ),
    ("disconnect-no-user", ["disconnect", "--pool", "p"], "required: USER"),
    (
        "message-nobody",
        ["message", "hello"],
        "say whom to tell: --pool P, --host H or --user U --pool P",
    ),
    ("message-user-alone", ["message", "hi", "--user", "u"], "--user needs --pool"),
    (
        "message-too-long",
        ["message", "x" * 1025, "--pool", "p"],
        "TEXT: 1025 characters, at most 1024",
    ),
    ("drain-timeout-alone", ["drain", "h1", "--timeout", "5m"], "--timeout is for --wait"),
    ("drain-message-alone", ["drain", "h1", "--message", "bye"], "give --logoff-after too"),
    (
        "drain-bad-after",
        ["drain", "h1", "--logoff-after", "soon"],
        "--logoff-after: 'soon' is not a duration",
    ),
    (
        "drain-bad-timeout",
        ["drain", "h1", "--wait", "--timeout", "1d"],
        "--timeout: '1d' is not a duration",
    ),
    ("sessions-n-and-A", ["sessions", "-n", "x", "-A"], "not allowed with argument -n/--namespace"),
    ("sessions-yaml", ["sessions", "-o", "yaml"], "invalid choice: 'yaml'"),
    ("top-unknown-flag", ["top", "--watch"], "unrecognized arguments: --watch"),
    ("undrain-A", ["undrain", "h1", "-A"], "unrecognized arguments: -A"),
]


@pytest.mark.parametrize(("argv", "says"), [c[1:] for c in USAGE], ids=[c[0] for c in USAGE])
def test_bad_flags_exit_2_in_one_line_before_logging_in(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
    says: str,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    code, out, err = run(capsys, argv)
    assert (code, out) == (2, "")
    assert err.startswith(PLUGIN), err
    assert says in err
    assert err.count("\n") == 1


def test_the_operators_command_has_the_same_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, ["sessions", "drain", "h1", "--timeout", "5m"], main)
    assert code == 2
    assert err == "hostpool-operator: error: --timeout is for --wait\n"
    plugin = build_plugin_parser().format_help()
    for command in ("sessions", "logoff", "disconnect", "message", "drain", "undrain", "top"):
        assert command in plugin


def test_an_unreachable_api_server_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, closed_port: int
) -> None:
    config = kubeconfig(tmp_path / "config", f"https://127.0.0.1:{closed_port}")
    for argv in (["sessions"], ["top", "-A"], ["drain", "h1", "--wait"], ["undrain", "h1"]):
        code, out, err = run(capsys, [*argv, "--kubeconfig", str(config)])
        assert (code, out) == (1, ""), err
        assert err.startswith(
            f"{PLUGIN}cannot reach the API server https://127.0.0.1:{closed_port}: "
        )
        assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("setup", "says"),
    [
        (lambda d: ["--kubeconfig", str(d / "missing")], "missing: no such file"),
        (
            lambda d: ["--kubeconfig", str(kubeconfig(d / "c", "https://x")), "--context", "prod"],
            "context 'prod' is not in the kubeconfig",
        ),
        (
            lambda d: ["--kubeconfig", str(kubeconfig(d / "c", "https://x", current=None))],
            "no current-context: give --context",
        ),
        (lambda d: ["--kubeconfig", str(d / "bad")], "cannot read it"),
    ],
    ids=["missing-file", "unknown-context", "no-current-context", "not-yaml"],
)
def test_a_kubeconfig_it_cannot_use_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    setup: Callable[[Path], list[str]],
    says: str,
) -> None:
    (tmp_path / "bad").write_text("clusters: [unclosed")
    code, out, err = run(capsys, ["sessions", *setup(tmp_path)])
    assert (code, out) == (1, "")
    assert err.startswith(PLUGIN)
    assert says in err


# --------------------------------------------------------------------------- the login


def test_kubeconfig_files_merge_and_the_context_chooses(tmp_path: Path) -> None:
    first = kubeconfig(tmp_path / "a", "https://a.example:6443", namespace="vdi")
    second = kubeconfig(
        tmp_path / "b", "https://b.example:6443", namespace=None, name="other", current="other"
    )
    environ = {"KUBECONFIG": f"{first}:{tmp_path / 'absent'}:{second}", "HOME": str(tmp_path)}
    login = load_login(environ=environ)
    assert (login.context, login.info.server, login.namespace) == (
        "admin",
        "https://a.example:6443",
        "vdi",
    )
    assert login.info.token == "t0ken"
    other = load_login(context="other", environ=environ)
    assert (other.info.server, other.namespace) == ("https://b.example:6443", "default")
    explicit = load_login(str(second), environ=environ)
    assert explicit.context == "other"


def test_paths_are_relative_to_their_file_and_a_token_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "token").write_text("from-file\n")
    config = kubeconfig(
        tmp_path / "config",
        "https://x",
        user={"tokenFile": "pki/token"},
        cluster={"certificate-authority": "pki/ca.crt"},
    )
    login = load_login(str(config), environ={})
    assert login.info.ca_path == str(tmp_path / "pki" / "ca.crt")
    assert login.token_file == str(tmp_path / "pki" / "token")
    assert login.info.token == "from-file"


def test_an_exec_plugin_gives_the_token(tmp_path: Path) -> None:
    plugin = tmp_path / "get-token"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "from-plugin"},
    }
    plugin.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['spec']['cluster']['server'] == 'https://x', info\n"
        "assert sys.argv[1:] == ['--region', os.environ['REGION']]\n"
        f"print({json.dumps(json.dumps(credential))})\n"
    )
    plugin.chmod(0o755)
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(plugin),
            "args": ["--region", "north"],
            "env": [{"name": "REGION", "value": "north"}],
        }
    }
    login = load_login(str(kubeconfig(tmp_path / "c", "https://x", user=user)), environ={})
    assert login.info.token == "from-plugin"
    plugin.write_text("#!/bin/sh\necho 'not logged in' >&2\nexit 3\n")
    with pytest.raises(KubeconfigError, match="exited with 3: not logged in"):
        load_login(str(kubeconfig(tmp_path / "c", "https://x", user=user)), environ={})


def test_the_api_servers_refusals_in_one_line() -> None:
    said = (
        'sessionrequests.hostpool.io "alice" is forbidden: User "jo" cannot patch resource '
        '"sessionrequests/status" in API group "hostpool.io" in the namespace "vdi"'
    )
    assert refusal(ApiError(403, "Forbidden", said), "prod") == said
    assert refusal(ApiError(403, "Forbidden", "denied"), "prod") == "forbidden: denied"
    assert refusal(ApiError(401, "Unauthorized", "Unauthorized"), "prod") == (
        "the API server does not accept the credentials of context 'prod' (401)"
    )
    assert refusal(ApiError(422, "Invalid", "status.notice.message: Too long"), "prod") == (
        "the API server answered 422 Invalid: status.notice.message: Too long"
    )
