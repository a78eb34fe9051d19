"""Invoice lines, taxes, discounts and numbers on the lifecycle paths: a paused period's VOID or
DRAFT renewal (priced like any renewal, no credit taken, numbered), a plan change scheduled for
the period end (the new period's lines at the new plan, discounted and taxed), an
``always_invoice`` downgrade's credit (a CREDIT_APPLIED line on the invoice it pays) and the
invoice PDF (its number, lines and tax line); the checker stays clean."""

from __future__ import annotations

import io
import uuid
from datetime import timedelta
from typing import Any

import httpx
from pypdf import PdfReader
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.domain.money import format_minor
from tests.integration.api.helpers import rows, subscribe
from tests.integration.lifecycle.helpers import assert_clean, renew_until


def key(**headers: str) -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4()), **headers}


async def add_rates(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO tax_rate (country, region, rate_ppm, inclusive, name) VALUES "
                "('FR', '', 200000, true, 'VAT'), ('US', 'NY', 88750, false, 'Sales tax') "
                "ON CONFLICT DO NOTHING"
            )
        )


async def ten_percent_off(client: httpx.AsyncClient, sub: dict[str, Any]) -> None:
    code = f"TEN-{uuid.uuid4().hex[:8]}"
    created = await client.post(
        "/coupons", json={"code": code, "percentOff": 10, "duration": "FOREVER"}, headers=key()
    )
    assert created.status_code == 201, created.text
    redeemed = await client.post(
        f"/subscriptions/{sub['id']}/coupon", json={"couponCode": code}, headers=key()
    )
    assert redeemed.status_code == 200, redeemed.text
    assert redeemed.json()["fromPeriod"] == 1


async def locate(client: httpx.AsyncClient, sub: dict[str, Any], **where: str) -> None:
    put = await client.put(f"/subscriptions/{sub['id']}/tax-location", json=where)
    assert put.status_code == 200, put.text


async def invoices(engine: AsyncEngine, subscription_id: int) -> list[dict[str, Any]]:
    found = await rows(
        engine,
        "SELECT id, period_index, kind, status, number, subtotal, credit_applied, amount "
        "FROM invoice WHERE subscription_id = :s ORDER BY id",
        s=subscription_id,
    )
    for invoice in found:
        invoice["lines"] = [
            (r["kind"], r["description"], r["amount"], r["tax_inclusive"])
            for r in await rows(
                engine,
                "SELECT kind, description, amount, tax_inclusive FROM invoice_line "
                "WHERE invoice_id = :i ORDER BY line_no",
                i=invoice["id"],
            )
        ]
    return found


async def test_paused_periods_have_their_lines_and_numbers_and_take_no_credit(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    await add_rates(engine)
    start = clock.now()
    sub = await subscribe(client, plan="PRO_MONTHLY")
    clock.set(start + timedelta(days=10))
    downgrade = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "BASIC_MONTHLY"}, headers=key()
    )
    assert downgrade.status_code == 200, downgrade.text
    credit = downgrade.json()["creditGranted"]
    assert credit > 0
    await ten_percent_off(client, sub)
    await locate(client, sub, country="US", region="NY")
    paused = await client.post(
        f"/subscriptions/{sub['id']}/pause", json={"behavior": "keep_as_draft"}, headers=key()
    )
    assert paused.status_code == 200, paused.text

    await renew_until(engine, clock, start + timedelta(days=32))
    first, draft = await invoices(engine, sub["id"])
    # 990 - 99 = 891, taxed 8.875 % on top: 79 (79.08); a draft takes no credit.
    assert (draft["period_index"], draft["status"]) == (1, "DRAFT")
    assert [line[:3] for line in draft["lines"]] == [
        ("PLAN_PERIOD", "Plan BASIC_MONTHLY", 990),
        ("DISCOUNT", draft["lines"][1][1], -99),
        ("TAX", "Sales tax 8.875% (US-NY)", 79),
    ]
    assert (draft["subtotal"], draft["credit_applied"], draft["amount"]) == (970, 0, 970)
    # Every invoice is numbered, a draft too: in creation order, no gap.
    year = first["number"].split("-")[0]
    assert [first["number"], draft["number"]] == [f"{year}-000001", f"{year}-000002"]
    await assert_clean(pool, clock)

    resumed = await client.post(f"/subscriptions/{sub['id']}/resume", json={}, headers=key())
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["creditBalance"] == credit
    await renew_until(engine, clock, start + timedelta(days=62))
    *_, renewal = await invoices(engine, sub["id"])
    assert (renewal["period_index"], renewal["status"]) == (2, "PAID")  # credit covers 970
    assert renewal["lines"][-1][:3] == ("CREDIT_APPLIED", "Credit applied", -970)
    assert (renewal["credit_applied"], renewal["amount"]) == (970, 0)
    assert renewal["number"] == f"{year}-000003"
    await assert_clean(pool, clock)


