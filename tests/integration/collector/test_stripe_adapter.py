"""The Stripe adapter against a loopback server answering with Stripe's documented bodies: every
answer maps onto the result fields the collector already acts on (outcome, decline code, the
HTTP status that drives the 429 pause, the credentials pause and the refusal hold)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import pytest

from billing_core.domain.charge_result import ChargeOutcome
from billing_core.domain.refund import RefundOutcome
from billing_core.domain.stripe_answers import AUTHENTICATION_REQUIRED
from billing_core.gateway import ChargeResult
from billing_core.stripe_gateway import NO_PAYMENT_METHOD, StripeCustomer, StripePaymentGateway
from tests.support.processes import free_port
from tests.support.stripe_stub import StripeStub, stripe_stub

KEY = "inv-41-try-2"
ON_FILE = {7: StripeCustomer("cus_NffrFeUfNV2Hib", "pm_1MqM05LkdIwHu7ixlDxxO6Mc")}


async def on_file(customer_id: int) -> StripeCustomer | None:
    return ON_FILE.get(customer_id)


def intent(status: str, **fields: object) -> dict[str, object]:
    """A PaymentIntent as Stripe returns it (the fields the adapter reads, and a few more)."""
    return {
        "id": "pi_3MtwBwLkdIwHu7ix28a3tqPa",
        "object": "payment_intent",
        "amount": 990,
        "currency": "eur",
        "customer": "cus_NffrFeUfNV2Hib",
        "status": status,
        "last_payment_error": None,
        "metadata": {"invoice_id": "41", "attempt": "2", "idempotency_key": KEY},
        **fields,
    }


def card_error(code: str, decline_code: str, message: str) -> dict[str, object]:
    """A 402 body as in Stripe's "Errors" and "Declines" docs, with the failed PaymentIntent."""
    return {
        "error": {
            "code": code,
            "decline_code": decline_code,
            "doc_url": f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}",
            "message": message,
            "payment_intent": intent(
                "requires_payment_method",
                last_payment_error={"code": code, "decline_code": decline_code},
            ),
            "type": "card_error",
        }
    }


@pytest.fixture
async def stub() -> AsyncIterator[StripeStub]:
    async with stripe_stub() as server:
        yield server


async def charge(
    stub: StripeStub, *, customer_id: int = 7, read_timeout: float = 5.0
) -> ChargeResult:
    gateway = StripePaymentGateway(
        "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
        customers=on_file,
        api_base=stub.url,
        max_connections=4,
        read_timeout=read_timeout,
    )
    try:
        return await gateway.charge(
            customer_id, 990, "EUR", KEY, {"invoiceId": 41, "attempt": 2, "subscriptionId": 5}
        )
    finally:
        await gateway.aclose()


async def answered(
    stub: StripeStub, status: int, body: Mapping[str, object], **kwargs: object
) -> ChargeResult:
    stub.answer(status, body, **kwargs)
    return await charge(stub)


async def test_request_is_a_confirmed_off_session_payment_intent_under_the_attempt_key(
    stub: StripeStub,
) -> None:
    await answered(stub, 200, intent("succeeded"))
    (seen,) = stub.requests
    assert (seen.method, seen.path) == ("POST", "/v1/payment_intents")
    assert seen.headers["idempotency-key"] == KEY
    assert seen.headers["authorization"] == "Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc"
    assert seen.form == {
        "amount": "990",
        "currency": "eur",
        "customer": "cus_NffrFeUfNV2Hib",
        "payment_method": "pm_1MqM05LkdIwHu7ixlDxxO6Mc",
        "confirm": "true",
        "off_session": "true",
        "metadata[invoice_id]": "41",
        "metadata[attempt]": "2",
        "metadata[subscription_id]": "5",
        "metadata[customer_id]": "7",
        "metadata[idempotency_key]": KEY,
    }


async def test_succeeded_is_success_with_the_payment_intent_id(stub: StripeStub) -> None:
    result = await answered(stub, 200, intent("succeeded"))
    assert result.outcome == ChargeOutcome.SUCCESS
    assert result.gateway_reference == "pi_3MtwBwLkdIwHu7ix28a3tqPa"
    assert result.error is None


async def test_requires_payment_method_is_declined_with_the_decline_code(stub: StripeStub) -> None:
    failed = intent(
        "requires_payment_method",
        last_payment_error={
            "type": "card_error",
            "code": "card_declined",
            "decline_code": "insufficient_funds",
        },
    )
    result = await answered(stub, 200, failed)
    assert (result.outcome, result.decline_code) == (ChargeOutcome.DECLINED, "insufficient_funds")


