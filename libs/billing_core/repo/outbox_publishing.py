"""Publishing the outbox (the relay's side of ``outbox_event``): claim, mark, park, prune, stats.

Writing to it is :mod:`billing_core.repo.outbox`. Never commits."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from billing_core.db import pg
from billing_core.db.arrays import int_array, text_array
from billing_core.db.pg import Connection, Statement
from billing_core.repo.limits import require_positive_limit

# Unpublished, unparked rows of the given shards, oldest id first, locked (SKIP LOCKED: a row a
# stale owner still holds is left to it). A row is a candidate only when its predecessor in the
# subscription (sequence - 1) exists and is not parked, or when it is the first event: so a gap
# (a predecessor not committed yet, or deleted) or a parked predecessor holds the rest of that
# subscription back instead of publishing it out of order. ``ready`` says the predecessor is
# already published; otherwise it must be published earlier in the same batch.
_CLAIM = Statement(
    """
    SELECT o.id, o.event_id, o.aggregate_id, o.sequence, o.event_type, o.schema_version,
           o.payload::text AS payload, o.occurred_at,
           (o.sequence = 1 OR p.published_at IS NOT NULL) AS ready
    FROM outbox_event o
    LEFT JOIN outbox_event p ON p.aggregate_id = o.aggregate_id AND p.sequence = o.sequence - 1
    WHERE o.published_at IS NULL AND o.parked_at IS NULL
      AND mod(o.aggregate_id, :shards) = ANY(CAST(:owned AS text)::int[])
      AND (o.sequence = 1 OR (p.id IS NOT NULL AND p.parked_at IS NULL))
    ORDER BY o.id
    LIMIT :limit
    FOR UPDATE OF o SKIP LOCKED
    """
)

_MARK = Statement(
    """
    UPDATE outbox_event SET published_at = :now, publish_attempts = publish_attempts + 1,
           last_error = NULL
    WHERE id = ANY(CAST(:ids AS text)::bigint[])
    """
)

_PARK = Statement(
    """
    UPDATE outbox_event o SET parked_at = :now, publish_attempts = o.publish_attempts + 1,
           last_error = p.error
    FROM unnest(CAST(:ids AS text)::bigint[], CAST(:errors AS text)::text[]) AS p(id, error)
    WHERE o.id = p.id
    """
)

# Published rows past retention, except the newest published row of each subscription: that one
# is the predecessor the claim checks for the subscription's next event.
_PRUNE = Statement(
    """
    DELETE FROM outbox_event WHERE id IN (
        SELECT o.id FROM outbox_event o
        WHERE o.published_at < :cutoff
          AND mod(o.aggregate_id, :shards) = ANY(CAST(:owned AS text)::int[])
          AND EXISTS (
              SELECT 1 FROM outbox_event n
              WHERE n.aggregate_id = o.aggregate_id AND n.sequence > o.sequence
                AND n.published_at IS NOT NULL
          )
        ORDER BY o.published_at
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    """
)

_STATS = Statement(
    """
    SELECT
      (SELECT count(*) FROM outbox_event
        WHERE published_at IS NULL AND parked_at IS NULL) AS unpublished,
      (SELECT min(occurred_at) FROM outbox_event
        WHERE published_at IS NULL AND parked_at IS NULL) AS oldest,
      (SELECT count(*) FROM outbox_event
        WHERE published_at IS NULL AND parked_at IS NOT NULL) AS parked
    """
)


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    event_id: uuid.UUID
    aggregate_id: int
    sequence: int
    event_type: str
    schema_version: int
    payload: str
    occurred_at: datetime
    ready: bool


@dataclass(frozen=True, slots=True)
class OutboxStats:
    unpublished: int
    oldest: datetime | None
    parked: int


async def claim(
    conn: Connection, *, shards: int, owned: Sequence[int], limit: int
) -> list[OutboxRow]:
    require_positive_limit(limit)
    rows = await pg.fetch(
        conn, _CLAIM, {"shards": shards, "owned": int_array(owned), "limit": limit}
    )
    return [OutboxRow(**row) for row in rows]


async def mark_published(conn: Connection, ids: Sequence[int], now: datetime) -> None:
    if ids:
        await pg.execute(conn, _MARK, {"ids": int_array(ids), "now": now})


async def park(conn: Connection, parked: Sequence[tuple[int, str]], now: datetime) -> None:
    if parked:
        await pg.execute(
            conn,
            _PARK,
            {
                "ids": int_array(i for i, _ in parked),
                "errors": text_array(e[:2000] for _, e in parked),
                "now": now,
            },
        )


async def prune(
    conn: Connection, *, cutoff: datetime, shards: int, owned: Sequence[int], limit: int
) -> int:
    require_positive_limit(limit)
    return await pg.execute(
        conn,
        _PRUNE,
        {"cutoff": cutoff, "shards": shards, "owned": int_array(owned), "limit": limit},
    )


async def stats(conn: Connection) -> OutboxStats:
    [row] = await pg.fetch(conn, _STATS)
    return OutboxStats(
        unpublished=int(row["unpublished"]), oldest=row["oldest"], parked=int(row["parked"])
    )
