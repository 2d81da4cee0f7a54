"""Keycloak as a real OIDC identity provider for the tests and the benchmarks.

``hack/cluster/keycloak.sh`` fetches the server (pinned version, from Maven Central through
mvn) and unpacks it once into the tools cache; :func:`keycloak_home` runs it. A
:class:`Keycloak` runs that cached tree in development mode on 127.0.0.1, with an in-memory
database (``--db=dev-mem``): every start begins from nothing and imports the realms it is
given, so no state leaks from one session to the next. Nothing per session is written into
the cached tree: the realm files and the transaction log live in the session's own directory
(the realm directory is passed as the ``keycloak.migration.dir`` system property, which is
what ``--import-realm`` would otherwise point at ``data/import``). The options never change
from one start to the next, so Keycloak's build step (Quarkus augmentation, 20-30 s) runs
only at the first start of a freshly unpacked tree and is kept in it; until it is done, one
start at a time holds a lock file next to the tree (the build rewrites ``lib/quarkus``).

Start to ready takes 15-60 s on two busy cores (schema, master realm, the import: a realm
of 2,000 users adds 9-21 s), the JVM's RSS 0.45-0.6 GB. Passwords are hashed with one
PBKDF2 round (:data:`FAST_PASSWORD_POLICY`): with Keycloak's default hashing the import of
2,000 users takes minutes and a password grant about 0.25 s of CPU.

A temporary administrator (random password) is created in realm ``master`` through
``KC_BOOTSTRAP_ADMIN_USERNAME``/``_PASSWORD``; :meth:`Keycloak.rotate_key` and
:meth:`Keycloak.retire_key` use it over the admin REST API.

:func:`realm` builds a realm for the import: users with passwords and groups, and one client
(confidential with a secret, or public without) that may use the password grant, whose
tokens carry a ``groups`` claim (full group paths: ``/finance-desk``,
``/contractors/finance-desk``) and the client id in ``aud``.

Usage, from pytest (``tests/e2e/conftest.py``'s ``keycloak`` fixture) or a script::

    with keycloak_session([realm("corp", [("alice", "pw", ["/finance-desk"])], ...)]) as kc:
        access_token = kc.token("corp", "hostpool-desktops", secret, "alice", "pw")

Tokens and secrets are never logged by this module; errors carry Keycloak's error body
(``error`` and ``error_description``), which holds neither.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import json
import os
import secrets
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import aiohttp
import psutil

from support.paths import REPO_ROOT
from support.ports import free_port

FETCH_SCRIPT = REPO_ROOT / "hack" / "cluster" / "keycloak.sh"

ADMIN_USERNAME = "admin"
KEY_PROVIDER = "org.keycloak.keys.KeyProvider"
#: Seconds an access token lives unless a realm says otherwise (long enough for any test).
DEFAULT_TOKEN_LIFESPAN = 600
DEFAULT_READY_TIMEOUT = 300.0
LOG_TAIL_LINES = 60
#: The cheapest stored-password hashing Keycloak offers: one PBKDF2 round. The default hashing
#: cost about 0.25 s per user at the import and per password grant on two busy cores (200
#: users: 51 s; 2,000 users: not imported within 180 s).
FAST_PASSWORD_POLICY = "hashAlgorithm(pbkdf2-sha256) and hashIterations(1)"

#: A realm user: username, password, the names of its groups.
User = tuple[str, str, Sequence[str]]
#: What :meth:`Keycloak.tokens` needs of a user: username and password (groups ignored).
Login = tuple[str, str] | User


class KeycloakError(RuntimeError):
    """Keycloak did not start, or refused a request (the message holds its answer)."""


# ---------------------------------------------------------------------------------------
# realms


def client(
    client_id: str,
    secret: str | None = None,
    *,
    audience: str | None = None,
    access_token_lifespan: int | None = None,
) -> dict[str, Any]:
    """A client that may use the password grant (confidential with ``secret``, public
    without). Its tokens carry ``groups`` as full paths (``/contractors/finance-desk``: a
    group's bare name is ambiguous, two parents can each have a ``finance-desk``) and
    ``audience`` (the client id unless given) in ``aud``; ``access_token_lifespan``
    overrides the realm's."""
    rep: dict[str, Any] = {
        "clientId": client_id,
        "enabled": True,
        "protocol": "openid-connect",
        "publicClient": secret is None,
        "standardFlowEnabled": False,
        "directAccessGrantsEnabled": True,
        "protocolMappers": [
            {
                "name": "groups",
                "protocol": "openid-connect",
                "protocolMapper": "oidc-group-membership-mapper",
                "config": {
                    "claim.name": "groups",
                    "full.path": "true",
                    "id.token.claim": "true",
                    "access.token.claim": "true",
                    "userinfo.token.claim": "true",
                },
            },
            {
                "name": "audience",
                "protocol": "openid-connect",
                "protocolMapper": "oidc-audience-mapper",
                "config": {
                    "included.client.audience": audience or client_id,
                    "id.token.claim": "true",
                    "access.token.claim": "true",
                },
            },
        ],
    }
    if secret is not None:
        rep["secret"] = secret
    if access_token_lifespan is not None:
        rep["attributes"] = {"access.token.lifespan": str(access_token_lifespan)}
    return rep


def portal_client(
    client_id: str,
    secret: str,
    *,
    redirect_uris: Sequence[str] = ("http://127.0.0.1/*",),
    access_token_lifespan: int | None = None,
) -> dict[str, Any]:
    """The portal's client: confidential (``secret``), authorization code flow only, PKCE
    S256 required, the ``groups`` and audience mappers of :func:`client`. Keycloak takes a
    loopback redirect URI with any port (RFC 8252 7.3), so ``http://127.0.0.1/*`` fits every
    test broker's ``<public-url>/auth/callback``; after sign-out the same URIs are allowed."""
    rep = client(client_id, secret, access_token_lifespan=access_token_lifespan)
    rep.update(
        standardFlowEnabled=True,
        directAccessGrantsEnabled=False,
        redirectUris=list(redirect_uris),
        webOrigins=[],
    )
    attributes = rep.setdefault("attributes", {})
    attributes["pkce.code.challenge.method"] = "S256"
    attributes["post.logout.redirect.uris"] = "+"
    return rep


def realm(
    name: str,
    users: Iterable[User],
    groups: Iterable[str] = (),
    client_id: str = "hostpool-desktops",
    client_secret: str | None = None,
    *,
    access_token_lifespan: int = DEFAULT_TOKEN_LIFESPAN,
    more_clients: Iterable[Mapping[str, Any]] = (),
    fast_password_hashing: bool = True,
    email_domain: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A realm representation for the import.

    ``groups``: groups to create, each a path (``/contractors/finance-desk``; a bare name
    is a top-level group); every group a user names is created too, with its parents. The
    realm has the client :func:`client` makes of ``client_id`` and ``client_secret`` (None:
    public), then ``more_clients``. Each user gets an email, a first and a last name (the
    default user profile refuses a login without them: "Account is not fully set up").
    ``fast_password_hashing`` stores passwords with one PBKDF2 round (see
    :data:`FAST_PASSWORD_POLICY`); ``extra`` is merged into the realm last (any field of
    Keycloak's RealmRepresentation, e.g. ``{"ssoSessionMaxLifespan": 36000}``).
    """
    domain = email_domain or f"{name}.example"
    tree: dict[str, Any] = {}
    for group in groups:
        _add_group(tree, group)
    user_reps: list[dict[str, Any]] = []
    for username, password, user_groups in users:
        for group in user_groups:
            _add_group(tree, group)
        user_reps.append(
            {
                "username": username,
                "enabled": True,
                "email": f"{username}@{domain}",
                "emailVerified": True,
                "firstName": username.capitalize(),
                "lastName": "Example",
                "groups": [_group_path(g) for g in user_groups],
                "credentials": [{"type": "password", "value": password, "temporary": False}],
            }
        )
    rep: dict[str, Any] = {
        "realm": name,
        "enabled": True,
        "accessTokenLifespan": access_token_lifespan,
        "groups": _group_reps(tree),
        "users": user_reps,
        "clients": [client(client_id, client_secret), *(dict(c) for c in more_clients)],
    }
    if fast_password_hashing:
        rep["passwordPolicy"] = FAST_PASSWORD_POLICY
    if extra:
        rep.update(extra)
    return rep


def _group_path(group: str) -> str:
    """``/a/b`` of a path or of a bare top-level name ``a``."""
    return group if group.startswith("/") else f"/{group}"


def _add_group(tree: dict[str, Any], group: str) -> None:
    node = tree
    for part in _group_path(group).strip("/").split("/"):
        node = node.setdefault(part, {})


def _group_reps(tree: dict[str, Any]) -> list[dict[str, Any]]:
    """Keycloak GroupRepresentations of a tree of names (children as ``subGroups``)."""
    reps: list[dict[str, Any]] = []
    for name, children in tree.items():
        rep: dict[str, Any] = {"name": name}
        if children:
            rep["subGroups"] = _group_reps(children)
        reps.append(rep)
    return reps


def numbered_users(
    count: int, prefix: str = "user", groups: Sequence[str] = (), start: int = 1
) -> list[User]:
    """``count`` users ``<prefix>0001``... with password ``<username>-pw``, all in ``groups``
    (the digits grow with ``count``, at least 4)."""
    width = max(4, len(str(start + count - 1)))
    names = (f"{prefix}{i:0{width}d}" for i in range(start, start + count))
    return [(name, f"{name}-pw", list(groups)) for name in names]


# ---------------------------------------------------------------------------------------
# the test suite's realms (tests/e2e/conftest.py's ``keycloak`` fixture)

#: The client of both suite realms (confidential; the secret is a test value, not a secret).
CLIENT_ID = "hostpool-desktops"
CLIENT_SECRET = "hostpool-desktops-test-secret"
CORP = "corp"
OTHER = "other"
#: Realm ``corp``, groups by full path (as the tokens carry them). grace's only group looks
#: like /finance-desk but is not it (a prefix match would take it); heidi's group has the
#: name finance-desk too, under /contractors (a match on names would take it); frank is in
#: 10 groups.
CORP_USERS: list[User] = [
    ("alice", "alice-pw", ["/finance-desk"]),
    ("bob", "bob-pw", []),
    ("carol", "carol-pw", ["/finance-desk"]),
    ("dave", "dave-pw", ["/support-desk"]),
    ("erin", "erin-pw", ["/finance-desk", "/support-desk"]),
    ("frank", "frank-pw", [f"/team-{i:02d}" for i in range(1, 11)]),
    ("grace", "grace-pw", ["/finance-desk-eu"]),
    ("heidi", "heidi-pw", ["/contractors/finance-desk"]),
]
#: Realm ``other``: the same client id and secret, and an alice in a /finance-desk group
#: too, so that only the issuer and the signing keys tell her tokens from corp's alice's.
OTHER_USERS: list[User] = [("alice", "alice-other-pw", ["/finance-desk"])]


#: The portal's client in both suite realms (a test value, not a secret), and one whose
#: access tokens live :data:`SHORT_LIFESPAN` seconds (the refresh tests).
PORTAL_CLIENT_ID = "hostpool-portal"
PORTAL_CLIENT_SECRET = "hostpool-portal-test-secret"
PORTAL_SHORT_CLIENT_ID = "hostpool-portal-short"
SHORT_LIFESPAN = 65


def suite_portal_clients() -> list[dict[str, Any]]:
    return [
        portal_client(PORTAL_CLIENT_ID, PORTAL_CLIENT_SECRET),
        portal_client(
            PORTAL_SHORT_CLIENT_ID, PORTAL_CLIENT_SECRET, access_token_lifespan=SHORT_LIFESPAN
        ),
    ]


def suite_realms() -> list[dict[str, Any]]:
    """Realms ``corp`` and ``other`` (see :data:`CORP_USERS`, :data:`OTHER_USERS`), each with
    the portal's clients (:func:`suite_portal_clients`)."""
    return [
        realm(
            CORP,
            CORP_USERS,
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            more_clients=suite_portal_clients(),
        ),
        realm(
            OTHER,
            OTHER_USERS,
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            more_clients=suite_portal_clients(),
        ),
    ]


# ---------------------------------------------------------------------------------------
# the server


def keycloak_home(script: Path = FETCH_SCRIPT) -> Path:
    """The unpacked Keycloak tree, fetched and unpacked by ``hack/cluster/keycloak.sh`` if the
    cache does not hold it yet (about 10 s with mvn's copy in ~/.m2, otherwise the download
    of 160 MiB first)."""
    try:
        done = subprocess.run(
            [str(script)], capture_output=True, text=True, check=False, timeout=1800
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KeycloakError(f"{script} did not run: {exc}") from exc
    if done.returncode != 0:
        raise KeycloakError(
            f"{script} failed (exit {done.returncode}):\n{done.stderr.strip()[-4000:]}"
        )
    home = Path(done.stdout.strip().splitlines()[-1])
    if not (home / "bin" / "kc.sh").is_file():
        raise KeycloakError(f"{script} printed {home}, which holds no bin/kc.sh")
    return home


def _built_for_dev_mem(home: Path) -> bool:
    """Whether the tree's build step was done for the options :class:`Keycloak` runs with
    (what Keycloak persisted of its build options says so)."""
    jar = home / "lib" / "quarkus" / "generated-bytecode.jar"
    try:
        with zipfile.ZipFile(jar) as archive:
            text = archive.read("META-INF/keycloak-persisted.properties").decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return False
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")
    return props.get("kc.db") == "dev-mem" and props.get("kc.profile") == "dev"


@contextlib.contextmanager
def _build_lock(home: Path) -> Iterator[None]:
    """While the tree's build step is still to be done, one start at a time does it (the
    build rewrites lib/quarkus, which another start would be reading): an exclusive lock
    on a file next to the tree, held until the server is ready. Once built, no lock."""
    if _built_for_dev_mem(home):
        yield
        return
    with (home.parent / f".{home.name}.build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


#: Requests to the server never go through a proxy named in the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http(
    method: str,
    url: str,
    *,
    form: Mapping[str, str] | None = None,
    body: Any = None,
    bearer: str | None = None,
    timeout: float = 30.0,
) -> tuple[int, dict[str, str], bytes]:
    """One request; the status, the headers and the body, also for 4xx and 5xx answers."""
    headers = {"Accept": "application/json"}
    data: bytes | None = None
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    elif body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers.items()), exc.read()


def _error_text(body: bytes) -> str:
    """Keycloak's error answer, shortened (never holds a token or a secret)."""
    text = body.decode(errors="replace").strip()
    return text[:500] or "(empty body)"


class Keycloak:
    """One Keycloak server on 127.0.0.1 (or ``host``), run from the cached tree ``home``.

    ``workdir`` holds everything of this server: ``keycloak.log`` (its stdout and stderr),
    ``import/`` (the realm files) and ``transaction-logs/``. ``heap`` replaces kc.sh's JVM
    heap options (``-Xms64m -Xmx512m``), e.g. ``"-Xms64m -Xmx384m"``.
    """

    def __init__(
        self, home: Path, workdir: Path, *, heap: str | None = None, host: str = "127.0.0.1"
    ) -> None:
        #: the address it listens on and names in its issuer (e.g. a bridge address that
        #: pods reach, instead of loopback)
        self.host = host
        self.home = home
        self.workdir = workdir
        self.heap = heap
        self.log_path = workdir / "keycloak.log"
        self.port = 0
        self.realms: list[str] = []
        self._realm_reps: dict[str, Mapping[str, Any]] = {}
        self.admin_password = secrets.token_urlsafe(18)
        self.started_in: float | None = None  # seconds from spawn to ready, last start
        self._process: subprocess.Popen[bytes] | None = None
        self._admin_token: tuple[str, float] | None = None

    # -- life cycle ---------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(
        self,
        realms: Sequence[Mapping[str, Any]],
        port: int | None = None,
        *,
        timeout: float = DEFAULT_READY_TIMEOUT,
    ) -> None:
        """Start the server with these realms (built by :func:`realm` or any realm
        representation), on ``port`` or a free loopback port, and wait until every realm's
        discovery document is served. On failure the server is stopped and the error holds
        the end of its log."""
        if self.running():
            raise KeycloakError(f"Keycloak is already running (pid {self.pid})")
        self.realms = [str(r["realm"]) for r in realms]
        self._realm_reps = {str(r["realm"]): r for r in realms}
        self._admin_token = None
        import_dir = self.workdir / "import"
        import_dir.mkdir(parents=True, exist_ok=True)
        for old in import_dir.glob("*.json"):
            old.unlink()
        for rep in realms:
            (import_dir / f"{rep['realm']}.json").write_text(json.dumps(rep))
        with _build_lock(self.home):
            self._start(import_dir, port, timeout)

    def _start(self, import_dir: Path, port: int | None, timeout: float) -> None:
        # A free port found now may be taken by the time Keycloak binds it (30 s and more
        # later): try another one then, unless the caller chose the port.
        attempts = 1 if port else 3
        for attempt in range(1, attempts + 1):
            self.port = port or free_port()
            log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
            began = time.monotonic()
            self._spawn(import_dir)
            try:
                self._wait_ready(began + timeout)
            except KeycloakError:
                self.stop()
                if attempt < attempts and b"Port already bound" in self._log_since(log_start):
                    continue
                raise
            except BaseException:
                self.stop()
                raise
            self.started_in = time.monotonic() - began
            return

    def _spawn(self, import_dir: Path) -> None:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("KC_", "KEYCLOAK_", "QUARKUS_", "JAVA_OPTS"))
        }
        env["KC_BOOTSTRAP_ADMIN_USERNAME"] = ADMIN_USERNAME
        env["KC_BOOTSTRAP_ADMIN_PASSWORD"] = self.admin_password
        if self.heap:
            env["JAVA_OPTS_KC_HEAP"] = self.heap
        # The build options (start-dev and --db) are the same at every start: a change would
        # redo the build step. --hostname pins the issuer, whatever host name a client uses.
        command = [
            str(self.home / "bin" / "kc.sh"),
            "start-dev",
            "--db=dev-mem",
            f"--http-host={self.host}",
            f"--http-port={self.port}",
            f"--hostname={self.base_url}",
            "--import-realm",
            "--log-console-color=false",
            f"-Dkeycloak.migration.dir={import_dir}",
            f"-Dquarkus.transaction-manager.object-store.directory={self.workdir / 'tx-log'}",
        ]
        with self.log_path.open("ab") as log:
            log.write(f"--- starting Keycloak on {self.base_url}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
            )
        _RUNNING.add(self)

    def _wait_ready(self, deadline: float) -> None:
        pending = list(self.realms) or ["master"]
        last = "no answer yet"
        while pending:
            process = self._process
            assert process is not None
            if process.poll() is not None:
                raise KeycloakError(
                    f"Keycloak exited with status {process.returncode} before it was ready; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            url = f"{self.base_url}/realms/{pending[0]}/.well-known/openid-configuration"
            try:
                status, _, _ = _http("GET", url, timeout=5)
                last = f"HTTP {status} from {url}"
                if status == 200:
                    pending.pop(0)
                    continue
            except OSError as exc:
                last = f"{url}: {exc}"
            if time.monotonic() > deadline:
                raise KeycloakError(
                    f"Keycloak was not ready in time ({last}); "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.25)

    def detach(self) -> int:
        """Leave the server running when this process exits (a demo keeps it); its pid."""
        _RUNNING.discard(self)
        assert self._process is not None, "not started"
        pid = self._process.pid
        self._process = None
        return pid

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the server and wait; SIGKILL its process group after ``timeout``."""
        process = self._process
        _RUNNING.discard(self)
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        self._process = None

    def __enter__(self) -> Keycloak:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def log_text(self) -> str:
        """Everything the server printed (all starts)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log yet)"

    def _log_since(self, offset: int) -> bytes:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                return log.read()
        except FileNotFoundError:
            return b""

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def rss_bytes(self) -> int:
        """Resident memory of the server's processes (kc.sh and its java), 0 when stopped."""
        if not self.running() or self.pid is None:
            return 0
        try:
            top = psutil.Process(self.pid)
            procs = [top, *top.children(recursive=True)]
            return sum(p.memory_info().rss for p in procs)
        except psutil.Error:
            return 0

    # -- OIDC ---------------------------------------------------------------------------

    def issuer(self, realm: str) -> str:
        return f"{self.base_url}/realms/{realm}"

    def token_endpoint(self, realm: str) -> str:
        return f"{self.issuer(realm)}/protocol/openid-connect/token"

    def discovery(self, realm: str) -> dict[str, Any]:
        """The realm's OpenID provider metadata (``.well-known/openid-configuration``)."""
        return self._get_json(f"{self.issuer(realm)}/.well-known/openid-configuration")

    def jwks_uri(self, realm: str) -> str:
        return str(self.discovery(realm)["jwks_uri"])

    def jwks(self, realm: str) -> dict[str, Any]:
        """The realm's public keys (JWKS), as served now."""
        return self._get_json(self.jwks_uri(realm))

    def token_response(
        self,
        realm: str,
        client_id: str,
        client_secret: str | None,
        username: str,
        password: str,
        *,
        scope: str = "openid",
    ) -> dict[str, Any]:
        """The whole answer of a password grant: ``access_token``, ``id_token``,
        ``refresh_token``, ``expires_in``... Raises :class:`KeycloakError` with Keycloak's
        error body when refused (e.g. 401 ``invalid_grant`` for a wrong password)."""
        form = _password_form(client_id, client_secret, username, password, scope)
        status, _, body = _http("POST", self.token_endpoint(realm), form=form)
        if status != 200:
            raise KeycloakError(
                f"password grant for {username!r} in realm {realm!r}: HTTP {status}: "
                f"{_error_text(body)}"
            )
        return cast(dict[str, Any], json.loads(body))

    def token(
        self,
        realm: str,
        client_id: str,
        client_secret: str | None,
        username: str,
        password: str,
        *,
        scope: str = "openid",
    ) -> str:
        """An access token for the user (password grant)."""
        response = self.token_response(
            realm, client_id, client_secret, username, password, scope=scope
        )
        return str(response["access_token"])

    def login(self, realm: str, username: str, *, client_id: str | None = None) -> str:
        """An access token for a user of a realm this server was started with, with the
        password and client (the realm's first unless ``client_id``) of its representation."""
        rep = self._realm_reps.get(realm)
        if rep is None:
            raise KeycloakError(f"no realm {realm!r} was imported at start")
        clients = [c for c in rep.get("clients", []) if client_id in (None, c["clientId"])]
        users = [u for u in rep.get("users", []) if u["username"] == username]
        if not clients or not users:
            raise KeycloakError(f"realm {realm!r} has no user {username!r} or no such client")
        passwords = [c["value"] for c in users[0].get("credentials", []) if c["type"] == "password"]
        if not passwords:
            raise KeycloakError(f"user {username!r} of realm {realm!r} has no password")
        chosen = clients[0]
        secret = None if chosen.get("publicClient") else chosen.get("secret")
        return self.token(realm, chosen["clientId"], secret, username, passwords[0])

    async def tokens(
        self,
        realm: str,
        client_id: str,
        client_secret: str | None,
        users: Iterable[Login],
        *,
        concurrency: int = 8,
        scope: str = "openid",
    ) -> dict[str, str]:
        """Access tokens for many users at once: username -> access token. ``users`` are
        (username, password) pairs or :data:`User` tuples. ``concurrency`` requests are in
        flight at a time: on two cores 8 was the fastest (about 180 tokens/s once the JVM
        is warm, 40-90/s right after the start or on a busy machine; 1 gives 50/s, 16 no
        more than 8). The first refusal raises :class:`KeycloakError` (the requests still
        in flight are cancelled)."""
        logins = [(u[0], u[1]) for u in users]
        url = self.token_endpoint(realm)
        limit = asyncio.Semaphore(max(1, concurrency))
        result: dict[str, str] = {}
        timeout = aiohttp.ClientTimeout(total=120)
        connector = aiohttp.TCPConnector(limit=max(1, concurrency))
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:

            async def one(username: str, password: str) -> None:
                form = _password_form(client_id, client_secret, username, password, scope)
                async with limit, http.post(url, data=form) as response:
                    body = await response.read()
                    if response.status != 200:
                        raise KeycloakError(
                            f"password grant for {username!r} in realm {realm!r}: "
                            f"HTTP {response.status}: {_error_text(body)}"
                        )
                    result[username] = str(json.loads(body)["access_token"])

            try:
                async with asyncio.TaskGroup() as group:
                    for username, password in logins:
                        group.create_task(one(username, password))
            except ExceptionGroup as failed:
                raise failed.exceptions[0] from None
        return result

    # -- admin --------------------------------------------------------------------------

    def admin_token(self) -> str:
        """An access token of the bootstrap administrator (realm master, ``admin-cli``),
        reused while it has more than 10 s to live."""
        cached = self._admin_token
        if cached is not None and cached[1] > time.monotonic() + 10:
            return cached[0]
        now = time.monotonic()
        response = self.token_response(
            "master", "admin-cli", None, ADMIN_USERNAME, self.admin_password, scope="openid"
        )
        token = str(response["access_token"])
        self._admin_token = (token, now + float(response.get("expires_in", 60)))
        return token

    def admin(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
        """One admin REST call (``path`` below ``/admin/realms``); status, headers and the
        decoded JSON body (None when empty). Raises on an answer of 400 or more."""
        url = f"{self.base_url}/admin/realms{path}"
        status, headers, raw = _http(method, url, body=body, bearer=self.admin_token())
        if status >= 400:
            raise KeycloakError(f"{method} {path}: HTTP {status}: {_error_text(raw)}")
        return status, headers, (json.loads(raw) if raw.strip() else None)

    def keys(self, realm: str) -> list[dict[str, Any]]:
        """The realm's keys as the admin API lists them (kid, type, algorithm, status,
        priority, providerId = the id of the key provider component)."""
        _, _, body = self.admin("GET", f"/{realm}/keys")
        return list(body.get("keys", []))

    def rotate_key(self, realm: str, *, algorithm: str = "RS256", key_size: int = 2048) -> str:
        """Add a generated RSA signing key with a higher priority than every key of the realm:
        new tokens are signed with it at once, older keys stay in the JWKS (tokens they
        signed still verify). Returns the new key's kid."""
        top = max((int(k.get("providerPriority", 0)) for k in self.keys(realm)), default=0)
        name = f"rsa-rotated-{secrets.token_hex(4)}"
        component = {
            "name": name,
            "providerId": "rsa-generated",
            "providerType": KEY_PROVIDER,
            "config": {
                "priority": [str(top + 100)],
                "keySize": [str(key_size)],
                "algorithm": [algorithm],
            },
        }
        _, headers, _ = self.admin("POST", f"/{realm}/components", component)
        location = {k.lower(): v for k, v in headers.items()}.get("location", "")
        component_id = location.rstrip("/").rsplit("/", 1)[-1]
        for key in self.keys(realm):
            if key.get("providerId") == component_id and key.get("algorithm") == algorithm:
                return str(key["kid"])
        raise KeycloakError(f"the key provider {name} ({component_id}) added no {algorithm} key")

    def retire_key(self, realm: str, kid: str, *, remove: bool = False) -> None:
        """Stop signing with the key ``kid``: passive (still in the JWKS, so its tokens still
        verify), or with ``remove`` disabled (gone from the JWKS: its tokens stop verifying).
        Affects every key of the provider that made it."""
        matches = [k for k in self.keys(realm) if k.get("kid") == kid]
        if not matches:
            raise KeycloakError(f"realm {realm!r} has no key {kid!r}")
        component_id = str(matches[0]["providerId"])
        _, _, component = self.admin("GET", f"/{realm}/components/{component_id}")
        config = component.setdefault("config", {})
        config["active"] = ["false"]
        if remove:
            config["enabled"] = ["false"]
        self.admin("PUT", f"/{realm}/components/{component_id}", component)

    # -- helpers ------------------------------------------------------------------------

    def _get_json(self, url: str) -> dict[str, Any]:
        status, _, body = _http("GET", url)
        if status != 200:
            raise KeycloakError(f"GET {url}: HTTP {status}: {_error_text(body)}")
        return cast(dict[str, Any], json.loads(body))


def _password_form(
    client_id: str, client_secret: str | None, username: str, password: str, scope: str
) -> dict[str, str]:
    form = {
        "grant_type": "password",
        "client_id": client_id,
        "username": username,
        "password": password,
        "scope": scope,
    }
    if client_secret is not None:
        form["client_secret"] = client_secret
    return form


#: Servers still running, stopped at interpreter exit should their owner not get to it.
_RUNNING: set[Keycloak] = set()


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_RUNNING):
        server.stop(timeout=10)


@contextlib.contextmanager
def keycloak_session(
    realms: Sequence[Mapping[str, Any]],
    *,
    port: int | None = None,
    workdir: Path | None = None,
    home: Path | None = None,
    heap: str | None = None,
    timeout: float = DEFAULT_READY_TIMEOUT,
) -> Iterator[Keycloak]:
    """Fetch (if needed), start, yield and stop one Keycloak with these realms.

    ``workdir`` keeps the log and the realm files (a temporary directory, removed at the end,
    if not given); ``home`` skips ``hack/cluster/keycloak.sh``.
    """
    tree = home or keycloak_home()
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="keycloak-")))
        workdir.mkdir(parents=True, exist_ok=True)
        server = stack.enter_context(Keycloak(tree, workdir, heap=heap))
        server.start(realms, port, timeout=timeout)
        yield server
