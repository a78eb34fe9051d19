"""Giving money back: when a charge is refunded, and what the gateway's answer to a refund does.

A refund is asked for when money was taken that the invoice cannot keep (``RefundReason``): a
success for an invoice already VOID or FAILED, a success for an invoice whose cancel was
requested while its call was in flight, or a second success under another key for an invoice
already PAID. The request is written in the transaction that records the success, and sent
later with a fixed key, ``ref-{payment attempt id}`` (with the deployment's prefix): a process
that dies before or after the call sends it again under the same key, and the gateway answers
the first result instead of refunding twice.

The gateway's answer:

* SUCCEEDED: the money is back; ``PaymentRefunded`` announces it.
* FAILED (a refusal no retry changes: a 4xx but 401/403/429, or a refund the gateway reports
  as failed): FAILED with the gateway's words; a person must settle it (reconciliation).
* UNKNOWN (timeout, connection error, 5xx, 429, malformed answer): asked again later with the
  same key, at most ``unknown_max_retries`` times; then FAILED (``unknown_unresolved``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from billing_core.domain import events as ev
from billing_core.domain.dunning import DunningPolicy, uncertainty_exhausted
from billing_core.domain.events import DomainEvent
from billing_core.domain.instant import require_aware


class RefundStatus(StrEnum):
    REQUESTED = "REQUESTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class RefundOutcome(StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"


class RefundReason(StrEnum):
    CHARGED_CLOSED_INVOICE = "charged_closed_invoice"  # a success for a VOID/FAILED invoice
    CANCELED_IN_FLIGHT = "canceled_in_flight"  # the call succeeded after the cancel
    DUPLICATE_CHARGE = "duplicate_charge"  # a PAID invoice charged again under another key


def refund_key(payment_attempt_id: int, prefix: str = "") -> str:
    """The gateway key of the refund of the charge a payment attempt recorded: fixed once the
    request is written, so every try of it is the same refund."""
    return f"{prefix}ref-{payment_attempt_id}"


def classify_refund(
    http_status: int | None, body: Mapping[str, object] | None
) -> tuple[RefundOutcome, str | None]:
    """Map a gateway answer to a refund (``None`` status: no answer) to an outcome and, for a
    refusal, the gateway's words."""
    if http_status is None:
        return RefundOutcome.UNKNOWN, None
    status = body.get("status") if isinstance(body, Mapping) else None
    if 200 <= http_status < 300:
        if status == "succeeded":
            return RefundOutcome.SUCCEEDED, None
        if status == "failed":
            return RefundOutcome.FAILED, _words(http_status, body) or "refund failed"
        return RefundOutcome.UNKNOWN, None
    if 400 <= http_status < 500 and http_status not in (401, 403, 429):
        return RefundOutcome.FAILED, _words(http_status, body)
    return RefundOutcome.UNKNOWN, None


def _words(http_status: int, body: Mapping[str, object] | None) -> str:
    said = next(
        (body[k] for k in ("detail", "title", "error") if body and isinstance(body.get(k), str)),
        None,
    )
    return f"http {http_status}" if said is None else f"http {http_status}: {str(said)[:300]}"


@dataclass(frozen=True)
class RefundState:
    id: int
    subscription_id: int
    invoice_id: int
    amount: int
    currency: str
    reason: str
    charge_reference: str | None
    idempotency_key: str
    status: RefundStatus
    uncertain_answers: int = 0
    next_attempt_at: datetime | None = None
    gateway_reference: str | None = None
    error: str | None = None
    completed_at: datetime | None = None
    # When the refund (and so its key) was decided: the key's age bounds its retries.
    requested_at: datetime | None = None


@dataclass(frozen=True)
class RefundAnswer:
    outcome: RefundOutcome
    gateway_reference: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class RefundEffect:
    refund: RefundState
    events: list[DomainEvent]
    needs_reconciliation: str | None = None  # why a person must look (the gateway's words)


def apply_refund_answer(
    refund: RefundState,
    answer: RefundAnswer,
    *,
    now: datetime,
    policy: DunningPolicy,
) -> RefundEffect:
    """What the gateway's answer to a REQUESTED refund does; a settled refund never changes
    (an answer recorded twice, e.g. after a lease ran out, is a no-op)."""
    require_aware(now, "now")
    if refund.status != RefundStatus.REQUESTED:
        return RefundEffect(refund, [])
    if answer.outcome == RefundOutcome.SUCCEEDED:
        done = replace(
            refund,
            status=RefundStatus.SUCCEEDED,
            gateway_reference=answer.gateway_reference,
            next_attempt_at=None,
            error=None,
            completed_at=now,
        )
        return RefundEffect(done, [payment_refunded(done, now)])
    if answer.outcome == RefundOutcome.FAILED:
        return _failed(refund, answer.error or "refund refused", now)
    answers = refund.uncertain_answers + 1
    if uncertainty_exhausted(answers, refund.requested_at, now, policy):
        why = (
            f"unknown_unresolved: {answers} uncertain answers for {refund.idempotency_key}"
            f" (requested {refund.requested_at.isoformat() if refund.requested_at else '?'})"
        )
        return _failed(replace(refund, uncertain_answers=answers), why, now)
    later = replace(
        refund,
        uncertain_answers=answers,
        next_attempt_at=now + policy.unknown_retry,
        error=answer.error,
    )
    return RefundEffect(later, [])


def _failed(refund: RefundState, why: str, now: datetime) -> RefundEffect:
    failed = replace(
        refund, status=RefundStatus.FAILED, error=why, next_attempt_at=None, completed_at=now
    )
    return RefundEffect(failed, [], needs_reconciliation=f"refund_failed: {why}")


def payment_refunded(refund: RefundState, refunded_at: datetime) -> DomainEvent:
    return ev.payment_refunded(
        refund.subscription_id,
        refund.invoice_id,
        refund_id=refund.id,
        amount=refund.amount,
        currency=refund.currency,
        reason=refund.reason,
        charge_reference=refund.charge_reference,
        gateway_reference=refund.gateway_reference,
        refunded_at=refunded_at,
    )
