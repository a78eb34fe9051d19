"""record_webhooks: webhook events recorded as one group answer what one by one would.

A group holding the same event twice, an event already recorded before, an event type without
a charge result and two results for one invoice (a success then its replay under a new event id)
gets, per event, the answer one transaction per event gives; the rows match too.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.domain.charge_result import ChargeOutcome, GatewayReport, idempotency_key
from billing_core.domain.dunning import DunningPolicy
from billing_core.repo.payment_results import AttemptToRecord
from billing_core.repo.webhook_events import ReceivedEvent
from billing_core.usecases.webhook_results import WebhookToRecord, record_webhooks
from tests.support.factories import create_invoice, create_subscription

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


CUSTOMER = 500


async def open_invoices(engine: AsyncEngine, n: int) -> list[int]:
    """``n`` OPEN invoices of one customer, each leased (its attempt 0 at the gateway)."""
    ids = []
    async with engine.begin() as conn:
        for _ in range(n):
            sub = await create_subscription(conn, customer_id=CUSTOMER, start=NOW)
            ids.append(
                await create_invoice(
                    conn,
                    subscription_id=sub,
                    customer_id=CUSTOMER,
                    amount=990,
                    next_attempt_at=NOW,
                    period_start=NOW,
                )
            )
        await conn.execute(
            text("UPDATE invoice SET leased_at = :now WHERE id = ANY(:ids)"),
            {"now": NOW, "ids": ids},
        )
    return ids


def webhook(event_id: str, invoice_id: int, outcome: ChargeOutcome | None) -> WebhookToRecord:
    event_type = {
        ChargeOutcome.SUCCESS: "charge.succeeded",
        ChargeOutcome.DECLINED: "charge.declined",
        None: "charge.refunded",
    }[outcome]
    report = None
    if outcome is not None:
        report = AttemptToRecord(
            invoice_id,
            GatewayReport(
                attempt_number=0,
                outcome=outcome,
                from_webhook=True,
                idempotency_key=idempotency_key(invoice_id, 0, ""),
                decline_code="card_declined" if outcome == ChargeOutcome.DECLINED else None,
                gateway_reference=f"ch_{event_id}",
                amount=990,
                currency="EUR",
                customer_id=CUSTOMER,
            ),
            None,
        )
    return WebhookToRecord(
        ReceivedEvent(event_id, event_type, invoice_id, {"id": event_id, "type": event_type}),
        report,
    )


async def rows(engine: AsyncEngine, invoices: list[int]) -> tuple[object, ...]:
    async with engine.connect() as conn:
        statuses = (
            await conn.execute(
                text("SELECT status, attempt_count FROM invoice WHERE id = ANY(:ids) ORDER BY id"),
                {"ids": invoices},
            )
        ).all()
        mine = {"ids": invoices}
        events = (
            await conn.execute(
                text("SELECT count(*) FROM webhook_event WHERE invoice_id = ANY(:ids)"), mine
            )
        ).scalar_one()
        attempts = (
            await conn.execute(
                text("SELECT count(*) FROM payment_attempt WHERE invoice_id = ANY(:ids)"), mine
            )
        ).scalar_one()
    return tuple(tuple(r) for r in statuses), events, attempts


async def test_a_group_of_webhooks_answers_what_one_by_one_answers(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    answers: dict[str, list[str]] = {}
    seen: dict[str, tuple[object, ...]] = {}
    for way in ("one_by_one", "grouped"):
        a, b, c = await open_invoices(engine, 3)
        earlier = webhook(f"{way}-0", c, ChargeOutcome.SUCCESS)
        async with pg.transaction(pool) as conn:  # recorded before: its redelivery is a duplicate
            await record_webhooks(conn, [earlier], now=NOW, rng=random.Random(1), policy=POLICY)
        group = [
            webhook(f"{way}-1", a, ChargeOutcome.SUCCESS),
            webhook(f"{way}-1", a, ChargeOutcome.SUCCESS),  # the same event, twice
            webhook(f"{way}-2", b, ChargeOutcome.DECLINED),
            earlier,
            webhook(f"{way}-3", b, None),  # a type that carries no charge result
            webhook(f"{way}-4", a, ChargeOutcome.SUCCESS),  # another event, same result
        ]
        if way == "one_by_one":
            got = []
            for one in group:
                async with pg.transaction(pool) as conn:
                    got += await record_webhooks(
                        conn, [one], now=NOW, rng=random.Random(1), policy=POLICY
                    )
        else:
            async with pg.transaction(pool) as conn:
                got = await record_webhooks(
                    conn, group, now=NOW, rng=random.Random(1), policy=POLICY
                )
        answers[way] = got
        seen[way] = await rows(engine, [a, b, c])
    assert answers["grouped"] == answers["one_by_one"]
    assert answers["grouped"][1] == "DUPLICATE" and answers["grouped"][3] == "DUPLICATE"
    assert answers["grouped"][4] == "IGNORED"
    assert answers["grouped"][0] != answers["grouped"][5]  # the second success finds it PAID
    assert seen["grouped"] == seen["one_by_one"]


POLICY = DunningPolicy()
