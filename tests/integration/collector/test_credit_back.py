"""The one credit-back rule (``usecases.voiding.give_back_credit``), for a cancel's voids and
for a requested void that a payment result decides: each voided invoice's consumed credit back
to its subscription's balance with one VOID_REFUND ledger line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.usecases.voiding import give_back_credit
from tests.support.factories import create_invoice, create_subscription

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


async def test_consumed_credit_goes_back_once_per_voided_invoice(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    async with engine.begin() as conn:
        a = await create_subscription(conn, customer_id=1, start=NOW, credit_balance=50)
        b = await create_subscription(conn, customer_id=2, start=NOW)
        invoices = [
            await create_invoice(
                conn, subscription_id=s, customer_id=c, amount=900, next_attempt_at=NOW,
                period_start=NOW + timedelta(days=30 * i), period_index=i,
            )
            for s, c, i in ((a, 1, 0), (a, 1, 1), (a, 1, 2), (b, 2, 0))
        ]  # fmt: skip
    voided = [
        (a, invoices[0], 300),
        (a, invoices[1], 0),
        (a, invoices[2], 200),
        (b, invoices[3], 150),
    ]
    async with pg.transaction(pool) as conn:
        await give_back_credit(conn, voided, now=NOW)

    async with engine.connect() as conn:
        balances = dict(
            (await conn.execute(text("SELECT id, credit_balance FROM subscription"))).all()
        )
        ledger = (
            await conn.execute(
                text(
                    "SELECT subscription_id, invoice_id, amount, reason, created_at"
                    " FROM credit_entry ORDER BY id"
                )
            )
        ).all()
    assert balances == {a: 550, b: 150}
    assert [tuple(r) for r in ledger] == [
        (a, invoices[0], 300, "VOID_REFUND", NOW),
        (a, invoices[2], 200, "VOID_REFUND", NOW),
        (b, invoices[3], 150, "VOID_REFUND", NOW),
    ]
