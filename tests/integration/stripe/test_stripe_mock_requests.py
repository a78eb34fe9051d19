"""The Stripe adapter's requests against stripe-mock, which checks each one against Stripe's
OpenAPI spec (an unknown or malformed parameter is a 400) and answers with fixture objects.

stripe-mock keeps no state and never declines: what its fixtures say is not the point here;
that Stripe's own spec accepts every request the adapter makes, and that the adapter reads the
real response objects, is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import parse_qsl

import httpx
import pytest

from billing_core.domain.charge_result import ChargeOutcome
from billing_core.domain.refund import RefundOutcome
from billing_core.stripe_gateway import (
    SEARCH_LAG,
    PaymentMethodNotOurs,
    StripeCustomer,
    StripePaymentGateway,
    StripePaymentMethods,
)
from tests.support.infra import Services
from tests.support.recording_proxy import RecordingProxy, recording_proxy

API_KEY = "sk_test_123"


async def on_file(customer_id: int) -> StripeCustomer | None:
    return StripeCustomer("cus_PZrgY7FgXqFqUd", "pm_1OkjqQ2eZvKYlo2C") if customer_id else None


@pytest.fixture
async def proxy(services: Services) -> AsyncIterator[RecordingProxy]:
    async with recording_proxy(services.stripe_mock_url) as recorder:
        yield recorder


@pytest.fixture
async def gateway(proxy: RecordingProxy) -> AsyncIterator[StripePaymentGateway]:
    client = StripePaymentGateway(API_KEY, customers=on_file, api_base=proxy.url)
    yield client
    await client.aclose()


def test_stripe_mock_refuses_a_request_outside_the_spec(services: Services) -> None:
    """The control: stripe-mock does check requests, so an accepted one means something."""
    answer = httpx.post(
        f"{services.stripe_mock_url}/v1/payment_intents",
        auth=(API_KEY, ""),
        data={"amount": "990", "currency": "eur", "off_session_please": "true"},
        timeout=5,
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"


async def test_payment_intent_request_is_accepted_with_the_attempt_key(
    gateway: StripePaymentGateway, proxy: RecordingProxy
) -> None:
    result = await gateway.charge(
        42, 990, "EUR", "inv-77-try-1", {"invoiceId": 77, "attempt": 1, "subscriptionId": 9}
    )
    (exchange,) = proxy.exchanges
    assert (exchange.method, exchange.path, exchange.status) == ("POST", "/v1/payment_intents", 200)
    assert exchange.request_headers["idempotency-key"] == "inv-77-try-1"
    assert exchange.response_headers["idempotency-key"] == "inv-77-try-1"  # stripe-mock echoes it
    # The fixture object was read: its id, and its state mapped (stripe-mock's fixture is a
    # PaymentIntent in requires_payment_method, a decline).
    assert result.http_status == 200
    assert result.gateway_reference is not None and result.gateway_reference.startswith("pi_")
    assert result.outcome == ChargeOutcome.DECLINED


async def test_refund_request_is_accepted_with_its_key(
    gateway: StripePaymentGateway, proxy: RecordingProxy
) -> None:
    result = await gateway.refund("pi_3MtwBwLkdIwHu7ix28a3tqPa", 990, "EUR", "ref-5")
    (exchange,) = proxy.exchanges
    assert (exchange.path, exchange.status) == ("/v1/refunds", 200)
    assert exchange.request_headers["idempotency-key"] == "ref-5"
    assert result.outcome == RefundOutcome.SUCCEEDED  # the fixture refund has succeeded
    assert result.gateway_reference is not None and result.gateway_reference.startswith("re_")


async def test_lookup_search_request_is_accepted(
    gateway: StripePaymentGateway, proxy: RecordingProxy
) -> None:
    found = await gateway.lookup("inv-77-try-1")
    (exchange,) = proxy.exchanges
    assert (exchange.method, exchange.path, exchange.status) == (
        "GET",
        "/v1/payment_intents/search",
        200,
    )
    # The fixture hit carries none of our metadata: it is not taken for the key's charge, and
    # the search's "never seen" says how far its index may lag.
    assert found.never_seen
    assert found.index_lag == SEARCH_LAG


async def test_lookup_by_a_known_payment_intent_id_reads_it(
    gateway: StripePaymentGateway, proxy: RecordingProxy
) -> None:
    found = await gateway.lookup("inv-77-try-1", reference="pi_3MtwBwLkdIwHu7ix28a3tqPa")
    (exchange,) = proxy.exchanges
    assert (exchange.method, exchange.path, exchange.status) == (
        "GET",
        "/v1/payment_intents/pi_3MtwBwLkdIwHu7ix28a3tqPa",
        200,
    )
    # The fixture is not under our key: not taken for its charge, and not "never seen" either.
    assert found.outcome == ChargeOutcome.UNKNOWN
    assert (
        found.error
        == "lookup: payment intent pi_3MtwBwLkdIwHu7ix28a3tqPa is not under inv-77-try-1"
    )


async def test_payment_method_check_requests_are_accepted(proxy: RecordingProxy) -> None:
    check = StripePaymentMethods(API_KEY, api_base=proxy.url)
    try:
        # stripe-mock's fixtures name none of our customers: refused, after both reads.
        with pytest.raises(PaymentMethodNotOurs):
            await check.check(42, "cus_PZrgY7FgXqFqUd", "pm_1OkjqQ2eZvKYlo2C")
    finally:
        await check.aclose()
    assert [(e.method, e.path, e.status) for e in proxy.exchanges] == [
        ("GET", "/v1/payment_methods/pm_1OkjqQ2eZvKYlo2C", 200),
        ("GET", "/v1/customers/cus_PZrgY7FgXqFqUd", 200),
    ]


@pytest.mark.parametrize(
    ("amount", "currency", "sent"),
    [(500, "ISK", "50000"), (150_000, "MGA", "1500"), (500, "JPY", "500"), (5120, "KWD", "5120")],
)
async def test_amounts_are_sent_in_stripes_unit_for_the_currency(
    gateway: StripePaymentGateway, proxy: RecordingProxy, amount: int, currency: str, sent: str
) -> None:
    await gateway.charge(42, amount, currency, "inv-77-try-1", {"invoiceId": 77, "attempt": 1})
    await gateway.refund("pi_3MtwBwLkdIwHu7ix28a3tqPa", amount, currency, "ref-5")
    charge, refund = proxy.exchanges
    assert (charge.path, charge.status, refund.path, refund.status) == (
        "/v1/payment_intents",
        200,
        "/v1/refunds",
        200,
    )
    charged = dict(parse_qsl(charge.request_body.decode()))
    assert (charged["amount"], charged["currency"]) == (sent, currency.lower())
    assert dict(parse_qsl(refund.request_body.decode()))["amount"] == sent


@pytest.mark.parametrize(("amount", "currency"), [(150_050, "MGA"), (5124, "KWD"), (5000, "IQD")])
async def test_an_amount_stripe_cannot_charge_exactly_is_not_sent_and_held(
    gateway: StripePaymentGateway, proxy: RecordingProxy, amount: int, currency: str
) -> None:
    result = await gateway.charge(42, amount, currency, "inv-77-try-1", {"invoiceId": 77})
    refund = await gateway.refund("pi_3MtwBwLkdIwHu7ix28a3tqPa", amount, currency, "ref-5")
    assert proxy.exchanges == []
    assert (result.outcome, result.rejected) == (ChargeOutcome.UNKNOWN, True)
    assert result.error is not None and result.error.startswith("not sent: Stripe cannot charge")
    assert refund.outcome == RefundOutcome.FAILED
