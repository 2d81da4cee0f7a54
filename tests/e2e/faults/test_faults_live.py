"""Fault injection against the real control plane: the operator killed with SIGKILL during a
storm, kube-apiserver and etcd restarted during a storm, assignment writes cut off in flight,
a second writer changing request statuses, two operator instances at once, and pool/host
changes during a storm.

Every test runs the operator under the chart's least-privilege ServiceAccount (namespaced
Role; see :func:`identity.install_identity`), with leader election on a Lease of
``--lease-duration 3`` (a killed instance holds it until it expires), and ends with the same
invariants (:func:`invariants.invariant_problems`):

* every request is Assigned (or in the documented state the test names), exactly once;
* no request was ever seen Assigned to a second host (a watch records every state);
* no host has more sessions than its pool's ``maxSessionLimit``;
* nothing is lost: every host's ``status.sessions.total`` agrees with the requests on it;
* the operator logged no error or traceback, and never its bearer token.

The number of faults each test injected is recorded as the test's ``faults`` property (and
printed); docs/reliability.md has the table.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from support import builders
from support.cluster import Cluster
from support.conditions import Obj, host_of, per_host_users, status
from support.identity import Identity, install_identity, leaked_secrets, remove_identity
from support.invariants import describe_sessions, invariant_problems, wait_host_status_matches
from support.kube import JSON_PATCH, OUTAGE, ApiError, Kube, need_control_plane, wait_for
from support.operator_process import STANDBY_LINE, STARTED_LINE, OperatorProcess
from support.ports import free_port
from support.proxy import CuttingProxy
from support.recorder import RequestRecorder
from support.storm import Storm, Tally

T = TypeVar("T")

#: --lease-duration of every operator here: a killed leader's Lease expires after this long.
LEASE_SECONDS = 3
#: The standby test's: the new leader renews during a storm, beside the rest of the suite, and
#: a renewal that took longer than 2 s of 3 ended its leadership in a loaded run.
STANDBY_LEASE_SECONDS = 6


@dataclass
class Rig:
    """One test's namespace, identity, admin API, operators and fault tally."""

    kube: Kube
    namespace: str
    identity: Identity
    api: Cluster
    tmp_path: Path
    tally: Tally = field(default_factory=Tally)
    operators: list[OperatorProcess] = field(default_factory=list)
    storms: list[Storm] = field(default_factory=list)
    #: Log lines that are no problem in this test (e.g. kopf's retries during an outage).
    expected: list[re.Pattern[str]] = field(default_factory=list)

    def operator(
        self, name: str = "operator", *extra: str, kubeconfig: Path | None = None
    ) -> OperatorProcess:
        op = OperatorProcess(
            kubeconfig or self.identity.kubeconfig,
            self.namespace,
            self.tmp_path / f"{name}.log",
            extra_args=["--lease-duration", str(LEASE_SECONDS), *extra],
        )
        self.operators.append(op)
        return op

    def leader_and_standby(
        self, lease_seconds: float, *, metrics_ports: Mapping[str, int] | None = None
    ) -> tuple[OperatorProcess, OperatorProcess, int]:
        """Operator A started and leading, then operator B launched and waiting as a warm
        standby (synced, seeking the Lease), both with a ``lease_seconds`` Lease (and, with
        ``metrics_ports``, their metrics on ports ``"a"`` and ``"b"``). Returns A, B and
        B's log offset at its launch."""

        def flags(name: str) -> list[str]:
            lease = ["--lease-duration", str(lease_seconds)]
            if metrics_ports is None:
                return lease
            return [*lease, "--metrics-address", f"127.0.0.1:{metrics_ports[name]}"]

        a = self.operator("operator-a", *flags("a"))
        a.start()
        b = self.operator("operator-b", *flags("b"))
        b_offset = b.launch()
        b.wait_line(STANDBY_LINE, b_offset, 60)
        return a, b, b_offset

    def storm(self, threads: int = 8) -> Storm:
        storm = Storm(self.kube.kubeconfig, self.namespace, threads=threads)
        self.storms.append(storm)
        return storm

    def recorder(self) -> RequestRecorder:
        return RequestRecorder(self.kube.kubeconfig, self.namespace)

    @contextlib.contextmanager
    def behind_proxy(self, *extra: str) -> Iterator[CuttingProxy]:
        """The operator (with ``extra`` arguments), started, talking to the API server through
        a :class:`CuttingProxy`; both stopped at the end."""
        proxy = CuttingProxy(self.kube.kubeconfig, self.tmp_path)
        proxy.start()
        try:
            kubeconfig = proxy.kubeconfig(
                self.identity.token, self.tmp_path / "proxy.kubeconfig", self.namespace
            )
            self.operator("operator", *extra, kubeconfig=kubeconfig).start()
            yield proxy
        finally:
            for operator in self.operators:
                operator.stop(wait=False)
            proxy.stop()

    def create(self, kind: str, name: str, spec: dict[str, Any]) -> None:
        self.api.create_body(builders.manifest(kind, name, spec, namespace=self.namespace))

    def pool(self, name: str, lb_type: str, limit: int | None, hosts: list[str]) -> None:
        """Create a pool and its hosts (in order), and wait until the operator reports them."""
        self.api.create_body(builders.pool(name, lb_type, limit, namespace=self.namespace))
        for host in hosts:
            self.api.create_body(builders.host(host, name, namespace=self.namespace))
        self.wait_pool(name, lambda st: (st.get("hosts") or {}).get("total") == len(hosts))

    def wait_pool(self, name: str, check: Any, what: str = "", timeout: float = 60.0) -> Obj:
        """Until the operator has written status for the pool's current generation and
        ``check(status)`` holds."""

        def probe() -> Obj | None:
            obj = self.api.get("HostPool", name)
            st = status(obj)
            ok = st.get("observedGeneration") == obj["metadata"]["generation"] and check(st)
            return obj if ok else None

        return self.wait(probe, f"pool {name} {what}".strip(), timeout)

    def show(self) -> str:
        return describe_sessions(
            self.api.objects("SessionRequest"), self.api.objects("SessionHost")
        )

    def wait(
        self,
        predicate: Callable[[], T | None],
        what: str,
        timeout: float = 60.0,
        show: Callable[[], str] | None = None,
    ) -> T:
        """:func:`kube.wait_for` through outages (:data:`kube.OUTAGE` means "not yet");
        on timeout it shows ``show()``, by default where the requests are (:meth:`show`)."""
        return wait_for(predicate, timeout, what=what, show=show or self.show, retry_on=OUTAGE)

    def wait_phase(
        self, names: list[str], phase_: str = "Assigned", timeout: float = 120.0
    ) -> dict[str, Obj]:
        wanted = set(names)

        def check() -> dict[str, Obj] | None:
            items = self.api.objects("SessionRequest")
            done = {n for n in wanted if n in items and status(items[n]).get("phase") == phase_}
            return items if done == wanted else None

        return self.wait(check, f"{len(wanted)} requests {phase_}", timeout)

    def check_end(
        self,
        recorder: RequestRecorder,
        names: list[str],
        limits: dict[str, int],
        *,
        reset: set[str] | frozenset[str] = frozenset(),
        failed_ok: list[str] | tuple[str, ...] = (),
        timeout: float = 120.0,
    ) -> dict[str, Obj]:
        """The end-of-storm invariants; returns the requests."""
        self.wait_phase(names, timeout=timeout)
        wait_host_status_matches(self.api.kube, self.namespace)
        requests = self.api.objects("SessionRequest")
        hosts = self.api.objects("SessionHost")
        # the watch has seen the final versions too
        self.wait(
            lambda: all(
                recorder.objects().get(n, {}).get("metadata", {}).get("resourceVersion")
                == requests[n]["metadata"]["resourceVersion"]
                for n in names
            ),
            "the recorder to see the final versions",
            30,
        )
        problems = invariant_problems(
            requests, hosts, recorder.snapshot(), limits, names, reset=reset, failed_ok=failed_ok
        )
        assert not problems, "\n".join(problems[:40]) + "\n" + describe_sessions(requests, hosts)
        for op in self.operators:
            op.sample_memory()
        return requests


