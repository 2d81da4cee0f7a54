"""Manifests (plain dicts) of the project's kinds, for every test that creates objects.

Each builder returns a whole object as it is sent to the API server: ``apiVersion``, ``kind``,
``metadata`` (``name``, and ``namespace`` only when given) and ``spec``. Keyword arguments
are further spec fields, in the order given, after the ones the builder sets itself::

    pool("desk", "DepthFirst", 2, scaling={})    # loadBalancer {type, maxSessionLimit}, scaling
    pool(scaling={})                             # scaling, loadBalancer {type: BreadthFirst}
    pool(loadBalancer={"type": "RoundRobin"})    # a loadBalancer of its own, as given
    host("h1", "desk", drainMode=True)           # poolRef, then drainMode
    request("r1", "desk", "ann@corp", namespace=ns)

The defaults (pool ``pool``, host ``host``, request ``req`` of user ``alice``) name the
simplest valid objects of ``tests/api/test_crds_live.py``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from support.kube import API_VERSION

Obj = dict[str, Any]


def manifest(kind: str, name: str, spec: Any, *, namespace: str | None = None) -> Obj:
    """An object of ``kind``; ``spec`` is sent as given (the hostile-input tests send specs
    that are no mapping at all)."""
    metadata: Obj = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def load_balancer(lb_type: str, limit: int | None = None) -> Obj:
    """``spec.loadBalancer`` of a HostPool: the type, and ``maxSessionLimit`` when given."""
    lb: Obj = {"type": lb_type}
    if limit is not None:
        lb["maxSessionLimit"] = limit
    return lb


def pool(
    name: str = "pool",
    lb_type: str | None = None,
    limit: int | None = None,
    *,
    namespace: str | None = None,
    **spec: Any,
) -> Obj:
    """A HostPool. With ``lb_type`` its ``spec.loadBalancer`` (``lb_type``, ``limit``) comes
    first, then the keywords (a ``loadBalancer`` keyword would replace it). Without, the
    keywords are the spec, and a ``loadBalancer`` they lack defaults to BreadthFirst (and
    ``limit``), added last."""
    if lb_type is not None:
        spec = {"loadBalancer": load_balancer(lb_type, limit), **spec}
    else:
        spec.setdefault("loadBalancer", load_balancer("BreadthFirst", limit))
    return manifest("HostPool", name, spec, namespace=namespace)


def host(
    name: str = "host", pool_name: str = "pool", *, namespace: str | None = None, **spec: Any
) -> Obj:
    """A SessionHost of the pool ``pool_name`` (``spec.poolRef``)."""
    return manifest(
        "SessionHost", name, {"poolRef": {"name": pool_name}, **spec}, namespace=namespace
    )


def request(
    name: str = "req",
    pool_name: str = "pool",
    user: str = "alice",
    *,
    namespace: str | None = None,
    **spec: Any,
) -> Obj:
    """A SessionRequest of ``user`` for the pool ``pool_name``."""
    return manifest(
        "SessionRequest",
        name,
        {"poolRef": {"name": pool_name}, "user": user, **spec},
        namespace=namespace,
    )


WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]


def plan_schedule(name: str = "weekdays", days: list[str] | None = None) -> Obj:
    """The API contract's example ScalingPlan schedule (every ramp-down field set), on
    ``days`` (default Monday to Friday)."""
    return {
        "name": name,
        "daysOfWeek": list(WEEKDAYS if days is None else days),
        "rampUp": {
            "startTime": "07:00",
            "loadBalancerType": "BreadthFirst",
            "minimumHostsPercent": 20,
            "capacityThresholdPercent": 60,
        },
        "peak": {"startTime": "09:00", "loadBalancerType": "BreadthFirst"},
        "rampDown": {
            "startTime": "18:00",
            "loadBalancerType": "DepthFirst",
            "minimumHostsPercent": 10,
            "capacityThresholdPercent": 90,
            "forceLogoffUsers": False,
            "waitTimeMinutes": 30,
            "notificationMessage": "You will be signed out in 30 minutes.",
            "stopHostsWhen": "ZeroSessions",
        },
        "offPeak": {"startTime": "20:00", "loadBalancerType": "DepthFirst"},
    }


def plan_spec(*pools: str, zone: str = "Europe/Stockholm", **changes: Any) -> Obj:
    """The spec of the API contract's example ScalingPlan for ``pools`` (default
    ``finance``) in ``zone``; keywords replace top-level spec fields."""
    return {
        "timeZone": zone,
        "hostPoolRefs": [{"name": p} for p in pools or ("finance",)],
        "schedules": [plan_schedule()],
        **changes,
    }


def desktop_pod() -> dict[str, Any]:
    """hostTemplate.workload for a Pod-backed desktop host. On kind it really runs (the pause
    image stands in for a desktop image such as an xrdp container); on the local control
    plane kwok plays its node, hence the toleration."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": {"app": "desktop"}},
        "spec": {
            "containers": [{"name": "desktop", "image": "registry.k8s.io/pause:3.10"}],
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }


def desktop_users(passwords: dict[str, str]) -> dict[str, Any]:
    """The Secret ``desktop-users`` that the example pool's desktop containers make their
    local users from (crds/examples/session-host-pool.yaml): a ``user:password`` line a
    user."""
    lines = "".join(f"{user}:{password}\n" for user, password in passwords.items())
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "desktop-users"},
        "stringData": {"users": lines},
    }


SESSION_HOST_EXAMPLE = Path(__file__).resolve().parents[2] / "crds/examples/session-host-pool.yaml"
PERSONAL_EXAMPLE = Path(__file__).resolve().parents[2] / "crds/examples/personal-desktops.yaml"


def session_host_pool(image: str, agent_interval: float) -> dict[str, Any]:
    """The example pool of pod-backed xrdp hosts (crds/examples/session-host-pool.yaml) for a
    real node here: ``image`` (built and imported, never pulled) in both containers, small
    requests (a two-core machine), the agent every ``agent_interval`` s and verbose, the
    readiness probe every second, a 10 s grace period."""
    return _for_a_small_node(SESSION_HOST_EXAMPLE, image, agent_interval)


def personal_desktop_pool(image: str, agent_interval: float) -> dict[str, Any]:
    """The example personal pool (crds/examples/personal-desktops.yaml) for a real node
    here, as :func:`session_host_pool` makes the pooled one, with claims of 64 MiB."""
    pool = _for_a_small_node(PERSONAL_EXAMPLE, image, agent_interval)
    for claim in pool["spec"]["scaling"]["hostTemplate"]["volumeClaimTemplates"]:
        claim["spec"]["resources"]["requests"]["storage"] = "64Mi"
    return pool


def _for_a_small_node(example: Path, image: str, agent_interval: float) -> dict[str, Any]:
    pool: dict[str, Any] = copy.deepcopy(yaml.safe_load(example.read_text()))
    pod = pool["spec"]["scaling"]["hostTemplate"]["workload"]["spec"]
    for container in pod["containers"] + pod["initContainers"]:
        container["image"] = image
        container["imagePullPolicy"] = "Never"
        container["resources"] = {"requests": {"cpu": "50m", "memory": "64Mi"}}
        if container["name"] == "agent":
            command = container["command"]
            command[command.index("--interval") + 1] = f"{agent_interval:g}"
            command += ["--verbose"]
        else:
            container["readinessProbe"]["periodSeconds"] = 1
    pod["terminationGracePeriodSeconds"] = 10
    return pool
