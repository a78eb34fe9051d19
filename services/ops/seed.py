"""``billing seed``: N realistic subscriptions coming due, each of its own customer (created
first, set-based, with an e-mail address when a domain is given), with their paid history.

``not_due`` more subscriptions (UTC, monthly, built inside PostgreSQL) come due over the four
weeks after the day that follows the due window: a table at scale around the due ones. A
:class:`~billing_core.seeding.SeedMix` makes shares of all of them taxed, trialing, paused,
plan-changing or discounted.

The history (:func:`billing_core.seeding.seed_history`) is every period up to the current one
invoiced and paid, each payment recorded as imported (``payment_attempt.source = 'IMPORT'``):
it was made before this system, so ``billing check`` expects no gateway charge and no event for
it, and a seeded database checks clean without ``--since``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import asyncpg  # type: ignore[import-untyped]
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from billing_core.db.pg import Connection, Statement, asyncpg_dsn, execute, fetchval
from billing_core.seeding import (
    SeedMix,
    SeedSpec,
    seed_filler_sql,
    seed_history,
    seed_mix,
    seed_subscriptions,
)

# The tables the seeding writes. Each is analyzed when it holds rows, so the planner knows their
# size at once; an empty table is left unanalyzed: statistics saying "empty" would plan the
# first burst of outbox events, webhooks or attempts as if it were a handful of rows.
_SEEDED_TABLES = (
    "customer",
    "subscription",
    "invoice",
    "invoice_line",
    "payment_attempt",
    "credit_entry",
    "coupon",
    "subscription_discount",
    "subscription_tax_location",
    "tax_rate",
)
_HAS_ROWS = {t: Statement(f"SELECT EXISTS (SELECT FROM {t})") for t in _SEEDED_TABLES}
_ANALYZE = {t: Statement(f"ANALYZE {t}") for t in _SEEDED_TABLES}


async def analyze_seeded(conn: Connection) -> None:
    for table in _SEEDED_TABLES:
        if await fetchval(conn, _HAS_ROWS[table]):
            await execute(conn, _ANALYZE[table])


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
    email_domain: str | None = None,
    show_progress: bool = True,
    not_due: int = 0,
    mix: SeedMix | None = None,
) -> int:
    """Seed and analyze; returns how many subscriptions were inserted."""
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
            email_domain=email_domain,
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
        not_due_inserted = await seed_filler_sql(
            conn,
            count=not_due,
            due_from=due_from + due_window + timedelta(days=1),
            due_window=timedelta(days=27),
            first_customer_id=first_customer_id + count,
            max_past_periods=0,
        )
        if mix is not None:
            await seed_mix(conn, mix, first_customer_id=first_customer_id)
        # Their paid periods (imported payments: no gateway charge, no event) and their credit.
        async with conn.transaction():
            await seed_history(conn, first_customer_id=first_customer_id)
        await analyze_seeded(conn)
        return int(report.inserted) + not_due_inserted
    finally:
        await conn.close()
