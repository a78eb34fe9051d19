"""Renewals of subscriptions with a tax location carry tax lines: on top of the price where
prices exclude tax, inside it where they include it; the checker's invariants hold."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.domain.invoice_lines import LineKind
from billing_core.domain.tax import TaxLocation
from billing_core.invariants.amounts import check_amounts
from billing_core.invariants.lines import check_lines
from billing_core.repo.invoice_lines import lines_of
from billing_core.repo.tax import set_location
from tests.integration.renewer.support import create_subscription, events, invoices, run_batch

JAN_15 = datetime(2025, 1, 15, 9, 30, tzinfo=UTC)


async def rates(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO tax_rate (country, region, rate_ppm, inclusive, name) VALUES "
                "('FR', '', 200000, true, 'VAT'), ('US', '', 0, false, 'Sales tax'), "
                "('US', 'NY', 88750, false, 'Sales tax')"
            )
        )


async def located(
    pool: pg.Pool, engine: AsyncEngine, location: TaxLocation | None, **kw: object
) -> int:
    sub = await create_subscription(engine, anchor=JAN_15, **kw)  # type: ignore[arg-type]
    if location is not None:
        async with pg.transaction(pool) as conn:
            await set_location(conn, sub, location, now=JAN_15)
    return sub


async def test_exclusive_and_inclusive_taxes_on_renewals(
    pool: pg.Pool, engine: AsyncEngine, clock: ManualClock
) -> None:
    await rates(engine)
    ny = await located(pool, engine, TaxLocation("US", "NY"))
    paris = await located(pool, engine, TaxLocation("FR", "75"))  # no regional rate: France's
    oregon = await located(pool, engine, TaxLocation("US", "OR"))  # 0 %: no tax line
    nowhere = await located(pool, engine, None)
    clock.set(datetime(2025, 2, 15, 10, tzinfo=UTC))

    await run_batch(engine, clock.now())

    found = {sub: (await invoices(engine, sub))[0] for sub in (ny, paris, oregon, nowhere)}
    async with pool.acquire() as conn:
        lines = await lines_of(conn, [inv["id"] for inv in found.values()])
        assert (await check_lines(conn)).ok
        assert (await check_amounts(conn)).ok  # a subtotal with tax on top is still priced right

    def shape(sub: int) -> list[tuple[LineKind, int]]:
        return [(x.kind, x.amount) for x in lines[found[sub]["id"]]]

    # PRO_MONTHLY is 2990: + 8.875 % = 265.36 -> 265 on top
    assert shape(ny) == [(LineKind.PLAN_PERIOD, 2990), (LineKind.TAX, 265)]
    assert (found[ny]["subtotal"], found[ny]["amount"]) == (3255, 3255)
    # 2990 incl. 20 %: 498.33 -> 498 inside
    assert shape(paris) == [(LineKind.PLAN_PERIOD, 2492), (LineKind.TAX, 498)]
    assert (found[paris]["subtotal"], found[paris]["amount"]) == (2990, 2990)
    assert lines[found[paris]["id"]][1].description == "VAT 20% (FR)"
    assert lines[found[paris]["id"]][1].tax_inclusive is True
    assert shape(oregon) == shape(nowhere) == [(LineKind.PLAN_PERIOD, 2990)]
    [created] = await events(engine, ny)
    assert (created["payload"]["amount"], created["payload"]["tax"]) == (3255, 265)
    [created] = await events(engine, paris)
    assert (created["payload"]["amount"], created["payload"]["tax"]) == (2990, 498)
    [created] = await events(engine, nowhere)
    assert created["payload"]["tax"] == 0


async def test_credit_is_applied_after_tax(
    pool: pg.Pool, engine: AsyncEngine, clock: ManualClock
) -> None:
    await rates(engine)
    sub = await located(pool, engine, TaxLocation("US", "NY"), credit_balance=5000)
    clock.set(datetime(2025, 3, 15, 10, tzinfo=UTC))  # periods 1 and 2 due

    await run_batch(engine, clock.now())

    first, second = await invoices(engine, sub)
    assert (first["subtotal"], first["credit_applied"], first["amount"]) == (3255, 3255, 0)
    assert first["status"] == "PAID"
    assert (second["subtotal"], second["credit_applied"], second["amount"]) == (3255, 1745, 1510)
    async with pool.acquire() as conn:
        lines = await lines_of(conn, [second["id"]])
        balance = await conn.fetchval("SELECT credit_balance FROM subscription WHERE id = $1", sub)
        assert (await check_lines(conn)).ok
    assert [(x.kind, x.amount) for x in lines[second["id"]]] == [
        (LineKind.PLAN_PERIOD, 2990),
        (LineKind.TAX, 265),
        (LineKind.CREDIT_APPLIED, -1745),
    ]
    assert balance == 0
