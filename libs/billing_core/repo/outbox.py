"""The one writer of the transactional outbox, in the caller's transaction.

Every event row is written by the statement :func:`insert_sql` builds: event ids drawn by
PostgreSQL (``gen_random_uuid()``), the event's ``schema_version`` and payload, and a
per-subscription sequence number: the subscription's *base* (its ``event_seq`` before the
reservation) plus the event's rank among that subscription's events, in the order given.

A base comes from the UPDATE that moves ``subscription.event_seq`` forward by the subscription's
count (:func:`event_counts`). That UPDATE takes the subscription's row lock, so two transactions
that emit events for one subscription are serialised: sequence order is commit order, which is
what lets the relay publish one subscription's events in order. Three ways to hold the bases:

* :func:`append_events` moves ``event_seq`` itself, in the same statement;
* a writer that updates its subscriptions anyway moves it in that UPDATE and passes the bases
  on: :func:`insert_numbered_events` (the renewer, trial notices, automatic resumes);
* a writer whose statement updates (or inserts) the subscriptions embeds :func:`insert_sql` in
  it, joined to the relation holding ``(id, base)`` (the recording of payment results,
  ``repo.payment_results.write_decisions``; a new subscription's base is 0), with the
  parameters of :func:`event_parameters`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from billing_core.db.arrays import int_array, json_array, json_elements_sql, text_array
from billing_core.db.pg import Connection, Statement, execute
from billing_core.domain.events import DomainEvent


@dataclass(frozen=True)
class EventParams:
    """The placeholders of the four event arrays in a ``db.pg.Statement``, in
    :func:`event_values` order."""

    aggregate_ids: str = ":event_aggregate_ids"
    types: str = ":event_types"
    versions: str = ":event_versions"
    payloads: str = ":event_payloads"


NAMED = EventParams()


def insert_sql(*, bases: str, occurred_at: str, params: EventParams = NAMED) -> str:
    """The INSERT of the events given as :func:`event_values` under ``params``, numbered after
    each subscription's base: ``bases`` is a relation of the statement with columns ``id`` and
    ``base`` (aliased ``b``; ``occurred_at``, an SQL expression, may read its other columns).
    An event whose subscription has no row in ``bases`` is not written. No ``RETURNING``: a
    statement that embeds it in a CTE adds its own."""
    return f"""
    INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, schema_version,
                              payload, occurred_at)
    SELECT gen_random_uuid(), e.aggregate_id,
           b.base + row_number() OVER (PARTITION BY e.aggregate_id ORDER BY e.ord),
           e.event_type, e.schema_version, e.payload, {occurred_at}
    FROM unnest(
        CAST({params.aggregate_ids} AS text)::bigint[], CAST({params.types} AS text)::text[],
        CAST({params.versions} AS text)::int[], {json_elements_sql(params.payloads)}
    ) WITH ORDINALITY AS e(aggregate_id, event_type, schema_version, payload, ord)
    JOIN {bases} AS b ON b.id = e.aggregate_id
    """


def event_values(events: Sequence[DomainEvent]) -> tuple[str, str, str, str]:
    """The four array values that :func:`insert_sql` reads, in :class:`EventParams` order."""
    return (
        int_array(e.subscription_id for e in events),
        text_array([str(e.type) for e in events]),
        int_array(e.version for e in events),
        json_array(e.payload_json() for e in events),
    )


def event_parameters(events: Sequence[DomainEvent]) -> dict[str, str]:
    """:func:`event_values` by the names of :data:`NAMED`."""
    names = (NAMED.aggregate_ids, NAMED.types, NAMED.versions, NAMED.payloads)
    return {name[1:]: value for name, value in zip(names, event_values(events), strict=True)}


def event_counts(events: Sequence[DomainEvent]) -> Counter[int]:
    """How many sequence numbers each subscription needs for ``events``."""
    return Counter(e.subscription_id for e in events)


_APPEND = Statement(
    f"""
    WITH c AS (
        SELECT * FROM unnest(CAST(:count_ids AS text)::bigint[], CAST(:counts AS text)::int[])
            AS c(id, n)
    ),
    bumped AS (
        UPDATE subscription s SET event_seq = s.event_seq + c.n
        FROM c WHERE s.id = c.id
        RETURNING s.id, s.event_seq - c.n AS base
    )
    {insert_sql(bases="bumped", occurred_at=":occurred_at")}
    """
)

_INSERT_NUMBERED = Statement(
    f"""
    WITH reserved AS (
        SELECT * FROM unnest(CAST(:base_ids AS text)::bigint[], CAST(:bases AS text)::bigint[])
            AS r(id, base)
    )
    {insert_sql(bases="reserved", occurred_at=":occurred_at")}
    """
)


def _check_aware(occurred_at: datetime) -> None:
    if occurred_at.tzinfo is None:
        raise ValueError("occurred_at must be timezone-aware")


async def append_events(
    conn: Connection,
    events: Sequence[DomainEvent],
    occurred_at: datetime,
) -> None:
    """Insert ``events`` (any number of subscriptions) in one statement, numbered after each
    subscription's ``event_seq``, which it moves forward (taking the row locks)."""
    if not events:
        return
    _check_aware(occurred_at)
    counts = event_counts(events)
    await execute(
        conn,
        _APPEND,
        {
            "count_ids": int_array(counts.keys()),
            "counts": int_array(counts.values()),
            **event_parameters(events),
            "occurred_at": occurred_at,
        },
    )


async def insert_numbered_events(
    conn: Connection,
    events: Sequence[DomainEvent],
    reserved_after: Mapping[int, int],
    occurred_at: datetime,
) -> None:
    """Insert ``events`` whose numbers the caller reserved under the subscriptions' row locks:
    ``reserved_after[s]`` is subscription ``s``'s ``event_seq`` before it was moved forward by
    its count, so its events take the numbers after it, in the order given."""
    if not events:
        return
    _check_aware(occurred_at)
    missing = event_counts(events).keys() - reserved_after.keys()
    if missing:
        raise KeyError(f"no numbers reserved for subscriptions {sorted(missing)[:10]}")
    await execute(
        conn,
        _INSERT_NUMBERED,
        {
            "base_ids": int_array(reserved_after.keys()),
            "bases": int_array(reserved_after.values()),
            **event_parameters(events),
            "occurred_at": occurred_at,
        },
    )
