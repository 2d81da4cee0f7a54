"""A thread that samples a pool's hosts from the API while something changes them (an image
update): every host the operator made that it saw, the most at once, and the fewest taking
sessions (a host not being deleted or drained whose Pod is Ready: what placement goes by; the
hosts' Available conditions are written a moment after)."""

from __future__ import annotations

import threading
from typing import Any

from support.cluster import Cluster

MANAGED = "hostpool.io/managed-by"


def made(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The hosts the operator made in the cluster's namespace."""
    return {
        name: h
        for name, h in cluster.hosts().items()
        if h["metadata"].get("labels", {}).get(MANAGED) == "hostpool-operator"
    }


class HostCensus:
    def __init__(self, cluster: Cluster, every: float = 0.1) -> None:
        self.cluster = cluster
        self.every = every
        self.seen: set[str] = set()
        self.most = 0
        self.fewest_serving: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.cluster.namespace}/pods"
        while not self._stop.wait(self.every):
            hosts = made(self.cluster)
            pods = self.cluster.kube.call("GET", path)["items"]
            self.seen |= set(hosts)
            self.most = max(self.most, len(hosts))
            live = {
                name
                for name, h in hosts.items()
                if not h["metadata"].get("deletionTimestamp") and not h["spec"].get("drainMode")
            }
            serving = sum(
                1
                for pod in pods
                if pod["metadata"]["name"] in live
                and any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in pod.get("status", {}).get("conditions", [])
                )
            )
            if self.fewest_serving is None or serving < self.fewest_serving:
                self.fewest_serving = serving

    def __enter__(self) -> HostCensus:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
