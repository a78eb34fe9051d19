"""Which e-mail each billing event would send. The notifier only logs them (no mail server)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from billing_core.cloudevents import CloudEvent
from billing_core.domain.charge_result import AUTHENTICATION_REQUIRED
from billing_core.logging import get_logger

log = get_logger(__name__)

SUBJECTS: dict[str, str] = {
    "SubscriptionCreated": "Welcome: your subscription is active",
    "SubscriptionPlanChanged": "Your plan has changed",
    "SubscriptionCanceled": "Your subscription has been canceled",
    "SubscriptionPastDue": "Action needed: your payment is past due",
    "SubscriptionReactivated": "Your subscription is active again",
    "InvoiceCreated": "Your new invoice",
    "InvoicePaid": "Payment received, thank you",
    "PaymentFailed": "Your payment did not go through",
    "InvoiceVoided": "An invoice was voided",
    "PaymentRefunded": "Your refund and credit note",
}


@dataclass(frozen=True)
class Email:
    to: str
    subject: str
    event_id: str


def email_for(event: CloudEvent) -> Email | None:
    """The e-mail for ``event``, or None for event types customers are not told about."""
    subject = SUBJECTS.get(event.event_type)
    if subject is None:
        return None
    payload = event.payload()
    customer = payload.get("customer_id", payload.get("customerId"))
    to = (
        f"customer-{customer}@example.invalid"
        if customer is not None
        else (f"subscription-{event.subscription_id}@example.invalid")
    )
    if (
        event.event_type == "PaymentFailed"
        and payload.get("declineCode") == AUTHENTICATION_REQUIRED
    ):
        # The bank wants the customer to confirm the payment (3-D Secure), which an off-session
        # charge cannot ask for: the e-mail asks the customer to do it.
        subject = "Action needed: confirm your payment with your bank"
    if event.event_type == "PaymentRefunded":  # the credit note's number is the refund's id
        subject = (
            f"{subject} CN-{payload.get('refundId')}: {payload.get('amount')} "
            f"{payload.get('currency')} for invoice {payload.get('invoiceId')}"
        )
    return Email(to=to, subject=subject, event_id=str(event.id))


async def handle(session: AsyncSession, event: CloudEvent) -> None:
    """The consumer kit's handler: runs once per event, in the de-duplicating transaction."""
    email = email_for(event)
    if email is None:
        log.info("event_ignored", event_type=event.event_type, event_id=str(event.id))
        return
    log.info(
        "email_would_send",
        to=email.to,
        subject=email.subject,
        event_id=email.event_id,
        event_type=event.event_type,
        subscription_id=event.subscription_id,
        sequence=event.sequence,
    )
