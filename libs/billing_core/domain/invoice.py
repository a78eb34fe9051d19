"""The invoice state machine: OPEN -> PAID | FAILED | VOID (and DRAFT: a renewal of a period
whose subscription's collection was paused with ``keep_as_draft``; never collected).

PAID, FAILED and VOID are final ("settled"). Paying a PAID invoice and voiding a VOID one are
no-ops, so replayed webhooks and retried requests are harmless; any other move out of a settled
state raises. A successful charge that arrives for a FAILED or VOID invoice is not applied: its
money is refunded (``on_success`` tells which case applies; ``charge_result.apply_result`` is the
whole rule). A cancel while the invoice's gateway call may be in flight only requests its void
(:func:`cancel`): that call's result decides.

Voiding gives back credit: a VOID invoice was never paid, so whatever credit it had consumed
returns to the subscription's balance, whoever voided it (a customer's cancel or the end of
dunning). A FAILED invoice keeps its credit: it is a debt that was not collected, not a
withdrawn one. :func:`credit_returned_by_void` is that rule.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from billing_core.domain.errors import IllegalTransition, InvoiceNotPayable
from billing_core.domain.values import value_object


class InvoiceStatus(StrEnum):
    DRAFT = "DRAFT"  # a paused period's, kept as a draft: never collected
    OPEN = "OPEN"
    PAID = "PAID"
    FAILED = "FAILED"
    VOID = "VOID"


class InvoiceKind(StrEnum):
    RENEWAL = "RENEWAL"
    PRORATION = "PRORATION"


@dataclass(frozen=True)
class InvoiceState:
    """What the transitions read and change; ``attempt_count`` counts the declines so far."""

    id: int
    status: InvoiceStatus
    attempt_count: int
    amount: int
    currency: str
    next_attempt_at: datetime | None = None
    paid_at: datetime | None = None
    closed_at: datetime | None = None
    customer_id: int | None = None
    # Canceled while a gateway call may be in flight: the call's result decides (VOID, or VOID
    # with the money refunded); no new call is made for it.
    void_requested: bool = False

    @property
    def is_settled(self) -> bool:
        return is_settled(self.status)


@value_object
class Opening:
    """How a new invoice starts."""

    status: InvoiceStatus
    next_attempt_at: datetime | None  # due for its first charge now, or never (nothing to charge)
    paid_at: datetime | None


def opening(amount_due: int, now: datetime) -> Opening:
    """OPEN and due now; or PAID at once when credit covered all of it (nothing to charge)."""
    if amount_due < 0:
        raise ValueError("an invoice never owes a negative amount")
    if amount_due == 0:
        return Opening(InvoiceStatus.PAID, None, now)
    return Opening(InvoiceStatus.OPEN, now, None)


class SuccessHandling(StrEnum):
    """What a successful charge does to an invoice in a given state."""

    PAY = "PAY"  # OPEN -> PAID
    ALREADY_PAID = "ALREADY_PAID"  # a replay: nothing to do
    RECONCILE = "RECONCILE"  # money taken for a FAILED/VOID invoice: refunded


def is_settled(status: InvoiceStatus | str) -> bool:
    """True for PAID, FAILED, VOID and DRAFT: no further charge may be made for the invoice."""
    return InvoiceStatus(status) != InvoiceStatus.OPEN


def on_success(status: InvoiceStatus | str) -> SuccessHandling:
    current = InvoiceStatus(status)
    if current == InvoiceStatus.OPEN:
        return SuccessHandling.PAY
    if current == InvoiceStatus.PAID:
        return SuccessHandling.ALREADY_PAID
    return SuccessHandling.RECONCILE


def pay(state: InvoiceState, now: datetime) -> InvoiceState:
    """OPEN -> PAID; paying a PAID invoice is a no-op; FAILED/VOID cannot be paid."""
    if state.status == InvoiceStatus.PAID:
        return state
    if state.status != InvoiceStatus.OPEN:
        raise InvoiceNotPayable(f"a {state.status} invoice cannot be paid")
    return replace(
        state, status=InvoiceStatus.PAID, next_attempt_at=None, paid_at=now, closed_at=now
    )


def decline(state: InvoiceState, now: datetime, retry_at: datetime | None) -> InvoiceState:
    """A clear decline: one more failed attempt, tried again at ``retry_at``, or FAILED when the
    dunning schedule has no next attempt (``retry_at`` is None)."""
    if state.status != InvoiceStatus.OPEN:
        raise IllegalTransition(f"a {state.status} invoice cannot record a decline")
    failed = state.attempt_count + 1
    if retry_at is None:
        return replace(
            state,
            status=InvoiceStatus.FAILED,
            attempt_count=failed,
            next_attempt_at=None,
            closed_at=now,
        )
    return replace(state, attempt_count=failed, next_attempt_at=retry_at)


def retry_later(state: InvoiceState, at: datetime) -> InvoiceState:
    """An uncertain answer: the same attempt (same key) again at ``at``; no attempt counted."""
    if state.status != InvoiceStatus.OPEN:
        raise IllegalTransition(f"a {state.status} invoice cannot be retried")
    return replace(state, next_attempt_at=at)


def hold_for_reconciliation(state: InvoiceState) -> InvoiceState:
    """OPEN, never tried again by itself: what happened at the gateway must be found out first
    (an attempt whose answers stayed uncertain). Dunning stops; a person settles it."""
    if state.status != InvoiceStatus.OPEN:
        raise IllegalTransition(f"a {state.status} invoice cannot be held")
    return replace(state, next_attempt_at=None)


def void(state: InvoiceState, now: datetime) -> InvoiceState:
    """OPEN -> VOID (nothing more is charged); voiding a VOID invoice is a no-op. Also how a
    requested void ends when its call's lease ran out without a result (no more is known than
    after an uncertain answer; a success reported later is refunded)."""
    if state.status == InvoiceStatus.VOID:
        return state
    if state.status != InvoiceStatus.OPEN:
        raise IllegalTransition(f"a {state.status} invoice cannot be voided")
    return replace(state, status=InvoiceStatus.VOID, next_attempt_at=None, closed_at=now)


def cancel(state: InvoiceState, now: datetime, *, call_in_flight: bool) -> InvoiceState:
    """What a cancel (the customer's, or for non-payment) does to an OPEN invoice: VOID at once,
    unless a gateway call for it may be in flight (leased, its lease still running) or may have
    charged (an uncertain answer for its current key) — then the void is only requested, and
    what the gateway says decides (``charge_result.apply_result``; the collector looks the key
    up when the call's answer stays uncertain): a decline, or no charge under the key, voids
    it; a success voids it and refunds the money. A settled invoice, or one whose void is
    already requested, is left as it is."""
    if state.status != InvoiceStatus.OPEN or state.void_requested:
        return state
    if call_in_flight:
        return replace(state, void_requested=True)
    return void(state, now)


def credit_returned_by_void(credit_applied: int) -> int:
    """The credit a voided invoice gives back to its subscription: all it had consumed."""
    if credit_applied < 0:
        raise ValueError("an invoice never consumes negative credit")
    return credit_applied
