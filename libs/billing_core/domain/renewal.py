"""Renewal at period end, for one due subscription: pure, no I/O, decided by the domain rules.

A TRIALING subscription is due when its trial ends (the trial is its current period, ending at
the billing anchor): ``subscription.end_trial`` makes it ACTIVE and period 0 is invoiced like
any renewal — then the catch-up goes on — or, with a cancel scheduled during the trial, cancels
it without any invoice.

The planner walks the subscription's missed periods in order (catch-up): at each period end
``subscription.renew_or_cancel_at_period_end`` either cancels it (its ``cancel_at_period_end``
flag) or renews it, in which case the next period comes from the drift-free ``period_end`` of the
anchor and the invoice takes what credit the subscription has (``credit.apply_credit``) and
starts as ``invoice.opening`` says. Each invoice is priced once, at its final figures: the plan
period's line, less the subscription's ``discount`` where it covers the period
(``coupons.plan_period_lines``), taxed at the subscription's ``rate`` when it has one
(``tax.taxed_at``), then the credit applied to that total; its lines before credit go with it.
A period whose renewal invoice already exists (a replayed batch) is advanced over without a
second invoice and without consuming credit: that period is already billed. A paused period
(the subscription's collection is paused and the period starts before the pause's resume time,
if any) is invoiced all the same — never a skipped period — but VOID or DRAFT as the pause says,
priced the same and without consuming credit. A plan change scheduled for the period end
(``state.scheduled_plan_code``) is applied at the first period boundary the planner crosses
(SubscriptionPlanChanged, ``changedAt`` = that boundary): that period and the later ones are
invoiced at the new plan's price. When that plan bills at another interval, the billing anchor
moves to that boundary (``anchor_period_index`` = the period starting there) and the periods
from it on are counted in the new interval (:mod:`billing_core.domain.interval_change`).

Periods are counted from the anchor: period ``n`` is ``n - anchor_period_index`` intervals from
``billing_anchor`` (``anchor_period_index`` is 0 until a plan change to another interval moved
the anchor).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from billing_core.domain import credit as credit_rules
from billing_core.domain import events as ev
from billing_core.domain import invoice as invoice_rules
from billing_core.domain import period as period_rules
from billing_core.domain import subscription as subscription_rules
from billing_core.domain.coupons import Discount, plan_period_lines
from billing_core.domain.events import DomainEvent
from billing_core.domain.invoice import InvoiceKind, InvoiceStatus
from billing_core.domain.invoice_lines import InvoiceLine
from billing_core.domain.period import Period
from billing_core.domain.subscription import (
    PauseBehavior,
    SubscriptionState,
    SubscriptionStatus,
)
from billing_core.domain.tax import TaxedLines, TaxRate, taxed_at
from billing_core.domain.values import value_object


class BadSubscriptionData(Exception):
    """A due subscription that cannot be renewed without guessing (parked, never guessed at)."""


@value_object
class DueSubscription:
    """A subscription whose current period has ended, with its plan's price and interval."""

    state: SubscriptionState
    customer_id: int
    time_zone: str
    billing_anchor: datetime
    period_index: int
    current_period_start: datetime
    current_period_end: datetime
    credit_balance: int
    price_amount: int
    currency: str
    billing_interval: str
    # The plan of a change scheduled for the period end (``state.scheduled_plan_code``): its price
    # and interval.
    scheduled_price_amount: int | None = None
    scheduled_billing_interval: str | None = None
    # The index of the period that starts at ``billing_anchor`` (0 until an anchor moved).
    anchor_period_index: int = 0

    @property
    def id(self) -> int:
        return self.state.id


@value_object
class RenewalInvoice:
    """A renewal invoice to insert: one period of the plan, less the credit it consumes."""

    subscription_id: int
    customer_id: int
    period_index: int
    period_start: datetime
    period_end: datetime
    subtotal: int
    credit_applied: int
    amount: int
    currency: str
    # OPEN, or PAID when nothing is left to charge; a paused period's: VOID or DRAFT
    status: InvoiceStatus
    next_attempt_at: datetime | None
    paid_at: datetime | None
    tax: int = 0  # the tax in subtotal (billing_core.domain.tax), set when a rate applies
    voided_at: datetime | None = None  # created VOID (a paused period's)
    # Its lines before credit: the plan period's, a discount's, the tax's (their total is the
    # subtotal; the credit line follows from credit_applied).
    lines: tuple[InvoiceLine, ...] = ()


