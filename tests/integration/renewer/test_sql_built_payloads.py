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
from billing_core.db import pg
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
                    "SELECT o.payload::text AS payload, i.*, (SELECT coalesce(sum(amount), 0) "
                    "FROM invoice_line l WHERE l.invoice_id = i.id AND l.kind = 'TAX') AS tax "
                    "FROM outbox_event o "
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
        found.append((m["payload"], ev.invoice_created(invoice, m["id"], m["kind"], int(m["tax"]))))
    return found


async def _check(pool: pg.Pool, engine: AsyncEngine, expected: int) -> None:
    schema = json.loads((ROOT / "docs/schemas/events/InvoiceCreated.v1.json").read_text())
    found = await _payloads_and_invoices(engine)
    assert len(found) == expected
    for stored, built in found:
        jsonschema.Draft202012Validator(schema).validate(json.loads(stored))
        assert json.loads(stored) == built.payload
    async with pool.acquire() as conn:
        lines = await check_lines(conn)
    assert lines.checked == expected and lines.ok, lines.violations


async def test_the_set_based_floor_writes_invoice_created_in_the_published_shape(
    pool: pg.Pool, engine: AsyncEngine, database_url: str
) -> None:
    subs = [
        await create_subscription(engine, anchor=ANCHOR, time_zone=tz, period_index=0)
        for tz in ("UTC", "Europe/Paris", "America/New_York", "UTC")
    ]
    async with engine.begin() as conn:  # taxed as the renewer taxes: inside, on top, none
        await conn.execute(
            text(
                "INSERT INTO tax_rate (country, region, rate_ppm, inclusive, name) VALUES "
                "('FR', '', 200000, true, 'VAT'), ('US', 'NY', 88750, false, 'Sales tax')"
            )
        )
        for sub, (country, region) in zip(
            subs, (("FR", ""), ("US", "NY"), ("DE", "")), strict=False
        ):
            await conn.execute(
                text("INSERT INTO subscription_tax_location VALUES (:s, :c, :r, now())"),
                {"s": sub, "c": country, "r": region},
            )
    await _renew_with(engine, database_url, floor_batch)
    await _check(pool, engine, 4)
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT i.subscription_id, l.kind, l.description, l.amount, l.tax_inclusive "
                "FROM invoice_line l JOIN invoice i ON i.id = l.invoice_id "
                "ORDER BY i.subscription_id, l.line_no"
            )
        )
        lines = [tuple(r) for r in rows]
    # What billing_core.domain.tax gives for PRO_MONTHLY (2990) at these rates.
    assert lines == [
        (subs[0], "PLAN_PERIOD", "Plan PRO_MONTHLY", 2492, None),
        (subs[0], "TAX", "VAT 20% (FR)", 498, True),
        (subs[1], "PLAN_PERIOD", "Plan PRO_MONTHLY", 2990, None),
        (subs[1], "TAX", "Sales tax 8.875% (US-NY)", 265, False),
        (subs[2], "PLAN_PERIOD", "Plan PRO_MONTHLY", 2990, None),
        (subs[3], "PLAN_PERIOD", "Plan PRO_MONTHLY", 2990, None),
    ]


async def test_the_row_by_row_comparison_writes_the_same_shape(
    pool: pg.Pool, engine: AsyncEngine, database_url: str
) -> None:
    await create_subscription(engine, anchor=ANCHOR, time_zone="Europe/Paris", period_index=0)
    await _renew_with(engine, database_url, row_by_row_batch)
    await _check(pool, engine, 1)
