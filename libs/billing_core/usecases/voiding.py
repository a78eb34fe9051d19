"""Voiding a subscription's OPEN invoices: the one rule, for a cancel and for non-payment; and
ending the void requests whose call's lease ran out without a result."""

from __future__ import annotations

from datetime import datetime

from billing_core.domain import events as ev
from billing_core.domain import invoice as invoice_rules
from billing_core.domain.events import DomainEvent
from billing_core.domain.invoice import InvoiceStatus
from billing_core.repo import invoices as invoices_repo
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.repo.outbox import append_events


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


async def end_lapsed_void_requests(db: invoices_repo.Db, *, now: datetime, limit: int) -> int:
    """VOID the invoices whose void was requested and whose call's lease ended with no result
    recorded (the process making it died, or the call was never sent): nothing more is known
    than after an uncertain answer, which voids them too; a success reported later is
    refunded. In the caller's transaction; returns how many were voided."""
    lapsed = await invoices_repo.lapsed_void_requests(db, now=now, limit=limit)
    if not lapsed:
        return 0
    await subscriptions_repo.lock_subscriptions(db, sorted(set(lapsed.values())))
    events: list[DomainEvent] = []
    count = 0
    for subscription_id in sorted(set(lapsed.values())):
        mine = {i for i, s in lapsed.items() if s == subscription_id}
        ended: list[invoices_repo.CancelableInvoice] = []
        for invoice in await invoices_repo.lock_open_invoices(db, subscription_id, now=now):
            state = invoice.state
            still_lapsed = (
                state.void_requested
                and state.next_attempt_at is not None
                and state.next_attempt_at <= now
            )
            if state.id in mine and still_lapsed:
                ended.append(invoice)
        await invoices_repo.void_invoices(db, [e.state.id for e in ended], now=now)
        for invoice in ended:
            invoice_rules.void(invoice.state, now)  # the rule's own check (OPEN -> VOID)
            credit = invoice_rules.credit_returned_by_void(invoice.credit_applied)
            if credit:
                await subscriptions_repo.return_credit(
                    db,
                    subscription_id=subscription_id,
                    amount=credit,
                    invoice_id=invoice.state.id,
                    now=now,
                )
            events.append(ev.invoice_voided(subscription_id, invoice.state.id, now))
        count += len(ended)
    await append_events(db, events, now)
    return count
