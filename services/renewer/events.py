"""The outbox events of a renewal invoice, built with the domain's event constructors."""

from __future__ import annotations

from billing_core.domain.events import DomainEvent, EventType
from billing_core.repo.renewal import NewRenewalInvoice


def for_invoice(invoice: NewRenewalInvoice, invoice_id: int) -> list[DomainEvent]:
    """InvoiceCreated, plus InvoicePaid when the invoice was settled at creation (amount 0)."""
    payload: dict[str, object] = {
        "invoiceId": invoice_id,
        "subscriptionId": invoice.subscription_id,
        "customerId": invoice.customer_id,
        "kind": "RENEWAL",
        "periodIndex": invoice.period_index,
        "periodStart": invoice.period_start.isoformat(),
        "periodEnd": invoice.period_end.isoformat(),
        "subtotal": invoice.subtotal,
        "creditApplied": invoice.credit_applied,
        "amount": invoice.amount,
        "currency": invoice.currency,
        "status": invoice.status,
    }
    events = [DomainEvent(EventType.INVOICE_CREATED, invoice.subscription_id, payload)]
    if invoice.status == "PAID" and invoice.paid_at is not None:
        events.append(
            DomainEvent(
                EventType.INVOICE_PAID,
                invoice.subscription_id,
                {
                    "invoiceId": invoice_id,
                    "subscriptionId": invoice.subscription_id,
                    "amount": invoice.amount,
                    "currency": invoice.currency,
                    "paidAt": invoice.paid_at.isoformat(),
                },
            )
        )
    return events
