"""Notifier benchmark: receipts/s, CPU per receipt and event-to-sent delay of one notifier
process, against the mail server's own rate for the same messages.

    python -m bench.notifier_bench [--receipts 10000] [--rate 200] [--paced-seconds 30]

* floor: one receipt's message (composed with its PDF before timing) sent ``--receipts`` times,
  each copy with its own Message-ID, by bare aiosmtplib clients over as many connections as the
  notifier's sender uses, to ``billing mail-server``; no database, no Kafka, no rendering.
* backlog: ``--receipts`` InvoicePaid events on a new topic, each for real rows (a customer with
  an address, a subscription, a PAID invoice with its line and document number), published at
  once to one running ``python -m services.notifier``; receipts/s from the first event to the
  last ``sent_at``, and the process's CPU (user + system) per receipt.
* paced: ``--rate`` events/s for ``--paced-seconds`` to the same notifier; delay = ``sent_at`` -
  the event's time, p50 and p99.

It uses its own database (``<name>_bench_notifier`` next to BILLING_DATABASE_URL's), a new topic
on BILLING_KAFKA_BOOTSTRAP and its own mail server (a new directory, a free port).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import aiosmtplib
import asyncpg  # type: ignore[import-untyped]
from aiokafka import AIOKafkaProducer

from bench.procfs import cpu_seconds
from billing_core import cloudevents
from billing_core.cloudevents import CloudEvent
from billing_core.db import pg
from billing_core.documents.invoice_view import Party
from billing_core.domain import event_payloads as p
from billing_core.domain import events as ev
from billing_core.repo import invoice_documents
from billing_core.seeding import seed_customers
from services.notifier.messages import Composer
from services.notifier.settings import NotifierSettings
from services.relay.producer import ensure_topic
from tests.support.db import migrated_database
from tests.support.mail import MailServer
from tests.support.processes import free_port

ROOT = Path(__file__).resolve().parents[1]
MAIL_FROM = "Billing <billing@example.com>"
SELLER = Party("Billing Example Ltd", ("1 Example Street, London", "VAT GB123456789"))
PARTITIONS = 3
TARGET_RATE = 200.0
TARGET_DELAY_S = 300.0

_PAID_INVOICES = pg.Statement(
    """
    WITH p AS (SELECT id FROM plan ORDER BY id LIMIT 1),
    subs AS (
        INSERT INTO subscription (customer_id, plan_id, status, billing_anchor,
            current_period_start, current_period_end)
        SELECT g, p.id, 'ACTIVE', CAST(:now AS timestamptz), CAST(:now AS timestamptz),
               CAST(:now AS timestamptz) + interval '1 month'
        FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) g, p
        RETURNING id, customer_id, current_period_start, current_period_end
    ),
    inv AS (
        INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start,
            period_end, subtotal, credit_applied, amount, currency, status, next_attempt_at,
            paid_at, number)
        SELECT id, customer_id, 'RENEWAL', 0, current_period_start, current_period_end,
               2990, 0, 2990, 'EUR', 'PAID', current_period_start, CAST(:now AS timestamptz),
               'B-' || lpad(CAST(id AS text), 8, '0')
        FROM subs
        RETURNING id, subscription_id, amount, period_start, period_end
    ),
    line AS (
        INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity,
            unit_amount, amount, period_start, period_end)
        SELECT id, 1, 'PLAN_PERIOD', 'Plan PRO_MONTHLY', 1, amount, amount, period_start,
               period_end
        FROM inv
    )
    SELECT id, subscription_id, amount FROM inv ORDER BY id
    """
)
_SENT = pg.Statement(
    "SELECT event_id, extract(epoch FROM sent_at) AS sent FROM notifier_email "
    "WHERE sent_at IS NOT NULL"
)
_SENT_COUNT = pg.Statement("SELECT count(*) FROM notifier_email WHERE sent_at IS NOT NULL")


async def prepare_database(base_url: str) -> str:
    return await migrated_database(base_url, "bench_notifier")


async def paid_invoices(conn: asyncpg.Connection, first: int, count: int) -> list[CloudEvent]:
    """``count`` customers (ids from ``first``), each with a subscription and a PAID invoice;
    the InvoicePaid events of those invoices (timed when they are published)."""
    now = datetime.now(UTC)
    await seed_customers(conn, first_id=first, count=count, email_domain="example.com")
    rows = await pg.fetch(
        conn, _PAID_INVOICES, {"now": now, "first": first, "last": first + count - 1}
    )
    return [
        event_of(ev.invoice_paid(r["subscription_id"], r["id"], r["amount"], "EUR", now))
        for r in rows
    ]


def event_of(event: ev.DomainEvent) -> CloudEvent:
    return CloudEvent(
        id=uuid.uuid4(),
        event_type=str(event.type),
        source="urn:billing:outbox",
        time=datetime.now(UTC),
        subscription_id=event.subscription_id,
        sequence=1,
        schema_version=1,
        data=event.payload_json().encode(),
    )


def start_mail_server(directory: Path) -> MailServer:
    """The project's mail server, as the tests run it (``tests.support.mail``)."""
    server = MailServer("127.0.0.1", free_port(), directory)
    server.start()
    return server


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


