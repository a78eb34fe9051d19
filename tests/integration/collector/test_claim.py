"""Claiming and leasing due invoices on real PostgreSQL."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.repo.collection import claim_due_invoices, due_backlog
from tests.support.factories import create_invoice, create_subscription

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
LEASE = timedelta(seconds=120)


async def invoices(engine: AsyncEngine, *specs: tuple[str, timedelta, int]) -> list[int]:
    """One subscription per invoice: (status, next_attempt_at - NOW, attempt_count)."""
    ids = []
    async with engine.begin() as conn:
        for i, (status, offset, attempts) in enumerate(specs):
            sub = await create_subscription(conn, customer_id=100 + i, start=NOW)
            ids.append(
                await create_invoice(
                    conn,
                    subscription_id=sub,
                    customer_id=100 + i,
                    amount=500 + i,
                    next_attempt_at=NOW + offset,
                    period_start=NOW,
                    status=status,
                    attempt_count=attempts,
                )
            )
    return ids


async def test_claims_only_due_open_invoices_oldest_first_and_leases_them(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    newer, older, future, paid = await invoices(
        engine,
        ("OPEN", timedelta(minutes=-1), 0),
        ("OPEN", timedelta(minutes=-5), 2),
        ("OPEN", timedelta(minutes=1), 0),
        ("PAID", timedelta(minutes=-9), 0),
    )
    async with pg.transaction(pool) as conn:
        first = await claim_due_invoices(conn, now=NOW, limit=1, lease=LEASE)
        rest = await claim_due_invoices(conn, now=NOW, limit=10, lease=LEASE)
    assert [i.id for i in first] == [older]
    assert (first[0].attempt_count, first[0].amount, first[0].customer_id) == (2, 501, 101)
    assert first[0].idempotency_key == f"inv-{older}-try-2"
    assert [i.id for i in rest] == [newer]
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT id, next_attempt_at, leased_at FROM invoice WHERE id IN (:a, :b)"),
                {"a": older, "b": newer},
            )
        ).all()
    assert {(r[1], r[2]) for r in rows} == {(NOW + LEASE, NOW)}
    assert future not in [i.id for i in rest] and paid not in [i.id for i in rest]


async def test_concurrent_claims_are_disjoint(engine: AsyncEngine, pool: pg.Pool) -> None:
    ids = await invoices(engine, *[("OPEN", timedelta(seconds=-i), 0) for i in range(10)])
    async with pool.acquire() as a, pool.acquire() as b:
        tx_a = a.transaction()
        await tx_a.start()
        got_a = await claim_due_invoices(a, now=NOW, limit=6, lease=LEASE)
        tx_b = b.transaction()
        await tx_b.start()  # while A still holds its row locks
        got_b = await claim_due_invoices(b, now=NOW, limit=6, lease=LEASE)
        await tx_a.commit()
        await tx_b.commit()
    assert len(got_a) == 6 and len(got_b) == 4
    assert sorted(i.id for i in got_a + got_b) == sorted(ids)


async def test_a_lease_hides_the_invoice_until_it_ends_then_the_same_key_comes_back(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    (inv,) = await invoices(engine, ("OPEN", timedelta(0), 1))
    async with pg.transaction(pool) as conn:
        (leased,) = await claim_due_invoices(conn, now=NOW, limit=5, lease=LEASE)
        assert await due_backlog(conn, now=NOW) == (0, None)
    async with pg.transaction(pool) as conn:
        assert await claim_due_invoices(conn, now=NOW + LEASE / 2, limit=5, lease=LEASE) == []
    later = NOW + LEASE
    async with pg.transaction(pool) as conn:
        assert await due_backlog(conn, now=later) == (1, later)
        (again,) = await claim_due_invoices(conn, now=later, limit=5, lease=LEASE)
    assert again.id == inv and again.idempotency_key == leased.idempotency_key == f"inv-{inv}-try-1"


async def db_now(engine: AsyncEngine) -> datetime:
    async with engine.connect() as conn:
        now: datetime = (await conn.execute(text("SELECT statement_timestamp()"))).scalar_one()
    return now


async def test_without_an_instant_the_claim_uses_the_databases_clock(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    """Due, leased and lease end by the database's clock: what the claiming process believes
    the time is plays no part (the collector passes no instant)."""
    start = await db_now(engine)
    due, ahead = await invoices(
        engine, ("OPEN", start - NOW - timedelta(seconds=1), 0), ("OPEN", start - NOW + LEASE, 0)
    )
    async with pg.transaction(pool) as conn:
        (leased,) = await claim_due_invoices(conn, limit=5, lease=LEASE)
    end = await db_now(engine)
    assert leased.id == due and ahead != due
    assert start + LEASE <= leased.lease_until <= end + LEASE
    async with engine.connect() as conn:
        stored = (
            await conn.execute(
                text("SELECT next_attempt_at, leased_at FROM invoice WHERE id = :i"), {"i": due}
            )
        ).one()
    assert (stored[0], stored[1]) == (leased.lease_until, leased.lease_until - LEASE)
    async with pg.transaction(pool) as conn:  # the lease, on the database's clock, still runs
        assert await claim_due_invoices(conn, limit=5, lease=LEASE) == []
        assert (await due_backlog(conn))[0] == 0
    async with pg.transaction(pool) as conn:  # the shared offset moves the database's clock
        got = await claim_due_invoices(conn, limit=5, lease=LEASE, clock_offset=LEASE * 2)
    assert sorted(i.id for i in got) == sorted([due, ahead])


async def test_the_local_deadline_never_comes_after_the_lease_ends(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    """The collector decides "still time to call" on its monotonic clock: that deadline is
    measured from before the claim reached the database, so it errs early."""
    start = await db_now(engine)
    await invoices(engine, ("OPEN", start - NOW - timedelta(seconds=1), 0))
    before = time.monotonic()
    async with pg.transaction(pool) as conn:
        (leased,) = await claim_due_invoices(conn, limit=5, lease=LEASE)
    after = time.monotonic()
    assert before + LEASE.total_seconds() <= leased.lease_deadline <= after + LEASE.total_seconds()


async def test_the_claim_says_when_the_key_was_answered_uncertainly_before(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    """Only an UNKNOWN for the very key to be used (this attempt, this prefix) asks for a
    look-up: not one for an older attempt, not a decline."""
    fresh, uncertain, older, other_prefix = await invoices(
        engine, *[("OPEN", timedelta(seconds=-1), 1) for _ in range(4)]
    )
    rows = [
        (uncertain, 1, f"prod-inv-{uncertain}-try-1", "UNKNOWN"),
        (older, 0, f"prod-inv-{older}-try-0", "UNKNOWN"),
        (older, 0, f"prod-inv-{older}-try-0", "DECLINED"),
        (other_prefix, 1, f"inv-{other_prefix}-try-1", "UNKNOWN"),
    ]
    async with engine.begin() as conn:
        for invoice_id, attempt, key, outcome in rows:
            await conn.execute(
                text(
                    "INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key,"
                    " source, outcome, amount, currency) VALUES (:i, :n, :k, 'COLLECTOR', :o,"
                    " 500, 'EUR')"
                ),
                {"i": invoice_id, "n": attempt, "k": key, "o": outcome},
            )
    async with pg.transaction(pool) as conn:
        leased = await claim_due_invoices(conn, now=NOW, limit=5, lease=LEASE, key_prefix="prod-")
    flags = {i.id: i.uncertain_before for i in leased}
    assert flags == {fresh: False, uncertain: True, older: False, other_prefix: False}
