"""Stripe's PaymentIntent states and error bodies, mapped onto the port's outcomes (pure)."""

from __future__ import annotations

import pytest

from billing_core.domain.charge_result import ChargeOutcome
from billing_core.domain.refund import RefundOutcome
from billing_core.domain.stripe_answers import (
    AUTHENTICATION_REQUIRED,
    classify_error,
    classify_payment_intent,
    classify_refund,
    describe_error,
    is_transient,
)


@pytest.mark.parametrize(
    ("intent", "expected"),
    [
        ({"status": "succeeded"}, (ChargeOutcome.SUCCESS, None)),
        ({"status": "requires_action"}, (ChargeOutcome.DECLINED, AUTHENTICATION_REQUIRED)),
        (
            {"status": "requires_payment_method", "last_payment_error": {"code": "card_declined"}},
            (ChargeOutcome.DECLINED, "card_declined"),
        ),
        (
            {
                "status": "requires_payment_method",
                "last_payment_error": {"code": "authentication_required"},
            },
            (ChargeOutcome.DECLINED, AUTHENTICATION_REQUIRED),
        ),
        (
            {"status": "canceled", "last_payment_error": None},
            (ChargeOutcome.DECLINED, "card_declined"),
        ),
        ({"status": "processing"}, (ChargeOutcome.UNKNOWN, None)),
        ({"status": "requires_capture"}, (ChargeOutcome.UNKNOWN, None)),
        ({}, (ChargeOutcome.UNKNOWN, None)),
    ],
)
def test_payment_intent_states(
    intent: dict[str, object], expected: tuple[ChargeOutcome, str | None]
) -> None:
    assert classify_payment_intent(intent) == expected


def test_errors_other_than_card_errors_are_unknown() -> None:
    card = {"error": {"type": "card_error", "code": "card_declined", "decline_code": "lost_card"}}
    assert classify_error(402, card) == (ChargeOutcome.DECLINED, "lost_card")
    assert classify_error(402, None) == (ChargeOutcome.DECLINED, "card_declined")
    for status in (None, 400, 401, 409, 429, 500, 503):
        assert classify_error(status, {"error": {"type": "api_error"}})[0] == ChargeOutcome.UNKNOWN


def test_key_in_use_is_transient_and_idempotency_error_is_not() -> None:
    assert is_transient({"error": {"code": "idempotency_key_in_use"}})
    assert not is_transient({"error": {"type": "idempotency_error"}})
    assert not is_transient(None)


def test_error_words() -> None:
    body = {"error": {"type": "invalid_request_error", "code": "resource_missing", "message": "No"}}
    assert (
        describe_error(404, body) == "stripe http 404: invalid_request_error/resource_missing: No"
    )
    assert describe_error(502, None) == "stripe http 502"


def test_refund_states() -> None:
    assert classify_refund({"status": "succeeded"}) == (RefundOutcome.SUCCEEDED, None)
    assert classify_refund({"status": "pending"}) == (RefundOutcome.UNKNOWN, None)
    assert classify_refund({"status": "requires_action"}) == (RefundOutcome.UNKNOWN, None)
    assert classify_refund({"status": "failed", "failure_reason": "lost_or_stolen_card"}) == (
        RefundOutcome.FAILED,
        "refund failed: lost_or_stolen_card",
    )