async def test_card_error_402_is_declined_with_its_decline_code(stub: StripeStub) -> None:
    body = card_error("card_declined", "insufficient_funds", "Your card has insufficient funds.")
    result = await answered(stub, 402, body)
    assert (result.outcome, result.decline_code) == (ChargeOutcome.DECLINED, "insufficient_funds")
    assert result.gateway_reference == "pi_3MtwBwLkdIwHu7ix28a3tqPa"
    assert not (result.rate_limited or result.unauthorized or result.rejected)


async def test_card_error_without_decline_code_is_declined_with_its_code(stub: StripeStub) -> None:
    body = card_error("expired_card", "", "Your card has expired.")
    result = await answered(stub, 402, body)
    assert (result.outcome, result.decline_code) == (ChargeOutcome.DECLINED, "expired_card")


async def test_requires_action_is_declined_as_authentication_required(stub: StripeStub) -> None:
    result = await answered(
        stub, 200, intent("requires_action", next_action={"type": "use_stripe_sdk"})
    )
    assert (result.outcome, result.decline_code) == (
        ChargeOutcome.DECLINED,
        AUTHENTICATION_REQUIRED,
    )


async def test_authentication_required_card_error_is_declined_with_its_own_code(
    stub: StripeStub,
) -> None:
    body = card_error(
        "authentication_required",
        "authentication_required",
        "Your card was declined. This transaction requires authentication.",
    )
    result = await answered(stub, 402, body)
    assert (result.outcome, result.decline_code) == (
        ChargeOutcome.DECLINED,
        AUTHENTICATION_REQUIRED,
    )


async def test_processing_is_unknown_left_to_the_webhook(stub: StripeStub) -> None:
    result = await answered(stub, 200, intent("processing"))
    assert result.outcome == ChargeOutcome.UNKNOWN
    assert result.gateway_reference == "pi_3MtwBwLkdIwHu7ix28a3tqPa"
    assert not result.rejected
    assert result.error == "payment intent processing"


async def test_rate_limit_429_is_unknown_and_rate_limited(stub: StripeStub) -> None:
    body = {
        "error": {
            "code": "rate_limit",
            "message": "Request rate limit exceeded. Learn more about rate limits here "
            "https://stripe.com/docs/rate-limits.",
            "type": "invalid_request_error",
        }
    }
    result = await answered(stub, 429, body, headers={"Retry-After": "2"})
    assert result.outcome == ChargeOutcome.UNKNOWN
    assert result.rate_limited and not result.rejected
    assert result.retry_after_seconds == 2.0


async def test_server_error_is_unknown_for_a_retry_with_the_same_key(stub: StripeStub) -> None:
    body = {"error": {"message": "An unknown error occurred", "type": "api_error"}}
    result = await answered(stub, 500, body)
    assert result.outcome == ChargeOutcome.UNKNOWN
    assert result.http_status == 500
    assert not (result.rejected or result.rate_limited or result.unauthorized)
    assert result.error == "stripe http 500: api_error: An unknown error occurred"


async def test_no_answer_in_time_is_unknown(stub: StripeStub) -> None:
    stub.answer(200, intent("succeeded"), delay_seconds=2.0)
    result = await charge(stub, read_timeout=0.3)
    assert result.outcome == ChargeOutcome.UNKNOWN
    assert result.http_status is None and not result.rejected
    assert result.error is not None and result.error.startswith(
        "stripe no answer: APIConnectionError"
    )


async def test_connection_refused_is_unknown() -> None:
    gateway = StripePaymentGateway(
        "sk_test_x", customers=on_file, api_base=f"http://127.0.0.1:{free_port()}"
    )
    try:
        result = await gateway.charge(7, 990, "EUR", KEY, {"invoiceId": 41, "attempt": 2})
    finally:
        await gateway.aclose()
    assert result.outcome == ChargeOutcome.UNKNOWN
    assert result.http_status is None and not result.rejected


async def test_idempotency_error_is_a_refusal_held_for_a_person(stub: StripeStub) -> None:
    body = {
        "error": {
            "message": "Keys for idempotent requests can only be used with the same parameters "
            f"they were first used with. Try using a key other than '{KEY}' if you meant to "
            "execute a different request.",
            "type": "idempotency_error",
        }
    }
    result = await answered(stub, 400, body)
    assert result.outcome == ChargeOutcome.UNKNOWN
    assert result.rejected  # recorded as held for reconciliation, with an alert event
    assert result.error is not None and result.error.startswith(
        "stripe http 400: idempotency_error"
    )


