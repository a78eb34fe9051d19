"""The ``webhook_event`` table: each gateway event id is processed once."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

_RECORD = text(
    """
    INSERT INTO webhook_event (event_id, event_type, invoice_id, payload, received_at)
    VALUES (:event_id, :event_type, :invoice_id, CAST(:payload AS jsonb), :received_at)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id
    """
)


async def record_once(
    session: AsyncSession,
    *,
    event_id: str,
    event_type: str,
    invoice_id: int | None,
    payload: dict[str, Any],
    received_at: datetime,
) -> bool:
    """Insert the event; False when it was seen before (a concurrent duplicate waits for the
    first delivery's transaction, then sees the row)."""
    result = await session.execute(
        _RECORD,
        {
            "event_id": event_id,
            "event_type": event_type,
            "invoice_id": invoice_id,
            "payload": json.dumps(payload, separators=(",", ":")),
            "received_at": received_at,
        },
    )
    return result.first() is not None
