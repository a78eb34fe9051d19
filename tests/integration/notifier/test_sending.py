"""The notifier sends receipts (with the invoice PDF), payment failures and trial endings to the
customer's address, through a real SMTP server (the project's own, as a process), once per event.
"""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiosmtplib
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope, Session
from pypdf import PdfReader
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.cloudevents import CloudEvent
from billing_core.db import pg
from billing_core.documents.invoice_view import Party
from billing_core.domain import events as ev
from billing_core.domain.events import DomainEvent
from billing_core.repo import notifier_emails
from services.notifier.emails import Handler
from services.notifier.messages import Composer
from services.notifier.sender import Sender
from services.notifier.settings import NotifierSettings
from tests.support.factories import create_invoice, create_subscription
from tests.support.mail import MailServer, mail_server
from tests.support.processes import free_port

NOW = datetime(2026, 12, 1, 8, tzinfo=UTC)
SELLER = Party("Billing Example Ltd", ("1 Example Street",))


def record(event: DomainEvent, sequence: int) -> CloudEvent:
    return CloudEvent(
        id=uuid.uuid4(),
        event_type=str(event.type),
        source="urn:billing:outbox",
        time=NOW,
        subscription_id=event.subscription_id,
        sequence=sequence,
        schema_version=1,
        data=event.payload_json().encode(),
    )


@pytest.fixture
def mail(tmp_path: Path) -> Iterator[MailServer]:
    with mail_server(tmp_path / "mail") as server:
        yield server


def notifier_settings(database_url: str, port: int, **overrides: object) -> NotifierSettings:
    values: dict[str, object] = {
        "database_url": database_url,
        "notifier_smtp_port": port,
        "notifier_mail_from": "Billing <billing@example.test>",
        "notifier_send_retry_seconds": 30.0,
        "log_json": False,
        **overrides,
    }
    return NotifierSettings(**values)  # type: ignore[arg-type]


def handler() -> Handler:
    return Handler(Composer("Billing <billing@example.test>", SELLER.name), SELLER)


async def customer(engine: AsyncEngine, email: str | None, name: str | None = "Ana Example") -> int:
    async with engine.begin() as conn:
        return int(
            (
                await conn.execute(
                    text(
                        "INSERT INTO customer (external_id, email, name) VALUES (:x, :e, :n) "
                        "RETURNING id"
                    ),
                    {"x": f"crm-{uuid.uuid4().hex[:8]}", "e": email, "n": name},
                )
            ).scalar_one()
        )


async def paid_invoice(pool: pg.Pool, customer_id: int, amount: int = 2_990) -> tuple[int, int]:
    async with pg.transaction(pool) as conn:
        sub = await create_subscription(conn, customer_id=customer_id, start=NOW)
        invoice = await create_invoice(
            conn,
            subscription_id=sub,
            customer_id=customer_id,
            amount=amount,
            next_attempt_at=NOW,
            period_start=NOW,
            status="PAID",
        )
    return sub, invoice


async def handle(pool: pg.Pool, *events: CloudEvent) -> None:
    run = handler()
    for event in events:
        async with pg.transaction(pool) as conn:
            await run(conn, event)


def pdf_text(pdf: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)


async def test_a_receipt_goes_to_the_customer_with_the_invoice_pdf(
    engine: AsyncEngine,
    pool: pg.Pool,
    lazy_pool: pg.LazyPool,
    database_url: str,
    mail: MailServer,
) -> None:
    cid = await customer(engine, "ana@example.com")
    sub, invoice = await paid_invoice(pool, cid)
    paid = record(ev.invoice_paid(sub, invoice, 2_990, "EUR", NOW), 2)
    await handle(pool, paid)

    sender = Sender(lazy_pool, notifier_settings(database_url, mail.port))
    assert await sender.send_due() == 1
    [message] = mail.messages()
    assert message["To"] == "Ana Example <ana@example.com>"
    assert message["X-Billing-Envelope-To"] == "ana@example.com"
    assert message["From"] == "Billing <billing@example.test>"
    assert message["Subject"] == "Payment received, thank you"
    assert message["Message-ID"] == f"<{paid.id}@example.test>"
    body = message.get_body(("plain",))
    assert body is not None
    assert "We received your payment of 29.90 EUR for invoice #" in body.get_content()
    [attachment] = list(message.iter_attachments())
    assert attachment.get_content_type() == "application/pdf"
    assert attachment.get_filename() == f"invoice-{invoice}.pdf"
    text_of_pdf = pdf_text(attachment.get_content())
    for expected in (f"Invoice #{invoice}", "Billing Example Ltd", "Ana Example", "29.90 EUR"):
        assert expected in text_of_pdf
    async with pool.acquire() as conn:
        assert await notifier_emails.counts(conn) == {"sent": 1, "pending": 0, "failed": 0}
    assert await sender.send_due() == 0


