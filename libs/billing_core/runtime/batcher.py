"""Many concurrent callers, one round trip: callers submit one item each and await its answer;
the items that arrive within ``max_wait`` (or ``max_size`` of them) are handled as one group.
With ``max_gap``, a group also closes as soon as no item has arrived for that long: at a steady
trickle it still gathers what comes within ``max_wait``, but callers that all arrived together
(a closed loop of a few clients) are not kept waiting for others that will not come. An item
may also say when its answer is needed (``close_by``): its group closes then at the latest, so
items that know their deadline can wait for others as long as the earliest of them allows.

Groups run one after the other: while one runs, the next one fills. When a group fails, each of
its items is tried alone, so one bad item fails only its own caller.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Batcher(Generic[T, R]):
    def __init__(
        self,
        handle: Callable[[Sequence[T]], Awaitable[Sequence[R]]],
        *,
        max_size: int,
        max_wait: float,
        max_gap: float | None = None,
    ) -> None:
        """``handle`` answers a group of items, one answer per item, in order."""
        if max_size < 1 or max_wait < 0 or (max_gap is not None and max_gap <= 0):
            raise ValueError("a batch holds at least one item and waits no negative time")
        self._handle = handle
        self._max_size = max_size
        self._max_wait = max_wait
        self._max_gap = max_gap
        self._arrived = asyncio.Event()  # every arrival
        self._wake = asyncio.Event()  # the group is full, or must close earlier than planned
        self._queue: list[tuple[T, asyncio.Future[R], float]] = []
        self._close_by = math.inf  # the earliest ``close_by`` of the items waiting
        self._runner: asyncio.Task[None] | None = None
        self.groups = 0  # groups handled (for metrics and tests)

    async def submit(self, item: T, close_by: float | None = None) -> R:
        """``item``'s answer. ``close_by`` (the event loop's clock, ``loop.time()``): the
        latest time its group may start being handled; None: ``max_wait`` decides."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        deadline = math.inf if close_by is None else close_by
        self._queue.append((item, future, deadline))
        self._arrived.set()
        if deadline < self._close_by:
            self._close_by = deadline
            self._wake.set()
        if len(self._queue) >= self._max_size:
            self._wake.set()
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name="batcher")
        return await future

    async def _run(self) -> None:
        while self._queue:
            if len(self._queue) < self._max_size and self._max_wait > 0:
                await self._gather()
            group, self._queue = self._queue[: self._max_size], self._queue[self._max_size :]
            self._close_by = min((close_by for *_, close_by in self._queue), default=math.inf)
            await self._answer(group)

    async def _gather(self) -> None:
        """Wait until the group is full, ``max_wait`` has passed, an item's ``close_by`` has
        come, or (with ``max_gap``) no item has arrived for ``max_gap``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_wait
        # Without a gap only a full group or an earlier close_by wakes the wait, not each item.
        woken_by = self._wake if self._max_gap is None else self._arrived
        while len(self._queue) < self._max_size:
            left = min(deadline, self._close_by) - loop.time()
            if left <= 0:
                return
            woken_by.clear()
            try:
                await asyncio.wait_for(
                    woken_by.wait(), left if self._max_gap is None else min(left, self._max_gap)
                )
            except TimeoutError:
                return

    async def _answer(self, group: list[tuple[T, asyncio.Future[R], float]]) -> None:
        self.groups += 1
        try:
            await self._try(group)
        finally:  # cancelled mid-group (the loop is closing): no caller waits forever
            for _, future, _ in group:
                if not future.done():
                    future.cancel()

    async def _try(self, group: list[tuple[T, asyncio.Future[R], float]]) -> None:
        try:
            answers = await self._handle([item for item, _, _ in group])
            if len(answers) != len(group):
                raise RuntimeError(f"{len(answers)} answers for {len(group)} items")
        except Exception as exc:
            if len(group) == 1:
                _settle(group[0][1], exc)
                return
            for one in group:
                await self._answer([one])
            return
        for (_, future, _), answer in zip(group, answers, strict=True):
            _settle(future, answer)


def _settle(future: asyncio.Future[R], outcome: R | Exception) -> None:
    if future.done():  # its caller was cancelled (shutdown): the answer has no one to go to
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
