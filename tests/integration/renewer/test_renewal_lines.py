"""The renewer writes every renewal invoice's line items in the batch, and an invoice whose lines
do not add up is refused in the transaction that writes them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.domain.invoice_lines import InvoiceTotalMismatch, LineKind, single
from billing_core.invariants.lines import check_lines
from billing_core.repo.invoice_lines import insert_lines, lines_of
from tests.integration.renewer.support import create_subscription, invoices, run_batch

JAN_15 = datetime(2025, 1, 15, 9, 30, tzinfo=UTC)


async def test_catch_up_renewals_each_get_a_period_line_and_the_credit_line(
    engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15, credit_balance=1000)
    clock.set(datetime(2025, 4, 16, tzinfo=UTC))  # periods 1, 2 and 3 are due

    result = await run_batch(engine, clock.now())

    assert result.invoices_created == 3
    found = await invoices(engine, sub_id)
    async with pool.acquire() as conn:
        lines = await lines_of(conn, [i["id"] for i in found])
        report = await check_lines(conn)
    first, second, third = found
    assert [(line.kind, line.amount) for line in lines[first["id"]]] == [
        (LineKind.PLAN_PERIOD, 2990),
        (LineKind.CREDIT_APPLIED, -1000),
    ]
    assert (first["subtotal"], first["credit_applied"], first["amount"]) == (2990, 1000, 1990)
    for inv in (second, third):
        [line] = lines[inv["id"]]
        assert (line.kind, line.amount, line.description) == (
            LineKind.PLAN_PERIOD,
            2990,
            "Plan PRO_MONTHLY",
        )
        assert (line.period_start, line.period_end) == (inv["period_start"], inv["period_end"])
    assert report.ok, report.violations
    assert report.checked == 3


async def test_an_invoice_paid_by_credit_is_still_the_sum_of_its_lines(
    engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15, credit_balance=5000)
    clock.set(datetime(2025, 2, 15, 10, tzinfo=UTC))
    await run_batch(engine, clock.now())
    [inv] = await invoices(engine, sub_id)
    async with pool.acquire() as conn:
        lines = (await lines_of(conn, [inv["id"]]))[inv["id"]]
        assert (await check_lines(conn)).ok
    assert (inv["status"], inv["amount"]) == ("PAID", 0)
    assert [line.amount for line in lines] == [2990, -2990]


async def test_lines_that_do_not_add_up_are_refused_in_the_transaction(
    engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15)
    clock.set(datetime(2025, 2, 15, 10, tzinfo=UTC))
    await run_batch(engine, clock.now())
    [inv] = await invoices(engine, sub_id)
    before = await pool.fetchval("SELECT count(*) FROM invoice_line")

    with pytest.raises(InvoiceTotalMismatch, match=str(inv["id"])):
        async with pg.transaction(pool) as conn:
            await conn.execute("DELETE FROM invoice_line WHERE invoice_id = $1", inv["id"])
            await insert_lines(conn, [(inv["id"], [single(LineKind.PLAN_PERIOD, "x", 2000)])])

    assert await pool.fetchval("SELECT count(*) FROM invoice_line") == before
