"""The customer hears of a refund (its e-mail carries the credit note) and of a payment to
confirm with the bank."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from billing_core.cloudevents import CloudEvent
from billing_core.domain import events as ev
from services.notifier.emails import email_for

NOW = datetime(2026, 12, 5, 8, tzinfo=UTC)


def test_a_refund_sends_its_credit_note() -> None:
    refunded = ev.payment_refunded(
        3,
        9,
        refund_id=12,
        amount=990,
        currency="EUR",
        reason="canceled_in_flight",
        charge_reference="ch_1",
        gateway_reference="re_1",
        refunded_at=NOW,
    )
    event = CloudEvent(
        id=uuid.uuid4(),
        event_type=str(refunded.type),
        source="urn:billing:outbox",
        time=NOW,
        subscription_id=3,
        sequence=4,
        schema_version=1,
        data=refunded.payload_json().encode(),
    )
    email = email_for(event, refunded.data, None)
    assert email is not None
    assert email.to == "subscription-3@example.invalid"
    assert email.subject == "Your refund and credit note CN-12: 990 EUR for invoice 9"


def _cloud_event(domain_event: ev.DomainEvent) -> CloudEvent:
    return CloudEvent(
        id=uuid.uuid4(),
        event_type=str(domain_event.type),
        source="urn:billing:outbox",
        time=NOW,
        subscription_id=3,
        sequence=5,
        schema_version=1,
        data=domain_event.payload_json().encode(),
    )


def test_a_payment_the_bank_wants_authenticated_asks_the_customer_to_confirm_it() -> None:
    needs_3ds = ev.payment_failed(3, 9, 1, "authentication_required", NOW)
    declined = ev.payment_failed(3, 9, 1, "insufficient_funds", NOW)
    asked = email_for(_cloud_event(needs_3ds), needs_3ds.data, 7)
    told = email_for(_cloud_event(declined), declined.data, 7)
    assert asked is not None and told is not None
    assert asked.subject == "Action needed: confirm your payment with your bank"
    assert told.subject == "Your payment did not go through"
