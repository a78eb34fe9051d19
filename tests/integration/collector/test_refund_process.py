"""Cancels during a gateway call, and refunds, with the collector and simulator processes, real
PostgreSQL and Redis: the call's result decides (VOID, or VOID and the money refunded), never a
charge kept silently; a refund survives kill -9 and is made exactly once."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.domain.charge_result import ChargeOutcome, idempotency_key
from billing_core.domain.dunning import DunningPolicy
from billing_core.gateway import HttpPaymentGateway
from billing_core.usecases.cancel import cancel
from billing_core.usecases.payment_result import RecordOutcome, record_charge_result
from tests.integration.collector.conftest import Collectors, Simulator
from tests.integration.collector.test_collector_process import count, seed, wait_for
from tests.support.factories import create_invoice, create_subscription

pytestmark = pytest.mark.slow


def refunds_at_gateway(simulator: Simulator, invoice_id: int) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{simulator.url}/v1/ledger/refunds", params={"invoiceId": invoice_id}, timeout=5
    )
    response.raise_for_status()
    return list(response.json())


async def one(engine: AsyncEngine, sql: str, **params: object) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).mappings().one()


async def events_of(engine: AsyncEngine, invoice_id: int) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT event_type FROM outbox_event WHERE payload ->> 'invoiceId' = :i ORDER BY id"
            ),
            {"i": str(invoice_id)},
        )
        return [r[0] for r in rows]


async def cancel_during_the_call(
    engine: AsyncEngine, pool: pg.Pool, simulator: Simulator, collectors: Collectors
) -> int:
    """One due invoice; the collector's call reaches the gateway, which takes 2 s to answer;
    the customer cancels while it is in flight. Returns the invoice id."""
    simulator.config(latency_min_ms=2000, latency_max_ms=2000)
    (invoice_id,) = await seed(engine, 1)
    collectors.start(BILLING_COLLECTOR_READ_TIMEOUT_SECONDS="5")

    async def call_arrived() -> bool:
        return int(simulator.summary()["calls"]) >= 1

    await wait_for(call_arrived, 15, "the charge call to reach the gateway")
    subscription_id = (
        await one(engine, "SELECT subscription_id FROM invoice WHERE id = :i", i=invoice_id)
    )["subscription_id"]
    async with pg.transaction(pool) as conn:
        assert await cancel(
            conn, subscription_id=subscription_id, at_period_end=False, now=datetime.now(UTC)
        )
    invoice = await one(engine, "SELECT * FROM invoice WHERE id = :i", i=invoice_id)
    assert (invoice["status"], invoice["void_requested_at"] is not None) == ("OPEN", True)
    assert simulator.charges(invoice_id) == []  # still in flight when the cancel committed
    return invoice_id


async def test_a_cancel_during_a_declined_call_voids_the_invoice(
    engine: AsyncEngine, pool: pg.Pool, simulator: Simulator, collectors: Collectors
) -> None:
    simulator.config(decline_rate=1.0)
    invoice_id = await cancel_during_the_call(engine, pool, simulator, collectors)

    async def voided() -> bool:
        status = await one(engine, "SELECT status FROM invoice WHERE id = :i", i=invoice_id)
        return bool(status["status"] == "VOID")

    await wait_for(voided, 15, "the decline to void the invoice")
    assert [c["status"] for c in simulator.charges(invoice_id)] == ["declined"]
    assert await events_of(engine, invoice_id) == ["InvoiceVoided"]
    assert await count(engine, "SELECT count(*) FROM refund") == 0
    await asyncio.sleep(1.5)  # nothing else happens: no retry, no dunning, no refund
    assert len(simulator.charges(invoice_id)) == 1
    assert simulator.summary()["refunds_succeeded"] == 0


async def test_a_cancel_during_a_successful_call_voids_and_refunds_the_money(
    engine: AsyncEngine, pool: pg.Pool, simulator: Simulator, collectors: Collectors
) -> None:
    invoice_id = await cancel_during_the_call(engine, pool, simulator, collectors)
    simulator.config(latency_min_ms=10, latency_max_ms=30)  # the refund call itself is quick

    async def refunded() -> bool:
        done = "SELECT count(*) FROM refund WHERE invoice_id = :i AND status = 'SUCCEEDED'"
        return await count(engine, done, i=invoice_id) == 1

    await wait_for(refunded, 20, "the refund to be made and recorded")
    (charged,) = simulator.charges(invoice_id)
    assert charged["status"] == "succeeded"
    (back,) = refunds_at_gateway(simulator, invoice_id)
    refund = await one(engine, "SELECT * FROM refund WHERE invoice_id = :i", i=invoice_id)
    attempt = await one(
        engine,
        "SELECT id FROM payment_attempt WHERE invoice_id = :i AND outcome = 'SUCCESS'",
        i=invoice_id,
    )
    assert (back["status"], back["chargeId"], back["amount"], back["idempotencyKey"]) == (
        "succeeded",
        charged["id"],
        charged["amount"],
        f"ref-{attempt['id']}",
    )
    assert (refund["reason"], refund["gateway_reference"], refund["charge_reference"]) == (
        "canceled_in_flight",
        back["id"],
        charged["id"],
    )
    invoice = await one(engine, "SELECT status, paid_at FROM invoice WHERE id = :i", i=invoice_id)
    assert (invoice["status"], invoice["paid_at"]) == ("VOID", None)
    assert await events_of(engine, invoice_id) == ["InvoiceVoided", "PaymentRefunded"]
    payload = (
        await one(
            engine,
            "SELECT payload FROM outbox_event WHERE event_type = 'PaymentRefunded' "
            "AND payload ->> 'invoiceId' = :i",
            i=str(invoice_id),
        )
    )["payload"]
    assert (payload["amount"], payload["refundId"], payload["gatewayReference"]) == (
        charged["amount"],
        refund["id"],
        back["id"],
    )


async def a_refund_requested(engine: AsyncEngine, pool: pg.Pool, simulator: Simulator) -> int:
    """An invoice charged at the gateway and VOID here: recording the success requests its
    refund. Returns the invoice id."""
    now = datetime.now(UTC)
    async with engine.begin() as conn:  # VOID from the start: no collector ever claims it
        sub = await create_subscription(conn, customer_id=42, start=now)
        invoice_id = await create_invoice(
            conn,
            subscription_id=sub,
            customer_id=42,
            amount=990,
            next_attempt_at=now,
            period_start=now,
            status="VOID",
        )
    gateway = HttpPaymentGateway(simulator.url, max_connections=1)
    try:
        key = idempotency_key(invoice_id, 0)
        charged = await gateway.charge(42, 990, "EUR", key, {"invoiceId": invoice_id, "attempt": 0})
    finally:
        await gateway.aclose()
    assert charged.gateway_reference is not None
    async with pg.transaction(pool) as conn:
        assert (
            await record_charge_result(
                conn,
                invoice_id=invoice_id,
                attempt_number=0,
                outcome=ChargeOutcome.SUCCESS,
                source="COLLECTOR",
                idempotency_key=key,
                gateway_reference=charged.gateway_reference,
                now=datetime.now(UTC),
                rng=random.Random(1),
                policy=DunningPolicy(),
            )
            == RecordOutcome.REFUND
        )
    return invoice_id


async def test_a_refund_answered_5xx_is_asked_again_with_its_key_one_refused_goes_to_a_person(
    engine: AsyncEngine, pool: pg.Pool, simulator: Simulator, collectors: Collectors
) -> None:
    uncertain = await a_refund_requested(engine, pool, simulator)
    simulator.config(error_rate=1.0)
    collectors.start(BILLING_UNKNOWN_RETRY_SECONDS="1")

    async def asked_twice() -> bool:
        n = "SELECT uncertain_answers FROM refund WHERE invoice_id = :i"
        return int((await one(engine, n, i=uncertain))["uncertain_answers"]) >= 2

    await wait_for(asked_twice, 15, "the 5xx answers to be recorded")
    assert refunds_at_gateway(simulator, uncertain) == []
    simulator.config(error_rate=0.0)

    async def succeeded() -> bool:
        status = await one(engine, "SELECT status FROM refund WHERE invoice_id = :i", i=uncertain)
        return bool(status["status"] == "SUCCEEDED")

    await wait_for(succeeded, 15, "the refund to be made")
    assert len(refunds_at_gateway(simulator, uncertain)) == 1

    simulator.config(refund_failure_rate=1.0)
    refused = await a_refund_requested(engine, pool, simulator)

    async def failed() -> bool:
        status = await one(engine, "SELECT status FROM refund WHERE invoice_id = :i", i=refused)
        return bool(status["status"] == "FAILED")

    await wait_for(failed, 15, "the refusal to be recorded")
    refund = await one(engine, "SELECT * FROM refund WHERE invoice_id = :i", i=refused)
    assert refund["error"].startswith("http 402: ")
    item = await one(engine, "SELECT * FROM reconciliation_item WHERE invoice_id = :i", i=refused)
    assert (item["kind"], item["refund_id"], item["resolved_at"]) == (
        "refund_failed",
        refund["id"],
        None,
    )
    assert await events_of(engine, refused) == []  # nothing announced: no money went back
    assert [r["status"] for r in refunds_at_gateway(simulator, refused)] == ["failed"]


async def test_a_refund_cut_off_by_kill9_is_made_exactly_once_after_a_restart(
    engine: AsyncEngine, pool: pg.Pool, simulator: Simulator, collectors: Collectors
) -> None:
    """A success lands on a VOID invoice: the refund is requested. The collector sends it, the
    gateway makes it and takes 2 s to answer; the collector is killed meanwhile (answer lost,
    refund still REQUESTED). A new collector sends it again when the lease ends, with the same
    key: the gateway replays the refund it made — one refund in all."""
    invoice_id = await a_refund_requested(engine, pool, simulator)
    simulator.config(latency_min_ms=2000, latency_max_ms=2000)
    settings = {
        "BILLING_COLLECTOR_READ_TIMEOUT_SECONDS": "3",
        "BILLING_COLLECTOR_CONNECT_TIMEOUT_SECONDS": "1",
        "BILLING_COLLECTOR_LEASE_SECONDS": "9",
    }
    calls_before = int(simulator.summary()["calls"])
    first = collectors.start(**settings)

    async def refund_sent() -> bool:
        return int(simulator.summary()["calls"]) > calls_before

    await wait_for(refund_sent, 15, "the refund call to reach the gateway")
    first.kill9()
    await asyncio.sleep(2.5)  # the gateway has made the refund; nobody heard its answer
    assert [r["status"] for r in refunds_at_gateway(simulator, invoice_id)] == ["succeeded"]
    requested = "SELECT count(*) FROM refund WHERE invoice_id = :i AND status = 'REQUESTED'"
    assert await count(engine, requested, i=invoice_id) == 1

    simulator.config(latency_min_ms=10, latency_max_ms=30)
    collectors.start(**settings)

    async def recorded() -> bool:
        done = "SELECT count(*) FROM refund WHERE invoice_id = :i AND status = 'SUCCEEDED'"
        return await count(engine, done, i=invoice_id) == 1

    await wait_for(recorded, 20, "the restarted collector to settle the refund")
    (made,) = refunds_at_gateway(simulator, invoice_id)
    refund = await one(engine, "SELECT * FROM refund WHERE invoice_id = :i", i=invoice_id)
    assert refund["gateway_reference"] == made["id"]
    assert made["idempotencyKey"] == refund["idempotency_key"]
    summary = simulator.summary()
    assert (summary["refunds_succeeded"], summary["refund_replays"]) == (1, 1)
    assert await events_of(engine, invoice_id) == ["PaymentRefunded"]