@pytest.fixture
def rig(kube: Kube, namespace: str, tmp_path: Path, record_property: Any) -> Iterator[Rig]:
    identity = install_identity(kube, namespace, tmp_path)
    # The admin's calls, each retried through outages, on a pool for the test's threads.
    api = Cluster(Kube.connect(kube.kubeconfig, pool_size=16).through_outages(), namespace)
    rig = Rig(kube, namespace, identity, api, tmp_path)
    failed: list[str] = []
    try:
        yield rig
    finally:
        for storm in rig.storms:
            storm.close()
        for op in rig.operators:
            op.sample_memory()
            op.stop(wait=False)
        rig.tally.report(record_property)
        for op in rig.operators:
            text = op.log_text()
            failed += [
                f"{op.log_path.name}: {line}"
                for line in op.problems()
                if not any(p.search(line) for p in rig.expected)
            ]
            leaks = leaked_secrets(identity, text)
            if leaks:
                failed.append(f"{op.log_path.name}: the bearer token is in the log: {leaks}")
        rig.api.kube.close()
        remove_identity(kube, identity)
    if failed:
        tails = "\n".join(f"---- {op.log_path}\n{op.log_tail(40)}" for op in rig.operators)
        pytest.fail(
            "the operator logged errors or credentials:\n" + "\n".join(failed[:40]) + "\n" + tails,
            pytrace=False,
        )


def storm_bodies(namespace: str, pools: list[str], per_pool: int, tag: str) -> list[Obj]:
    """``per_pool`` requests for each pool, interleaved, one distinct user each."""
    return [
        builders.request(
            f"{tag}-{pool}-{i:03d}", pool, f"{tag}-{pool}-{i:03d}@corp", namespace=namespace
        )
        for i in range(per_pool)
        for pool in pools
    ]


# ---------------------------------------------------------------------------------------
# 1. kill -9 during a storm


KILLS = 3


def test_kill9_during_storm_loses_nothing(rig: Rig) -> None:
    """Three waves of 90 requests over a DepthFirst and a BreadthFirst pool; in the middle of
    each wave (a third of it placed, writes in flight) the operator is killed with SIGKILL and
    started again, waiting for the dead leader's Lease to expire. In the end every request is
    Assigned exactly once, none ever moved, no host is over its limit."""
    limits = {"df": 12, "bf": 12}
    op = rig.operator()
    op.start()
    rig.pool("df", "DepthFirst", 12, [f"df-{i:02d}" for i in range(12)])
    rig.pool("bf", "BreadthFirst", 12, [f"bf-{i:02d}" for i in range(12)])
    storm = rig.storm()
    names: list[str] = []
    restarts: list[float] = []
    with rig.recorder() as recorder:
        for wave in range(KILLS):
            wave_names = storm.add(
                storm_bodies(rig.namespace, ["df", "bf"], 45, f"w{wave}"), rate=45
            )
            names += wave_names
            rig.wait(
                lambda wn=wave_names: recorder.count(wn) >= 30,  # type: ignore[misc]
                f"wave {wave}: 30 requests assigned",
            )
            assert recorder.count(wave_names) < len(wave_names), "the wave was over too soon"
            op.kill()
            rig.tally.add("operator kill -9")
            t0 = time.monotonic()
            op.start(timeout=90)
            restarts.append(time.monotonic() - t0)
        storm.wait()
        requests = rig.check_end(recorder, names, limits)
    assert len(requests) == KILLS * 90
    assert op.kills == KILLS
    print(f"restart after kill -9 until started (s): {[round(r, 1) for r in restarts]}")


