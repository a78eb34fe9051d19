"""The upcoming invoice is exactly what the renewer then creates, and previewing writes nothing."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from tests.integration.api.helpers import assert_problem, rows, scalar, subscribe
from tests.integration.lifecycle.helpers import iso, renew_until


async def created_invoice(engine: AsyncEngine, subscription_id: int, index: int) -> dict[str, Any]:
    """The renewal invoice as the upcoming-invoice answer shows one, read from the tables."""
    (row,) = await rows(
        engine,
        "SELECT id, subscription_id, kind, period_index, period_start, period_end, subtotal, "
        "credit_applied, amount, currency, status FROM invoice "
        "WHERE subscription_id = :s AND period_index = :n AND kind = 'RENEWAL'",
        s=subscription_id,
        n=index,
    )
    lines = await rows(
        engine,
        "SELECT kind, description, quantity, unit_amount, amount, period_start, period_end, "
        "tax_inclusive FROM invoice_line WHERE invoice_id = :i ORDER BY line_no",
        i=row["id"],
    )
    return {
        "subscriptionId": row["subscription_id"],
        "kind": row["kind"],
        "periodIndex": row["period_index"],
        "periodStart": iso(row["period_start"]),
        "periodEnd": iso(row["period_end"]),
        "subtotal": row["subtotal"],
        "creditApplied": row["credit_applied"],
        "amount": row["amount"],
        "currency": row["currency"],
        "status": row["status"],
        "tax": sum(line["amount"] for line in lines if line["kind"] == "TAX"),
        "lines": [
            {
                "kind": line["kind"],
                "description": line["description"],
                "quantity": line["quantity"],
                "unitAmount": line["unit_amount"],
                "amount": line["amount"],
                "periodStart": line["period_start"] and iso(line["period_start"]),
                "periodEnd": line["period_end"] and iso(line["period_end"]),
                "taxInclusive": line["tax_inclusive"],
            }
            for line in lines
        ],
    }


async def test_the_preview_is_the_renewal_with_the_credit_it_will_use(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="PRO_MONTHLY", timeZone="Europe/Paris")
    clock.advance(timedelta(days=10))
    downgrade = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "BASIC_MONTHLY"}
    )
    credit = downgrade.json()["creditGranted"]
    assert credit > 0
    events_before = await scalar(engine, "SELECT count(*) FROM outbox_event")
    version_before = downgrade.json()["subscription"]["version"]

    response = await client.get(f"/subscriptions/{sub['id']}/upcoming-invoice")
    assert response.status_code == 200, response.text
    preview = response.json()
    assert (preview["periodIndex"], preview["periodStart"]) == (1, sub["currentPeriodEnd"])
    assert (preview["subtotal"], preview["creditApplied"]) == (990, min(990, credit))
    assert preview["amount"] == 990 - min(990, credit)
    # Nothing written: no event, no version bump.
    assert await scalar(engine, "SELECT count(*) FROM outbox_event") == events_before
    again = (await client.get(f"/subscriptions/{sub['id']}")).json()
    assert again["version"] == version_before

    period_end = datetime.fromisoformat(sub["currentPeriodEnd"].replace("Z", "+00:00"))
    await renew_until(engine, clock, period_end + timedelta(minutes=5))
    assert await created_invoice(engine, sub["id"], 1) == preview


async def test_a_trials_preview_is_its_first_paid_period(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    trial_end = clock.now() + timedelta(days=5)
    sub = await subscribe(client, trialEnd=iso(trial_end))
    preview = (await client.get(f"/subscriptions/{sub['id']}/upcoming-invoice")).json()
    assert (preview["periodIndex"], preview["periodStart"], preview["amount"]) == (
        0,
        iso(trial_end),
        990,
    )
    await renew_until(engine, clock, trial_end + timedelta(hours=1))
    assert await created_invoice(engine, sub["id"], 0) == preview


async def test_a_taxed_trials_preview_has_the_tax_and_lines_the_renewer_writes(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """A location set during the trial: the first paid period is taxed on top of the price
    (exclusive sales tax), and the credit balance pays part of the taxed amount."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO tax_rate (country, region, rate_ppm, inclusive, name) "
                "VALUES ('US', 'NY', 88750, false, 'Sales tax')"
            )
        )
    trial_end = clock.now() + timedelta(days=5)
    sub = await subscribe(client, trialEnd=iso(trial_end))
    put = await client.put(
        f"/subscriptions/{sub['id']}/tax-location", json={"country": "US", "region": "NY"}
    )
    assert put.status_code == 200, put.text
    preview = (await client.get(f"/subscriptions/{sub['id']}/upcoming-invoice")).json()
    assert (preview["subtotal"], preview["tax"], preview["amount"]) == (1078, 88, 1078)
    assert [line["kind"] for line in preview["lines"]] == ["PLAN_PERIOD", "TAX"]
    await renew_until(engine, clock, trial_end + timedelta(hours=1))
    assert await created_invoice(engine, sub["id"], 0) == preview


async def test_no_upcoming_invoice_when_canceled_or_scheduled_to_be(
    client: httpx.AsyncClient,
) -> None:
    sub = await subscribe(client)
    await client.post(f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": True})
    assert_problem(
        await client.get(f"/subscriptions/{sub['id']}/upcoming-invoice"),
        404,
        "no-upcoming-invoice",
    )
    await client.post(
        f"/subscriptions/{sub['id']}/cancel",
        json={"atPeriodEnd": False},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert_problem(
        await client.get(f"/subscriptions/{sub['id']}/upcoming-invoice"),
        404,
        "no-upcoming-invoice",
    )
    assert_problem(
        await client.get("/subscriptions/999999/upcoming-invoice"), 404, "subscription-not-found"
    )
