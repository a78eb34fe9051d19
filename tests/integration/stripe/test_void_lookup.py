"""A canceled invoice whose charge was uncertain is only looked up, and Stripe's search trails its
writes: the collector (in the test's process, on a test clock) against a loopback server that
answers as Stripe does, its search finding nothing for the first minutes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aioredis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.ratelimit import GlobalRateLimiter
from billing_core.repo import gateway_customers
from billing_core.settings import CoreSettings
from billing_core.stripe_gateway import StripePaymentGateway
from billing_core.usecases.cancel import cancel
from services.collector.gateways import stripe_customers
from services.collector.service import Collector
from services.collector.settings import CollectorSettings
from services.collector.window import CallWindow
from tests.support.factories import due_subscriptions_with_invoices
from tests.support.stripe_stub import StripeStub, stripe_stub

SERVER_ERROR = {"error": {"type": "api_error", "message": "Something went wrong on our end."}}
NOTHING_FOUND = {"object": "search_result", "data": [], "has_more": False}
# How far Stripe documents its search may trail writes during incidents: the adapter's default.
SEARCH_LAG = timedelta(hours=1)


class Round:
    """One claim of the collector, with everything it called finished and recorded."""

    def __init__(self, collector: Collector, engine: AsyncEngine) -> None:
        self.collector = collector
        self.engine = engine

    async def __call__(self) -> None:
        async with self.engine.begin() as conn:  # due now, on the database's clock
            await conn.execute(text("UPDATE invoice SET next_attempt_at = now()"))
        await self.collector.tick()
        await self.collector.drain(15)
        await asyncio.sleep(0.3)  # the result group's wait


@pytest.fixture
async def stub() -> AsyncIterator[StripeStub]:
    async with stripe_stub() as server:
        yield server


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC))


@pytest.fixture
async def collect(
    engine: AsyncEngine,
    redis: aioredis.Redis,
    redis_prefix: str,
    stub: StripeStub,
    clock: ManualClock,
    settings: CoreSettings,
) -> AsyncIterator[Round]:
    pool = pg.LazyPool(settings, max_size=4)
    gateway = StripePaymentGateway(
        "sk_test_123", customers=stripe_customers(pool), api_base=stub.url
    )
    limiter = GlobalRateLimiter(redis, key=f"{redis_prefix}permits", limit=50)
    collector_settings = CollectorSettings(
        database_url=settings.database_url,
        collector_batch_size=10,
        collector_max_in_flight=4,
        collector_lease_seconds=60,
        collector_rng_seed=3,
    )
    collector = Collector(
        collector_settings,
        pool=pool,
        gateway=gateway,
        limiter=limiter,
        window=CallWindow(limit_per_second=50, max_window=4, expected_latency_seconds=0.05),
        redis=redis,
        clock=clock,
        stopping=asyncio.Event(),
    )
    yield Round(collector, engine)
    await limiter.close()
    await gateway.aclose()
    await pool.close()


async def canceled_during_an_uncertain_charge(
    engine: AsyncEngine, pool: pg.Pool, collect: Round, clock: ManualClock
) -> int:
    """An invoice charged once (the stub's first answer), then canceled: its void requested."""
    async with engine.begin() as conn:
        [invoice_id] = await due_subscriptions_with_invoices(
            conn, 1, now=clock.now(), first_customer=77
        )
    async with pg.transaction(pool) as conn:
        await gateway_customers.put(
            conn,
            customer_id=77,
            gateway="stripe",
            gateway_customer_id="cus_PZrgY7FgXqFqUd",
            payment_method_id="pm_1OkjqQ2eZvKYlo2C",
            now=clock.now(),
        )
    await collect()
    async with pg.transaction(pool) as conn:
        subscription_id = await conn.fetchval(
            "SELECT subscription_id FROM invoice WHERE id = $1", invoice_id
        )
        await cancel(conn, subscription_id=subscription_id, at_period_end=False, now=clock.now())
    assert await state(engine, invoice_id) == ("OPEN", True)
    return invoice_id


async def state(engine: AsyncEngine, invoice_id: int) -> tuple[str, bool]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT status, void_requested_at IS NOT NULL FROM invoice WHERE id = :i"),
                {"i": invoice_id},
            )
        ).one()
    return row[0], row[1]


