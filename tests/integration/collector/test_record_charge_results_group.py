"""record_charge_results: a group of results decides exactly what recording them one by one does.

Two identical worlds get the same results, in the same order: one through a transaction per
result, the other as one group in one transaction. Every answer, row and event must match. The
collector's recorder, on its driver pool, whatever its groups call for (refunds, reconciliation
items, voids), is held to the same answers.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.db.pg import LazyPool
from billing_core.domain.charge_result import (
    ChargeOutcome,
    GatewayReport,
    RecordOutcome,
    idempotency_key,
)
from billing_core.domain.dunning import DunningPolicy
from billing_core.settings import CoreSettings
from billing_core.usecases.payment_result import (
    AttemptToRecord,
    record_charge_result,
    record_charge_results,
)
from services.collector.recording import GroupRecorder
from tests.support.factories import create_invoice, create_subscription

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
POLICY = DunningPolicy()
MISSING = 0  # the position of an invoice id that does not exist


@dataclass(frozen=True)
class World:
    subscriptions: list[int]
    invoices: list[int]  # by position; position 0 is an id that does not exist
    customers: list[int]  # each invoice's, by the same position


async def build_world(engine: AsyncEngine) -> World:
    """s0: ACTIVE, one invoice; s1: ACTIVE, one; s2: ACTIVE, one; s3: PAST_DUE, two in dunning;
    s4: PAST_DUE, one on its last try and one more OPEN; s5: ACTIVE, one."""
    subs: list[int] = []
    invoices = [-1]
    customers = [0]
    layout = [
        ("ACTIVE", [0]),
        ("ACTIVE", [0]),
        ("ACTIVE", [0]),
        ("PAST_DUE", [1, 1]),
        ("PAST_DUE", [len(POLICY.delays), 0]),
        ("ACTIVE", [0]),
    ]
    async with engine.begin() as conn:
        for n, (status, attempt_counts) in enumerate(layout):
            sub = await create_subscription(conn, customer_id=100 + n, start=NOW, status=status)
            subs.append(sub)
            for i, attempts in enumerate(attempt_counts):
                invoices.append(
                    await create_invoice(
                        conn,
                        subscription_id=sub,
                        customer_id=100 + n,
                        amount=990,
                        next_attempt_at=NOW,
                        period_start=NOW + timedelta(days=30 * i),
                        period_index=i,
                        attempt_count=attempts,
                    )
                )
                customers.append(100 + n)
    return World(subs, invoices, customers)


# (invoice position, attempt number, outcome, from a webhook): interleaved, so one group holds
# several results of one invoice and of one subscription, whose later ones depend on the earlier.
RESULTS: list[tuple[int, int, ChargeOutcome, bool]] = [
    (1, 0, ChargeOutcome.SUCCESS, False),  # s0 paid
    (4, 1, ChargeOutcome.SUCCESS, False),  # s3's first paid, the other still in dunning
    (2, 0, ChargeOutcome.DECLINED, False),  # s1 past due
    (6, len(POLICY.delays), ChargeOutcome.DECLINED, False),  # s4 canceled, its other voided
    (1, 0, ChargeOutcome.SUCCESS, True),  # s0 again, from the webhook: already settled
    (3, 0, ChargeOutcome.UNKNOWN, False),  # s2 retried later with the same key
    (5, 1, ChargeOutcome.SUCCESS, False),  # s3's second paid: s3 active again
    (MISSING, 0, ChargeOutcome.SUCCESS, False),
    (2, 0, ChargeOutcome.DECLINED, True),  # s1's first attempt again: stale
    (7, 0, ChargeOutcome.SUCCESS, False),  # s4's voided invoice charged: reconciliation
    (8, 3, ChargeOutcome.DECLINED, False),  # s5: an attempt never made
    (3, 0, ChargeOutcome.UNKNOWN, False),  # s2's key, a second uncertain answer
]


# The same kinds of results without any that calls for a refund, a reconciliation item or a
# void: the collector records such a group on its plain connection.
PLAIN_RESULTS: list[tuple[int, int, ChargeOutcome, bool]] = [
    (1, 0, ChargeOutcome.SUCCESS, False),  # s0 paid
    (4, 1, ChargeOutcome.SUCCESS, False),  # s3's first paid, the other still in dunning
    (2, 0, ChargeOutcome.DECLINED, False),  # s1 past due
    (1, 0, ChargeOutcome.SUCCESS, True),  # s0 again, from the webhook: already settled
    (3, 0, ChargeOutcome.UNKNOWN, False),  # s2 retried later with the same key
    (5, 1, ChargeOutcome.SUCCESS, False),  # s3's second paid: s3 active again
    (MISSING, 0, ChargeOutcome.SUCCESS, False),
    (2, 0, ChargeOutcome.DECLINED, True),  # s1's first attempt again: stale
    (7, 0, ChargeOutcome.DECLINED, False),  # s4's other invoice declined: still past due
    (8, 3, ChargeOutcome.DECLINED, False),  # s5: an attempt never made
    (3, 0, ChargeOutcome.UNKNOWN, False),  # s2's key, a second uncertain answer
    (1, 0, ChargeOutcome.SUCCESS, False),  # s0's charge replayed: the same charge, settled
]


def attempts(
    world: World, results: list[tuple[int, int, ChargeOutcome, bool]] = RESULTS
) -> list[AttemptToRecord]:
    out = []
    for position, attempt, outcome, from_webhook in results:
        invoice_id = world.invoices[position]
        report = GatewayReport(
            attempt_number=attempt,
            outcome=outcome,
            from_webhook=from_webhook,
            idempotency_key=idempotency_key(invoice_id, attempt),
            decline_code="card_declined" if outcome == ChargeOutcome.DECLINED else None,
            # a webhook says what was charged, to whom
            amount=990 if from_webhook else None,
            currency="EUR" if from_webhook else None,
            customer_id=world.customers[position] if from_webhook else None,
        )
        out.append(AttemptToRecord(invoice_id, report, "timeout" if outcome == "UNKNOWN" else None))
    return out


async def snapshot(engine: AsyncEngine, world: World) -> dict[str, Any]:
    """The world's rows, with ids replaced by positions (the two worlds' ids differ)."""
    inv_pos = {inv: n for n, inv in enumerate(world.invoices)}
    async with engine.connect() as conn:
        invoices = (
            await conn.execute(
                text(
                    "SELECT id, status, attempt_count, next_attempt_at, paid_at, closed_at, "
                    "leased_at FROM invoice WHERE id = ANY(:ids) ORDER BY id"
                ),
                {"ids": world.invoices[1:]},
            )
        ).all()
        subs = (
            await conn.execute(
                text(
                    "SELECT status, version, canceled_at, credit_balance FROM subscription "
                    "WHERE id = ANY(:ids) ORDER BY id"
                ),
                {"ids": world.subscriptions},
            )
        ).all()
        events = (
            await conn.execute(
                text(
                    "SELECT aggregate_id, sequence, event_type FROM outbox_event "
                    "WHERE aggregate_id = ANY(:ids) ORDER BY aggregate_id, sequence"
                ),
                {"ids": world.subscriptions},
            )
        ).all()
        audit = (
            await conn.execute(
                text(
                    "SELECT invoice_id, attempt_number, source, outcome, amount "
                    "FROM payment_attempt WHERE invoice_id = ANY(:ids) ORDER BY id"
                ),
                {"ids": world.invoices[1:]},
            )
        ).all()
        refunds = (
            await conn.execute(
                text(
                    "SELECT invoice_id, charge_key, reason, status, amount FROM refund "
                    "WHERE invoice_id = ANY(:ids) ORDER BY id"
                ),
                {"ids": world.invoices[1:]},
            )
        ).all()
    sub_pos = {sub: n for n, sub in enumerate(world.subscriptions)}
    return {
        "refunds": [(inv_pos[r[0]], r[1].split("-try-")[1], *r[2:]) for r in refunds],
        "invoices": [(inv_pos[r[0]], *r[1:]) for r in invoices],
        "subscriptions": [tuple(r) for r in subs],
        "events": [(sub_pos[r[0]], r[1], r[2]) for r in events],
        "audit": sorted((inv_pos[r[0]], *r[1:]) for r in audit),
    }


async def record_one_by_one(
    pool: pg.Pool,
    world: World,
    results: list[tuple[int, int, ChargeOutcome, bool]],
) -> list[RecordOutcome]:
    rng = random.Random(7)
    expected = []
    for attempt in attempts(world, results):
        async with pg.transaction(pool) as conn:
            expected.append(
                await record_charge_result(
                    conn,
                    invoice_id=attempt.invoice_id,
                    attempt_number=attempt.report.attempt_number,
                    outcome=attempt.report.outcome,
                    source="WEBHOOK" if attempt.report.from_webhook else "COLLECTOR",
                    idempotency_key=attempt.report.idempotency_key,
                    decline_code=attempt.report.decline_code,
                    amount=attempt.report.amount,
                    currency=attempt.report.currency,
                    customer_id=attempt.report.customer_id,
                    error=attempt.error,
                    now=NOW,
                    rng=rng,
                    policy=POLICY,
                )
            )
    return expected


@pytest.fixture
async def plain_pool(settings: CoreSettings) -> AsyncIterator[LazyPool]:
    pool = LazyPool(settings, max_size=2)
    yield pool
    await pool.close()


def collectors_recorder(pool: LazyPool) -> GroupRecorder:
    return GroupRecorder(
        pool=pool,
        clock=ManualClock(NOW),
        policy=POLICY,
        rng=random.Random(7),
    )


@pytest.mark.parametrize("recorder", ["use case", "collector"])
async def test_a_group_decides_what_recording_one_by_one_decides(
    engine: AsyncEngine,
    pool: pg.Pool,
    plain_pool: LazyPool,
    recorder: str,
) -> None:
    one_by_one, grouped = await build_world(engine), await build_world(engine)

    expected = await record_one_by_one(pool, one_by_one, RESULTS)
    if recorder == "use case":
        async with pg.transaction(pool) as conn:
            got = await record_charge_results(
                conn, attempts(grouped), now=NOW, rng=random.Random(7), policy=POLICY
            )
    else:
        # A refund, a reconciliation item and a cancel for non-payment (its voids), all in the
        # collector's group transaction.
        got = await collectors_recorder(plain_pool).record(attempts(grouped))

    assert got == expected
    # The scenario covers what it claims to (so the comparison is not of two no-ops).
    assert expected == [
        RecordOutcome.APPLIED,
        RecordOutcome.APPLIED,
        RecordOutcome.APPLIED,
        RecordOutcome.APPLIED,
        RecordOutcome.ALREADY_SETTLED,
        RecordOutcome.APPLIED,
        RecordOutcome.APPLIED,
        RecordOutcome.NOT_FOUND,
        RecordOutcome.STALE_ATTEMPT,
        RecordOutcome.REFUND,
        RecordOutcome.MISMATCH,
        RecordOutcome.APPLIED,
    ]
    want, have = await snapshot(engine, one_by_one), await snapshot(engine, grouped)
    assert have == want
    assert [r[2:] for r in want["refunds"]] == [("charged_closed_invoice", "REQUESTED", 990)]
    assert [s[0] for s in want["subscriptions"]] == [
        "ACTIVE",
        "PAST_DUE",
        "ACTIVE",
        "ACTIVE",
        "CANCELED",
        "ACTIVE",
    ]
    assert [e[2] for e in want["events"] if e[0] == 3] == [
        "InvoicePaid",
        "InvoicePaid",
        "SubscriptionReactivated",
    ]


async def test_the_collectors_plain_connection_decides_what_recording_one_by_one_decides(
    engine: AsyncEngine, pool: pg.Pool, plain_pool: LazyPool
) -> None:
    one_by_one, grouped = await build_world(engine), await build_world(engine)

    expected = await record_one_by_one(pool, one_by_one, PLAIN_RESULTS)
    got = await collectors_recorder(plain_pool).record(attempts(grouped, PLAIN_RESULTS))

    assert got == expected
    assert expected == [
        RecordOutcome.APPLIED,
        RecordOutcome.APPLIED,
        RecordOutcome.APPLIED,
        RecordOutcome.ALREADY_SETTLED,
        RecordOutcome.APPLIED,
        RecordOutcome.APPLIED,
        RecordOutcome.NOT_FOUND,
        RecordOutcome.STALE_ATTEMPT,
        RecordOutcome.APPLIED,
        RecordOutcome.MISMATCH,
        RecordOutcome.APPLIED,
        RecordOutcome.ALREADY_SETTLED,
    ]
    want, have = await snapshot(engine, one_by_one), await snapshot(engine, grouped)
    assert have == want
    assert want["refunds"] == []
    assert [s[0] for s in want["subscriptions"]] == [
        "ACTIVE",
        "PAST_DUE",
        "ACTIVE",
        "ACTIVE",
        "PAST_DUE",
        "ACTIVE",
    ]
    assert [e[2] for e in want["events"] if e[0] == 3] == [
        "InvoicePaid",
        "InvoicePaid",
        "SubscriptionReactivated",
    ]
