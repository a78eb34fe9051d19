from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from billing_core.domain import events as ev
from billing_core.domain.errors import NaiveDatetime
from billing_core.domain.events import SCHEMA_VERSION, DomainEvent, EventType
from billing_core.domain.invoice import InvoiceStatus
from billing_core.domain.renewal import RenewalInvoice

NOW = datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
LATER = NOW + timedelta(days=31)

WIRE_NAMES = [
    "SubscriptionCreated",
    "SubscriptionPlanChanged",
    "SubscriptionCanceled",
    "SubscriptionPastDue",
    "SubscriptionReactivated",
    "InvoiceCreated",
    "InvoicePaid",
    "PaymentFailed",
    "InvoiceVoided",
    "PaymentReconciliationNeeded",
    "PaymentRefunded",
    "SubscriptionTrialWillEnd",
    "SubscriptionTrialEnded",
    "SubscriptionPaused",
    "SubscriptionResumed",
]

ALL = [
    ev.subscription_created(1, 2, "PRO_MONTHLY", NOW, LATER, "Europe/Paris"),
    ev.subscription_plan_changed(1, "BASIC_MONTHLY", "PRO_MONTHLY", 100_000, NOW),
    ev.subscription_canceled(1, "customer_request", NOW),
    ev.subscription_past_due(1, 9),
    ev.subscription_reactivated(1, 9),
    ev.invoice_created(
        RenewalInvoice(1, 2, 1, NOW, LATER, 2499, 500, 1999, "EUR", InvoiceStatus.OPEN, NOW, None),
        9,
        "RENEWAL",
    ),
    ev.invoice_paid(1, 9, 1999, "EUR", NOW),
    ev.payment_failed(1, 9, 1, "card_declined", LATER),
    ev.invoice_voided(1, 9, NOW),
    ev.payment_reconciliation_needed(1, 9, "VOID", "inv-9-try-0", "ch_1"),
    ev.payment_refunded(
        1,
        9,
        refund_id=3,
        amount=1999,
        currency="EUR",
        reason="canceled_in_flight",
        charge_reference="ch_1",
        gateway_reference="re_1",
        refunded_at=NOW,
    ),
    ev.subscription_trial_will_end(1, LATER),
    ev.subscription_trial_ended(1, NOW, early=False),
    ev.subscription_paused(1, "void", NOW, LATER, NOW),
    ev.subscription_resumed(1, NOW, LATER, automatic=True),
]


def test_schema_version() -> None:
    assert SCHEMA_VERSION == 1


def test_event_types_are_the_wire_names() -> None:
    assert [t.value for t in EventType] == WIRE_NAMES
    for name in WIRE_NAMES:
        assert str(EventType(name)) == name
    assert EventType("InvoicePaid") is EventType.INVOICE_PAID
    assert not hasattr(EventType, "InvoicePaid")  # one spelling of each member


def test_every_type_has_a_helper() -> None:
    assert [e.type for e in ALL] == list(EventType)
    assert all(isinstance(e, DomainEvent) and e.subscription_id == 1 for e in ALL)


@pytest.mark.parametrize("event", ALL, ids=lambda e: str(e.type))
def test_payloads_are_json_with_utc_times(event: DomainEvent) -> None:
    assert json.loads(json.dumps(event.payload)) == event.payload
    assert event.payload["subscriptionId"] == 1
    for value in event.payload.values():
        assert value is None or isinstance(value, bool | int | str)
        assert not isinstance(value, float)


def test_times_are_iso_utc_with_z() -> None:
    paid = ev.invoice_paid(
        1, 9, 1999, "EUR", datetime(2026, 12, 1, 9, 30, tzinfo=timezone(timedelta(hours=1)))
    )
    assert paid.payload["paidAt"] == "2026-12-01T08:30:00Z"
    assert ev.payment_failed(1, 9, 4, "expired_card", None).payload["final"] is True
    assert ev.iso(None) is None


def test_naive_times_are_refused() -> None:
    with pytest.raises(NaiveDatetime):
        ev.invoice_paid(1, 9, 1999, "EUR", datetime(2026, 12, 1))


def test_every_invoice_has_one_created_shape_and_paid_at_opening_adds_invoice_paid() -> None:
    def issued(credit: int, paid_at: datetime | None) -> RenewalInvoice:
        status = InvoiceStatus.PAID if paid_at else InvoiceStatus.OPEN
        return RenewalInvoice(
            1, 2, 0, NOW, LATER, 990, credit, 990 - credit, "EUR", status, None, paid_at
        )

    owed = ev.invoice_opened(issued(0, None), 9, "PRORATION")
    covered = ev.invoice_opened(issued(990, NOW), 10, "RENEWAL")
    assert [e.type for e in owed] == [EventType.INVOICE_CREATED]
    assert [e.type for e in covered] == [EventType.INVOICE_CREATED, EventType.INVOICE_PAID]
    assert covered[1].payload["amount"] == 0
    assert (
        set(owed[0].payload)
        == set(covered[0].payload)
        == {
            "subscriptionId",
            "invoiceId",
            "kind",
            "periodIndex",
            "periodStart",
            "periodEnd",
            "subtotal",
            "creditApplied",
            "amount",
            "currency",
            "tax",
        }
    )
