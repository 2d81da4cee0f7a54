"""End-to-end fixtures: the real operator, as a subprocess, against the suite's API server.

``operator_process`` (function scope: each test has its own namespace and its own operator)
starts ``python -m hostpool_operator run --namespace <ns> --status-interval 0.2`` with
``KUBECONFIG`` pointing at the ``kube`` fixture's cluster, waits for its "started" log line,
and stops it (SIGTERM, SIGKILL after 10 s) at teardown: teardown waits until the operator
has shut down, a background thread waits for the process to exit.
It serves its Prometheus metrics on a free local port (``operator_process.metrics()``).
``operator_process.restart()`` stops and starts it again (the log file is appended to);
``stop()`` and ``start()`` do one half each. A test whose operator logged an error or a
traceback fails at teardown.

When a test that used the operator fails, the operator's last log lines are attached to the
report as a section named "operator log" (and any log a fixture registered in EXTRA_LOGS).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from support.agent_process import AgentProcess
from support.broker_helpers import (
    CLIENT,
    REALM,
    BrokerProcess,
    Connecting,
    Obj,
    add_realm_key,
    keycloak_token,
)
from support.cluster import Cluster
from support.keycloak import Keycloak, KeycloakError, keycloak_home, suite_realms
from support.kube import Kube
from support.operator_process import OperatorProcess, join_reapers
from support.ports import free_port
from support.report_logs import EXTRA_LOGS

OPERATOR_LOG_LINES = 80

_OPERATOR_KEY = pytest.StashKey[OperatorProcess]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the operator's log tail to the report of a failed test that ran it."""
    del call
    report = yield
    operator = item.stash.get(_OPERATOR_KEY, None)
    if report.failed and operator is not None:
        try:
            tail = operator.log_tail(OPERATOR_LOG_LINES)
        except Exception as exc:  # never hide the test's own failure
            tail = f"(could not read the operator log: {exc})"
        report.sections.append(
            (f"operator log (last {OPERATOR_LOG_LINES} lines; {operator.log_path})", tail)
        )
    if report.failed:
        for title, read in item.stash.get(EXTRA_LOGS, []):
            try:
                text = read()
            except Exception as exc:  # never hide the test's own failure
                text = f"(could not read it: {exc})"
            report.sections.append((title, text))
    return report


