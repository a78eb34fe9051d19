"""Requested voids and refund requests against real PostgreSQL: the cancel, the recorder and the
claim of a void request for its look-up, in the transactions the services run them in."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.domain.charge_result import NOTHING_CHARGED, ChargeOutcome, idempotency_key
from billing_core.domain.dunning import DunningPolicy
from billing_core.repo.collection import claim_due_invoices, still_ours_to_charge
from billing_core.usecases.cancel import cancel
from billing_core.usecases.payment_result import RecordOutcome, record_charge_result
from tests.support.factories import create_subscription

NOW = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
LEASE = timedelta(minutes=2)


async def world(engine: AsyncEngine, *, leased: bool, credit: int = 0) -> tuple[int, int]:
    """A subscription with one OPEN invoice (990 after ``credit``), leased (its call may be in
    flight) or just due."""
    async with engine.begin() as conn:
        sub = await create_subscription(conn, customer_id=7, start=NOW)
        invoice = (
            await conn.execute(
                text(
                    "INSERT INTO invoice (subscription_id, customer_id, kind, period_index, "
                    "period_start, period_end, subtotal, credit_applied, amount, currency, "
                    "status, next_attempt_at, leased_at) VALUES (:s, 7, 'RENEWAL', 0, :now, "
                    ":end, :subtotal, :credit, 990, 'EUR', 'OPEN', :next, :leased) RETURNING id"
                ),
                {
                    "s": sub,
                    "now": NOW,
                    "end": NOW + timedelta(days=30),
                    "subtotal": 990 + credit,
                    "credit": credit,
                    "next": NOW + LEASE if leased else NOW,
                    "leased": NOW if leased else None,
                },
            )
        ).scalar_one()
    return sub, int(invoice)


async def cancel_now(pool: pg.Pool, sub: int) -> None:
    async with pg.transaction(pool) as conn:
        assert await cancel(conn, subscription_id=sub, at_period_end=False, now=NOW)


async def record(
    pool: pg.Pool,
    invoice: int,
    outcome: ChargeOutcome,
    attempt: int = 0,
    **kw: Any,
) -> RecordOutcome:
    if kw.get("source") == "WEBHOOK":  # a webhook says what was charged, to whom
        kw = {"amount": 990, "currency": "EUR", "customer_id": 7, **kw}
    async with pg.transaction(pool) as conn:
        return await record_charge_result(
            conn,
            invoice_id=invoice,
            attempt_number=attempt,
            outcome=outcome,
            source=kw.pop("source", "COLLECTOR"),
            idempotency_key=idempotency_key(invoice, attempt, kw.pop("prefix", "")),
            now=NOW + timedelta(seconds=1),
            rng=random.Random(1),
            policy=DunningPolicy(),
            **kw,
        )


async def row(engine: AsyncEngine, sql: str, **params: Any) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).mappings().first()


async def events(engine: AsyncEngine, sub: int) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT event_type FROM outbox_event WHERE aggregate_id = :s ORDER BY sequence"),
            {"s": sub},
        )
        return [r[0] for r in rows]


async def test_a_cancel_voids_an_invoice_not_in_flight_and_requests_the_void_of_a_leased_one(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    due_sub, due = await world(engine, leased=False)
    leased_sub, leased = await world(engine, leased=True)
    await cancel_now(pool, due_sub)
    await cancel_now(pool, leased_sub)
    voided = await row(engine, "SELECT * FROM invoice WHERE id = :i", i=due)
    assert (voided["status"], voided["void_requested_at"]) == ("VOID", None)
    requested = await row(engine, "SELECT * FROM invoice WHERE id = :i", i=leased)
    assert (requested["status"], requested["void_requested_at"]) == ("OPEN", NOW)
    assert requested["next_attempt_at"] == NOW + LEASE  # the call's lease is kept
    assert await events(engine, due_sub) == ["InvoiceVoided", "SubscriptionCanceled"]
    assert await events(engine, leased_sub) == ["SubscriptionCanceled"]  # voided later


async def test_a_decline_of_the_call_in_flight_voids_and_gives_the_credit_back(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub, invoice = await world(engine, leased=True, credit=300)
    await cancel_now(pool, sub)
    assert await record(pool, invoice, ChargeOutcome.DECLINED) == RecordOutcome.APPLIED
    state = await row(engine, "SELECT status, attempt_count FROM invoice WHERE id = :i", i=invoice)
    assert (state["status"], state["attempt_count"]) == ("VOID", 0)
    balance = await row(engine, "SELECT credit_balance FROM subscription WHERE id = :s", s=sub)
    assert balance["credit_balance"] == 300
    assert await events(engine, sub) == ["SubscriptionCanceled", "InvoiceVoided"]
    assert await row(engine, "SELECT * FROM refund WHERE invoice_id = :i", i=invoice) is None


async def test_a_success_of_the_call_in_flight_voids_and_requests_one_refund(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub, invoice = await world(engine, leased=True)
    await cancel_now(pool, sub)
    got = await record(
        pool, invoice, ChargeOutcome.SUCCESS, gateway_reference="ch_1", prefix="prod-"
    )
    assert got == RecordOutcome.REFUND
    # The webhook of the same charge: the invoice is VOID now; still one refund for the charge.
    again = await record(
        pool, invoice, ChargeOutcome.SUCCESS, source="WEBHOOK", gateway_reference="ch_1",
        prefix="prod-", amount=990, currency="EUR", customer_id=7,
    )  # fmt: skip
    assert again == RecordOutcome.REFUND
    state = await row(engine, "SELECT status, paid_at FROM invoice WHERE id = :i", i=invoice)
    assert (state["status"], state["paid_at"]) == ("VOID", None)
    refund = await row(engine, "SELECT * FROM refund WHERE invoice_id = :i", i=invoice)
    first = await row(
        engine, "SELECT min(id) AS id FROM payment_attempt WHERE invoice_id = :i", i=invoice
    )
    assert (refund["reason"], refund["status"], refund["charge_key"]) == (
        "canceled_in_flight",
        "REQUESTED",
        f"prod-inv-{invoice}-try-0",
    )
    assert refund["idempotency_key"] == f"ref-{first['id']}"  # no prefix given to the recorder
    assert (refund["amount"], refund["currency"], refund["charge_reference"]) == (
        990,
        "EUR",
        "ch_1",
    )
    count = await row(engine, "SELECT count(*) AS n FROM refund WHERE invoice_id = :i", i=invoice)
    assert count["n"] == 1
    assert await events(engine, sub) == ["SubscriptionCanceled", "InvoiceVoided"]


async def test_a_second_success_for_a_paid_invoice_under_another_key_is_refunded(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub, invoice = await world(engine, leased=False)
    assert await record(pool, invoice, ChargeOutcome.DECLINED, 0) == RecordOutcome.APPLIED
    assert await record(pool, invoice, ChargeOutcome.SUCCESS, 1) == RecordOutcome.APPLIED
    # The paying key reported again (its webhook) is the same charge.
    replay = await record(pool, invoice, ChargeOutcome.SUCCESS, 1, source="WEBHOOK")
    assert replay == RecordOutcome.ALREADY_SETTLED
    # Attempt 0's key, recorded as declined, reports a success after all: a second charge.
    duplicate = await record(pool, invoice, ChargeOutcome.SUCCESS, 0, source="WEBHOOK")
    assert duplicate == RecordOutcome.REFUND
    refund = await row(engine, "SELECT * FROM refund WHERE invoice_id = :i", i=invoice)
    assert (refund["reason"], refund["charge_key"]) == (
        "duplicate_charge",
        idempotency_key(invoice, 0),
    )
    state = await row(engine, "SELECT status FROM invoice WHERE id = :i", i=invoice)
    assert state["status"] == "PAID"
    assert await events(engine, sub) == [
        "PaymentFailed",
        "SubscriptionPastDue",
        "InvoicePaid",
        "SubscriptionReactivated",
    ]


async def test_a_mismatched_success_becomes_a_reconciliation_item(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub, invoice = await world(engine, leased=True)
    got = await record(
        pool, invoice, ChargeOutcome.SUCCESS, source="WEBHOOK", amount=1,
        gateway_reference="ch_x",
    )  # fmt: skip
    assert got == RecordOutcome.MISMATCH
    item = await row(engine, "SELECT * FROM reconciliation_item WHERE invoice_id = :i", i=invoice)
    attempt = await row(engine, "SELECT id FROM payment_attempt WHERE invoice_id = :i", i=invoice)
    assert (item["kind"], item["subscription_id"], item["gateway_reference"]) == (
        "report_mismatch",
        sub,
        "ch_x",
    )
    assert item["reason"] == "report_mismatch: amount 1 is not the invoice's 990"
    assert (item["payment_attempt_id"], item["resolved_at"]) == (attempt["id"], None)


async def test_a_void_request_whose_call_stayed_uncertain_waits_for_a_look_up(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    """An uncertain answer does not void it (the card may have been charged): the void stays
    requested, the invoice comes due again only to be looked up by key (the claim says so), and
    the look-up's "no charge under this key" voids it and gives its credit back."""
    sub, invoice = await world(engine, leased=True, credit=100)
    await cancel_now(pool, sub)
    assert await record(pool, invoice, ChargeOutcome.UNKNOWN) == RecordOutcome.APPLIED
    waiting = await row(engine, "SELECT * FROM invoice WHERE id = :i", i=invoice)
    assert (waiting["status"], waiting["void_requested_at"]) == ("OPEN", NOW)
    assert waiting["next_attempt_at"] == NOW + timedelta(seconds=1) + DunningPolicy().unknown_retry
    assert await events(engine, sub) == ["SubscriptionCanceled"]

    async with pg.transaction(pool) as conn:
        (claimed,) = await claim_due_invoices(
            conn, now=waiting["next_attempt_at"], limit=10, lease=LEASE
        )
    assert (claimed.id, claimed.void_requested, claimed.uncertain_before) == (invoice, True, True)
    async with pg.transaction(pool) as conn:  # the pre-call check lets its look-up through
        assert await still_ours_to_charge(conn, [claimed]) == {invoice}
    got = await record(
        pool, invoice, ChargeOutcome.DECLINED, source="LOOKUP", decline_code=NOTHING_CHARGED
    )
    assert got == RecordOutcome.APPLIED
    state = await row(engine, "SELECT * FROM invoice WHERE id = :i", i=invoice)
    assert (state["status"], state["next_attempt_at"]) == ("VOID", None)
    balance = await row(engine, "SELECT credit_balance FROM subscription WHERE id = :s", s=sub)
    assert balance["credit_balance"] == 100
    assert await events(engine, sub) == ["SubscriptionCanceled", "InvoiceVoided"]


