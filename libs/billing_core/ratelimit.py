"""The global gateway rate limit, shared by every collector replica through Redis.

GCRA with reservations: Redis hands out *send slots* spaced ``interval = (1 s + guard) / limit``
apart on its own clock (``TIME``), and every replica sends each call at its slot. One Lua script
reads the next free slot, reserves up to ``want`` slots no further than ``horizon`` ahead and
moves the cursor, atomically for all replicas, so one round trip serves a whole batch of calls.

Why slots rather than counting grants in a window: calls are paced evenly instead of leaving in
bursts, so a late call can only bunch up with the few slots next to it. The bound is exact: a
call is sent between its slot and ``max_late`` after it (a permit found later than that is
dropped, never used), so the calls sent in any rolling second come from slots within
``1 s + max_late``, of which there are at most ``ceil(limit * (1 s + max_late) / (1 s + guard))``
— never more than ``limit`` as long as ``max_late < guard``. What is left of the guard absorbs
the network and the gateway's own timing jitter. When there is work the rate is
``limit / (1 + guard)``, 98 % of the limit with the default 20 ms guard; an idle cursor gives no
burst credit. (A fixed one-second counter would let up to twice the limit through across a
window edge.)

A gateway that answers 429 anyway (its own clock, a contract changed under us) pauses every
replica: :meth:`GlobalRateLimiter.pause` moves the shared cursor past the pause, so no replica
finds a free slot before it ends — the pause is one more reservation, not a second mechanism.

The limiter FAILS CLOSED: while Redis cannot be reached no slot is granted and callers wait;
they resume by themselves when it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
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
local interval = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local horizon = tonumber(ARGV[3])
local cursor = tonumber(redis.call('GET', KEYS[1]) or '0')
if cursor < now then cursor = now end
local room = 0
if cursor <= now + horizon then room = math.floor((now + horizon - cursor) / interval) + 1 end
local grant = want
if grant > room then grant = room end
local next_free = cursor + grant * interval
if grant > 0 then
  redis.call('SET', KEYS[1], string.format('%.0f', next_free), 'PX', 60000)
end
local wait = 0
if grant < want then wait = next_free - horizon - now end
if wait < 0 then wait = 0 end
return {grant, string.format('%.0f', cursor), wait, string.format('%.0f', now)}
"""

# Moves the cursor to at least now + pause (never backwards); returns the pause end (µs).
_PAUSE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local until_us = now + tonumber(ARGV[1])
local cursor = tonumber(redis.call('GET', KEYS[1]) or '0')
if cursor < until_us then
  cursor = until_us
  local ttl = 60000 + math.floor(tonumber(ARGV[1]) / 1000)
  redis.call('SET', KEYS[1], string.format('%.0f', cursor), 'PX', ttl)
end
return string.format('%.0f', cursor)
"""

# Uses up ARGV[2] slots of ARGV[1] µs at the cursor (from now if it is idle): nobody gets them.
_USE_UP_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cursor = tonumber(redis.call('GET', KEYS[1]) or '0')
if cursor < now then cursor = now end
cursor = cursor + tonumber(ARGV[1]) * tonumber(ARGV[2])
redis.call('SET', KEYS[1], string.format('%.0f', cursor), 'PX', 60000)
return string.format('%.0f', cursor)
"""


@dataclass(frozen=True)
class Grant:
    granted: int
    first_slot_us: int  # Redis clock; the others follow every ``interval_us``
    interval_us: int
    retry_after_us: int
    redis_time_us: int

    def slots(self) -> list[int]:
        return [self.first_slot_us + i * self.interval_us for i in range(self.granted)]


class RedisClock:
    """Where Redis's clock stands against this process's monotonic one, as bounds that hold.

    A script ran somewhere between the moment it was asked for and its answer, so the offset
    (Redis seconds minus local seconds) lies between ``redis_now - answered`` and
    ``redis_now - asked``. Each answer narrows the bounds kept so far, which widen by ``drift``
    (1 ms per second: twice the largest rate at which the kernel slews a clock) as they age: one
    quick round trip now and then pins the offset for every grant, including those whose
    answer waited on a busy event loop, which alone would leave a slot's place that uncertain.
    Answers that contradict the bounds (Redis's clock was stepped) start them over.
    """

    drift = 0.001

    def __init__(self) -> None:
        self._lo = -math.inf
        self._hi = math.inf
        self._at = 0.0

    def observe(self, asked: float, answered: float, redis_us: int) -> None:
        redis_s = redis_us / 1_000_000
        lo, hi = self.bounds(answered)
        aged = self.drift * (answered - asked)  # the offset moved since the script ran
        new_lo, new_hi = redis_s - answered - aged, redis_s - asked + aged
        if new_lo > hi or new_hi < lo:
            lo, hi = new_lo, new_hi
        self._lo, self._hi, self._at = max(lo, new_lo), min(hi, new_hi), answered

    def bounds(self, at: float) -> tuple[float, float]:
        widen = self.drift * max(0.0, at - self._at)
        return self._lo - widen, self._hi + widen

    def slot(self, slot_us: int, at: float, max_late: float) -> Slot:
        """``slot_us`` (Redis clock) on the local clock, as seen at ``at``: never before the
        slot, never later than ``max_late`` after it, however the clocks drift until then."""
        lo, hi = self.bounds(at)
        slot_s = slot_us / 1_000_000
        widen = self.drift * max(0.0, slot_s - lo - at)
        return Slot(slot_us, slot_s - lo + widen, slot_s - hi - widen + max_late)


@dataclass(frozen=True)
class Slot:
    redis_us: int
    send_at: float  # local monotonic time at which the slot has surely come
    latest: float  # local monotonic time after which the slot may no longer be used


