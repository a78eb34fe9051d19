"""Batcher: concurrent submits become groups; a failing group falls back to one item at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from billing_core.runtime.batcher import Batcher


class Doubler:
    def __init__(self, refuse: int | None = None) -> None:
        self.groups: list[list[int]] = []
        self.refuse = refuse

    async def __call__(self, items: Sequence[int]) -> list[int]:
        self.groups.append(list(items))
        await asyncio.sleep(0.01)
        if self.refuse in items:
            raise ValueError(f"refused {self.refuse}")
        return [2 * i for i in items]


async def test_concurrent_submits_are_answered_in_groups_of_at_most_max_size() -> None:
    handle = Doubler()
    batcher = Batcher(handle, max_size=4, max_wait=0.05)
    answers = await asyncio.gather(*(batcher.submit(i) for i in range(10)))
    assert answers == [2 * i for i in range(10)]
    assert handle.groups == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


async def test_a_lone_item_waits_at_most_max_wait() -> None:
    batcher = Batcher(Doubler(), max_size=100, max_wait=0.02)
    started = asyncio.get_running_loop().time()
    assert await batcher.submit(21) == 42
    assert asyncio.get_running_loop().time() - started < 0.5


async def test_items_arriving_while_a_group_runs_make_the_next_group() -> None:
    handle = Doubler()
    batcher = Batcher(handle, max_size=100, max_wait=0.0)
    first = asyncio.create_task(batcher.submit(1))
    await asyncio.sleep(0.001)  # the first group is being handled
    rest = await asyncio.gather(*(batcher.submit(i) for i in (2, 3, 4)))
    assert (await first, rest) == (2, [4, 6, 8])
    assert handle.groups == [[1], [2, 3, 4]]


async def test_a_failing_group_is_retried_item_by_item_and_only_the_bad_item_fails() -> None:
    handle = Doubler(refuse=3)
    batcher = Batcher(handle, max_size=10, max_wait=0.02)
    answers = await asyncio.gather(
        *(batcher.submit(i) for i in range(1, 6)), return_exceptions=True
    )
    assert answers[:2] == [2, 4] and answers[3:] == [8, 10]
    assert isinstance(answers[2], ValueError)
    assert handle.groups == [[1, 2, 3, 4, 5], [1], [2], [3], [4], [5]]


async def test_a_handler_giving_the_wrong_number_of_answers_fails_its_callers() -> None:
    async def short(items: Sequence[int]) -> list[int]:
        return []

    with pytest.raises(RuntimeError, match="0 answers for 1 items"):
        await Batcher(short, max_size=5, max_wait=0).submit(1)


def test_a_batch_needs_room_for_one_item() -> None:
    with pytest.raises(ValueError):
        Batcher(Doubler(), max_size=0, max_wait=0)


async def test_with_a_gap_a_group_closes_once_arrivals_pause() -> None:
    """Callers that all came together are answered after the pause (one gap), not after
    ``max_wait``: a closed loop of a few clients is not kept waiting for others."""
    handle = Doubler()
    batcher = Batcher(handle, max_size=100, max_wait=2.0, max_gap=0.02)
    started = asyncio.get_running_loop().time()
    answers = await asyncio.gather(*(batcher.submit(i) for i in range(5)))
    assert answers == [0, 2, 4, 6, 8]
    assert handle.groups == [[0, 1, 2, 3, 4]]
    assert asyncio.get_running_loop().time() - started < 1.0


async def test_with_a_gap_a_steady_trickle_still_gathers_within_max_wait() -> None:
    """An item every 5 ms (gaps shorter than ``max_gap``): a group gathers them until
    ``max_wait``, instead of one group per item."""
    handle = Doubler()
    batcher = Batcher(handle, max_size=100, max_wait=0.1, max_gap=0.03)

    async def trickle() -> list[int]:
        tasks = []
        for i in range(20):
            tasks.append(asyncio.create_task(batcher.submit(i)))
            await asyncio.sleep(0.005)
        return list(await asyncio.gather(*tasks))

    assert await trickle() == [2 * i for i in range(20)]
    assert len(handle.groups) <= 5
    assert max(len(g) for g in handle.groups) >= 5


def test_a_gap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least one item"):
        Batcher(Doubler(), max_size=5, max_wait=0.1, max_gap=0)


async def test_an_items_close_by_closes_its_group_before_max_wait() -> None:
    """An item that needs its answer by a time is not kept for the whole ``max_wait``."""
    handle = Doubler()
    batcher = Batcher(handle, max_size=100, max_wait=5.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await batcher.submit(21, close_by=started + 0.05) == 42
    assert loop.time() - started < 1.0
    assert handle.groups == [[21]]


async def test_items_with_deadlines_are_gathered_until_the_earliest_of_them() -> None:
    """Items arriving every 10 ms, each needed 200 ms after it arrives: one group, closed at
    the first item's deadline (the later items join it; the group does not wait for theirs)."""
    handle = Doubler()
    batcher = Batcher(handle, max_size=100, max_wait=5.0)
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def timed(i: int) -> tuple[int, float]:
        answer = await batcher.submit(i, close_by=loop.time() + 0.2)
        return answer, loop.time() - started

    tasks = []
    for i in range(5):
        tasks.append(asyncio.create_task(timed(i)))
        await asyncio.sleep(0.01)
    answers = await asyncio.gather(*tasks)
    assert [a for a, _ in answers] == [0, 2, 4, 6, 8]
    assert handle.groups == [[0, 1, 2, 3, 4]]
    assert all(0.19 < t < 1.0 for _, t in answers)


async def test_a_later_item_with_an_earlier_close_by_closes_the_group_sooner() -> None:
    handle = Doubler()
    batcher = Batcher(handle, max_size=100, max_wait=5.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    first = asyncio.create_task(batcher.submit(1, close_by=started + 3.0))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(batcher.submit(2, close_by=loop.time() + 0.05))
    assert await asyncio.gather(first, second) == [2, 4]
    assert loop.time() - started < 1.0
    assert handle.groups == [[1, 2]]
