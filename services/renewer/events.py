"""The outbox events of a renewal invoice, built with the domain's event constructors."""

from __future__ import annotations

from billing_core.domain import events as ev
from billing_core.domain.events import DomainEvent
from billing_core.repo.renewal import NewRenewalInvoice


def for_invoice(invoice: NewRenewalInvoice, invoice_id: int) -> list[DomainEvent]:
    """InvoiceCreated, plus InvoicePaid when the invoice was settled at creation (amount 0).

    A renewal's InvoiceCreated also carries its period index, subtotal and credit applied
    (additive keys: consumers of the common payload are unaffected).
    """
    created = ev.invoice_created(
        invoice.subscription_id,
        invoice_id,
        "RENEWAL",
        invoice.amount,
        invoice.currency,
        invoice.period_start,
        invoice.period_end,
    )
    payload = dict(created.payload)
    payload["periodIndex"] = invoice.period_index
    payload["subtotal"] = invoice.subtotal
    payload["creditApplied"] = invoice.credit_applied
    events = [DomainEvent(created.type, created.subscription_id, payload)]
    if invoice.status == "PAID" and invoice.paid_at is not None:
        events.append(
            ev.invoice_paid(
                invoice.subscription_id,
                invoice_id,
                invoice.amount,
                invoice.currency,
                invoice.paid_at,
            )
        )
    return events
