"""The subscription state machine: TRIALING -> ACTIVE <-> PAST_DUE -> CANCELED (+ the
cancel-at-period-end flag; a trial's "period" is the trial itself).

Each transition returns the new state and the events to emit, or raises. Every real change bumps
``version`` (optimistic locking); a no-op returns the same state and no events.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from billing_core.domain import events as ev
from billing_core.domain.errors import IllegalTransition, SubscriptionCanceledError
from billing_core.domain.events import DomainEvent


class SubscriptionStatus(StrEnum):
    TRIALING = "TRIALING"
    ACTIVE = "ACTIVE"
    PAST_DUE = "PAST_DUE"
    CANCELED = "CANCELED"


@dataclass(frozen=True)
class SubscriptionState:
    id: int
    status: SubscriptionStatus
    cancel_at_period_end: bool
    plan_code: str
    version: int
    canceled_at: datetime | None = None


Transition = tuple[SubscriptionState, list[DomainEvent]]


def change_instant(requested: datetime, last_write: datetime) -> datetime:
    """When a change asked for at ``requested`` happens: then, or at the subscription's last
    write when that is later. A request stamped before another change that committed first
    (two requests in flight at once) applies after it, so one subscription's history never
    goes back in time: prorations and plan spans follow the order the changes were made in."""
    return max(requested, last_write)


def _bump(state: SubscriptionState, **changes: object) -> SubscriptionState:
    return replace(state, version=state.version + 1, **changes)  # type: ignore[arg-type]


def _require_not_canceled(state: SubscriptionState, action: str) -> None:
    if state.status == SubscriptionStatus.CANCELED:
        raise SubscriptionCanceledError(f"cannot {action}: subscription {state.id} is canceled")


def cancel_now(
    state: SubscriptionState, now: datetime, reason: str = "customer_request"
) -> Transition:
    if state.status == SubscriptionStatus.CANCELED:
        return state, []
    new = _bump(
        state, status=SubscriptionStatus.CANCELED, canceled_at=now, cancel_at_period_end=False
    )
    return new, [ev.subscription_canceled(state.id, reason, now)]


def schedule_cancel_at_period_end(state: SubscriptionState, now: datetime) -> Transition:
    if state.status == SubscriptionStatus.CANCELED or state.cancel_at_period_end:
        return state, []
    return _bump(state, cancel_at_period_end=True), []


def resume_renewal(state: SubscriptionState, now: datetime) -> Transition:
    """Undo a scheduled cancel: the subscription renews at its period end again (a trial ends
    into its first paid period again). Nothing scheduled: a no-op. A canceled subscription
    refuses (it is over; subscribe again)."""
    _require_not_canceled(state, "resume renewal")
    if not state.cancel_at_period_end:
        return state, []
    return _bump(state, cancel_at_period_end=False), []


def change_plan(
    state: SubscriptionState, new_plan_code: str, now: datetime, *, proration_due: int = 0
) -> Transition:
    _require_not_canceled(state, "change plan")
    if new_plan_code == state.plan_code:
        return state, []
    new = _bump(state, plan_code=new_plan_code)
    return new, [
        ev.subscription_plan_changed(state.id, state.plan_code, new_plan_code, proration_due, now)
    ]


def _require_not_trialing(state: SubscriptionState, action: str) -> None:
    if state.status == SubscriptionStatus.TRIALING:
        raise IllegalTransition(f"cannot {action}: subscription {state.id} is in its trial")


def mark_past_due(
    state: SubscriptionState, now: datetime, invoice_id: int | None = None
) -> Transition:
    _require_not_canceled(state, "mark past due")
    _require_not_trialing(state, "mark past due")
    if state.status == SubscriptionStatus.PAST_DUE:
        return state, []
    return _bump(state, status=SubscriptionStatus.PAST_DUE), [
        ev.subscription_past_due(state.id, invoice_id)
    ]


def reactivate(
    state: SubscriptionState, now: datetime, invoice_id: int | None = None
) -> Transition:
    _require_not_canceled(state, "reactivate")
    _require_not_trialing(state, "reactivate")
    if state.status == SubscriptionStatus.ACTIVE:
        return state, []
    return _bump(state, status=SubscriptionStatus.ACTIVE), [
        ev.subscription_reactivated(state.id, invoice_id)
    ]


def cancel_for_nonpayment(state: SubscriptionState, now: datetime) -> Transition:
    return cancel_now(state, now, reason="nonpayment")


def renew_or_cancel_at_period_end(state: SubscriptionState, now: datetime) -> Transition:
    """At period end: cancel when flagged, else stay ACTIVE and renew (the caller invoices)."""
    if state.status != SubscriptionStatus.ACTIVE:
        raise IllegalTransition(f"only ACTIVE subscriptions renew; {state.id} is {state.status}")
    if state.cancel_at_period_end:
        new = _bump(state, status=SubscriptionStatus.CANCELED, canceled_at=now)
        return new, [ev.subscription_canceled(state.id, "period_end", now)]
    return _bump(state), []


def end_trial(state: SubscriptionState, now: datetime, *, early: bool = False) -> Transition:
    """The trial ends (at its end, or ``early`` on request): ACTIVE, and the caller invoices the
    first paid period; or, when a cancel at period end was scheduled during the trial,
    CANCELED without any charge (only at the trial's own end: ending it early on request
    means the customer wants to pay now, which undoes the scheduled cancel)."""
    if state.status != SubscriptionStatus.TRIALING:
        raise IllegalTransition(f"subscription {state.id} is not in a trial ({state.status})")
    if state.cancel_at_period_end and not early:
        new = _bump(state, status=SubscriptionStatus.CANCELED, canceled_at=now)
        return new, [ev.subscription_canceled(state.id, "period_end", now)]
    new = _bump(state, status=SubscriptionStatus.ACTIVE, cancel_at_period_end=False)
    return new, [ev.subscription_trial_ended(state.id, now, early=early)]