# ---------------------------------------------------------------------------------------
# 2. kube-apiserver and etcd restarted during a storm


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_control_plane_restart_during_storm(rig: Rig, component: str) -> None:
    """200 requests over a DepthFirst and a BreadthFirst pool; once 40 are placed, the API
    server (or etcd) is killed with SIGKILL, stays down a second and is started again with the
    same ports, flags and data. The operator keeps running: its informers resume (or relist
    after 410) and kopf's pool watch reconnects, so a host added and a pool changed after the
    restart are seen, requests created after it are placed, and the invariants hold."""
    control_plane = need_control_plane(rig.kube, "restarting kube-apiserver or etcd")
    limits = {"df": 10, "bf": 10}
    # A leader that cannot renew its Lease for its whole duration stops (see leader.py, and
    # test_a_hung_lease_renewal_stops_the_leader_within_the_lease): the outage here
    # lasts several seconds, more than 10 on a loaded two-core machine (etcd, then the API
    # server's reconnect to it), so this operator gets a 30 s Lease: what is tested is the
    # storm riding out the restart, not the Lease.
    op = rig.operator("operator", "--lease-duration", "30")
    op.start()
    rig.pool("df", "DepthFirst", 10, [f"df-{i:02d}" for i in range(12)])
    rig.pool("bf", "BreadthFirst", 10, [f"bf-{i:02d}" for i in range(12)])
    storm = rig.storm()
    with rig.recorder() as recorder:
        names = storm.add(storm_bodies(rig.namespace, ["df", "bf"], 100, "s"), rate=40)
        rig.wait(lambda: recorder.count(names) >= 40, "40 requests assigned")
        assert recorder.count(names) < len(names), "the storm was over too soon"
        t0 = time.monotonic()
        if component == "etcd":
            control_plane.restart_etcd(crash=True, down_seconds=3)
        else:
            control_plane.restart_apiserver(crash=True, down_seconds=1)
        outage = time.monotonic() - t0
        rig.tally.add(f"{component} kill -9 and restart")
        # The session's own client (the `kube` fixture) reconnects by itself.
        assert rig.kube.request("GET", "/readyz")[0] == 200
        storm.wait()
        # Watches recovered: a new host (the operator's informer) and a pool change (kopf).
        rig.create("SessionHost", "df-late", {"poolRef": {"name": "df"}})
        rig.api.patch("HostPool", "bf", {"spec": {"connectingTimeoutSeconds": 61}})
        rig.wait_pool("df", lambda st: (st.get("hosts") or {}).get("total") == 13, "has 13 hosts")
        rig.wait_pool("bf", lambda st: True, "observed the change")
        names += storm.add(storm_bodies(rig.namespace, ["df", "bf"], 10, "late"))
        storm.wait()
        rig.check_end(recorder, names, limits)
        print(
            f"{component}: down and back in {outage:.1f}s; the storm retried "
            f"{storm.kube.retries} creates; the recorder rode out {recorder.errors} "
            f"interruptions and {recorder.relists} relists"
        )
    assert op.running, f"the operator exited: {op.exit_codes}\n{op.log_tail(40)}"
    assert op.starts == 1


# ---------------------------------------------------------------------------------------
# 3. a second writer on SessionRequest status


ROGUE_HOST = "rogue-host"


@dataclass
class Writers:
    """Three foreign writers on request status, each in a thread, none with a resourceVersion:

    * ``agent``: marks Assigned requests of its share ``sessionState: Active`` (merge patch),
      what a session agent does;
    * ``rogue``: sets ``status.host`` of Pending requests to a host of its own choosing
      (JSON patch whose ``test`` op makes it apply only while the request is still Pending);
    * ``resetter``: resets Assigned requests of its share to Pending without a host (merge
      patch), up to ``reset_max`` of them.
    """

    rig: Rig
    recorder: RequestRecorder
    agent_share: set[str]
    reset_share: set[str]
    reset_max: int
    marked: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    rogue_landed: set[str] = field(default_factory=set)
    rogue_refused: int = 0
    reset: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._loop, args=(fn,), daemon=True, name=fn.__name__)
            for fn in (self._agent, self._rogue, self._resetter)
        ]
        for thread in threads:
            thread.start()
        return threads

    def _loop(self, step: Any) -> None:
        while not self.stop.is_set():
            try:
                step(self.recorder.objects())
            except Exception as exc:
                self.errors.append(f"{step.__name__}: {type(exc).__name__}: {exc}"[:400])
            time.sleep(0.05)

    def _agent(self, objects: dict[str, Obj]) -> None:
        for name, obj in objects.items():
            st = status(obj)
            if name not in self.agent_share or name in self.marked:
                continue
            if st.get("phase") == "Assigned" and st.get("sessionState") != "Active":
                self.rig.api.patch_status("SessionRequest", name, {"sessionState": "Active"})
                self.marked[name] = (st.get("host"), st.get("assignedAt"))

    def _rogue(self, objects: dict[str, Obj]) -> None:
        for name, obj in objects.items():
            st = status(obj)
            if st.get("phase") != "Pending" or st.get("host") or name in self.rogue_landed:
                continue
            patch = [
                {"op": "test", "path": "/status/phase", "value": "Pending"},
                {"op": "add", "path": "/status/host", "value": ROGUE_HOST},
            ]
            try:
                after = self.rig.api.kube.merge_patch(
                    "SessionRequest",
                    self.rig.namespace,
                    name,
                    patch,
                    status=True,
                    content_type=JSON_PATCH,
                )
            except ApiError as exc:
                if exc.status is not None and 400 <= exc.status < 500:
                    self.rogue_refused += 1  # no longer Pending: the operator was first
                    continue
                raise
            assert status(after).get("host") == ROGUE_HOST
            self.rogue_landed.add(name)

    def _resetter(self, objects: dict[str, Obj]) -> None:
        for name, obj in objects.items():
            if len(self.reset) >= self.reset_max:
                return
            if name not in self.reset_share or name in self.reset:
                continue
            if status(obj).get("phase") == "Assigned":
                self.rig.api.patch_status(
                    "SessionRequest",
                    name,
                    {
                        "phase": "Pending",
                        "host": None,
                        "hostAddress": None,
                        "reason": None,
                        "assignedAt": None,
                    },
                )
                self.reset.add(name)


