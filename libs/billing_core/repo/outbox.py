"""Writing events to the transactional outbox, in the caller's transaction.

Each event gets the next per-subscription sequence number from ``subscription.event_seq``. The
UPDATE that hands the numbers out takes the subscription's row lock, so two transactions that
emit events for one subscription are serialised: sequence order is commit order, which is what
lets the relay publish one subscription's events in order.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.domain.events import DomainEvent

_APPEND = text(
    """
    WITH ev AS (
        SELECT * FROM unnest(
            CAST(:aggregate_ids AS bigint[]), CAST(:types AS text[]),
            CAST(:payloads AS jsonb[]), CAST(:event_ids AS uuid[])
        ) WITH ORDINALITY AS e(aggregate_id, event_type, payload, event_id, ord)
    ),
    counts AS (SELECT aggregate_id, count(*) AS n FROM ev GROUP BY aggregate_id),
    bumped AS (
        UPDATE subscription s SET event_seq = s.event_seq + c.n
        FROM counts c WHERE s.id = c.aggregate_id
        RETURNING s.id, s.event_seq - c.n AS base
    )
    INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, occurred_at)
    SELECT ev.event_id, ev.aggregate_id,
           b.base + row_number() OVER (PARTITION BY ev.aggregate_id ORDER BY ev.ord),
           ev.event_type, ev.payload, :occurred_at
    FROM ev JOIN bumped b ON b.id = ev.aggregate_id
    """
)


async def append_events(
    db: AsyncSession | AsyncConnection, events: Sequence[DomainEvent], occurred_at: datetime
) -> list[uuid.UUID]:
    """Insert ``events`` (any number of subscriptions) in one statement; return their ids."""
    if not events:
        return []
    if occurred_at.tzinfo is None:
        raise ValueError("occurred_at must be timezone-aware")
    event_ids = [uuid.uuid4() for _ in events]
    await db.execute(
        _APPEND,
        {
            "aggregate_ids": [e.subscription_id for e in events],
            "types": [str(e.type) for e in events],
            "payloads": [json.dumps(e.payload, separators=(",", ":")) for e in events],
            "event_ids": event_ids,
            "occurred_at": occurred_at,
        },
    )
    return event_ids
