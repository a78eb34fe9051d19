"""The invoice document: built from an invoice's line items (or, without any, its columns),
rendered to a PDF whose text says
who sells to whom, what, and for how much (read back with pypdf)."""

from __future__ import annotations

import io
import time
from datetime import UTC, datetime

import pytest
from pypdf import PdfReader

from billing_core.documents import invoice_pdf
from billing_core.documents.invoice_view import (
    InvoiceDocument,
    InvoiceFacts,
    Line,
    Party,
    TaxLine,
    from_invoice,
    from_lines,
)
from billing_core.domain.invoice_lines import InvoiceLine, LineKind

SELLER = Party("Billing Ltd", ("1 Main Street, London", "VAT GB123456789"))
CUSTOMER = Party("Ana Müller", ("ana@example.com",))
FACTS = InvoiceFacts(
    id=42,
    kind="RENEWAL",
    status="PAID",
    currency="EUR",
    subtotal=129_900,
    credit_applied=300,
    amount=129_600,
    period_start=datetime(2026, 12, 1, tzinfo=UTC),
    period_end=datetime(2027, 1, 1, tzinfo=UTC),
    created_at=datetime(2026, 12, 1, 0, 5, tzinfo=UTC),
    paid_at=datetime(2026, 12, 1, 0, 6, tzinfo=UTC),
)


def text_of(pdf: bytes) -> str:
    reader = PdfReader(io.BytesIO(pdf))
    return "\n".join(page.extract_text() for page in reader.pages)


def test_an_invoice_is_one_line_for_its_period_and_one_for_the_credit() -> None:
    document = from_invoice(FACTS, plan_name="Pro", seller=SELLER, customer=CUSTOMER)
    assert [(line.description, line.amount) for line in document.lines] == [
        ("Subscription: Pro, 2026-12-01 to 2027-01-01", 129_900),
        ("Credit applied", -300),
    ]
    assert (document.subtotal, document.tax_total, document.total) == (129_600, 0, 129_600)
    assert document.number is None and document.title == "Invoice #42"


def test_no_credit_no_credit_line() -> None:
    facts = InvoiceFacts(**{**FACTS.__dict__, "credit_applied": 0, "amount": 129_900})
    document = from_invoice(facts, plan_name="Pro", seller=SELLER, customer=CUSTOMER)
    assert len(document.lines) == 1


def test_lines_that_do_not_add_up_to_the_amount_are_refused() -> None:
    facts = InvoiceFacts(**{**FACTS.__dict__, "amount": 1})
    with pytest.raises(ValueError, match="add up"):
        from_invoice(facts, plan_name="Pro", seller=SELLER, customer=CUSTOMER)


def test_the_pdf_shows_seller_customer_lines_and_totals() -> None:
    document = from_invoice(FACTS, plan_name="Pro", seller=SELLER, customer=CUSTOMER)
    pdf = invoice_pdf.render(document)
    assert pdf.startswith(b"%PDF-")
    text = text_of(pdf)
    for expected in (
        "Invoice #42",
        "Billing Ltd",
        "VAT GB123456789",
        "Ana Müller",
        "ana@example.com",
        "Subscription: Pro, 2026-12-01 to 2027-01-01",
        "1,299.00 EUR",
        "Credit applied",
        "-3.00 EUR",
        "Subtotal 1,296.00 EUR",
        "Total 1,296.00 EUR",
        "Status: PAID",
    ):
        assert expected in text, expected


def test_a_number_tax_lines_and_zero_decimal_currencies() -> None:
    document = InvoiceDocument(
        invoice_id=7,
        number="2026-000123",
        currency="JPY",
        issued_at=datetime(2026, 12, 1, tzinfo=UTC),
        period_start=datetime(2026, 12, 1, tzinfo=UTC),
        period_end=datetime(2027, 1, 1, tzinfo=UTC),
        status="OPEN",
        seller=SELLER,
        customer=CUSTOMER,
        lines=(Line("Seats", 3000, quantity=3, unit_amount=1000),),
        taxes=(TaxLine("Consumption tax 10 %", 300),),
    )
    text = text_of(invoice_pdf.render(document))
    assert "Invoice 2026-000123" in text
    assert "3 1,000 JPY 3,000 JPY" in text
    assert "Consumption tax 10 % 300 JPY" in text
    assert "Total 3,300 JPY" in text


def test_markup_in_names_is_text_and_other_scripts_do_not_break_the_document() -> None:
    customer = Party("<b>Zoë</b> & 東京 Ltd")
    document = from_invoice(FACTS, plan_name="Pro", seller=SELLER, customer=customer)
    assert "<b>Zoë</b> & ?? Ltd" in text_of(invoice_pdf.render(document))


def test_an_invoice_with_lines_shows_them_its_tax_lines_and_its_number() -> None:
    start, end = FACTS.period_start, FACTS.period_end
    lines = [
        InvoiceLine(LineKind.PLAN_PERIOD, "Plan PRO_MONTHLY", 1, 2990, 2990, start, end),
        InvoiceLine(LineKind.DISCOUNT, "Coupon TEN (10% off)", 1, -299, -299, start, end),
        InvoiceLine(LineKind.TAX, "Sales tax 8.875% (US-NY)", 1, 239, 239, tax_inclusive=False),
        InvoiceLine(LineKind.CREDIT_APPLIED, "Credit applied", 1, -300, -300),
    ]
    facts = InvoiceFacts(
        **{**FACTS.__dict__, "subtotal": 2930, "credit_applied": 300, "amount": 2630}
    )
    document = from_lines(facts, lines, number="2026-000042", seller=SELLER, customer=CUSTOMER)
    assert [line.description for line in document.lines] == [
        "Plan PRO_MONTHLY",
        "Coupon TEN (10% off)",
        "Credit applied",
    ]
    assert document.taxes == (TaxLine("Sales tax 8.875% (US-NY)", 239),)
    assert document.total == 2630 and document.title == "Invoice 2026-000042"
    text = text_of(invoice_pdf.render(document))
    for expected in ("Invoice 2026-000042", "Plan PRO_MONTHLY", "Sales tax 8.875% (US-NY)"):
        assert expected in text, (expected, text)

    inclusive = InvoiceLine(LineKind.TAX, "VAT 20% (FR)", 1, 498, 498, tax_inclusive=True)
    net = InvoiceLine(LineKind.PLAN_PERIOD, "Plan PRO_MONTHLY", 1, 2492, 2492, start, end)
    facts = InvoiceFacts(
        **{**FACTS.__dict__, "subtotal": 2990, "credit_applied": 0, "amount": 2990}
    )
    document = from_lines(facts, [net, inclusive], number=None, seller=SELLER, customer=CUSTOMER)
    assert document.taxes == (TaxLine("VAT 20% (FR) (included)", 498),)
    assert document.total == 2990 and document.title == "Invoice #42"
    with pytest.raises(ValueError, match="lines add up"):
        from_lines(facts, [net], number=None, seller=SELLER, customer=CUSTOMER)


@pytest.mark.timing
def test_a_receipt_page_costs_a_few_milliseconds_of_cpu() -> None:
    """The notifier renders one per receipt, 200 a second on the 1st of the month."""
    document = from_invoice(FACTS, plan_name="Pro", seller=SELLER, customer=CUSTOMER)
    invoice_pdf.render(document)
    pages = 50
    started = time.process_time()
    for _ in range(pages):
        invoice_pdf.render(document)
    per_page_ms = (time.process_time() - started) * 1000 / pages
    assert per_page_ms < 3.0, per_page_ms