def test_second_writer_cannot_overwrite_decisions(rig: Rig) -> None:
    """A DepthFirst pool of 8 hosts x 10 slots gets 120 requests (40 wait, PoolSaturated);
    meanwhile three foreign writers change request statuses without a resourceVersion (see
    :class:`Writers`); then 6 hosts are added so every request fits. What is correct:

    * the operator's assignment wins: a rogue ``status.host`` on a Pending request never
      stands: the request ends Assigned to a host the operator chose (its write is
      conditional on the version it saw, so a rogue write in between makes it re-read and
      decide again), never to the rogue's host;
    * an agent's ``sessionState: Active`` is never overwritten, and the agent's write moves
      nothing (same host, same assignedAt);
    * a foreign reset of an Assigned request (phase Pending, no host) releases its session
      and the request is placed again — the only requests that may be assigned twice;
    * no host over its limit, and the hosts' session counts match the requests.
    """
    limits = {"w": 10}
    op = rig.operator()
    op.start()
    rig.pool("w", "DepthFirst", 10, [f"w-{i:02d}" for i in range(8)])
    storm = rig.storm()
    bodies = storm_bodies(rig.namespace, ["w"], 120, "u")
    names = [str(b["metadata"]["name"]) for b in bodies]
    with rig.recorder() as recorder:
        writers = Writers(
            rig,
            recorder,
            agent_share=set(names[0::2]),
            reset_share=set(names[1::2]),
            reset_max=12,
        )
        threads = writers.run()
        storm.add(bodies, rate=40)
        storm.wait()
        rig.wait(
            lambda: recorder.count(names) == 80 and recorder.count(names, "Pending") == 40,
            "80 requests Assigned and 40 Pending",
        )
        rig.wait(
            lambda: len(writers.reset) >= 12 and len(writers.rogue_landed) >= 10,
            "the resetter and the rogue to have done their work",
            show=lambda: f"reset {len(writers.reset)}, rogue {len(writers.rogue_landed)}",
        )
        for i in range(8, 14):
            rig.create("SessionHost", f"w-{i:02d}", {"poolRef": {"name": "w"}})
        rig.wait_phase(names)
        # the agent catches up with the last assignments, then everyone stops
        rig.wait(
            lambda: all(n in writers.marked for n in writers.agent_share),
            "the agent to mark its share Active",
        )
        writers.stop.set()
        for thread in threads:
            thread.join(timeout=30)
        assert not writers.errors, writers.errors[:5]
        requests = rig.check_end(recorder, names, limits, reset=writers.reset)
        histories = recorder.snapshot()
    rig.tally.add("foreign status.host on a Pending request (landed)", len(writers.rogue_landed))
    rig.tally.add("foreign status.host refused (operator first)", writers.rogue_refused)
    rig.tally.add("foreign sessionState Active", len(writers.marked))
    rig.tally.add("foreign status reset of an Assigned request", len(writers.reset))
    hosts_seen = {host_of(o) for o in requests.values()}
    assert ROGUE_HOST not in hosts_seen
    for name in writers.rogue_landed:
        assert ROGUE_HOST in [h for _, h, _ in histories[name].states], name
    for name, (host, assigned_at) in writers.marked.items():
        st = status(requests[name])
        assert st.get("sessionState") == "Active", f"{name}: the agent's state was overwritten"
        assert (st.get("host"), st.get("assignedAt")) == (host, assigned_at), name
    for name in writers.reset:
        assignments = histories[name].assignments()
        assert assignments == 2, f"{name}: reset once, assigned {assignments} times"
    print(
        f"rogue landed {len(writers.rogue_landed)}, refused {writers.rogue_refused}; "
        f"agent marked {len(writers.marked)}; reset {len(writers.reset)}"
    )


# ---------------------------------------------------------------------------------------
# 4. two operator instances


HOLDS = re.compile(r"leader election: (\S+) holds lease")


def lease(rig: Rig) -> Obj:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{rig.namespace}/leases/hostpool-operator"
    result: Obj = rig.kube.call("GET", path)
    return result


def test_two_instances_one_places_standby_takes_over(rig: Rig) -> None:
    """Instance A takes the Lease and places; instance B, started next to it, logs that it
    waits as a standby and places nothing (it never gets past start-up, so it has no
    controller). 160 requests arrive; once 50 are placed A is killed with SIGKILL: B takes
    over when the Lease has gone unrenewed for --lease-duration (STANDBY_LEASE_SECONDS; plus
    a 2 s retry period) and finishes the storm. No double placement, no over-limit, nothing
    moved."""
    limits = {"df": 10, "bf": 10}
    a, b, b_offset = rig.leader_and_standby(STANDBY_LEASE_SECONDS)
    rig.pool("df", "DepthFirst", 10, [f"df-{i:02d}" for i in range(10)])
    rig.pool("bf", "BreadthFirst", 10, [f"bf-{i:02d}" for i in range(10)])
    holder_a = HOLDS.findall(a.log_text())
    assert len(holder_a) == 1, a.log_tail(20)
    before = lease(rig)["spec"]
    assert before["holderIdentity"] == holder_a[0]
    storm = rig.storm()
    names = storm.add(storm_bodies(rig.namespace, ["df", "bf"], 80, "s"), rate=40)
    with rig.recorder() as recorder:
        rig.wait(lambda: recorder.count(names) >= 50, "50 placed")
        assert recorder.count(names) < len(names), "the storm was over too soon"
        # B is still a standby: it logged nothing past the wait, and it is alive.
        b_log = b.log_text()[b_offset:]
        assert b.running
        assert STARTED_LINE not in b_log, b_log[-3000:]
        assert not HOLDS.search(b_log), b_log[-3000:]
        a.kill()
        rig.tally.add("leader kill -9 with a standby running")
        t0 = time.monotonic()
        b.wait_line(STARTED_LINE, b_offset, 60)
        takeover = time.monotonic() - t0
        storm.wait()
        rig.check_end(recorder, names, limits)
    after = lease(rig)["spec"]
    holder_b = HOLDS.findall(b.log_text())
    assert len(holder_b) == 1
    assert holder_b[0] != holder_a[0]
    assert after["holderIdentity"] == holder_b[0]
    assert int(after.get("leaseTransitions") or 0) >= 1
    print(f"standby took over {takeover:.1f}s after the leader was killed; lease {after}")
    # Timing last, so that a slow takeover does not hide the checks above.
    assert before["leaseDurationSeconds"] == STANDBY_LEASE_SECONDS, (
        f"the Lease says leaseDurationSeconds={before['leaseDurationSeconds']}, "
        f"the operator was started with --lease-duration {STANDBY_LEASE_SECONDS}"
    )
    assert takeover <= STANDBY_LEASE_SECONDS + 2 + 5, (
        f"the standby took {takeover:.1f}s to take over; the Lease expires "
        f"{STANDBY_LEASE_SECONDS}s after the last renewal (checked every 2 s)"
    )


#: The request line of a read or write of the operator's Lease (held by the proxy below).
LEASE_REQUEST = (
    r"^(GET|PUT) /apis/coordination\.k8s\.io/v1/namespaces/[^/]+/leases/hostpool-operator[? ]"
)