async def test_key_in_use_409_is_retried_not_held(stub: StripeStub) -> None:
    body = {
        "error": {
            "code": "idempotency_key_in_use",
            "message": "There is currently another in-progress request using this "
            "Idempotent Key (that probably means you submitted twice, and the other request "
            "is still going through).",
            "type": "invalid_request_error",
        }
    }
    result = await answered(stub, 409, body)
    assert result.outcome == ChargeOutcome.UNKNOWN
    assert result.transient and not result.rejected


async def test_invalid_api_key_401_fails_closed(stub: StripeStub) -> None:
    body = {
        "error": {
            "message": "Invalid API Key provided: sk_test_****p7dc",
            "type": "invalid_request_error",
        }
    }
    result = await answered(stub, 401, body)
    assert result.outcome == ChargeOutcome.UNKNOWN
    assert result.unauthorized and not result.rejected


async def test_customer_without_payment_method_is_declined_and_nothing_is_sent(
    stub: StripeStub,
) -> None:
    stub.answer(200, intent("succeeded"))
    result = await charge(stub, customer_id=8)
    assert (result.outcome, result.decline_code) == (ChargeOutcome.DECLINED, NO_PAYMENT_METHOD)
    assert stub.requests == []


async def test_refund_under_its_key_and_its_answers(stub: StripeStub) -> None:
    refund = {"id": "re_1Nispe2eZvKYlo2Cd31jOCgZ", "object": "refund", "amount": 990}
    stub.answer(200, {**refund, "status": "succeeded"})
    stub.answer(200, {**refund, "status": "pending"})
    stub.answer(200, {**refund, "status": "failed", "failure_reason": "expired_or_canceled_card"})
    stub.answer(
        400,
        {
            "error": {
                "code": "charge_already_refunded",
                "message": "Charge ch_1 has already been refunded.",
                "type": "invalid_request_error",
            }
        },
    )
    gateway = StripePaymentGateway("sk_test_x", customers=on_file, api_base=stub.url)
    try:
        results = [await gateway.refund("pi_3MtwBw", 990, "EUR", f"ref-{n}") for n in range(4)]
    finally:
        await gateway.aclose()
    assert [r.outcome for r in results] == [
        RefundOutcome.SUCCEEDED,
        RefundOutcome.UNKNOWN,
        RefundOutcome.FAILED,
        RefundOutcome.FAILED,
    ]
    assert results[0].gateway_reference == "re_1Nispe2eZvKYlo2Cd31jOCgZ"
    assert results[2].error == "refund failed: expired_or_canceled_card"
    assert results[3].error is not None and "charge_already_refunded" in results[3].error
    first = stub.requests[0]
    assert (first.path, first.headers["idempotency-key"]) == ("/v1/refunds", "ref-0")
    assert first.form == {
        "payment_intent": "pi_3MtwBw",
        "amount": "990",
        "metadata[idempotency_key]": "ref-0",
    }


async def test_lookup_finds_the_payment_intent_by_its_key_metadata(stub: StripeStub) -> None:
    stub.answer(200, {"object": "search_result", "data": [intent("succeeded")], "has_more": False})
    stub.answer(200, {"object": "search_result", "data": [], "has_more": False})
    gateway = StripePaymentGateway("sk_test_x", customers=on_file, api_base=stub.url)
    try:
        found = await gateway.lookup(KEY)
        missing = await gateway.lookup("inv-42-try-0")
    finally:
        await gateway.aclose()
    assert (found.outcome, found.amount, found.currency) == (ChargeOutcome.SUCCESS, 990, "EUR")
    assert found.gateway_reference == "pi_3MtwBwLkdIwHu7ix28a3tqPa"
    assert missing.never_seen
    seen = stub.requests[0]
    assert (seen.method, seen.path) == ("GET", "/v1/payment_intents/search")
    assert seen.form["query"] == f"metadata['idempotency_key']:'{KEY}'"


async def test_lookup_reads_stripes_amount_into_our_minor_units(stub: StripeStub) -> None:
    def hit(amount: int) -> dict[str, object]:
        found = intent("succeeded", amount=amount, currency="isk")
        return {"object": "search_result", "data": [found], "has_more": False}

    stub.answer(200, hit(50_000))  # 500 ISK: Stripe writes ISK with two decimals, always 00
    stub.answer(200, hit(50_050))  # a fraction of a krona: no amount of ours
    gateway = StripePaymentGateway("sk_test_x", customers=on_file, api_base=stub.url)
    try:
        found = await gateway.lookup(KEY)
        odd = await gateway.lookup(KEY)
    finally:
        await gateway.aclose()
    assert (found.outcome, found.amount, found.currency) == (ChargeOutcome.SUCCESS, 500, "ISK")
    assert (odd.outcome, odd.amount) == (ChargeOutcome.UNKNOWN, None)
    assert odd.error == "lookup: 50050 ISK at Stripe is no amount of ours"
