"""SQL of the automatic resumes: claim the paused subscriptions whose ``pause_resumes_at`` has
come and clear their pause (set-based, in the caller's transaction; never commits)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from billing_core.db import pg
from billing_core.db.arrays import int_array
from billing_core.db.pg import Connection, Statement
from billing_core.repo.limits import require_positive_limit

# Uses idx_sub_pause_resumes. An ACTIVE subscription whose periods starting before resumesAt
# are not all renewed yet waits for the renewer (they are paused periods); a PAST_DUE one is
# not renewed until it pays, so it resumes at resumesAt (its dunning goes on).
_CLAIM = Statement(
    """
    SELECT id, paused_at, pause_resumes_at AS resumes_at
    FROM subscription
    WHERE pause_resumes_at IS NOT NULL AND pause_resumes_at <= :now
      AND status <> 'CANCELED'
      AND (status <> 'ACTIVE' OR current_period_end >= pause_resumes_at)
    ORDER BY pause_resumes_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
    """
)

_MARK = Statement(
    """
    UPDATE subscription s
    SET pause_behavior = NULL, paused_at = NULL, pause_resumes_at = NULL,
        version = s.version + 1, updated_at = :now, event_seq = s.event_seq + 1
    FROM unnest(CAST(:ids AS text)::bigint[]) AS u(id)
    WHERE s.id = u.id AND s.pause_resumes_at <= :now
    RETURNING s.id, s.event_seq - 1 AS reserved_after
    """
)


@dataclass(frozen=True, slots=True)
class DueResume:
    id: int
    paused_at: datetime
    resumes_at: datetime


async def claim_due_resumes(conn: Connection, *, now: datetime, limit: int) -> list[DueResume]:
    """Lock up to ``limit`` paused subscriptions due to resume at ``now``, soonest first."""
    require_positive_limit(limit)
    rows = await pg.fetch(conn, _CLAIM, {"now": now, "limit": limit})
    return [DueResume(**row) for row in rows]


async def mark_resumed(conn: Connection, ids: Sequence[int], *, now: datetime) -> dict[int, int]:
    """Clear the pauses of ``ids`` (a version bump, one event sequence number reserved each);
    return each id's ``event_seq`` before the reservation."""
    if not ids:
        return {}
    rows = await pg.fetch(conn, _MARK, {"ids": int_array(ids), "now": now})
    return {int(row["id"]): int(row["reserved_after"]) for row in rows}
