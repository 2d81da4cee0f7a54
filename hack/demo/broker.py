"""`make demo-broker` (after `make demo`): users sign in and get an .rdp file.

Starts Keycloak (realm ``corp``: alice and carol in group /finance-desk, bob in none) on
127.0.0.1:18080 and ``hostpool-broker`` on 127.0.0.1:8443, both in the background, next to
the demo's operator; applies a pool ``desktops`` of two hosts entitled to finance-desk; then
signs alice in (a password grant, as a client would after the user typed it), connects her,
shows the .rdp file the broker hands back, connects her again (a reconnect to the same host),
and shows bob refused. It ends with the curl commands to do the same by hand.
`make demo-down` stops the broker and Keycloak too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# The tests' support package (control plane, Keycloak, desktops) does the set-up here too.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from support.keycloak import Keycloak, User, keycloak_home, realm

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / ".cluster"
NAMESPACE = "hostpool-demo"
POOL = "desktops"
KEYCLOAK_PORT, BROKER_PORT = 18080, 8443
#: The broker's /metrics (its own address; the operator's are on 9090).
BROKER_METRICS_PORT = 9091
CLIENT_ID, SECRET = "hostpool-desktops", "demo-secret"
USERS = [
    ("alice", "alice-pw", ["/finance-desk"]),
    ("carol", "carol-pw", ["/finance-desk"]),
    ("bob", "bob-pw", []),
]
GROUP, VERSION = "hostpool.io", "v1alpha1"


def say(message: str) -> None:
    print(f"demo-broker: {message}", flush=True)


def stop_previous(name: str) -> None:
    pid_file = CLUSTER / f"{name}.pid"
    if pid_file.exists():
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            time.sleep(2)
        except (ProcessLookupError, ValueError, PermissionError):
            pass
        pid_file.unlink()


def start_keycloak(
    more_clients: Sequence[Mapping[str, Any]] = (), more_users: Sequence[User] = ()
) -> str:
    """Keycloak in the background with the realm corp: USERS, then ``more_users``, and the
    client CLIENT_ID, then ``more_clients`` (make demo-portal's portal client and its single
    sign-on user); returns the issuer."""
    stop_previous("keycloak")
    say(f"starting Keycloak on 127.0.0.1:{KEYCLOAK_PORT} (first run: fetch and build, ~1 min)")
    work = CLUSTER / "keycloak"
    work.mkdir(parents=True, exist_ok=True)
    server = Keycloak(keycloak_home(), work)
    corp = realm(
        "corp",
        [*USERS, *more_users],
        client_id=CLIENT_ID,
        client_secret=SECRET,
        more_clients=more_clients,
    )
    server.start([corp], KEYCLOAK_PORT)
    (CLUSTER / "keycloak.pid").write_text(str(server.detach()))
    say(f"Keycloak ready; log: {os.path.relpath(server.log_path, Path.cwd())}")
    return server.issuer("corp")


def start_broker(kubeconfig: Path, issuer: str, extra: Sequence[str] = ()) -> None:
    """hostpool-broker in the background on 127.0.0.1:BROKER_PORT, with ``extra`` flags
    (make demo-portal's portal)."""
    stop_previous("broker")
    log_path = CLUSTER / "logs" / "broker.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hostpool_operator.broker",
            "--oidc-issuer",
            issuer,
            "--oidc-allow-insecure-issuer",  # the demo's Keycloak is plain http on 127.0.0.1
            "--oidc-audience",
            CLIENT_ID,
            "--listen",
            f"127.0.0.1:{BROKER_PORT}",
            "--metrics-listen",
            f"127.0.0.1:{BROKER_METRICS_PORT}",
            "--namespace",
            NAMESPACE,
            *extra,
        ],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        start_new_session=True,
    )
    (CLUSTER / "broker.pid").write_text(str(process.pid))
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{BROKER_PORT}/readyz", timeout=2):
                say(f"broker ready on 127.0.0.1:{BROKER_PORT}; log: .cluster/logs/broker.log")
                return
        except (urllib.error.URLError, OSError):
            if process.poll() is not None:
                raise SystemExit("the broker exited:\n" + log_path.read_text()[-3000:]) from None
            time.sleep(0.2)
    raise SystemExit("the broker did not get ready:\n" + log_path.read_text()[-3000:])


