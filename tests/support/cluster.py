"""The test namespace's HostPools, SessionHosts, SessionRequests and ScalingPlans, as plain
dicts, through the suite's :class:`kube.Kube`: creating pools with their hosts, reading,
and waiting for what the operator writes. On timeout a wait shows every object of the
namespace, one line each. Nothing here sleeps to assert.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from support import builders
from support.conditions import Obj, condition, phase, sessions_total, status
from support.kube import PLURALS, ApiError, Kube, wait_for

T = TypeVar("T")

#: What a predicate may raise while the objects it looks at are not there (yet): for
#: :func:`kube.wait_for`'s ``retry_on``.
NOT_YET = (ApiError, AssertionError, KeyError, TypeError)


def _summary(kind: str, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    st = status(obj)
    conds = " ".join(
        f"{c.get('type')}={c.get('status')}/{c.get('reason')}"
        for c in st.get("conditions") or []
        if isinstance(c, Mapping)
    )
    name = meta.get("name")
    if kind == "HostPool":
        keep = {k: st.get(k) for k in ("observedGeneration", "hosts", "sessions", "capacity")}
        return (
            f"  pool {name} gen={meta.get('generation')} spec={json.dumps(spec)} "
            f"status={json.dumps(keep)} pending={st.get('pendingRequests')} [{conds}]"
        )
    if kind == "SessionHost":
        return (
            f"  host {name} drain={spec.get('drainMode', False)} "
            f"sessions={json.dumps(st.get('sessions'))} loadIndex={st.get('loadIndex')} "
            f"bucket={st.get('bucket')} metrics={json.dumps(st.get('metrics'))} [{conds}]"
        )
    if kind == "ScalingPlan":
        pools = [ref.get("name") for ref in spec.get("hostPoolRefs") or []]
        return (
            f"  plan {name} gen={meta.get('generation')} zone={spec.get('timeZone')} "
            f"pools={pools} schedule={st.get('schedule')} phase={st.get('phase')} "
            f"status.pools={json.dumps(st.get('pools'))} [{conds}]"
        )
    return (
        f"  request {name} user={spec.get('user')} pool={(spec.get('poolRef') or {}).get('name')}"
        f" phase={st.get('phase')} host={st.get('host')} reason={st.get('reason')} "
        f"state={st.get('sessionState')} [{conds}]"
    )


class Cluster:
    """The test namespace's objects, on ``kube`` (the suite's, or one of
    :meth:`kube.Kube.connect` with a connection pool for threads)."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    # -- generic ----------------------------------------------------------------------------

    def create(self, kind: str, name: str, spec: Mapping[str, Any]) -> Obj:
        return self.create_body(builders.manifest(kind, name, dict(spec), namespace=self.namespace))

    def create_body(self, body: Obj) -> Obj:
        """Create an object from a whole manifest (see :mod:`builders`)."""
        return self.kube.create(self.namespace, body)

    def get(self, kind: str, name: str) -> Obj:
        return self.kube.get(kind, self.namespace, name)

    def objects(self, kind: str) -> dict[str, Obj]:
        """Every object of the kind in the namespace, by name."""
        return self.kube.objects(kind, self.namespace)

    def patch(self, kind: str, name: str, patch: Mapping[str, Any]) -> Obj:
        """Merge-patch the object (spec, metadata)."""
        return self.kube.merge_patch(kind, self.namespace, name, dict(patch))

    def patch_status(self, kind: str, name: str, status_patch: Mapping[str, Any]) -> Obj:
        """Merge-patch ``status`` through the status subresource (what an agent does)."""
        return self.kube.merge_patch(
            kind, self.namespace, name, {"status": dict(status_patch)}, status=True
        )

    def delete(self, kind: str, name: str) -> None:
        self.kube.delete(kind, self.namespace, name)

    # -- the project's kinds ------------------------------------------------------------------

    def create_pool(self, name: str, lb_type: str, limit: int | None = None, **spec: Any) -> Obj:
        return self.create_body(
            builders.pool(name, lb_type, limit, namespace=self.namespace, **spec)
        )

    def create_host(self, name: str, pool: str, **spec: Any) -> Obj:
        return self.create_body(builders.host(name, pool, namespace=self.namespace, **spec))

    def create_hosts(self, names: Iterable[str], pool: str, **spec: Any) -> list[Obj]:
        """Created one after another, so query order (creationTimestamp, name) is name order
        when the names sort in creation order."""
        return [self.create_host(n, pool, **spec) for n in names]

    def setup_pool(
        self,
        name: str,
        lb_type: str,
        limit: int | None = None,
        *,
        hosts: Iterable[str] = (),
        host_spec: Mapping[str, Any] | None = None,
        **spec: Any,
    ) -> Obj:
        """Create a pool and its hosts (in name order), then wait until the operator reports
        them (each host has an Available condition, the pool counts them): requests created
        afterwards meet a pool the operator knows."""
        self.create_pool(name, lb_type, limit, **spec)
        names = list(hosts)
        for host in names:
            self.create_host(host, name, **dict(host_spec or {}))
        self.wait_operator_knows(name, names)
        return self.pool(name)

    def wait_operator_knows(self, pool: str, hosts: Iterable[str], timeout: float = 30.0) -> None:
        """Wait until the operator has written status for the pool and for these hosts."""
        names = list(hosts)

        def check() -> bool:
            pool_obj = self.pool(pool)
            if status(pool_obj).get("observedGeneration") != pool_obj["metadata"]["generation"]:
                return False
            if (status(pool_obj).get("hosts") or {}).get("total") != len(names):
                return False
            objs = self.hosts()
            return all(
                condition(objs[h], "Available") is not None
                and status(objs[h]).get("observedGeneration") == objs[h]["metadata"]["generation"]
                for h in names
            )

        self.wait(check, f"the operator to report pool {pool} and hosts {names}", timeout)

    def create_request(self, name: str, pool: str, user: str, **spec: Any) -> Obj:
        return self.create_body(
            builders.request(name, pool, user, namespace=self.namespace, **spec)
        )

    def create_requests_concurrently(
        self, items: Iterable[tuple[str, str, str]], *, threads: int = 16
    ) -> None:
        """Create (name, pool, user) requests from ``threads`` threads at once."""
        work = list(items)
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for future in [pool.submit(self.create_request, *item) for item in work]:
                future.result()

    def pool(self, name: str) -> Obj:
        return self.get("HostPool", name)

    def host(self, name: str) -> Obj:
        return self.get("SessionHost", name)

    def request(self, name: str) -> Obj:
        return self.get("SessionRequest", name)

    def hosts(self) -> dict[str, Obj]:
        return self.objects("SessionHost")

    def requests(self) -> dict[str, Obj]:
        return self.objects("SessionRequest")

    def set_drain(self, host: str, drain: bool) -> Obj:
        return self.patch("SessionHost", host, {"spec": {"drainMode": drain}})

    def set_limit(self, pool: str, limit: int) -> Obj:
        return self.patch("HostPool", pool, {"spec": {"loadBalancer": {"maxSessionLimit": limit}}})

    def events_for(self, name: str) -> list[Obj]:
        """core/v1 Events in the namespace about the object with this name."""
        return self.kube.events(self.namespace, name)

    # -- waiting ------------------------------------------------------------------------------

    def describe(self) -> str:
        """Every pool, host and request of the namespace, one line each."""
        lines: list[str] = []
        for kind in PLURALS:
            items = self.objects(kind)
            lines.append(f"{kind} ({len(items)}):")
            shown = sorted(items)
            for name in shown[:80]:
                lines.append(_summary(kind, items[name]))
            if len(shown) > 80:
                lines.append(f"  ... and {len(shown) - 80} more")
        return "\n".join(lines)

    def wait(self, predicate: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
        return wait_for(
            predicate, timeout, what=what, interval=0.1, show=self.describe, retry_on=NOT_YET
        )

    def wait_request(
        self,
        name: str,
        *,
        phase_: str,
        reason: str | None = None,
        host: str | None = None,
        timeout: float = 30.0,
    ) -> Obj:
        """Wait until the request has this phase (and reason, and host); return it."""

        def check() -> Obj | None:
            obj = self.request(name)
            st = status(obj)
            if st.get("phase") != phase_:
                return None
            if reason is not None and st.get("reason") != reason:
                return None
            if host is not None and st.get("host") != host:
                return None
            return obj

        wanted = ", ".join(
            f"{k}={v}" for k, v in (("phase", phase_), ("reason", reason), ("host", host)) if v
        )
        return self.wait(check, f"request {name} to have {wanted}", timeout)

    def wait_assigned(self, names: Iterable[str], timeout: float = 30.0) -> dict[str, Obj]:
        """Wait until every named request is Assigned; return all requests by name."""
        wanted = set(names)

        def check() -> dict[str, Obj] | None:
            items = self.requests()
            done = {n for n in wanted if n in items and phase(items[n]) == "Assigned"}
            return items if done == wanted else None

        return self.wait(check, f"{len(wanted)} requests to be Assigned", timeout)

    def wait_host_sessions(self, expected: Mapping[str, int], timeout: float = 30.0) -> None:
        """Wait until each named host's status.sessions.total has the expected value."""

        def check() -> bool:
            hosts = self.hosts()
            return all(sessions_total(hosts[n]) == v for n, v in expected.items())

        self.wait(check, f"host session counts {dict(expected)}", timeout)

    def wait_pool(
        self, name: str, check: Callable[[Obj], bool], what: str, timeout: float = 30.0
    ) -> Obj:
        def probe() -> Obj | None:
            obj = self.pool(name)
            return obj if check(obj) else None

        return self.wait(probe, f"pool {name}: {what}", timeout)

    def wait_host(
        self, name: str, check: Callable[[Obj], bool], what: str, timeout: float = 30.0
    ) -> Obj:
        def probe() -> Obj | None:
            obj = self.host(name)
            return obj if check(obj) else None

        return self.wait(probe, f"host {name}: {what}", timeout)
