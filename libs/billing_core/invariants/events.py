"""What other systems were told, from the events topic read from the beginning.

``events``: every PAID invoice has an InvoicePaid event on the topic and every CANCELED
subscription a SubscriptionCanceled event — unless that event is still in the outbox waiting
for the relay (counted in the notes; an outbox row unpublished for longer than
``publish_bound``, or parked, is itself a violation). Duplicates are allowed (at-least-once) and
counted: redelivered records of those types, and extra distinct events for one invoice or
subscription. Every event the outbox marks as published must be on the topic, and every record
must be a billing CloudEvent. An invoice paid by an imported payment (a SUCCESS payment attempt
with source ``IMPORT``: history from before this system, e.g. seeded) was never announced and
needs no InvoicePaid event. With ``since``, state reached before it (``paid_at``,
``canceled_at``) is taken as given: other history written without events is not checked.

``sequence``: after de-duplication by event id, each subscription's ``ce_sequence`` values, in
partition order, only go forward (``sequence_backwards``; the same number on two different events
is ``sequence_reused``) and cover 1..max without a hole (the relay never publishes n+1 before
n). This needs the topic's whole history: a topic whose retention dropped old records shows
holes at the start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from billing_core.db.arrays import int_array, text_array
from billing_core.db.pg import Connection, Statement, fetch, fetchval
from billing_core.invariants.report import Check
from billing_core.invariants.topic import TopicEvidence, read_topic

__all__ = ["TopicEvidence", "check_events", "check_sequences", "read_topic"]

# State without its event on the topic, and not waiting in the outbox either.
_UNTOLD = """
    WITH told AS (SELECT unnest(CAST(:told AS text)::bigint[]) AS id),
    pending AS (
        SELECT CAST(payload ->> :key AS bigint) AS id FROM outbox_event
        WHERE published_at IS NULL AND event_type = :event_type
    )
    SELECT x.id, EXISTS (SELECT 1 FROM pending p WHERE p.id = x.id) AS pending
    FROM (SELECT id FROM {table} st WHERE status = :status
          AND (CAST(:since AS timestamptz) IS NULL OR {at} IS NULL OR {at} >= :since) {given}) x
    LEFT JOIN told t ON t.id = x.id
    WHERE t.id IS NULL
    ORDER BY x.id