class Overlaps:
    """An SMTP server's handler that keeps each message a moment before accepting it, and
    counts how many it held at once."""

    def __init__(self) -> None:
        self.holding = 0
        self.most = 0
        self.accepted = 0

    async def handle_DATA(self, server: object, session: Session, envelope: Envelope) -> str:
        self.holding += 1
        self.most = max(self.most, self.holding)
        await asyncio.sleep(0.05)
        self.holding -= 1
        self.accepted += 1
        return "250 OK"


async def test_a_batch_goes_over_several_smtp_connections_at_once(
    engine: AsyncEngine, pool: pg.Pool, lazy_pool: pg.LazyPool, database_url: str
) -> None:
    for n in range(8):
        cid = await customer(engine, f"f{n}@example.com")
        sub, invoice = await paid_invoice(pool, cid)
        await handle(pool, record(ev.invoice_paid(sub, invoice, 2_990, "EUR", NOW), 2))
    server = Overlaps()
    controller = Controller(server, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        settings = notifier_settings(database_url, controller.port, notifier_send_connections=3)
        assert await Sender(lazy_pool, settings).send_due() == 8
    finally:
        controller.stop()
    assert (server.accepted, server.most) == (8, 3)
    async with pool.acquire() as conn:
        assert await notifier_emails.counts(conn) == {"sent": 8, "pending": 0, "failed": 0}


async def test_payment_failed_and_trial_ending_are_sent_and_other_events_only_logged(
    engine: AsyncEngine,
    pool: pg.Pool,
    lazy_pool: pg.LazyPool,
    database_url: str,
    mail: MailServer,
) -> None:
    cid = await customer(engine, "bo@example.com", name=None)
    sub, invoice = await paid_invoice(pool, cid)
    trial_end = datetime(2026, 12, 15, 9, 30, tzinfo=UTC)
    await handle(
        pool,
        record(
            ev.payment_failed(sub, invoice, 1, "insufficient_funds", NOW + timedelta(days=1)), 3
        ),
        record(ev.subscription_trial_will_end(sub, trial_end), 4),
        record(ev.invoice_voided(sub, invoice, NOW), 5),  # logged, not sent
    )
    await Sender(lazy_pool, notifier_settings(database_url, mail.port)).send_due()
    subjects = {m["Subject"]: m for m in mail.messages()}
    assert set(subjects) == {
        "Your payment did not go through",
        "Your free trial ends soon: on 2026-12-15 09:30 UTC",
    }
    failed = subjects["Your payment did not go through"].get_body(("plain",))
    assert failed is not None
    assert "insufficient_funds" in failed.get_content()
    assert "We will try again on 2026-12-02 08:00 UTC" in failed.get_content()
    assert {m["To"] for m in subjects.values()} == {"bo@example.com"}


async def test_an_event_handled_twice_is_one_email_and_no_address_is_no_email(
    engine: AsyncEngine,
    pool: pg.Pool,
    lazy_pool: pg.LazyPool,
    database_url: str,
    mail: MailServer,
) -> None:
    cid = await customer(engine, "cy@example.com")
    sub, invoice = await paid_invoice(pool, cid)
    paid = record(ev.invoice_paid(sub, invoice, 2_990, "EUR", NOW), 2)
    await handle(pool, paid, paid)  # e.g. a second consumer group reading the same topic
    nobody = await customer(engine, None)
    sub2, invoice2 = await paid_invoice(pool, nobody)
    await handle(pool, record(ev.invoice_paid(sub2, invoice2, 2_990, "EUR", NOW), 2))
    await Sender(lazy_pool, notifier_settings(database_url, mail.port)).send_due()
    assert [m["To"] for m in mail.messages()] == ["Ana Example <cy@example.com>"]


async def test_a_server_that_is_down_is_retried_later_and_then_sent(
    engine: AsyncEngine,
    pool: pg.Pool,
    lazy_pool: pg.LazyPool,
    database_url: str,
    tmp_path: Path,
) -> None:
    cid = await customer(engine, "di@example.com")
    sub, invoice = await paid_invoice(pool, cid)
    await handle(pool, record(ev.invoice_paid(sub, invoice, 2_990, "EUR", NOW), 2))
    port = free_port()
    sender = Sender(lazy_pool, notifier_settings(database_url, port, notifier_send_retry_seconds=1))
    assert await sender.send_due() == 1  # nothing listens on the port
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT attempts, last_error, next_attempt_at > now() AS later "
                    "FROM notifier_email"
                )
            )
        ).one()
    # No message reached a server: no attempt counted, the error kept, tried again later.
    assert row.attempts == 0 and "connect" in row.last_error and row.later
    assert await sender.send_due() == 0  # not due yet
    server = MailServer("127.0.0.1", port, tmp_path / "mail")
    server.start()
    try:
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE notifier_email SET next_attempt_at = now()"))
        assert await sender.send_due() == 1
        assert len(server.messages()) == 1
    finally:
        server.stop()


