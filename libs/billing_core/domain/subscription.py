"""The subscription state machine: TRIALING -> ACTIVE <-> PAST_DUE -> CANCELED (+ the
cancel-at-period-end flag; a trial's "period" is the trial itself; + a collection pause, which
leaves the status alone: see :class:`Pause`).

Each transition returns the new state and the events to emit, or raises. Every real change bumps
``version`` (optimistic locking); a no-op returns the same state and no events.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from enum import StrEnum

from billing_core.domain import events as ev
from billing_core.domain.errors import DomainError, IllegalTransition, SubscriptionCanceledError
from billing_core.domain.events import DomainEvent
from billing_core.domain.period import Period
from billing_core.domain.values import value_object


class SubscriptionStatus(StrEnum):
    TRIALING = "TRIALING"
    ACTIVE = "ACTIVE"
    PAST_DUE = "PAST_DUE"
    CANCELED = "CANCELED"


class PauseBehavior(StrEnum):
    """What becomes of the renewal invoices of paused periods (Stripe's pause_collection)."""

    VOID = "void"  # created VOID: the period is given away
    KEEP_AS_DRAFT = "keep_as_draft"  # created DRAFT: kept, never collected by the system


class InvalidPause(DomainError):
    """A pause that cannot be applied as asked (e.g. a resumesAt that is not in the future)."""


@value_object
class Pause:
    """Collection paused since ``paused_at``, until a resume (``resumes_at``: automatic then).

    The status is unchanged and periods keep renewing (never a skipped period), but the renewal
    invoice of every period that starts before ``resumes_at`` (any, without it) is created VOID
    or DRAFT, and no invoice of the subscription is collected while the pause lasts."""

    behavior: PauseBehavior
    paused_at: datetime
    resumes_at: datetime | None = None

    def covers(self, period_start: datetime) -> bool:
        """Whether the renewal of the period starting at ``period_start`` is paused."""
        return self.resumes_at is None or period_start < self.resumes_at


@value_object
class SubscriptionState:
    id: int
    status: SubscriptionStatus
    cancel_at_period_end: bool
    plan_code: str
    version: int
    canceled_at: datetime | None = None
    pause: Pause | None = None
    # A plan change scheduled for the period end (the renewer applies it when it renews).
    scheduled_plan_code: str | None = None


Transition = tuple[SubscriptionState, list[DomainEvent]]


def change_instant(requested: datetime, last_write: datetime) -> datetime:
    """When a change asked for at ``requested`` happens: then, or at the subscription's last
    write when that is later. A request stamped before another change that committed first
    (two requests in flight at once) applies after it, so one subscription's history never
    goes back in time: prorations and plan spans follow the order the changes were made in."""
    return max(requested, last_write)


def _bump(state: SubscriptionState, **changes: object) -> SubscriptionState:
    return replace(state, version=state.version + 1, **changes)  # type: ignore[arg-type]


def _next_version(state: SubscriptionState) -> SubscriptionState:
    """``_bump(state)`` with no other change: what every renewal does, once per period of a
    renewal batch, built directly (``dataclasses.replace`` costs several times more)."""
    return SubscriptionState(
        state.id,
        state.status,
        state.cancel_at_period_end,
        state.plan_code,
        state.version + 1,
        state.canceled_at,
        state.pause,
        state.scheduled_plan_code,
    )


def _require_not_canceled(state: SubscriptionState, action: str) -> None:
    if state.status == SubscriptionStatus.CANCELED:
        raise SubscriptionCanceledError(f"cannot {action}: subscription {state.id} is canceled")


def cancel_now(
    state: SubscriptionState, now: datetime, reason: str = "customer_request"
) -> Transition:
    if state.status == SubscriptionStatus.CANCELED:
        return state, []
    new = _bump(
        state,
        status=SubscriptionStatus.CANCELED,
        canceled_at=now,
        cancel_at_period_end=False,
        pause=None,
    )
    return new, [ev.subscription_canceled(state.id, reason, now)]


def pause(
    state: SubscriptionState,
    behavior: PauseBehavior,
    now: datetime,
    *,
    resumes_at: datetime | None = None,
) -> Transition:
    """Pause collection (or change a pause's behavior or resume time; the same pause again is a
    no-op). A canceled subscription refuses, so does one in its trial (nothing is collected in
    a trial); ``resumes_at`` must be after ``now``."""
    _require_not_canceled(state, "pause")
    _require_not_trialing(state, "pause")
    if resumes_at is not None and resumes_at <= now:
        raise InvalidPause(f"resumesAt {resumes_at.isoformat()} is not after now")
    current = state.pause
    if current is not None and (current.behavior, current.resumes_at) == (behavior, resumes_at):
        return state, []
    paused_at = current.paused_at if current is not None else now
    new = _bump(state, pause=Pause(behavior, paused_at, resumes_at))
    return new, [ev.subscription_paused(state.id, str(behavior), paused_at, resumes_at, now)]


def resume(state: SubscriptionState, now: datetime, *, automatic: bool = False) -> Transition:
    """End a pause: later renewals are collected again, and so are the OPEN invoices (their due
    retries are made at once). Not paused: a no-op; a canceled subscription refuses."""
    _require_not_canceled(state, "resume")
    if state.pause is None:
        return state, []
    new = _bump(state, pause=None)
    return new, [ev.subscription_resumed(state.id, state.pause.paused_at, now, automatic=automatic)]


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
    state: SubscriptionState,
    new_plan_code: str,
    now: datetime,
    *,
    proration_due: int = 0,
    at_period_end: bool = False,
    new_period: Period | None = None,
) -> Transition:
    """The plan changes at ``now`` (and a change scheduled for the period end is dropped: this
    one replaces it). ``at_period_end``: the renewer applying a scheduled change at the period
    boundary ``now``. ``new_period``: the change starts that period at ``now`` (a plan with
    another interval, :mod:`billing_core.domain.interval_change`)."""
    _require_not_canceled(state, "change plan")
    if new_plan_code == state.plan_code:
        return state, []
    new = _bump(state, plan_code=new_plan_code, scheduled_plan_code=None)
    return new, [
        ev.subscription_plan_changed(
            state.id,
            state.plan_code,
            new_plan_code,
            proration_due,
            now,
            effective="period_end" if at_period_end else "now",
            new_period=None if new_period is None else (new_period.start, new_period.end),
        )
    ]


def schedule_plan_change(
    state: SubscriptionState, new_plan_code: str | None, now: datetime
) -> Transition:
    """Schedule a plan change for the current period's end (the renewer applies it), replacing
    one already scheduled; ``None``, or the current plan, unschedules. No change: a no-op. A
    canceled subscription refuses."""
    _require_not_canceled(state, "schedule a plan change")
    wanted = None if new_plan_code == state.plan_code else new_plan_code
    if wanted == state.scheduled_plan_code:
        return state, []
    return _bump(state, scheduled_plan_code=wanted), []


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
    """At period end: cancel when flagged (which ends a pause too), else stay ACTIVE and renew
    (the caller invoices)."""
    if state.status != SubscriptionStatus.ACTIVE:
        raise IllegalTransition(f"only ACTIVE subscriptions renew; {state.id} is {state.status}")
    if state.cancel_at_period_end:
        new = _bump(state, status=SubscriptionStatus.CANCELED, canceled_at=now, pause=None)
        return new, [ev.subscription_canceled(state.id, "period_end", now)]
    return _next_version(state), []


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
