"""Subscribe a customer: the subscription, its first period's invoice and events, atomically."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from billing_core.domain import events as ev
from billing_core.domain.errors import DomainError
from billing_core.domain.period import Interval, period_bounds
from billing_core.repo import invoices as invoices_repo
from billing_core.repo import outbox
from billing_core.repo import plans as plans_repo
from billing_core.repo import subscriptions as subscriptions_repo

# A start a little ahead of our clock is the caller's clock skew, not a future start.
START_SKEW = timedelta(minutes=5)


class InvalidStart(DomainError):
    """The requested start is in the future or its first period is already over."""


@dataclass(frozen=True)
class Subscribed:
    subscription_id: int
    invoice_id: int


async def subscribe(
    session: AsyncSession,
    *,
    customer_id: int,
    plan_code: str,
    time_zone: str,
    now: datetime,
    start_at: datetime | None = None,
) -> Subscribed:
    """Create an ACTIVE subscription whose period 0 starts at ``start_at`` (default ``now``).

    The billing anchor is that start, time of day included, so every later period boundary
    (computed from the anchor in ``time_zone``) falls at the same local time. The first
    invoice (RENEWAL, period 0, the plan's price) is due at once.
    """
    plan = await plans_repo.get_by_code(session, plan_code)
    start = now if start_at is None else start_at
    if start > now + START_SKEW:
        raise InvalidStart("startAt must not be in the future")
    interval = Interval(plan.billing_interval)
    period = period_bounds(start, interval, 0, time_zone)
    if period.end <= now:
        raise InvalidStart("startAt is so far in the past that its first period is already over")

    subscription_id = await subscriptions_repo.insert_subscription(
        session,
        customer_id=customer_id,
        plan_id=plan.id,
        time_zone=time_zone,
        billing_anchor=start,
        period_start=period.start,
        period_end=period.end,
        now=now,
    )
    invoice = await invoices_repo.insert_invoice(
        session,
        subscription_id=subscription_id,
        customer_id=customer_id,
        kind="RENEWAL",
        period_index=0,
        period_start=period.start,
        period_end=period.end,
        subtotal=plan.price_amount,
        credit_applied=0,
        currency=plan.currency,
        now=now,
    )
    events = [
        ev.subscription_created(
            subscription_id, customer_id, plan.code, period.start, period.end, time_zone
        ),
        *opened_invoice_events(invoice),
    ]
    await outbox.append_events(session, events, now)
    return Subscribed(subscription_id, invoice.id)


def opened_invoice_events(invoice: invoices_repo.Invoice) -> list[ev.DomainEvent]:
    return ev.invoice_opened(invoice, invoice.id, invoice.kind)