def test_a_hung_lease_renewal_stops_the_leader_within_the_lease(rig: Rig) -> None:
    """The proxy holds every Lease request from some moment on: the renewal waits on an answer
    that never comes. Before, the instance went on placing until the client gave up on that
    request (60 s) while a standby could take the expired Lease after 3 s: two leaders. Now
    its writes wait from the renew deadline (2/3 of --lease-duration 3 s) and the watchdog
    stops it once no renewal has succeeded within the Lease's length: liveness stops
    answering 200, and a request created after that stays unplaced by this instance."""
    rig.expected += [
        re.compile(r"leadership lost|leader election: (renewal failed|could not renew)"),
    ]
    port = free_port()
    liveness = f"http://127.0.0.1:{port}/healthz"
    with rig.behind_proxy("--liveness", liveness) as proxy:
        op = rig.operators[0]
        rig.pool("df", "DepthFirst", 5, ["df-0"])
        rig.api.create_body(builders.request("first", "df", "first@corp", namespace=rig.namespace))
        rig.wait_phase(["first"])
        assert probe(liveness) == 200
        offset = op.log_path.stat().st_size
        proxy.hold(LEASE_REQUEST)
        t0 = time.monotonic()
        op.wait_line("leadership lost", offset, 70)
        stopped = time.monotonic() - t0
        rig.tally.add("Lease renewal hung")
        rig.api.create_body(builders.request("after", "df", "after@corp", namespace=rig.namespace))
        rig.wait(lambda: probe(liveness) != 200 or None, "liveness to stop answering 200", 10)
        time.sleep(2)
        assert status(rig.api.get("SessionRequest", "after")).get("phase") != "Assigned"
        proxy.hold(None)
        for held in proxy.held:
            proxy.release(held)
    # The last renewal may have been up to a retry period (0.4 s) before the hold began.
    assert stopped <= LEASE_SECONDS + 1.5, (
        f"the leader stopped {stopped:.1f}s after the Lease renewal hung (Lease {LEASE_SECONDS}s)"
    )


#: The late-renewal test's Lease: renew deadline 6 s, renewals every 0.5 s, so the window
#: between the deadline and the Lease's end (2 s, less a renewal period) is wide enough to
#: act in on a loaded machine.
LATE_LEASE_SECONDS = 8


def test_a_late_lease_renewal_pauses_writes_and_keeps_the_leader(rig: Rig) -> None:
    """A loaded API server answers a renewal after the renew deadline but within the Lease:
    the leader sends nothing from the deadline on (a request created then stays Pending), and
    once the late renewal is answered it renews again and places that request itself, with
    no change of leader (on a 100,000-session API server such answers ended the leadership).
    The leader says so: a warning line and hostpool_lease_renewals_late_total, with the
    seconds paused in hostpool_leader_writes_paused_seconds_total."""
    rig.expected.append(re.compile(r"leader election: a renewal succeeded .* past the renew"))
    renew_deadline = LATE_LEASE_SECONDS * 3 / 4
    port = free_port()
    metrics = ("--metrics-address", f"127.0.0.1:{port}")
    with rig.behind_proxy("--lease-duration", str(LATE_LEASE_SECONDS), *metrics) as proxy:
        op = rig.operators[0]
        rig.pool("df", "DepthFirst", 5, ["df-0"])
        rig.api.create_body(builders.request("first", "df", "first@corp", namespace=rig.namespace))
        rig.wait_phase(["first"])
        offset = op.log_path.stat().st_size
        proxy.hold(LEASE_REQUEST)
        rig.wait(lambda: proxy.held or None, "a Lease renewal to be held", 5)
        held_at = time.monotonic()  # the last renewal that succeeded was sent before this
        time.sleep(renew_deadline + 0.1)  # the deadline itself is what this test is about
        rig.api.create_body(
            builders.request("during", "df", "during@corp", namespace=rig.namespace)
        )
        time.sleep(0.5)
        paused = status(rig.api.get("SessionRequest", "during")).get("phase")
        proxy.hold(None)
        released_at = time.monotonic()
        for held in proxy.held:
            proxy.release(held)
        assert released_at - held_at < LATE_LEASE_SECONDS - 0.6, "the test itself ran late"
        assert paused != "Assigned", "a write was sent past the renew deadline"
        rig.wait_phase(["during"])
        assert op.running
        log = op.log_path.read_bytes()[offset:].decode("utf-8", errors="replace")
        assert "leadership lost" not in log, log
        assert "another instance took" not in log, log
        said = re.search(r"a renewal succeeded ([0-9.]+)s past the renew deadline", log)
        assert said is not None, log
        text = _get(f"http://127.0.0.1:{port}/metrics")[1]
        late = re.search(r"^hostpool_lease_renewals_late_total ([0-9.e+]+)$", text, re.M)
        paused = re.search(r"^hostpool_leader_writes_paused_seconds_total ([0-9.e+]+)$", text, re.M)
        assert late is not None, text[-3000:]
        assert float(late.group(1)) >= 1
        assert paused is not None, text[-3000:]
        assert float(paused.group(1)) >= float(said.group(1)) - 0.01  # the log rounds
    rig.tally.add("Lease renewal answered late")


#: The operator's default --lease-duration (renew deadline 3 s, renewals every 0.5 s).
DEFAULT_LEASE_SECONDS = 4
#: How often the SIGSTOP test runs (each with new operators, pools and a storm).
PAUSE_RUNS = 10


