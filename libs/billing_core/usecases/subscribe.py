"""Subscribe a customer: the subscription, its first period's invoice and events, atomically."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

from billing_core.domain import events as ev
from billing_core.domain import invoice as invoice_rules
from billing_core.domain import invoice_lines as line_rules
from billing_core.domain.coupons import Discount, plan_period_lines
from billing_core.domain.errors import DomainError
from billing_core.domain.invoice_lines import InvoiceLine
from billing_core.domain.period import Interval, period_bounds, zone
from billing_core.domain.subscription import SubscriptionStatus
from billing_core.repo import audit as audit_repo
from billing_core.repo import idempotency as idempotency_repo
from billing_core.repo import invoices as invoices_repo
from billing_core.repo import subscription_groups
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.repo.plans import Plan

# A start a little ahead of our clock is the caller's clock skew, not a future start.
START_SKEW = timedelta(minutes=5)


class InvalidStart(DomainError):
    """The requested start is in the future or its first period is already over."""


class InvalidTrialEnd(DomainError):
    """The requested trial end is not after now and the start, or too far away."""


# The trial a subscription gets unless it asks otherwise: its plan's trial_days.
PLAN_TRIAL: Final = "plan"
MAX_TRIAL = timedelta(days=730)


# The sequences whose next values a new subscription takes as its rows' ids (drawn beforehand).
ID_SEQUENCES = ("subscription_id_seq", "invoice_id_seq")


@dataclass(frozen=True)
class NewSubscription:
    """Every row a subscription starts with, as it is inserted."""

    subscription: subscriptions_repo.Subscription
    invoice: invoices_repo.Invoice | None  # None in a trial
    lines: list[InvoiceLine]  # the invoice's lines (none in a trial)
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
    trial_end: datetime | Literal["plan"] | None = PLAN_TRIAL,
    discount: Discount | None = None,
) -> NewSubscription:
    """An ACTIVE subscription to ``plan`` whose period 0 starts at ``start_at`` (default
    ``now``), its first invoice and their events: pure (no database).

    The billing anchor is that start, time of day included, so every later period boundary
    (computed from the anchor in ``time_zone``) falls at the same local time. The first
    invoice (RENEWAL, period 0, the plan's price) is due at once.

    With a trial (``trial_end``, or by default the plan's ``trial_days`` counted in local days
    of ``time_zone``; None: no trial) it is TRIALING instead: its current period is the trial,
    [start, trial end), the anchor is the trial end, and nothing is invoiced — the renewer
    invoices period 0 when the trial ends.

    ``discount`` (a coupon redeemed at subscribing, from period 0) lowers the first invoice by
    a ``DISCOUNT`` line; in a trial it is the renewer's to apply at the trial's end.
    """
    start = now if start_at is None else start_at
    if start > now + START_SKEW:
        raise InvalidStart("startAt must not be in the future")
    trial = _trial_end(plan, start, time_zone, trial_end)
    if trial is not None:
        if trial <= now or trial <= start:
            raise InvalidTrialEnd("trialEnd must be after now and after the start")
        if trial - start > MAX_TRIAL:
            raise InvalidTrialEnd(f"a trial lasts at most {MAX_TRIAL.days} days")
        return _trialing_subscription(
            plan, subscription_id, customer_id, time_zone, start, trial, now
        )
    period = period_bounds(start, Interval(plan.billing_interval), 0, time_zone)
    if period.end <= now:
        raise InvalidStart("startAt is so far in the past that its first period is already over")
    sub = _new_row(
        plan,
        subscription_id,
        customer_id,
        time_zone,
        SubscriptionStatus.ACTIVE,
        anchor=start,
        period=(period.start, period.end),
        now=now,
    )
    lines = plan_period_lines(plan.code, plan.price_amount, discount, 0, period)
    amount = line_rules.total(lines)
    opening = invoice_rules.opening(amount, now)
    invoice = invoices_repo.Invoice(
        id=invoice_id,
        subscription_id=subscription_id,
        customer_id=customer_id,
        kind="RENEWAL",
        period_index=0,
        period_start=period.start,
        period_end=period.end,
        subtotal=amount,
        credit_applied=0,
        amount=amount,
        currency=plan.currency,
        status=str(opening.status),
        attempt_count=0,
        next_attempt_at=opening.next_attempt_at,
        paid_at=opening.paid_at,
        closed_at=opening.paid_at,
        created_at=now,
    )
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


def _trial_end(
    plan: Plan, start: datetime, time_zone: str, chosen: datetime | Literal["plan"] | None
) -> datetime | None:
    if not isinstance(chosen, str):
        return chosen
    if plan.trial_days <= 0:
        return None
    # Local calendar days: the trial ends at the start's local time of day, DST or not.
    local = start.astimezone(zone(time_zone))
    return (local + timedelta(days=plan.trial_days)).astimezone(UTC)


def _new_row(
    plan: Plan,
    subscription_id: int,
    customer_id: int,
    time_zone: str,
    status: SubscriptionStatus,
    *,
    anchor: datetime,
    period: tuple[datetime, datetime],
    now: datetime,
    trial_end: datetime | None = None,
) -> subscriptions_repo.Subscription:
    """A new subscription's row at version 0, in its period 0 (or its trial)."""
    return subscriptions_repo.Subscription(
        id=subscription_id,
        customer_id=customer_id,
        status=str(status),
        time_zone=time_zone,
        billing_anchor=anchor,
        period_index=0,
        current_period_start=period[0],
        current_period_end=period[1],
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
        trial_end=trial_end,
    )


def _trialing_subscription(
    plan: Plan,
    subscription_id: int,
    customer_id: int,
    time_zone: str,
    start: datetime,
    trial_end: datetime,
    now: datetime,
) -> NewSubscription:
    sub = _new_row(
        plan,
        subscription_id,
        customer_id,
        time_zone,
        SubscriptionStatus.TRIALING,
        anchor=trial_end,
        period=(start, trial_end),
        now=now,
        trial_end=trial_end,
    )
    events = [
        ev.subscription_created(
            subscription_id,
            customer_id,
            plan.code,
            start,
            trial_end,
            time_zone,
            trial_end=trial_end,
        )
    ]
    return NewSubscription(sub, None, [], events)


def keyed(
    new: NewSubscription,
    *,
    now: datetime,
    actor: audit_repo.Actor,
    record: idempotency_repo.NewRecord,
) -> subscription_groups.KeyedNew:
    """``new`` as a whole keyed request, to be written by the create statement, alone or with
    others' (``subscription_groups.insert_unless_claimed``): only if the request's key is
    free."""
    return subscription_groups.KeyedNew(
        new.subscription,
        new.invoice,
        new.lines,
        new.events,
        now,
        audit_entry(new, actor),
        record,
    )


def audit_entry(new: NewSubscription, actor: audit_repo.Actor) -> audit_repo.AuditEntry:
    sub = new.subscription
    return audit_repo.AuditEntry(
        actor,
        audit_repo.SUBSCRIPTION_CREATE,
        audit_repo.SUBSCRIPTION,
        sub.id,
        version_after=sub.version,
        detail={"customerId": sub.customer_id, "planCode": sub.plan_code},
    )


def opened_invoice_events(invoice: invoices_repo.Invoice, tax: int = 0) -> list[ev.DomainEvent]:
    return ev.invoice_opened(invoice, invoice.id, invoice.kind, tax)
