"""Fault injection against the real control plane: the operator killed with SIGKILL during a
storm, kube-apiserver and etcd restarted during a storm, a second writer changing request
statuses, two operator instances at once, and pool/host changes during a storm.

Every test runs the operator under the chart's least-privilege ServiceAccount (namespaced
Role; see :func:`e2e.faults.install_identity`), with leader election on a Lease of
``--lease-duration 3`` (a killed instance holds it until it expires), and ends with the same
invariants (:func:`e2e.faults.invariant_problems`):

* every request is Assigned (or in the documented state the test names), exactly once;
* no request was ever seen Assigned to a second host (a watch records every state);
* no host has more sessions than its pool's ``maxSessionLimit``;
* nothing is lost: every host's ``status.sessions.total`` agrees with the requests on it;
* the operator logged no error or traceback, and never its bearer token.

The number of faults each test injected is recorded as the test's ``faults`` property (and
printed); docs/reliability.md has the table.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from e2e.faults import (
    KOPF_RETRY,
    Api,
    FaultOperator,
    Identity,
    Recorder,
    Storm,
    Tally,
    describe,
    install_identity,
    invariant_problems,
    leaked_secrets,
    poll,
    remove_identity,
    request_body,
    wait_host_status_matches,
)
from e2e.helpers import API_VERSION, Obj, host_of, status
from kube import Kube

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.faults]

#: --lease-duration of every operator here: a killed leader's Lease expires after this long.
LEASE_SECONDS = 3


@dataclass
class Rig:
    """One test's namespace, identity, admin API, operators and fault tally."""

    kube: Kube
    namespace: str
    identity: Identity
    api: Api
    tmp_path: Path
    tally: Tally = field(default_factory=Tally)
    operators: list[FaultOperator] = field(default_factory=list)
    storms: list[Storm] = field(default_factory=list)
    #: Log lines that are no problem in this test (e.g. kopf's retries during an outage).
    expected: list[re.Pattern[str]] = field(default_factory=list)

    def operator(self, name: str = "operator", *extra: str) -> FaultOperator:
        op = FaultOperator(
            self.identity.kubeconfig,
            self.namespace,
            self.tmp_path / f"{name}.log",
            extra_args=["--lease-duration", str(LEASE_SECONDS), *extra],
        )
        self.operators.append(op)
        return op

    def storm(self, threads: int = 8) -> Storm:
        storm = Storm(self.kube.kubeconfig, self.namespace, threads=threads)
        self.storms.append(storm)
        return storm

    def recorder(self) -> Recorder:
        return Recorder(self.kube.kubeconfig, self.namespace)

    def create(self, kind: str, name: str, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": spec,
        }
        self.api.create(body)

    def pool(self, name: str, lb_type: str, limit: int | None, hosts: list[str]) -> None:
        """Create a pool and its hosts (in order), and wait until the operator reports them."""
        lb: dict[str, Any] = {"type": lb_type}
        if limit is not None:
            lb["maxSessionLimit"] = limit
        self.create("HostPool", name, {"loadBalancer": lb})
        for host in hosts:
            self.create("SessionHost", host, {"poolRef": {"name": name}})
        self.wait_pool(name, lambda st: (st.get("hosts") or {}).get("total") == len(hosts))

    def wait_pool(self, name: str, check: Any, what: str = "", timeout: float = 60.0) -> Obj:
        """Until the operator has written status for the pool's current generation and
        ``check(status)`` holds."""

        def probe() -> Obj | None:
            obj = self.api.get("HostPool", name)
            st = status(obj)
            ok = st.get("observedGeneration") == obj["metadata"]["generation"] and check(st)
            return obj if ok else None

        return poll(probe, timeout=timeout, what=f"pool {name} {what}".strip(), show=self.show)

    def show(self) -> str:
        return describe(self.api.list("SessionRequest"), self.api.list("SessionHost"))

    def wait_phase(
        self, names: list[str], phase_: str = "Assigned", timeout: float = 120.0
    ) -> dict[str, Obj]:
        wanted = set(names)

        def check() -> dict[str, Obj] | None:
            items = self.api.list("SessionRequest")
            done = {n for n in wanted if n in items and status(items[n]).get("phase") == phase_}
            return items if done == wanted else None

        return poll(check, timeout=timeout, what=f"{len(wanted)} requests {phase_}", show=self.show)

    def check_end(
        self,
        recorder: Recorder,
        names: list[str],
        limits: dict[str, int],
        *,
        reset: set[str] | frozenset[str] = frozenset(),
    ) -> dict[str, Obj]:
        """The end-of-storm invariants; returns the requests."""
        self.wait_phase(names)
        wait_host_status_matches(self.api)
        requests = self.api.list("SessionRequest")
        hosts = self.api.list("SessionHost")
        # the watch has seen the final versions too
        poll(
            lambda: all(
                recorder.objects().get(n, {}).get("metadata", {}).get("resourceVersion")
                == requests[n]["metadata"]["resourceVersion"]
                for n in names
            ),
            timeout=30,
            what="the recorder to see the final versions",
        )
        problems = invariant_problems(
            requests, hosts, recorder.snapshot(), limits, names, reset=reset
        )
        assert not problems, "\n".join(problems[:40]) + "\n" + describe(requests, hosts)
        for op in self.operators:
            op.sample_memory()
        return requests