@value_object
class RenewedSubscription:
    """The new state of one due subscription; ``expected_version`` is the one it was read at."""

    id: int
    expected_version: int
    version: int
    status: SubscriptionStatus
    period_index: int
    current_period_start: datetime
    current_period_end: datetime
    credit_balance: int
    canceled_at: datetime | None
    # The scheduled plan change was applied (the subscription takes its scheduled plan).
    plan_changed: bool = False
    # The billing anchor and the index of the period starting there (moved when the applied
    # scheduled change bills at another interval; None: as they were).
    billing_anchor: datetime | None = None
    anchor_period_index: int | None = None


@dataclass(slots=True)
class RenewalPlan:
    """The outcome for one due subscription."""

    due: DueSubscription
    write: RenewedSubscription
    invoices: list[RenewalInvoice] = field(default_factory=list)
    canceled: bool = False
    # Periods advanced over because their renewal invoice already existed.
    already_invoiced: list[int] = field(default_factory=list)
    # Events that do not depend on an invoice id (SubscriptionCanceled), emitted after the
    # invoice events of this subscription.
    trailing_events: list[DomainEvent] = field(default_factory=list)
    # Events before the invoices' (SubscriptionTrialEnded).
    leading_events: list[DomainEvent] = field(default_factory=list)


def plan_renewal(
    due: DueSubscription,
    *,
    now: datetime,
    max_periods: int,
    existing: Collection[tuple[int, datetime]] = (),
    rate: TaxRate | None = None,
    discount: Discount | None = None,
) -> RenewalPlan:
    """Decide the renewals (or the cancellation) of one due subscription at ``now``.

    Renews at most ``max_periods`` periods; a subscription still due afterwards stays due and is
    taken again later. ``existing``: the (subscription id, period start) renewals already
    invoiced. ``rate`` and ``discount``: the subscription's tax rate and discount (none when
    absent). Raises :class:`BadSubscriptionData` for rows that cannot be renewed without
    guessing (unknown time zone or interval, periods that do not follow from the anchor).
    """
    trialing = due.state.status == SubscriptionStatus.TRIALING
    try:
        interval = period_rules.interval_named(due.billing_interval)
        # A trial ends at the anchor, where period 0 starts.
        current_end = (
            due.billing_anchor
            if trialing and due.period_index == 0
            else period_rules.period_end(
                due.billing_anchor,
                interval,
                due.period_index - due.anchor_period_index,
                due.time_zone,
            )
        )
    except Exception as exc:
        raise BadSubscriptionData(f"cannot compute periods: {exc!r}") from exc
    # The stored period must be the anchor's period n: then each next period starts exactly where
    # the previous one ended (no gap, no overlap) and only its end needs computing.
    if current_end != due.current_period_end:
        raise BadSubscriptionData(
            f"current_period_end {due.current_period_end.isoformat()} is not the end of period "
            f"{due.period_index} of anchor {due.billing_anchor.isoformat()} "
            f"({current_end.isoformat()})"
        )

    state = due.state
    index, start, end = due.period_index, due.current_period_start, due.current_period_end
    balance = due.credit_balance
    invoices: list[RenewalInvoice] = []
    already_invoiced: list[int] = []
    trailing: list[DomainEvent] = []
    leading: list[DomainEvent] = []
    canceled = False
    # How periods are priced and counted (both change at a scheduled plan change).
    pricing, plan_changed, counting = (
        _Pricing(due.price_amount, rate, discount),
        False,
        _Counting(due.billing_anchor, due.anchor_period_index, interval),
    )
    # A trial's end comes first: ACTIVE with period 0 (whose index the trial already holds) to
    # invoice next, or CANCELED without a charge when a cancel was scheduled during the trial.
    trial_converted = False
    if trialing:
        state, events = subscription_rules.end_trial(state, now)
        if state.status == SubscriptionStatus.CANCELED:
            trailing.extend(events)
            canceled = True
        else:
            leading.extend(events)
            trial_converted = True
    while not canceled and end <= now and len(invoices) + len(already_invoiced) < max_periods:
        if trial_converted:
            trial_converted = False
        else:
            state, events = subscription_rules.renew_or_cancel_at_period_end(state, now)
            trailing.extend(events)
            if state.status == SubscriptionStatus.CANCELED:
                canceled = True
                break
            index += 1
        start = end
        if state.scheduled_plan_code is not None and due.scheduled_price_amount is not None:
            state, events, counting = _apply_scheduled_change(due, state, start, index, counting)
            leading.extend(events)
            pricing = _Pricing(due.scheduled_price_amount, rate, discount)
            plan_changed = True
        end = counting.period_end(index, due.time_zone)
        if (due.id, start) in existing:
            already_invoiced.append(index)
            continue
        invoice, balance = _period_invoice(due, state, pricing, balance, index, (start, end), now)
        invoices.append(invoice)
    # Every write bumps the version (at least once), so an API write that read the row before
    # this renewal fails its optimistic check instead of overwriting the renewal.
    write = RenewedSubscription(
        id=due.id,
        expected_version=due.state.version,
        version=max(state.version, due.state.version + 1),
        status=state.status,
        period_index=index,
        current_period_start=start,
        current_period_end=end,
        credit_balance=balance,
        canceled_at=now if canceled else None,
        plan_changed=plan_changed,
        billing_anchor=counting.anchor,
        anchor_period_index=counting.anchor_index,
    )
    return RenewalPlan(due, write, invoices, canceled, already_invoiced, trailing, leading)