async def test_a_cancel_after_an_uncertain_answer_requests_the_void(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    """Not leased any more, but its key got an uncertain answer: the gateway may hold a charge
    under it, so the cancel only requests the void (a look-up decides) instead of voiding."""
    sub, invoice = await world(engine, leased=True)
    assert await record(pool, invoice, ChargeOutcome.UNKNOWN) == RecordOutcome.APPLIED
    await cancel_now(pool, sub)
    state = await row(engine, "SELECT * FROM invoice WHERE id = :i", i=invoice)
    assert (state["status"], state["void_requested_at"]) == ("OPEN", NOW)
    assert await events(engine, sub) == ["SubscriptionCanceled"]


async def test_a_cancel_of_a_held_invoice_voids_it_at_once(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    """Held after an uncertain answer (no next attempt: nothing will look its key up, a person
    has its reconciliation item): a cancel voids it instead of waiting for ever."""
    sub, invoice = await world(engine, leased=True)
    assert await record(pool, invoice, ChargeOutcome.UNKNOWN) == RecordOutcome.APPLIED
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE invoice SET next_attempt_at = NULL WHERE id = :i"), {"i": invoice}
        )
    await cancel_now(pool, sub)
    state = await row(engine, "SELECT * FROM invoice WHERE id = :i", i=invoice)
    assert (state["status"], state["void_requested_at"]) == ("VOID", None)
