"""How many gateway calls one collector may have sent and not yet seen answered.

The rate limiter spaces the *sends*; this window bounds what is *outstanding*, so a gateway that
stops answering (or stops reading) can hold at most a window's worth of calls, never the whole
backlog, and cannot release them as a burst. A call takes its place in the window at its send
slot (:meth:`take`); a slot that finds the window full is not used, so a slow gateway lowers the
rate instead of piling calls up. The window is what the limit allows over the expected latency,
``ceil(limit * baseline * headroom) + spare``, where the baseline is the gateway's usual median
latency. It does not grow when the gateway slows down, it shrinks:

* the median of the last calls above ``spike_factor * baseline`` scales the window down by
  ``baseline / median`` (a 2 s stall at a 200 ms baseline leaves a tenth of it), and it grows
  back as fast answers return;
* a 429 halves it (``on_rate_limited``), on top of the global pause in the limiter.

The baseline follows a real, lasting change of the gateway's latency slowly (``drift`` per
answer) and a faster gateway at once. Isolated slow calls (timeouts) do not move the median.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections import deque


class CallWindow:
    def __init__(
        self,
        *,
        limit_per_second: int,
        max_window: int,
        min_window: int = 2,
        expected_latency_seconds: float = 0.3,
        headroom: float = 1.25,
        spare: int = 8,
        spike_factor: float = 2.0,
        samples: int = 32,
        drift: float = 0.001,
    ) -> None:
        if not 1 <= min_window <= max_window:
            raise ValueError("need 1 <= min_window <= max_window")
        self._limit = limit_per_second
        self._max = max_window
        self._min = min_window
        self._headroom = headroom
        self._spare = spare
        self._spike = spike_factor
        self._drift = drift
        self._recent: deque[float] = deque(maxlen=samples)
        self._min_samples = max(1, samples // 4)
        self.baseline = expected_latency_seconds
        self._penalty = 1.0  # 429s: halves, recovers on each answer
        self.outstanding = 0
        self._changed = asyncio.Condition()
        self.size = self._compute()

    def _compute(self) -> int:
        size = math.ceil(self._limit * self.baseline * self._headroom) + self._spare
        if len(self._recent) >= self._min_samples:
            median = statistics.median(self._recent)
            if median > self._spike * self.baseline:
                size = math.floor(size * self.baseline / median)
        size = math.floor(size * self._penalty)
        return max(self._min, min(self._max, size))

    def is_late(self, latency_seconds: float) -> bool:
        """Slower than ``spike_factor`` times the usual latency."""
        return latency_seconds > self._spike * self.baseline

    async def wait_for_room(self) -> None:
        """Wait until the window has room (without taking it: see :meth:`take`)."""
        if self.outstanding < self.size:
            return
        async with self._changed:
            await self._changed.wait_for(lambda: self.outstanding < self.size)

    def take(self) -> bool:
        """Take a place for a call sent now; False when the window is full (do not send)."""
        if self.outstanding >= self.size:
            return False
        self.outstanding += 1
        return True

    async def release(self, latency_seconds: float | None) -> None:
        """A place taken with :meth:`take` is free: the call was answered (or failed) after
        ``latency_seconds``, or None when it was not sent after all."""
        async with self._changed:
            self.outstanding -= 1
            if latency_seconds is not None:
                self._observe(latency_seconds)
            self._changed.notify(max(0, self.size - self.outstanding))

    async def on_rate_limited(self) -> None:
        async with self._changed:
            self._penalty = max(self._min / max(1, self._max), self._penalty / 2)
            self.size = self._compute()

    def _observe(self, latency: float) -> None:
        self._recent.append(latency)
        if len(self._recent) >= self._min_samples:
            median = statistics.median(self._recent)
            self.baseline = min(self.baseline * (1 + self._drift), max(median, 1e-4))
        self._penalty = min(1.0, self._penalty * 1.02)
        self.size = self._compute()
