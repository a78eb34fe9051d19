"""What to do with each claimed subscription: pure, no I/O, decided by the domain rules.

For one due subscription the planner walks its missed periods in order (catch-up): at each
period end the domain's ``renew_or_cancel_at_period_end`` either cancels the subscription (its
``cancel_at_period_end`` flag) or renews it, in which case the next period comes from the
drift-free ``period_bounds`` and the invoice takes what credit the subscription has
(``apply_credit``). A period whose renewal invoice already exists (a replayed batch) is advanced
over without a second invoice and without consuming credit: that period is already billed.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

from billing_core.domain import credit as credit_rules
from billing_core.domain import invoice as invoice_rules
from billing_core.domain import period as period_rules
from billing_core.domain import subscription as subscription_rules
from billing_core.domain.events import DomainEvent
from billing_core.repo.renewal import DueSubscription, NewRenewalInvoice, SubscriptionWrite
from services.renewer import events as renewal_events


class BadSubscriptionData(Exception):
    """A claimed row the renewer cannot process safely (logged and parked, never guessed at)."""


@dataclass(frozen=True, slots=True)
class PlannedInvoice:
    invoice: NewRenewalInvoice
    credit_used: int


@dataclass(slots=True)
class RowPlan:
    """The outcome for one claimed subscription."""

    due: DueSubscription
    write: SubscriptionWrite
    invoices: list[PlannedInvoice] = field(default_factory=list)
    canceled: bool = False
    # Periods advanced over because their renewal invoice already existed.
    already_invoiced: list[int] = field(default_factory=list)
    # Events that do not depend on an invoice id (e.g. SubscriptionCanceled), in order, emitted
    # after the invoice events of this row.
    trailing_events: list[DomainEvent] = field(default_factory=list)


# ZoneInfo keeps only a few zones strongly cached; holding every zone seen keeps the domain's
# ZoneInfo(tz) lookups in memory instead of re-reading the tz database under a mix of zones.
_ZONES: dict[str, ZoneInfo] = {}


def _hold_zone(tz: str) -> None:
    if tz not in _ZONES and len(_ZONES) < 2000:
        _ZONES[tz] = period_rules.zone(tz)


def _state_of(due: DueSubscription) -> subscription_rules.SubscriptionState:
    return subscription_rules.SubscriptionState(
        id=due.id,
        status=subscription_rules.SubscriptionStatus(due.status),
        cancel_at_period_end=due.cancel_at_period_end,
        plan_code=due.plan_code,
        version=due.version,
    )


def plan_row(
    due: DueSubscription,
    *,
    now: datetime,
    max_periods: int,
    existing: Collection[tuple[int, datetime]] = (),
) -> RowPlan:
    """Decide the renewals (or the cancellation) of one due subscription at ``now``.

    Renews at most ``max_periods`` periods; a subscription still due afterwards stays due and is
    taken again by the next batch. Raises :class:`BadSubscriptionData` for rows that cannot be
    renewed without guessing (unknown time zone or interval, periods that do not follow from the
    billing anchor).
    """
    try:
        _hold_zone(due.time_zone)
        interval = period_rules.Interval(due.billing_interval)
        current_end = period_rules.period_end(
            due.billing_anchor, interval, due.period_index, due.time_zone
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

    state = _state_of(due)
    index, start, end = due.period_index, due.current_period_start, due.current_period_end
    balance = due.credit_balance
    invoices: list[PlannedInvoice] = []
    already_invoiced: list[int] = []
    trailing: list[DomainEvent] = []
    canceled_at: datetime | None = None
    renewed = 0
    while end <= now and renewed < max_periods:
        state, events = subscription_rules.renew_or_cancel_at_period_end(state, now)
        trailing.extend(events)
        if state.status == subscription_rules.SubscriptionStatus.CANCELED:
            canceled_at = now
            break
        index += 1
        start, end = (
            end,
            period_rules.period_end(due.billing_anchor, interval, index, due.time_zone),
        )
        renewed += 1
        if (due.id, start) in existing:
            already_invoiced.append(index)
            continue
        split = credit_rules.apply_credit(due.price_amount, balance)
        balance = split.credit_remaining
        start_as = invoice_rules.opening(split.amount_due, now)
        invoices.append(
            PlannedInvoice(
                invoice=NewRenewalInvoice(
                    subscription_id=due.id,
                    customer_id=due.customer_id,
                    period_index=index,
                    period_start=start,
                    period_end=end,
                    subtotal=due.price_amount,
                    credit_applied=split.credit_used,
                    amount=split.amount_due,
                    currency=due.currency,
                    status=str(start_as.status),
                    next_attempt_at=start_as.next_attempt_at,
                    paid_at=start_as.paid_at,
                ),
                credit_used=split.credit_used,
            )
        )
    return RowPlan(
        due=due,
        write=_write(
            due,
            state=state,
            index=index,
            start=start,
            end=end,
            balance=balance,
            canceled_at=canceled_at,
        ),
        invoices=invoices,
        canceled=canceled_at is not None,
        already_invoiced=already_invoiced,
        trailing_events=trailing,
    )


def _write(
    due: DueSubscription,
    *,
    state: subscription_rules.SubscriptionState,
    index: int,
    start: datetime,
    end: datetime,
    balance: int,
    canceled_at: datetime | None,
) -> SubscriptionWrite:
    # Every write bumps the version (at least once), so an API write that read the row before
    # this batch fails its optimistic check instead of overwriting the renewal.
    return SubscriptionWrite(
        id=due.id,
        expected_version=due.version,
        version=max(state.version, due.version + 1),
        status=str(state.status),
        period_index=index,
        current_period_start=start,
        current_period_end=end,
        credit_balance=balance,
        canceled_at=canceled_at,
    )


def invoice_events(plan: RowPlan, invoice_ids: Sequence[int]) -> list[DomainEvent]:
    """The row's events in order: per invoice InvoiceCreated (and InvoicePaid when nothing was
    left to charge), then the subscription's own events (SubscriptionCanceled)."""
    events: list[DomainEvent] = []
    for planned, invoice_id in zip(plan.invoices, invoice_ids, strict=True):
        events.extend(renewal_events.for_invoice(planned.invoice, invoice_id))
    events.extend(plan.trailing_events)
    return events
