"""The receipt as an RFC 5322 message: what a mail client reads from its bytes (headers in and
outside ASCII, the text, the PDF), and what building one costs (200 a second on the 1st of the
month)."""

from __future__ import annotations

import email
import time
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from unittest import mock

import pytest

from billing_core.documents.invoice_view import InvoiceFacts, Party, from_invoice
from billing_core.domain import event_payloads as p
from billing_core.repo.invoice_documents import Recipient
from services.notifier.messages import Composer

NOW = datetime(2026, 12, 1, 8, tzinfo=UTC)
SELLER = Party("Billing Ltd", ("1 Main Street, London",))
FACTS = InvoiceFacts(
    id=42,
    kind="RENEWAL",
    status="PAID",
    currency="EUR",
    subtotal=2990,
    credit_applied=0,
    amount=2990,
    period_start=NOW,
    period_end=datetime(2027, 1, 1, 8, tzinfo=UTC),
    created_at=NOW,
    paid_at=NOW,
)
PAID = p.InvoicePaidV1(subscriptionId=7, invoiceId=42, amount=2990, currency="EUR", paidAt=NOW)
TO = Recipient(customer_id=3, external_id="crm-3", name="Zoë Müller", email="zoe@example.com")
COMPOSER = Composer("Billing Ltd <billing@example.test>", SELLER.name)


def receipt(subject: str = "Payment received, thank you") -> bytes:
    document = from_invoice(FACTS, plan_name="Pro", seller=SELLER, customer=TO.party())
    message = COMPOSER.receipt(
        event_id="e-1", to=TO, subject=subject, payload=PAID, document=document
    )
    return message.as_bytes()


def test_a_mail_client_reads_the_receipt_its_names_and_its_pdf() -> None:
    raw = receipt("Paiement reçu, merci")
    assert b"\n" not in raw.replace(b"\r\n", b"")  # CRLF line ends only
    assert raw.isascii()
    read = email.message_from_bytes(raw, policy=policy.default)
    assert isinstance(read, EmailMessage)
    assert read["From"] == "Billing Ltd <billing@example.test>"
    assert read["To"] == "Zoë Müller <zoe@example.com>"
    assert read["Subject"] == "Paiement reçu, merci"
    assert read["Message-ID"] == "<e-1@example.test>"
    assert read["Date"] == "Tue, 01 Dec 2026 08:00:00 +0000"
    assert read["Auto-Submitted"] == "auto-generated"
    body = read.get_body(("plain",))
    assert body is not None
    text = body.get_content().replace("\r\n", "\n")  # the lines as they went on the wire
    assert text.startswith("Hello Zoë Müller,\n\nWe received your payment of 29.90 EUR")
    assert "The invoice is attached as a PDF." in text
    [pdf] = list(read.iter_attachments())
    assert pdf.get_content_type() == "application/pdf"
    assert pdf.get_filename() == "invoice-42.pdf"
    assert pdf.get_content().startswith(b"%PDF-")


@pytest.mark.timing
def test_a_receipt_message_costs_well_under_a_millisecond_of_cpu_beside_its_pdf() -> None:
    with mock.patch("billing_core.documents.invoice_pdf.render", return_value=b"%PDF-1.3 x" * 160):
        receipt()
        messages = 200
        started = time.process_time()
        for _ in range(messages):
            receipt()
        per_message_ms = (time.process_time() - started) * 1000 / messages
    assert per_message_ms < 0.8, per_message_ms