async def one_receipt(conn: asyncpg.Connection, event: CloudEvent) -> bytes:
    """The message the notifier builds for ``event`` (its PDF rendered here, untimed)."""
    paid = p.parse_payload(event.event_type, event.schema_version, event.data)
    assert isinstance(paid, p.InvoicePaidV1)
    document = await invoice_documents.load(conn, paid.invoiceId, seller=SELLER)
    assert document is not None
    to = invoice_documents.Recipient(paid.subscriptionId, None, None, "floor@example.com")
    composer = Composer(mail_from=MAIL_FROM, seller_name=SELLER.name)
    message = composer.receipt(
        event_id=str(event.id), to=to, subject="Payment received", payload=paid, document=document
    )
    return message.as_bytes()


async def floor_run(message: bytes, count: int, connections: int, port: int) -> float:
    """Messages/s of bare SMTP clients sending ``count`` copies of ``message``."""
    head, sep, rest = message.partition(b"Message-ID: ")
    tail = rest.partition(b"\r\n")[2]

    async def lane(numbers: range) -> None:
        smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, timeout=30)
        await smtp.connect()
        for n in numbers:
            copy = head + sep + f"<floor-{n}@example.com>\r\n".encode() + tail
            await smtp.sendmail("billing@example.com", ["floor@example.com"], copy)
        await smtp.quit()

    started = time.perf_counter()
    await asyncio.gather(*(lane(range(i, count, connections)) for i in range(connections)))
    return count / (time.perf_counter() - started)


async def publish(producer: AIOKafkaProducer, topic: str, events: Sequence[CloudEvent]) -> None:
    futures = []
    for event in events:
        key, value, headers = cloudevents.encode(event)
        futures.append(await producer.send(topic, value=value, key=key, headers=headers))
    await asyncio.gather(*futures)


async def publish_paced(
    producer: AIOKafkaProducer, topic: str, events: Sequence[CloudEvent], rate: float
) -> dict[uuid.UUID, float]:
    """Publish ``events`` at ``rate``/s in ticks of 50 ms, each timed when it is published;
    return each event's time."""
    times: dict[uuid.UUID, float] = {}
    per_tick = max(1, round(rate * 0.05))
    started = time.monotonic()
    for n, i in enumerate(range(0, len(events), per_tick)):
        await asyncio.sleep(max(0.0, started + n * 0.05 - time.monotonic()))
        now = datetime.now(UTC)
        batch = [dataclasses.replace(e, time=now) for e in events[i : i + per_tick]]
        for event in batch:
            times[event.id] = now.timestamp()
        await publish(producer, topic, batch)
    return times


async def sent_times(pool: asyncpg.Pool) -> dict[uuid.UUID, float]:
    async with pool.acquire() as conn:
        rows = await pg.fetch(conn, _SENT)
    return {row["event_id"]: float(row["sent"]) for row in rows}


