"""The global limiter on real Redis: no rolling second above the limit, and fail closed."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import redis.asyncio as aioredis

from billing_core.ratelimit import Grant, SlidingWindowLimiter
from tests.support.infra import Services
from tests.support.processes import private_redis


def max_in_any_window(times_us: list[int], window_us: int = 1_000_000) -> int:
    times = sorted(times_us)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= window_us:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


class RecordingLimiter(SlidingWindowLimiter):
    """Keeps the Redis time of every permit granted (the script's own clock)."""

    granted_at: list[int]

    async def grant(self, want: int) -> Grant:
        result = await super().grant(want)
        self.__dict__.setdefault("granted_at", []).extend([result.redis_time_us] * result.granted)
        return result


async def test_three_replicas_never_exceed_the_limit_in_any_rolling_second(
    services: Services, redis_prefix: str
) -> None:
    clients = [aioredis.from_url(services.redis_url) for _ in range(3)]
    limiters = [
        RecordingLimiter(c, key=f"{redis_prefix}permits", limit=100, guard_ms=0, max_batch=16)
        for c in clients
    ]
    try:
        started = time.monotonic()
        grants = await asyncio.gather(*[limiters[i % 3].acquire() for i in range(450)])
        elapsed = time.monotonic() - started
    finally:
        for limiter in limiters:
            await limiter.close()
        for c in clients:
            await c.aclose()
    assert len(grants) == 450
    granted_at = [t for limiter in limiters for t in limiter.__dict__.get("granted_at", [])]
    assert len(granted_at) >= 450
    assert max_in_any_window(granted_at) <= 100
    # close to the limit when there is work: 450 permits at 100/s need a bit over 3.5 s
    assert 3.4 < elapsed < 6.0
    round_trips = sum(limiter.round_trips for limiter in limiters)
    assert round_trips < 450  # batched: fewer Redis calls than permits


async def test_a_fixed_window_would_fail_where_the_sliding_log_holds(
    services: Services, redis_prefix: str
) -> None:
    """Burst at a second's edge: grants stay within the limit over the whole rolling window."""
    client = aioredis.from_url(services.redis_url)
    limiter = SlidingWindowLimiter(client, key=f"{redis_prefix}edge", limit=50, guard_ms=0)
    try:
        first = await limiter.grant(50)
        await asyncio.sleep(0.6)
        second = await limiter.grant(50)
    finally:
        await limiter.close()
        await client.aclose()
    assert first.granted == 50
    assert second.granted == 0
    assert 300_000 <= second.retry_after_us <= 400_000


async def test_fails_closed_while_redis_is_down_and_resumes_by_itself(tmp_path: Path) -> None:
    port, up, down = private_redis(tmp_path)
    client = aioredis.from_url(
        f"redis://127.0.0.1:{port}/0", socket_timeout=0.5, socket_connect_timeout=0.5
    )
    limiter = SlidingWindowLimiter(client, key="outage", limit=10, closed_backoff_s=0.1)
    try:
        await asyncio.wait_for(limiter.acquire(), timeout=5)
        down()
        waiting = asyncio.create_task(limiter.acquire())
        await asyncio.sleep(1.5)
        assert not waiting.done(), "a permit was granted while Redis was down"
        assert limiter.closed
        up()
        await asyncio.wait_for(waiting, timeout=10)
        assert not limiter.closed
    finally:
        await limiter.close()
        await client.aclose()
        with contextlib.suppress(Exception):
            down()
