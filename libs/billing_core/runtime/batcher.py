"""Many concurrent callers, one round trip: callers submit one item each and await its answer;
the items that arrive within ``max_wait`` (or ``max_size`` of them) are handled as one group.
With ``max_gap``, a group also closes as soon as no item has arrived for that long: at a steady
trickle it still gathers what comes within ``max_wait``, but callers that all arrived together
(a closed loop of a few clients) are not kept waiting for others that will not come.

Groups run one after the other: while one runs, the next one fills. When a group fails, each of
its items is tried alone, so one bad item fails only its own caller.
"""

from __future__ import annotations

import asyncio
import contextlib
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
        self._arrived = asyncio.Event()
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._full = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self.groups = 0  # groups handled (for metrics and tests)

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        self._arrived.set()
        if len(self._queue) >= self._max_size:
            self._full.set()
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name="batcher")
        return await future

    async def _run(self) -> None:
        while self._queue:
            if len(self._queue) < self._max_size and self._max_wait > 0:
                await self._gather()
            group, self._queue = self._queue[: self._max_size], self._queue[self._max_size :]
            self._full.clear()
            if len(self._queue) >= self._max_size:
                self._full.set()
            await self._answer(group)

    async def _gather(self) -> None:
        """Wait until the group is full, ``max_wait`` has passed, or (with ``max_gap``) no
        item has arrived for ``max_gap``."""
        if self._max_gap is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), self._max_wait)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_wait
        while len(self._queue) < self._max_size:
            left = deadline - loop.time()
            if left <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), min(left, self._max_gap))
            except TimeoutError:
                return

    async def _answer(self, group: list[tuple[T, asyncio.Future[R]]]) -> None:
        self.groups += 1
        try:
            await self._try(group)
        finally:  # cancelled mid-group (the loop is closing): no caller waits forever
            for _, future in group:
                if not future.done():
                    future.cancel()

    async def _try(self, group: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            answers = await self._handle([item for item, _ in group])
            if len(answers) != len(group):
                raise RuntimeError(f"{len(answers)} answers for {len(group)} items")
        except Exception as exc:
            if len(group) == 1:
                _settle(group[0][1], exc)
                return
            for one in group:
                await self._answer([one])
            return
        for (_, future), answer in zip(group, answers, strict=True):
            _settle(future, answer)


def _settle(future: asyncio.Future[R], outcome: R | Exception) -> None:
    if future.done():  # its caller was cancelled (shutdown): the answer has no one to go to
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