@value_object
class _Counting:
    """How periods are counted: period ``anchor_index`` starts at ``anchor``, each one
    ``interval`` long."""

    anchor: datetime
    anchor_index: int
    interval: period_rules.Interval

    def period_end(self, index: int, time_zone: str) -> datetime:
        return period_rules.period_end(
            self.anchor, self.interval, index - self.anchor_index, time_zone
        )


@value_object
class _Pricing:
    """How a period is priced: the plan's price, less ``discount`` where it covers the period,
    taxed at ``rate``."""

    price: int
    rate: TaxRate | None
    discount: Discount | None

    def lines(self, plan_code: str, index: int, period: Period) -> TaxedLines:
        return taxed_at(
            self.rate, plan_period_lines(plan_code, self.price, self.discount, index, period)
        )


def _apply_scheduled_change(
    due: DueSubscription,
    state: SubscriptionState,
    start: datetime,
    index: int,
    counting: _Counting,
) -> tuple[SubscriptionState, list[DomainEvent], _Counting]:
    """The change scheduled for the period end, applied at the boundary ``start`` of period
    ``index``: that period is the first one at the new plan (the same currency: checked when
    it was scheduled). At another interval the anchor moves to ``start`` and that period is the
    first one of the new interval."""
    assert state.scheduled_plan_code is not None
    new_interval = period_rules.Interval(due.scheduled_billing_interval or counting.interval)
    new_period: period_rules.Period | None = None
    if new_interval != counting.interval:
        counting = _Counting(start, index, new_interval)
        new_period = period_rules.period_bounds(start, new_interval, 0, due.time_zone)
    state, events = subscription_rules.change_plan(
        state, state.scheduled_plan_code, start, at_period_end=True, new_period=new_period
    )
    return state, events, counting


def _period_invoice(
    due: DueSubscription,
    state: SubscriptionState,
    pricing: _Pricing,
    balance: int,
    index: int,
    bounds: tuple[datetime, datetime],
    now: datetime,
) -> tuple[RenewalInvoice, int]:
    """The renewal invoice of period ``index`` of ``state``'s plan as ``pricing`` prices it, and
    the credit balance after it. A paused period's is priced the same but takes no credit (the
    balance waits for invoices that are collected) and is VOID or DRAFT as the pause says, never
    due for a charge."""
    start, end = bounds
    priced = pricing.lines(state.plan_code, index, Period(start, end))
    subtotal = priced.total
    pause = state.pause
    if pause is not None and pause.covers(start):
        void = pause.behavior == PauseBehavior.VOID
        status, credit_used, amount_due = (
            InvoiceStatus.VOID if void else InvoiceStatus.DRAFT,
            0,
            subtotal,
        )
        next_attempt_at = paid_at = None
        voided_at = now if void else None
    else:
        split = credit_rules.apply_credit(subtotal, balance)
        opening = invoice_rules.opening(split.amount_due, now)
        status, credit_used, amount_due = opening.status, split.credit_used, split.amount_due
        next_attempt_at, paid_at, voided_at = opening.next_attempt_at, opening.paid_at, None
        balance = split.credit_remaining
    invoice = RenewalInvoice(
        due.id,
        due.customer_id,
        index,
        start,
        end,
        subtotal,
        credit_used,
        amount_due,
        due.currency,
        status,
        next_attempt_at,
        paid_at,
        priced.tax,
        voided_at,
        tuple(priced.lines),
    )
    return invoice, balance


def renewal_events(plan: RenewalPlan, invoice_ids: Sequence[int]) -> list[DomainEvent]:
    """The subscription's events in order: the end of its trial (SubscriptionTrialEnded), each
    invoice's (``events.invoice_opened``, then InvoiceVoided for a paused period's VOID one),
    then the subscription's own (SubscriptionCanceled)."""
    events: list[DomainEvent] = list(plan.leading_events)
    for invoice, invoice_id in zip(plan.invoices, invoice_ids, strict=True):
        events += ev.invoice_opened(invoice, invoice_id, InvoiceKind.RENEWAL, invoice.tax)
        if invoice.voided_at is not None:
            events.append(ev.invoice_voided(invoice.subscription_id, invoice_id, invoice.voided_at))
    return events + plan.trailing_events
