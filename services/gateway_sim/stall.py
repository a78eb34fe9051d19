"""A gateway that stops answering for a while: ``POST /v1/admin/stall {"seconds": 2}``.

For the stall's duration the simulator behaves like a frozen process (a GC pause, a starved CPU,
a network path that buffers): charge requests arriving are *held*, not read, and are admitted by
the rate limiter -- counted as arrivals -- only when the stall ends, all at the same instant, in
the order they came. Calls already admitted are answered no earlier than the end. This is the
harsh case for a client: whatever it sent during the stall lands at once, so a client that kept
sending turns the stall into a burst above the limit, and one that bounds its calls outstanding
does not.
"""

from __future__ import annotations

import asyncio
import time


class Stall:
    def __init__(self) -> None:
        self._resumed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.reset()

    def reset(self) -> None:
        """No stall: one under way ends now (what it held goes on), and the counts restart."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._resumed.set()
        self._until = 0.0
        self._held = 0
        self.stalls = 0
        self.held_total = 0
        self.max_held = 0

    @property
    def active(self) -> bool:
        return not self._resumed.is_set()

    def begin(self, seconds: float) -> float:
        """Stall for ``seconds`` from now (extends a stall under way); the end, monotonic."""
        until = time.monotonic() + seconds
        if self.active:
            self._until = max(self._until, until)
            return self._until
        self.stalls += 1
        self._until = until
        self._held = 0
        self._resumed.clear()
        self._task = asyncio.get_running_loop().create_task(self._end_later())
        return until

    async def _end_later(self) -> None:
        while (left := self._until - time.monotonic()) > 0:
            await asyncio.sleep(left)
        self._resumed.set()

    async def hold_arrival(self) -> None:
        """A request arriving now waits for the end of the stall (counted as held)."""
        if self._resumed.is_set():
            return
        self._held += 1
        self.held_total += 1
        self.max_held = max(self.max_held, self._held)
        await self._resumed.wait()

    async def hold_answer(self) -> None:
        """An answer ready now is sent no earlier than the end of the stall."""
        if not self._resumed.is_set():
            await self._resumed.wait()

    def summary(self) -> dict[str, object]:
        return {
            "stalls": self.stalls,
            "held_in_stalls": self.held_total,
            "max_held_in_a_stall": self.max_held,
        }
