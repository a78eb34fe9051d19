"""A collector process charging through the Stripe adapter, against a loopback server that
answers as Stripe documents it: Stripe's answers drive the collector's existing machinery
unchanged (a 429 is UNKNOWN, looked up, then charged again under the same key; an
idempotency_error is held for a person; a 401 records nothing)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.repo import gateway_customers
from tests.integration.stripe.conftest import StartCollector, wait_for
from tests.support.factories import due_subscriptions_with_invoices
from tests.support.processes import Proc
from tests.support.stripe_stub import stripe_stub

pytestmark = pytest.mark.slow  # a real collector process

RATE_LIMITED = {
    "error": {
        "code": "rate_limit",
        "message": "Request rate limit exceeded.",
        "type": "invalid_request_error",
    }
}


async def one_invoice(engine: AsyncEngine, pool: pg.Pool) -> int:
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        [invoice_id] = await due_subscriptions_with_invoices(conn, 1, now=now, first_customer=77)
    async with pg.transaction(pool) as conn:
        await gateway_customers.put(
            conn,
            customer_id=77,
            gateway="stripe",
            gateway_customer_id="cus_PZrgY7FgXqFqUd",
            payment_method_id="pm_1OkjqQ2eZvKYlo2C",
            now=now,
        )
    return invoice_id


async def scalar(engine: AsyncEngine, sql: str, **params: object) -> object:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar()


async def test_rate_limited_charge_is_looked_up_then_charged_again_under_the_same_key(
    engine: AsyncEngine, pool: pg.Pool, stripe_collector: StartCollector
) -> None:
    invoice_id = await one_invoice(engine, pool)
    key = f"inv-{invoice_id}-try-0"
    async with stripe_stub() as stub:
        stub.answer(429, RATE_LIMITED, headers={"Retry-After": "1"})
        stub.answer(200, {"object": "search_result", "data": [], "has_more": False})
        stub.answer(
            200,
            {
                "id": "pi_3MtwBwLkdIwHu7ix28a3tqPa",
                "object": "payment_intent",
                "amount": 990,
                "currency": "eur",
                "status": "succeeded",
            },
        )
        collector = stripe_collector(stub.url, BILLING_UNKNOWN_RETRY_SECONDS="1")

        async def paid() -> bool:
            status = await scalar(engine, "SELECT status FROM invoice WHERE id = :i", i=invoice_id)
            return status == "PAID"

        await wait_for(paid, 30, "the invoice paid after the 429")
        assert metric(collector, "billing_collector_rate_limited_total") == 1  # the global pause
        assert collector.terminate() == 0

    assert [(r.method, r.path) for r in stub.requests] == [
        ("POST", "/v1/payment_intents"),
        ("GET", "/v1/payment_intents/search"),
        ("POST", "/v1/payment_intents"),
    ]
    assert [r.headers.get("idempotency-key") for r in stub.requests] == [key, None, key]
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT source, outcome, error FROM payment_attempt ORDER BY id")
        )
        recorded = [tuple(r) for r in rows]
    assert recorded[0][:2] == ("COLLECTOR", "UNKNOWN")
    assert str(recorded[0][2]).startswith("stripe http 429: invalid_request_error/rate_limit")
    assert recorded[1:] == [("COLLECTOR", "SUCCESS", None)]


async def test_idempotency_error_holds_the_invoice_for_a_person(
    engine: AsyncEngine, pool: pg.Pool, stripe_collector: StartCollector
) -> None:
    invoice_id = await one_invoice(engine, pool)
    async with stripe_stub() as stub:
        stub.answer(
            400,
            {
                "error": {
                    "message": "Keys for idempotent requests can only be used with the same "
                    "parameters they were first used with.",
                    "type": "idempotency_error",
                }
            },
        )
        collector = stripe_collector(stub.url, BILLING_UNKNOWN_RETRY_SECONDS="1")

        async def held() -> bool:
            sql = "SELECT count(*) FROM reconciliation_item WHERE invoice_id = :i"
            return await scalar(engine, sql, i=invoice_id) == 1

        await wait_for(held, 30, "the invoice held for a person")
        assert collector.terminate() == 0

    assert len(stub.requests) == 1  # asked once, never again
    state = await scalar(
        engine,
        "SELECT status || ' ' || coalesce(next_attempt_at::text, 'none') FROM invoice"
        " WHERE id = :i",
        i=invoice_id,
    )
    assert state == "OPEN none"
    reason = await scalar(
        engine,
        "SELECT payload->>'reason' FROM outbox_event"
        " WHERE event_type = 'PaymentReconciliationNeeded'",
    )
    assert str(reason).startswith("gateway_rejected: stripe http 400: idempotency_error")


async def test_invalid_api_key_records_nothing_and_pauses(
    engine: AsyncEngine, pool: pg.Pool, stripe_collector: StartCollector
) -> None:
    invoice_id = await one_invoice(engine, pool)
    async with stripe_stub() as stub:
        stub.answer(
            401,
            {
                "error": {
                    "message": "Invalid API Key provided: sk_test_****",
                    "type": "invalid_request_error",
                }
            },
        )
        collector = stripe_collector(stub.url, BILLING_COLLECTOR_UNAUTHORIZED_PAUSE_SECONDS="30")

        async def refused() -> bool:
            return len(stub.requests) >= 1

        await wait_for(refused, 30, "the first call")
        await wait_for(
            lambda: _logged(collector.log(), "gateway_refuses_credentials_pausing_all_replicas"),
            10,
            "the pause logged",
        )
        assert metric(collector, "billing_collector_gateway_unauthorized_total") == 1
        assert collector.terminate() == 0

    assert len(stub.requests) == 1  # paused: no second call within the pause
    assert await scalar(engine, "SELECT count(*) FROM payment_attempt") == 0
    attempts = await scalar(engine, "SELECT attempt_count FROM invoice WHERE id = :i", i=invoice_id)
    assert attempts == 0


async def _logged(log: str, what: str) -> bool:
    return what in log


def metric(proc: Proc, name: str) -> float:
    """A counter's value on the collector's /metrics."""
    body = httpx.get(f"{proc.url}/metrics", timeout=5).text
    return next(float(line.split()[-1]) for line in body.splitlines() if line.startswith(name))


async def test_an_amount_stripe_cannot_charge_exactly_is_held_for_a_person_unsent(
    engine: AsyncEngine, pool: pg.Pool, stripe_collector: StartCollector
) -> None:
    invoice_id = await one_invoice(engine, pool)
    async with engine.begin() as conn:  # 1 500.50 MGA: Stripe charges whole ariary only
        await conn.execute(
            text(
                "UPDATE invoice SET currency = 'MGA', subtotal = 150050, amount = 150050"
                " WHERE id = :i"
            ),
            {"i": invoice_id},
        )
    async with stripe_stub() as stub:
        stub.answer(200, {"object": "payment_intent", "status": "succeeded"})
        collector = stripe_collector(stub.url)

        async def held() -> bool:
            sql = "SELECT count(*) FROM reconciliation_item WHERE invoice_id = :i"
            return await scalar(engine, sql, i=invoice_id) == 1

        await wait_for(held, 30, "the invoice held for a person")
        assert collector.terminate() == 0

    assert stub.requests == []  # nothing sent to Stripe
    state = await scalar(
        engine,
        "SELECT status || ' ' || coalesce(next_attempt_at::text, 'none') || ' ' || attempt_count"
        " FROM invoice WHERE id = :i",
        i=invoice_id,
    )
    assert state == "OPEN none 0"
    reason = await scalar(
        engine,
        "SELECT payload->>'reason' FROM outbox_event"
        " WHERE event_type = 'PaymentReconciliationNeeded'",
    )
    assert reason == (
        "gateway_rejected: not sent: Stripe cannot charge 1,500.50 MGA exactly"
        " (its MGA amounts have 0 decimals, in steps of 1)"
    )
