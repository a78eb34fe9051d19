"""Subscribe a customer: the subscription, its first period's invoice and events, atomically."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from billing_core.db.pg import Connection
from billing_core.domain import events as ev
from billing_core.domain import invoice as invoice_rules
from billing_core.domain import invoice_lines as line_rules
from billing_core.domain.errors import DomainError
from billing_core.domain.invoice_lines import InvoiceLine
from billing_core.domain.period import Interval, period_bounds
from billing_core.domain.subscription import SubscriptionStatus
from billing_core.repo import idempotency as idempotency_repo
from billing_core.repo import invoices as invoices_repo
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.repo.plans import Plan

# A start a little ahead of our clock is the caller's clock skew, not a future start.
START_SKEW = timedelta(minutes=5)


class InvalidStart(DomainError):
    """The requested start is in the future or its first period is already over."""


# The sequences whose next values subscribe() takes as the new rows' ids (drawn beforehand, in
# the statement that takes the request's lock: one round trip fewer).
ID_SEQUENCES = ("subscription_id_seq", "invoice_id_seq")


@dataclass(frozen=True)
class NewSubscription:
    """Every row a subscription starts with, as it is inserted."""

    subscription: subscriptions_repo.Subscription
    invoice: invoices_repo.Invoice
    lines: list[InvoiceLine]
    events: list[ev.DomainEvent]


def new_subscription(
    plan: Plan,
    *,
    subscription_id: int,
    invoice_id: int,
    customer_id: int,
    time_zone: str,
    now: datetime,
    start_at: datetime | None = None,
) -> NewSubscription:
    """An ACTIVE subscription to ``plan`` whose period 0 starts at ``start_at`` (default
    ``now``), its first invoice and their events: pure (no database).

    The billing anchor is that start, time of day included, so every later period boundary
    (computed from the anchor in ``time_zone``) falls at the same local time. The first
    invoice (RENEWAL, period 0, the plan's price) is due at once.
    """
    start = now if start_at is None else start_at
    if start > now + START_SKEW:
        raise InvalidStart("startAt must not be in the future")
    period = period_bounds(start, Interval(plan.billing_interval), 0, time_zone)
    if period.end <= now:
        raise InvalidStart("startAt is so far in the past that its first period is already over")
    sub = subscriptions_repo.Subscription(
        id=subscription_id,
        customer_id=customer_id,
        status=str(SubscriptionStatus.ACTIVE),
        time_zone=time_zone,
        billing_anchor=start,
        period_index=0,
        current_period_start=period.start,
        current_period_end=period.end,
        cancel_at_period_end=False,
        canceled_at=None,
        credit_balance=0,
        version=0,
        created_at=now,
        updated_at=now,
        plan_id=plan.id,
        plan_code=plan.code,
        plan_name=plan.name,
        plan_price_amount=plan.price_amount,
        plan_currency=plan.currency,
        plan_interval=plan.billing_interval,
    )
    opening = invoice_rules.opening(plan.price_amount, now)
    invoice = invoices_repo.Invoice(
        id=invoice_id,
        subscription_id=subscription_id,
        customer_id=customer_id,
        kind="RENEWAL",
        period_index=0,
        period_start=period.start,
        period_end=period.end,
        subtotal=plan.price_amount,
        credit_applied=0,
        amount=plan.price_amount,
        currency=plan.currency,
        status=str(opening.status),
        attempt_count=0,
        next_attempt_at=opening.next_attempt_at,
        paid_at=opening.paid_at,
        closed_at=opening.paid_at,
        created_at=now,
    )
    lines = line_rules.period_lines(plan.code, plan.price_amount, period.start, period.end, 0)
    line_rules.check_total(
        lines,
        subtotal=invoice.subtotal,
        credit_applied=invoice.credit_applied,
        amount=invoice.amount,
    )
    events = [
        ev.subscription_created(
            subscription_id, customer_id, plan.code, period.start, period.end, time_zone
        ),
        *opened_invoice_events(invoice),
    ]
    return NewSubscription(sub, invoice, lines, events)


async def subscribe(
    conn: Connection,
    new: NewSubscription,
    *,
    now: datetime,
    record: idempotency_repo.NewRecord | None = None,
) -> None:
    """Insert ``new`` (from :func:`new_subscription`, its ids drawn from ``ID_SEQUENCES``) in
    one statement on a driver connection, in the caller's transaction, with ``record`` (the
    API's stored response) if given."""
    await subscriptions_repo.insert_new(
        conn, new.subscription, new.invoice, new.lines, new.events, now=now, record=record
    )


async def subscribe_unless_claimed(
    conn: Connection, new: NewSubscription, *, now: datetime, record: idempotency_repo.NewRecord
) -> subscriptions_repo.Claimed:
    """:func:`subscribe` as a whole keyed request in one statement, outside any transaction:
    only if the request's key is free (see ``subscriptions_repo.insert_new_unless_claimed``)."""
    return await subscriptions_repo.insert_new_unless_claimed(
        conn, new.subscription, new.invoice, new.lines, new.events, now=now, record=record
    )


def opened_invoice_events(invoice: invoices_repo.Invoice, tax: int = 0) -> list[ev.DomainEvent]:
    return ev.invoice_opened(invoice, invoice.id, invoice.kind, tax)
