"""The payload of every event type and version: one pydantic model each, the single source.

The outbox writer serialises these models and nothing else; the JSON Schemas under
``docs/schemas/events/``, the AsyncAPI document and docs/EVENTS.md are generated from them
(``billing contracts``), and a test fails when a checked-in file differs from what they give.

Field names are the wire names (camelCase). Money is an integer amount in minor units with an
ISO-4217 currency; instants are RFC 3339 UTC strings (``2026-12-01T00:00:00Z``); ids are
integers. A model's docstring says when the event is published; each field's description says
what it holds. Changing a model changes the contract: additive, optional fields keep the
version; anything else is a new model with ``version`` + 1 (docs/EVENTS.md, "Versioning rules").
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
)

from billing_core.domain.instant import to_utc
from billing_core.domain.invoice import InvoiceKind, InvoiceStatus

# Normalised to UTC when built, so pydantic writes it as iso_utc does: ``...Z``.
Instant = Annotated[datetime, AfterValidator(to_utc)]
Id = Annotated[int, Field(ge=1)]
Amount = Annotated[int, Field(description="Minor units of `currency` (cents for USD).")]
Currency = Annotated[
    str, Field(pattern=r"^[A-Z]{3}$", description="ISO-4217 code, e.g. `USD`.", examples=["USD"])
]
SubscriptionId = Annotated[
    int, Field(ge=1, description="The subscription, as in the Kafka key and `ce_subject`.")
]

CANCEL_REASONS = ("customer_request", "period_end", "nonpayment")
REFUND_REASONS = ("charged_closed_invoice", "canceled_in_flight", "duplicate_charge")


def _cancel_reason(value: str) -> str:
    if value not in CANCEL_REASONS:
        raise ValueError(f"{value!r} is not one of {', '.join(CANCEL_REASONS)}")
    return value


def _refund_reason(value: str) -> str:
    if value not in REFUND_REASONS:
        raise ValueError(f"{value!r} is not one of {', '.join(REFUND_REASONS)}")
    return value


CancelReason = Annotated[
    str,
    AfterValidator(_cancel_reason),
    WithJsonSchema({"type": "string", "enum": list(CANCEL_REASONS)}),
]
RefundReasonName = Annotated[
    str,
    AfterValidator(_refund_reason),
    WithJsonSchema({"type": "string", "enum": list(REFUND_REASONS)}),
]


class EventPayload(BaseModel):
    """The base of every payload model: its event type and version, and how it is written."""

    # The producer writes exactly the declared fields; the published schema lets consumers
    # accept fields added later (additive changes keep the version).
    model_config = ConfigDict(
        extra="forbid", frozen=True, json_schema_extra={"additionalProperties": True}
    )

    event_type: ClassVar[str]
    version: ClassVar[int] = 1

    subscriptionId: SubscriptionId

    def to_json(self) -> str:
        """The payload as published: compact JSON, UTF-8 once encoded."""
        return self.model_dump_json()

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class SubscriptionCreatedV1(EventPayload):
    """A customer subscribed (API `POST /subscriptions`)."""

    event_type = "SubscriptionCreated"

    customerId: Id = Field(description="The customer who subscribed.")
    planCode: str = Field(description="The plan subscribed to.", examples=["pro-monthly"])
    currentPeriodStart: Instant = Field(description="Start of the first period.")
    currentPeriodEnd: Instant = Field(description="End of the first period (exclusive).")
    timeZone: str = Field(
        description="IANA time zone the billing anchor is kept in.", examples=["Europe/Paris"]
    )
    trialEnd: Instant | None = Field(
        default=None,
        description="End of the free trial (then the first period above is the trial: "
        "nothing is charged before this instant, which is the billing anchor); null without "
        "a trial.",
    )


class SubscriptionPlanChangedV1(EventPayload):
    """A plan change was applied; a PRORATION invoice follows when something is owed."""

    event_type = "SubscriptionPlanChanged"

    oldPlanCode: str = Field(description="The plan before the change.")
    newPlanCode: str = Field(description="The plan after the change.")
    prorationDue: Amount = Field(
        description="Prorated difference for the rest of the period, minor units of the plan's "
        "currency; negative = credit kept on the subscription's balance."
    )
    changedAt: Instant = Field(description="When the change was applied.")
    effective: Literal["now", "period_end"] = Field(
        default="now",
        description="`now`: applied when asked for (prorated per `prorationDue`); "
        "`period_end`: a change scheduled for the period end, applied by the renewer at the "
        "period boundary `changedAt` — the period starting then is the first one at the new "
        "plan (`prorationDue` 0).",
    )
    newPeriodStart: Instant | None = Field(
        default=None,
        description="Set when the change started a new period (a plan with another billing "
        "interval): the billing anchor moved here (`changedAt`) and the period "
        "[`newPeriodStart`, `newPeriodEnd`) is the first one at the new interval — invoiced in "
        "full at once by a RENEWAL invoice (InvoiceCreated follows) when `effective` is `now`, "
        "with the unused part of the old period credited (`prorationDue` = minus that credit); "
        "by the renewer at the boundary when `period_end`. Null: the period is unchanged.",
    )
    newPeriodEnd: Instant | None = Field(
        default=None,
        description="The end of the new period (null: no new period, see `newPeriodStart`).",
    )


class SubscriptionCanceledV1(EventPayload):
    """The subscription was canceled: now (customer request), at period end, or for
    non-payment after the last dunning attempt."""

    event_type = "SubscriptionCanceled"

    reason: CancelReason = Field(
        description="`customer_request` (cancel now), `period_end` (scheduled cancel reached "
        "its period end), `nonpayment` (dunning gave up)."
    )
    canceledAt: Instant = Field(description="When it was canceled.")


class SubscriptionPastDueV1(EventPayload):
    """A renewal payment was declined; dunning starts."""

    event_type = "SubscriptionPastDue"

    invoiceId: Id | None = Field(description="The declined invoice (null if unknown).")


class SubscriptionReactivatedV1(EventPayload):
    """A past-due subscription paid and is active again."""

    event_type = "SubscriptionReactivated"

    invoiceId: Id | None = Field(description="The invoice whose payment reactivated it.")


class SubscriptionTrialWillEndV1(EventPayload):
    """A trial ends soon (a configurable lead time before its end, 3 days by default):
    published once per trial, e.g. to remind the customer that the first charge is coming."""

    event_type = "SubscriptionTrialWillEnd"

    trialEnd: Instant = Field(description="When the trial ends and the first period is invoiced.")


class SubscriptionTrialEndedV1(EventPayload):
    """The trial ended and the subscription is ACTIVE: its first paid period's invoice
    (InvoiceCreated) follows. A trial that ends with a scheduled cancel publishes
    SubscriptionCanceled instead."""

    event_type = "SubscriptionTrialEnded"

    endedAt: Instant = Field(description="When the trial ended (the new billing anchor).")
    early: bool = Field(
        description="true: ended before its planned end on request (`POST "
        "/subscriptions/{id}/end-trial`); false: it reached its end."
    )


class SubscriptionPausedV1(EventPayload):
    """Collection was paused (`POST /subscriptions/{id}/pause`), or a pause's behavior or resume
    time changed (then `pausedAt` is the original pause's). The status is unchanged and periods
    keep renewing; their renewal invoices are created VOID (`void`) or DRAFT (`keep_as_draft`),
    and no invoice of the subscription is collected until it resumes."""

    event_type = "SubscriptionPaused"

    behavior: Literal["void", "keep_as_draft"] = Field(
        description="`void`: paused periods' invoices are created VOID; `keep_as_draft`: DRAFT."
    )
    pausedAt: Instant = Field(description="When the pause began.")
    resumesAt: Instant | None = Field(
        description="When it resumes by itself; null: only on request."
    )
    changedAt: Instant = Field(description="When this pause (or its change) was applied.")


class SubscriptionResumedV1(EventPayload):
    """Collection resumed: on request (`POST /subscriptions/{id}/resume`) or at the pause's
    `resumesAt`. Renewals are collected again; OPEN invoices held during the pause are retried
    at once."""

    event_type = "SubscriptionResumed"

    pausedAt: Instant = Field(description="When the pause that ends began.")
    resumedAt: Instant = Field(description="When it resumed.")
    automatic: bool = Field(
        description="true: at the pause's resumesAt (the renewer); false: on request."
    )


class InvoiceCreatedV1(EventPayload):
    """An invoice was issued (subscribe, plan change, renewal: one shape); followed by
    `InvoicePaid` when credit covered all of it."""

    event_type = "InvoiceCreated"

    invoiceId: Id = Field(description="The new invoice.")
    kind: InvoiceKind = Field(description="`RENEWAL` (a period) or `PRORATION` (a plan change).")
    periodIndex: int = Field(ge=0, description="The period's number from the anchor (0 = first).")
    periodStart: Instant = Field(description="Start of the invoiced period.")
    periodEnd: Instant = Field(description="End of the invoiced period (exclusive).")
    subtotal: Amount = Field(ge=0, description="Price before credit, minor units.")
    creditApplied: Amount = Field(ge=0, description="Credit used from the balance, minor units.")
    amount: Amount = Field(ge=0, description="What is owed: `subtotal` - `creditApplied`.")
    currency: Currency
    tax: Amount = Field(
        default=0,
        ge=0,
        description="The tax in `subtotal` (the invoice's TAX lines: inside the plan's price "
        "where prices include tax, on top of it where they do not); 0 when untaxed.",
    )


class InvoicePaidV1(EventPayload):
    """The gateway confirmed a charge for the invoice, or credit covered all of it."""

    event_type = "InvoicePaid"

    invoiceId: Id = Field(description="The paid invoice.")
    amount: Amount = Field(ge=0, description="The amount paid, minor units.")
    currency: Currency
    paidAt: Instant = Field(description="When the payment was recorded.")


class PaymentFailedV1(EventPayload):
    """A charge was declined."""

    event_type = "PaymentFailed"

    invoiceId: Id = Field(description="The invoice whose charge was declined.")
    attempt: int = Field(ge=1, description="Declines so far for this invoice.")
    declineCode: str | None = Field(
        description="The gateway's decline code, e.g. `insufficient_funds`. "
        "`authentication_required`: the bank wants the customer to confirm the payment "
        "(3-D Secure), so ask them to; `no_payment_method`: no Stripe payment method on file "
        "(docs/GATEWAYS.md)."
    )
    nextAttemptAt: Instant | None = Field(
        description="When the next attempt is due; null after the last attempt."
    )
    final: bool = Field(description="True when no attempt follows (`nextAttemptAt` is null).")


class InvoiceVoidedV1(EventPayload):
    """An open invoice was voided (immediate cancel, or cancel for non-payment; for an invoice
    the gateway may hold a charge for, once what the gateway says decides, later than the
    `SubscriptionCanceled`); the credit it had consumed goes back to the balance. Also right
    after the `InvoiceCreated` of a renewal whose period was paused with behavior `void` (it
    consumed no credit)."""

    event_type = "InvoiceVoided"

    invoiceId: Id = Field(description="The voided invoice.")
    voidedAt: Instant = Field(description="When it was voided.")


class PaymentReconciliationNeededV1(EventPayload):
    """A person must settle a payment: a success whose report does not match its invoice, or
    an invoice held after uncertain or refused answers (`billing reconcile` lists them)."""

    event_type = "PaymentReconciliationNeeded"

    invoiceId: Id = Field(description="The invoice concerned.")
    invoiceStatus: InvoiceStatus = Field(description="The invoice's status when this was raised.")
    idempotencyKey: str = Field(
        description="The gateway key of the call concerned.", examples=["inv-42-try-0"]
    )
    gatewayReference: str | None = Field(description="The gateway's charge id, when known.")
    reason: str = Field(
        description="`report_mismatch: ...` (what differs), `unknown_unresolved: ...`, "
        "`gateway_rejected: http <status>: <the gateway's words>`, `uncertain_on_void: ...`; "
        "`charged_settled_invoice` in older events."
    )


class PaymentRefundedV1(EventPayload):
    """Money the invoice could not keep is back with the customer: the gateway confirmed the
    refund. `refundId` is the number of the customer's credit note."""

    event_type = "PaymentRefunded"

    invoiceId: Id = Field(description="The invoice the money was taken for.")
    refundId: Id = Field(description="The refund, and the credit note's number.")
    amount: Amount = Field(ge=0, description="The amount refunded, minor units.")
    currency: Currency
    reason: RefundReasonName = Field(
        description="`charged_closed_invoice` (a success for a VOID/FAILED invoice), "
        "`canceled_in_flight` (canceled during the call), `duplicate_charge` (a PAID invoice "
        "charged again under another key)."
    )
    chargeReference: str | None = Field(description="The gateway's charge id.")
    gatewayReference: str | None = Field(description="The gateway's refund id.")
    refundedAt: Instant = Field(description="When the refund was confirmed.")


PAYLOAD_MODELS: tuple[type[EventPayload], ...] = (
    SubscriptionCreatedV1,
    SubscriptionPlanChangedV1,
    SubscriptionCanceledV1,
    SubscriptionPastDueV1,
    SubscriptionReactivatedV1,
    SubscriptionTrialWillEndV1,
    SubscriptionTrialEndedV1,
    SubscriptionPausedV1,
    SubscriptionResumedV1,
    InvoiceCreatedV1,
    InvoicePaidV1,
    PaymentFailedV1,
    InvoiceVoidedV1,
    PaymentReconciliationNeededV1,
    PaymentRefundedV1,
)

_BY_KEY: dict[tuple[str, int], type[EventPayload]] = {
    (m.event_type, m.version): m for m in PAYLOAD_MODELS
}


def payload_model(event_type: str, version: int = 1) -> type[EventPayload]:
    """The model of ``event_type`` at ``version``; KeyError for an unknown pair."""
    return _BY_KEY[(event_type, version)]


def parse_payload(event_type: str, version: int, data: bytes | str) -> EventPayload:
    """A published payload read back through its model, ignoring fields added after it (raises
    pydantic's ValidationError, or ValueError when the JSON is not an object)."""
    model = payload_model(event_type, version)
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"{event_type} v{version}: payload is not a JSON object")
    return model.model_validate({k: v for k, v in value.items() if k in model.model_fields})
