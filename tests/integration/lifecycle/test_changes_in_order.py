"""Two changes to one subscription in flight at once: the one stamped earlier but applied
second happens at the first one's instant, never before it (its time never goes back)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from tests.integration.api.helpers import rows, subscribe
from tests.integration.lifecycle.helpers import instant


async def changes_read_out_of_order(
    client: httpx.AsyncClient, clock: ManualClock, sub: dict[str, Any], first: str, second: str
) -> tuple[httpx.Response, httpx.Response, datetime]:
    """A change to ``first`` on day 10, then one to ``second`` whose request was stamped on day
    5, read after the first committed; both answers, and the first one's instant."""
    start = instant(sub["currentPeriodStart"])
    clock.set(start + timedelta(days=10))
    first_answer = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": first}
    )
    assert first_answer.status_code == 200, first_answer.text
    first_at = clock.now()
    clock.set(start + timedelta(days=5))
    second_answer = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": second}
    )
    assert second_answer.status_code == 200, second_answer.text
    return first_answer, second_answer, first_at


async def plan_changes(engine: AsyncEngine, subscription_id: int) -> list[dict[str, Any]]:
    """The subscription's SubscriptionPlanChanged payloads, in order."""
    events = await rows(
        engine,
        "SELECT payload FROM outbox_event WHERE aggregate_id = :s "
        "AND event_type = 'SubscriptionPlanChanged' ORDER BY sequence",
        s=subscription_id,
    )
    return [e["payload"] for e in events]


async def test_a_change_stamped_before_the_last_one_applies_at_its_instant(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    # A downgrade whose request was stamped before the upgrade's, read after it committed.
    upgrade, downgrade, upgraded_at = await changes_read_out_of_order(
        client, clock, sub, "PRO_MONTHLY", "BASIC_MONTHLY"
    )
    changed_at = [instant(p["changedAt"]) for p in await plan_changes(engine, sub["id"])]
    assert changed_at == [upgraded_at, upgraded_at]
    # Back to the same plan at the same instant: the credit is exactly the prorated charge.
    assert upgrade.json()["due"] > 0
    assert downgrade.json()["creditGranted"] == upgrade.json()["due"]
    report = await check_all(pool, now=upgraded_at, ledger=LedgerEvidence({}), topic=None)
    assert report.check("amounts").ok, report.as_dict()


async def test_a_change_to_yearly_read_after_a_change_at_a_later_instant_prices_its_period_yearly(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    """A downgrade, then a change to yearly billing stamped before it: both happen at the
    downgrade's instant, the second starting the yearly period there; that period is priced
    at the yearly plan (the downgrade before it at the same instant prices nothing)."""
    sub = await subscribe(client, plan="PRO_MONTHLY")
    _, _, downgraded_at = await changes_read_out_of_order(
        client, clock, sub, "BASIC_MONTHLY", "PRO_YEARLY"
    )
    changes = await plan_changes(engine, sub["id"])
    assert [instant(p["changedAt"]) for p in changes] == [downgraded_at] * 2
    assert instant(changes[1]["newPeriodStart"]) == downgraded_at
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
    report = await check_all(pool, now=downgraded_at, ledger=LedgerEvidence({}), topic=None)
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
