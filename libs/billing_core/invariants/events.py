"""Invariants checked from the Kafka topic, read from the beginning as a new consumer would.

* every PAID invoice has an InvoicePaid event and every CANCELED subscription a
  SubscriptionCanceled event (duplicates are allowed: at-least-once; they are counted);
* after de-duplication by event id, each subscription's sequence only goes forward and has no
  hole (1, 2, 3, ...);
* every event the outbox holds as published is on the topic, and none is left unpublished.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from billing_core.cloudevents import InvalidCloudEvent, decode
from billing_core.invariants.report import Check


@dataclass
class TopicEvidence:
    records: int = 0
    duplicates: int = 0
    invalid: int = 0
    ids: set[str] = field(default_factory=set)
    sequences: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    paid_invoices: set[int] = field(default_factory=set)
    canceled_subscriptions: set[int] = field(default_factory=set)


async def read_topic(bootstrap: str, topic: str, timeout: float = 120.0) -> TopicEvidence:
    evidence = TopicEvidence()
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        async with asyncio.timeout(timeout):
            while not consumer.assignment():
                await asyncio.sleep(0.05)
            assigned = sorted(consumer.assignment())
            await consumer.seek_to_beginning(*assigned)
            ends = await consumer.end_offsets(assigned)
            while [tp for tp in assigned if await consumer.position(tp) < ends[tp]]:
                batch = await consumer.getmany(*assigned, timeout_ms=1000, max_records=5000)
                for records in batch.values():
                    for record in records:
                        _take(evidence, record.key, record.value, record.headers)
    finally:
        await consumer.stop()
    return evidence


def _take(
    evidence: TopicEvidence,
    key: bytes | None,
    value: bytes | None,
    headers: object,
) -> None:
    evidence.records += 1
    try:
        event = decode(key, value, headers)  # type: ignore[arg-type]
    except InvalidCloudEvent:
        evidence.invalid += 1
        return
    event_id = str(event.id)
    if event_id in evidence.ids:
        evidence.duplicates += 1
        return
    evidence.ids.add(event_id)
    evidence.sequences[event.subscription_id].append(event.sequence)
    if event.event_type == "InvoicePaid":
        invoice = event.payload().get("invoiceId")
        if isinstance(invoice, int):
            evidence.paid_invoices.add(invoice)
    elif event.event_type == "SubscriptionCanceled":
        evidence.canceled_subscriptions.add(event.subscription_id)


_PAID = text("SELECT id, subscription_id FROM invoice WHERE status = 'PAID' AND id > :since")
_CANCELED = text("SELECT id FROM subscription WHERE status = 'CANCELED'")
_UNPUBLISHED = text(
    "SELECT count(*) FROM outbox_event WHERE published_at IS NULL OR parked_at IS NOT NULL"
)
_PUBLISHED_IDS = text(
    "SELECT CAST(event_id AS text) FROM outbox_event WHERE published_at IS NOT NULL"
)


async def check_events(
    conn: AsyncConnection, evidence: TopicEvidence, since_invoice_id: int = 0
) -> tuple[Check, Check]:
    told = Check("events", "PAID -> InvoicePaid, CANCELED -> SubscriptionCanceled on Kafka")
    told.duplicates = evidence.duplicates
    for r in await conn.execute(_PAID, {"since": since_invoice_id}):
        told.checked += 1
        if r.id not in evidence.paid_invoices:
            told.violations.append(f"invoice {r.id}: PAID but no InvoicePaid event")
    for r in await conn.execute(_CANCELED):
        told.checked += 1
        if r.id not in evidence.canceled_subscriptions:
            told.violations.append(f"subscription {r.id}: CANCELED but no SubscriptionCanceled")
    unpublished = int((await conn.execute(_UNPUBLISHED)).scalar_one())
    if unpublished:
        told.violations.append(f"{unpublished} outbox events not published")
    missing = [i for (i,) in await conn.execute(_PUBLISHED_IDS) if i not in evidence.ids]
    if missing:
        told.violations.append(f"{len(missing)} published events absent from the topic")
    if evidence.invalid:
        told.violations.append(f"{evidence.invalid} records are not billing CloudEvents")

    order = Check("sequence", "per-subscription sequence never goes backwards, no hole")
    order.duplicates = evidence.duplicates
    for subscription_id, seen in evidence.sequences.items():
        order.checked += 1
        if any(b <= a for a, b in itertools.pairwise(seen)):
            order.violations.append(
                f"subscription {subscription_id}: sequence went back {seen[:8]}"
            )
        elif sorted(seen) != list(range(1, len(seen) + 1)):
            order.violations.append(f"subscription {subscription_id}: holes in {seen[:8]}")
    return told, order
