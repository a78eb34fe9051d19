"""The global limiter on real Redis: no rolling second above the limit, pacing, fail closed."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from billing_core.ratelimit import GlobalRateLimiter
from tests.support.infra import Services
from tests.support.processes import private_redis

pytestmark = pytest.mark.timing  # measures real time: run alone, never beside other tests


def max_in_any_window(times: list[float], window: float) -> int:
    """The most timestamps in any half-open window (t - window, t]."""
    ordered = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(ordered):
        while t - ordered[lo] >= window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


async def test_three_replicas_never_exceed_the_limit_in_any_rolling_second(
    services: Services, redis_prefix: str
) -> None:
    clients = [aioredis.from_url(services.redis_url) for _ in range(3)]
    limiters = [
        GlobalRateLimiter(c, key=f"{redis_prefix}permits", limit=100, horizon_ms=200)
        for c in clients
    ]
    sent: list[float] = []

    async def call(i: int) -> int:
        slot = await limiters[i % 3].acquire()
        sent.append(time.monotonic())
        return slot

    try:
        started = time.monotonic()
        slots = await asyncio.gather(*[call(i) for i in range(450)])
        elapsed = time.monotonic() - started
    finally:
        for limiter in limiters:
            await limiter.close()
        for c in clients:
            await c.aclose()
    assert len(slots) == len(set(slots)) == 450
    # the grant times on the Redis clock: every rolling second holds at most the limit
    assert max_in_any_window([s / 1e6 for s in slots], 1.0) <= 100
    # and so do the moments the calls were let go (a late permit is dropped, not used)
    assert max_in_any_window(sent, 1.0) <= 100
    # close to the limit when there is work: 450 slots 10.2 ms apart take 4.6 s
    assert 4.4 < elapsed < 7.0
    round_trips = sum(limiter.round_trips for limiter in limiters)
    # batched: a saturated replica asks about twice per 200 ms horizon, whatever the rate
    assert round_trips < 450 / 2


async def test_a_burst_is_paced_never_front_loaded_at_a_window_edge(
    services: Services, redis_prefix: str
) -> None:
    """A fixed one-second counter would let 50 through now and 50 more a moment later."""
    client = aioredis.from_url(services.redis_url)
    limiter = GlobalRateLimiter(client, key=f"{redis_prefix}edge", limit=50, horizon_ms=100)
    try:
        first = await limiter.grant(50)
        second = await limiter.grant(50)
    finally:
        await limiter.close()
        await client.aclose()
    assert limiter.interval_us == 20_400  # (1 s + 20 ms) / 50
    assert first.granted == 5  # only what fits in the 100 ms horizon
    slots = first.slots() + second.slots()
    assert all(b - a == 20_400 for a, b in itertools.pairwise(slots))
    assert second.granted <= 1
    assert 0 < second.retry_after_us <= 21_000


async def test_a_permit_found_too_late_is_dropped_and_replaced(
    services: Services, redis_prefix: str
) -> None:
    client = aioredis.from_url(services.redis_url)
    limiter = GlobalRateLimiter(
        client, key=f"{redis_prefix}late", limit=10, horizon_ms=500, max_late_ms=10
    )
    try:
        await limiter.acquire()
        waiting = asyncio.gather(*[limiter.acquire() for _ in range(3)])
        while limiter.granted < 4:
            await asyncio.sleep(0.001)
        time.sleep(0.5)  # the process stalls past all three reserved slots
        blocked_until = time.monotonic()
        await waiting
        done = time.monotonic()
    finally:
        await limiter.close()
        await client.aclose()
    assert limiter.late_drops == 3
    assert limiter.granted == 7
    assert done - blocked_until > 0.2  # fresh slots, paced again, not the stale ones


async def test_fails_closed_while_redis_is_down_and_resumes_by_itself(tmp_path: Path) -> None:
    port, up, down = private_redis(tmp_path)
    client = aioredis.from_url(
        f"redis://127.0.0.1:{port}/0", socket_timeout=0.5, socket_connect_timeout=0.5
    )
    limiter = GlobalRateLimiter(client, key="outage", limit=10, closed_backoff_s=0.1)
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


async def test_slots_booked_shows_the_budget_in_use(services: Services, redis_prefix: str) -> None:
    client = aioredis.from_url(services.redis_url)
    limiter = GlobalRateLimiter(client, key=f"{redis_prefix}booked", limit=100, horizon_ms=100)
    try:
        assert await limiter.slots_booked() == 0
        grant = await limiter.grant(8)
        assert grant.granted == 8
        assert 1 <= await limiter.slots_booked() <= 8
    finally:
        await limiter.close()
        await client.aclose()


async def test_a_pause_holds_every_replica_then_pacing_resumes(
    services: Services, redis_prefix: str
) -> None:
    """A 429 seen by one replica: no replica gets a slot until the pause is over."""
    clients = [aioredis.from_url(services.redis_url) for _ in range(2)]
    key = f"{redis_prefix}pause"
    limiters = [GlobalRateLimiter(c, key=key, limit=100, horizon_ms=100) for c in clients]
    try:
        await limiters[0].acquire()
        paused_at = time.monotonic()
        await limiters[0].pause(0.6)
        # the other replica, which never saw the 429, waits for the pause too
        await asyncio.wait_for(limiters[1].acquire(), timeout=5)
        waited = time.monotonic() - paused_at
        # a shorter pause never shortens a longer one already in force
        await limiters[1].pause(2.0)
        await limiters[0].pause(0.1)
        booked = await limiters[0].slots_booked()
    finally:
        for limiter in limiters:
            await limiter.close()
        for c in clients:
            await c.aclose()
    # the slot comes no earlier than the pause end, less the limiter's 100 ms look-ahead
    assert 0.45 < waited < 1.5
    assert booked >= 150  # about 2 s of the 10.2 ms interval still reserved by the pause


async def test_used_up_slots_push_every_replica_back(services: Services, redis_prefix: str) -> None:
    """A late answer uses up a slot: the next grant, on any replica, comes that much later."""
    clients = [aioredis.from_url(services.redis_url) for _ in range(2)]
    a, b = (
        GlobalRateLimiter(c, key=f"{redis_prefix}used", limit=100, horizon_ms=100) for c in clients
    )
    try:
        before = await b.grant(1)
        await a.use_up(50)  # half a second of the limit, beyond any horizon
        after = await b.grant(1)
        assert after.granted == 0  # nothing within b's horizon: the slots are gone
        assert after.retry_after_us >= 50 * a.interval_us - 100_000 - 50_000
        await a.use_up(1)
        later = await b.grant(1)
        assert later.retry_after_us > after.retry_after_us
    finally:
        await a.close()
        await b.close()
        for c in clients:
            await c.aclose()
    assert before.granted == 1
