"""The gateway's own rate limit over a ROLLING second.

A call arriving at ``t`` (nanoseconds) is admitted when fewer than ``limit`` admitted calls arrived
in ``(t - 1 s, t]``. The same timestamps go to the ledger, which recomputes the maximum over every
rolling second independently (:meth:`Ledger.max_calls_in_any_rolling_second`).
"""

from __future__ import annotations

from collections import deque

WINDOW_NS = 1_000_000_000


class RollingSecondLimiter:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0 = unlimited (admitted calls are still tracked, so a limit set
        # at run time counts the calls of the last second before it)
        self._admitted: deque[int] = deque()

    def _expire(self, now_ns: int) -> None:
        cutoff = now_ns - WINDOW_NS
        admitted = self._admitted
        while admitted and admitted[0] <= cutoff:
            admitted.popleft()

    def try_acquire(self, now_ns: int) -> bool:
        """Admit the call arriving at ``now_ns`` (and count it) or refuse it (count nothing)."""
        self._expire(now_ns)
        if 0 < self.limit <= len(self._admitted):
            return False
        self._admitted.append(now_ns)
        return True

    def retry_after_seconds(self, now_ns: int) -> float:
        """When the oldest call in the window leaves it (a hint for ``Retry-After``)."""
        self._expire(now_ns)
        if not self._admitted:
            return 0.0
        return max(0.0, (self._admitted[0] + WINDOW_NS - now_ns) / 1e9)

    def clear(self) -> None:
        self._admitted.clear()
