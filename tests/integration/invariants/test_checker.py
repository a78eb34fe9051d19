"""The invariant checker finds nothing in a consistent world and reports each injected fault."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.cloudevents import encode_headers, encode_key
from billing_core.invariants.checker import LedgerEvidence, check_all
from billing_core.invariants.events import TopicEvidence, read_topic
from tests.support.factories import create_invoice, create_subscription
from tests.support.infra import Services

NOW = datetime(2026, 12, 15, 12, 0, tzinfo=UTC)
START = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
PERIOD_1 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class World:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.events: list[tuple[uuid.UUID, int, int, str, dict[str, object]]] = []

    async def build(self) -> None:
        async with self.engine.begin() as conn:
            self.active = await create_subscription(conn, customer_id=1, start=START)
            await conn.execute(
                text(
                    "UPDATE subscription SET period_index = 1, current_period_start = :s, "
                    "current_period_end = :e WHERE id = :id"
                ),
                {"s": PERIOD_1, "e": PERIOD_1 + timedelta(days=31), "id": self.active},
            )
            self.inv0 = await create_invoice(
                conn,
                subscription_id=self.active,
                customer_id=1,
                amount=990,
                next_attempt_at=START,
                period_start=START,
                status="PAID",
            )
            await conn.execute(
                text("UPDATE invoice SET next_attempt_at = NULL, period_end = :e WHERE id = :i"),
                {"e": PERIOD_1, "i": self.inv0},
            )
            self.inv1 = await create_invoice(
                conn,
                subscription_id=self.active,
                customer_id=1,
                amount=990,
                next_attempt_at=PERIOD_1,
                period_start=PERIOD_1,
                status="PAID",
                period_index=1,
            )
            await conn.execute(
                text("UPDATE invoice SET next_attempt_at = NULL WHERE id = :i"), {"i": self.inv1}
            )
            self.canceled = await create_subscription(
                conn, customer_id=2, start=NOW - timedelta(days=10), status="CANCELED"
            )
            self.failed = await create_invoice(
                conn,
                subscription_id=self.canceled,
                customer_id=2,
                amount=990,
                next_attempt_at=NOW,
                period_start=NOW - timedelta(days=10),
                status="FAILED",
            )
            await conn.execute(
                text("UPDATE invoice SET next_attempt_at = NULL WHERE id = :i"), {"i": self.failed}
            )
            self.event(self.active, 1, "InvoicePaid", {"invoiceId": self.inv0})
            self.event(self.active, 2, "InvoicePaid", {"invoiceId": self.inv1})
            self.event(self.canceled, 1, "SubscriptionCanceled", {"reason": "nonpayment"})
            for event_id, sub, seq, kind, payload in self.events:
                await conn.execute(
                    text(
                        "INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, "
                        "payload, occurred_at, published_at) VALUES (:id, :sub, :seq, :kind, "
                        "CAST(:payload AS jsonb), :now, :now)"
                    ),
                    {
                        "id": event_id,
                        "sub": sub,
                        "seq": seq,
                        "kind": kind,
                        "payload": _json(payload),
                        "now": NOW,
                    },
                )

    def event(self, sub: int, seq: int, kind: str, payload: dict[str, object]) -> None:
        self.events.append((uuid.uuid4(), sub, seq, kind, payload))

    def ledger(self) -> LedgerEvidence:
        return LedgerEvidence({self.inv0: 1, self.inv1: 1}, [])

    def topic(self) -> TopicEvidence:
        evidence = TopicEvidence()
        for event_id, sub, seq, kind, payload in self.events:
            evidence.ids.add(str(event_id))
            evidence.sequences[sub].append(seq)
            if kind == "InvoicePaid":
                evidence.paid_invoices.add(int(payload["invoiceId"]))  # type: ignore[call-overload]
            if kind == "SubscriptionCanceled":
                evidence.canceled_subscriptions.add(sub)
        return evidence


def _json(payload: dict[str, object]) -> str:
    import json  # noqa: PLC0415

    return json.dumps(payload)


@pytest.fixture
async def world(engine: AsyncEngine) -> AsyncIterator[World]:
    w = World(engine)
    await w.build()
    yield w


async def run(
    world: World, *, ledger: LedgerEvidence | None = None, topic: TopicEvidence | None = None
):  # type: ignore[no-untyped-def]
    return await check_all(
        world.engine, now=NOW, ledger=ledger or world.ledger(), topic=topic or world.topic()
    )


async def test_a_consistent_world_has_no_violation(world: World) -> None:
    report = await run(world)
    assert report.ok, [(c.name, c.violations) for c in report.checks]
    assert report.check("periods").checked == 2


async def test_reports_a_second_renewal_invoice_for_a_period(world: World) -> None:
    async with world.engine.begin() as conn:
        await conn.execute(text("DROP INDEX uq_invoice_renewal_period"))
    try:
        async with world.engine.begin() as conn:
            await create_invoice(
                conn,
                subscription_id=world.active,
                customer_id=1,
                amount=990,
                next_attempt_at=NOW,
                period_start=PERIOD_1,
                status="VOID",
                period_index=1,
            )
        report = await run(world)
        assert any("2 renewal invoices" in v for v in report.check("periods").violations)
    finally:
        async with world.engine.begin() as conn:
            await conn.execute(
                text(
                    "DELETE FROM invoice WHERE id IN (SELECT max(id) FROM invoice "
                    "WHERE subscription_id = :s AND period_index = 1)"
                ),
                {"s": world.active},
            )
            await conn.execute(
                text(
                    "CREATE UNIQUE INDEX uq_invoice_renewal_period ON invoice "
                    "(subscription_id, period_start) WHERE kind = 'RENEWAL'"
                )
            )


async def test_reports_a_skipped_period(world: World) -> None:
    async with world.engine.begin() as conn:
        await conn.execute(
            text("DELETE FROM outbox_event WHERE payload ->> 'invoiceId' = :i"),
            {"i": str(world.inv0)},
        )
        await conn.execute(text("DELETE FROM invoice WHERE id = :i"), {"i": world.inv0})
    report = await run(world, ledger=LedgerEvidence({world.inv1: 1}, []))
    assert any("covering 1..1" in v for v in report.check("periods").violations)


async def test_reports_an_overdue_renewal(world: World) -> None:
    report = await check_all(
        world.engine, now=PERIOD_1 + timedelta(days=40), ledger=world.ledger(), topic=world.topic()
    )
    assert any("ACTIVE but its period ended" in v for v in report.check("periods").violations)


async def test_reports_a_second_successful_charge(world: World) -> None:
    report = await run(world, ledger=LedgerEvidence({world.inv0: 2, world.inv1: 1}, [world.inv0]))
    assert report.check("charges").violations == [f"invoice {world.inv0}: charged 2 times"]


async def test_reports_a_paid_invoice_without_a_charge_and_a_charge_without_payment(
    world: World,
) -> None:
    report = await run(world, ledger=LedgerEvidence({world.inv0: 1, world.failed: 1}, []))
    violations = report.check("charges").violations
    assert f"invoice {world.inv1}: PAID without a successful charge" in violations
    assert f"invoice {world.failed}: FAILED but charged" in violations


async def test_reports_a_missing_event(world: World) -> None:
    topic = world.topic()
    topic.paid_invoices.discard(world.inv1)
    report = await run(world, topic=topic)
    assert (
        f"invoice {world.inv1}: PAID but no InvoicePaid event" in report.check("events").violations
    )


async def test_reports_a_sequence_going_backwards_and_a_hole(world: World) -> None:
    topic = world.topic()
    topic.sequences[world.active] = [1, 3, 2]
    topic.sequences[world.canceled] = [1, 3]
    violations = (await run(world, topic=topic)).check("sequence").violations
    assert any("went back" in v for v in violations)
    assert any("holes" in v for v in violations)


async def test_reports_a_wrong_amount_and_inconsistent_credit(world: World) -> None:
    async with world.engine.begin() as conn:
        await conn.execute(
            text("UPDATE invoice SET subtotal = 1234, amount = 1234 WHERE id = :i"),
            {"i": world.inv1},
        )
        await conn.execute(
            text("UPDATE subscription SET credit_balance = 500 WHERE id = :s"), {"s": world.active}
        )
    violations = (await run(world)).check("amounts").violations
    assert any(f"invoice {world.inv1}: subtotal 1234" in v for v in violations)
    assert any(f"subscription {world.active}: credit balance 500" in v for v in violations)


async def test_reports_an_invoice_stuck_past_its_lease(world: World) -> None:
    async with world.engine.begin() as conn:
        sub = await create_subscription(conn, customer_id=3, start=NOW - timedelta(hours=2))
        stuck = await create_invoice(
            conn,
            subscription_id=sub,
            customer_id=3,
            amount=990,
            next_attempt_at=NOW - timedelta(hours=1),
            period_start=NOW - timedelta(hours=2),
        )
    violations = (await run(world)).check("stuck").violations
    assert any(f"invoice {stuck}: due since" in v for v in violations)


async def test_reads_the_evidence_from_a_real_topic(
    world: World, services: Services, kafka_topic: str
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=services.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(kafka_topic, num_partitions=2, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=services.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        sends = [*world.events, world.events[0]]  # one duplicate delivery
        for event_id, sub, seq, kind, payload in sends:
            await producer.send_and_wait(
                kafka_topic,
                value=_json(payload).encode(),
                key=encode_key(sub),
                headers=encode_headers(
                    event_id=event_id,
                    event_type=kind,
                    occurred_at=NOW,
                    subscription_id=sub,
                    sequence=seq,
                    schema_version=1,
                ),
            )
    finally:
        await producer.stop()
    evidence = await read_topic(services.kafka_bootstrap, kafka_topic)
    assert evidence.records == 4 and evidence.duplicates == 1
    report = await run(world, topic=evidence)
    assert report.ok, [(c.name, c.violations) for c in report.checks]
    assert report.check("events").duplicates == 1


async def test_imported_history_needs_no_charge_or_event_evidence(world: World) -> None:
    topic = world.topic()
    topic.paid_invoices.discard(world.inv0)
    ledger = LedgerEvidence({world.inv1: 1}, [])
    strict = await check_all(world.engine, now=NOW, ledger=ledger, topic=topic)
    assert not strict.check("charges").ok and not strict.check("events").ok
    lenient = await check_all(
        world.engine, now=NOW, ledger=ledger, topic=topic, since_invoice_id=world.inv0
    )
    assert lenient.ok, [(c.name, c.violations) for c in lenient.checks]
