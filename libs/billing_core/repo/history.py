"""A subscription's timeline: its API changes (``audit_event``), invoices, payment attempts and
events, oldest first, in one statement (each part reads an index on the subscription)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from billing_core.db import pg
from billing_core.db.pg import Connection, Statement


@dataclass(frozen=True)
class HistoryRow:
    at: datetime
    kind: str  # api | invoice | payment_attempt | event
    what: str
    client_id: int | None
    request_id: str | None
    version_before: int | None
    version_after: int | None
    ref: str
    detail: dict[str, Any]


_HISTORY = Statement(
    """
SELECT at, kind, what, client_id, request_id, version_before, version_after, ref, detail
FROM (
    SELECT occurred_at AS at, 'api' AS kind, action::text AS what, client_id, request_id,
        version_before, version_after, id::text AS ref, detail, 0 AS rank, id AS seq
    FROM audit_event WHERE subject_type = 'subscription' AND subject_id = :id
    UNION ALL
    SELECT created_at, 'invoice', kind || ' ' || status, NULL, NULL, NULL, NULL, id::text,
        jsonb_build_object('amount', amount, 'currency', currency,
            'periodIndex', period_index, 'periodStart', period_start, 'periodEnd', period_end,
            'attemptCount', attempt_count, 'paidAt', paid_at, 'closedAt', closed_at),
        1, id
    FROM invoice WHERE subscription_id = :id
    UNION ALL
    SELECT pa.recorded_at, 'payment_attempt', pa.source || ' ' || pa.outcome, NULL, NULL, NULL,
        NULL, pa.id::text,
        jsonb_build_object('invoiceId', pa.invoice_id, 'attempt', pa.attempt_number,
            'amount', pa.amount, 'currency', pa.currency, 'declineCode', pa.decline_code,
            'idempotencyKey', pa.idempotency_key),
        2, pa.id
    FROM payment_attempt pa JOIN invoice i ON i.id = pa.invoice_id
    WHERE i.subscription_id = :id
    UNION ALL
    SELECT occurred_at, 'event', event_type::text, NULL, NULL, NULL, NULL, event_id::text,
        jsonb_build_object('sequence', sequence, 'publishedAt', published_at),
        3, sequence
    FROM outbox_event WHERE aggregate_id = :id
) h
ORDER BY at, rank, seq
LIMIT :limit
"""
)


async def for_subscription(
    conn: Connection, subscription_id: int, *, limit: int
) -> list[HistoryRow]:
    rows = await pg.fetch(conn, _HISTORY, {"id": subscription_id, "limit": limit})
    return [HistoryRow(**{**row, "detail": dict(json.loads(row["detail"]))}) for row in rows]
