"""The gateway client's reading of a look-up answer (no server: the answer as parsed)."""

from __future__ import annotations

import json

import pytest

from billing_core.domain.charge_result import ChargeOutcome
from billing_core.gateway import _lookup_result
from billing_core.http1 import Response

CHARGE = {
    "id": "ch_1",
    "status": "succeeded",
    "declineCode": None,
    "amount": 990,
    "currency": "EUR",
    "customerId": 7,
    "idempotencyKey": "inv-9-try-0",
}


def answer(status: int, body: object, **headers: str) -> Response:
    return Response(status, headers, json.dumps(body).encode())


def test_a_found_charge_carries_what_the_gateway_says_it_charged() -> None:
    found = _lookup_result(answer(200, CHARGE))
    assert (found.outcome, found.gateway_reference, found.amount, found.currency) == (
        ChargeOutcome.SUCCESS,
        "ch_1",
        990,
        "EUR",
    )
    assert found.customer_id == 7 and found.error is None and not found.never_seen


@pytest.mark.parametrize("missing", ["amount", "currency"])
def test_a_charge_without_amount_or_currency_is_still_unknown(missing: str) -> None:
    """It could not be checked against the invoice: never applied."""
    found = _lookup_result(answer(200, {k: v for k, v in CHARGE.items() if k != missing}))
    assert found.outcome == ChargeOutcome.UNKNOWN
    assert found.error == "lookup http 200: a charge without amount or currency"


def test_an_amount_that_is_not_an_integer_is_still_unknown() -> None:
    assert _lookup_result(answer(200, {**CHARGE, "amount": 9.9})).outcome == ChargeOutcome.UNKNOWN
    assert _lookup_result(answer(200, {**CHARGE, "amount": True})).outcome == ChargeOutcome.UNKNOWN


def test_never_seen_rate_limited_and_refused() -> None:
    never = _lookup_result(answer(404, {"title": "No such charge"}))
    assert never.never_seen and never.error is None
    limited = _lookup_result(answer(429, {"title": "Too Many Requests"}, **{"retry-after": "2"}))
    assert (limited.outcome, limited.rate_limited, limited.retry_after_seconds) == (
        ChargeOutcome.UNKNOWN,
        True,
        2.0,
    )
    assert _lookup_result(answer(401, {"title": "Unauthorized"})).unauthorized
    busy = _lookup_result(answer(409, {"title": "Idempotency key in use"}))
    assert (busy.outcome, busy.error) == (
        ChargeOutcome.UNKNOWN,
        "lookup http 409: Idempotency key in use",
    )
