"""The one writer of ``audit_event``: a single entry and a set of rows read from a relation of
a caller's statement are written by the same INSERT, with the same values."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from billing_core.db import pg
from billing_core.repo import audit

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
COLUMNS = (
    "occurred_at, source, client_id, action, subject_type, subject_id, version_before, "
    "version_after, request_id, detail"
)


async def _rows(pool: pg.Pool) -> list[tuple[Any, ...]]:
    async with pool.acquire() as conn:
        found = await conn.fetch(f"SELECT {COLUMNS} FROM audit_event ORDER BY id")
        return [tuple(r) for r in found]


async def test_an_entry_and_rows_of_a_relation_are_written_alike(pool: pg.Pool) -> None:
    entries = [
        audit.AuditEntry(
            audit.Actor.cli(),
            audit.SUBSCRIPTION_CANCEL,
            audit.SUBSCRIPTION,
            subject,
            version_before=subject,
            version_after=subject + 1,
            detail={"reason": "customer_request", "n": subject},
        )
        for subject in (41, 42)
    ]
    async with pg.transaction(pool) as conn:
        for entry in entries:
            await audit.record(conn, entry, now=NOW)
    recorded = await _rows(pool)
    async with pg.transaction(pool) as conn:
        await conn.execute("DELETE FROM audit_event")
        relation = """
            WITH r AS (
                SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:details AS text[]))
                    AS r(id, detail)
            )
        """
        values = {
            "occurred_at": ":at",
            "source": "'CLI'",
            "client_id": "NULL",
            "action": ":action",
            "subject_type": ":subject_type",
            "subject_id": "r.id",
            "version_before": "r.id",
            "version_after": "r.id + 1",
            "request_id": "NULL",
            "detail": "r.detail",
        }
        await pg.execute(
            conn,
            pg.Statement(relation + audit.insert_select_sql(values, rows="r")),
            {
                "ids": [e.subject_id for e in entries],
                "details": [audit.parameters(e, NOW)["detail"] for e in entries],
                "at": NOW,
                "action": audit.SUBSCRIPTION_CANCEL,
                "subject_type": audit.SUBSCRIPTION,
            },
        )
    assert await _rows(pool) == recorded
    assert json.loads(recorded[0][-1]) == {"reason": "customer_request", "n": 41}
