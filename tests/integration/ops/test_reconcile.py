"""``billing reconcile`` on the test database: what needs a person, and resolving an item."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.domain.charge_result import ChargeOutcome, idempotency_key
from billing_core.domain.dunning import DunningPolicy
from billing_core.domain.refund import RefundAnswer, RefundOutcome
from billing_core.repo.refunds import claim_due_refunds
from billing_core.usecases.payment_result import RecordOutcome, record_charge_result
from billing_core.usecases.refunds import record_refund_answer
from tests.support.factories import create_invoice, create_subscription
from tests.support.processes import ROOT

NOW = datetime(2026, 12, 5, 8, tzinfo=UTC)


async def billing(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400", "BILLING_LOG_JSON": "false"}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "services.cli", "reconcile", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def an_invoice(pool: pg.Pool, customer: int, status: str = "OPEN") -> int:
    """An invoice of ``customer`` whose attempt 0 the collector sent (it is leased)."""
    async with pg.transaction(pool) as conn:
        sub = await create_subscription(conn, customer_id=customer, start=NOW)
        invoice = await create_invoice(
            conn,
            subscription_id=sub,
            customer_id=customer,
            amount=990,
            next_attempt_at=NOW,
            period_start=NOW,
            status=status,
        )
        await conn.execute("UPDATE invoice SET leased_at = $1 WHERE id = $2", NOW, invoice)
        return invoice


async def record(pool: pg.Pool, invoice_id: int, **kw: object) -> RecordOutcome:
    if kw.get("source") == "WEBHOOK":  # a webhook says what was charged (to whom: customer_id)
        kw = {"amount": 990, "currency": "EUR", **kw}
    async with pg.transaction(pool) as conn:
        return await record_charge_result(
            conn,
            invoice_id=invoice_id,
            attempt_number=0,
            idempotency_key=idempotency_key(invoice_id, 0),
            now=NOW,
            rng=random.Random(1),
            policy=DunningPolicy(),
            **kw,  # type: ignore[arg-type]
        )


async def test_lists_what_needs_a_person_and_resolves_an_item_with_an_audit(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    assert "nothing needs a person" in (await billing()).stdout

    mismatched = await an_invoice(pool, 11)
    got = await record(
        pool,
        mismatched,
        outcome=ChargeOutcome.SUCCESS,
        source="WEBHOOK",
        amount=1,
        customer_id=11,
        gateway_reference="ch_forged",
    )
    assert got == RecordOutcome.MISMATCH
    rejected = await an_invoice(pool, 12)
    got = await record(
        pool,
        rejected,
        outcome=ChargeOutcome.UNKNOWN,
        source="COLLECTOR",
        error="http 422: amount exceeds the card's limit",
        rejected_because="http 422: amount exceeds the card's limit",
    )
    assert got == RecordOutcome.RECONCILIATION
    closed = await an_invoice(pool, 13, status="VOID")
    got = await record(
        pool,
        closed,
        outcome=ChargeOutcome.SUCCESS,
        source="WEBHOOK",
        customer_id=13,
        gateway_reference="ch_9",
    )
    assert got == RecordOutcome.REFUND
    async with pg.transaction(pool) as conn:
        (refund,) = await claim_due_refunds(conn, now=NOW, limit=5, lease=timedelta(minutes=2))
        await record_refund_answer(
            conn,
            refund.id,
            RefundAnswer(RefundOutcome.FAILED, error="http 404: No charge 'ch_9'"),
            now=NOW,
            policy=DunningPolicy(unknown_retry=timedelta(minutes=1), unknown_max_retries=3),
        )

    listed = await billing()
    assert listed.returncode == 0, listed.stderr
    out = listed.stdout
    for invoice_id in (mismatched, rejected, closed):
        assert f"│ {invoice_id} " in out, out
    assert "report_mismatch" in out and "amount 1 is not the invoice's 990" in out
    assert "gateway_rejected" in out and "amount exceeds the card's limit" in out
    assert "refund_failed" in out and "No charge 'ch_9'" in out
    assert "ch_forged" in out

    async with engine.connect() as conn:
        items = dict(
            (await conn.execute(text("SELECT invoice_id, id FROM reconciliation_item"))).all()
        )
    item = items[mismatched]
    missing_note = await billing("--resolve", str(item))
    assert missing_note.returncode != 0
    done = await billing("--resolve", str(item), "--note", "forged report, ignored", "--by", "ops")
    assert done.returncode == 0, done.stderr
    assert f"item {item} resolved" in done.stdout
    again = await billing("--resolve", str(item), "--note", "twice", "--by", "ops")
    assert again.returncode == 1
    assert f"no open item {item}" in again.stderr

    async with engine.connect() as conn:
        audit = (
            (
                await conn.execute(
                    text(
                        "SELECT resolved_by, resolution, resolved_at FROM reconciliation_item "
                        "WHERE id = :i"
                    ),
                    {"i": item},
                )
            )
            .mappings()
            .one()
        )
    assert (audit["resolved_by"], audit["resolution"]) == ("ops", "forged report, ignored")
    assert audit["resolved_at"] is not None
    async with engine.connect() as conn:
        trail = (
            (
                await conn.execute(
                    text("SELECT * FROM audit_event WHERE subject_id = :i"), {"i": item}
                )
            )
            .mappings()
            .all()
        )
    assert [(r["source"], r["action"], r["subject_type"], r["detail"]) for r in trail] == [
        (
            "CLI",
            "reconciliation.resolve",
            "reconciliation_item",
            {"by": "ops", "note": "forged report, ignored"},
        )
    ]  # once: the refused second --resolve wrote nothing
    after = (await billing()).stdout
    assert f"│ {mismatched} " not in after
    assert f"│ {rejected} " in after
    everything = (await billing("--all")).stdout
    assert f"│ {mismatched} " in everything and "by ops: forged report, ignored" in everything


async def test_billing_status_counts_refunds_voids_waiting_and_open_items(
    pool: pg.Pool,
) -> None:
    for customer in (21, 22):
        closed = await an_invoice(pool, customer, status="VOID")
        got = await record(
            pool,
            closed,
            outcome=ChargeOutcome.SUCCESS,
            source="WEBHOOK",
            customer_id=customer,
            gateway_reference=f"ch_{customer}",
        )
        assert got == RecordOutcome.REFUND
    async with pg.transaction(pool) as conn:
        # Leased far ahead: the one left REQUESTED is not due whenever the test runs.
        first, _ = await claim_due_refunds(conn, now=NOW, limit=5, lease=timedelta(days=3650))
        await record_refund_answer(
            conn,
            first.id,
            RefundAnswer(RefundOutcome.FAILED, error="http 422: Not refundable"),
            now=NOW,
            policy=DunningPolicy(unknown_retry=timedelta(minutes=1), unknown_max_retries=3),
        )
    env = {**os.environ, "COLUMNS": "400", "BILLING_LOG_JSON": "false"}
    status = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "services.cli", "status"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert "Refunds and reconciliation" in status.stdout
    # 1 requested (leased by the claim: not due), 0 refunded, 1 failed, 0 voids, 1 open item
    row = next(line for line in status.stdout.splitlines() if "1 (0)" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == ["1 (0)", "0", "1", "0", "1"]
