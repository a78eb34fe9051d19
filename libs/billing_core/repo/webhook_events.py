"""The ``webhook_event`` table: each gateway event id is processed once."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from billing_core.db.arrays import json_array, json_elements_sql, nullable_int_array, text_array
from billing_core.db.pg import Connection, Statement, fetch


@dataclass(frozen=True)
class ReceivedEvent:
    event_id: str
    event_type: str
    invoice_id: int | None
    payload: dict[str, Any]


_RECORD_MANY = Statement(
    f"""
    INSERT INTO webhook_event (event_id, event_type, invoice_id, payload, received_at)
    SELECT e.event_id, e.event_type, e.invoice_id, e.payload, :received_at
    FROM unnest(
        CAST(:event_ids AS text)::text[], CAST(:event_types AS text)::text[],
        CAST(:invoice_ids AS text)::bigint[], {json_elements_sql(":payloads")}
    ) WITH ORDINALITY AS e(event_id, event_type, invoice_id, payload, n)
    ORDER BY e.n
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id
    """
)


async def record_many(
    conn: Connection,
    events: Sequence[ReceivedEvent],
    *,
    received_at: datetime,
) -> set[str]:
    """Insert the events (distinct ids) in one statement; the ids seen for the first time (a
    concurrent duplicate waits for the first delivery's transaction, then sees the row)."""
    if not events:
        return set()
    rows = await fetch(
        conn,
        _RECORD_MANY,
        {
            "event_ids": text_array([e.event_id for e in events]),
            "event_types": text_array([e.event_type for e in events]),
            "invoice_ids": nullable_int_array(e.invoice_id for e in events),
            "payloads": json_array(json.dumps(e.payload, separators=(",", ":")) for e in events),
            "received_at": received_at,
        },
    )
    return {str(r["event_id"]) for r in rows}
