"""The supervisor, with real tasks on a real event loop: a task that fails is started again
after a back-off and counted; one that keeps failing is reported (the liveness probe turns
red); one that returns is done; cancellation stops it for good."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from hostpool_operator.controller.metrics import PrometheusMetrics
from hostpool_operator.controller.supervisor import Supervisor


def make(
    failing_after: int = 3, healthy_run: float = 60.0
) -> tuple[Supervisor, PrometheusMetrics, set[asyncio.Task[Any]]]:
    metrics = PrometheusMetrics(CollectorRegistry())
    tasks: set[asyncio.Task[Any]] = set()

    def spawn(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        return task

    supervisor = Supervisor(
        metrics,
        spawn,
        failing_after=failing_after,
        healthy_run=healthy_run,
        first_wait=0.01,
        max_wait=0.02,
    )
    return supervisor, metrics, tasks


def restarts(metrics: PrometheusMetrics, task: str) -> float:
    value = metrics.registry.get_sample_value("hostpool_task_restarts_total", {"task": task})
    return value or 0.0


def test_a_failing_task_is_restarted_and_counted() -> None:
    async def main() -> tuple[int, float, int]:
        supervisor, metrics, _ = make()
        runs = 0
        finished = asyncio.Event()

        async def flaky() -> None:
            nonlocal runs
            runs += 1
            if runs <= 2:
                raise RuntimeError(f"crash {runs}")
            finished.set()
            await asyncio.sleep(3600)  # then it runs on, as a watch does

        task = supervisor.supervise("informer sessionrequests *", "informer/x", flaky)
        await asyncio.wait_for(finished.wait(), 5)
        failures = supervisor.failures("informer sessionrequests *")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return runs, restarts(metrics, "informer/x"), failures

    runs, counted, failures = asyncio.run(main())
    assert runs == 3
    assert counted == 2
    assert failures == 2  # not yet recovered: it has run only a moment


def test_a_task_that_keeps_failing_is_a_problem_until_it_runs_well() -> None:
    async def main() -> tuple[list[str], list[str], list[str]]:
        now = [0.0]
        supervisor, _, _ = make(failing_after=3, healthy_run=60.0)
        supervisor._clock = lambda: now[0]
        calls = 0
        release = asyncio.Event()

        async def broken() -> None:
            nonlocal calls
            calls += 1
            if calls <= 3:
                raise KeyError("metadata")
            await release.wait()

        task = supervisor.supervise("pool ns/finance", "pool", broken)
        while calls < 4:
            await asyncio.sleep(0.005)
        failing = supervisor.problems()
        now[0] += 61.0  # the fourth run has lasted a minute: recovered
        recovered = supervisor.problems()
        release.set()
        await task  # returned: finished, forgotten
        return failing, recovered, supervisor.problems()

    failing, recovered, after = asyncio.run(main())
    assert len(failing) == 1
    assert "pool ns/finance failed 3 times in a row" in failing[0]
    assert "KeyError" in failing[0]
    assert recovered == []
    assert after == []


def test_fewer_failures_than_the_threshold_are_no_problem() -> None:
    async def main() -> list[str]:
        supervisor, _, _ = make(failing_after=5)
        calls = 0

        async def twice() -> None:
            nonlocal calls
            calls += 1
            if calls <= 2:
                raise ValueError("bad")
            await asyncio.sleep(3600)

        task = supervisor.supervise("plan status writer", "plan_status", twice)
        while calls < 3:
            await asyncio.sleep(0.005)
        problems = supervisor.problems()
        task.cancel()
        return problems

    assert asyncio.run(main()) == []


def test_cancelling_stops_it_for_good() -> None:
    async def main() -> int:
        supervisor, metrics, _ = make()
        runs = 0

        async def forever() -> None:
            nonlocal runs
            runs += 1
            await asyncio.sleep(3600)

        task = supervisor.supervise("lease", "lease", forever)
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        assert restarts(metrics, "lease") == 0
        return runs

    assert asyncio.run(main()) == 1
