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

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from e2e.faults import (
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
from e2e.helpers import API_VERSION, Obj, status
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
            failed += [f"{op.log_path.name}: {line}" for line in op.problems()]
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
