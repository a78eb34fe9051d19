"""Payloads built in SQL (the renewer benchmark's one-statement floor) have the published shape:
the same JSON the InvoiceCreated model writes, and valid against its checked-in schema; and the
comparison points write the same line items as the renewer (each invoice the sum of its lines)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import asyncpg
import jsonschema
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.renewer_sql import floor_batch, row_by_row_batch
from billing_core.domain import events as ev
from billing_core.domain.renewal import RenewalInvoice
from billing_core.invariants.lines import check_lines
from tests.integration.renewer.support import create_subscription
from tests.unit.test_event_contracts import ROOT

ANCHOR = datetime(2026, 10, 31, 9, 15, 30, 250000, tzinfo=UTC)  # microseconds on purpose
NOW = datetime(2026, 12, 5, tzinfo=UTC)


async def _renew_with(engine: AsyncEngine, database_url: str, batch: object) -> None:
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await batch(conn, now=NOW, batch_size=10)  # type: ignore[operator]
    finally:
        await conn.close()


async def _payloads_and_invoices(engine: AsyncEngine) -> list[tuple[str, ev.DomainEvent]]:
    """Each stored payload's text, and the event the model builds from its invoice row."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT o.payload::text AS payload, i.* FROM outbox_event o "
                    "JOIN invoice i ON i.id = CAST(o.payload ->> 'invoiceId' AS bigint)"
                )
            )
        ).all()
    found = []
    for r in rows:
        m = r._mapping
        invoice = RenewalInvoice(
            m["subscription_id"],
            m["customer_id"],
            m["period_index"],
            m["period_start"],
            m["period_end"],
            m["subtotal"],
            m["credit_applied"],
            m["amount"],
            m["currency"],
            m["status"],
            m["next_attempt_at"],
            m["paid_at"],
        )
        found.append((m["payload"], ev.invoice_created(invoice, m["id"], m["kind"])))
    return found


async def _check(engine: AsyncEngine, expected: int) -> None:
    schema = json.loads((ROOT / "docs/schemas/events/InvoiceCreated.v1.json").read_text())
    found = await _payloads_and_invoices(engine)
    assert len(found) == expected
    for stored, built in found:
        jsonschema.Draft202012Validator(schema).validate(json.loads(stored))
        assert json.loads(stored) == built.payload
    async with engine.connect() as conn:
        lines = await check_lines(conn)
    assert lines.checked == expected and lines.ok, lines.violations


async def test_the_set_based_floor_writes_invoice_created_in_the_published_shape(
    engine: AsyncEngine, database_url: str
) -> None:
    for tz in ("UTC", "Europe/Paris", "America/New_York"):
        await create_subscription(engine, anchor=ANCHOR, time_zone=tz, period_index=0)
    await _renew_with(engine, database_url, floor_batch)
    await _check(engine, 3)


async def test_the_row_by_row_comparison_writes_the_same_shape(
    engine: AsyncEngine, database_url: str
) -> None:
    await create_subscription(engine, anchor=ANCHOR, time_zone="Europe/Paris", period_index=0)
    await _renew_with(engine, database_url, row_by_row_batch)
    await _check(engine, 1)
