"""Cancel a subscription, now or at the end of its current period."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from billing_core.domain.events import DomainEvent, EventType
from billing_core.repo import invoices as invoices_repo
from billing_core.repo import outbox
from billing_core.repo import subscriptions as subscriptions_repo


async def cancel(
    session: AsyncSession,
    *,
    subscription_id: int,
    at_period_end: bool,
    now: datetime,
    expected_version: int | None = None,
) -> bool:
    """Cancel; return False when there was nothing to do (already canceled or scheduled).

    Immediately: the subscription becomes CANCELED and its OPEN invoices VOID (dunning stops;
    credit they had consumed goes back to the balance). At period end: only the flag is set,
    and the renewer cancels instead of renewing. Raises ``VersionConflict`` when the
    subscription is not at ``expected_version`` or changes before the write.
    """
    sub = await subscriptions_repo.get(session, subscription_id)
    if expected_version is not None and expected_version != sub.version:
        raise subscriptions_repo.VersionConflict(subscription_id, expected_version, sub.version)
    if sub.status == "CANCELED":
        return False
    if at_period_end:
        if sub.cancel_at_period_end:
            return False
        await subscriptions_repo.update_versioned(
            session,
            subscription_id,
            expected_version=sub.version,
            now=now,
            values={"cancel_at_period_end": True},
        )
        return True

    # Invoices before the subscription row: the same lock order as recording a payment result.
    voided = await invoices_repo.void_open_invoices(session, subscription_id, now=now)
    refund = sum(v.credit_applied for v in voided)
    await subscriptions_repo.update_versioned(
        session,
        subscription_id,
        expected_version=sub.version,
        now=now,
        values={
            "status": "CANCELED",
            "canceled_at": now,
            "cancel_at_period_end": False,
            "credit_balance": sub.credit_balance + refund,
        },
    )
    for v in voided:
        if v.credit_applied:
            await subscriptions_repo.add_credit_entry(
                session,
                subscription_id=subscription_id,
                amount=v.credit_applied,
                reason="VOID_REFUND",
                invoice_id=v.id,
                now=now,
            )
    events = [
        DomainEvent(
            EventType.InvoiceVoided,
            subscription_id,
            {
                "invoiceId": v.id,
                "subscriptionId": subscription_id,
                "amount": v.amount,
                "currency": v.currency,
                "reason": "subscription_canceled",
            },
        )
        for v in voided
    ]
    events.append(
        DomainEvent(
            EventType.SubscriptionCanceled,
            subscription_id,
            {
                "subscriptionId": subscription_id,
                "customerId": sub.customer_id,
                "reason": "customer_request",
                "canceledAt": now.isoformat(),
                "voidedInvoiceIds": [v.id for v in voided],
            },
        )
    )
    await outbox.append_events(session, events, now)
    return True