@pytest.fixture
def operator_process(
    kube: Kube, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[OperatorProcess]:
    """The operator watching this test's namespace; started, and stopped after the test."""
    operator = OperatorProcess(
        kube.kubeconfig, namespace, tmp_path / "operator.log", metrics_port=free_port()
    )
    request.node.stash[_OPERATOR_KEY] = operator
    operator.start()
    try:
        yield operator
    finally:
        operator.stop(wait=False)
    errors = operator.problems()
    if errors:
        pytest.fail(
            "the operator logged errors during the test:\n" + "\n".join(errors[:40]),
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def _reap_operators() -> Iterator[None]:
    """Operators are stopped without waiting for kopf's idle seconds before exit; make sure
    every one of them has exited (SIGKILL after 10 s) before the session ends."""
    yield
    join_reapers()


@pytest.fixture
def cluster(kube: Kube, namespace: str) -> Cluster:
    """The test namespace's objects (create from dicts, read, patch, wait)."""
    return Cluster(kube, namespace)


# ---------------------------------------------------------------------------------------
# Keycloak: a real OIDC identity provider (tests/keycloak.py), one for the whole session.


KEYCLOAK_LOG_LINES = 60


@pytest.fixture(scope="session")
def keycloak(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keycloak]:
    """One Keycloak for the session (lazy: only a test that asks for it starts it), on a
    free 127.0.0.1 port, with realms ``corp`` and ``other`` of ``keycloak.suite_realms()``:
    client ``keycloak.CLIENT_ID`` (secret ``keycloak.CLIENT_SECRET``), users
    ``keycloak.CORP_USERS`` and ``keycloak.OTHER_USERS``. Fetched by hack/cluster/keycloak.sh
    on first use; 15-60 s to start (in-memory database, realms imported at each start).
    Its log is under the session's temporary directory; a start that fails says why with
    the log's last lines."""
    problem = ""
    try:
        server = Keycloak(keycloak_home(), tmp_path_factory.mktemp("keycloak"))
        server.start(suite_realms())
    except KeycloakError as exc:
        problem = str(exc)
    if problem:
        pytest.fail(f"Keycloak is not available: {problem}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _keycloak_log_on_failure(request: pytest.FixtureRequest) -> None:
    """A failed test that used ``keycloak`` gets Keycloak's log tail in its report (starts
    nothing for a test that did not ask for it)."""
    if "keycloak" not in request.fixturenames:
        return
    server: Keycloak = request.getfixturevalue("keycloak")
    request.node.stash.setdefault(EXTRA_LOGS, []).append(
        (
            f"keycloak log (last {KEYCLOAK_LOG_LINES} lines; {server.log_path})",
            lambda: server.log_tail(KEYCLOAK_LOG_LINES),
        )
    )


# ---------------------------------------------------------------------------------------
# the broker: its processes, users' tokens, tokens signed with a key of the realm


@pytest.fixture(scope="session")
def realm_key(keycloak: Keycloak) -> tuple[str, Any]:
    """(kid, private key) of an RSA key the test adds to realm corp at low priority: it is
    published in the realm's key set, Keycloak keeps signing with its own."""
    return add_realm_key(keycloak, "e2e-test-key", priority=1)


@pytest.fixture
def tokens(keycloak: Keycloak) -> Callable[[str], str]:
    """A fresh access token of a realm user, from Keycloak's password grant."""
    return lambda user: keycloak_token(keycloak, user)


@pytest.fixture
def sign(keycloak: Keycloak, realm_key: tuple[str, Any]) -> Callable[..., str]:
    """A token signed with the realm's test key: standard claims, overridden by keywords
    (None removes one)."""
    kid, private = realm_key

    def make(headers: Obj | None = None, **claims: Any) -> str:
        now = int(time.time())
        body: Obj = {
            "iss": keycloak.issuer(REALM),
            "aud": CLIENT,
            "sub": "test",
            "iat": now,
            "exp": now + 300,
            "preferred_username": "alice",
            "groups": ["/finance-desk"],
        }
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, private, algorithm="RS256", headers={"kid": kid, **(headers or {})})

    return make


@pytest.fixture
def brokers(
    kube: Kube,
    namespace: str,
    keycloak: Keycloak,
    realm_key: tuple[str, Any],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers for this test's namespace (the first call's is the one most tests
    use); stopped after the test, their logs attached when it fails. A broker that logged
    an error fails the test."""
    del realm_key  # in the key set before any broker fetches it
    made: list[BrokerProcess] = []
    logs = request.node.stash.setdefault(EXTRA_LOGS, [])

    def start(
        *extra: str,
        ready: bool = True,
        trust: ssl.SSLContext | None = None,
        issuer: str | None = None,
    ) -> BrokerProcess:
        broker = BrokerProcess(
            kube.kubeconfig,
            issuer or keycloak.issuer(REALM),
            CLIENT,
            [namespace],
            tmp_path / f"broker-{len(made)}.log",
            extra_args=extra,
        )
        broker.ssl_context = trust
        made.append(broker)
        logs.append((f"broker {len(made) - 1} log", lambda: broker.log_tail(60)))
        broker.start(ready=ready)
        return broker

    yield start
    for broker in made:
        broker.stop()
    problems = [line for broker in made for line in broker.problems()]
    if problems:
        pytest.fail("a broker logged errors:\n" + "\n".join(problems[:20]), pytrace=False)


@pytest.fixture
def connecting(
    cluster: Cluster,
    operator_process: OperatorProcess,
    brokers: Callable[..., BrokerProcess],
    tokens: Callable[[str], str],
) -> Connecting:
    """Users connecting through brokers: this test's namespace with its operator running
    (it places the requests the brokers create), ``brokers`` and ``tokens``."""
    del operator_process
    return Connecting(cluster, brokers, tokens)


@pytest.fixture
def logoff_agent(
    kube: Kube, namespace: str, tmp_path: Path
) -> Iterator[Callable[[str], tuple[AgentProcess, Path]]]:
    """Start the agent of a host of this test's namespace, reporting every 0.5 s, whose logoff
    command writes the user's name to a file: (the agent, that file, written only once a
    logoff ran). Stopped after the test if the test did not stop it."""
    started: list[AgentProcess] = []

    def start(host: str) -> tuple[AgentProcess, Path]:
        logoffs = tmp_path / f"{host}-logged-off.txt"
        agent = AgentProcess(kube.kubeconfig, namespace, host, tmp_path / f"{host}-agent.log")
        started.append(agent)
        agent.start("--logoff-command", f'echo "$HOSTPOOL_USER" >> {logoffs}', interval=0.5)
        return agent, logoffs

    yield start
    for agent in started:
        agent.stop()
