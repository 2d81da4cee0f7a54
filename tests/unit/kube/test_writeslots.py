"""WriteSlots: one bound on writes in flight for all pools, handed to pools in turn."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.kube.writeslots import WriteSlots


async def _hold(slots: WriteSlots, pool: str, log: list[str], release: asyncio.Event) -> None:
    async with slots.slot(pool):
        log.append(pool)
        await release.wait()


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        WriteSlots(0)


def test_pools_take_turns_when_every_slot_is_busy() -> None:
    async def scenario() -> list[str]:
        slots = WriteSlots(1)
        order: list[str] = []

        async def write(pool: str) -> None:
            async with slots.slot(pool):
                order.append(pool)
                await asyncio.sleep(0)

        holder = asyncio.Event()
        first = asyncio.create_task(_hold(slots, "big", [], holder))
        await asyncio.sleep(0)
        # The big pool queues five writes before the small pool queues its one.
        tasks = [asyncio.create_task(write("big")) for _ in range(5)]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(write("small")))
        await asyncio.sleep(0)
        holder.set()
        await asyncio.gather(first, *tasks)
        assert slots.busy == 0
        assert slots.waiting == 0
        return order

    # The small pool's write goes second, not after all of the big pool's.
    assert asyncio.run(scenario()) == ["big", "small", "big", "big", "big", "big"]


def test_an_urgent_write_goes_before_every_waiting_one() -> None:
    async def scenario() -> list[str]:
        slots = WriteSlots(1)
        order: list[str] = []

        async def write(name: str, pool: str, urgent: bool = False) -> None:
            async with slots.slot(pool, urgent=urgent):
                order.append(name)
                await asyncio.sleep(0)

        holder = asyncio.Event()
        first = asyncio.create_task(_hold(slots, "a", [], holder))
        await asyncio.sleep(0)
        tasks = [asyncio.create_task(write(f"host-{p}", p)) for p in "abc"]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(write("pool-c", "c", urgent=True)))
        tasks.append(asyncio.create_task(write("pool-a", "a", urgent=True)))
        await asyncio.sleep(0)
        holder.set()
        await asyncio.gather(first, *tasks)
        assert (slots.busy, slots.waiting) == (0, 0)
        return order

    # Urgent ones first, in the order they came; then the others in turn.
    assert asyncio.run(scenario()) == ["pool-c", "pool-a", "host-a", "host-b", "host-c"]


def test_a_cancelled_urgent_waiter_leaves_no_trace() -> None:
    async def scenario() -> None:
        slots = WriteSlots(1)
        release = asyncio.Event()
        holder = asyncio.create_task(_hold(slots, "a", [], release))
        await asyncio.sleep(0)

        async def urgent() -> None:
            async with slots.slot("b", urgent=True):
                pass

        waiter = asyncio.create_task(urgent())
        await asyncio.sleep(0)
        assert slots.waiting == 1
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert slots.waiting == 0
        release.set()
        await holder
        assert slots.busy == 0

    asyncio.run(scenario())


def test_a_cancelled_waiter_gives_up_its_place_without_leaking_a_slot() -> None:
    async def scenario() -> None:
        slots = WriteSlots(1)
        release = asyncio.Event()
        holder = asyncio.create_task(_hold(slots, "a", [], release))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(_hold(slots, "b", [], asyncio.Event()))
        await asyncio.sleep(0)
        assert slots.waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert slots.waiting == 0
        release.set()
        await holder
        assert slots.busy == 0
        # The slot is free at once for the next writer.
        await asyncio.wait_for(_hold(slots, "c", [], _set()), timeout=1)

    asyncio.run(scenario())


def test_a_waiter_cancelled_just_after_the_handover_frees_the_slot() -> None:
    async def scenario() -> None:
        slots = WriteSlots(1)
        holding = slots.slot("a")
        await holding.__aenter__()
        seen: list[str] = []
        waiter = asyncio.create_task(_hold(slots, "b", seen, asyncio.Event()))
        await asyncio.sleep(0)
        assert slots.waiting == 1
        # Leaving the slot hands it to the waiter at once; cancel the waiter before it runs.
        await holding.__aexit__(None, None, None)
        assert slots.busy == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert seen == []
        assert slots.busy == 0
        assert slots.waiting == 0

    asyncio.run(scenario())


def _set() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(1, 4),
    writes=st.lists(
        st.tuples(st.sampled_from("abc"), st.integers(0, 3), st.booleans(), st.booleans()),
        max_size=30,
    ),
)
def test_never_more_in_flight_than_the_limit_and_every_write_runs(
    limit: int, writes: list[tuple[str, int, bool, bool]]
) -> None:
    """Writes from three pools, each taking a few loop turns, some urgent, some cancelled
    (waiting or holding a slot): never more than ``limit`` run at once, every write not
    cancelled runs, and no slot is left taken."""

    async def scenario() -> None:
        slots = WriteSlots(limit)
        running = 0
        peak = 0
        done: list[int] = []

        async def write(i: int, turns: int) -> None:
            nonlocal running, peak
            async with slots.slot(writes[i][0], urgent=writes[i][3]):
                running += 1
                peak = max(peak, running)
                try:
                    for _ in range(turns):
                        await asyncio.sleep(0)
                finally:
                    running -= 1
                done.append(i)

        tasks = [asyncio.create_task(write(i, w[1])) for i, w in enumerate(writes)]
        await asyncio.sleep(0)
        # Cancel some, whether they wait for a slot or hold one by now.
        cancelled = {i for i, w in enumerate(writes) if w[2]}
        for i in cancelled:
            tasks[i].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert peak <= limit
        assert slots.busy == 0
        assert slots.waiting == 0
        assert set(range(len(writes))) - cancelled <= set(done)

    asyncio.run(scenario())