async def test_a_permanent_refusal_gives_the_email_up(
    engine: AsyncEngine,
    pool: pg.Pool,
    lazy_pool: pg.LazyPool,
    database_url: str,
    mail: MailServer,
) -> None:
    cid = await customer(engine, "someone@nowhere.invalid")
    sub, invoice = await paid_invoice(pool, cid)
    await handle(pool, record(ev.invoice_paid(sub, invoice, 2_990, "EUR", NOW), 2))
    await Sender(lazy_pool, notifier_settings(database_url, mail.port)).send_due()
    async with pool.acquire() as conn:
        assert await notifier_emails.counts(conn) == {"sent": 0, "pending": 0, "failed": 1}
    assert mail.messages() == []


async def test_a_sender_that_died_after_the_server_accepted_resends_and_the_mailbox_has_it_once(
    engine: AsyncEngine,
    pool: pg.Pool,
    lazy_pool: pg.LazyPool,
    database_url: str,
    mail: MailServer,
) -> None:
    cid = await customer(engine, "ed@example.com")
    sub, invoice = await paid_invoice(pool, cid)
    await handle(pool, record(ev.invoice_paid(sub, invoice, 2_990, "EUR", NOW), 2))
    # What a sender does up to the server's acceptance, then it dies (nothing marked).
    async with pg.transaction(pool) as conn:
        [claimed] = await notifier_emails.claim(conn, limit=10, lease_s=60)
    async with pg.transaction(pool) as conn:
        first = await notifier_emails.start_attempt(conn, claimed.id)
    assert (first.number, first.previous_unknown) == (1, False)
    smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=mail.port, start_tls=False)
    await smtp.connect()
    await smtp.sendmail("billing@example.test", [claimed.recipient], claimed.message)
    await smtp.quit()

    sender = Sender(lazy_pool, notifier_settings(database_url, mail.port))
    assert await sender.send_due() == 0  # leased to the dead sender
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE notifier_email SET next_attempt_at = now()"))
    assert await sender.send_due() == 1
    assert sender.resent_after_unknown_outcome == 1
    # The same message went twice; the mailbox collapsed the copy by its Message-ID.
    assert mail.message_ids() == [claimed.message_id]
    assert mail.collapsed() == 1


async def test_the_mailbox_collapses_a_copy_by_message_id_and_recipients_only(
    mail: MailServer,
) -> None:
    def message(message_id: str | None, body: str) -> bytes:
        head = f"Message-ID: {message_id}\r\n" if message_id else ""
        return f"{head}Subject: hello\r\n\r\n{body}\r\n".encode()

    smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=mail.port, start_tls=False)
    await smtp.connect()
    await smtp.sendmail("b@example.test", ["a@example.com"], message("<m1@example.test>", "one"))
    await smtp.sendmail("b@example.test", ["a@example.com"], message("<m1@example.test>", "one"))
    await smtp.sendmail("b@example.test", ["z@example.com"], message("<m1@example.test>", "one"))
    await smtp.sendmail("b@example.test", ["a@example.com"], message("<m2@example.test>", "two"))
    await smtp.sendmail("b@example.test", ["a@example.com"], message(None, "no id"))
    await smtp.sendmail("b@example.test", ["a@example.com"], message(None, "no id"))
    await smtp.quit()

    assert mail.collapsed() == 1  # only the second m1 to a@: same id, same recipient
    assert [str(m["X-Billing-Envelope-To"]) for m in mail.messages()] == [
        "a@example.com",
        "z@example.com",
        "a@example.com",
        "a@example.com",
        "a@example.com",
    ]
    # A marker whose message file is gone (a crash between the two) does not count as held.
    first = sorted((mail.directory / "new").glob("*.eml"))[0]
    first.unlink()
    smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=mail.port, start_tls=False)
    await smtp.connect()
    await smtp.sendmail("b@example.test", ["a@example.com"], message("<m1@example.test>", "one"))
    await smtp.quit()
    assert mail.collapsed() == 1
    assert mail.message_ids().count("<m1@example.test>") == 2  # to z@, and a@ stored again
