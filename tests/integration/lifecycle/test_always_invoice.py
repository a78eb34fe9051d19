"""prorationBehavior always_invoice: a downgrade's credit pays the OPEN invoices whose
collection never started, at once; what is left (or all of it, when every OPEN invoice has been
tried already) stays on the balance."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from billing_core.repo.collection import claim_due_invoices
from tests.integration.api.helpers import rows, scalar, subscribe


async def downgrade(client: httpx.AsyncClient, sub: dict[str, Any], plan: str) -> dict[str, Any]:
    response = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": plan, "prorationBehavior": "always_invoice"},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def invoice(engine: AsyncEngine, subscription_id: int) -> dict[str, Any]:
    (found,) = await rows(
        engine,
        "SELECT id, status, subtotal, credit_applied, amount, paid_at FROM invoice "
        "WHERE subscription_id = :s",
        s=subscription_id,
    )
    return found


async def test_a_downgrade_credit_pays_an_untried_open_invoice_at_once(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="PRO_MONTHLY")
    clock.set(clock.now() + timedelta(days=10))
    body = await downgrade(client, sub, "BASIC_MONTHLY")
    credit = body["creditGranted"]
    assert credit > 0 and body["due"] == -credit
    assert body["subscription"]["creditBalance"] == 0  # all of it applied now
    found = await invoice(engine, sub["id"])
    assert (found["status"], found["credit_applied"], found["amount"]) == (
        "OPEN",
        credit,
        2990 - credit,
    )
    ledger = await rows(
        engine,
        "SELECT amount, reason, invoice_id FROM credit_entry WHERE subscription_id = :s "
        "ORDER BY id",
        s=sub["id"],
    )
    assert [(e["amount"], e["reason"], e["invoice_id"]) for e in ledger] == [
        (credit, "DOWNGRADE", None),
        (-credit, "INVOICE", found["id"]),
    ]
    report = await check_all(pool, now=clock.now(), ledger=None, topic=None)
    assert report.check("amounts").ok, report.as_dict()


async def test_credit_covering_the_invoice_pays_it_and_the_rest_stays_credit(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BUSINESS_MONTHLY")
    clock.set(clock.now() + timedelta(days=1))
    # A first downgrade with create_prorations leaves credit; the OPEN invoice is untouched.
    first = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": "PRO_MONTHLY"},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    kept = first.json()["creditGranted"]
    assert (await invoice(engine, sub["id"]))["amount"] == 9990
    clock.set(clock.now() + timedelta(days=1))
    body = await downgrade(client, first.json()["subscription"], "BASIC_MONTHLY")
    # Only the credit this change grants is applied now (the earlier credit stays for later).
    credit = body["creditGranted"]
    found = await invoice(engine, sub["id"])
    assert found["credit_applied"] == min(credit, 9990)
    assert body["subscription"]["creditBalance"] == kept + credit - found["credit_applied"]
    report = await check_all(pool, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    assert report.check("amounts").ok, report.as_dict()


async def test_an_invoice_already_tried_keeps_its_amount_and_the_credit_stays(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock, pool: pg.Pool
) -> None:
    sub = await subscribe(client, plan="PRO_MONTHLY")
    async with pg.transaction(pool) as conn:  # the collector leased it (a call may be in flight)
        leased = await claim_due_invoices(
            conn, limit=10, lease=timedelta(seconds=60), now=clock.now()
        )
    assert sub["id"] in {i.subscription_id for i in leased}
    clock.set(clock.now() + timedelta(days=10))
    body = await downgrade(client, sub, "BASIC_MONTHLY")
    assert body["subscription"]["creditBalance"] == body["creditGranted"] > 0
    assert (await invoice(engine, sub["id"]))["amount"] == 2990
    balance = await scalar(
        engine, "SELECT credit_balance FROM subscription WHERE id = :s", s=sub["id"]
    )
    assert balance == body["creditGranted"]


async def test_credit_pays_the_oldest_invoice_in_full_then_the_next(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    clock.set(clock.now() + timedelta(days=1))
    up = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": "BUSINESS_MONTHLY"},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert up.json()["prorationInvoiceId"] is not None
    clock.set(clock.now() + timedelta(hours=1))
    body = await downgrade(client, up.json()["subscription"], "BASIC_MONTHLY")
    credit = body["creditGranted"]
    found = await rows(
        engine,
        "SELECT id, kind, status, credit_applied, amount FROM invoice "
        "WHERE subscription_id = :s ORDER BY id",
        s=sub["id"],
    )
    renewal, proration = found
    assert (renewal["status"], renewal["credit_applied"], renewal["amount"]) == ("PAID", 990, 0)
    assert proration["credit_applied"] == credit - 990 and proration["status"] == "OPEN"
    assert body["subscription"]["creditBalance"] == 0
    paid = await rows(
        engine,
        "SELECT payload FROM outbox_event WHERE aggregate_id = :s AND event_type = 'InvoicePaid'",
        s=sub["id"],
    )
    assert [p["payload"]["invoiceId"] for p in paid] == [renewal["id"]]
    report = await check_all(pool, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    assert report.check("amounts").ok and report.check("charges").ok, report.as_dict()
