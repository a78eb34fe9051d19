"""Domain events: what other systems learn through the outbox and Kafka.

Every payload is built through its model in ``billing_core.domain.event_payloads`` (the single
source of the wire shapes and of the published schemas): camelCase keys, ints, strings,
booleans, ISO-8601 UTC strings, null.

An ``EventType`` member's value is the type on the wire: ``EventType.INVOICE_PAID`` is
``"InvoicePaid"``, and ``EventType("InvoicePaid")`` finds it.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from billing_core.domain import event_payloads as p
from billing_core.domain.instant import iso_utc
from billing_core.domain.invoice import InvoiceKind, InvoiceStatus
from billing_core.domain.values import value_object

SCHEMA_VERSION = 1  # the version of every type today; each model carries its own


class EventType(StrEnum):
    SUBSCRIPTION_CREATED = "SubscriptionCreated"
    SUBSCRIPTION_PLAN_CHANGED = "SubscriptionPlanChanged"
    SUBSCRIPTION_CANCELED = "SubscriptionCanceled"
    SUBSCRIPTION_PAST_DUE = "SubscriptionPastDue"
    SUBSCRIPTION_REACTIVATED = "SubscriptionReactivated"
    INVOICE_CREATED = "InvoiceCreated"
    INVOICE_PAID = "InvoicePaid"
    PAYMENT_FAILED = "PaymentFailed"
    INVOICE_VOIDED = "InvoiceVoided"
    PAYMENT_RECONCILIATION_NEEDED = "PaymentReconciliationNeeded"
    PAYMENT_REFUNDED = "PaymentRefunded"
    SUBSCRIPTION_TRIAL_WILL_END = "SubscriptionTrialWillEnd"
    SUBSCRIPTION_TRIAL_ENDED = "SubscriptionTrialEnded"
    SUBSCRIPTION_PAUSED = "SubscriptionPaused"
    SUBSCRIPTION_RESUMED = "SubscriptionResumed"


@value_object
class DomainEvent:
    """One event: its payload model says its type, version and subscription."""

    data: p.EventPayload

    @property
    def type(self) -> EventType:
        return EventType(self.data.event_type)

    @property
    def version(self) -> int:
        return self.data.version

    @property
    def subscription_id(self) -> int:
        return self.data.subscriptionId

    @property
    def payload(self) -> dict[str, Any]:
        """The payload as JSON values (what consumers read)."""
        return self.data.to_dict()

    def payload_json(self) -> str:
        """The payload exactly as the outbox stores it and Kafka carries it."""
        return self.data.to_json()


def iso(when: datetime | None) -> str | None:
    """ISO-8601 UTC (``...Z``) or ``None``; a naive datetime raises NaiveDatetime."""
    if when is None:
        return None
    return iso_utc(when)


def subscription_created(
    subscription_id: int,
    customer_id: int,
    plan_code: str,
    period_start: datetime,
    period_end: datetime,
    time_zone: str,
    *,
    trial_end: datetime | None = None,
) -> DomainEvent:
    return DomainEvent(
        p.SubscriptionCreatedV1(
            subscriptionId=subscription_id,
            customerId=customer_id,
            planCode=plan_code,
            currentPeriodStart=period_start,
            currentPeriodEnd=period_end,
            timeZone=time_zone,
            trialEnd=trial_end,
        )
    )


def subscription_plan_changed(
    subscription_id: int,
    old_plan_code: str,
    new_plan_code: str,
    due: int,
    changed_at: datetime,
    *,
    effective: str = "now",
    new_period: tuple[datetime, datetime] | None = None,
) -> DomainEvent:
    return DomainEvent(
        p.SubscriptionPlanChangedV1(
            subscriptionId=subscription_id,
            oldPlanCode=old_plan_code,
            newPlanCode=new_plan_code,
            prorationDue=due,
            changedAt=changed_at,
            effective=effective,
            newPeriodStart=None if new_period is None else new_period[0],
            newPeriodEnd=None if new_period is None else new_period[1],
        )
    )


def subscription_canceled(subscription_id: int, reason: str, canceled_at: datetime) -> DomainEvent:
    return DomainEvent(
        p.SubscriptionCanceledV1(
            subscriptionId=subscription_id, reason=reason, canceledAt=canceled_at
        )
    )


def subscription_paused(
    subscription_id: int,
    behavior: str,
    paused_at: datetime,
    resumes_at: datetime | None,
    changed_at: datetime,
) -> DomainEvent:
    return DomainEvent(
        p.SubscriptionPausedV1(
            subscriptionId=subscription_id,
            behavior=behavior,
            pausedAt=paused_at,
            resumesAt=resumes_at,
            changedAt=changed_at,
        )
    )


def subscription_resumed(
    subscription_id: int, paused_at: datetime, resumed_at: datetime, *, automatic: bool
) -> DomainEvent:
    return DomainEvent(
        p.SubscriptionResumedV1(
            subscriptionId=subscription_id,
            pausedAt=paused_at,
            resumedAt=resumed_at,
            automatic=automatic,
        )
    )


def subscription_trial_will_end(subscription_id: int, trial_end: datetime) -> DomainEvent:
    return DomainEvent(
        p.SubscriptionTrialWillEndV1(subscriptionId=subscription_id, trialEnd=trial_end)
    )


def subscription_trial_ended(
    subscription_id: int, ended_at: datetime, *, early: bool
) -> DomainEvent:
    return DomainEvent(
        p.SubscriptionTrialEndedV1(subscriptionId=subscription_id, endedAt=ended_at, early=early)
    )


def subscription_past_due(subscription_id: int, invoice_id: int | None) -> DomainEvent:
    return DomainEvent(
        p.SubscriptionPastDueV1(subscriptionId=subscription_id, invoiceId=invoice_id)
    )


def subscription_reactivated(subscription_id: int, invoice_id: int | None) -> DomainEvent:
    return DomainEvent(
        p.SubscriptionReactivatedV1(subscriptionId=subscription_id, invoiceId=invoice_id)
    )


class IssuedInvoice(Protocol):
    """What the invoice events say of a new invoice (a renewal plan's or a stored row)."""

    @property
    def subscription_id(self) -> int: ...
    @property
    def period_index(self) -> int: ...
    @property
    def period_start(self) -> datetime: ...
    @property
    def period_end(self) -> datetime: ...
    @property
    def subtotal(self) -> int: ...
    @property
    def credit_applied(self) -> int: ...
    @property
    def amount(self) -> int: ...
    @property
    def currency(self) -> str: ...
    @property
    def paid_at(self) -> datetime | None: ...


def invoice_created(
    invoice: IssuedInvoice, invoice_id: int, kind: str, tax: int = 0
) -> DomainEvent:
    """One shape for every invoice, whoever issues it (subscribe, plan change, renewal)."""
    return DomainEvent(
        p.InvoiceCreatedV1(
            subscriptionId=invoice.subscription_id,
            invoiceId=invoice_id,
            kind=InvoiceKind(kind),
            periodIndex=invoice.period_index,
            periodStart=invoice.period_start,
            periodEnd=invoice.period_end,
            subtotal=invoice.subtotal,
            creditApplied=invoice.credit_applied,
            amount=invoice.amount,
            currency=invoice.currency,
            tax=tax,
        )
    )


def invoice_opened(
    invoice: IssuedInvoice, invoice_id: int, kind: str, tax: int = 0
) -> list[DomainEvent]:
    """A new invoice's events: InvoiceCreated, and InvoicePaid when credit covered all of it
    (``paid_at`` set when it was issued)."""
    events = [invoice_created(invoice, invoice_id, kind, tax)]
    if invoice.paid_at is not None:
        events.append(
            invoice_paid(
                invoice.subscription_id,
                invoice_id,
                invoice.amount,
                invoice.currency,
                invoice.paid_at,
            )
        )
    return events


def invoice_paid(
    subscription_id: int, invoice_id: int, amount: int, currency: str, paid_at: datetime
) -> DomainEvent:
    return DomainEvent(
        p.InvoicePaidV1(
            subscriptionId=subscription_id,
            invoiceId=invoice_id,
            amount=amount,
            currency=currency,
            paidAt=paid_at,
        )
    )


def payment_failed(
    subscription_id: int,
    invoice_id: int,
    attempt: int,
    decline_code: str | None,
    next_attempt_at: datetime | None,
) -> DomainEvent:
    return DomainEvent(
        p.PaymentFailedV1(
            subscriptionId=subscription_id,
            invoiceId=invoice_id,
            attempt=attempt,
            declineCode=decline_code,
            nextAttemptAt=next_attempt_at,
            final=next_attempt_at is None,
        )
    )


def invoice_voided(subscription_id: int, invoice_id: int, voided_at: datetime) -> DomainEvent:
    return DomainEvent(
        p.InvoiceVoidedV1(subscriptionId=subscription_id, invoiceId=invoice_id, voidedAt=voided_at)
    )


def payment_reconciliation_needed(
    subscription_id: int,
    invoice_id: int,
    invoice_status: str,
    idempotency_key: str,
    gateway_reference: str | None,
    reason: str = "charged_settled_invoice",
) -> DomainEvent:
    """Money was (or may have been) taken and cannot simply be applied: a person must settle it
    (``billing reconcile``). ``reason``: ``report_mismatch: ...`` (the gateway's report does not
    match the invoice), ``unknown_unresolved: ...`` or ``gateway_rejected: ...`` (the invoice is
    held); ``charged_settled_invoice`` in events from before money on a closed invoice was
    refunded automatically."""
    return DomainEvent(
        p.PaymentReconciliationNeededV1(
            subscriptionId=subscription_id,
            invoiceId=invoice_id,
            invoiceStatus=InvoiceStatus(invoice_status),
            idempotencyKey=idempotency_key,
            gatewayReference=gateway_reference,
            reason=reason,
        )
    )


def payment_refunded(
    subscription_id: int,
    invoice_id: int,
    *,
    refund_id: int,
    amount: int,
    currency: str,
    reason: str,
    charge_reference: str | None,
    gateway_reference: str | None,
    refunded_at: datetime,
) -> DomainEvent:
    """Money taken for an invoice that could not keep it is back with the customer. The refund
    id is the number of the customer's credit note."""
    return DomainEvent(
        p.PaymentRefundedV1(
            subscriptionId=subscription_id,
            invoiceId=invoice_id,
            refundId=refund_id,
            amount=amount,
            currency=currency,
            reason=reason,
            chargeReference=charge_reference,
            gatewayReference=gateway_reference,
            refundedAt=refunded_at,
        )
    )
