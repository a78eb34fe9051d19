"""The customer hears of a refund: the notifier's e-mail carries the credit note."""

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
