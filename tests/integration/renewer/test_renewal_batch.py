"""The renewal batch against real PostgreSQL, time driven by a ManualClock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.domain.invoice import InvoiceStatus
from billing_core.domain.renewal import RenewalInvoice, RenewedSubscription
from billing_core.domain.subscription import SubscriptionStatus
from billing_core.repo import renewal as renewal_repo
from billing_core.seeding import SeedSpec, seed_subscriptions
from billing_core.usecases.renew import renew_due_batch
from services.renewer.loop import Renewer
from tests.integration.renewer.support import (
    assert_exactly_once,
    create_subscription,
    events,
    invoices,
    run_batch,
    scalar,
    snapshot,
    subscription,
)

JAN_15 = datetime(2025, 1, 15, 9, 30, tzinfo=UTC)


async def test_due_subscription_gets_open_invoice_and_advances(
    engine: AsyncEngine, clock: ManualClock
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15)  # period 0: Jan 15 - Feb 15
    before = await subscription(engine, sub_id)
    clock.set(datetime(2025, 2, 15, 9, 31, tzinfo=UTC))

    result = await run_batch(engine, clock.now())

    assert (result.claimed, result.invoices_created) == (1, 1)
    [inv] = await invoices(engine, sub_id)
    assert inv["kind"] == "RENEWAL" and inv["status"] == "OPEN"
    assert inv["period_index"] == 1
    assert inv["period_start"] == datetime(2025, 2, 15, 9, 30, tzinfo=UTC)
    assert inv["period_end"] == datetime(2025, 3, 15, 9, 30, tzinfo=UTC)
    assert (inv["subtotal"], inv["credit_applied"], inv["amount"]) == (2990, 0, 2990)
    assert inv["currency"] == "EUR" and inv["customer_id"] == 42
    assert inv["next_attempt_at"] == clock.now() and inv["paid_at"] is None
    after = await subscription(engine, sub_id)
    assert after["period_index"] == 1
    assert after["current_period_start"] == inv["period_start"]
    assert after["current_period_end"] == inv["period_end"]
    assert after["version"] == before["version"] + 1
    assert after["updated_at"] == clock.now()
    [event] = await events(engine, sub_id)
    assert event["event_type"] == "InvoiceCreated" and event["sequence"] == 1
    assert event["payload"]["invoiceId"] == inv["id"]
    assert event["payload"]["amount"] == 2990
    assert after["event_seq"] == 1

    # Nothing is due any more: the next batch claims nothing.
    assert (await run_batch(engine, clock.now())).claimed == 0


async def test_only_due_active_subscriptions_are_claimed(
    engine: AsyncEngine, clock: ManualClock
) -> None:
    clock.set(datetime(2025, 2, 20, tzinfo=UTC))
    due = await create_subscription(engine, anchor=JAN_15)
    await create_subscription(engine, anchor=datetime(2025, 2, 1, tzinfo=UTC))  # ends Mar 1
    await create_subscription(engine, anchor=JAN_15, status="PAST_DUE")
    await create_subscription(engine, anchor=JAN_15, status="CANCELED")

    result = await run_batch(engine, clock.now())

    assert result.claimed == 1
    assert await scalar(engine, "SELECT array_agg(subscription_id) FROM invoice") == [due]


async def test_catch_up_three_missed_periods_in_order(
    engine: AsyncEngine, clock: ManualClock
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15)
    before = await snapshot(engine)
    clock.set(datetime(2025, 4, 20, tzinfo=UTC))  # Feb 15, Mar 15, Apr 15 have passed

    result = await run_batch(engine, clock.now())

    assert result.invoices_created == 3
    got = await invoices(engine, sub_id)
    assert [i["period_index"] for i in got] == [1, 2, 3]
    assert [i["period_start"].day for i in got] == [15, 15, 15]
    assert [i["period_start"].month for i in got] == [2, 3, 4]
    after = await subscription(engine, sub_id)
    assert after["period_index"] == 3
    assert after["current_period_end"] == datetime(2025, 5, 15, 9, 30, tzinfo=UTC)
    evs = await events(engine, sub_id)
    assert [e["sequence"] for e in evs] == [1, 2, 3]
    assert [e["payload"]["periodIndex"] for e in evs] == [1, 2, 3]
    await assert_exactly_once(engine, before)


async def test_catch_up_spreads_over_batches_when_capped(
    engine: AsyncEngine, clock: ManualClock
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15)
    before = await snapshot(engine)
    clock.set(datetime(2025, 4, 20, tzinfo=UTC))

    first = await run_batch(engine, clock.now(), max_periods=2)
    assert (first.invoices_created, first.still_due) == (2, 1)
    second = await run_batch(engine, clock.now(), max_periods=2)
    assert (second.invoices_created, second.still_due) == (1, 0)

    assert [i["period_index"] for i in await invoices(engine, sub_id)] == [1, 2, 3]
    await assert_exactly_once(engine, before)


async def test_month_end_anchor_does_not_drift(engine: AsyncEngine, clock: ManualClock) -> None:
    anchor = datetime(2024, 1, 31, 10, 0, tzinfo=UTC)
    leap = await create_subscription(engine, anchor=anchor)
    plain = await create_subscription(engine, anchor=anchor.replace(year=2025))
    clock.set(datetime(2025, 5, 1, tzinfo=UTC))

    await run_batch(engine, clock.now(), max_periods=24)

    leap_starts = [i["period_start"].date().isoformat() for i in await invoices(engine, leap)]
    assert leap_starts[:4] == ["2024-02-29", "2024-03-31", "2024-04-30", "2024-05-31"]
    plain_starts = [i["period_start"].date().isoformat() for i in await invoices(engine, plain)]
    assert plain_starts == ["2025-02-28", "2025-03-31", "2025-04-30"]


async def test_dst_time_zone_keeps_local_wall_time(engine: AsyncEngine, clock: ManualClock) -> None:
    paris = ZoneInfo("Europe/Paris")
    anchor = datetime(2025, 1, 15, 9, 0, tzinfo=paris)  # 08:00 UTC in winter
    sub_id = await create_subscription(engine, anchor=anchor, time_zone="Europe/Paris")
    clock.set(datetime(2025, 4, 16, tzinfo=UTC))

    await run_batch(engine, clock.now())

    got = await invoices(engine, sub_id)
    starts = [i["period_start"] for i in got]
    assert [s.astimezone(paris).hour for s in starts] == [9, 9, 9]
    # After the switch to summer time (Mar 30) 09:00 in Paris is 07:00 UTC.
    assert starts[-1] == datetime(2025, 4, 15, 7, 0, tzinfo=UTC)
    assert got[1]["period_end"] - got[1]["period_start"] == timedelta(days=31, hours=-1)


async def test_cancel_at_period_end_cancels_instead_of_renewing(
    engine: AsyncEngine, clock: ManualClock
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15, cancel_at_period_end=True)
    before = await subscription(engine, sub_id)
    clock.set(datetime(2025, 4, 20, tzinfo=UTC))

    result = await run_batch(engine, clock.now())

    assert (result.canceled, result.invoices_created) == (1, 0)
    after = await subscription(engine, sub_id)
    assert after["status"] == "CANCELED"
    assert after["canceled_at"] == clock.now()
    assert after["period_index"] == 0
    assert after["current_period_end"] == before["current_period_end"]
    assert after["version"] > before["version"]
    assert await invoices(engine, sub_id) == []
    [event] = await events(engine, sub_id)
    assert event["event_type"] == "SubscriptionCanceled" and event["sequence"] == 1
    assert (await run_batch(engine, clock.now())).claimed == 0


async def test_partial_credit_reduces_the_invoice(engine: AsyncEngine, clock: ManualClock) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15, credit_balance=1000)
    clock.set(datetime(2025, 2, 16, tzinfo=UTC))

    await run_batch(engine, clock.now())

    [inv] = await invoices(engine, sub_id)
    assert (inv["subtotal"], inv["credit_applied"], inv["amount"]) == (2990, 1000, 1990)
    assert inv["status"] == "OPEN"
    assert (await subscription(engine, sub_id))["credit_balance"] == 0
    async with engine.connect() as conn:
        entries = (
            await conn.execute(
                text(
                    "SELECT amount, reason, invoice_id FROM credit_entry WHERE subscription_id = :s"
                ),
                {"s": sub_id},
            )
        ).all()
    assert [tuple(e) for e in entries] == [(-1000, "INVOICE", inv["id"])]


async def test_full_credit_gives_zero_amount_paid_invoice_then_partial(
    engine: AsyncEngine, clock: ManualClock
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15, credit_balance=4000)
    clock.set(datetime(2025, 3, 16, tzinfo=UTC))  # two periods due

    result = await run_batch(engine, clock.now())

    first, second = await invoices(engine, sub_id)
    assert (first["status"], first["amount"], first["credit_applied"]) == ("PAID", 0, 2990)
    assert first["paid_at"] == clock.now() and first["next_attempt_at"] is None
    assert (second["status"], second["amount"], second["credit_applied"]) == ("OPEN", 1980, 1010)
    assert result.zero_amount_invoices == 1 and result.credit_used == 4000
    assert (await subscription(engine, sub_id))["credit_balance"] == 0
    types = [e["event_type"] for e in await events(engine, sub_id)]
    assert types == ["InvoiceCreated", "InvoicePaid", "InvoiceCreated"]
    total = await scalar(
        engine, "SELECT sum(amount) FROM credit_entry WHERE subscription_id = :s", s=sub_id
    )
    assert total == -4000


async def test_replayed_batch_inserts_nothing_twice_and_loop_continues(
    lazy_pool: pg.LazyPool, engine: AsyncEngine, clock: ManualClock
) -> None:
    replayed = await create_subscription(engine, anchor=JAN_15, credit_balance=500)
    clock.set(datetime(2025, 2, 16, tzinfo=UTC))
    await run_batch(engine, clock.now())
    [original] = await invoices(engine, replayed)
    # Replay: the subscription row goes back to its pre-renewal state (as a stale restore or a
    # buggy writer would leave it) while its renewal invoice stays.
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE subscription SET period_index = 0, current_period_start = :s, "
                "current_period_end = :e, credit_balance = 500 WHERE id = :id"
            ),
            {"s": JAN_15, "e": original["period_start"], "id": replayed},
        )
    other = await create_subscription(engine, anchor=JAN_15, customer_id=7)
    version_before = (await subscription(engine, replayed))["version"]

    renewer = Renewer(lazy_pool, clock, batch_size=10)
    more = await renewer.tick()

    assert more is False
    result = renewer.last_result
    assert result is not None
    assert (result.claimed, result.invoices_created, result.already_invoiced) == (2, 1, 1)
    assert [i["id"] for i in await invoices(engine, replayed)] == [original["id"]]
    assert len(await invoices(engine, other)) == 1
    after = await subscription(engine, replayed)
    # Advanced over the period that already had its invoice, no credit spent twice.
    assert after["period_index"] == 1
    assert after["current_period_end"] == original["period_end"]
    assert after["credit_balance"] == 500
    assert after["version"] == version_before + 1
    assert (
        await scalar(
            engine, "SELECT count(*) FROM credit_entry WHERE subscription_id = :s", s=replayed
        )
        == 1
    )
    # The loop keeps going: the next tick finds nothing due and does not fail.
    assert await renewer.tick() is False


async def test_insert_of_an_existing_renewal_is_a_no_op(pool: pg.Pool, engine: AsyncEngine) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15)
    now = datetime(2025, 2, 16, tzinfo=UTC)
    row = RenewalInvoice(
        subscription_id=sub_id,
        customer_id=42,
        period_index=1,
        period_start=JAN_15,
        period_end=JAN_15 + timedelta(days=31),
        subtotal=100,
        credit_applied=0,
        amount=100,
        currency="EUR",
        status=InvoiceStatus.OPEN,
        next_attempt_at=now,
        paid_at=None,
    )
    async with pg.transaction(pool) as conn:
        assert len(await renewal_repo.insert_renewal_invoices(conn, [row], now=now)) == 1
    async with pg.transaction(pool) as conn:
        assert await renewal_repo.insert_renewal_invoices(conn, [row, row], now=now) == []
    assert len(await invoices(engine, sub_id)) == 1


async def test_past_due_is_skipped_then_caught_up_after_reactivation(
    engine: AsyncEngine, clock: ManualClock
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15, status="PAST_DUE")
    before = await snapshot(engine)
    clock.set(datetime(2025, 3, 20, tzinfo=UTC))  # Feb 15 and Mar 15 passed

    assert (await run_batch(engine, clock.now())).claimed == 0
    assert await invoices(engine, sub_id) == []

    async with engine.begin() as conn:  # a payment succeeded: back to ACTIVE
        await conn.execute(
            text("UPDATE subscription SET status = 'ACTIVE', version = version + 1 WHERE id = :i"),
            {"i": sub_id},
        )
    result = await run_batch(engine, clock.now())

    assert result.invoices_created == 2
    assert [i["period_index"] for i in await invoices(engine, sub_id)] == [1, 2]
    await assert_exactly_once(engine, before)


async def test_version_bump_makes_a_stale_api_write_conflict(
    engine: AsyncEngine, clock: ManualClock
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15)
    read_version = (await subscription(engine, sub_id))["version"]
    clock.set(datetime(2025, 2, 16, tzinfo=UTC))
    await run_batch(engine, clock.now())

    async with engine.begin() as conn:  # what the API does with the version it read
        stale = await conn.execute(
            text(
                "UPDATE subscription SET cancel_at_period_end = true, version = version + 1 "
                "WHERE id = :id AND version = :v"
            ),
            {"id": sub_id, "v": read_version},
        )
    assert stale.rowcount == 0
    assert (await subscription(engine, sub_id))["cancel_at_period_end"] is False


_CANCEL_AT_PERIOD_END = pg.Statement(
    "UPDATE subscription SET cancel_at_period_end = true, version = version + 1 "
    "WHERE id = :id AND version = :v"
)


async def test_api_write_waiting_on_the_batch_lock_then_conflicts(
    engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15)
    read_version = (await subscription(engine, sub_id))["version"]
    clock.set(datetime(2025, 2, 16, tzinfo=UTC))
    async with pg.transaction(pool) as batch_conn:
        await renew_due_batch(batch_conn, now=clock.now(), batch_size=10)

        async def api_write() -> int:
            async with pg.transaction(pool) as conn:
                return await pg.execute(
                    conn, _CANCEL_AT_PERIOD_END, {"id": sub_id, "v": read_version}
                )

        api = asyncio.create_task(api_write())
        await asyncio.sleep(0.3)
        assert not api.done()  # blocked by the renewal's row lock
    assert await api == 0


async def test_bad_row_is_parked_and_the_rest_renewed(
    lazy_pool: pg.LazyPool, engine: AsyncEngine, clock: ManualClock
) -> None:
    good = await create_subscription(engine, anchor=JAN_15)
    bad = await create_subscription(engine, anchor=JAN_15, customer_id=9)
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE subscription SET time_zone = 'Mars/Olympus_Mons' WHERE id = :i"),
            {"i": bad},
        )
    clock.set(datetime(2025, 2, 16, tzinfo=UTC))
    renewer = Renewer(lazy_pool, clock, batch_size=10)

    await renewer.tick()

    assert renewer.last_result is not None and renewer.last_result.parked == [bad]
    assert renewer.parked == {bad}
    assert len(await invoices(engine, good)) == 1
    assert await invoices(engine, bad) == []
    await renewer.tick()  # the parked row is no longer claimed
    assert renewer.last_result is not None and renewer.last_result.claimed == 0


async def test_two_renewers_at_once_renew_each_subscription_exactly_once(
    engine: AsyncEngine, pg: asyncpg.Connection, clock: ManualClock
) -> None:
    n = 3000
    await seed_subscriptions(
        pg,
        SeedSpec(count=n, due_from=clock.now() - timedelta(hours=2), due_window=timedelta(hours=1)),
    )
    before = await snapshot(engine)
    claimed: list[list[int]] = [[], []]

    async def renewer(k: int) -> None:
        while True:
            result = await run_batch(engine, clock.now(), batch_size=100)
            if result.claimed == 0:
                return
            claimed[k].append(result.claimed)

    await asyncio.gather(renewer(0), renewer(1))

    assert sum(claimed[0]) + sum(claimed[1]) == n  # each subscription claimed exactly once
    assert claimed[0] and claimed[1]  # both took part
    assert await assert_exactly_once(engine, before) == n
    after = await snapshot(engine)
    assert all(after.period_index[i] == before.period_index[i] + 1 for i in before.period_index)


async def test_one_renewer_with_two_batches_in_flight_renews_each_once(
    lazy_pool: pg.LazyPool, engine: AsyncEngine, pg: asyncpg.Connection, clock: ManualClock
) -> None:
    await seed_subscriptions(
        pg,
        SeedSpec(
            count=600, due_from=clock.now() - timedelta(hours=2), due_window=timedelta(hours=1)
        ),
    )
    before = await snapshot(engine)
    renewer = Renewer(lazy_pool, clock, batch_size=50, concurrency=2)

    ticks = 0
    while await renewer.tick():
        ticks += 1

    assert ticks == 6  # 600 rows, 2 x 50 per tick; the 7th tick finds nothing
    assert await assert_exactly_once(engine, before) == 600


async def test_a_non_positive_batch_size_is_refused_before_any_sql(
    pool: pg.Pool, engine: AsyncEngine
) -> None:
    """The benchmark once sent LIMIT -2000 to PostgreSQL; every claim now says why it refuses."""
    now = datetime(2025, 2, 16, tzinfo=UTC)
    async with pg.transaction(pool) as conn:
        for size in (0, -2000):
            with pytest.raises(ValueError, match="at least one row"):
                await renew_due_batch(conn, now=now, batch_size=size)
            with pytest.raises(ValueError, match="at least one row"):
                await renewal_repo.claim_due(conn, now=now, limit=size)
        with pytest.raises(ValueError, match="max_periods"):
            await renew_due_batch(conn, now=now, batch_size=10, max_periods=0)


async def test_inserted_invoice_is_of_the_subscriptions_customer_in_its_plans_currency(
    pool: pg.Pool,
    engine: AsyncEngine,
) -> None:
    """The insert reads the customer and the currency from the locked subscription and its
    plan, and its due and paid times from its status."""
    sub_id = await create_subscription(engine, anchor=JAN_15, customer_id=77)
    now = datetime(2025, 2, 16, tzinfo=UTC)
    row = RenewalInvoice(
        subscription_id=sub_id,
        customer_id=77,
        period_index=1,
        period_start=datetime(2025, 2, 15, 9, 30, tzinfo=UTC),
        period_end=datetime(2025, 3, 15, 9, 30, tzinfo=UTC),
        subtotal=0,
        credit_applied=0,
        amount=0,
        currency="EUR",
        status=InvoiceStatus.PAID,
        next_attempt_at=None,
        paid_at=now,
    )
    async with pg.transaction(pool) as conn:
        [inserted] = await renewal_repo.insert_renewal_invoices(conn, [row], now=now)
    [inv] = await invoices(engine, sub_id)
    assert inv["id"] == inserted.id
    assert (inv["customer_id"], inv["currency"]) == (77, "EUR")
    assert (inv["status"], inv["next_attempt_at"], inv["paid_at"]) == ("PAID", None, now)
    assert inv["closed_at"] == now


@pytest.mark.parametrize(
    ("status", "next_attempt", "paid"),
    [
        (InvoiceStatus.OPEN, None, None),  # OPEN but never due
        (InvoiceStatus.PAID, None, None),  # PAID without a time
        (InvoiceStatus.OPEN, "earlier", None),  # due at another time than now
        (InvoiceStatus.DRAFT, "now", None),  # a paused period's draft due for a charge
        (InvoiceStatus.FAILED, None, None),  # no renewal starts FAILED
    ],
)
async def test_an_invoice_that_does_not_open_as_a_renewal_is_refused(
    pool: pg.Pool,
    engine: AsyncEngine,
    status: InvoiceStatus,
    next_attempt: str | None,
    paid: str | None,
) -> None:
    sub_id = await create_subscription(engine, anchor=JAN_15)
    now = datetime(2025, 2, 16, tzinfo=UTC)
    times = {None: None, "now": now, "earlier": now - timedelta(hours=1)}
    row = RenewalInvoice(
        subscription_id=sub_id,
        customer_id=42,
        period_index=1,
        period_start=datetime(2025, 2, 15, 9, 30, tzinfo=UTC),
        period_end=datetime(2025, 3, 15, 9, 30, tzinfo=UTC),
        subtotal=100,
        credit_applied=0,
        amount=100,
        currency="EUR",
        status=status,
        next_attempt_at=times[next_attempt],
        paid_at=times[paid],
    )
    async with pg.transaction(pool) as conn:
        with pytest.raises(ValueError, match="opens"):
            await renewal_repo.insert_renewal_invoices(conn, [row], now=now)
    assert await invoices(engine, sub_id) == []


async def test_a_write_canceled_at_another_time_than_now_is_refused(
    pool: pg.Pool, engine: AsyncEngine
) -> None:
    """canceled_at is set in SQL from the status (now, or nothing): a write saying otherwise
    is refused before anything is written."""
    sub_id = await create_subscription(engine, anchor=JAN_15)
    before = await subscription(engine, sub_id)
    now = datetime(2025, 2, 16, tzinfo=UTC)

    def write(status: SubscriptionStatus, canceled_at: datetime | None) -> RenewedSubscription:
        return RenewedSubscription(
            id=sub_id,
            expected_version=before["version"],
            version=before["version"] + 1,
            status=status,
            period_index=1,
            current_period_start=datetime(2025, 2, 15, 9, 30, tzinfo=UTC),
            current_period_end=datetime(2025, 3, 15, 9, 30, tzinfo=UTC),
            credit_balance=0,
            canceled_at=canceled_at,
        )

    bad = [
        write(SubscriptionStatus.CANCELED, None),
        write(SubscriptionStatus.CANCELED, now - timedelta(days=1)),
        write(SubscriptionStatus.ACTIVE, now),
    ]
    async with pg.transaction(pool) as conn:
        for w in bad:
            with pytest.raises(ValueError, match="canceled_at"):
                await renewal_repo.write_subscriptions(conn, [w], event_counts={}, now=now)
    assert await subscription(engine, sub_id) == before
    async with pg.transaction(pool) as conn:
        reserved = await renewal_repo.write_subscriptions(
            conn, [write(SubscriptionStatus.CANCELED, now)], event_counts={sub_id: 1}, now=now
        )
    assert reserved == {sub_id: before["event_seq"]}
    after = await subscription(engine, sub_id)
    assert (after["status"], after["canceled_at"]) == ("CANCELED", now)