async def attempts(engine: AsyncEngine, invoice_id: int) -> list[tuple[str, str, str | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT source, outcome, coalesce(decline_code, error) FROM payment_attempt"
                " WHERE invoice_id = :i ORDER BY id"
            ),
            {"i": invoice_id},
        )
        return [(r[0], r[1], r[2]) for r in rows]


async def test_no_charge_found_by_search_voids_only_once_the_index_has_caught_up(
    engine: AsyncEngine,
    pool: pg.Pool,
    collect: Round,
    stub: StripeStub,
    clock: ManualClock,
) -> None:
    stub.answer(500, SERVER_ERROR)  # the charge: Stripe may or may not have made it
    stub.answer(200, NOTHING_FOUND)  # every search after it
    invoice_id = await canceled_during_an_uncertain_charge(engine, pool, collect, clock)

    async with engine.connect() as conn:
        canceled_at = (
            await conn.execute(text("SELECT void_requested_at FROM invoice"))
        ).scalar_one()
    clock.advance(timedelta(minutes=2))
    await collect()
    # Not found yet says nothing: the invoice stays OPEN, its void requested, asked again later.
    assert await state(engine, invoice_id) == ("OPEN", True)
    trusted_from = (canceled_at + SEARCH_LAG).isoformat()  # no charge called after the cancel
    assert (await attempts(engine, invoice_id))[1] == (
        "LOOKUP",
        "UNKNOWN",
        f"lookup: not found, but the gateway's index may lag until {trusted_from}",
    )

    clock.advance(SEARCH_LAG - timedelta(minutes=1))  # 61 minutes after the call
    await collect()
    assert await state(engine, invoice_id) == ("VOID", True)
    assert [a[:2] for a in await attempts(engine, invoice_id)] == [
        ("COLLECTOR", "UNKNOWN"),
        ("LOOKUP", "UNKNOWN"),
        ("LOOKUP", "DECLINED"),
    ]
    # Looked up, never charged again.
    assert [(r.method, r.path) for r in stub.requests] == [
        ("POST", "/v1/payment_intents"),
        ("GET", "/v1/payment_intents/search"),
        ("GET", "/v1/payment_intents/search"),
    ]


async def test_a_charge_whose_id_came_back_is_read_by_that_id_and_refunded(
    engine: AsyncEngine,
    pool: pg.Pool,
    collect: Round,
    stub: StripeStub,
    clock: ManualClock,
) -> None:
    intent = {
        "id": "pi_3MtwBwLkdIwHu7ix28a3tqPa",
        "object": "payment_intent",
        "amount": 990,
        "currency": "eur",
        "status": "processing",
    }
    stub.answer(200, intent)  # the charge: uncertain, but its id is known
    invoice_id = await canceled_during_an_uncertain_charge(engine, pool, collect, clock)
    async with engine.connect() as conn:
        metadata = (
            await conn.execute(
                text(
                    "SELECT idempotency_key, subscription_id FROM payment_attempt a"
                    " JOIN invoice i ON i.id = a.invoice_id WHERE a.invoice_id = :i"
                ),
                {"i": invoice_id},
            )
        ).one()
    stub.answers.clear()
    stub.answer(
        200,
        {
            **intent,
            "status": "succeeded",
            "metadata": {
                "invoice_id": str(invoice_id),
                "attempt": "0",
                "subscription_id": str(metadata[1]),
                "customer_id": "77",
                "idempotency_key": metadata[0],
            },
        },
    )

    clock.advance(timedelta(minutes=2))  # well within the search's lag: no search at all
    await collect()
    assert await state(engine, invoice_id) == ("VOID", True)
    assert [(r.method, r.path) for r in stub.requests] == [
        ("POST", "/v1/payment_intents"),
        ("GET", "/v1/payment_intents/pi_3MtwBwLkdIwHu7ix28a3tqPa"),
    ]
    async with engine.connect() as conn:
        refund = (
            await conn.execute(
                text("SELECT reason, amount FROM refund WHERE invoice_id = :i"), {"i": invoice_id}
            )
        ).one()
    assert tuple(refund) == ("canceled_in_flight", 990)