def apply_pool(objects: Any) -> None:
    pool = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HostPool",
        "metadata": {"name": POOL},
        "spec": {
            "loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 4},
            "entitlements": {"groups": ["/finance-desk"]},
            "connection": {"port": 3389, "rdpProperties": "audiomode:i:0;redirectclipboard:i:1"},
        },
    }
    hosts = [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SessionHost",
            "metadata": {"name": f"desk-{i}"},
            "spec": {"poolRef": {"name": POOL}, "address": f"desk-{i}.corp.example"},
        }
        for i in (1, 2)
    ]
    for body, plural in [(pool, "hostpools"), *((h, "sessionhosts") for h in hosts)]:
        try:
            objects.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, body)
        except ApiException as error:
            if error.status != 409:
                raise
    say(f"pool {POOL}: depth-first, 2 hosts x 4 sessions, entitled: group /finance-desk")
    time.sleep(1.5)  # the operator and the broker see it


def token(user: str, password: str) -> str:
    form = (
        f"grant_type=password&client_id={CLIENT_ID}&client_secret={SECRET}"
        f"&username={user}&password={password}&scope=openid"
    ).encode()
    url = f"http://127.0.0.1:{KEYCLOAK_PORT}/realms/corp/protocol/openid-connect/token"
    with urllib.request.urlopen(urllib.request.Request(url, data=form), timeout=30) as answer:
        return str(json.loads(answer.read())["access_token"])


def call(method: str, path: str, bearer: str, accept: str = "application/json") -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{BROKER_PORT}{path}",
        method=method,
        headers={"Authorization": f"Bearer {bearer}", "Accept": accept},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def main() -> int:
    kubeconfig = Path(os.environ.get("KUBECONFIG") or CLUSTER / "kubeconfig")
    if not kubeconfig.exists() or not (CLUSTER / "operator.pid").exists():
        raise SystemExit("demo-broker: run `make demo` first (it starts the cluster and operator)")
    config.load_kube_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    objects = client.CustomObjectsApi(client.ApiClient())
    issuer = start_keycloak()
    start_broker(kubeconfig, issuer)
    apply_pool(objects)
    connect = f"/v1/namespaces/{NAMESPACE}/pools/{POOL}/connect"

    alice = token("alice", "alice-pw")
    say("alice signs in with Keycloak and asks for her pools: GET /v1/pools")
    print("  " + call("GET", "/v1/pools", alice)[1])
    say(f"alice connects: POST {connect} (Accept: application/x-rdp)")
    status, rdp = call("POST", connect, alice, "application/x-rdp")
    print(f"  HTTP {status}; the .rdp file:")
    print("".join(f"    {line}\n" for line in rdp.splitlines()), end="")
    (CLUSTER / f"{POOL}.rdp").write_text(rdp)
    status, again = call("POST", connect, alice)
    answer = json.loads(again)
    say(f"alice connects again: HTTP {status}, {answer['reason']} to {answer['host']}")
    bob = token("bob", "bob-pw")
    status, refused = call("POST", connect, bob)
    say(f"bob (not in /finance-desk) connects: HTTP {status} {refused}")
    print(
        "\nBy hand (the broker and Keycloak keep running):\n"
        "  TOKEN=$(curl -s -d grant_type=password -d client_id=hostpool-desktops \\\n"
        "      -d client_secret=demo-secret -d username=carol -d password=carol-pw \\\n"
        f"      http://127.0.0.1:{KEYCLOAK_PORT}/realms/corp/protocol/openid-connect/token \\\n"
        "      | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"access_token\"])')\n"
        f'  curl -s -H "Authorization: Bearer $TOKEN" http://127.0.0.1:{BROKER_PORT}/v1/pools\n'
        f'  curl -s -X POST -H "Authorization: Bearer $TOKEN" -H "Accept: application/x-rdp" \\\n'
        f"      http://127.0.0.1:{BROKER_PORT}{connect} -o {POOL}.rdp\n"
        f'  curl -s -X DELETE -H "Authorization: Bearer $TOKEN" \\\n'
        f"      http://127.0.0.1:{BROKER_PORT}/v1/namespaces/{NAMESPACE}/pools/{POOL}/session\n"
        f"  curl -s 127.0.0.1:{BROKER_METRICS_PORT}/metrics | grep ^hostpool_broker\n"
        f"  kubectl get sr -n {NAMESPACE} -l hostpool.io/broker=true\n"
        f"alice's .rdp file: .cluster/{POOL}.rdp (xfreerdp .cluster/{POOL}.rdp opens it)\n"
        "Tear down: make demo-down"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
