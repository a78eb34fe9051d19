"""The collector stores when it sent each call (``payment_attempt.requested_at``): counted per
second, its calls are the ones the simulator's ledger saw arrive, though the answers, slow and
recorded in groups, land in other seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import redis.asyncio as aioredis

from billing_core.clock import SystemClock
from billing_core.db import pg
from billing_core.gateway import HttpPaymentGateway
from billing_core.ratelimit import GlobalRateLimiter
from billing_core.repo import backlogs
from billing_core.settings import CoreSettings
from services.collector.service import Collector
from services.collector.settings import CollectorSettings
from services.collector.window import CallWindow
from tests.integration.collector.conftest import Simulator
from tests.support.factories import due_subscriptions_with_invoices

LIMIT = 20
INVOICES = 50
WINDOW_SECONDS = 60
# A few calls sent in the last milliseconds of a second arrive in the next one.
BOUNDARY_CALLS = 2


@pytest.fixture
async def collector(
    simulator: Simulator,
    lazy_pool: pg.LazyPool,
    redis: aioredis.Redis,
    redis_prefix: str,
    settings: CoreSettings,
) -> AsyncIterator[Collector]:
    # Slow answers, recorded in groups of up to a second's wait: their recording lags their calls.
    simulator.config(latency_min_ms=400, latency_max_ms=700)
    gateway = HttpPaymentGateway(simulator.url, max_connections=INVOICES)
    limiter = GlobalRateLimiter(redis, key=f"{redis_prefix}permits", limit=LIMIT)
    yield Collector(
        CollectorSettings(
            database_url=settings.database_url,
            collector_batch_size=INVOICES,
            collector_max_in_flight=INVOICES,
            collector_group_max=INVOICES,
            collector_group_wait_ms=1000,
            collector_rng_seed=3,
        ),
        pool=lazy_pool,
        gateway=gateway,
        limiter=limiter,
        window=CallWindow(
            limit_per_second=LIMIT, max_window=INVOICES, expected_latency_seconds=0.55
        ),
        redis=redis,
        clock=SystemClock(),
        stopping=asyncio.Event(),
    )
    await limiter.close()
    await gateway.aclose()


async def charge_all(collector: Collector, pool: pg.Pool) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        await collector.tick()
        async with pool.acquire() as conn:
            if not await conn.fetchval("SELECT count(*) FROM invoice WHERE status = 'OPEN'"):
                return
        await asyncio.sleep(0.2)
    pytest.fail("the collector did not charge every invoice within a minute")


def ledger_per_second(simulator: Simulator) -> dict[int, int]:
    answer = httpx.get(f"{simulator.url}/v1/ledger/calls-per-second", timeout=10)
    answer.raise_for_status()
    return {int(row["second"]): int(row["calls"]) for row in answer.json() if row["calls"]}


async def test_calls_counted_by_their_send_instants_match_the_gateways_ledger(
    collector: Collector, simulator: Simulator, pool: pg.Pool
) -> None:
    async with pg.transaction(pool) as conn:
        await due_subscriptions_with_invoices(
            conn, INVOICES, now=datetime.now(UTC) - timedelta(minutes=1), first_customer=500
        )
    await charge_all(collector, pool)
    now = datetime.now(UTC)
    async with pool.acquire() as conn:
        calls = await backlogs.gateway_calls(conn, now, rate_limit=LIMIT, seconds=WINDOW_SECONDS)
        lag = await conn.fetchval(
            "SELECT min(extract(epoch FROM recorded_at - requested_at)) FROM payment_attempt"
        )
    first = int(now.timestamp()) - WINDOW_SECONDS + 1
    ours = {first + i: n for i, n in enumerate(calls.per_second) if n}
    ledger = ledger_per_second(simulator)

    assert sum(ours.values()) == sum(ledger.values()) == INVOICES
    assert float(lag) >= 0.4  # each answer recorded at least a gateway latency after its call
    for second in ours.keys() | ledger.keys():
        assert abs(ours.get(second, 0) - ledger.get(second, 0)) <= BOUNDARY_CALLS, (ours, ledger)
    assert abs(calls.busiest_second - max(ledger.values())) <= BOUNDARY_CALLS
