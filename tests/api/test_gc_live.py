"""Garbage collection of the project's kinds on a real control plane.

The operator makes the SessionHosts it creates children of their HostPool (an
ownerReference with ``controller: true``), so deleting a pool removes those hosts. That
relies on kube-controller-manager's garbage collector watching the custom resources, which
these tests prove for the suite's own control plane (or the cluster under
``HOSTPOOL_TEST_KUBECONFIG``).

The garbage collector picks up new resource types on a periodic discovery resync (every
30 s). The suite's own control plane restarts kube-controller-manager after installing the
CRDs, so collection takes about a second there; on a cluster given by
``HOSTPOOL_TEST_KUBECONFIG`` whose CRDs were just installed, expect up to ~30 s.
"""

from __future__ import annotations

import time
from typing import Any

from support import builders
from support.kube import API_VERSION, ApiError, Kube, wait_for

GC_TIMEOUT = 60.0


def _owned_host(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    body = builders.host(name, owner["metadata"]["name"])
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": API_VERSION,
            "kind": "HostPool",
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return body


def test_deleting_a_pool_deletes_its_hosts(kube: Kube, namespace: str) -> None:
    owner = kube.create(namespace, builders.pool("gc-pool", "DepthFirst", 4))
    bystander_pool = kube.create(namespace, builders.pool("other-pool", "DepthFirst", 4))
    kube.create(namespace, _owned_host("gc-host-1", owner))
    kube.create(namespace, _owned_host("gc-host-2", owner))
    # A host of another pool, and a host of this pool without an owner: both must stay.
    kube.create(namespace, _owned_host("other-host", bystander_pool))
    unowned = _owned_host("unowned-host", owner)
    del unowned["metadata"]["ownerReferences"]
    kube.create(namespace, unowned)

    stored = kube.get("SessionHost", namespace, "gc-host-1")
    (ref,) = stored["metadata"]["ownerReferences"]
    assert ref["uid"] == owner["metadata"]["uid"]
    assert ref["controller"] is True
    assert ref["blockOwnerDeletion"] is True

    started = time.monotonic()
    kube.delete("HostPool", namespace, "gc-pool", propagation="Background")
    assert not kube.exists("HostPool", namespace, "gc-pool"), "Background: the owner goes first"

    def hosts_gone() -> bool:
        return not any(
            kube.exists("SessionHost", namespace, name) for name in ("gc-host-1", "gc-host-2")
        )

    wait_for(
        hosts_gone,
        timeout=GC_TIMEOUT,
        interval=0.5,
        what="the garbage collector to delete the pool's SessionHosts",
        retry_on=(ApiError,),
    )
    elapsed = time.monotonic() - started
    print(f"owned SessionHosts collected {elapsed:.1f}s after the pool was deleted")
    assert kube.exists("SessionHost", namespace, "other-host")
    assert kube.exists("SessionHost", namespace, "unowned-host")
    assert kube.exists("HostPool", namespace, "other-pool")


def test_foreground_deletion_waits_for_the_hosts(kube: Kube, namespace: str) -> None:
    """With Foreground propagation the pool stays (with a deletionTimestamp and the
    foregroundDeletion finalizer) until its blocking children are gone, then goes too."""
    owner = kube.create(namespace, builders.pool("fg-pool", "DepthFirst", 4))
    kube.create(namespace, _owned_host("fg-host", owner))
    kube.delete("HostPool", namespace, "fg-pool", propagation="Foreground")

    def both_gone() -> bool:
        return not kube.exists("SessionHost", namespace, "fg-host") and not kube.exists(
            "HostPool", namespace, "fg-pool"
        )

    wait_for(
        both_gone,
        timeout=GC_TIMEOUT,
        interval=0.5,
        what="foreground deletion of the pool and its SessionHost",
        retry_on=(ApiError,),
    )
