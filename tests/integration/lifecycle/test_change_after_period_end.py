"""A plan change right after a period end, before the renewer ran: the change renews the
subscription first (the renewer's own code), then is prorated in the new period — no 409."""

from __future__ import annotations

from datetime import datetime, timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from services.renewer.loop import Renewer
from tests.integration.api.helpers import rows, subscribe


async def test_an_upgrade_after_the_period_end_renews_first_then_prorates(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    period_end = datetime.fromisoformat(sub["currentPeriodEnd"].replace("Z", "+00:00"))
    clock.set(period_end + timedelta(minutes=3))
    response = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": "PRO_MONTHLY"},
        headers={"If-Match": f'"{sub["version"]}"'},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["subscription"]["periodIndex"] == 1
    assert body["subscription"]["currentPeriodStart"] == sub["currentPeriodEnd"]
    assert body["due"] > 0
    found = await rows(
        engine,
        "SELECT kind, period_index, period_start, subtotal FROM invoice "
        "WHERE subscription_id = :s ORDER BY id",
        s=sub["id"],
    )
    assert [(r["kind"], r["period_index"]) for r in found] == [
        ("RENEWAL", 0),
        ("RENEWAL", 1),
        ("PRORATION", 1),
    ]
    assert found[1]["subtotal"] == 990  # period 1 renewed at the old plan's price
    assert found[2]["period_start"] == clock.now()
    events = await rows(
        engine,
        "SELECT event_type FROM outbox_event WHERE aggregate_id = :s ORDER BY sequence",
        s=sub["id"],
    )
    assert [e["event_type"] for e in events][2:] == [
        "InvoiceCreated",
        "SubscriptionPlanChanged",
        "InvoiceCreated",
    ]
    # The renewer finds nothing left to do; the periods are whole.
    renewer = Renewer(engine, clock, batch_size=10)
    await renewer.tick()
    assert renewer.last_result is not None and renewer.last_result.claimed == 0
    report = await check_all(engine, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    assert report.check("periods").ok, report.as_dict()
