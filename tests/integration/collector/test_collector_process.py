"""Collector processes against the gateway simulator process, real PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.usecases.cancel import cancel
from tests.integration.collector.conftest import Collectors, Simulator
from tests.support.factories import (
    create_invoice,
    create_subscription,
    due_subscriptions_with_invoices,
)
from tests.support.processes import private_redis

pytestmark = pytest.mark.slow  # real-time whole-process scenarios: `make test`, not test-fast


async def wait_for(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def count(engine: AsyncEngine, sql: str, **params: object) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text(sql), params)).scalar_one())


async def seed(engine: AsyncEngine, n: int) -> list[int]:
    async with engine.begin() as conn:
        return await due_subscriptions_with_invoices(conn, n, now=datetime.now(UTC))


async def test_two_collectors_charge_every_invoice_exactly_once(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    invoices = await seed(engine, 400)
    collectors.start()
    collectors.start()

    async def all_paid() -> bool:
        return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 400

    await wait_for(all_paid, 40, "every invoice paid")
    summary = simulator.summary()
    assert summary["charges_succeeded"] == len(invoices)
    assert summary["duplicate_success_invoices"] == []
    assert summary["rate_limited_429"] == 0
    assert summary["max_calls_in_any_rolling_second"] <= 200
    attempts = await count(engine, "SELECT count(DISTINCT invoice_id) FROM payment_attempt")
    assert attempts == 400
    for proc in collectors.procs:
        assert proc.terminate() == 0


def histogram_sum_count(proc_url: str, name: str) -> tuple[float, float]:
    """The sum and count of a histogram a process exposes on /metrics (items, groups)."""
    found: dict[str, float] = {}
    for line in httpx.get(f"{proc_url}/metrics", timeout=10).text.splitlines():
        for part in ("sum", "count"):
            if line.startswith(f"{name}_{part} "):
                found[part] = float(line.split()[1])
    assert found.get("count"), f"no {name} observed"
    return found["sum"], found["count"]


async def test_two_collectors_read_the_pre_call_checks_of_several_grants_in_one_statement(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    """At 200/s shared by two replicas one slot reservation brings a replica about 10 slots;
    the checks wait for each other until 30 ms before the earliest slot among them, so a read
    holds more than one reservation's checks (and every invoice is still charged once). Counted
    over both replicas' reads: the shared cursor is not split evenly (a replica that finds
    most of the horizon taken gets a few slots at a time, and reads a few checks at a time)."""
    procs = [collectors.start(), collectors.start()]  # both ready before the backlog comes
    await seed(engine, 800)

    async def all_paid() -> bool:
        return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 800

    await wait_for(all_paid, 60, "every invoice paid")
    name = "billing_collector_check_group_invoices"
    sums, counts = zip(*(histogram_sum_count(p.url or "", name) for p in procs), strict=True)
    assert sum(sums) >= 800  # every invoice's check read (again when its slot was missed)
    assert sum(sums) / sum(counts) > 10, (sums, counts)
    summary = simulator.summary()
    assert summary["charges_succeeded"] == 800
    assert summary["duplicate_success_invoices"] == []
    assert summary["rate_limited_429"] == 0


async def test_timeout_then_retry_with_the_same_key_gets_the_stored_success(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    simulator.config(timeout_rate=1.0, timeout_delay_seconds=4.0)
    invoices = await seed(engine, 5)
    collectors.start(
        BILLING_COLLECTOR_READ_TIMEOUT_SECONDS="1",
        BILLING_COLLECTOR_CONNECT_TIMEOUT_SECONDS="1",
        BILLING_COLLECTOR_LEASE_SECONDS="10",
        BILLING_UNKNOWN_RETRY_SECONDS="3",
    )

    async def unknown_recorded() -> bool:
        n = "SELECT count(*) FROM payment_attempt WHERE outcome = 'UNKNOWN'"
        return await count(engine, n) >= 5

    await wait_for(unknown_recorded, 20, "the timeouts to be recorded")
    simulator.config(timeout_rate=0.0)

    async def all_paid() -> bool:
        return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 5

    await wait_for(all_paid, 30, "the retries to settle the invoices")
    for invoice_id in invoices:
        succeeded = [c for c in simulator.charges(invoice_id) if c.get("status") == "succeeded"]
        assert len(succeeded) == 1, simulator.charges(invoice_id)
        keys = await count(
            engine,
            "SELECT count(DISTINCT idempotency_key) FROM payment_attempt WHERE invoice_id = :i",
            i=invoice_id,
        )
        assert keys == 1  # the retry reused inv-{id}-try-0
    assert simulator.summary()["duplicate_success_invoices"] == []


async def test_declines_run_the_whole_dunning_schedule_to_cancellation(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        sub = await create_subscription(conn, customer_id=4242, start=now)
        await conn.execute(
            text(
                "INSERT INTO invoice (subscription_id, customer_id, kind, period_index, "
                "period_start, period_end, subtotal, amount, currency, status, next_attempt_at) "
                "VALUES (:s, 4242, 'RENEWAL', 0, :now, :end, 990, 990, 'EUR', 'OPEN', :now)"
            ),
            {"s": sub, "now": now, "end": now + timedelta(days=30)},
        )
    simulator.decline_until(4242, (now + timedelta(days=365)).isoformat())
    collectors.start(BILLING_DUNNING_DELAYS_SECONDS="[1, 1, 1]", BILLING_DUNNING_JITTER_SECONDS="0")

    async def canceled() -> bool:
        q = "SELECT count(*) FROM subscription WHERE id = :s AND status = 'CANCELED'"
        return await count(engine, q, s=sub) == 1

    await wait_for(canceled, 30, "the subscription to be canceled for non-payment")
    async with engine.connect() as conn:
        keys = [
            r[0]
            for r in await conn.execute(
                text(
                    "SELECT pa.idempotency_key FROM payment_attempt pa JOIN invoice i "
                    "ON i.id = pa.invoice_id WHERE i.subscription_id = :s ORDER BY pa.id"
                ),
                {"s": sub},
            )
        ]
        status = (
            await conn.execute(
                text("SELECT status FROM invoice WHERE subscription_id = :s"), {"s": sub}
            )
        ).scalar_one()
        events = [
            r[0]
            for r in await conn.execute(
                text(
                    "SELECT event_type FROM outbox_event WHERE aggregate_id = :s ORDER BY sequence"
                ),
                {"s": sub},
            )
        ]
    assert status == "FAILED"
    assert [k.rsplit("-", 1)[1] for k in keys] == ["0", "1", "2", "3"]
    assert events.count("PaymentFailed") == 4
    assert events[-1] == "SubscriptionCanceled"


async def test_a_decline_then_a_success_reactivates_the_subscription(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        sub = await create_subscription(conn, customer_id=4343, start=now)
        inv = await create_invoice(
            conn,
            subscription_id=sub,
            customer_id=4343,
            amount=990,
            next_attempt_at=now,
            period_start=now,
        )
    simulator.decline_until(4343, (now + timedelta(days=1)).isoformat())
    collectors.start(BILLING_DUNNING_DELAYS_SECONDS="[2, 2, 2]", BILLING_DUNNING_JITTER_SECONDS="0")

    async def declined() -> bool:
        q = "SELECT count(*) FROM invoice WHERE id = :i AND attempt_count = 1"
        return await count(engine, q, i=inv) == 1

    await wait_for(declined, 30, "the first decline")
    simulator.decline_until(4343, now.isoformat())  # the card works again

    async def paid() -> bool:
        q = "SELECT count(*) FROM invoice WHERE id = :i AND status = 'PAID'"
        return await count(engine, q, i=inv) == 1

    await wait_for(paid, 30, "the retry after the decline to pay the invoice")
    async with engine.connect() as conn:
        attempts = (
            await conn.execute(
                text(
                    "SELECT idempotency_key, outcome FROM payment_attempt WHERE invoice_id = :i "
                    "ORDER BY id"
                ),
                {"i": inv},
            )
        ).all()
        events = [
            r[0]
            for r in await conn.execute(
                text(
                    "SELECT event_type FROM outbox_event WHERE aggregate_id = :s ORDER BY sequence"
                ),
                {"s": sub},
            )
        ]
        status = (
            await conn.execute(text("SELECT status FROM subscription WHERE id = :s"), {"s": sub})
        ).scalar_one()
    assert [tuple(a) for a in attempts] == [
        (f"inv-{inv}-try-0", "DECLINED"),
        (f"inv-{inv}-try-1", "SUCCESS"),
    ]
    assert events == [
        "PaymentFailed",
        "SubscriptionPastDue",
        "InvoicePaid",
        "SubscriptionReactivated",
    ]
    assert status == "ACTIVE"


async def test_redis_down_means_zero_gateway_calls_until_it_returns(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors, tmp_path: Path
) -> None:
    port, up, down = private_redis(tmp_path)
    try:
        collectors.start(BILLING_REDIS_URL=f"redis://127.0.0.1:{port}/0")
        down()
        await seed(engine, 50)
        await asyncio.sleep(3)
        assert simulator.summary()["calls"] == 0
        assert await count(engine, "SELECT count(*) FROM invoice WHERE status = 'OPEN'") == 50
        up()

        async def all_paid() -> bool:
            return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 50

        await wait_for(all_paid, 30, "collection to resume after Redis returned")
        assert simulator.summary()["charges_succeeded"] == 50
    finally:
        down()


async def test_kill9_mid_call_then_another_replica_never_charges_twice(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    simulator.config(latency_min_ms=2000, latency_max_ms=2000)
    invoices = await seed(engine, 20)
    fast_lease = {
        "BILLING_COLLECTOR_LEASE_SECONDS": "11",
        "BILLING_COLLECTOR_CONNECT_TIMEOUT_SECONDS": "1",
        "BILLING_COLLECTOR_READ_TIMEOUT_SECONDS": "4",
    }
    first = collectors.start(**fast_lease)
    deadline = time.monotonic() + 10
    while simulator.summary()["calls"] < 20 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    first.kill9()
    assert await count(engine, "SELECT count(*) FROM payment_attempt") == 0
    collectors.start(**fast_lease)

    async def all_paid() -> bool:
        return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 20

    await wait_for(all_paid, 40, "the second replica to settle the leased invoices")
    summary = simulator.summary()
    assert summary["charges_succeeded"] == len(invoices)
    assert summary["duplicate_success_invoices"] == []
    assert summary["replays"] >= 1


async def test_sigterm_stops_claiming_finishes_and_records_in_flight_calls(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    simulator.config(latency_min_ms=1500, latency_max_ms=1500)
    await seed(engine, 60)
    proc = collectors.start(BILLING_COLLECTOR_MAX_IN_FLIGHT="30", BILLING_COLLECTOR_BATCH_SIZE="30")
    deadline = time.monotonic() + 10
    while simulator.summary()["calls"] < 30 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert proc.terminate(timeout=20) == 0
    # every call that was in flight was recorded; nothing new was claimed after SIGTERM
    assert simulator.summary()["calls"] == 30
    assert await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 30
    assert await count(engine, "SELECT count(*) FROM payment_attempt") == 30
    never_claimed = (
        "SELECT count(*) FROM invoice WHERE status = 'OPEN' AND leased_at IS NULL "
        "AND attempt_count = 0"
    )
    assert await count(engine, never_claimed) == 30


async def test_the_simulator_lists_successful_charges_per_invoice(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    invoices = await seed(engine, 12)
    collectors.start()

    async def all_paid() -> bool:
        return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 12

    await wait_for(all_paid, 30, "every invoice paid")
    listed = httpx.get(f"{simulator.url}/v1/ledger/successes-by-invoice", timeout=5).json()
    assert listed == [[i, 1] for i in sorted(invoices)]


async def test_redis_stopped_mid_run_stops_gateway_calls_until_it_returns(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors, tmp_path: Path
) -> None:
    port, up, down = private_redis(tmp_path)
    try:
        await seed(engine, 300)
        collectors.start(
            BILLING_REDIS_URL=f"redis://127.0.0.1:{port}/0",
            BILLING_COLLECTOR_RATE_LIMIT_PER_SECOND="20",
        )

        async def some_paid() -> bool:
            return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") > 10

        await wait_for(some_paid, 20, "collection to start")
        down()
        await asyncio.sleep(1.0)  # calls already granted a permit may still land
        calls_at_stop = simulator.summary()["calls"]
        await asyncio.sleep(4)
        assert simulator.summary()["calls"] == calls_at_stop, "gateway called while Redis was down"
        up()

        async def all_paid() -> bool:
            return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 300

        await wait_for(all_paid, 60, "collection to resume after Redis returned")
    finally:
        down()


async def test_a_429_pauses_every_collector_instead_of_hammering_the_gateway(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    """The gateway's limit is a quarter of what the collectors were told (a contract changed
    under them). Without a shared pause two collectors would offer 200 calls/s and get three
    429s per admitted call; with it, each 429 stops both for the Retry-After."""
    simulator.config(rate_limit_per_second=50)
    await seed(engine, 300)
    for _ in range(2):
        collectors.start(BILLING_UNKNOWN_RETRY_SECONDS="1")

    async def all_paid() -> bool:
        return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 300

    await wait_for(all_paid, 60, "every invoice paid despite the lower gateway limit")
    summary = simulator.summary()
    assert summary["duplicate_success_invoices"] == []
    assert summary["charges_succeeded"] == 300
    assert summary["rate_limited_429"] > 0  # the test did provoke them
    assert summary["rate_limited_429"] < summary["calls"] / 2, summary


async def test_a_2s_gateway_stall_does_not_become_a_burst_above_the_limit(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    """The gateway freezes for 2 s while two collectors run at its limit: what they sent during
    the stall lands at once when it ends (the simulator holds it). The calls outstanding are
    bounded by the window, and the late answers are counted against the shared limit, so no
    rolling second at the gateway goes above 200 and nothing is refused."""
    simulator.config(latency_min_ms=100, latency_max_ms=300, rate_limit_per_second=200)
    await seed(engine, 1600)
    for _ in range(2):
        collectors.start(BILLING_UNKNOWN_RETRY_SECONDS="1")

    async def running_at_the_limit() -> bool:
        return await count(engine, "SELECT count(*) FROM payment_attempt") >= 400

    await wait_for(running_at_the_limit, 30, "the collectors to reach the limit")
    httpx.post(f"{simulator.url}/v1/admin/stall", json={"seconds": 2}, timeout=5).raise_for_status()

    async def all_paid() -> bool:
        return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 1600

    await wait_for(all_paid, 60, "every invoice paid after the stall")
    summary = simulator.summary()
    assert summary["stalls"] == 1
    assert 0 < summary["max_held_in_a_stall"] < 200, summary  # the window held the rest back
    assert summary["rate_limited_429"] == 0, summary
    assert summary["max_arrivals_in_any_rolling_second"] <= 200, summary
    assert summary["duplicate_success_invoices"] == []
    assert summary["charges_succeeded"] == 1600


async def test_an_invoice_canceled_while_it_waits_for_a_send_slot_is_never_charged(
    engine: AsyncEngine, pool: pg.Pool, simulator: Simulator, collectors: Collectors
) -> None:
    """At 2 calls/s a claimed batch of 20 waits up to 10 s for its send slots; the customer
    cancels meanwhile. Every invoice not charged when its cancel committed stays uncharged."""
    invoices = await seed(engine, 20)
    collectors.start(BILLING_COLLECTOR_RATE_LIMIT_PER_SECOND="2", BILLING_COLLECTOR_BATCH_SIZE="20")

    async def all_leased() -> bool:
        leased = "SELECT count(*) FROM invoice WHERE leased_at IS NOT NULL"
        return await count(engine, leased) == 20

    await wait_for(all_leased, 15, "the batch claimed")
    async with engine.connect() as conn:
        owners = dict(
            (
                await conn.execute(
                    text("SELECT id, subscription_id FROM invoice WHERE id = ANY(:ids)"),
                    {"ids": invoices},
                )
            ).all()
        )
    for invoice_id in invoices:
        async with pg.transaction(pool) as conn:
            await cancel(
                conn,
                subscription_id=owners[invoice_id],
                at_period_end=False,
                now=datetime.now(UTC),
            )
    await asyncio.sleep(0.5)  # a call that passed its check before the cancel has landed by now
    charged_before = {i for i in invoices if simulator.charges(i)}
    assert len(charged_before) <= 6, "the batch was charged before the cancels"
    await asyncio.sleep(6)  # long enough for the rest of the batch's slots to come
    assert {i for i in invoices if simulator.charges(i)} == charged_before
    # The cancels were of leased invoices: each void was requested, and decided by its call —
    # a call not made voids it at once, a call in flight by its answer. Only what was PAID
    # before its cancel stays PAID; a charge that landed after it is refunded.
    paid = await paid_ids(engine)

    async def all_decided() -> bool:
        voided = await count(engine, "SELECT count(*) FROM invoice WHERE status = 'VOID'")
        return voided == 20 - len(charged_before & paid)

    await wait_for(all_decided, 20, "every requested void decided")
    refunded = await count(engine, "SELECT count(DISTINCT invoice_id) FROM refund")
    assert refunded == len(charged_before - paid)


async def paid_ids(engine: AsyncEngine) -> set[int]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT id FROM invoice WHERE status = 'PAID'"))
        return {int(r[0]) for r in rows}


async def test_refused_credentials_pause_collection_and_touch_no_invoice(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    """A revoked gateway key (401) is not an uncertain result per invoice, retried forever:
    collection pauses (probing once a pause), no attempt is recorded, and it resumes by itself."""
    simulator.config(reject_credentials=True)
    invoices = await seed(engine, 10)
    collectors.start(
        BILLING_COLLECTOR_UNAUTHORIZED_PAUSE_SECONDS="2",
        BILLING_COLLECTOR_CONNECT_TIMEOUT_SECONDS="1",
        BILLING_COLLECTOR_READ_TIMEOUT_SECONDS="2",
        BILLING_COLLECTOR_LEASE_SECONDS="8",
    )
    await asyncio.sleep(5)
    refused = simulator.summary()["unauthorized"]
    assert 1 <= refused <= 12, refused  # a few probes, not 10 invoices x retries
    assert simulator.summary()["charges_succeeded"] == 0
    assert await count(engine, "SELECT count(*) FROM payment_attempt") == 0
    untouched = "SELECT count(*) FROM invoice WHERE status = 'OPEN' AND attempt_count = 0"
    assert await count(engine, untouched) == 10

    simulator.config(reject_credentials=False)

    async def all_paid() -> bool:
        return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 10

    await wait_for(all_paid, 30, "collection resumed once the key works again")
    assert simulator.summary()["charges_succeeded"] == len(invoices)


async def test_a_call_the_gateway_refuses_for_good_is_held_for_a_person(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    """Someone else used this invoice's key with another amount: the gateway answers 409 to
    every retry. The invoice is held (OPEN, no next attempt) with a reconciliation event."""
    [invoice_id] = await seed(engine, 1)
    httpx.post(
        f"{simulator.url}/v1/charges",
        headers={"Idempotency-Key": f"inv-{invoice_id}-try-0"},
        json={
            "customerId": 1,
            "amount": 1,
            "currency": "EUR",
            "metadata": {"invoiceId": invoice_id, "attempt": 0},
        },
        timeout=5,
    ).raise_for_status()
    collectors.start()

    async def held() -> bool:
        sql = "SELECT count(*) FROM invoice WHERE status = 'OPEN' AND next_attempt_at IS NULL"
        return await count(engine, sql) == 1

    await wait_for(held, 20, "the invoice held")
    async with engine.connect() as conn:
        error = (
            await conn.execute(
                text("SELECT error FROM payment_attempt WHERE invoice_id = :i"), {"i": invoice_id}
            )
        ).scalar_one()
        reason = (
            await conn.execute(
                text(
                    "SELECT payload->>'reason' FROM outbox_event"
                    " WHERE event_type = 'PaymentReconciliationNeeded'"
                )
            )
        ).scalar_one()
    assert error.startswith("http 409")
    assert reason.startswith("gateway_rejected: http 409")
    await asyncio.sleep(1)
    assert simulator.summary()["conflicts"] == 1  # asked once, never again


async def test_the_key_prefix_names_every_gateway_key_of_the_deployment(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    invoices = await seed(engine, 3)
    collectors.start(BILLING_GATEWAY_KEY_PREFIX="prod-")

    async def all_paid() -> bool:
        return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 3

    await wait_for(all_paid, 20, "every invoice paid")
    for invoice_id in invoices:
        [charge] = simulator.charges(invoice_id)
        assert charge["idempotencyKey"] == f"prod-inv-{invoice_id}-try-0", charge
    unprefixed = "SELECT count(*) FROM payment_attempt WHERE idempotency_key NOT LIKE 'prod-inv-%'"
    assert await count(engine, unprefixed) == 0


async def test_a_replica_whose_clock_runs_ahead_does_not_reclaim_leases_in_flight(
    engine: AsyncEngine, simulator: Simulator, collectors: Collectors
) -> None:
    """Leases are on the database's clock. A second replica whose host clock is an hour ahead
    starts while the first one's calls are at the gateway: on its own clock every lease would
    have ended and it would call again; it claims nothing."""
    simulator.config(latency_min_ms=6000, latency_max_ms=6000)
    await seed(engine, 10)
    slow_calls = {
        "BILLING_COLLECTOR_LEASE_SECONDS": "20",
        "BILLING_COLLECTOR_CONNECT_TIMEOUT_SECONDS": "1",
        "BILLING_COLLECTOR_READ_TIMEOUT_SECONDS": "8",
    }
    collectors.start(**slow_calls)
    deadline = time.monotonic() + 10
    while simulator.summary()["calls"] < 10 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    skewed = collectors.start(clock_skew_seconds=3600, **slow_calls)

    async def all_paid() -> bool:
        return await count(engine, "SELECT count(*) FROM invoice WHERE status = 'PAID'") == 10

    await wait_for(all_paid, 30, "the first replica's calls to be recorded")
    assert skewed.alive()
    summary = simulator.summary()
    assert (summary["calls"], summary["replays"]) == (10, 0), summary
    assert await count(engine, "SELECT count(*) FROM payment_attempt") == 10
