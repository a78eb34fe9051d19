"""``billing seed``: N realistic subscriptions coming due, with their paid history."""

from __future__ import annotations

from datetime import datetime, timedelta

import asyncpg  # type: ignore[import-untyped]
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from billing_core.seeding import SeedSpec, asyncpg_dsn, seed_subscriptions

# Period 0 of every seeded subscription was invoiced and paid, and seeded credit is in the credit
# ledger: the periods and amounts are what the system itself would have written. The payments
# themselves are history with no gateway or event evidence: check with `billing check --since`.
_HISTORY = """
INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start, period_end,
                     subtotal, amount, currency, status, paid_at, closed_at)
SELECT s.id, s.customer_id, 'RENEWAL', s.period_index, s.current_period_start,
       s.current_period_end, p.price_amount, p.price_amount, p.currency, 'PAID',
       s.current_period_start, s.current_period_start
FROM subscription s JOIN plan p ON p.id = s.plan_id
WHERE s.customer_id >= $1 AND NOT EXISTS (SELECT 1 FROM invoice i WHERE i.subscription_id = s.id)
"""

_CREDIT = """
INSERT INTO credit_entry (subscription_id, amount, reason)
SELECT s.id, s.credit_balance, 'ADJUSTMENT' FROM subscription s
WHERE s.customer_id >= $1 AND s.credit_balance > 0
  AND NOT EXISTS (SELECT 1 FROM credit_entry c WHERE c.subscription_id = s.id)
"""


async def seed(
    database_url: str,
    *,
    count: int,
    due_from: datetime,
    due_window: timedelta,
    first_customer_id: int,
    random_seed: int = 0,
    credit_share: float = 0.05,
    cancel_share: float = 0.02,
    show_progress: bool = True,
) -> int:
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        spec = SeedSpec(
            count=count,
            due_from=due_from,
            due_window=due_window,
            first_customer_id=first_customer_id,
            max_past_periods=0,
            credit_share=credit_share,
            cancel_share=cancel_share,
            random_seed=random_seed,
        )
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            disable=not show_progress,
        ) as progress:
            task = progress.add_task("seeding subscriptions", total=count)
            report = await seed_subscriptions(
                conn, spec, progress=lambda done, total: progress.update(task, completed=done)
            )
        async with conn.transaction():
            await conn.execute(_HISTORY, first_customer_id)
            await conn.execute(_CREDIT, first_customer_id)
        return int(report.inserted)
    finally:
        await conn.close()