async def test_a_void_paused_period_is_priced_numbered_and_voided(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    await add_rates(engine)
    start = clock.now()
    sub = await subscribe(client)
    await locate(client, sub, country="FR")
    paused = await client.post(
        f"/subscriptions/{sub['id']}/pause", json={"behavior": "void"}, headers=key()
    )
    assert paused.status_code == 200, paused.text
    await renew_until(engine, clock, start + timedelta(days=32))
    _first, void = await invoices(engine, sub["id"])
    # EU VAT is inside the price: 990 = 825 net + 165 VAT.
    assert (void["status"], void["amount"], void["credit_applied"]) == ("VOID", 990, 0)
    assert [(k, a, inc) for k, _, a, inc in void["lines"]] == [
        ("PLAN_PERIOD", 825, None),
        ("TAX", 165, True),
    ]
    assert void["number"] is not None
    await assert_clean(pool, clock)


async def test_a_scheduled_change_invoices_the_new_period_at_the_new_plan_with_its_lines(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    await add_rates(engine)
    start = clock.now()
    sub = await subscribe(client, plan="PRO_MONTHLY")
    await ten_percent_off(client, sub)
    await locate(client, sub, country="US", region="NY")
    clock.set(start + timedelta(days=5))
    scheduled = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": "BASIC_MONTHLY", "effective": "period_end"},
        headers=key(),
    )
    assert scheduled.status_code == 200, scheduled.text
    assert scheduled.json()["scheduled"] is True
    upcoming = (await client.get(f"/subscriptions/{sub['id']}/upcoming-invoice")).json()

    await renew_until(engine, clock, start + timedelta(days=32))
    _first, renewal = await invoices(engine, sub["id"])
    expected = [
        ("PLAN_PERIOD", "Plan BASIC_MONTHLY", 990),
        ("DISCOUNT", renewal["lines"][1][1], -99),
        ("TAX", "Sales tax 8.875% (US-NY)", 79),
    ]
    assert [line[:3] for line in renewal["lines"]] == expected
    assert (renewal["subtotal"], renewal["amount"]) == (970, 970)
    # The preview said so before the boundary.
    assert [(x["kind"], x["amount"]) for x in upcoming["lines"]] == [(k, a) for k, _, a in expected]
    assert upcoming["amount"] == 970
    await assert_clean(pool, clock)


async def test_always_invoice_credit_is_a_credit_line_on_the_invoice_it_pays(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="PRO_MONTHLY")
    clock.set(clock.now() + timedelta(days=10))
    response = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": "BASIC_MONTHLY", "prorationBehavior": "always_invoice"},
        headers=key(),
    )
    assert response.status_code == 200, response.text
    credit = response.json()["creditGranted"]
    (paid,) = await invoices(engine, sub["id"])
    assert paid["lines"] == [
        ("PLAN_PERIOD", "Plan PRO_MONTHLY", 2990, None),
        ("CREDIT_APPLIED", "Credit applied", -credit, None),
    ]
    assert (paid["credit_applied"], paid["amount"]) == (credit, 2990 - credit)
    await assert_clean(pool, clock)


async def test_the_pdf_shows_the_number_the_lines_and_the_tax(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    await add_rates(engine)
    start = clock.now()
    sub = await subscribe(client)
    await locate(client, sub, country="US", region="NY")
    await renew_until(engine, clock, start + timedelta(days=32))
    *_, renewal = await invoices(engine, sub["id"])
    assert renewal["number"] is not None

    response = await client.get(f"/invoices/{renewal['id']}/pdf")
    assert response.status_code == 200, response.text
    pdf = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(response.content)).pages)
    for expected in (
        f"Invoice {renewal['number']}",
        "Plan BASIC_MONTHLY",
        format_minor(990, "EUR"),
        "Sales tax 8.875% (US-NY)",
        format_minor(88, "EUR"),  # 8.875 % of 990 = 87.86
        f"Total {format_minor(renewal['amount'], 'EUR')}",
    ):
        assert expected in pdf, (expected, pdf)
    assert renewal["amount"] == 1078


async def test_a_redemption_bumps_the_version_and_discounts_from_the_next_period(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    start = clock.now()
    sub = await subscribe(client)
    await ten_percent_off(client, sub)
    after = (await client.get(f"/subscriptions/{sub['id']}")).json()
    assert after["version"] == sub["version"] + 1
    await renew_until(engine, clock, start + timedelta(days=32))
    first, renewal = await invoices(engine, sub["id"])
    assert [line[0] for line in first["lines"]] == ["PLAN_PERIOD"]
    assert [(k, a) for k, _, a, _ in renewal["lines"]] == [("PLAN_PERIOD", 990), ("DISCOUNT", -99)]
    await assert_clean(pool, clock)
