"""A plan change scheduled for the period end: stored, visible, droppable, and applied by the
renewer's batch at renewal (catch-up included), at the new plan's price."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.invariants.amounts import check_amounts
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from billing_core.invariants.topic import PlanChangeSeen
from tests.integration.api.helpers import assert_problem, rows, scalar, subscribe
from tests.integration.lifecycle.helpers import instant, renew
from tests.support.factories import driver_of


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


async def renewals(engine: AsyncEngine, subscription_id: int) -> list[dict[str, Any]]:
    return await rows(
        engine,
        "SELECT kind, period_index, period_start, subtotal FROM invoice "
        "WHERE subscription_id = :s ORDER BY id",
        s=subscription_id,
    )


async def schedule(client: httpx.AsyncClient, sub: dict[str, Any], plan: str) -> dict[str, Any]:
    response = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": plan, "effective": "period_end"},
        headers={**key(), "If-Match": f'"{sub["version"]}"'},
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_a_scheduled_downgrade_applies_at_renewal_across_a_catch_up(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="PRO_MONTHLY")
    body = await schedule(client, sub, "BASIC_MONTHLY")
    assert (body["changed"], body["scheduled"], body["due"], body["prorationInvoiceId"]) == (
        True,
        True,
        0,
        None,
    )
    scheduled = body["subscription"]
    assert scheduled["plan"]["code"] == "PRO_MONTHLY"  # nothing changes before the period end
    assert scheduled["scheduledChange"] == {
        "planCode": "BASIC_MONTHLY",
        "effectiveAt": sub["currentPeriodEnd"],
    }
    upcoming = (await client.get(f"/subscriptions/{sub['id']}/upcoming-invoice")).json()
    assert upcoming["subtotal"] == 990  # the next period is previewed at the new plan

    # The renewer catches up three periods at once: the first one already at the new plan.
    clock.set(instant(sub["currentPeriodEnd"]) + timedelta(days=62))
    await renew(engine, clock)
    found = await renewals(engine, sub["id"])
    assert [(r["period_index"], r["subtotal"]) for r in found] == [
        (0, 2990),
        (1, 990),
        (2, 990),
        (3, 990),
    ]
    after = (await client.get(f"/subscriptions/{sub['id']}")).json()
    assert (after["plan"]["code"], after["scheduledChange"]) == ("BASIC_MONTHLY", None)
    events = await rows(
        engine,
        "SELECT event_type, payload FROM outbox_event WHERE aggregate_id = :s ORDER BY sequence",
        s=sub["id"],
    )
    assert [e["event_type"] for e in events][2:4] == ["SubscriptionPlanChanged", "InvoiceCreated"]
    change = events[2]["payload"]
    assert change["changedAt"] == sub["currentPeriodEnd"] == events[3]["payload"]["periodStart"]
    assert (change["oldPlanCode"], change["newPlanCode"], change["prorationDue"]) == (
        "PRO_MONTHLY",
        "BASIC_MONTHLY",
        0,
    )
    assert change["effective"] == "period_end"
    credit = await scalar(
        engine, "SELECT credit_balance FROM subscription WHERE id = :s", s=sub["id"]
    )
    assert credit == 0  # nothing prorated
    report = await check_all(pool, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    assert report.check("periods").ok and report.check("amounts").ok, report.as_dict()


async def test_a_scheduled_change_can_be_replaced_dropped_or_superseded(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="PRO_MONTHLY")
    first = (await schedule(client, sub, "BASIC_MONTHLY"))["subscription"]
    again = await schedule(client, first, "BASIC_MONTHLY")
    assert again["changed"] is False and again["subscription"]["version"] == first["version"]
    replaced = (await schedule(client, first, "BUSINESS_MONTHLY"))["subscription"]
    assert replaced["scheduledChange"]["planCode"] == "BUSINESS_MONTHLY"

    stale = await client.delete(
        f"/subscriptions/{sub['id']}/scheduled-change",
        headers={"If-Match": f'"{first["version"]}"'},
    )
    assert_problem(stale, 409, "version-conflict")
    dropped = await client.delete(
        f"/subscriptions/{sub['id']}/scheduled-change",
        headers={**key(), "If-Match": f'"{replaced["version"]}"'},
    )
    assert dropped.status_code == 200, dropped.text
    assert dropped.json()["scheduledChange"] is None
    assert dropped.json()["version"] == replaced["version"] + 1
    none = await client.delete(f"/subscriptions/{sub['id']}/scheduled-change", headers=key())
    assert none.json()["version"] == dropped.json()["version"]  # nothing scheduled: no change

    # An immediate change replaces a scheduled one.
    rescheduled = (await schedule(client, dropped.json(), "BASIC_MONTHLY"))["subscription"]
    now = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": "BUSINESS_MONTHLY"},
        headers={**key(), "If-Match": f'"{rescheduled["version"]}"'},
    )
    assert now.status_code == 200, now.text
    assert now.json()["subscription"]["scheduledChange"] is None
    clock.set(instant(sub["currentPeriodEnd"]) + timedelta(minutes=1))
    await renew(engine, clock)
    assert [r["subtotal"] for r in await renewals(engine, sub["id"]) if r["kind"] == "RENEWAL"] == [
        2990,
        9990,
    ]
    audit = await rows(
        engine,
        "SELECT action FROM audit_event WHERE subject_id = :s ORDER BY id",
        s=sub["id"],
    )
    assert [a["action"] for a in audit].count("subscription.schedule_plan_change") == 6


async def test_scheduling_refusals(client: httpx.AsyncClient) -> None:
    sub = await subscribe(client, plan="PRO_MONTHLY")
    usd = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": "TEAM_MONTHLY_USD", "effective": "period_end"},
        headers=key(),
    )
    assert_problem(usd, 422, "plan-change-not-allowed")
    await client.post(
        f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": False}, headers=key()
    )
    over = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": "BASIC_MONTHLY", "effective": "period_end"},
        headers=key(),
    )
    assert_problem(over, 409, "state-conflict")
    assert_problem(
        await client.delete(f"/subscriptions/{sub['id']}/scheduled-change", headers=key()),
        409,
        "state-conflict",
    )


async def test_the_amounts_invariant_prices_the_boundary_period_at_a_scheduled_plan(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """Read from the topic (the outbox pruned): the same answer, and an immediate change at
    the same instant would have priced that period at the old plan."""
    sub = await subscribe(client, plan="PRO_MONTHLY")
    await schedule(client, sub, "BASIC_MONTHLY")
    clock.set(instant(sub["currentPeriodEnd"]) + timedelta(minutes=1))
    await renew(engine, clock)
    boundary = instant(sub["currentPeriodEnd"])
    async with engine.begin() as conn:
        assert (await check_amounts(await driver_of(conn))).ok
        await conn.execute(
            text("DELETE FROM outbox_event WHERE aggregate_id = :s"), {"s": sub["id"]}
        )
        seen = PlanChangeSeen("e1", sub["id"], 1, boundary, "PRO_MONTHLY", "BASIC_MONTHLY", True)
        assert (await check_amounts(await driver_of(conn), plan_changes=[seen])).ok
        immediate = PlanChangeSeen("e1", sub["id"], 1, boundary, "PRO_MONTHLY", "BASIC_MONTHLY")
        wrong = await check_amounts(await driver_of(conn), plan_changes=[immediate])
        assert wrong.kinds() == {"wrong_subtotal": 1}
        await conn.rollback()
