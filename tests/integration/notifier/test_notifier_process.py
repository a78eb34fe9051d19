"""kill -9 during sending: a real notifier process, real Kafka, PostgreSQL and a real SMTP server
(the project's own, as a process) that keeps what it receives.

The notifier consumes the events (queueing every e-mail in one transaction), then is killed twice
while the e-mails are arriving at the server and started again each time. Every customer's
mailbox must hold their receipt exactly once. The sender resends only where SMTP leaves no
choice (a message the server accepted just before the kill, before the notifier recorded it as
sent): such a resend is one the notifier says it made without knowing the earlier outcome
(``email_resending_after_unknown_outcome``), at most one per SMTP connection per kill, and the
same message (same Message-ID), which the mailbox collapses into the copy it holds.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core import cloudevents
from billing_core.cloudevents import CloudEvent
from billing_core.db import pg
from billing_core.domain import events as ev
from billing_core.repo import notifier_emails
from services.notifier.settings import NotifierSettings
from services.relay.producer import ensure_topic
from tests.support.factories import create_invoice, create_subscription
from tests.support.infra import Services
from tests.support.mail import mail_server
from tests.support.processes import Proc, start

NOW = datetime(2026, 12, 1, 8, tzinfo=UTC)
CUSTOMERS = 80
CONNECTIONS = NotifierSettings.model_fields["notifier_send_connections"].default


async def receipts_to_send(pool: pg.Pool, customers: int = CUSTOMERS) -> list[CloudEvent]:
    """A customer (with an address), a subscription and a paid invoice each; their InvoicePaid."""
    events = []
    async with pg.transaction(pool) as conn:
        for n in range(customers):
            customer = await conn.fetchval(
                "INSERT INTO customer (external_id, email, name) VALUES ($1, $2, $3) RETURNING id",
                f"crm-{n}",
                f"c{n}@example.com",
                f"Customer {n}",
            )
            sub = await create_subscription(conn, customer_id=customer, start=NOW)
            invoice = await create_invoice(
                conn,
                subscription_id=sub,
                customer_id=customer,
                amount=990 + n,
                next_attempt_at=NOW,
                period_start=NOW,
                status="PAID",
            )
            paid = ev.invoice_paid(sub, invoice, 990 + n, "EUR", NOW)
            events.append(
                CloudEvent(
                    id=uuid.uuid4(),
                    event_type="InvoicePaid",
                    source="urn:billing:outbox",
                    time=NOW,
                    subscription_id=sub,
                    sequence=1,
                    schema_version=1,
                    data=paid.payload_json().encode(),
                )
            )
    return events


async def publish(bootstrap: str, topic: str, events: list[CloudEvent]) -> None:
    await ensure_topic(bootstrap, topic, partitions=3, replication=1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for event in events:
            key, value, headers = cloudevents.encode(event)
            await producer.send(topic, value=value, key=key, headers=headers)
        await producer.flush()
    finally:
        await producer.stop()


async def until(check: object, timeout: float, what: str) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def log_lines(procs: list[Proc]) -> list[dict[str, object]]:
    lines = []
    for proc in procs:
        for line in proc.log().splitlines():
            if line.startswith("{"):
                lines.append(json.loads(line))
    return lines


def notifier_env(
    database_url: str, services: Services, topic: str, *, smtp_port: int
) -> dict[str, str]:
    """A notifier process of its own consumer group on ``topic``, logging JSON lines."""
    return {
        "BILLING_DATABASE_URL": database_url,
        "BILLING_KAFKA_BOOTSTRAP": services.kafka_bootstrap,
        "BILLING_KAFKA_TOPIC": topic,
        "BILLING_NOTIFIER_GROUP_ID": f"notifier-{uuid.uuid4().hex[:8]}",
        "BILLING_NOTIFIER_HEALTH_PORT": "0",
        "BILLING_NOTIFIER_SMTP_PORT": str(smtp_port),
        "BILLING_LOG_JSON": "true",
    }


@pytest.mark.slow
async def test_kill_9_while_sending_every_customer_gets_the_receipt_once(
    engine: AsyncEngine,
    pool: pg.Pool,
    services: Services,
    database_url: str,
    kafka_topic: str,
    tmp_path: Path,
) -> None:
    events = await receipts_to_send(pool)
    await publish(services.kafka_bootstrap, kafka_topic, events)
    expected = {f"<{e.id}@example.test>" for e in events}
    with mail_server(tmp_path / "mail") as mail:
        env = {
            **notifier_env(database_url, services, kafka_topic, smtp_port=mail.port),
            "BILLING_NOTIFIER_MAIL_FROM": "Billing <billing@example.test>",
            "BILLING_NOTIFIER_SEND_BATCH": "10",
            "BILLING_NOTIFIER_SEND_LEASE_SECONDS": "2",
            "BILLING_NOTIFIER_SEND_RETRY_SECONDS": "1",
        }
        procs: list[Proc] = []
        try:
            for n, kill_at in enumerate((10, 40)):
                procs.append(start(f"notifier-{n}", "services.notifier", env, tmp_path))
                await until(lambda k=kill_at: mail.count() >= k, 120, f"{kill_at} e-mails")
                procs[-1].kill9()
            assert len(set(mail.message_ids())) < CUSTOMERS  # the kills came while sending
            procs.append(start("notifier-last", "services.notifier", env, tmp_path))
            await until(lambda: set(mail.message_ids()) >= expected, 300, "every receipt")
            await asyncio.sleep(3)  # longer than a lease: a late resend would show now
            assert procs[-1].terminate() == 0
        finally:
            for proc in procs:
                proc.kill9()
        received = Counter(mail.message_ids())
        messages = mail.messages()

    assert set(received) == expected
    assert max(received.values()) == 1  # each customer's mailbox holds the receipt once
    resent = [
        line
        for line in log_lines(procs)
        if line.get("event") == "email_resending_after_unknown_outcome"
    ]
    assert len(resent) <= 2 * CONNECTIONS  # one message per connection per kill at most
    assert mail.collapsed() <= len(resent)  # a copy the mailbox held back was such a resend
    by_recipient = Counter(str(m["X-Billing-Envelope-To"]) for m in messages)
    assert set(by_recipient) == {f"c{n}@example.com" for n in range(CUSTOMERS)}
    async with pool.acquire() as conn:
        assert await notifier_emails.counts(conn) == {"sent": CUSTOMERS, "pending": 0, "failed": 0}
        processed = await conn.fetchval("SELECT count(*) FROM processed_event")
    assert processed == CUSTOMERS


@pytest.mark.slow
async def test_sigterm_during_a_long_poll_stops_within_the_budget_and_loses_no_e_mail(
    engine: AsyncEngine,
    pool: pg.Pool,
    services: Services,
    database_url: str,
    kafka_topic: str,
    tmp_path: Path,
) -> None:
    """A poll of thousands of receipts (each rendered as a PDF in the consumer's transaction)
    takes seconds; SIGTERM in the middle of it stops the notifier within its shutdown budget, well
    under a supervisor's grace period (honcho under ``make up`` waits 5 s), by rolling the poll
    back. Started again, the notifier reads those records again and queues every e-mail once."""
    receipts = 3000
    events = await receipts_to_send(pool, receipts)
    await publish(services.kafka_bootstrap, kafka_topic, events)
    # Nothing is sent here (no SMTP server on port 1): only what is queued counts.
    env = {
        **notifier_env(database_url, services, kafka_topic, smtp_port=1),
        "BILLING_NOTIFIER_MAX_RECORDS": str(receipts),  # one poll of them all
    }
    first = start("notifier-0", "services.notifier", env, tmp_path)
    second: Proc | None = None
    try:
        await until(lambda: '"email_queued"' in first.log(), 120, "the first e-mail queued")
        asked = time.monotonic()
        assert first.terminate(timeout=30) == 0
        stopped_in = time.monotonic() - asked
        assert stopped_in < 4.5, stopped_in  # the default budget, 2 s, and closing
        async with engine.connect() as conn:
            queued = (await conn.execute(text("SELECT count(*) FROM notifier_email"))).scalar_one()
        assert queued < receipts  # the poll in flight was rolled back, not finished

        second = start("notifier-1", "services.notifier", env, tmp_path)

        async def all_queued() -> bool:
            async with engine.connect() as conn:
                n = (await conn.execute(text("SELECT count(*) FROM notifier_email"))).scalar_one()
            return int(n) >= receipts

        deadline = time.monotonic() + 300
        while not await all_queued():
            assert time.monotonic() < deadline, "every e-mail queued"
            await asyncio.sleep(0.5)
        assert second.terminate(timeout=30) == 0
    finally:
        first.kill9()
        if second is not None:
            second.kill9()
    async with engine.connect() as conn:
        rows = (
            await conn.execute(text("SELECT event_id, count(*) FROM notifier_email GROUP BY 1"))
        ).all()
    assert {row[0] for row in rows} == {e.id for e in events}
    assert max(row[1] for row in rows) == 1