class GlobalRateLimiter:
    """``acquire()`` returns at the caller's send slot; waits (fails closed) while Redis is down."""

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        key: str,
        limit: int,
        guard_ms: int = 20,
        max_late_ms: int = 10,
        horizon_ms: int = 200,
        max_batch: int = 256,
        closed_backoff_s: float = 0.5,
    ) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        if not 0 <= max_late_ms < guard_ms:
            raise ValueError("max_late_ms must be below guard_ms, or a second could exceed limit")
        self._redis = redis
        self._keys = [key]
        self.limit = limit
        self.interval_us = -(-(1_000_000 + guard_ms * 1000) // limit)
        self._horizon_us = horizon_ms * 1000
        self._max_late_s = max_late_ms / 1000
        self._max_batch = max(1, min(max_batch, 10_000))
        self._closed_backoff_s = closed_backoff_s
        self._script = redis.register_script(_SCRIPT)
        self._pause_script = redis.register_script(_PAUSE_SCRIPT)
        self._use_up_script = redis.register_script(_USE_UP_SCRIPT)
        self._use_up_lock = asyncio.Lock()
        self._to_use_up = 0
        self._waiters: deque[asyncio.Future[Slot]] = deque()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.closed = False
        self.round_trips = 0
        self.granted = 0
        self.late_drops = 0
        self.pauses = 0
        self._paused_until = 0.0  # local monotonic: slots reserved before a pause are not used
        self._clock = RedisClock()

    async def slots_booked(self) -> int:
        """Send slots reserved ahead of now by all replicas (0: the gateway budget is idle)."""
        seconds, micros = await self._redis.time()
        now_us = int(seconds) * 1_000_000 + int(micros)
        raw = await self._redis.get(self._keys[0])
        cursor = int(raw) if raw else 0
        return max(0, -(-(cursor - now_us) // self.interval_us))

    async def grant(self, want: int) -> Grant:
        """One atomic request for up to ``want`` slots (raises RedisError when unreachable)."""
        granted, first, wait, now = await self._script(
            keys=self._keys, args=[self.interval_us, want, self._horizon_us]
        )
        self.round_trips += 1
        return Grant(int(granted), int(first), self.interval_us, int(wait), int(now))

    async def pause(self, seconds: float) -> None:
        """Grant no slot to any replica for ``seconds`` from now (a 429 from the gateway).

        This replica also drops the slots it had reserved ahead; other replicas use theirs (at
        most a horizon's worth, spaced under the limit).
        """
        pause_us = max(1, int(seconds * 1_000_000))
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)
        await self._pause_script(keys=self._keys, args=[pause_us])
        self.pauses += 1
        log.warning("gateway_rate_limited_pausing_all_replicas", seconds=seconds)

    async def use_up(self, slots: int) -> None:
        """Take ``slots`` send slots from every replica without sending in them (a call the
        gateway may have counted later than it was sent). Raises RedisError when unreachable."""
        self._to_use_up += slots
        async with self._use_up_lock:  # one round trip at a time takes every slot owed so far
            owed, self._to_use_up = self._to_use_up, 0
            if owed:
                try:
                    await self._use_up_script(keys=self._keys, args=[self.interval_us, owed])
                except BaseException:
                    self._to_use_up += owed
                    raise
                self.round_trips += 1

    async def acquire(self) -> int:
        """Wait for a send slot and return at it; the slot's time on the Redis clock (µs)."""
        while True:
            slot = await self.reserve()
            await self.wait_until(slot)
            if self.usable(slot):
                return slot.redis_us

    async def reserve(self) -> Slot:
        """The next send slot, at most a horizon ahead (callers queue here while it is busy).

        Between reserving and sending, the caller may get ready (read a pre-call check): the
        slot is still only used if :meth:`usable` says so when the caller is ready to send.
        """
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._dispense(), name="rate-limit-dispenser")
        future: asyncio.Future[Slot] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        self._wakeup.set()
        try:
            return await future
        except asyncio.CancelledError:
            if not future.done():
                future.cancel()
            raise

    @staticmethod
    async def wait_until(slot: Slot) -> None:
        delay = slot.send_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    def usable(self, slot: Slot) -> bool:
        """May a call go out now in ``slot``? Not before it, not after a pause that began
        since it was reserved (a 429), not later than ``max_late`` after it (it could crowd a
        rolling second: the slot is dropped)."""
        now = time.monotonic()
        if now < slot.send_at or now < self._paused_until:
            return False
        if now <= slot.latest:
            return True
        self.late_drops += 1
        return False

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
            want = min(pending, self._max_batch)
            asked = time.monotonic()
            try:
                grant = await self.grant(want)
            except (RedisError, OSError) as exc:
                if not self.closed:
                    log.warning("rate_limiter_closed", error=repr(exc))
                self.closed = True
                await asyncio.sleep(self._closed_backoff_s)
                continue
            answered = time.monotonic()
            if self.closed:
                log.info("rate_limiter_open_again")
            self.closed = False
            self._clock.observe(asked, answered, grant.redis_time_us)
            for slot_us in grant.slots():
                slot = self._clock.slot(slot_us, answered, self._max_late_s)
                while self._waiters and self._waiters[0].done():
                    self._waiters.popleft()
                if not self._waiters:
                    break  # a waiter was cancelled meanwhile: the slot goes unused
                self._waiters.popleft().set_result(slot)
                self.granted += 1
            if grant.granted < want:
                # Wait until the rest would fit, but at most half a horizon, so the cursor stays
                # ahead of time while there is work: a saturated replica makes about two round
                # trips per horizon, whatever the rate.
                rest_us = grant.retry_after_us + (want - grant.granted - 1) * self.interval_us
                await asyncio.sleep(min(max(rest_us, 1000), self._horizon_us // 2) / 1_000_000)
