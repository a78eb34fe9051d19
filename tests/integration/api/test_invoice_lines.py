"""Invoices come back with their line items, and each invoice is the sum of its lines."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx

from billing_core.clock import ManualClock
from tests.integration.api.helpers import subscribe


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


async def invoices(client: httpx.AsyncClient, subscription_id: int) -> list[dict[str, Any]]:
    response = await client.get(f"/subscriptions/{subscription_id}/invoices")
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items[::-1]  # oldest first


async def change(client: httpx.AsyncClient, subscription_id: int, plan: str) -> None:
    r = await client.post(
        f"/subscriptions/{subscription_id}/change-plan", json={"planCode": plan}, headers=key()
    )
    assert r.status_code == 200, r.text


def assert_sum_of_lines(invoice: dict[str, Any]) -> None:
    lines = invoice["lines"]
    assert sum(line["amount"] for line in lines) == invoice["amount"]
    credit = -sum(line["amount"] for line in lines if line["kind"] == "CREDIT_APPLIED")
    assert credit == invoice["creditApplied"]
    for line in lines:
        assert line["amount"] == line["quantity"] * line["unitAmount"]


async def test_first_invoice_is_one_plan_period_line(client: httpx.AsyncClient) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    (invoice,) = await invoices(client, sub["id"])
    assert invoice["lines"] == [
        {
            "kind": "PLAN_PERIOD",
            "description": "Plan BASIC_MONTHLY",
            "quantity": 1,
            "unitAmount": 990,
            "amount": 990,
            "periodStart": sub["currentPeriodStart"],
            "periodEnd": sub["currentPeriodEnd"],
            "taxInclusive": None,
        }
    ]
    assert_sum_of_lines(invoice)


async def test_upgrade_invoice_has_charge_credit_and_credit_applied_lines(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="PRO_MONTHLY")
    clock.advance(timedelta(days=3))
    await change(client, sub["id"], "BASIC_MONTHLY")  # downgrade: credit, no invoice
    clock.advance(timedelta(days=3))
    await change(client, sub["id"], "BUSINESS_MONTHLY")  # upgrade: paid first from the credit
    first, upgrade = await invoices(client, sub["id"])
    assert_sum_of_lines(first)
    assert upgrade["kind"] == "PRORATION"
    kinds = [line["kind"] for line in upgrade["lines"]]
    assert kinds == ["PRORATION_CHARGE", "PRORATION_CREDIT", "CREDIT_APPLIED"]
    charge, unused, credit = upgrade["lines"]
    assert charge["amount"] > 0 and unused["amount"] < 0 and credit["amount"] < 0
    assert charge["description"] == "Remaining time on plan BUSINESS_MONTHLY"
    assert unused["description"] == "Unused time on plan BASIC_MONTHLY"
    assert upgrade["subtotal"] == charge["amount"] + unused["amount"]
    assert upgrade["creditApplied"] == -credit["amount"] > 0
    assert_sum_of_lines(upgrade)
