"""Document numbers: every invoice gets one number from a gap-free series per year, exactly once,
with renewers (and their numbering passes) running at once; credit notes have their own series."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg as db
from billing_core.invariants.numbers import check_numbers
from billing_core.seeding import SeedSpec, seed_subscriptions
from billing_core.usecases.numbering import number_documents
from services.renewer.loop import Renewer
from tests.integration.renewer.support import create_subscription, run_batch
from tests.support.factories import due_subscriptions_with_invoices


async def numbers(pool: db.Pool) -> list[str]:
    return [r["number"] for r in await pool.fetch("SELECT number FROM invoice ORDER BY number")]


async def series(pool: db.Pool) -> dict[str, int]:
    rows = await pool.fetch("SELECT series, last_number FROM document_series")
    return {r["series"]: int(r["last_number"]) for r in rows}


def expected(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{n:06d}" for n in range(1, count + 1)]


async def test_two_renewers_at_once_number_every_invoice_once_without_gap(
    lazy_pool: db.LazyPool,
    engine: AsyncEngine,
    pool: db.Pool,
    pg: asyncpg.Connection,
    clock: ManualClock,
) -> None:
    await seed_subscriptions(
        pg,
        SeedSpec(
            count=1500, due_from=clock.now() - timedelta(hours=2), due_window=timedelta(hours=1)
        ),
    )
    renewers = [Renewer(lazy_pool, clock, batch_size=100, concurrency=2) for _ in range(2)]

    async def run(renewer: Renewer) -> None:
        while await renewer.tick():
            pass

    await asyncio.gather(*(run(r) for r in renewers))
    for r in renewers:  # a last pass each: the other's final batches may have been in flight
        await r.tick()

    count = int(await pool.fetchval("SELECT count(*) FROM invoice"))
    assert count >= 1500
    assert await numbers(pool) == expected("2025", count)  # 1..count: no gap, no repeat
    assert await series(pool) == {"INV-2025": count}
    assert all(r.numbered.invoices > 0 for r in renewers)  # both took part
    assert sum(r.numbered.invoices for r in renewers) == count
    async with pool.acquire() as conn:
        report = await check_numbers(conn)
    assert report.ok and report.checked == count and not report.notes


async def test_the_checker_reports_a_gap_and_a_number_of_another_series(
    engine: AsyncEngine, pool: db.Pool, clock: ManualClock
) -> None:
    for day in (15, 16, 17):
        await create_subscription(engine, anchor=datetime(2025, 1, day, tzinfo=UTC))
    clock.set(datetime(2025, 2, 18, tzinfo=UTC))
    await run_batch(engine, clock.now())
    async with db.transaction(pool) as conn:
        await number_documents(conn, limit=10)
        await conn.execute("UPDATE invoice SET number = NULL WHERE number = '2025-000002'")
        await conn.execute("UPDATE invoice SET number = '2024-000009' WHERE number = '2025-000003'")
        report = await check_numbers(conn)
    assert report.kinds() == {"number_gap": 1, "misnumbered": 1}
    assert report.ids("number_gap") == ["INV-2025"]
    assert "2 numbers missing ['2025-000002', '2025-000003']" in str(report.violations[-1])
    assert report.notes == ["1 documents not numbered yet"]


async def test_concurrent_numbering_passes_share_one_gap_free_series(
    engine: AsyncEngine, pool: db.Pool, clock: ManualClock
) -> None:
    async with db.transaction(pool) as conn:
        await due_subscriptions_with_invoices(conn, 700, now=clock.now())
    given: list[int] = []

    async def numberer() -> None:
        while True:
            async with db.transaction(pool) as conn:
                result = await number_documents(conn, limit=23)
            if result.invoices == 0:
                return
            given.append(result.invoices)
            await asyncio.sleep(0)

    await asyncio.gather(*(numberer() for _ in range(6)))

    assert sum(given) == 700
    year = datetime.now(UTC).year  # the factory's invoices are created at the database's now()
    assert await numbers(pool) == expected(str(year), 700)


async def test_a_rolled_back_pass_gives_its_numbers_back(
    engine: AsyncEngine, pool: db.Pool, clock: ManualClock
) -> None:
    await create_subscription(engine, anchor=datetime(2025, 1, 15, tzinfo=UTC))
    clock.set(datetime(2025, 2, 15, 1, tzinfo=UTC))
    await run_batch(engine, clock.now())

    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        assert (await number_documents(conn, limit=10)).invoices == 1
        await tx.rollback()
    assert await numbers(pool) == [None]
    async with db.transaction(pool) as conn:
        await number_documents(conn, limit=10)
    assert await numbers(pool) == ["2025-000001"]
    async with db.transaction(pool) as conn:  # numbered once: a later pass leaves it alone
        assert (await number_documents(conn, limit=10)).invoices == 0
    assert await numbers(pool) == ["2025-000001"]


async def test_each_year_has_its_own_series(
    engine: AsyncEngine, pool: db.Pool, clock: ManualClock
) -> None:
    for day in (15, 16, 17):
        await create_subscription(engine, anchor=datetime(2024, 12, day, tzinfo=UTC))
    clock.set(datetime(2025, 1, 18, tzinfo=UTC))
    await run_batch(engine, clock.now(), batch_size=1)  # one invoice, dated back to 2024...
    await pool.execute("UPDATE invoice SET created_at = '2024-12-31T23:00:00Z'")
    await run_batch(engine, clock.now())  # ...and two more, also in 2025
    async with db.transaction(pool) as conn:
        await number_documents(conn, limit=10)

    assert await numbers(pool) == ["2024-000001", "2025-000001", "2025-000002"]
    assert await series(pool) == {"INV-2024": 1, "INV-2025": 2}


async def test_credit_notes_are_numbered_in_their_own_series_once_the_refund_succeeded(
    engine: AsyncEngine, pool: db.Pool, clock: ManualClock
) -> None:
    sub = await create_subscription(engine, anchor=datetime(2025, 1, 15, tzinfo=UTC))
    clock.set(datetime(2025, 2, 15, 1, tzinfo=UTC))
    await run_batch(engine, clock.now())
    async with db.transaction(pool) as conn:
        for n, status in enumerate(("SUCCEEDED", "REQUESTED", "SUCCEEDED")):
            await conn.execute(
                "WITH a AS (INSERT INTO payment_attempt (invoice_id, attempt_number, "
                "idempotency_key, source, outcome, amount, currency) SELECT id, $1, $2, "
                "'WEBHOOK', 'SUCCESS', amount, currency FROM invoice "
                "RETURNING id, invoice_id, amount, currency) "
                "INSERT INTO refund (invoice_id, subscription_id, payment_attempt_id, "
                "charge_key, idempotency_key, amount, currency, reason, status, "
                "requested_at, completed_at) "
                "SELECT a.invoice_id, $3, a.id, $2, 'ref-' || a.id, a.amount, a.currency, "
                "'duplicate_charge', $4, $5, $6 FROM a",
                n,
                f"charge-{n}",
                sub,
                status,
                clock.now(),
                clock.now() if status == "SUCCEEDED" else None,
            )
        result = await number_documents(conn, limit=10)
        notes = await conn.fetch("SELECT status, credit_note_number FROM refund ORDER BY id")
        found = [tuple(r) for r in notes]

    assert (result.invoices, result.credit_notes) == (1, 2)
    assert found == [
        ("SUCCEEDED", "CN-2025-000001"),
        ("REQUESTED", None),
        ("SUCCEEDED", "CN-2025-000002"),
    ]
    assert await numbers(pool) == ["2025-000001"]  # the invoices' series is apart
    assert await series(pool) == {"INV-2025": 1, "CN-2025": 2}