async def wait_sent(pool: asyncpg.Pool, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        async with pool.acquire() as conn:
            sent = int(await pg.fetchval(conn, _SENT_COUNT))
        if sent >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sent} of {count} receipts sent after {timeout_s:.0f} s")
        await asyncio.sleep(0.2)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_notifier(url: str, topic: str, smtp_port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "BILLING_DATABASE_URL": url,
        "BILLING_KAFKA_TOPIC": topic,
        "BILLING_NOTIFIER_GROUP_ID": f"bench-notifier-{uuid.uuid4().hex[:8]}",
        "BILLING_NOTIFIER_HEALTH_PORT": "0",
        "BILLING_NOTIFIER_SMTP_PORT": str(smtp_port),
        "BILLING_NOTIFIER_MAIL_FROM": MAIL_FROM,
        "BILLING_SELLER_NAME": SELLER.name,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "services.notifier"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def backlog_run(
    pool: asyncpg.Pool,
    producer: AIOKafkaProducer,
    topic: str,
    backlog: Sequence[CloudEvent],
    pid: int,
) -> tuple[float, float]:
    """Receipts/s and ms of the notifier's CPU per receipt, for ``backlog`` published at once."""
    already = len(await sent_times(pool))
    cpu_before = cpu_seconds(pid)
    started = time.time()
    await publish(producer, topic, backlog)
    await wait_sent(pool, already + len(backlog), len(backlog) / 20 + 120)
    cpu = cpu_seconds(pid) - cpu_before
    sent = await sent_times(pool)
    last = max(sent[e.id] for e in backlog)
    return len(backlog) / (last - started), cpu * 1000 / len(backlog)


async def paced_run(
    pool: asyncpg.Pool,
    producer: AIOKafkaProducer,
    topic: str,
    paced: Sequence[CloudEvent],
    args: argparse.Namespace,
) -> list[float]:
    """Each receipt's delay from its event to its ``sent_at``, events published at ``--rate``."""
    already = len(await sent_times(pool))
    times = await publish_paced(producer, topic, paced, args.rate)
    await wait_sent(pool, already + len(paced), args.paced_seconds + 300)
    sent = await sent_times(pool)
    return [sent[i] - t for i, t in times.items()]


async def main(args: argparse.Namespace) -> int:
    settings = NotifierSettings()
    url = await prepare_database(settings.database_url)
    pool = await asyncpg.create_pool(pg.asyncpg_dsn(url), min_size=1, max_size=2)
    async with pool.acquire() as conn:
        warm_up = await paid_invoices(conn, 1, 1)
        backlog = await paid_invoices(conn, 2, args.receipts)
        paced = await paid_invoices(conn, 2 + args.receipts, int(args.rate * args.paced_seconds))
        message = await one_receipt(conn, warm_up[0])
    topic = f"bench.notifier.{uuid.uuid4().hex[:8]}"
    await ensure_topic(settings.kafka_bootstrap, topic, partitions=PARTITIONS, replication=1)
    connections = settings.notifier_send_connections

    with tempfile.TemporaryDirectory(prefix="bench-notifier-") as tmp:
        mail = start_mail_server(Path(tmp) / "floor")
        try:
            floor = await floor_run(message, args.receipts, connections, mail.port)
        finally:
            mail.stop()
        print(f"floor: {floor:.0f} messages/s ({connections} SMTP connections, {len(message)} B)")

        mail = start_mail_server(Path(tmp) / "notifier")
        notifier = start_notifier(url, topic, mail.port)
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
        await producer.start()
        try:
            await publish(producer, topic, warm_up)
            await wait_sent(pool, 1, 120)  # started, group joined, one receipt through
            rate, cpu_ms = await backlog_run(pool, producer, topic, backlog, notifier.pid)
            print(
                f"backlog: {len(backlog)} receipts: {rate:.0f}/s ({rate / floor:.2f}x the "
                f"floor), {cpu_ms:.2f} ms of the notifier's CPU per receipt",
                flush=True,
            )
            delays = await paced_run(pool, producer, topic, paced, args)
        finally:
            await producer.stop()
            stop(notifier)
            mail.stop()
    await pool.close()
    p50, p99 = percentile(delays, 0.5), percentile(delays, 0.99)
    print(
        f"paced: {len(paced)} receipts at {args.rate:.0f}/s: delay event to sent "
        f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {max(delays):.2f} s"
    )
    checks = [
        (f"receipts/s >= {TARGET_RATE:.0f}", rate >= TARGET_RATE),
        (f"p99 delay at {args.rate:.0f}/s < {TARGET_DELAY_S:.0f} s", p99 < TARGET_DELAY_S),
    ]
    for name, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(ok for _, ok in checks) else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--receipts", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=TARGET_RATE)
    parser.add_argument("--paced-seconds", type=float, default=30.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