"""
_COUNT = "SELECT count(*) FROM {table} WHERE status = :status"

_LOST = Statement(
    """
    SELECT o.event_id, o.aggregate_id, o.sequence, o.event_type FROM outbox_event o
    LEFT JOIN unnest(CAST(:ids AS text)::uuid[]) AS t(id) ON t.id = o.event_id
    WHERE o.published_at IS NOT NULL AND t.id IS NULL
    ORDER BY o.aggregate_id, o.sequence
    """
)

_STALE = Statement(
    """
    SELECT event_id, aggregate_id, sequence, event_type, created_at, parked_at, last_error
    FROM outbox_event
    WHERE published_at IS NULL AND (parked_at IS NOT NULL OR created_at < :cutoff)
    ORDER BY aggregate_id, sequence
    """
)

# Invoices paid by an imported payment were never announced.
_NOT_IMPORTED = """AND NOT EXISTS (SELECT 1 FROM payment_attempt a WHERE a.invoice_id = st.id
                   AND a.source = 'IMPORT' AND a.outcome = 'SUCCESS')"""
_IMPORTED = Statement(
    "SELECT count(DISTINCT a.invoice_id) FROM payment_attempt a JOIN invoice i "
    "ON i.id = a.invoice_id WHERE i.status = 'PAID' AND a.source = 'IMPORT' "
    "AND a.outcome = 'SUCCESS'"
)


@dataclass(frozen=True)
class _Told:
    """A state whose every row must have its event on the topic (or pending in the outbox)."""

    table: str
    status: str
    event_type: str
    key: str  # the payload field naming the row
    attribute: str  # the ``TopicEvidence`` counter of the rows told
    count: Statement
    untold: Statement


def _told(
    table: str, at: str, status: str, event_type: str, key: str, attribute: str, given: str = ""
) -> _Told:
    return _Told(
        table,
        status,
        event_type,
        key,
        attribute,
        Statement(_COUNT.format(table=table)),
        Statement(_UNTOLD.format(table=table, at=at, given=given)),
    )


_TOLD = (
    _told("invoice", "paid_at", "PAID", "InvoicePaid", "invoiceId", "paid_invoices", _NOT_IMPORTED),
    _told(
        "subscription",
        "canceled_at",
        "CANCELED",
        "SubscriptionCanceled",
        "subscriptionId",
        "canceled_subscriptions",
    ),
)


async def check_events(
    conn: Connection,
    evidence: TopicEvidence,
    *,
    now: datetime,
    publish_bound: timedelta,
    since: datetime | None = None,
) -> Check:
    check = Check("events", "PAID -> InvoicePaid, CANCELED -> SubscriptionCanceled on Kafka")
    for state in _TOLD:
        told = getattr(evidence, state.attribute)
        check.checked += int(await fetchval(conn, state.count, {"status": state.status}))
        check.duplicates += evidence.duplicates_by_type[state.event_type]
        check.duplicates += sum(n - 1 for n in told.values())
        pending = 0
        rows = await fetch(
            conn,
            state.untold,
            {
                "told": int_array(sorted(told)),
                "key": state.key,
                "event_type": state.event_type,
                "status": state.status,
                "since": since,
            },
        )
        for r in rows:
            if r["pending"]:
                pending += 1
            else:
                check.add(
                    f"missing_{state.event_type}",
                    state.table,
                    r["id"],
                    f"{state.status} but no {state.event_type} event",
                )
        if pending:
            check.notes.append(f"{pending} {state.event_type} events still in the outbox")
    imported = int(await fetchval(conn, _IMPORTED))
    if imported:
        check.notes.append(f"{imported} PAID by an imported payment: no InvoicePaid expected")
    for r in await fetch(conn, _LOST, {"ids": text_array(sorted(evidence.ids))}):
        check.add(
            "lost_event",
            "event",
            str(r["event_id"]),
            f"{_event(r)} published, not on the topic",
        )
    for r in await fetch(conn, _STALE, {"cutoff": now - publish_bound}):
        if r["parked_at"] is not None:
            why = f"parked since {r['parked_at']}: {r['last_error']}"
        else:
            why = f"unpublished since {r['created_at']}"
        check.add(
            "parked_event" if r["parked_at"] is not None else "unpublished_event",
            "event",
            str(r["event_id"]),
            f"{_event(r)} {why}",
        )
    for where in evidence.invalid:
        check.add("invalid_record", "record", where.split(":", 1)[0], where.split(": ", 1)[-1])
    check.notes.append(
        f"{evidence.records} records, {len(evidence.ids)} distinct events, "
        f"{evidence.duplicates} redelivered"
    )
    return check


def _event(r: Mapping[str, Any]) -> str:
    return f"{r['event_type']} #{r['sequence']} of subscription {r['aggregate_id']}"


def check_sequences(evidence: TopicEvidence) -> Check:
    check = Check("sequence", "per-subscription sequence only goes forward, no hole (topic)")
    check.duplicates = evidence.duplicates
    for subscription_id, stream in sorted(evidence.streams.items()):
        check.checked += 1
        by_number: dict[int, str] = {}
        highest = 0
        for sequence, event_id in stream:
            if sequence in by_number:
                check.add(
                    "sequence_reused",
                    "subscription",
                    subscription_id,
                    f"sequence {sequence} on events {by_number[sequence]} and {event_id}",
                )
                continue
            by_number[sequence] = event_id
            if sequence < highest:
                check.add(
                    "sequence_backwards",
                    "subscription",
                    subscription_id,
                    f"sequence {sequence} (event {event_id}) after {highest}",
                )
            highest = max(highest, sequence)
        missing = sorted(set(range(1, highest + 1)) - by_number.keys())
        if missing:
            shown = ", ".join(str(m) for m in missing[:10])
            check.add(
                "sequence_hole",
                "subscription",
                subscription_id,
                f"sequences {shown} missing below {highest}",
            )
    return check
