"""The collector process charging through the Stripe adapter, end to end against stripe-mock:
claim -> a PaymentIntent request stripe-mock accepts, under the attempt's Idempotency-Key ->
the answer recorded on the invoice."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from urllib.parse import parse_qsl

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.repo import gateway_customers
from tests.integration.stripe.conftest import StartCollector
from tests.support.factories import due_subscriptions_with_invoices
from tests.support.infra import Services
from tests.support.recording_proxy import recording_proxy

pytestmark = pytest.mark.slow  # a real collector process


async def test_collector_charges_through_stripe_mock_and_records_the_answer(
    engine: AsyncEngine, pool: pg.Pool, services: Services, stripe_collector: StartCollector
) -> None:
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        invoice_id, unmapped_id = await due_subscriptions_with_invoices(
            conn, 2, now=now, first_customer=501
        )
    async with pg.transaction(pool) as conn:
        await gateway_customers.put(
            conn,
            customer_id=501,
            gateway="stripe",
            gateway_customer_id="cus_PZrgY7FgXqFqUd",
            payment_method_id="pm_1OkjqQ2eZvKYlo2C",
            now=now,
        )
    async with recording_proxy(services.stripe_mock_url) as proxy:
        collector = stripe_collector(proxy.url)
        try:
            deadline = time.monotonic() + 30
            attempts: list[dict[str, object]] = []
            while time.monotonic() < deadline and len(attempts) < 2:
                async with engine.connect() as conn:
                    rows = await conn.execute(
                        text(
                            "SELECT invoice_id, outcome, decline_code, gateway_reference, source"
                            " FROM payment_attempt ORDER BY invoice_id"
                        )
                    )
                    attempts = [dict(r) for r in rows.mappings()]
                await asyncio.sleep(0.2)
            assert collector.terminate() == 0
        finally:
            if collector.alive():
                collector.kill9()

    # One request reached stripe-mock, for the mapped customer, under the attempt's key; the
    # customer with no payment method on file was declined without a request.
    charges = [e for e in proxy.exchanges if e.path == "/v1/payment_intents"]
    assert len(charges) == 1, collector.log()
    (charge,) = charges
    assert charge.status == 200
    key = f"inv-{invoice_id}-try-0"
    assert charge.request_headers["idempotency-key"] == key
    assert charge.response_headers["idempotency-key"] == key
    form = dict(parse_qsl(charge.request_body.decode()))
    assert form["customer"] == "cus_PZrgY7FgXqFqUd"
    assert form["payment_method"] == "pm_1OkjqQ2eZvKYlo2C"
    assert (form["confirm"], form["off_session"]) == ("true", "true")
    assert (form["amount"], form["currency"]) == ("990", "eur")
    assert form["metadata[invoice_id]"] == str(invoice_id)
    assert form["metadata[idempotency_key]"] == key

    # Both answers recorded by the collector: stripe-mock's fixture PaymentIntent (state
    # requires_payment_method) as a decline with its id, the unmapped customer's as
    # no_payment_method; each invoice then follows the dunning schedule.
    assert attempts == [
        {
            "invoice_id": invoice_id,
            "outcome": "DECLINED",
            "decline_code": "card_declined",
            "gateway_reference": attempts[0]["gateway_reference"],
            "source": "COLLECTOR",
        },
        {
            "invoice_id": unmapped_id,
            "outcome": "DECLINED",
            "decline_code": "no_payment_method",
            "gateway_reference": None,
            "source": "COLLECTOR",
        },
    ]
    assert str(attempts[0]["gateway_reference"]).startswith("pi_")
    async with engine.connect() as conn:
        counts = (
            await conn.execute(
                text("SELECT attempt_count FROM invoice WHERE id = :i"), {"i": invoice_id}
            )
        ).scalar_one()
    assert counts == 1
