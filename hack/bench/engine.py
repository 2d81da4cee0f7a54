"""Engine speed: placement decisions per second for pools of 10 to 10,000 hosts.

``make bench-engine`` (or ``python hack/bench/engine.py``). A decision is one
``assign``: choose a host for a new user and record the session, as the operator does for
each request of a logon storm. Hosts start with random session counts; each configuration
runs for a fixed time budget and reports the median of several rounds.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Sequence

from hostpool_operator.api import HostPoolSpec
from hostpool_operator.engine.balancer_view import BalancerHost
from hostpool_operator.engine.balancing import PoolBalancer
from hostpool_operator.engine.demand import Demand

SIZES = (10, 100, 1_000, 10_000)
ALGORITHMS = ("BreadthFirst", "DepthFirst", "Horizon")


def _pool(algorithm: str, limit: int) -> HostPoolSpec:
    return HostPoolSpec.model_validate(
        {"loadBalancer": {"type": algorithm, "maxSessionLimit": limit}}
    )


def _round(algorithm: str, hosts: int, decisions: int, seed: int) -> float:
    """Seconds per decision over one round."""
    rng = random.Random(seed)
    limit = 100_000
    views = [
        BalancerHost(f"h{i:05d}", sessions=rng.randrange(0, 50), order=i) for i in range(hosts)
    ]
    balancer = PoolBalancer(_pool(algorithm, limit), views, seed=seed)
    demands = [Demand(f"user-{seed}-{i}") for i in range(decisions)]
    start = time.perf_counter()
    for demand in demands:
        balancer.assign(demand)
    return (time.perf_counter() - start) / decisions


def measure(algorithm: str, hosts: int, budget_s: float, rounds: int) -> float:
    """Median seconds per decision."""
    probe = _round(algorithm, hosts, 50, seed=0)
    decisions = max(50, min(50_000, int(budget_s / rounds / max(probe, 1e-7))))
    return statistics.median(_round(algorithm, hosts, decisions, seed=r) for r in range(rounds))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per configuration")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    results: dict[str, dict[str, float]] = {}
    print(f"{'algorithm':<13} {'hosts':>7} {'µs/decision':>12} {'decisions/s':>12}")
    for algorithm in args.algorithms:
        results[algorithm] = {}
        for size in args.sizes:
            seconds = measure(algorithm, size, args.budget, args.rounds)
            results[algorithm][str(size)] = round(seconds * 1e6, 2)
            print(f"{algorithm:<13} {size:>7} {seconds * 1e6:>12.2f} {1 / seconds:>12,.0f}")
    print(json.dumps({"usPerDecision": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
