"""Writing events to the transactional outbox, in the caller's transaction.

Each event gets the next per-subscription sequence number from ``subscription.event_seq``. The
UPDATE that hands the numbers out takes the subscription's row lock, so two transactions that
emit events for one subscription are serialised: sequence order is commit order, which is what
lets the relay publish one subscription's events in order.

``append_events`` hands the numbers out itself. A writer that updates the subscriptions anyway
reserves them in that same UPDATE (``event_seq = event_seq + count``, counts from
:func:`event_counts`): the renewer, then inserts with :func:`insert_numbered_events`; the
recording of payment results (``repo.payment_results.write_decisions``), which inserts them in
the same statement from :func:`event_columns`. One row update per subscription instead of two.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.db.arrays import int_array, json_array, json_elements_sql, text_array
from billing_core.domain.events import DomainEvent

_APPEND = text(
    """
    WITH ev AS (
        SELECT * FROM unnest(
            CAST(:aggregate_ids AS bigint[]), CAST(:types AS text[]),
            CAST(:payloads AS jsonb[]), CAST(:event_ids AS uuid[]), CAST(:versions AS int[])
        ) WITH ORDINALITY AS e(aggregate_id, event_type, payload, event_id, schema_version, ord)
    ),
    counts AS (SELECT aggregate_id, count(*) AS n FROM ev GROUP BY aggregate_id),
    bumped AS (
        UPDATE subscription s SET event_seq = s.event_seq + c.n
        FROM counts c WHERE s.id = c.aggregate_id
        RETURNING s.id, s.event_seq - c.n AS base
    )
    INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, schema_version,
                              payload, occurred_at)
    SELECT ev.event_id, ev.aggregate_id,
           b.base + row_number() OVER (PARTITION BY ev.aggregate_id ORDER BY ev.ord),
           ev.event_type, ev.schema_version, ev.payload, :occurred_at
    FROM ev JOIN bumped b ON b.id = ev.aggregate_id
    """
)


# The event ids are random UUIDs drawn by PostgreSQL (``gen_random_uuid()``, version 4 like
# ``uuid.uuid4()``): nothing to generate and encode per event in the writer.
_INSERT_NUMBERED = text(
    f"""
    INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, schema_version,
                              payload, occurred_at)
    SELECT gen_random_uuid(), e.aggregate_id, e.sequence, e.event_type, e.schema_version,
           e.payload, :occurred_at
    FROM unnest(
        CAST(:aggregate_ids AS text)::bigint[], CAST(:sequences AS text)::bigint[],
        CAST(:types AS text)::text[], CAST(:versions AS text)::int[],
        {json_elements_sql("payloads")}
    ) AS e(aggregate_id, sequence, event_type, schema_version, payload)
    """
)


def _payload(event: DomainEvent) -> str:
    """The payload as its model serialises it: the only way a payload reaches the outbox."""
    return event.payload_json()


def event_columns(events: Sequence[DomainEvent]) -> dict[str, list[Any]]:
    """The array parameters that insert ``events`` in order (fresh event ids): ``aggregate_ids``,
    ``types``, ``payloads``, ``event_ids``, ``schema_versions``."""
    return {
        "aggregate_ids": [e.subscription_id for e in events],
        "types": [str(e.type) for e in events],
        "payloads": [_payload(e) for e in events],
        "event_ids": [uuid.uuid4() for _ in events],
        "schema_versions": [e.version for e in events],
    }


def event_counts(events: Sequence[DomainEvent]) -> Counter[int]:
    """How many sequence numbers each subscription needs for ``events``."""
    return Counter(e.subscription_id for e in events)


async def insert_numbered_events(
    db: AsyncSession | AsyncConnection,
    events: Sequence[DomainEvent],
    reserved_after: Mapping[int, int],
    occurred_at: datetime,
) -> None:
    """Insert ``events`` whose numbers the caller reserved under the subscriptions' row locks:
    ``reserved_after[s]`` is subscription ``s``'s ``event_seq`` before it was moved forward by
    its count, so its events take the numbers after it, in the order given."""
    if not events:
        return
    if occurred_at.tzinfo is None:
        raise ValueError("occurred_at must be timezone-aware")
    last = dict(reserved_after)
    aggregate_ids: list[int] = []
    sequences: list[int] = []
    types: list[str] = []
    versions: list[int] = []
    payloads: list[str] = []
    for e in events:
        data = e.data
        sub = data.subscriptionId
        seq = last[sub] + 1
        last[sub] = seq
        aggregate_ids.append(sub)
        sequences.append(seq)
        types.append(data.event_type)
        versions.append(data.version)
        payloads.append(_payload(e))
    await db.execute(
        _INSERT_NUMBERED,
        {
            "aggregate_ids": int_array(aggregate_ids),
            "sequences": int_array(sequences),
            "types": text_array(types),
            "versions": int_array(versions),
            "payloads": json_array(payloads),
            "occurred_at": occurred_at,
        },
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
            "versions": [e.version for e in events],
            "payloads": [_payload(e) for e in events],
            "event_ids": event_ids,
            "occurred_at": occurred_at,
        },
    )
    return event_ids
