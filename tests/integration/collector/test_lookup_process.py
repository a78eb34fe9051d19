"""After an uncertain answer the collector asks the gateway what happened to the key before it
calls again: collector processes against the simulator process, real PostgreSQL and Redis."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.invariants.checker import check_all, fetch_ledger
from billing_core.usecases.cancel import cancel
from tests.integration.collector.conftest import Collectors, Simulator
from tests.integration.collector.test_collector_process import count, seed, wait_for

pytestmark = pytest.mark.slow

# A timeout after 1 s, the retry of an uncertain answer 2 s later.
FAST_UNKNOWN = {
    "BILLING_COLLECTOR_READ_TIMEOUT_SECONDS": "1",
    "BILLING_COLLECTOR_CONNECT_TIMEOUT_SECONDS": "1",
    "BILLING_COLLECTOR_LEASE_SECONDS": "10",
    "BILLING_UNKNOWN_RETRY_SECONDS": "2",
}


async def attempts(engine: AsyncEngine, invoice_id: int) -> list[tuple[str, str, str, str | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT idempotency_key, source, outcome, gateway_reference FROM payment_attempt"
                " WHERE invoice_id = :i ORDER BY id"
            ),
            {"i": invoice_id},
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]


async def test_a_charge_whose_answer_and_webhook_were_lost_is_resolved_by_lookup(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    """The gateway charges but answers only after 30 s (the collector gave up after 1 s), and
    no webhook comes (none configured). The retry does not call the charge again: the look-up
    finds the charge, the invoice is PAID, the gateway made exactly one charge call."""
    simulator.config(timeout_rate=1.0, timeout_delay_seconds=30.0)
    invoices = await seed(engine, 3)
    collectors.start(**FAST_UNKNOWN)

    async def all_paid() -> bool:
        return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 3

    await wait_for(all_paid, 30, "the look-ups to settle the invoices")
    summary = simulator.summary()
    assert summary["charges_succeeded"] == 3
    assert summary["replays"] == 0  # no second charge call with the key
    assert summary["timeouts"] == 3
    assert summary["lookups_found"] == 3
    assert summary["calls"] == 3 + summary["lookups"]  # the look-ups went through the limiter
    for invoice_id in invoices:
        [charge] = simulator.charges(invoice_id)
        key = f"inv-{invoice_id}-try-0"
        assert await attempts(engine, invoice_id) == [
            (key, "COLLECTOR", "UNKNOWN", None),
            (key, "LOOKUP", "SUCCESS", charge["id"]),
        ]
    paid_events = "SELECT count(*) FROM outbox_event WHERE event_type = 'InvoicePaid'"
    assert await count(engine, paid_events) == 3


async def test_a_lookup_that_finds_a_decline_continues_dunning(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    simulator.config(timeout_rate=1.0, timeout_delay_seconds=30.0, decline_rate=1.0)
    [invoice_id] = await seed(engine, 1)
    collectors.start(
        **FAST_UNKNOWN,
        BILLING_DUNNING_DELAYS_SECONDS="[3600, 3600, 3600]",
        BILLING_DUNNING_JITTER_SECONDS="0",
    )

    async def declined() -> bool:
        sql = "SELECT count(*) FROM invoice WHERE id = :i AND attempt_count = 1"
        return await count(engine, sql, i=invoice_id) == 1

    await wait_for(declined, 30, "the look-up to record the decline")
    key = f"inv-{invoice_id}-try-0"
    assert [a[:3] for a in await attempts(engine, invoice_id)] == [
        (key, "COLLECTOR", "UNKNOWN"),
        (key, "LOOKUP", "DECLINED"),
    ]
    assert simulator.summary()["replays"] == 0


async def test_a_key_the_gateway_never_saw_is_charged_with_the_same_key(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    """A 5xx stores nothing: the look-up says "never seen", and the call is made — with the
    same key, so an earlier request still on its way could not make a second charge."""
    simulator.config(error_rate=1.0)
    [invoice_id] = await seed(engine, 1)
    collectors.start(**FAST_UNKNOWN)

    async def uncertain() -> bool:
        sql = "SELECT count(*) FROM payment_attempt WHERE invoice_id = :i AND outcome = 'UNKNOWN'"
        return await count(engine, sql, i=invoice_id) >= 1

    await wait_for(uncertain, 20, "the 5xx to be recorded")
    simulator.config(error_rate=0.0)

    async def paid() -> bool:
        sql = "SELECT count(*) FROM invoice WHERE id = :i AND status = 'PAID'"
        return await count(engine, sql, i=invoice_id) == 1

    await wait_for(paid, 20, "the retry after the look-up")
    key = f"inv-{invoice_id}-try-0"
    recorded = [a[:3] for a in await attempts(engine, invoice_id)]
    assert recorded[-1] == (key, "COLLECTOR", "SUCCESS")
    assert {a[0] for a in recorded} == {key}
    assert all(a[1:] == ("COLLECTOR", "UNKNOWN") for a in recorded[:-1])
    summary = simulator.summary()
    assert summary["lookups"] >= 1 and summary["lookups_found"] == 0
    assert summary["charges_succeeded"] == 1


async def test_failing_lookups_stay_uncertain_and_are_bounded_never_a_second_charge(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    """The look-up itself fails: nothing is learned, so no charge call is made; each failure is
    one more uncertain answer for the key, and past the bound the invoice is held for a
    person."""
    simulator.config(timeout_rate=1.0, timeout_delay_seconds=30.0, lookup_error_rate=1.0)
    [invoice_id] = await seed(engine, 1)
    collectors.start(**FAST_UNKNOWN, BILLING_UNKNOWN_MAX_RETRIES="3")

    async def held() -> bool:
        sql = (
            "SELECT count(*) FROM invoice WHERE id = :i AND status = 'OPEN'"
            " AND next_attempt_at IS NULL"
        )
        return await count(engine, sql, i=invoice_id) == 1

    await wait_for(held, 30, "the invoice held after 3 uncertain answers")
    key = f"inv-{invoice_id}-try-0"
    assert [a[:3] for a in await attempts(engine, invoice_id)] == [
        (key, "COLLECTOR", "UNKNOWN"),
        (key, "LOOKUP", "UNKNOWN"),
        (key, "LOOKUP", "UNKNOWN"),
    ]
    summary = simulator.summary()
    assert (summary["replays"], summary["lookup_errors"], summary["charges_succeeded"]) == (0, 2, 1)
    reason = (
        "SELECT payload->>'reason' FROM outbox_event"
        " WHERE event_type = 'PaymentReconciliationNeeded'"
    )
    async with engine.connect() as conn:
        said = (await conn.execute(text(reason))).scalar_one()
    assert said.startswith(f"unknown_unresolved: 3 uncertain answers for {key}")


async def test_a_cancel_during_a_call_whose_answer_is_lost_is_looked_up_and_refunded(
    engine: AsyncEngine, pool: pg.Pool, simulator: Simulator, collectors: Collectors
) -> None:
    """The gateway charges but its answer comes too late and no webhook comes; meanwhile the
    customer cancels. The uncertain answer keeps the void requested (the card may have been
    charged); when the invoice comes due again the collector looks its key up instead of
    calling, finds the charge, voids the invoice and refunds the money: one charge, one refund,
    and the invariant checker finds nothing kept on the closed invoice."""
    simulator.config(timeout_rate=1.0, timeout_delay_seconds=30.0)
    [invoice_id] = await seed(engine, 1)
    collectors.start(**FAST_UNKNOWN)

    async def called() -> bool:
        return bool(simulator.charges(invoice_id))

    await wait_for(called, 15, "the call to reach the gateway")
    async with engine.connect() as conn:
        subscription_id = (
            await conn.execute(
                text("SELECT subscription_id FROM invoice WHERE id = :i"), {"i": invoice_id}
            )
        ).scalar_one()
    async with pg.transaction(pool) as conn:
        await cancel(
            conn, subscription_id=subscription_id, at_period_end=False, now=datetime.now(UTC)
        )

    async def refunded() -> bool:
        sql = "SELECT count(*) FROM refund WHERE invoice_id = :i AND status = 'SUCCEEDED'"
        return await count(engine, sql, i=invoice_id) == 1

    await wait_for(refunded, 30, "the look-up to find the charge and the refund to be made")
    assert [a[1:3] for a in await attempts(engine, invoice_id)] == [
        ("COLLECTOR", "UNKNOWN"),
        ("LOOKUP", "SUCCESS"),
    ]
    async with engine.connect() as conn:
        status, reason = (
            await conn.execute(
                text(
                    "SELECT i.status, r.reason FROM invoice i JOIN refund r ON r.invoice_id = i.id"
                    " WHERE i.id = :i"
                ),
                {"i": invoice_id},
            )
        ).one()
    assert (status, reason) == ("VOID", "canceled_in_flight")
    report = await check_all(
        pool, now=datetime.now(UTC), ledger=await fetch_ledger(simulator.url), topic=None
    )
    assert report.check("charges").violations == []
    summary = simulator.summary()
    assert (summary["charges_succeeded"], summary["refunds_succeeded"]) == (1, 1)
