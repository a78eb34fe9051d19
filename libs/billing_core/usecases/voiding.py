"""Voiding a subscription's OPEN invoices: the one rule, for a cancel and for non-payment. (A
requested void is ended by what the gateway says: ``domain.charge_result.apply_result``.)"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.domain import events as ev
from billing_core.domain import invoice as invoice_rules
from billing_core.domain.events import DomainEvent
from billing_core.domain.invoice import InvoiceStatus
from billing_core.repo import invoices as invoices_repo


async def void_open_invoices(
    conn: Connection,
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
        conn, subscription_id, now=now, keep_invoice_id=keep_invoice_id
    ):
        after = invoice_rules.cancel(invoice.state, now, call_in_flight=invoice.call_in_flight)
        if after.status == InvoiceStatus.VOID:
            voided.append(invoice)
        elif after.void_requested and not invoice.state.void_requested:
            requested.append(invoice.state.id)
    await invoices_repo.void_invoices(conn, [v.state.id for v in voided], now=now)
    await invoices_repo.request_voids(conn, requested, now=now)
    await give_back_credit(
        conn, [(subscription_id, v.state.id, v.credit_applied) for v in voided], now=now
    )
    return [ev.invoice_voided(subscription_id, v.state.id, now) for v in voided]


async def give_back_credit(
    conn: Connection,
    voided: Sequence[tuple[int, int, int]],
    *,
    now: datetime,
) -> None:
    """The one credit-back rule: each voided invoice's consumed credit
    (``(subscription id, invoice id, credit applied)``) back to its subscription's balance, as
    much as ``domain.invoice.credit_returned_by_void`` says, in one statement."""
    returns = [
        invoices_repo.CreditReturn(subscription_id, invoice_id, credit)
        for subscription_id, invoice_id, applied in voided
        if (credit := invoice_rules.credit_returned_by_void(applied))
    ]
    await invoices_repo.return_credits(conn, returns, now=now)