def _get(url: str) -> tuple[int, str]:
    """(HTTP status, body) of a GET; (0, "") when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()
    except (OSError, urllib.error.URLError):
        return 0, ""


def _writes_sent(metrics: str) -> float:
    """hostpool_api_writes_total summed over the verbs."""
    found = re.findall(r"^hostpool_api_writes_total\{[^}]*\} ([0-9.e+]+)$", metrics, re.MULTILINE)
    return sum(float(value) for value in found)


@pytest.mark.parametrize("run", range(PAUSE_RUNS))
def test_a_paused_leader_never_places_after_the_standby_took_over(rig: Rig, run: int) -> None:
    """Two instances, A leading and B a warm standby; a storm of 112 requests fills two pools
    (7 hosts x 8 each, exactly full at the end, so any second decision about a slot shows as
    a host over its limit). Once a quarter is placed, A is frozen with SIGSTOP (its writes in
    flight, its queue full); B takes the expired Lease (default Lease settings: 4 s, renew
    deadline 3 s) and places from the view it kept, with no list; then A is resumed with
    SIGCONT while the storm still runs. A must send no placement: its client refuses every
    write past its renew deadline, and a write that was on the wire was conditional on the
    request's version. A logs that it lost leadership and exits 1. The invariants: every
    request Assigned once, never to a second host, no host over its limit.

    Before the freeze, B is checked to be a standby that writes nothing: /readyz says
    "standby", hostpool_leader is 0 and it has sent no write at all."""
    rig.expected += [
        # A, resumed past its deadline: its renewal finds B's Lease, and it stops on purpose.
        re.compile(
            r"leadership lost|leader election: (renewal failed|could not renew|another instance "
            r"took lease)"
        ),
    ]
    limits = {"df": 8, "bf": 8}
    ports = {name: free_port() for name in ("a", "b")}
    # The shipped Lease settings (the rig's default is a 3 s Lease).
    a, b, b_offset = rig.leader_and_standby(DEFAULT_LEASE_SECONDS, metrics_ports=ports)
    rig.pool("df", "DepthFirst", 8, [f"df-{i}" for i in range(7)])
    rig.pool("bf", "BreadthFirst", 8, [f"bf-{i}" for i in range(7)])
    storm = rig.storm()
    names = storm.add(storm_bodies(rig.namespace, ["df", "bf"], 56, f"p{run}"), rate=10)
    b_url = f"http://127.0.0.1:{ports['b']}"
    with rig.recorder() as recorder:
        rig.wait(lambda: recorder.count(names) >= len(names) // 4, "a quarter placed")
        assert _get(f"{b_url}/readyz") == (200, "standby\n")
        assert _get(f"http://127.0.0.1:{ports['a']}/readyz") == (200, "leader\n")
        b_metrics = _get(f"{b_url}/metrics")[1]
        assert re.search(r"^hostpool_leader 0\.0$", b_metrics, re.MULTILINE), b_metrics[-2000:]
        assert _writes_sent(b_metrics) == 0, "the standby sent writes"
        a.pause()
        rig.tally.add("leader paused with SIGSTOP past its Lease")
        paused_at = time.monotonic()
        placed_by_a = recorder.count(names)
        b.wait_line(STARTED_LINE, b_offset, 60)
        takeover = time.monotonic() - paused_at
        rig.wait(lambda: recorder.count(names) > placed_by_a, "the new leader to place", 30)
        placed_when_resumed = recorder.count(names)
        assert placed_when_resumed < len(names), "the storm was over before A was resumed"
        a.resume()
        code = a.wait_exit(30)
        storm.wait()
        rig.check_end(recorder, names, limits)
    assert code == 1, a.log_tail(40)
    assert "leadership lost" in a.log_text()
    assert _get(f"{b_url}/readyz") == (200, "leader\n")
    refused = a.log_text().count("not sent, this instance does not lead")
    print(
        f"run {run}: B placed {takeover:.1f}s after A was paused; A placed {placed_by_a}, "
        f"{placed_when_resumed} placed when A was resumed, {refused} of its writes refused "
        "unsent after it; 0 double placements, 0 over a limit"
    )
    assert takeover <= 10, f"the standby took {takeover:.1f}s to take over (Lease 4 s)"


def test_a_stopped_leader_hands_over_at_once(rig: Rig) -> None:
    """A clean stop of the leader (SIGTERM: a pod deleted, drained or rolled) during a storm
    gives the Lease up; the warm standby takes it at its next look (every 0.5 s) and places
    from the view it kept, no LIST: well under the Lease's 4 s. Nothing lost, placed twice
    or over a limit."""
    limits = {"df": 8}
    a, b, b_offset = rig.leader_and_standby(DEFAULT_LEASE_SECONDS)
    rig.pool("df", "DepthFirst", 8, [f"df-{i}" for i in range(6)])
    storm = rig.storm()
    names = storm.add(storm_bodies(rig.namespace, ["df"], 48, "g"), rate=10)
    with rig.recorder() as recorder:
        rig.wait(lambda: recorder.count(names) >= len(names) // 4, "a quarter placed")
        t0 = time.monotonic()
        assert a.stop() == 0, a.log_tail(40)
        rig.tally.add("leader stopped cleanly (SIGTERM) with a standby running")
        b.wait_line(STARTED_LINE, b_offset, 30)
        takeover = time.monotonic() - t0
        placed = recorder.count(names)
        rig.wait(lambda: recorder.count(names) > placed, "the new leader to place", 30)
        placing = time.monotonic() - t0
        assert recorder.count(names) < len(names), "the storm was over before the take-over"
        storm.wait()
        rig.check_end(recorder, names, limits)
    print(
        f"stop -> the standby leads {takeover:.2f}s, -> its first placement {placing:.2f}s "
        "(the stop itself included)"
    )
    assert takeover < DEFAULT_LEASE_SECONDS, f"{takeover:.1f}s: it waited for the Lease to expire"


def probe(url: str) -> int:
    """The HTTP status of a GET, or 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (OSError, urllib.error.URLError):
        return 0


# ---------------------------------------------------------------------------------------
# 5. pool and host changes during a storm


