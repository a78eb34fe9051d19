"""SQL of the trial notices: claim the trials whose SubscriptionTrialWillEnd is due and mark
them sent (set-based, in the caller's transaction; never commits)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from billing_core.db import pg
from billing_core.db.arrays import int_array
from billing_core.db.pg import Connection, Statement
from billing_core.repo.limits import require_positive_limit

# Uses idx_sub_trial_will_end (current_period_end WHERE status = 'TRIALING' AND
# trial_will_end_sent_at IS NULL): a trial's current period ends with the trial.
_CLAIM_SQL = """
    SELECT id, current_period_end AS trial_end, version
    FROM subscription
    WHERE status = 'TRIALING' AND trial_will_end_sent_at IS NULL
      AND current_period_end <= :horizon
    ORDER BY current_period_end
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
"""
_CLAIM = Statement(_CLAIM_SQL)

# The same claim for one subscription (a plan change catching up a trial that is over): it locks
# the row and waits for a renewer that holds it.
_CLAIM_ONE = Statement(
    _CLAIM_SQL.replace("ORDER BY", "AND id = :only\n    ORDER BY").replace(
        "FOR UPDATE SKIP LOCKED", "FOR UPDATE"
    )
)

_MARK = Statement(
    """
    UPDATE subscription s
    SET trial_will_end_sent_at = :now, version = s.version + 1, updated_at = :now,
        event_seq = s.event_seq + 1
    FROM unnest(CAST(:ids AS text)::bigint[]) AS u(id)
    WHERE s.id = u.id AND s.status = 'TRIALING' AND s.trial_will_end_sent_at IS NULL
    RETURNING s.id, s.event_seq - 1 AS reserved_after
    """
)


@dataclass(frozen=True, slots=True)
class TrialEnding:
    id: int
    trial_end: datetime
    version: int


async def claim_due_notices(
    conn: Connection, *, horizon: datetime, limit: int, only_id: int | None = None
) -> list[TrialEnding]:
    """Lock up to ``limit`` TRIALING subscriptions whose trial ends by ``horizon`` and whose
    notice is not written yet, soonest first (``SKIP LOCKED``: replicas take disjoint sets;
    ``only_id``: just that one, waiting for its lock)."""
    require_positive_limit(limit)
    if only_id is None:
        rows = await pg.fetch(conn, _CLAIM, {"horizon": horizon, "limit": limit})
    else:
        rows = await pg.fetch(
            conn, _CLAIM_ONE, {"horizon": horizon, "limit": limit, "only": only_id}
        )
    return [TrialEnding(**row) for row in rows]


async def mark_sent(conn: Connection, ids: Sequence[int], *, now: datetime) -> dict[int, int]:
    """Mark the notices of ``ids`` written at ``now`` (a version bump, and one event sequence
    number reserved each); return each id's ``event_seq`` before the reservation."""
    if not ids:
        return {}
    rows = await pg.fetch(conn, _MARK, {"ids": int_array(ids), "now": now})
    return {int(row["id"]): int(row["reserved_after"]) for row in rows}
