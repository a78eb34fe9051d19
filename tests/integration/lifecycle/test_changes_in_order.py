"""Two changes to one subscription in flight at once: the one stamped earlier but applied
second happens at the first one's instant, never before it (its time never goes back)."""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from tests.integration.api.helpers import rows, subscribe
from tests.integration.lifecycle.helpers import instant


async def test_a_change_stamped_before_the_last_one_applies_at_its_instant(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    start = clock.now()
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    clock.set(start + timedelta(days=10))
    upgrade = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "PRO_MONTHLY"}
    )
    assert upgrade.status_code == 200, upgrade.text
    upgraded_at = clock.now()
    # A downgrade whose request was stamped before the upgrade's, read after it committed.
    clock.set(start + timedelta(days=5))
    downgrade = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "BASIC_MONTHLY"}
    )
    assert downgrade.status_code == 200, downgrade.text

    events = await rows(
        engine,
        "SELECT payload FROM outbox_event WHERE aggregate_id = :s "
        "AND event_type = 'SubscriptionPlanChanged' ORDER BY sequence",
        s=sub["id"],
    )
    changed_at = [instant(e["payload"]["changedAt"]) for e in events]
    assert changed_at == [upgraded_at, upgraded_at]
    # Back to the same plan at the same instant: the credit is exactly the prorated charge.
    assert upgrade.json()["due"] > 0
    assert downgrade.json()["creditGranted"] == upgrade.json()["due"]
    report = await check_all(engine, now=upgraded_at, ledger=LedgerEvidence({}), topic=None)
    assert report.check("amounts").ok, report.as_dict()


async def test_a_change_to_yearly_read_after_a_change_at_a_later_instant_prices_its_period_yearly(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """A downgrade, then a change to yearly billing stamped before it: both happen at the
    downgrade's instant, the second starting the yearly period there; that period is priced
    at the yearly plan (the downgrade before it at the same instant prices nothing)."""
    start = clock.now()
    sub = await subscribe(client, plan="PRO_MONTHLY")
    clock.set(start + timedelta(days=10))
    downgrade = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "BASIC_MONTHLY"}
    )
    assert downgrade.status_code == 200, downgrade.text
    downgraded_at = clock.now()
    clock.set(start + timedelta(days=5))
    yearly = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "PRO_YEARLY"}
    )
    assert yearly.status_code == 200, yearly.text

    events = await rows(
        engine,
        "SELECT payload FROM outbox_event WHERE aggregate_id = :s "
        "AND event_type = 'SubscriptionPlanChanged' ORDER BY sequence",
        s=sub["id"],
    )
    assert [instant(e["payload"]["changedAt"]) for e in events] == [downgraded_at] * 2
    assert instant(events[1]["payload"]["newPeriodStart"]) == downgraded_at
    invoices = await rows(
        engine,
        "SELECT period_index, period_start, subtotal FROM invoice "
        "WHERE subscription_id = :s AND kind = 'RENEWAL' ORDER BY period_index",
        s=sub["id"],
    )
    yearly_price = await rows(engine, "SELECT price_amount FROM plan WHERE code = 'PRO_YEARLY'")
    assert invoices[-1]["period_index"] == 1
    assert invoices[-1]["period_start"] == downgraded_at
    assert invoices[-1]["subtotal"] == yearly_price[0]["price_amount"]
    report = await check_all(engine, now=downgraded_at, ledger=LedgerEvidence({}), topic=None)
    assert report.check("amounts").ok, report.check("amounts").violations


async def test_a_cancel_stamped_before_a_renewal_it_read_cancels_after_the_renewal(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    period_end = instant(sub["currentPeriodEnd"])
    clock.set(period_end + timedelta(seconds=30))
    renewed = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "PRO_MONTHLY"}
    )  # renews period 1 first, then upgrades at period_end + 30 s
    assert renewed.status_code == 200, renewed.text
    clock.set(period_end - timedelta(seconds=30))
    cancel = await client.post(f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": False})
    assert cancel.status_code == 200, cancel.text
    assert instant(cancel.json()["canceledAt"]) == period_end + timedelta(seconds=30)
