"""The demo's counts cover the customers it seeded only: a second demo on the same database (or
any other data) does not show the first one's figures as its own."""

from __future__ import annotations

from datetime import UTC, datetime

from billing_core.db import pg
from billing_core.domain import events as ev
from billing_core.repo import backlogs
from billing_core.repo.outbox import append_events
from tests.support.factories import create_subscription

NOW = datetime(2026, 12, 1, tzinfo=UTC)


async def test_published_events_are_counted_for_the_demos_own_customers(
    pool: pg.Pool,
) -> None:
    async with pg.transaction(pool) as conn:
        earlier = await create_subscription(conn, customer_id=5, start=NOW)
        ours = await create_subscription(conn, customer_id=1_000, start=NOW)
        events = [
            ev.subscription_created(sub, customer, "BASIC_MONTHLY", NOW, NOW, "UTC")
            for sub, customer in ((earlier, 5), (earlier, 5), (ours, 1_000))
        ]
        await append_events(conn, events, NOW)
        await conn.execute("UPDATE outbox_event SET published_at = now()")
    async with pool.acquire() as conn:
        counts = await backlogs.demo_progress(conn, first_customer_id=1_000, now=NOW)
    assert (counts["published"], counts["unpublished"]) == (1, 0)
