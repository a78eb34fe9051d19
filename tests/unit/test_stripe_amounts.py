"""Stripe's amount rules against our ISO 4217 minor units (pure), and the webhook events read
through them."""

from __future__ import annotations

from typing import Any

import pytest

from billing_core.domain.stripe_amounts import NotBillableAtStripe, from_stripe, to_stripe
from billing_core.domain.stripe_events import PAYMENT_SUCCEEDED, read_event


@pytest.mark.parametrize(
    ("amount", "currency", "at_stripe"),
    [
        (990, "EUR", 990),  # two decimals both sides
        (500, "JPY", 500),  # zero-decimal both sides
        (1500, "KRW", 1500),
        (500, "ISK", 50_000),  # ISO: no decimals; Stripe: two, always 00
        (2500, "UGX", 250_000),
        (150_000, "MGA", 1500),  # ISO: two decimals; Stripe: zero-decimal
        (12_340, "HUF", 12_340),  # two decimals for charges
        (9900, "TWD", 9900),
        (5120, "KWD", 5120),  # three decimals both sides, a multiple of 10
        (1000, "BHD", 1000),
    ],
)
def test_amounts_go_to_stripe_in_its_unit_and_come_back(
    amount: int, currency: str, at_stripe: int
) -> None:
    assert to_stripe(amount, currency) == at_stripe
    assert from_stripe(at_stripe, currency) == amount


@pytest.mark.parametrize(
    ("amount", "currency"),
    [
        (150_050, "MGA"),  # half an ariary: Stripe charges whole ariary only
        (5124, "KWD"),  # Stripe's three-decimal amounts end in 0
        (1235, "OMR"),
        (5000, "IQD"),  # ISO three decimals, Stripe's unit not known
        (5000, "LYD"),
        (5000, "UYI"),  # ISO zero decimals, not a Stripe currency
    ],
)
def test_amounts_stripe_cannot_charge_exactly_are_refused(amount: int, currency: str) -> None:
    with pytest.raises(NotBillableAtStripe, match=currency):
        to_stripe(amount, currency)


@pytest.mark.parametrize(("at_stripe", "currency"), [(50_050, "ISK"), (1, "UGX"), (5000, "IQD")])
def test_stripe_amounts_that_are_none_of_ours_are_not_read(at_stripe: int, currency: str) -> None:
    assert from_stripe(at_stripe, currency) is None


def succeeded(amount: int, currency: str) -> dict[str, Any]:
    return {
        "id": "evt_1",
        "type": PAYMENT_SUCCEEDED,
        "data": {
            "object": {
                "id": "pi_1",
                "object": "payment_intent",
                "status": "succeeded",
                "amount": amount,
                "currency": currency,
                "metadata": {
                    "invoice_id": "7",
                    "attempt": "0",
                    "idempotency_key": "inv-7-try-0",
                    "customer_id": "42",
                },
            }
        },
    }


def test_a_webhooks_amount_is_read_into_our_minor_units() -> None:
    event = read_event(succeeded(50_000, "isk"))
    assert event.report is not None
    assert (event.report.amount, event.report.currency) == (500, "ISK")


def test_a_webhook_whose_amount_is_none_of_ours_is_never_applied() -> None:
    event = read_event(succeeded(50_050, "isk"))
    assert (event.invoice_id, event.report) == (None, None)
    assert event.payment_intent == "pi_1"
