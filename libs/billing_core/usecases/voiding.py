"""Voiding a subscription's OPEN invoices: the one rule, for a cancel and for non-payment. (A
requested void is ended by what the gateway says: ``domain.charge_result.apply_result``.)"""

from __future__ import annotations

from datetime import datetime

from billing_core.domain import events as ev
from billing_core.domain import invoice as invoice_rules
from billing_core.domain.events import DomainEvent
from billing_core.domain.invoice import InvoiceStatus
from billing_core.repo import invoices as invoices_repo
from billing_core.repo import subscriptions as subscriptions_repo


async def void_open_invoices(
    db: invoices_repo.Db,
    subscription_id: int,
    *,
    now: datetime,
    keep_invoice_id: int | None = None,
) -> list[DomainEvent]:
    """Cancel the OPEN invoices (but ``keep_invoice_id``) by ``domain.invoice.cancel``: VOID at
    once — their consumed credit back to the balance (``credit_returned_by_void``) and an
    InvoiceVoided event each — or, for one whose gateway call may be in flight, a requested
    void that the call's result decides (``domain.charge_result.apply_result``).

    The caller holds the subscription's row lock and has made its version-checked write.
    """
    voided: list[invoices_repo.CancelableInvoice] = []
    requested: list[int] = []
    for invoice in await invoices_repo.lock_open_invoices(
        db, subscription_id, now=now, keep_invoice_id=keep_invoice_id
    ):
        after = invoice_rules.cancel(invoice.state, now, call_in_flight=invoice.call_in_flight)
        if after.status == InvoiceStatus.VOID:
            voided.append(invoice)
        elif after.void_requested and not invoice.state.void_requested:
            requested.append(invoice.state.id)
    await invoices_repo.void_invoices(db, [v.state.id for v in voided], now=now)
    await invoices_repo.request_voids(db, requested, now=now)
    for invoice in voided:
        credit = invoice_rules.credit_returned_by_void(invoice.credit_applied)
        if credit:
            await subscriptions_repo.return_credit(
                db,
                subscription_id=subscription_id,
                amount=credit,
                invoice_id=invoice.state.id,
                now=now,
            )
    return [ev.invoice_voided(subscription_id, v.state.id, now) for v in voided]
