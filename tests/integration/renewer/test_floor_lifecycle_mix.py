"""The renewer benchmark's floor does the renewer's work on the seeded lifecycle mix: the same
backlog (taxed half, trials ending, paused periods, plan changes scheduled for the period end)
renewed once by the one-statement floor and once by the renewer's batch gives the same
subscriptions, invoices, lines and events; the floor's payloads match their published schemas."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import jsonschema
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.renewer_sql import floor_batch
from billing_core.seeding import SeedSpec, seed_lifecycle_mix, seed_subscriptions, seed_tax_mix
from billing_core.usecases.renew import renew_due_batch
from tests.support.db import truncate_all
from tests.unit.test_event_contracts import ROOT

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
COUNT = 240


async def _seed(pg: asyncpg.Connection) -> None:
    await seed_subscriptions(
        pg,
        SeedSpec(count=COUNT, due_from=NOW - timedelta(hours=2), due_window=timedelta(hours=1)),
    )
    await seed_tax_mix(pg, share=0.5)
    mix = await seed_lifecycle_mix(pg, trial_share=0.2, pause_share=0.2, scheduled_change_share=0.2)
    assert mix.trials > 20 and mix.pauses > 20 and mix.scheduled_changes > 10, mix


async def _outcome(engine: AsyncEngine) -> dict[str, Any]:
    """Every subscription, invoice, line and event, keyed so two runs compare (no invoice or
    event ids: they are drawn from sequences)."""
    queries = {
        "subscriptions": "SELECT id, status, plan_id, scheduled_plan_id, period_index, "
        "current_period_start, current_period_end, event_seq, pause_behavior, trial_end "
        "FROM subscription ORDER BY id",
        "invoices": "SELECT subscription_id, period_index, period_start, period_end, subtotal, "
        "credit_applied, amount, currency, status, next_attempt_at, paid_at, closed_at "
        "FROM invoice ORDER BY subscription_id, period_index",
        "lines": "SELECT i.subscription_id, l.line_no, l.kind, l.description, l.quantity, "
        "l.unit_amount, l.amount, l.period_start, l.period_end, l.tax_inclusive "
        "FROM invoice_line l JOIN invoice i ON i.id = l.invoice_id "
        "ORDER BY i.subscription_id, l.line_no",
        "events": "SELECT aggregate_id, sequence, event_type, payload - 'invoiceId' AS payload "
        "FROM outbox_event ORDER BY aggregate_id, sequence",
    }
    async with engine.connect() as conn:
        return {
            name: [tuple(r) for r in await conn.execute(text(sql))] for name, sql in queries.items()
        }


async def test_the_floor_renews_the_lifecycle_mix_as_the_renewer_does(
    engine: AsyncEngine, pg: asyncpg.Connection, database_url: str
) -> None:
    await _seed(pg)
    written = await floor_batch(pg, now=NOW, batch_size=1000)
    assert written == COUNT
    by_floor = await _outcome(engine)
    async with engine.connect() as conn:
        payloads = (
            await conn.execute(text("SELECT event_type, payload::text FROM outbox_event"))
        ).all()

    await truncate_all(database_url)
    await _seed(pg)
    async with pg.transaction():
        result = await renew_due_batch(pg, now=NOW, batch_size=1000)
    assert result.invoices_created == COUNT
    by_renewer = await _outcome(engine)

    for part in ("subscriptions", "invoices", "lines", "events"):
        assert by_floor[part] == by_renewer[part], part
    kinds = Counter(event_type for event_type, _ in payloads)
    statuses = Counter(invoice[8] for invoice in by_floor["invoices"])
    assert kinds["SubscriptionTrialEnded"] > 20 and kinds["SubscriptionPlanChanged"] > 10
    assert kinds["InvoiceVoided"] == statuses["VOID"] > 5 and statuses["DRAFT"] > 5
    assert all(s[1] == "ACTIVE" and s[3] is None for s in by_floor["subscriptions"])
    for event_type, payload in payloads:
        schema = json.loads((ROOT / f"docs/schemas/events/{event_type}.v1.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(json.loads(payload))
