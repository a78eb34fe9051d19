"""The invoice state machine: OPEN -> PAID | FAILED | VOID.

PAID, FAILED and VOID are final ("settled"). Paying a PAID invoice and voiding a VOID one are
no-ops, so replayed webhooks and retried requests are harmless; any other move out of a settled
state raises. A successful charge that arrives for a FAILED or VOID invoice is not applied: it
needs reconciliation (``on_success`` tells which case applies).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from billing_core.domain.errors import IllegalTransition, InvoiceNotPayable


class InvoiceStatus(StrEnum):
    OPEN = "OPEN"
    PAID = "PAID"
    FAILED = "FAILED"
    VOID = "VOID"


class InvoiceKind(StrEnum):
    RENEWAL = "RENEWAL"
    PRORATION = "PRORATION"


@dataclass(frozen=True)
class InvoiceState:
    status: InvoiceStatus
    attempt_count: int


@dataclass(frozen=True)
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
    RECONCILE = "RECONCILE"  # money taken for a FAILED/VOID invoice: PaymentReconciliationNeeded


def is_settled(status: InvoiceStatus | str) -> bool:
    """True for PAID, FAILED and VOID: no further charge may be made for the invoice."""
    return InvoiceStatus(status) != InvoiceStatus.OPEN


def on_success(status: InvoiceStatus | str) -> SuccessHandling:
    current = InvoiceStatus(status)
    if current == InvoiceStatus.OPEN:
        return SuccessHandling.PAY
    if current == InvoiceStatus.PAID:
        return SuccessHandling.ALREADY_PAID
    return SuccessHandling.RECONCILE


def pay(state: InvoiceState) -> InvoiceState:
    """OPEN -> PAID; paying a PAID invoice is a no-op; FAILED/VOID cannot be paid."""
    if state.status == InvoiceStatus.PAID:
        return state
    if state.status != InvoiceStatus.OPEN:
        raise InvoiceNotPayable(f"a {state.status} invoice cannot be paid")
    return replace(state, status=InvoiceStatus.PAID)


def decline(state: InvoiceState) -> InvoiceState:
    """A clear decline of an OPEN invoice: one more failed attempt."""
    if state.status != InvoiceStatus.OPEN:
        raise IllegalTransition(f"a {state.status} invoice cannot record a decline")
    return replace(state, attempt_count=state.attempt_count + 1)


def fail(state: InvoiceState) -> InvoiceState:
    if state.status != InvoiceStatus.OPEN:
        raise IllegalTransition(f"a {state.status} invoice cannot fail")
    return replace(state, status=InvoiceStatus.FAILED)


def void(state: InvoiceState) -> InvoiceState:
    if state.status == InvoiceStatus.VOID:
        return state
    if state.status != InvoiceStatus.OPEN:
        raise IllegalTransition(f"a {state.status} invoice cannot be voided")
    return replace(state, status=InvoiceStatus.VOID)