def test_changes_during_storm_end_in_documented_states(rig: Rig) -> None:
    """While a background storm of 240 requests fills a BreadthFirst pool, five other pools
    each get requests and one change, and each ends in the state README documents:

    * ``lim`` (DepthFirst, 5 hosts x 6): 40 requests, 30 placed and 10 waiting; the limit is
      lowered to 3 and two hosts are added. Lowering ends no session: the five full hosts keep
      6 each, the new hosts take 3 each, 4 requests still wait (PoolSaturated), every host
      reports SessionLimitReached.
    * ``drn`` (BreadthFirst, 4 hosts x 20): hosts d-0 and d-1 are drained while requests
      arrive. They keep their sessions; every request created after the operator reported the
      drain goes to d-2 or d-3; d-0 and d-1 report Draining.
    * ``del`` (DepthFirst, 4 hosts x 5): e-1 is deleted with 5 sessions on it. Its requests
      become Failed (condition Assigned False, reason HostDeleted) and are not moved; the
      other 15 are placed on e-0, e-2 and e-3.
    * ``alg`` (DepthFirst, 6 hosts x 10): 12 requests fill a-0 and start a-1; the type is
      changed to BreadthFirst; the next 20 requests are spread (depth-first would leave a-4 and
      a-5 empty; breadth-first puts at least one on each, and none reaches 9).
    * ``gone`` (DepthFirst, 2 hosts x 5): 6 placed; the pool is deleted: they keep their
      hosts, 4 new requests wait with PoolNotFound; the pool is created again: they are placed.
    """
    ns = rig.namespace
    op = rig.operator()
    op.start()
    rig.pool("bg", "BreadthFirst", 50, [f"bg-{i}" for i in range(6)])
    rig.pool("lim", "DepthFirst", 6, [f"l-{i}" for i in range(5)])
    rig.pool("drn", "BreadthFirst", 20, [f"d-{i}" for i in range(4)])
    rig.pool("del", "DepthFirst", 5, [f"e-{i}" for i in range(4)])
    rig.pool("alg", "DepthFirst", 10, [f"a-{i}" for i in range(6)])
    rig.pool("gone", "DepthFirst", 5, [f"g-{i}" for i in range(2)])

    def bodies(pool: str, n: int, tag: str = "r") -> list[Obj]:
        return [
            builders.request(f"{pool}-{tag}{i:03d}", pool, f"{pool}-{tag}{i}@c", namespace=ns)
            for i in range(n)
        ]

    storm = rig.storm()
    background = storm.add(bodies("bg", 240), rate=15)
    lim = storm.add(bodies("lim", 40), rate=20)
    drn = storm.add(bodies("drn", 20), rate=5)
    alg = storm.add(bodies("alg", 12), rate=10)
    gone = storm.add(bodies("gone", 6), rate=6)
    during: dict[str, int] = {}  # background requests created when each change was made

    with rig.recorder() as rec:

        def objs(names: list[str]) -> dict[str, Obj]:
            latest = rec.objects()
            return {n: latest[n] for n in names if n in latest}

        def on_host(names: list[str], host: str) -> list[str]:
            return [
                n
                for n, o in objs(names).items()
                if host_of(o) == host and status(o).get("phase") == "Assigned"
            ]

        # -- lower the limit of a saturated pool, then add hosts
        rig.wait(
            lambda: rec.count(lim) == 30 and rec.count(lim, "Pending") == 10,
            "lim: 30 placed, 10 waiting",
        )
        rig.api.patch("HostPool", "lim", {"spec": {"loadBalancer": {"maxSessionLimit": 3}}})
        during["lower the limit"] = storm.done(background)
        rig.wait_pool("lim", lambda st: True, "observed the new limit")
        for host in ("l-5", "l-6"):
            rig.create("SessionHost", host, {"poolRef": {"name": "lim"}})
        rig.tally.add("lower maxSessionLimit during a storm")

        # -- drain two hosts that have sessions, while requests arrive
        rig.wait(lambda: rec.count(drn) >= 8, "drn: 8 placed")
        for host in ("d-0", "d-1"):
            rig.api.patch("SessionHost", host, {"spec": {"drainMode": True}})
        during["drain hosts"] = storm.done(background)
        rig.wait_pool("drn", lambda st: (st.get("hosts") or {}).get("draining") == 2, "drains 2")
        drained_seen = time.monotonic()
        drn_late = storm.add(bodies("drn", 20, "late"), rate=10)
        rig.tally.add("drain hosts with sessions during a storm", 2)

        # -- delete a host that has sessions. Its requests are queued here, not with the
        # others: the steps above take longer on a loaded machine, and the deletion must
        # come while they still arrive.
        dele = storm.add(bodies("del", 20), rate=2)
        rig.wait(lambda: rec.count(dele) >= 10, "del: 10 placed")
        on_e1 = on_host(dele, "e-1")
        assert len(on_e1) == 5, f"e-1 holds {on_e1}"
        assert storm.done(dele) < len(dele), "the del requests were all created already"
        rig.api.delete("SessionHost", "e-1")
        during["delete a host with sessions"] = storm.done(background)
        rig.tally.add("delete a host with 5 sessions during a storm")

        # -- change the algorithm
        rig.wait(lambda: rec.count(alg) == 12, "alg: 12 placed")
        rig.api.patch("HostPool", "alg", {"spec": {"loadBalancer": {"type": "BreadthFirst"}}})
        during["change the algorithm"] = storm.done(background)
        rig.wait_pool("alg", lambda st: True, "observed the new type")
        alg_late = storm.add(bodies("alg", 20, "late"), rate=10)
        rig.tally.add("change DepthFirst to BreadthFirst during a storm")

        # -- delete the pool, then create it again
        rig.wait(lambda: rec.count(gone) == 6, "gone: 6 placed")
        gone_hosts = {n: host_of(o) for n, o in objs(gone).items()}
        offset = len(op.log_text())
        rig.api.delete("HostPool", "gone")
        during["delete the pool"] = storm.done(background)
        rig.wait(
            lambda: "gone: pool deleted" in op.log_text()[offset:],
            "the operator to notice the pool is gone",
            30,
        )
        gone_late = storm.add(bodies("gone", 4, "late"))
        rig.tally.add("delete a pool with sessions during a storm")
        rig.wait(
            lambda: (
                all(
                    status(o).get("phase") == "Pending"
                    and status(o).get("reason") == "PoolNotFound"
                    for o in objs(gone_late).values()
                )
                and len(objs(gone_late)) == 4
            ),
            "4 new gone requests Pending with PoolNotFound",
        )
        assert {n: host_of(o) for n, o in objs(gone).items()} == gone_hosts
        rig.create(
            "HostPool", "gone", {"loadBalancer": {"type": "DepthFirst", "maxSessionLimit": 5}}
        )

        storm.wait()
        assert storm.done(background) == len(background)
        # Every change happened while the background storm was still arriving.
        assert all(n < len(background) for n in during.values()), during

        assigned = [*background, *drn, *drn_late, *alg, *alg_late, *gone, *gone_late]
        assigned += [n for n in dele if n not in on_e1]
        rig.wait(
            lambda: rec.count(lim) == 36 and rec.count(lim, "Pending") == 4,
            "lim: 36 placed, 4 waiting",
        )
        rig.wait_phase(on_e1, "Failed")
        requests = rig.check_end(
            rec,
            assigned + [n for n in lim if status(rec.objects()[n]).get("phase") == "Assigned"],
            {"bg": 50, "lim": 6, "drn": 20, "del": 5, "alg": 10, "gone": 5},
            failed_ok=on_e1,
        )
        histories = rec.snapshot()
    hosts = rig.api.objects("SessionHost")
    count = {h: len(u) for h, u in per_host_users(requests).items()}

    # lim: sessions kept above the new limit, new hosts filled to it, the rest waits
    assert [count.get(f"l-{i}", 0) for i in range(7)] == [6, 6, 6, 6, 6, 3, 3], count
    waiting = [status(requests[n]) for n in lim if status(requests[n]).get("phase") == "Pending"]
    assert [st.get("reason") for st in waiting] == ["PoolSaturated"] * 4
    rig.wait_pool("lim", lambda st: cond_status(st, "Saturated") == "True", "saturated")
    rig.wait(
        lambda: all(
            host_reason(rig.api.get("SessionHost", f"l-{i}")) == "SessionLimitReached"
            for i in range(7)
        ),
        "every lim host to report SessionLimitReached",
    )

    # drn: drained hosts keep their sessions and take no request created after the drain
    late_created = [n for n in drn if storm.started[n] > drained_seen] + drn_late
    assert all(host_of(requests[n]) in ("d-2", "d-3") for n in late_created), {
        n: host_of(requests[n]) for n in late_created
    }
    assert count.get("d-0", 0) + count.get("d-1", 0) >= 1
    rig.wait(
        lambda: all(
            host_reason(rig.api.get("SessionHost", h)) == "Draining" for h in ("d-0", "d-1")
        ),
        "d-0 and d-1 to report Draining",
    )

    # del: e-1's requests failed and stayed where they were; the rest fills the others
    assert "e-1" not in hosts
    for name in on_e1:
        st = status(requests[name])
        cond = {c["type"]: c for c in st.get("conditions") or []}["Assigned"]
        assert (st.get("phase"), cond["status"], cond["reason"]) == (
            "Failed",
            "False",
            "HostDeleted",
        )
        assert histories[name].hosts(assigned_only=True) == ["e-1"]
    assert [count.get(h, 0) for h in ("e-0", "e-2", "e-3")] == [5, 5, 5]

    # alg: the late requests were spread breadth-first
    alg_counts = [count.get(f"a-{i}", 0) for i in range(6)]
    assert alg_counts[0] == 10, alg_counts
    assert sum(alg_counts) == 32, alg_counts
    assert min(alg_counts[1:]) >= 1, alg_counts
    assert max(alg_counts[1:]) <= 8, alg_counts

    # gone: the first six kept their hosts; the late four were placed once it came back
    assert {n: host_of(requests[n]) for n in gone} == gone_hosts
    assert [count.get("g-0", 0), count.get("g-1", 0)] == [5, 5]
    print(f"background requests created when each change was made: {during}")


