"""The one outbox writer: every way in numbers a subscription's events gap-free and in order,
with each event's schema version, and embeds in another statement on either driver."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.domain import events
from billing_core.repo import outbox
from tests.integration.relay.helpers import create_subscriptions

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


async def _rows(engine: AsyncEngine, sub: int) -> list[tuple[int, str, int]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT sequence, event_type, schema_version FROM outbox_event"
                " WHERE aggregate_id = :s ORDER BY sequence"
            ),
            {"s": sub},
        )
        return [(int(s), str(t), int(v)) for s, t, v in rows.all()]


async def test_append_then_reserved_numbers_continue_one_gap_free_sequence(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    a, b = await create_subscriptions(engine, 2)
    async with pg.transaction(pool) as conn:
        await outbox.append_events(
            conn,
            [
                events.invoice_paid(a, 1, 100, "USD", NOW),
                events.invoice_paid(b, 2, 100, "USD", NOW),
                events.subscription_canceled(a, "customer_request", NOW),
            ],
            NOW,
        )
        bases = await conn.fetch(
            "UPDATE subscription SET event_seq = event_seq + 1 WHERE id = ANY($1::bigint[])"
            " RETURNING id, event_seq - 1",
            [a, b],
        )
        reserved = {int(i): int(base) for i, base in bases}
        await outbox.insert_numbered_events(
            conn,
            [
                events.invoice_paid(b, 3, 100, "USD", NOW),
                events.invoice_paid(a, 4, 100, "USD", NOW),
            ],
            reserved,
            NOW,
        )
    assert await _rows(engine, a) == [
        (1, "InvoicePaid", 1),
        (2, "SubscriptionCanceled", 1),
        (3, "InvoicePaid", 1),
    ]
    assert await _rows(engine, b) == [(1, "InvoicePaid", 1), (2, "InvoicePaid", 1)]


async def test_the_insert_embeds_in_a_driver_statement_numbered_from_a_new_subscriptions_base(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    (sub,) = await create_subscriptions(engine, 1)
    statement = pg.Statement(
        f"""
        WITH base AS (SELECT CAST(:sub AS bigint) AS id, 0::bigint AS base,
                             CAST(:at AS timestamptz) AS at),
        ev AS ({outbox.insert_sql(bases="base", occurred_at="b.at")} RETURNING sequence)
        SELECT count(*) FROM ev
        """
    )
    new = [
        events.subscription_canceled(sub, "customer_request", NOW),
        events.invoice_paid(sub, 9, 100, "USD", NOW),
    ]
    async with pg.transaction(pool) as conn:
        params = {**outbox.event_parameters(new), "sub": sub, "at": NOW}
        written = await pg.fetchval(conn, statement, params)
    assert written == 2
    assert await _rows(engine, sub) == [(1, "SubscriptionCanceled", 1), (2, "InvoicePaid", 1)]


async def test_events_without_reserved_numbers_are_refused(
    pool: pg.Pool, engine: AsyncEngine
) -> None:
    (sub,) = await create_subscriptions(engine, 1)
    async with pg.transaction(pool) as conn:
        with pytest.raises(KeyError):
            await outbox.insert_numbered_events(
                conn, [events.invoice_paid(sub, 1, 100, "USD", NOW)], {}, NOW
            )
    assert await _rows(engine, sub) == []
