"""The global gateway rate limit, shared by every collector replica through Redis.

A sliding log: a sorted set holds the grant time (Redis ``TIME``, microseconds) of every permit
handed out in the last window. One Lua script trims, counts and grants atomically, so no rolling
window ever holds more than ``limit`` grants — unlike a fixed one-second counter, which lets up to
twice the limit through across a window edge. The window is one second plus a small guard, which
absorbs the jitter between a grant and the moment the call reaches the gateway.

Permits are asked for in batches (one round trip for up to ``max_batch`` waiting calls), so Redis
is never the bottleneck. The limiter FAILS CLOSED: while Redis cannot be reached no permit is
granted and callers wait; they resume by themselves when it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from billing_core.logging import get_logger

log = get_logger(__name__)

_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local used = redis.call('ZCARD', KEYS[1])
local grant = limit - used
if grant > want then grant = want end
if grant < 0 then grant = 0 end
if grant > 0 then
  local seq = redis.call('INCRBY', KEYS[2], grant)
  local args = {}
  for i = 1, grant do
    args[#args + 1] = now
    args[#args + 1] = seq - grant + i
  end
  redis.call('ZADD', KEYS[1], unpack(args))
  redis.call('PEXPIRE', KEYS[1], math.floor(window / 1000) + 1000)
  redis.call('PEXPIRE', KEYS[2], 86400000)
end
local wait = 0
if grant < want then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if oldest[2] then wait = tonumber(oldest[2]) + window - now end
end
return {grant, wait, now}
"""


@dataclass(frozen=True)
class Grant:
    granted: int
    retry_after_us: int
    redis_time_us: int


class SlidingWindowLimiter:
    """``acquire()`` returns once a permit is granted; waits (fails closed) while Redis is down."""

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        key: str,
        limit: int,
        window_ms: int = 1000,
        guard_ms: int = 20,
        max_batch: int = 16,
        closed_backoff_s: float = 0.5,
    ) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self._redis = redis
        self._keys = [key, f"{key}:seq"]
        self._limit = limit
        self._window_us = (window_ms + guard_ms) * 1000
        self._max_permit_age_s = max(guard_ms, 5) / 1000
        self._max_batch = max(1, min(max_batch, 2000))
        self._closed_backoff_s = closed_backoff_s
        self._script = redis.register_script(_SCRIPT)
        self._waiters: deque[asyncio.Future[float]] = deque()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.closed = False
        self.round_trips = 0
        self.granted = 0

    async def grant(self, want: int) -> Grant:
        """One atomic request for up to ``want`` permits (raises RedisError when unreachable)."""
        granted, wait, now = await self._script(
            keys=self._keys, args=[self._limit, self._window_us, want]
        )
        self.round_trips += 1
        return Grant(int(granted), int(wait), int(now))

    async def acquire(self) -> float:
        """Wait for one permit; returns when it arrived here (``time.monotonic()``).

        A permit is only good right away: the guard absorbs a few milliseconds between the grant
        and the call, so a caller that could not use it promptly (a starved event loop) should
        drop it and ask again — see :meth:`fresh`.
        """
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._dispense(), name="rate-limit-dispenser")
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        self._wakeup.set()
        try:
            return await future
        except asyncio.CancelledError:
            if not future.done():
                future.cancel()
            raise

    def fresh(self, received: float) -> bool:
        """Whether a permit that arrived at ``received`` may still be used now."""
        return time.monotonic() - received <= self._max_permit_age_s

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for waiter in self._waiters:
            waiter.cancel()
        self._waiters.clear()

    def _pending(self) -> int:
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()
        return sum(1 for w in self._waiters if not w.done())

    async def _dispense(self) -> None:
        while True:
            pending = self._pending()
            if pending == 0:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                grant = await self.grant(min(pending, self._max_batch))
            except (RedisError, OSError) as exc:
                if not self.closed:
                    log.warning("rate_limiter_closed", error=repr(exc))
                self.closed = True
                await asyncio.sleep(self._closed_backoff_s)
                continue
            if self.closed:
                log.info("rate_limiter_open_again")
            self.closed = False
            handed = 0
            received = time.monotonic()
            while handed < grant.granted and self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(received)
                    handed += 1
            self.granted += handed
            if grant.granted < min(pending, self._max_batch):
                await asyncio.sleep(max(grant.retry_after_us, 1000) / 1_000_000)
