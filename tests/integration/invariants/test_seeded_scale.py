"""The seeding of the whole-system run at scale (``bench.first_of_month --total-subscriptions
--mix``), at a small size: due and not-due subscriptions as asked, the mix present, and a
world that checks clean."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from billing_core.invariants.topic import read_topic
from billing_core.seeding import SEED_COUPON, SeedMix
from billing_core.settings import CoreSettings
from services.ops.seed import seed
from tests.integration.invariants.world import World
from tests.support.infra import Services

DUE = 500
TOTAL = 2000

_COUNTS = text(
    """
    SELECT count(*) AS total,
           count(*) FILTER (WHERE current_period_end < :due_until) AS due,
           count(*) FILTER (WHERE current_period_end >= :not_due_from) AS not_due,
           count(DISTINCT plan_id) AS plans,
           count(*) FILTER (WHERE status = 'TRIALING') AS trials,
           count(*) FILTER (WHERE pause_behavior IS NOT NULL) AS pauses,
           count(*) FILTER (WHERE scheduled_plan_id IS NOT NULL) AS scheduled_changes,
           max(period_index) AS oldest_period,
           (SELECT count(*) FROM subscription_tax_location) AS taxed,
           (SELECT count(*) FROM subscription_discount) AS discounted,
           (SELECT times_redeemed FROM coupon WHERE code = :coupon) AS redeemed,
           (SELECT count(*) FROM invoice i JOIN subscription t ON t.id = i.subscription_id
            WHERE t.status = 'TRIALING') AS trial_invoices,
           (SELECT count(*) FROM invoice) AS invoices
    FROM subscription
    """
)


async def _seed(database_url: str, now: datetime, *, due: int, total: int) -> int:
    return await seed(
        database_url,
        count=due,
        not_due=total - due,
        due_from=now + timedelta(hours=1),
        due_window=timedelta(seconds=1),
        first_customer_id=1_000_000,
        random_seed=1,
        credit_share=0.0,
        cancel_share=0.0,
        show_progress=False,
        mix=SeedMix(),
    )


async def test_seeding_due_and_not_due_with_the_mix_checks_clean(
    engine: AsyncEngine, pool: pg.Pool, database_url: str, services: Services, kafka_topic: str
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    due_at = now + timedelta(hours=1)
    assert await _seed(database_url, now, due=DUE, total=TOTAL) == TOTAL
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                _COUNTS,
                {
                    "due_until": due_at + timedelta(seconds=1),
                    "not_due_from": due_at + timedelta(days=1),
                    "coupon": SEED_COUPON,
                },
            )
        ).one()
    assert (row.total, row.due, row.not_due) == (TOTAL, DUE, TOTAL - DUE)
    assert row.plans > 1
    assert min(row.trials, row.pauses, row.scheduled_changes, row.taxed, row.discounted) > 0
    assert row.redeemed == row.discounted
    assert row.oldest_period == 0  # each one's history is its current period: set-based
    assert row.trial_invoices == 0  # a trial's first period is invoiced when it ends
    assert row.invoices == TOTAL - row.trials

    await World(now=now).publish(services.kafka_bootstrap, kafka_topic, [])
    report = await check_all(
        pool,
        now=now,
        ledger=LedgerEvidence({}),
        topic=await read_topic(services.kafka_bootstrap, kafka_topic),
    )
    assert report.ok, [str(v) for c in report.checks for v in c.violations]


async def test_the_checker_is_not_bound_by_the_pools_statement_timeout(
    pool: pg.Pool, database_url: str, settings: CoreSettings
) -> None:
    """Its statements read whole tables (minutes at 5 M subscriptions); the processes' pools
    time out statements far sooner."""
    now = datetime.now(UTC).replace(microsecond=0)
    await _seed(database_url, now, due=100, total=400)
    hasty = await pg.create_pool(
        settings.model_copy(update={"db_statement_timeout_ms": 1}), max_size=1
    )
    try:
        report = await check_all(hasty, now=now, ledger=None, topic=None)
    finally:
        await hasty.close()
    assert report.ok, [str(v) for c in report.checks for v in c.violations]


async def test_the_seeding_analyzes_what_it_filled_and_leaves_empty_tables_unanalyzed(
    engine: AsyncEngine, database_url: str
) -> None:
    """Statistics saying "empty" would plan the first burst of events as a handful of rows (a
    relay claim of 20 000 events then ran for tens of seconds): a table the seeding left empty
    stays never analyzed (``reltuples`` -1), one it filled is analyzed at its size."""
    now = datetime.now(UTC).replace(microsecond=0)
    await _seed(database_url, now, due=50, total=200)
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT relname, reltuples FROM pg_class WHERE relname IN "
                "('subscription', 'outbox_event', 'webhook_event') AND relkind = 'r'"
            )
        )
        tuples = {r.relname: r.reltuples for r in rows}
    assert tuples == {"subscription": 200, "outbox_event": -1, "webhook_event": -1}
