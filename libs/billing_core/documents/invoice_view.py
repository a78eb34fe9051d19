"""What an invoice document shows, as a small view model, and how it is built from an invoice.

The PDF renderer (:mod:`billing_core.documents.invoice_pdf`) knows only this model.
:func:`from_lines` builds it from an invoice's line items (``invoice_line``) and its document
number: every line but the taxes as a document line (the plan's period, proration, discount,
credit applied), each ``TAX`` line as a tax line, so the total is the sum of the invoice's lines
— its amount. :func:`from_invoice` is the fallback for an invoice without lines: one line for
the period (its subtotal), one for the credit. Amounts are integer minor units of ``currency``;
times are UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from billing_core.domain.invoice_lines import InvoiceLine, LineKind
from billing_core.domain.money import format_minor


@dataclass(frozen=True)
class Party:
    """The seller or the customer: a name and the lines under it (address, e-mail, tax id)."""

    name: str
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class Line:
    description: str
    amount: int  # minor units; negative for a deduction (credit applied)
    quantity: int = 1
    unit_amount: int | None = None  # None: the same as amount (quantity 1)


@dataclass(frozen=True)
class TaxLine:
    description: str  # e.g. "VAT 20 %"
    amount: int


@dataclass(frozen=True)
class InvoiceDocument:
    invoice_id: int
    currency: str
    issued_at: datetime
    period_start: datetime
    period_end: datetime
    status: str
    seller: Party
    customer: Party
    lines: tuple[Line, ...]
    taxes: tuple[TaxLine, ...] = ()
    number: str | None = None  # the document number (e.g. 2026-000123), when there is one
    paid_at: datetime | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def reference(self) -> str:
        """The document number, or ``#id`` while invoices have none."""
        return self.number or f"#{self.invoice_id}"

    @property
    def title(self) -> str:
        return f"Invoice {self.reference}"

    @property
    def subtotal(self) -> int:
        return sum(line.amount for line in self.lines)

    @property
    def tax_total(self) -> int:
        return sum(tax.amount for tax in self.taxes)

    @property
    def total(self) -> int:
        return self.subtotal + self.tax_total

    def money(self, amount: int) -> str:
        return format_minor(amount, self.currency)


@dataclass(frozen=True)
class InvoiceFacts:
    """The invoice's own columns the document needs (``invoice`` table)."""

    id: int
    kind: str
    status: str
    currency: str
    subtotal: int
    credit_applied: int
    amount: int
    period_start: datetime
    period_end: datetime
    created_at: datetime
    paid_at: datetime | None


KIND_LABELS = {
    "RENEWAL": "Subscription",
    "PRORATION": "Plan change (prorated)",
}


def from_invoice(
    invoice: InvoiceFacts, *, plan_name: str, seller: Party, customer: Party
) -> InvoiceDocument:
    """The document of ``invoice`` without line items: one line for the period (its
    subtotal), one for the credit applied (if any). The total is the amount charged."""
    label = KIND_LABELS.get(invoice.kind, invoice.kind.title())
    period = f"{invoice.period_start:%Y-%m-%d} to {invoice.period_end:%Y-%m-%d}"
    lines = [Line(f"{label}: {plan_name}, {period}", invoice.subtotal)]
    if invoice.credit_applied:
        lines.append(Line("Credit applied", -invoice.credit_applied))
    return _document(invoice, seller, customer, tuple(lines))


def from_lines(
    invoice: InvoiceFacts,
    lines: Sequence[InvoiceLine],
    *,
    number: str | None,
    seller: Party,
    customer: Party,
) -> InvoiceDocument:
    """The document of ``invoice`` from its line items: each ``TAX`` line a tax line (marked
    when the tax is included in the prices above it), every other line a document line, in
    their order; ``number`` its document number (None until it has one). The total is the sum
    of the lines, which is the amount charged."""
    taxes = tuple(
        TaxLine(
            f"{line.description} (included)" if line.tax_inclusive else line.description,
            line.amount,
        )
        for line in lines
        if line.kind == LineKind.TAX
    )
    document_lines = tuple(
        Line(line.description, line.amount, line.quantity, line.unit_amount)
        for line in lines
        if line.kind != LineKind.TAX
    )
    return _document(invoice, seller, customer, document_lines, taxes=taxes, number=number)


def _document(
    invoice: InvoiceFacts,
    seller: Party,
    customer: Party,
    lines: tuple[Line, ...],
    *,
    taxes: tuple[TaxLine, ...] = (),
    number: str | None = None,
) -> InvoiceDocument:
    """``invoice``'s document with these lines, checked to add up to the amount charged."""
    document = InvoiceDocument(
        invoice_id=invoice.id,
        currency=invoice.currency,
        issued_at=invoice.created_at,
        period_start=invoice.period_start,
        period_end=invoice.period_end,
        status=invoice.status,
        seller=seller,
        customer=customer,
        lines=lines,
        taxes=taxes,
        number=number,
        paid_at=invoice.paid_at,
    )
    if document.total != invoice.amount:
        raise ValueError(f"invoice {invoice.id}: lines add up to {document.total}, not amount")
    return document
