"""A plan change right after a period end, before the renewer ran: the change renews the
subscription first (the renewer's own code), then is prorated in the new period — no 409."""

from __future__ import annotations

from datetime import datetime, timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from services.renewer.loop import Renewer
from tests.integration.api.helpers import rows, subscribe


async def test_an_upgrade_after_the_period_end_renews_first_then_prorates(
    lazy_pool: pg.LazyPool,
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    pool: pg.Pool,
    clock: ManualClock,
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
    renewer = Renewer(lazy_pool, clock, batch_size=10)
    await renewer.tick()
    assert renewer.last_result is not None and renewer.last_result.claimed == 0
    report = await check_all(pool, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    assert report.check("periods").ok, report.as_dict()


async def test_a_cancel_or_pause_after_the_period_end_applies_to_the_period_the_customer_saw(
    lazy_pool: pg.LazyPool,
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    pool: pg.Pool,
    clock: ManualClock,
) -> None:
    """Unlike a plan change, a cancel at period end or a pause asked for after the period end,
    before the renewer ran, is not caught up first: it applies to the subscription as it was
    read, whose current period is the one that ended. The cancel takes effect at that end
    (no period after it is invoiced), and the period that began there is renewed paused
    (its invoice VOID, never collected). docs/API.md says so."""
    canceled = await subscribe(client, plan="BASIC_MONTHLY")
    paused = await subscribe(client, plan="BASIC_MONTHLY")
    period_end = datetime.fromisoformat(canceled["currentPeriodEnd"].replace("Z", "+00:00"))
    clock.set(period_end + timedelta(minutes=3))
    cancel = await client.post(
        f"/subscriptions/{canceled['id']}/cancel",
        json={"atPeriodEnd": True},
        headers={"Idempotency-Key": "late-cancel"},
    )
    assert cancel.status_code == 200, cancel.text
    pause = await client.post(
        f"/subscriptions/{paused['id']}/pause",
        json={"behavior": "void"},
        headers={"Idempotency-Key": "late-pause"},
    )
    assert pause.status_code == 200, pause.text
    renewer = Renewer(lazy_pool, clock, batch_size=10)
    while await renewer.tick():
        pass

    subs = await rows(
        engine,
        "SELECT id, status, canceled_at, period_index FROM subscription WHERE id IN (:a, :b) "
        "ORDER BY id",
        a=canceled["id"],
        b=paused["id"],
    )
    assert (subs[0]["status"], subs[0]["period_index"]) == ("CANCELED", 0)
    assert subs[0]["canceled_at"] >= period_end
    assert subs[1]["status"] == "ACTIVE" and subs[1]["period_index"] == 1
    invoices = await rows(
        engine,
        "SELECT subscription_id, period_index, status FROM invoice "
        "WHERE subscription_id IN (:a, :b) AND kind = 'RENEWAL' ORDER BY subscription_id, "
        "period_index",
        a=canceled["id"],
        b=paused["id"],
    )
    assert [(i["subscription_id"], i["period_index"], i["status"]) for i in invoices][1:] == [
        (paused["id"], 0, invoices[1]["status"]),
        (paused["id"], 1, "VOID"),
    ]
    assert [(i["subscription_id"], i["period_index"]) for i in invoices][:1] == [
        (canceled["id"], 0)
    ]
    report = await check_all(pool, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    for name in ("periods", "amounts", "pauses"):
        assert report.check(name).ok, report.check(name).violations
