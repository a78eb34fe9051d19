"""Voiding a subscription's OPEN invoices: the one rule, for a cancel and for non-payment."""

from __future__ import annotations

from datetime import datetime

from billing_core.domain import events as ev
from billing_core.domain import invoice as invoice_rules
from billing_core.domain.events import DomainEvent
from billing_core.repo import invoices as invoices_repo
from billing_core.repo import subscriptions as subscriptions_repo


async def void_open_invoices(
    db: invoices_repo.Db,
    subscription_id: int,
    *,
    now: datetime,
    keep_invoice_id: int | None = None,
) -> list[DomainEvent]:
    """VOID the OPEN invoices (but ``keep_invoice_id``), give back the credit they had consumed
    (``domain.invoice.credit_returned_by_void``) and return their InvoiceVoided events.

    The caller holds the subscription's row lock and has made its version-checked write.
    """
    voided = await invoices_repo.void_open_invoices(
        db, subscription_id, now=now, keep_invoice_id=keep_invoice_id
    )
    for invoice in voided:
        credit = invoice_rules.credit_returned_by_void(invoice.credit_applied)
        if credit:
            await subscriptions_repo.return_credit(
                db, subscription_id=subscription_id, amount=credit, invoice_id=invoice.id, now=now
            )
    return [ev.invoice_voided(subscription_id, invoice.id, now) for invoice in voided]