@pytest.fixture
def rig(kube: Kube, namespace: str, tmp_path: Path, record_property: Any) -> Iterator[Rig]:
    identity = install_identity(kube, namespace, tmp_path)
    rig = Rig(kube, namespace, identity, Api(kube.kubeconfig, namespace), tmp_path)
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
        rig.api.close()
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
        request_body(namespace, f"{tag}-{pool}-{i:03d}", pool, f"{tag}-{pool}-{i:03d}@corp")
        for i in range(per_pool)
        for pool in pools
    ]


def need_control_plane(kube: Kube) -> Any:
    if kube.control_plane is None:
        pytest.skip(
            "restarting kube-apiserver or etcd needs the suite's own control plane; "
            "HOSTPOOL_TEST_KUBECONFIG names an external cluster"
        )
    return kube.control_plane


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
            poll(
                lambda wn=wave_names: recorder.count(wn) >= 30,  # type: ignore[misc]
                timeout=60,
                what=f"wave {wave}: 30 requests assigned",
                show=rig.show,
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
    control_plane = need_control_plane(rig.kube)
    rig.expected.append(KOPF_RETRY)
    limits = {"df": 10, "bf": 10}
    op = rig.operator()
    op.start()
    rig.pool("df", "DepthFirst", 10, [f"df-{i:02d}" for i in range(12)])
    rig.pool("bf", "BreadthFirst", 10, [f"bf-{i:02d}" for i in range(12)])
    storm = rig.storm()
    with rig.recorder() as recorder:
        names = storm.add(storm_bodies(rig.namespace, ["df", "bf"], 100, "s"), rate=40)
        poll(
            lambda: recorder.count(names) >= 40,
            timeout=60,
            what="40 requests assigned",
            show=rig.show,
        )
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
            f"{storm.api.retries} creates; the recorder rode out {recorder.errors} "
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
    recorder: Recorder
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
                self.rig.api.patch_status(
                    "SessionRequest", name, {"status": {"sessionState": "Active"}}
                )
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
                after = self.rig.api.patch_status(
                    "SessionRequest", name, patch, content_type="application/json-patch+json"
                )
            except k8s.ApiException as exc:
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
                        "status": {
                            "phase": "Pending",
                            "host": None,
                            "hostAddress": None,
                            "reason": None,
                            "assignedAt": None,
                        }
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
        poll(
            lambda: recorder.count(names) == 80 and recorder.count(names, "Pending") == 40,
            timeout=60,
            what="80 requests Assigned and 40 Pending",
            show=rig.show,
        )
        poll(
            lambda: len(writers.reset) >= 12 and len(writers.rogue_landed) >= 10,
            timeout=60,
            what="the resetter and the rogue to have done their work",
            show=lambda: f"reset {len(writers.reset)}, rogue {len(writers.rogue_landed)}",
        )
        for i in range(8, 14):
            rig.create("SessionHost", f"w-{i:02d}", {"poolRef": {"name": "w"}})
        rig.wait_phase(names)
        # the agent catches up with the last assignments, then everyone stops
        poll(
            lambda: all(n in writers.marked for n in writers.agent_share),
            timeout=60,
            what="the agent to mark its share Active",
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
