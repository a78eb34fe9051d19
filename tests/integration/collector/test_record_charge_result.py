"""record_charge_result against real PostgreSQL: every path of the result rules (paid, declined
into dunning, failed and canceled, uncertain and retried, late and duplicate answers)."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.domain.charge_result import ChargeOutcome, idempotency_key
from billing_core.domain.dunning import DunningPolicy
from billing_core.usecases.payment_result import RecordOutcome, record_charge_result
from tests.support.factories import create_invoice, create_subscription

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
POLICY = DunningPolicy()


async def setup(
    engine: AsyncEngine, *, status: str = "ACTIVE", invoices: int = 1
) -> tuple[int, list[int]]:
    async with engine.begin() as conn:
        sub = await create_subscription(conn, customer_id=7, start=NOW, status=status)
        ids = [
            await create_invoice(
                conn,
                subscription_id=sub,
                customer_id=7,
                amount=990,
                next_attempt_at=NOW,
                period_start=NOW + timedelta(days=30 * i),
                period_index=i,
            )
            for i in range(invoices)
        ]
        # Claimed by the collector: a webhook about their current attempts may be applied.
        await conn.execute(
            text("UPDATE invoice SET leased_at = :now WHERE id = ANY(:ids)"),
            {"now": NOW, "ids": ids},
        )
    return sub, ids


async def record(
    pool: pg.Pool,
    invoice_id: int,
    outcome: ChargeOutcome,
    attempt: int = 0,
    source: str = "COLLECTOR",
    now: datetime = NOW,
    **kw: Any,
) -> RecordOutcome:
    if source == "WEBHOOK":  # a webhook says what was charged, to whom
        kw = {"amount": 990, "currency": "EUR", "customer_id": 7, **kw}
    async with pg.transaction(pool) as conn:
        return await record_charge_result(
            conn,
            invoice_id=invoice_id,
            attempt_number=attempt,
            outcome=outcome,
            source=source,  # type: ignore[arg-type]
            idempotency_key=idempotency_key(invoice_id, attempt),
            now=now,
            rng=random.Random(1),
            policy=POLICY,
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


async def test_success_pays_the_invoice(engine: AsyncEngine, pool: pg.Pool) -> None:
    sub, (inv,) = await setup(engine)
    assert (
        await record(pool, inv, ChargeOutcome.SUCCESS, gateway_reference="ch_1")
        == RecordOutcome.APPLIED
    )
    invoice = await row(engine, "SELECT * FROM invoice WHERE id = :i", i=inv)
    assert invoice["status"] == "PAID" and invoice["paid_at"] == NOW
    assert invoice["next_attempt_at"] is None and invoice["attempt_count"] == 0
    attempt = await row(engine, "SELECT * FROM payment_attempt WHERE invoice_id = :i", i=inv)
    assert (attempt["outcome"], attempt["idempotency_key"], attempt["gateway_reference"]) == (
        "SUCCESS",
        f"inv-{inv}-try-0",
        "ch_1",
    )
    assert await events(engine, sub) == ["InvoicePaid"]


async def test_decline_schedules_dunning_and_marks_past_due(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub, (inv,) = await setup(engine)
    result = await record(pool, inv, ChargeOutcome.DECLINED, decline_code="insufficient_funds")
    assert result == RecordOutcome.APPLIED
    invoice = await row(engine, "SELECT * FROM invoice WHERE id = :i", i=inv)
    assert invoice["status"] == "OPEN" and invoice["attempt_count"] == 1
    assert NOW + timedelta(days=1) <= invoice["next_attempt_at"] < NOW + timedelta(days=1, hours=2)
    s = await row(engine, "SELECT status, version FROM subscription WHERE id = :s", s=sub)
    assert (s["status"], s["version"]) == ("PAST_DUE", 1)
    assert await events(engine, sub) == ["PaymentFailed", "SubscriptionPastDue"]


async def test_full_dunning_schedule_ends_in_failure_and_cancellation(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub, (inv, other) = await setup(engine, invoices=2)
    now = NOW
    for attempt in range(4):
        assert (
            await record(pool, inv, ChargeOutcome.DECLINED, attempt=attempt, now=now)
            == RecordOutcome.APPLIED
        )
        invoice = await row(engine, "SELECT * FROM invoice WHERE id = :i", i=inv)
        if attempt < 3:
            assert invoice["status"] == "OPEN" and invoice["attempt_count"] == attempt + 1
            now = invoice["next_attempt_at"]
    assert invoice["status"] == "FAILED" and invoice["next_attempt_at"] is None
    s = await row(engine, "SELECT status, canceled_at FROM subscription WHERE id = :s", s=sub)
    assert s["status"] == "CANCELED" and s["canceled_at"] == now
    other_row = await row(engine, "SELECT status FROM invoice WHERE id = :i", i=other)
    assert other_row["status"] == "VOID"
    assert await events(engine, sub) == [
        "PaymentFailed",
        "SubscriptionPastDue",
        "PaymentFailed",
        "PaymentFailed",
        "PaymentFailed",
        "SubscriptionCanceled",
        "InvoiceVoided",
    ]


async def test_cancel_for_nonpayment_voids_the_rest_as_a_customer_cancel_does(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    """One void rule: the other OPEN invoice's consumed credit goes back, its lease is cleared."""
    sub, (inv, other) = await setup(engine, invoices=2)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE invoice SET subtotal = 990, credit_applied = 300, amount = 690,"
                " leased_at = :now WHERE id = :i"
            ),
            {"i": other, "now": NOW},
        )
        await conn.execute(
            text(
                "INSERT INTO credit_entry (subscription_id, amount, reason, invoice_id, created_at)"
                " VALUES (:s, 300, 'DOWNGRADE', NULL, :now), (:s, -300, 'INVOICE', :i, :now)"
            ),
            {"s": sub, "i": other, "now": NOW},
        )
        await conn.execute(text("UPDATE invoice SET attempt_count = 3 WHERE id = :i"), {"i": inv})
    assert await record(pool, inv, ChargeOutcome.DECLINED, attempt=3) == RecordOutcome.APPLIED
    voided = await row(engine, "SELECT status, leased_at FROM invoice WHERE id = :i", i=other)
    assert (voided["status"], voided["leased_at"]) == ("VOID", None)
    s = await row(engine, "SELECT status, credit_balance FROM subscription WHERE id = :s", s=sub)
    assert (s["status"], s["credit_balance"]) == ("CANCELED", 300)
    entry = await row(
        engine,
        "SELECT amount, reason FROM credit_entry WHERE invoice_id = :i AND amount > 0",
        i=other,
    )
    assert (entry["amount"], entry["reason"]) == (300, "VOID_REFUND")


