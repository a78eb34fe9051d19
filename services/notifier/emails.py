"""Which e-mail each billing event calls for. Receipts (InvoicePaid), payment failures
(PaymentFailed) and trial endings (SubscriptionTrialWillEnd) are sent: the handler puts the whole
message in the notifier's outbox (``notifier_email``) in the consumer's transaction, and the
sender (:mod:`services.notifier.sender`) hands it to the SMTP server. The other e-mails are only
logged (``email_would_send``).

Payloads are read through their models (``billing_core.domain.event_payloads``), the same ones
the producer writes them with. Only SubscriptionCreated names the customer, so the notifier
remembers it per subscription (``notifier_recipient``) and addresses every later e-mail of that
subscription to the customer; a subscription whose SubscriptionCreated it never saw (imported
before the notifier ran) gets the subscription's fallback address in the log. A sent e-mail goes
to the customer's e-mail address (``customer.email``): the learned customer, else the
subscription's own; a customer without an address gets no e-mail (``email_no_address``).
"""

from __future__ import annotations

from dataclasses import dataclass
from email.message import Message

from billing_core.cloudevents import CloudEvent
from billing_core.db.pg import Connection
from billing_core.documents.invoice_view import Party
from billing_core.domain import event_payloads as p
from billing_core.domain.charge_result import AUTHENTICATION_REQUIRED
from billing_core.logging import get_logger
from billing_core.repo import invoice_documents, notifier_emails, recipients
from services.notifier.messages import SENT, Composer

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
    "SubscriptionTrialWillEnd": "Your free trial ends soon",
    "SubscriptionTrialEnded": "Your free trial has ended: your subscription is active",
}


@dataclass(frozen=True)
class Email:
    to: str
    subject: str
    event_id: str


def address(subscription_id: int, customer_id: int | None) -> str:
    if customer_id is None:
        return f"subscription-{subscription_id}@example.invalid"
    return f"customer-{customer_id}@example.invalid"


def email_for(event: CloudEvent, payload: p.EventPayload, customer_id: int | None) -> Email | None:
    """The e-mail for ``event`` (its ``payload`` read through its model) to ``customer_id``,
    or None for event types customers are not told about."""
    subject = SUBJECTS.get(event.event_type)
    if subject is None:
        return None
    if isinstance(payload, p.PaymentFailedV1) and payload.declineCode == AUTHENTICATION_REQUIRED:
        # The bank wants the customer to confirm the payment (3-D Secure), which an off-session
        # charge cannot ask for: the e-mail asks the customer to do it.
        subject = "Action needed: confirm your payment with your bank"
    if isinstance(payload, p.SubscriptionTrialWillEndV1):
        subject = f"{subject}: on {payload.trialEnd:%Y-%m-%d %H:%M} UTC"
    if isinstance(payload, p.SubscriptionCreatedV1) and payload.trialEnd is not None:
        subject = "Welcome: your free trial has started"
    if isinstance(payload, p.PaymentRefundedV1):  # the credit note's number is the refund's id
        subject = (
            f"{subject} CN-{payload.refundId}: {payload.amount} {payload.currency} "
            f"for invoice {payload.invoiceId}"
        )
    return Email(
        to=address(event.subscription_id, customer_id), subject=subject, event_id=str(event.id)
    )


async def email_to_send(conn: Connection, event: CloudEvent) -> Email | None:
    """The e-mail ``event`` calls for, if any, remembering the customer of a new subscription.
    A payload that does not match its model raises pydantic's ValidationError."""
    if event.event_type not in SUBJECTS:
        log.info("event_ignored", event_type=event.event_type, event_id=str(event.id))
        return None
    try:
        payload = p.parse_payload(event.event_type, event.schema_version, event.data)
    except KeyError:  # a version newer than this notifier understands: skip, do not misread
        log.warning(
            "event_version_unknown",
            event_type=event.event_type,
            schema_version=event.schema_version,
            event_id=str(event.id),
        )
        return None
    if isinstance(payload, p.SubscriptionCreatedV1):
        await recipients.remember(conn, payload.subscriptionId, payload.customerId)
        customer: int | None = payload.customerId
    else:
        customer = await recipients.customer_of(conn, event.subscription_id)
    return email_for(event, payload, customer)


class Handler:
    """The consumer kit's handler: runs once per event, in the de-duplicating transaction. A
    payload that does not match its model raises (the kit retries, then logs and skips it)."""

    def __init__(self, composer: Composer, seller: Party) -> None:
        self._composer = composer
        self._seller = seller

    async def __call__(self, conn: Connection, event: CloudEvent) -> None:
        email = await email_to_send(conn, event)
        if email is None:
            return
        if event.event_type in SENT:
            await self._queue(conn, event, email)
            return
        log.info(
            "email_would_send",
            to=email.to,
            subject=email.subject,
            event_id=email.event_id,
            event_type=event.event_type,
            subscription_id=event.subscription_id,
            sequence=event.sequence,
            recipient_known=not email.to.startswith("subscription-"),
        )

    async def _queue(self, conn: Connection, event: CloudEvent, email: Email) -> None:
        to = await notifier_emails.recipient_of(conn, event.subscription_id)
        if to is None or not to.email:
            log.info(
                "email_no_address",
                event_id=email.event_id,
                event_type=event.event_type,
                subscription_id=event.subscription_id,
                customer_id=None if to is None else to.customer_id,
            )
            return
        payload = p.parse_payload(event.event_type, event.schema_version, event.data)
        message = await self._message(conn, event, payload, to, email.subject)
        queued = await notifier_emails.queue(
            conn,
            notifier_emails.QueuedEmail(
                event_id=event.id,
                event_type=event.event_type,
                subscription_id=event.subscription_id,
                customer_id=to.customer_id,
                recipient=to.email,
                subject=email.subject,
                message_id=str(message["Message-ID"]),
                message=message.as_bytes(),
            ),
        )
        log.info(
            "email_queued" if queued else "email_already_queued",
            to=to.email,
            subject=email.subject,
            event_id=email.event_id,
            event_type=event.event_type,
            subscription_id=event.subscription_id,
        )

    async def _message(
        self,
        conn: Connection,
        event: CloudEvent,
        payload: p.EventPayload,
        to: invoice_documents.Recipient,
        subject: str,
    ) -> Message:
        event_id = str(event.id)
        if isinstance(payload, p.InvoicePaidV1):
            document = await invoice_documents.load(conn, payload.invoiceId, seller=self._seller)
            if document is None:
                raise LookupError(f"invoice {payload.invoiceId} (InvoicePaid {event_id}) not found")
            return self._composer.receipt(
                event_id=event_id, to=to, subject=subject, payload=payload, document=document
            )
        if isinstance(payload, p.PaymentFailedV1):
            document = await invoice_documents.load(conn, payload.invoiceId, seller=self._seller)
            return self._composer.payment_failed(
                event_id=event_id,
                to=to,
                subject=subject,
                payload=payload,
                document=document,
                occurred_at=event.time,
            )
        if isinstance(payload, p.SubscriptionTrialWillEndV1):
            return self._composer.trial_will_end(
                event_id=event_id, to=to, subject=subject, payload=payload, occurred_at=event.time
            )
        raise TypeError(f"no message for {event.event_type}")  # SENT lists only the three above
