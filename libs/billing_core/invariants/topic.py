"""What other systems were told: the events topic, read from the beginning as a new consumer.

``read_topic`` assigns itself every partition (no consumer group, nothing committed), notes the
end offsets, and reads up to them: a snapshot of the topic at that moment. Each record goes
through :func:`decode_record` (the one place that knows the wire format, delegated to
``billing_core.cloudevents``) and :meth:`TopicEvidence.add`, which de-duplicates by event id and
keeps, per subscription, the sequence numbers in partition order.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from aiokafka import AIOKafkaConsumer, TopicPartition

from billing_core.cloudevents import CloudEvent, InvalidCloudEvent, decode, parse_time


@dataclass(frozen=True, slots=True)
class PlanChangeSeen:
    event_id: str
    subscription_id: int
    sequence: int
    changed_at: datetime
    old_plan_code: str
    new_plan_code: str
    # Scheduled for the period end: applied at the period boundary ``changed_at``, so the
    # period starting then is already at the new plan.
    at_period_end: bool = False
    # A change to another interval started a new period there (``newPeriodStart``; with
    # ``effective: now`` it cuts the period it falls in short: that one was credited).
    new_period_start: datetime | None = None

    @property
    def prices_period_at_change(self) -> bool:
        """Whether the period starting at ``changed_at`` is at the new plan: a change applied
        at a period boundary, or one that started a new period at its instant."""
        return self.at_period_end or self.new_period_start == self.changed_at


@dataclass
class TopicEvidence:
    records: int = 0
    duplicates: int = 0  # records whose event id was already seen (at-least-once redelivery)
    duplicates_by_type: Counter[str] = field(default_factory=Counter)
    invalid: list[str] = field(default_factory=list)  # "partition/offset: reason"
    ids: set[str] = field(default_factory=set)
    # Per subscription, (sequence, event id) of each distinct event, in partition order.
    streams: dict[int, list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))
    # Distinct events per invoice / subscription (more than one is a tolerated duplicate).
    paid_invoices: Counter[int] = field(default_factory=Counter)
    canceled_subscriptions: Counter[int] = field(default_factory=Counter)
    reconciliation_invoices: set[int] = field(default_factory=set)
    plan_changes: list[PlanChangeSeen] = field(default_factory=list)

    def add(self, event: CloudEvent) -> None:
        """Take one decoded event (records must be added in partition order)."""
        self.records += 1
        event_id = str(event.id)
        if event_id in self.ids:
            self.duplicates += 1
            self.duplicates_by_type[event.event_type] += 1
            return
        self.ids.add(event_id)
        self.streams[event.subscription_id].append((event.sequence, event_id))
        if event.event_type not in _INTERESTING:
            return
        payload = event.payload()
        if event.event_type == "InvoicePaid":
            self.paid_invoices[_int(payload, "invoiceId")] += 1
        elif event.event_type == "SubscriptionCanceled":
            self.canceled_subscriptions[event.subscription_id] += 1
        elif event.event_type == "PaymentReconciliationNeeded":
            self.reconciliation_invoices.add(_int(payload, "invoiceId"))
        elif event.event_type == "SubscriptionPlanChanged":
            self.plan_changes.append(
                PlanChangeSeen(
                    event_id,
                    event.subscription_id,
                    event.sequence,
                    parse_time(str(payload["changedAt"])),
                    str(payload["oldPlanCode"]),
                    str(payload["newPlanCode"]),
                    payload.get("effective") == "period_end",
                    None
                    if payload.get("newPeriodStart") is None
                    else parse_time(str(payload["newPeriodStart"])),
                )
            )

    def add_invalid(self, where: str, reason: str) -> None:
        self.records += 1
        self.invalid.append(f"{where}: {reason}")

    @property
    def sequences(self) -> dict[int, list[int]]:
        return {sub: [seq for seq, _ in stream] for sub, stream in self.streams.items()}


_INTERESTING = {
    "InvoicePaid",
    "SubscriptionCanceled",
    "PaymentReconciliationNeeded",
    "SubscriptionPlanChanged",
}


def _int(payload: dict[str, object], key: str) -> int:
    value = payload.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidCloudEvent(f"payload field {key} is not an integer: {value!r}")
    return value


def decode_record(
    key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes]]
) -> CloudEvent:
    """The Kafka record as a billing CloudEvent; raises ``InvalidCloudEvent``."""
    return decode(key, value, headers)


def take_record(
    evidence: TopicEvidence,
    where: str,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes]],
) -> None:
    try:
        event = decode_record(key, value, headers)
        evidence.add(event)
    except (InvalidCloudEvent, KeyError, ValueError, TypeError) as exc:
        evidence.add_invalid(where, str(exc) or type(exc).__name__)


async def read_topic(bootstrap: str, topic: str, *, timeout: float = 300.0) -> TopicEvidence:
    """Every record of ``topic`` up to its end offsets at the start of the read."""
    evidence = TopicEvidence()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        # Any position reset (a metadata change re-assigns the partitions) goes back to the
        # start, never to the end: a read that silently starts at the end reads nothing.
        auto_offset_reset="earliest",
        client_id=f"billing-check-{uuid.uuid4().hex[:8]}",
    )
    await consumer.start()
    try:
        async with asyncio.timeout(timeout):
            partitions = await _partitions(consumer, topic)
            await consumer.seek_to_beginning(*partitions)
            ends = await consumer.end_offsets(partitions)
            pending = {tp for tp in partitions if ends[tp] > 0}
            while pending:
                batch = await consumer.getmany(*pending, timeout_ms=1000, max_records=10_000)
                for tp, records in batch.items():
                    for record in records:
                        if record.offset >= ends[tp]:
                            break
                        take_record(
                            evidence,
                            f"{tp.partition}/{record.offset}",
                            record.key,
                            record.value,
                            record.headers,
                        )
                for tp in list(pending):
                    if await consumer.position(tp) >= ends[tp]:
                        pending.discard(tp)
    finally:
        await consumer.stop()
    return evidence


class TopicNotFound(LookupError):
    """The broker does not know the topic."""


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    """Every partition of ``topic``, assigned to this consumer (no group: all of them)."""
    if topic not in await consumer.topics():
        raise TopicNotFound(f"topic {topic!r} not found")
    consumer.subscribe([topic])
    while not consumer.assignment():
        await asyncio.sleep(0.05)
    return sorted(consumer.assignment())