def cond_status(st: Obj, type_: str) -> str | None:
    for cond in st.get("conditions") or []:
        if cond.get("type") == type_:
            return str(cond.get("status"))
    return None


def host_reason(obj: Obj) -> str | None:
    for cond in status(obj).get("conditions") or []:
        if cond.get("type") == "Available":
            return str(cond.get("reason"))
    return None


# ---------------------------------------------------------------------------------------
# 6. a status write cut off in flight


# Solo: once, with two other workers' tests on the machine, "after-close" ended with a host one
# session over its limit; alone it never has. Kept apart until that is understood.
@pytest.mark.solo
@pytest.mark.parametrize(
    ("mode", "how"), [("before", "close"), ("before", "reset"), ("after", "close")]
)
def test_status_write_cut_off_is_retried(rig: Rig, mode: str, how: str) -> None:
    """The operator talks to the API server through a proxy that drops the connection of the
    first 5 assignment writes (PUT sessionrequests/<name>/status) with no response: with
    ``before`` the write never reaches the API server, with ``after`` it does and only the
    answer is lost; the connection ends with a TLS close (aiohttp: ServerDisconnectedError)
    or a reset (ConnectionResetError). That is what the operator sees when the API server
    dies mid-request. Correct: like any failed write, the slot is released,
    the request re-read and decided again, so all 20 requests end Assigned once, none moved,
    none over the limit, and the log has no traceback."""
    with rig.behind_proxy() as proxy:
        rig.pool("df", "DepthFirst", 5, [f"df-{i}" for i in range(4)])
        proxy.arm(mode, 5, how)
        storm = rig.storm()
        with rig.recorder() as recorder:
            names = storm.add(storm_bodies(rig.namespace, ["df"], 20, "c"), rate=20)
            storm.wait()
            rig.wait(lambda: len(proxy.cut) == 5, "5 writes cut", 30)
            rig.tally.add(f"assignment write cut off ({mode} reaching the API server, {how})", 5)
            rig.check_end(recorder, names, {"df": 5}, timeout=30)


# ---------------------------------------------------------------------------------------
# 7. two pending reasons written on the same version, the older one winning


def test_pending_reason_that_lost_a_conflict_is_written_again(rig: Rig) -> None:
    """A request created before its pool gets a PoolNotFound write. If the pool appears while
    that write is still in flight, the operator writes PoolSaturated (the new pool has no
    host) on the same resourceVersion. The proxy holds both writes and lets the older one
    through first, so the newer one gets a 409 Conflict, and the stored reason is the older,
    stale one. Correct: the re-read after the conflict shows the reason the operator meant to
    write is not there, so it decides and writes again; the request ends saying
    PoolSaturated. (Seen once in CI as a flaky e2e test before the re-read handled it.)"""
    with rig.behind_proxy() as proxy:
        proxy.hold(
            rf"^PATCH /apis/hostpool\.io/v1alpha1/namespaces/{rig.namespace}/"
            r"sessionrequests/early/status[? ]"
        )
        rig.api.create_body(
            builders.request("early", "late-pool", "early@corp", namespace=rig.namespace)
        )
        rig.wait(lambda: len(proxy.held) == 1, "the PoolNotFound write held", 30)
        assert b"PoolNotFound" in proxy.held[0].body, proxy.held[0].body
        rig.create("HostPool", "late-pool", {"loadBalancer": {"type": "DepthFirst",
                                                              "maxSessionLimit": 2}})  # fmt: skip
        rig.wait(lambda: len(proxy.held) == 2, "the PoolSaturated write held", 30)
        older, newer = proxy.held
        assert b"PoolSaturated" in newer.body, newer.body
        proxy.hold(None)  # what the operator writes after this goes straight through
        proxy.release(older)
        assert older.answered.wait(30), "no answer to the PoolNotFound write"
        assert " 200 " in older.answer, older.answer
        proxy.release(newer)
        assert newer.answered.wait(30), "no answer to the PoolSaturated write"
        assert " 409 " in newer.answer, f"the race was not staged: {newer.answer}"
        rig.tally.add("pending write losing a conflict to an older one")

        def says_saturated() -> bool:
            st = status(rig.api.get("SessionRequest", "early"))
            return st.get("phase") == "Pending" and st.get("reason") == "PoolSaturated"

        rig.wait(says_saturated, "the request to say PoolSaturated", 30)
