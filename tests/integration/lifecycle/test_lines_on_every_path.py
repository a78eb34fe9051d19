"""Every way an invoice is created writes its line items, and the checker's ``lines`` invariant
holds for all of them: subscribe, a trial ended by the renewer or on request, renewals with
catch-up, plan changes (previewed, after the period end, in a trial) — taxed or not."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from tests.integration.api.helpers import rows, scalar, subscribe
from tests.integration.lifecycle.helpers import instant, iso, renew_until


async def set_rates(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO tax_rate (country, region, rate_ppm, inclusive, name) VALUES "
                "('FR', '', 200000, true, 'VAT'), ('US', 'NY', 88750, false, 'Sales tax')"
            )
        )


async def locate(client: httpx.AsyncClient, sub: dict[str, Any], **where: str) -> None:
    response = await client.put(f"/subscriptions/{sub['id']}/tax-location", json=where)
    assert response.status_code == 200, response.text


async def lines_by_invoice(engine: AsyncEngine, subscription_id: int) -> dict[int, list[str]]:
    found = await rows(
        engine,
        "SELECT i.id, l.kind FROM invoice i LEFT JOIN invoice_line l ON l.invoice_id = i.id "
        "WHERE i.subscription_id = :s ORDER BY i.id, l.line_no",
        s=subscription_id,
    )
    out: dict[int, list[str]] = {}
    for r in found:
        out.setdefault(r["id"], []).append(r["kind"])
    return out


async def test_every_invoice_the_api_and_the_renewer_create_has_its_lines(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    await set_rates(engine)
    start = clock.now()
    plain = await subscribe(client, plan="BASIC_MONTHLY")
    ny_trial = await subscribe(client, trialEnd=iso(start + timedelta(days=3)))
    await locate(client, ny_trial, country="US", region="NY")
    fr_trial = await subscribe(client, trialEnd=iso(start + timedelta(days=30)))
    await locate(client, fr_trial, country="FR")
    upgraded = await subscribe(client, plan="BASIC_MONTHLY")
    await locate(client, upgraded, country="US", region="NY")

    # A subscription's first invoice: one period of its plan.
    assert list((await lines_by_invoice(engine, plain["id"])).values()) == [["PLAN_PERIOD"]]
    # A trial has no invoice, so no lines.
    assert await lines_by_invoice(engine, ny_trial["id"]) == {}

    clock.advance(timedelta(days=1))
    ended = await client.post(
        f"/subscriptions/{fr_trial['id']}/end-trial",
        json={},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert ended.status_code == 200, ended.text
    (fr_lines,) = await rows(
        engine,
        "SELECT i.subtotal, i.amount, array_agg(l.kind ORDER BY l.line_no) AS kinds, "
        "sum(l.amount) FILTER (WHERE l.kind = 'TAX') AS tax "
        "FROM invoice i JOIN invoice_line l ON l.invoice_id = i.id WHERE i.id = :i "
        "GROUP BY i.id",
        i=ended.json()["invoiceId"],
    )
    # VAT is inside the price: the total does not move, the tax is a line of its own.
    assert (fr_lines["subtotal"], fr_lines["amount"], fr_lines["kinds"], fr_lines["tax"]) == (
        990,
        990,
        ["PLAN_PERIOD", "TAX"],
        165,
    )

    # A previewed upgrade writes nothing, lines included; the real one writes taxed lines.
    lines_before = await scalar(engine, "SELECT count(*) FROM invoice_line")
    path = f"/subscriptions/{upgraded['id']}/change-plan"
    previewed = await client.post(f"{path}?preview=true", json={"planCode": "PRO_MONTHLY"})
    assert previewed.status_code == 200, previewed.text
    assert await scalar(engine, "SELECT count(*) FROM invoice_line") == lines_before
    done = await client.post(path, json={"planCode": "PRO_MONTHLY"})
    assert done.status_code == 200, done.text
    assert done.json()["prorationAmount"] == previewed.json()["prorationAmount"]
    proration = (await lines_by_invoice(engine, upgraded["id"]))[done.json()["prorationInvoiceId"]]
    assert proration == ["PRORATION_CHARGE", "PRORATION_CREDIT", "TAX"]

    # The renewer: the NY trial's first paid period (taxed), then two months of catch-up for
    # everyone; a plan change after a period end renews first (the renewer's code) and prorates.
    await renew_until(engine, clock, start + timedelta(days=62))
    trial_invoices = await lines_by_invoice(engine, ny_trial["id"])
    assert len(trial_invoices) == 2
    assert all(kinds == ["PLAN_PERIOD", "TAX"] for kinds in trial_invoices.values())
    period_end = instant(
        (await client.get(f"/subscriptions/{plain['id']}")).json()["currentPeriodEnd"]
    )
    clock.set(period_end + timedelta(minutes=1))
    late = await client.post(
        f"/subscriptions/{plain['id']}/change-plan", json={"planCode": "PRO_MONTHLY"}
    )
    assert late.status_code == 200, late.text
    plain_invoices = await lines_by_invoice(engine, plain["id"])
    assert list(plain_invoices.values()) == [["PLAN_PERIOD"]] * 4 + [
        ["PRORATION_CHARGE", "PRORATION_CREDIT"]
    ]

    report = await check_all(pool, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    assert report.check("lines").ok, report.as_dict()
    assert report.check("amounts").ok, report.as_dict()
    assert await scalar(engine, "SELECT count(*) FROM invoice") >= 12
