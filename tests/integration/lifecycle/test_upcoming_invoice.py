"""The upcoming invoice is exactly what the renewer then creates, and previewing writes nothing."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from services.renewer.loop import Renewer
from tests.integration.api.helpers import assert_problem, rows, scalar, subscribe


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


async def renew_until(engine: AsyncEngine, clock: ManualClock, at: datetime) -> None:
    clock.set(at)
    renewer = Renewer(engine, clock, batch_size=10)
    while await renewer.tick():
        pass


async def created_invoice(engine: AsyncEngine, subscription_id: int, index: int) -> dict[str, Any]:
    (row,) = await rows(
        engine,
        "SELECT subscription_id, kind, period_index, period_start, period_end, subtotal, "
        "credit_applied, amount, currency, status FROM invoice "
        "WHERE subscription_id = :s AND period_index = :n AND kind = 'RENEWAL'",
        s=subscription_id,
        n=index,
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
