"""Every claim refuses a batch of zero or fewer rows with a clear error, before any SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from billing_core.db import pg
from billing_core.repo import collection, outbox_publishing, renewal

NOW = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize("limit", [0, -1])
async def test_claims_refuse_a_non_positive_limit(pool: pg.Pool, limit: int) -> None:
    async with pool.acquire() as conn:
        claims = [
            renewal.claim_due(conn, now=NOW, limit=limit),
            collection.claim_due_invoices(conn, now=NOW, limit=limit, lease=timedelta(minutes=5)),
            outbox_publishing.claim(conn, shards=4, owned=[0, 1], limit=limit),
            outbox_publishing.prune(conn, cutoff=NOW, shards=4, owned=[0], limit=limit),
        ]
        for claim in claims:
            with pytest.raises(ValueError, match=f"at least one row, not {limit}"):
                await claim
        # Nothing reached PostgreSQL: the connection is still usable, no aborted transaction.
        assert await conn.fetchval("SELECT 1") == 1