async def test_unknown_keeps_the_attempt_count_and_retries_in_15_minutes(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub, (inv,) = await setup(engine)
    assert await record(pool, inv, ChargeOutcome.UNKNOWN, error="timeout") == RecordOutcome.APPLIED
    invoice = await row(engine, "SELECT * FROM invoice WHERE id = :i", i=inv)
    assert invoice["status"] == "OPEN" and invoice["attempt_count"] == 0
    assert invoice["next_attempt_at"] == NOW + timedelta(minutes=15)
    assert await events(engine, sub) == []


async def test_success_for_a_paid_invoice_changes_nothing(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub, (inv,) = await setup(engine)
    await record(pool, inv, ChargeOutcome.SUCCESS)
    later = NOW + timedelta(minutes=5)
    assert (
        await record(pool, inv, ChargeOutcome.SUCCESS, source="WEBHOOK", now=later)
        == RecordOutcome.ALREADY_SETTLED
    )
    assert (await row(engine, "SELECT paid_at FROM invoice WHERE id = :i", i=inv))["paid_at"] == NOW
    assert await events(engine, sub) == ["InvoicePaid"]
    count = await row(
        engine, "SELECT count(*) AS n FROM payment_attempt WHERE invoice_id = :i", i=inv
    )
    assert count["n"] == 2  # both results kept in the audit trail


async def test_an_older_attempts_decline_never_rolls_back(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    _sub, (inv,) = await setup(engine)
    await record(pool, inv, ChargeOutcome.DECLINED, attempt=0)
    assert (
        await record(pool, inv, ChargeOutcome.DECLINED, attempt=0, source="WEBHOOK")
        == RecordOutcome.STALE_ATTEMPT
    )
    invoice = await row(engine, "SELECT attempt_count FROM invoice WHERE id = :i", i=inv)
    assert invoice["attempt_count"] == 1


async def test_success_after_a_decline_reactivates_the_subscription(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub, (inv,) = await setup(engine)
    await record(pool, inv, ChargeOutcome.DECLINED, attempt=0)
    assert await record(pool, inv, ChargeOutcome.SUCCESS, attempt=1) == RecordOutcome.APPLIED
    s = await row(engine, "SELECT status FROM subscription WHERE id = :s", s=sub)
    assert s["status"] == "ACTIVE"
    assert await events(engine, sub) == [
        "PaymentFailed",
        "SubscriptionPastDue",
        "InvoicePaid",
        "SubscriptionReactivated",
    ]


async def test_success_for_a_void_invoice_is_refunded(engine: AsyncEngine, pool: pg.Pool) -> None:
    sub, (inv,) = await setup(engine)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE invoice SET status = 'VOID' WHERE id = :i"), {"i": inv})
    assert await record(pool, inv, ChargeOutcome.SUCCESS, source="WEBHOOK") == RecordOutcome.REFUND
    assert await events(engine, sub) == []  # PaymentRefunded comes with the gateway's answer
    assert (await row(engine, "SELECT status FROM invoice WHERE id = :i", i=inv))[
        "status"
    ] == "VOID"
    refund = await row(engine, "SELECT * FROM refund WHERE invoice_id = :i", i=inv)
    attempt = await row(engine, "SELECT id FROM payment_attempt WHERE invoice_id = :i", i=inv)
    assert (refund["status"], refund["amount"], refund["reason"], refund["charge_key"]) == (
        "REQUESTED",
        990,
        "charged_closed_invoice",
        idempotency_key(inv, 0),
    )
    assert refund["idempotency_key"] == f"ref-{attempt['id']}"


async def test_unknown_from_a_webhook_is_only_recorded(engine: AsyncEngine, pool: pg.Pool) -> None:
    _sub, (inv,) = await setup(engine)
    assert (
        await record(pool, inv, ChargeOutcome.UNKNOWN, source="WEBHOOK")
        == RecordOutcome.STALE_ATTEMPT
    )
    invoice = await row(engine, "SELECT next_attempt_at FROM invoice WHERE id = :i", i=inv)
    assert invoice["next_attempt_at"] == NOW


async def test_unknown_invoice(pool: pg.Pool) -> None:
    assert await record(pool, 999_999, ChargeOutcome.SUCCESS) == RecordOutcome.NOT_FOUND


async def test_webhook_racing_the_collector_settles_once(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    subs_and_invoices = [await setup(engine) for _ in range(20)]
    for sub, (inv,) in subs_and_invoices:
        results = await asyncio.gather(
            record(pool, inv, ChargeOutcome.SUCCESS, source="COLLECTOR"),
            record(pool, inv, ChargeOutcome.SUCCESS, source="WEBHOOK"),
        )
        assert sorted(results) == sorted([RecordOutcome.APPLIED, RecordOutcome.ALREADY_SETTLED])
        assert await events(engine, sub) == ["InvoicePaid"]


async def test_uncertain_answers_past_the_bound_hold_the_invoice_for_reconciliation(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    """The key's history comes from the payment_attempt rows: the 3rd UNKNOWN of one key stops
    the retries (a retry after the gateway forgot the key could charge again)."""
    sub, (inv,) = await setup(engine)
    bounded = DunningPolicy(unknown_max_retries=3)
    now = NOW
    for n in range(3):
        async with pg.transaction(pool) as conn:
            outcome = await record_charge_result(
                conn,
                invoice_id=inv,
                attempt_number=0,
                outcome=ChargeOutcome.UNKNOWN,
                source="COLLECTOR",
                idempotency_key=idempotency_key(inv, 0),
                now=now,
                rng=random.Random(1),
                policy=bounded,
                error="timeout",
            )
        invoice = await row(engine, "SELECT * FROM invoice WHERE id = :i", i=inv)
        if n < 2:
            assert outcome == RecordOutcome.APPLIED
            assert invoice["next_attempt_at"] == now + bounded.unknown_retry
            now = invoice["next_attempt_at"]
    assert outcome == RecordOutcome.RECONCILIATION
    assert (invoice["status"], invoice["next_attempt_at"], invoice["attempt_count"]) == (
        "OPEN",
        None,
        0,
    )
    assert await events(engine, sub) == ["PaymentReconciliationNeeded"]
    # Another key (a later attempt) starts its own count.
    async with engine.connect() as conn:
        unknowns = (
            await conn.execute(
                text("SELECT count(*) FROM payment_attempt WHERE invoice_id = :i"), {"i": inv}
            )
        ).scalar_one()
    assert unknowns == 3
